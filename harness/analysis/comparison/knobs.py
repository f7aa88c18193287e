"""A launch-knob sweep (harness.config.knobs) analysed per setting, and the joint recommendation of knob and cap.

Per setting (e.g. MLXCEL_FUSED_MOE_SGY=4) the run's rows at that setting go through the same pipeline as any run
(harness.analysis.decision.pipeline: per-point intervals, crossover, keep / raise / lower): a crossover with its
interval and a cap per setting, decided exactly as a run without knobs would be.

The joint question is which (setting, cap) makes the measured models decode fastest. Each setting's candidate is
its own decided cap c_k; under it a model runs the fused arm when its Dff ≤ c_k, else the fallback arm. The sweep
interleaves every setting and arm in each round, so within a round r the candidate's runs and the reference's
(the binary's default setting at its decided cap) were measured side by side: d_r = mean over the models of
ln tok/s(candidate) − ln tok/s(reference), and the mean of d_r over the rounds has a t interval with rounds − 1
degrees of freedom (slow drift cancels within a round, as for the arms). The interval is Bonferroni-widened over
the K − 1 alternatives, so the chance of moving the knob when no setting is better stays ≤ α. The knob moves only
when the best candidate's whole interval lies beyond 1 + δ (the margin): "keep SGY 8" unless the data shows better.

Each setting's row is that setting's own decision (setting_decision), at the cap in force of the plain analysis
(every setting is analysed from the same provenance and options as the run itself). Where the engine lowers and fused
loses at every measured Dff, the lower's target (the largest Dff where fused is not *shown* worse) would still
switch a point where fused is slower: the row then says so — lower below the smallest measured Dff, or disable the
fused path — and its cap is the grid step below every measured Dff. The joint candidate of a setting is that row's
cap, so the joint recommendation and the rows cannot disagree; its reason lists the rows when they differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np
import pandas as pd

from harness.analysis import number_format
from harness.analysis.decision.pipeline import Analysis, Options, analyse
from harness.analysis.points.inputs import load_input
from harness.analysis.points.stats import DECIDED, ratio_interval
from harness.config import knobs as launch_knobs
from harness.runs.summary_columns import SummaryCol

DISABLE = "MLXCEL_FUSED_MOE=0"  # mlxcel's kill switch: every Dff runs the fallback path


@dataclass(frozen=True, kw_only=True)
class SettingDecision:
    """One setting's own decision as its row states it: action and cap (the joint candidate's cap), `below_all`
    when fused loses at every measured Dff and the row says lower below the smallest measured Dff or disable."""

    action: str
    cap: int | None
    below_all: bool
    words: str


def setting_decision(analysis: Analysis) -> SettingDecision:
    """The row of one setting (module docstring): the engine's decision, except that a lower where fused loses at
    every measured Dff goes below the smallest measured Dff. A keep where fused is slower everywhere but not shown
    beyond the margin at the cap stays a keep (no move without evidence) and says it."""
    d = analysis.result.decision
    default = analysis.current_default
    cap = d.recommended_cap if d.recommended_cap is not None else default
    points = analysis.summary[analysis.summary[SummaryCol.VERDICT].isin(DECIDED)]
    ratios = points[SummaryCol.ESTIMATE].astype(float)
    everywhere = bool(len(points)) and bool((ratios < 1.0).all())
    spread = (
        f"{number_format.ratio(float(ratios.min()))}–{number_format.ratio(float(ratios.max()))}" if len(points) else ""
    )
    if d.action == "lower" and everywhere:
        smallest = int(points["dff"].min())
        below = (smallest - 1) // analysis.options.policy.grid * analysis.options.policy.grid
        words = (
            f"fused loses at every measured Dff (ratio {spread}): lower to below the smallest measured Dff "
            f"{smallest} (cap {below}), or disable ({DISABLE})"
        )
        return SettingDecision(action="lower", cap=below, below_all=True, words=words)
    moved = default is not None and d.action in ("raise", "lower")
    words = f"{d.action} {default} → {cap}" if moved else f"{d.action} {cap}"
    if d.action == "keep" and everywhere:
        words += f" (fused is slower at every measured Dff, ratio {spread}, but not shown beyond the margin at the cap)"
    return SettingDecision(action=d.action, cap=cap, below_all=False, words=words)


def setting_cap_words(row: SettingDecision) -> str:
    """The cap a joint recommendation pairs with a setting, in the row's terms."""
    if row.below_all:
        return f"cap {row.cap} (below every measured Dff; or disable, {DISABLE})"
    return f"cap {row.cap}" + ("" if row.action == "keep" else f" ({row.words})")


