"""The practical margin derived from the A/A (null) arm, as mlxcel's ADR 0007 sets its regression threshold.

ADR 0007 (lablup/mlxcel docs/adr/0007-unified-batch-native-engine.md, "Regression threshold"): "From the null arm, not
chosen in advance: the widest null-arm per-round decode tok/s delta across the four (model, context) cells, rounded up
to the next 0.5 percent" (1.0% on GB10, from a widest delta of 0.92%); scripts/engine_bench_rounds.py prints "an A/B
delta whose range overlaps the null range is unresolved". A config's `measure.margin: from-null` (with
`null_arm: true`) makes that the margin δ: every point's per-round delta of the null arm against the fallback arm it
repeats, in the same round, the widest |delta| over every point and round, rounded up to the next 0.5 percent. The
rounds the analysis drops as outliers are left out (moecal's addition: ADR 0007's quiet, guarded host had none; on
synthetic sweeps with 1 run in 20 slowed 10–20%, the raw widest delta is the hiccup, ≈ 20%, not the noise floor:
scripts/null_margin_calibration.py). A
point whose ratio interval lies inside 1 ± δ is then `equivalent`: the maintainers' "unresolved".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.points.inputs import run_dir_of
from harness.analysis.points.stats import screen_outliers
from harness.runs.formats import FALLBACK, NULL, POINT_COLUMNS
from harness.runs.rundir import RunDirectory

STEP_PCT = 0.5


@dataclass(frozen=True, kw_only=True)
class NullMargin:
    """The derived margin (a fraction), the widest per-round delta it came from (percent) and what it rests on."""

    margin: float
    widest_pct: float
    points: int
    rounds: int

    def sentence(self) -> str:
        return (
            f"margin {self.margin:.1%} from the null arm (ADR 0007's rule): the widest null-arm per-round decode "
            f"tok/s delta, {self.widest_pct:.2f}% over {self.points} points and {self.rounds} paired rounds, rounded "
            f"up to the next {STEP_PCT:g}%; a ratio inside 1 ± {self.margin:.1%} is unresolved (`equivalent`)"
        )


def round_up(pct: float) -> float:
    """The next multiple of STEP_PCT at or above `pct` (0.92 → 1.0, 1.0 → 1.0, 1.01 → 1.5)."""
    return math.ceil(round(pct / STEP_PCT, 9)) * STEP_PCT


def kept_deltas(fallback_ys: np.ndarray, null_ys: np.ndarray) -> np.ndarray:
    """|null − fallback| per-round deltas in percent over ln tok/s arrays (..., points, rounds) paired by round; NaN
    for a round without both arms and for the rounds the analysis drops as outliers (a run more than 6 robust σ from
    its arm's median, harness.analysis.points.stats.screen_outliers): one background hiccup is not the noise floor."""
    flagged = screen_outliers([fallback_ys, null_ys]).any(axis=0)
    return np.where(flagged, np.nan, np.abs(np.expm1(null_ys - fallback_ys)) * 100.0)


def null_pairs(samples: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(fallback, null) ln tok/s as (points, rounds) arrays, paired by round, over the ok runs of both arms."""
    ok = samples[(samples["status"] == "ok") & samples["arm"].isin([NULL, FALLBACK])]
    point = [*POINT_COLUMNS, *(["knobs"] if "knobs" in ok.columns else [])]
    # dropna=False: a missing shape field (an import's d_model) is one key, not a dropped row
    wide = ok.groupby([*point, "round", "arm"], dropna=False)["tok_s"].mean().unstack("arm")
    if NULL not in wide.columns or FALLBACK not in wide.columns:
        return np.empty((0, 0)), np.empty((0, 0))
    ys = pd.DataFrame(np.log(wide[[FALLBACK, NULL]].astype(float))).unstack("round")  # np.log keeps the frame
    return ys[FALLBACK].to_numpy(), ys[NULL].to_numpy()


def from_null(samples: pd.DataFrame) -> NullMargin | None:
    """ADR 0007's margin from a run's null arm; None when no round has both the null and the fallback arm."""
    deltas = kept_deltas(*null_pairs(samples))
    kept = np.isfinite(deltas)
    if not kept.any():
        return None
    widest = float(np.nanmax(deltas))
    return NullMargin(
        margin=round_up(widest) / 100.0, widest_pct=widest, points=int(kept.any(axis=1).sum()), rounds=int(kept.sum())
    )


def recorded(paths: Sequence[Path]) -> NullMargin | None:
    """The null-arm margin of analysis inputs whose sweeps all asked for it (meta.json `margin_from_null`), over all
    their rows together; None when any input did not ask or no null arm ran."""
    runs = [run_dir_of(Path(p)) for p in paths]
    if not runs or any(r is None or not RunDirectory(r).read_meta().get("margin_from_null") for r in runs):
        return None
    return from_null(pd.concat([RunDirectory(r).read_samples() for r in runs if r is not None], ignore_index=True))
