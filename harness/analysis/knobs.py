"""A launch-knob sweep (harness.config.knobs) analysed per setting, and the joint recommendation of knob and cap.

Per setting (e.g. MLXCEL_FUSED_MOE_SGY=4) the run's rows at that setting go through the same pipeline as any run
(harness.analysis.pipeline: per-point intervals, crossover, keep / raise / lower): a crossover with its interval and
a cap per setting, decided exactly as a run without knobs would be.

The joint question is which (setting, cap) makes the measured models decode fastest. Each setting's candidate is
its own decided cap c_k; under it a model runs the fused arm when its Dff ≤ c_k, else the fallback arm. The sweep
interleaves every setting and arm in each round, so within a round r the candidate's runs and the reference's
(the binary's default setting at its decided cap) were measured side by side: d_r = mean over the models of
ln tok/s(candidate) − ln tok/s(reference), and the mean of d_r over the rounds has a t interval with rounds − 1
degrees of freedom (slow drift cancels within a round, as for the arms). The interval is Bonferroni-widened over
the K − 1 alternatives, so the chance of moving the knob when no setting is better stays ≤ α. The knob moves only
when the best candidate's whole interval lies beyond 1 + δ (the margin): "keep SGY 8" unless the data shows better.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import figures
from harness.analysis.inputs import load_input
from harness.analysis.pipeline import Analysis, Options, analyse
from harness.analysis.stats import ratio_interval
from harness.config import knobs as launch_knobs
from harness.runs.summary_columns import SummaryCol


@dataclass(frozen=True)
class Candidate:
    """One setting at its decided cap, against the reference setting at its decided cap."""

    setting: str
    cap: int | None
    gain: float  # geometric mean over the models of the decode-speed ratio candidate / reference
    ci_low: float
    ci_high: float
    rounds: int  # rounds in which every model ran under both configurations


@dataclass(frozen=True)
class KnobResult:
    reference: str
    analyses: dict[str, Analysis]  # setting label → its run's analysis (crossover, decision)
    candidates: tuple[Candidate, ...]  # every setting, the reference included (gain 1 by construction)
    models: tuple[str, ...]  # the models the joint comparison is over
    recommended: str
    recommended_cap: int | None
    reason: str
    confidence: float
    margin: float


def knob_settings(samples: pd.DataFrame) -> list[str]:
    """The settings a run measured, in the order of their values (numbers numerically)."""
    labels = [s for s in samples["knobs"].astype(str).unique() if s]

    def order(text: str) -> tuple:
        return tuple(
            (0, int(v)) if v.lstrip("-").isdigit() else (1, v) for v in launch_knobs.parse_label(text).values()
        )

    return sorted(labels, key=order)


def _cap(analysis: Analysis) -> int | None:
    cap = analysis.result.decision.recommended_cap
    return cap if cap is not None else analysis.current_default


def _paths(summary: pd.DataFrame, cap: int | None) -> dict[str, str]:
    """Model → the arm the cap sends it to (fused when Dff ≤ cap); no cap: fallback everywhere."""
    return {
        str(row["model"]): "fused" if cap is not None and int(row["dff"]) <= cap else "fallback"
        for _, row in summary.iterrows()
    }


def _ln_by_round(samples: pd.DataFrame, setting: str, paths: dict[str, str]) -> pd.DataFrame:
    """rounds × models: ln tok/s of the arm `paths` gives each model, at `setting` (ok runs only)."""
    rows = samples[(samples["knobs"] == setting) & (samples["status"] == "ok")]
    rows = rows[[paths.get(str(m)) == a for m, a in zip(rows["model"], rows["arm"], strict=True)]]
    return rows.assign(y=np.log(rows["tok_s"].astype(float))).pivot_table(
        index="round", columns="model", values="y", aggfunc="mean"
    )


def _compare(samples: pd.DataFrame, setting: str, paths: dict[str, str], reference: pd.DataFrame, level: float):
    mine = _ln_by_round(samples, setting, paths).reindex(columns=reference.columns)
    both = (mine - reference).dropna(how="any")  # rounds in which every model ran under both configurations
    d = both.mean(axis=1).to_numpy()
    if len(d) < 2 or not len(reference.columns):
        return float("nan"), float("nan"), float("nan"), len(d)
    mean, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))
    gain, low, high = ratio_interval(mean, max(se, 1e-12), len(d) - 1, level)
    return float(gain), float(low), float(high), len(d)


def analyse_knobs(path: str | Path, options: Options = Options()) -> KnobResult | None:
    """Per-setting analyses and the joint recommendation of a knob sweep; None for a run without knob settings."""
    loaded = load_input(path, all_settings=True)
    if loaded.samples is None:
        return None
    settings = knob_settings(loaded.samples)
    if len(settings) < 2:
        return None
    reference = str(loaded.provenance.get("knob_reference") or settings[0])
    if reference not in settings:
        reference = settings[0]
    analyses = {
        s: analyse(loaded._replace(samples=loaded.samples[loaded.samples["knobs"] == s].reset_index(drop=True)),
                   options)
        for s in settings
    }  # fmt: skip
    valid = [a.summary[a.summary[SummaryCol.VERDICT] != "null"] for a in analyses.values()]
    models = set.intersection(*(set(v["model"].astype(str)) for v in valid))
    base = valid[settings.index(reference)]
    base = base[base["model"].astype(str).isin(models)]
    ref_cap = _cap(analyses[reference])
    ref_rows = _ln_by_round(loaded.samples, reference, _paths(base, ref_cap)).reindex(columns=sorted(models))
    level = 1 - (1 - options.confidence) / max(len(settings) - 1, 1)
    candidates = []
    for setting in settings:
        cap = _cap(analyses[setting])
        gain, low, high, rounds = _compare(loaded.samples, setting, _paths(base, cap), ref_rows, level)
        candidates.append(Candidate(setting, cap, gain, low, high, rounds))
    best = max((c for c in candidates if c.setting != reference and np.isfinite(c.gain)), key=lambda c: c.gain,
               default=None)  # fmt: skip
    chosen, reason = _choose(reference, ref_cap, best, options.margin, level)
    return KnobResult(
        reference,
        analyses,
        tuple(candidates),
        tuple(sorted(models)),
        chosen.setting if chosen else reference,
        chosen.cap if chosen else ref_cap,
        reason,
        level,
        options.margin,
    )


def _choose(reference: str, ref_cap: int | None, best: Candidate | None, margin: float, level: float):
    keep = f"keep {reference} with cap {ref_cap}"
    if best is None:
        return None, f"{keep}: no other setting has runs in at least two rounds beside the reference's."
    beside = (
        f"{best.setting} at cap {best.cap} decodes the measured models {figures.speed_change(best.gain)} "
        f"{figures.speed_change_interval(best.ci_low, best.ci_high)} ({figures.percent(level)} interval over "
        f"{best.rounds} rounds, "
        f"Bonferroni over the alternatives) against {reference} at cap {ref_cap}"
    )
    if best.ci_low > 1 + margin:
        return (
            best,
            f"set {best.setting} with cap {best.cap}: {beside}, faster beyond the {figures.percent(margin)} margin.",
        )
    return None, f"{keep}: the best alternative, {beside}, is not faster beyond the {figures.percent(margin)} margin."