def where_to_set(setting: str, backend: str) -> str:
    """Where a setting is set: per run in the environment, and where the build's default is compiled in (the line
    of mlxcel's source the knob table gives, harness.config.knobs)."""
    parts = [f"per run: `{setting}` in the environment"]
    knobs = launch_knobs.known()
    for name in launch_knobs.parse_label(setting):
        knob = knobs.get(name)
        if knob is None:
            continue
        default = f"{knob.default_for(backend)} on {backend}"
        parts.append(f"the compiled-in default of {name} ({default}): `{knob.default_line(backend)}` in {knob.source}")
    return "; ".join(parts)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One setting at its decided cap, against the reference setting at its decided cap."""

    setting: str
    cap: int | None
    gain: float  # geometric mean over the models of the decode-speed ratio candidate / reference
    ci_low: float
    ci_high: float
    rounds: int  # rounds in which every model ran under both configurations


class KnobRowJSON(TypedDict):
    setting: str
    action: str
    cap: int | None
    below_all: bool
    words: str


class KnobsJSON(TypedDict):
    """A knob sweep as a report's sidecar keeps it (`knobs`; KnobResult.record)."""

    reference: str
    recommended: str
    recommended_cap: int | None
    reason: str
    rows: list[KnobRowJSON]
    where: str


@dataclass(frozen=True, kw_only=True)
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
    rows: dict[str, SettingDecision]  # setting label → its own decision (the row)

    def record(self, backend: str) -> KnobsJSON:
        """What the addendum carries of the knob sweep (harness.output.addendum.report_data `knobs`): the joint
        recommendation, each setting's row, and where to set the recommended setting."""
        return {
            "reference": self.reference,
            "recommended": self.recommended,
            "recommended_cap": self.recommended_cap,
            "reason": self.reason,
            "rows": [
                {"setting": s, "action": r.action, "cap": r.cap, "below_all": r.below_all, "words": r.words}
                for s, r in self.rows.items()
            ],
            "where": where_to_set(self.recommended, backend),
        }


def knob_settings(samples: pd.DataFrame) -> list[str]:
    """The settings a run measured, in the order of their values (numbers numerically)."""
    labels = [s for s in samples["knobs"].astype(str).unique() if s]

    def order(text: str) -> tuple[tuple[int, int | str], ...]:
        return tuple(
            (0, int(v)) if v.lstrip("-").isdigit() else (1, v) for v in launch_knobs.parse_label(text).values()
        )

    return sorted(labels, key=order)


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


def _compare(
    samples: pd.DataFrame, setting: str, paths: dict[str, str], reference: pd.DataFrame, level: float
) -> tuple[float, float, float, int]:
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
    rows = {s: setting_decision(analyses[s]) for s in settings}
    ref_cap = rows[reference].cap
    ref_rows = _ln_by_round(loaded.samples, reference, _paths(base, ref_cap)).reindex(columns=sorted(models))
    level = 1 - (1 - options.policy.confidence) / max(len(settings) - 1, 1)
    candidates = []
    for setting in settings:
        cap = rows[setting].cap
        gain, low, high, rounds = _compare(loaded.samples, setting, _paths(base, cap), ref_rows, level)
        candidates.append(Candidate(setting=setting, cap=cap, gain=gain, ci_low=low, ci_high=high, rounds=rounds))
    best = max((c for c in candidates if c.setting != reference and np.isfinite(c.gain)), key=lambda c: c.gain,
               default=None)  # fmt: skip
    chosen, reason = _choose(reference, setting_cap_words(rows[reference]), best, options.policy.margin, level)
    if chosen is not None:
        reason = reason.replace(f"with cap {chosen.cap}:", f"with {setting_cap_words(rows[chosen.setting])}:", 1)
    if len({(r.action, r.cap) for r in rows.values()}) > 1:  # the rows differ: the joint line says how
        reason += " Per setting: " + "; ".join(f"{s}: {r.words}" for s, r in rows.items()) + "."
    return KnobResult(
        reference=reference,
        analyses=analyses,
        candidates=tuple(candidates),
        models=tuple(sorted(models)),
        recommended=chosen.setting if chosen else reference,
        recommended_cap=chosen.cap if chosen else ref_cap,
        reason=reason,
        confidence=level,
        margin=options.policy.margin,
        rows=rows,
    )


def _choose(
    reference: str, ref_cap: str, best: Candidate | None, margin: float, level: float
) -> tuple[Candidate | None, str]:
    """The joint choice and its reason; `ref_cap`: the reference's cap in its row's words (setting_cap_words)."""
    keep = f"keep {reference} with {ref_cap}"
    if best is None:
        return None, f"{keep}: no other setting has runs in at least two rounds beside the reference's."
    beside = (
        f"{best.setting} at cap {best.cap} decodes the measured models {number_format.speed_change(best.gain)} "
        f"{number_format.speed_change_interval(best.ci_low, best.ci_high)} ({number_format.percent(level)} interval "
        "over "
        f"{best.rounds} rounds, "
        f"Bonferroni over the alternatives) against {reference} at its {ref_cap}"
    )
    if best.ci_low > 1 + margin:
        return (
            best,
            f"set {best.setting} with cap {best.cap}: {beside}, faster beyond the {number_format.percent(margin)} "
            "margin.",
        )
    return (
        None,
        f"{keep}: the best alternative, {beside}, is not faster beyond the {number_format.percent(margin)} margin.",
    )
