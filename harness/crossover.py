"""Crossover Dff with a confidence interval, and the keep/raise/lower policy that turns it into a default cap.

Pure functions over arrays and the summary DataFrame; no I/O.

The cap means "use the fused path when Dff <= cap", so the decision point is the first Dff, scanning upward, at
which fused stops winning (ratio drops to <= 1), interpolated between the last winning and the first losing point
(linearly in Dff, or in log2 Dff). Every sign change of ratio − 1 is still reported, because non-monotone curves
happen; a later "up" crossing means fused wins again at larger Dff, which a single cap cannot use.

No crossing: fused wins at every measured Dff → the crossover lies above the largest measured Dff (+inf); fused
loses already at the smallest measured Dff → it lies below the smallest one (−inf). The CI is the percentile
interval of the decision point recomputed on every bootstrap resample of the per-point samples (order statistics,
so ±inf resamples count). How the bounds read: a lower bound of −inf or an upper bound of +inf is *open* (the
interval runs past the measured range on that side; JSON null); a lower bound of +inf is reported as the largest
measured Dff and an upper bound of −inf as the smallest (both true, conservative bounds). Without raw samples (a
summary.csv input) the CI is the pointwise band: the decision point of the per-point CI lower bounds to that of
their upper bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.config import DEFAULT_CAP_ENV
from harness.stats import percentile_ci

INTERPOLATIONS = ("linear", "log2")
DEFAULT_GRID = 256
# A layer sweep varies Dff at one shape, so its shape families are the other shape columns; command and decode
# workloads measure whole models (one model per Dff), so each is a single family.


@dataclass(frozen=True)
class Crossing:
    """One sign change of ratio − 1 between two adjacent measured Dff."""

    dff: float
    direction: str  # "down": fused stops winning as Dff grows; "up": fused wins again
    between: tuple[int, int]


@dataclass(frozen=True)
class Crossover:
    outcome: str  # crossing | fused_everywhere | fused_never | no_points
    dff: float | None  # the decision point (None when there is no crossing)
    ci_low: float  # -inf: open below the smallest measured Dff
    ci_high: float  # +inf: open above the largest measured Dff
    crossings: tuple[Crossing, ...]
    ci_method: str  # bootstrap | pointwise
    min_dff: int | None
    max_dff: int | None


@dataclass(frozen=True)
class Decision:
    action: str  # keep | raise | lower | set (no current default known)
    recommended_cap: int | None
    reason: str
    apply: str | None  # the environment line that applies the cap


@dataclass(frozen=True)
class FamilyDecision:
    family: str
    rows: tuple[int, ...]  # positions in the summary
    crossover: Crossover
    decision: Decision
    valid_points: int = 0  # non-null points the crossover was located from


def deciding_families(families: Sequence[FamilyDecision]) -> list[FamilyDecision]:
    """The families allowed to set the overall cap.

    A `layer` family measures the kernels at a fixed shape, so when a run has any, they decide; whole-model
    `decode` (or `command`) points then only show the effect on tok/s. A family also needs two valid points to locate a
    crossover: a single point says which path won there, not where the paths cross. If no family qualifies, all do.
    """
    kernel = [f for f in families if f.family.startswith("layer")] or list(families)
    located = [f for f in kernel if f.valid_points >= 2]
    return located or kernel


@dataclass(frozen=True)
class DecisionResult:
    """Per shape family and overall; the overall decision is the most conservative (smallest) family cap."""

    families: tuple[FamilyDecision, ...]
    crossover: Crossover  # of the binding family
    decision: Decision


def _coordinate(dffs: np.ndarray, interpolation: str) -> np.ndarray:
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}")
    return np.log2(dffs) if interpolation == "log2" else dffs.astype(float)


def _interpolate(x0, x1, r0, r1, interpolation: str):
    """Where the straight line through (x0, r0), (x1, r1) reaches ratio 1, back in Dff."""
    x = x0 + (r0 - 1.0) / (r0 - r1) * (x1 - x0)
    return np.exp2(x) if interpolation == "log2" else x


def decision_points(dffs: np.ndarray, ratios: np.ndarray, interpolation: str = "linear") -> np.ndarray:
    """First down-crossing of each row of `ratios` (shape (n, points), points sorted by Dff); ±inf when none."""
    x = _coordinate(np.asarray(dffs), interpolation)
    ratios = np.atleast_2d(ratios)
    loses = ratios <= 1.0
    first = np.argmax(loses, axis=1)
    rows = np.arange(len(ratios))
    prev = np.maximum(first - 1, 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # rows without a crossing are overwritten below
        crossing = _interpolate(x[prev], x[first], ratios[rows, prev], ratios[rows, first], interpolation)
    out = np.where(first == 0, -np.inf, crossing)
    return np.where(loses.any(axis=1), out, np.inf)


def all_crossings(dffs: np.ndarray, ratios: np.ndarray, interpolation: str = "linear") -> tuple[Crossing, ...]:
    """Every change between winning (ratio > 1) and not winning, in increasing Dff."""
    x = _coordinate(np.asarray(dffs), interpolation)
    wins = np.asarray(ratios) > 1.0
    out = []
    for i in np.flatnonzero(wins[:-1] != wins[1:]):
        dff = float(_interpolate(x[i], x[i + 1], ratios[i], ratios[i + 1], interpolation))
        out.append(Crossing(dff, "down" if wins[i] else "up", (int(dffs[i]), int(dffs[i + 1]))))
    return tuple(out)


def find_crossover(
    dffs: np.ndarray,
    ratios: np.ndarray,
    interpolation: str = "linear",
    confidence: float = 0.95,
    replicates: np.ndarray | None = None,
    ci_bounds: tuple[np.ndarray, np.ndarray] | None = None,
) -> Crossover:
    """The crossover of valid points sorted by Dff; CI from `replicates` (resamples × points) or, failing that,
    from the pointwise `ci_bounds` (per-point CI low and high arrays)."""
    if len(dffs) == 0:
        return Crossover("no_points", None, -math.inf, math.inf, (), "none", None, None)
    min_dff, max_dff = int(dffs[0]), int(dffs[-1])
    point = float(decision_points(dffs, ratios, interpolation)[0])
    if replicates is not None:
        low, high = percentile_ci(decision_points(dffs, replicates, interpolation), confidence)
        method = "bootstrap"
    else:
        band_low, band_high = (np.where(np.isnan(b), ratios, b) for b in ci_bounds)
        low, high = (float(v) for v in decision_points(dffs, np.vstack([band_low, band_high]), interpolation))
        method = "pointwise"
    low = max_dff if low == math.inf else low
    high = min_dff if high == -math.inf else high
    outcome = "crossing" if math.isfinite(point) else ("fused_everywhere" if point > 0 else "fused_never")
    dff = point if math.isfinite(point) else None
    return Crossover(outcome, dff, low, high, all_crossings(dffs, ratios, interpolation), method, min_dff, max_dff)


def format_ci(crossover: Crossover) -> str:
    """`[7102, 8310]`, with open ends written as `<min` / `>max` measured Dff."""
    low = f"<{crossover.min_dff}" if crossover.ci_low == -math.inf else f"{crossover.ci_low:.0f}"
    high = f">{crossover.max_dff}" if crossover.ci_high == math.inf else f"{crossover.ci_high:.0f}"
    return f"[{low}, {high}]"


def _finding(c: Crossover, confidence: float) -> str:
    ci = f"{confidence:.0%} CI {format_ci(c)}"
    if c.outcome == "crossing":
        return f"Fused beats the fallback up to Dff ≈ {c.dff:.0f} ({ci})"
    if c.outcome == "fused_everywhere":
        return f"Fused beats the fallback at every measured Dff up to {c.max_dff} (crossover above it; {ci})"
    return f"Fused never beats the fallback, already not at the smallest measured Dff {c.min_dff} ({ci})"


def recommend(
    c: Crossover,
    current_default: int | None,
    grid: int = DEFAULT_GRID,
    cap_env: str = DEFAULT_CAP_ENV,
    confidence: float = 0.95,
) -> Decision:
    """Policy: keep a current default inside the CI; otherwise the largest grid multiple not above the CI's lower
    bound (strictly below the smallest measured Dff when the interval is open below)."""
    if grid <= 0:
        raise ValueError(f"grid must be positive, got {grid}")
    keep_line = f"{cap_env}={current_default}" if current_default is not None else None
    if c.outcome == "no_points":
        return Decision(
            "keep", current_default, "No valid (non-null) point to decide from; nothing changes.", keep_line
        )
    if c.ci_low == -math.inf:
        recommended = (c.min_dff - 1) // grid * grid
        bound = f"below the smallest measured Dff {c.min_dff} (the interval is open below it)"
    else:
        recommended = int(c.ci_low // grid * grid)
        bound = f"not above the CI's lower bound {c.ci_low:.0f}"
    finding = _finding(c, confidence)
    line = f"{cap_env}={recommended}"
    if current_default is None:
        return Decision(
            "set",
            recommended,
            f"{finding}; with no current default given, set {recommended}, the largest multiple of {grid} {bound}.",
            line,
        )
    if c.ci_low <= current_default <= c.ci_high:
        reason = f"{finding}; the current default {current_default} lies inside it, so the data cannot tell it from "
        return Decision("keep", current_default, reason + "break-even.", keep_line)
    if current_default > c.ci_high:
        reason = (
            f"{finding}; the current default {current_default} is above the interval, so Dff up to it take a fused "
            f"path that loses: lower it to {recommended}, the largest multiple of {grid} {bound}."
        )
        return Decision("lower", recommended, reason, line)
    if recommended <= current_default:
        reason = (
            f"{finding}; the current default {current_default} is below the interval, but no larger multiple of "
            f"{grid} is {bound}, so it stays."
        )
        return Decision("keep", current_default, reason, keep_line)
    reason = (
        f"{finding}; the current default {current_default} is below the interval, so raise it to {recommended}, "
        f"the largest multiple of {grid} {bound}."
    )
    if c.outcome == "fused_everywhere":
        reason = reason[:-1] + f"; Dff above {c.max_dff} are unmeasured."
    return Decision("raise", recommended, reason, line)


def family_labels(summary: pd.DataFrame) -> pd.Series:
    """A readable shape-family label per summary row: a `layer` family is one (d_model, top_k, n_experts, bits,
    group_size, dtype); `decode` and `command` points (one model per Dff) form one family per workload."""

    def label(row: pd.Series) -> str:
        if row["workload"] != "layer":
            return str(row["workload"] or "all")
        return (
            f"layer d_model={row['d_model']:.0f} top_k={row['top_k']:.0f} experts={row['n_experts']:.0f} "
            f"q{row['bits']:.0f}g{row['group_size']:.0f} {row['dtype']}"
        )

    if summary.empty:
        return pd.Series([], dtype=str)
    return summary.apply(label, axis=1)


def decide(
    summary: pd.DataFrame,
    replicates: Sequence[np.ndarray] | None,
    current_default: int | None,
    grid: int = DEFAULT_GRID,
    interpolation: str = "linear",
    confidence: float = 0.95,
    cap_env: str = DEFAULT_CAP_ENV,
) -> DecisionResult:
    """Crossover and decision per shape family, then overall. `replicates[i]` belongs to summary row i (None for a
    summary-only input: pointwise CI band instead of the bootstrap)."""
    labels = family_labels(summary).to_numpy()
    families = []
    for family in dict.fromkeys(labels):
        positions = np.flatnonzero((labels == family) & (summary["verdict"] != "null").to_numpy())
        positions = positions[np.argsort(summary["dff"].to_numpy()[positions], kind="stable")]
        rows = summary.iloc[positions]
        crossover = find_crossover(
            rows["dff"].to_numpy(),
            rows["ratio"].to_numpy(float),
            interpolation,
            confidence,
            np.column_stack([replicates[i] for i in positions]) if replicates is not None and len(positions) else None,
            (rows["ci_low"].to_numpy(float), rows["ci_high"].to_numpy(float)),
        )
        decision = recommend(crossover, current_default, grid, cap_env, confidence)
        all_rows = tuple(int(i) for i in np.flatnonzero(labels == family))
        families.append(FamilyDecision(family, all_rows, crossover, decision, len(positions)))
    if not families:
        empty = find_crossover(np.array([]), np.array([]))
        return DecisionResult((), empty, recommend(empty, current_default, grid, cap_env, confidence))
    candidates = deciding_families(families)
    binding = min(
        candidates, key=lambda f: math.inf if f.decision.recommended_cap is None else f.decision.recommended_cap
    )
    return DecisionResult(tuple(families), binding.crossover, _overall(binding, len(candidates), current_default))


def _overall(binding: FamilyDecision, n_families: int, current_default: int | None) -> Decision:
    """With several deciding families one cap must serve them all, so the smallest family cap wins."""
    decision = binding.decision
    if n_families == 1 or decision.recommended_cap is None:
        return decision
    if current_default is not None and decision.action != "set":
        cap = decision.recommended_cap
        action = "keep" if cap == current_default else ("raise" if cap > current_default else "lower")
        decision = Decision(action, cap, decision.reason, decision.apply)
    return Decision(
        decision.action,
        decision.recommended_cap,
        f"The shape family {binding.family} sets the smallest cap. {decision.reason}",
        decision.apply,
    )


def _number(value: float, digits: int) -> float | None:
    """JSON-safe: NaN and ±inf become null."""
    return round(float(value), digits) if value is not None and math.isfinite(value) else None


def crossover_json(c: Crossover) -> dict[str, object]:
    return {
        "crossover_dff": _number(c.dff, 1) if c.dff is not None else None,
        "ci_low": _number(c.ci_low, 1),
        "ci_high": _number(c.ci_high, 1),
        "outcome": c.outcome,
        "ci_method": c.ci_method,
        "ci_text": format_ci(c) if c.outcome != "no_points" else None,
        "crossings": [
            {"dff": round(x.dff, 1), "direction": x.direction, "between": list(x.between)} for x in c.crossings
        ],
    }


def decision_json(summary: pd.DataFrame, result: DecisionResult, **settings: object) -> dict[str, object]:
    """The machine-readable decision: what `crossover --json` prints and the report's hidden block records."""
    labels = family_labels(summary)
    points = [
        {
            "model": str(row["model"]),
            "dff": int(row["dff"]),
            "family": str(labels.iloc[i]),
            "fallback_tok_s": _number(row["fallback_tok_s"], 4),
            "fused_tok_s": _number(row["fused_tok_s"], 4),
            "ratio": _number(row["ratio"], 5),
            "ci_low": _number(row["ci_low"], 5),
            "ci_high": _number(row["ci_high"], 5),
            "verdict": str(row["verdict"]),
            "unstable": bool(row["unstable"]),
            "n_fallback": int(row["n_fallback"]),
            "n_fused": int(row["n_fused"]),
            "null_ratio": _number(row["null_ratio"], 5),
            "reason": str(row["reason"]),
        }
        for i, (_, row) in enumerate(summary.iterrows())
    ]
    d = result.decision
    out = {
        **crossover_json(result.crossover),
        "points": points,
        "recommended_cap": d.recommended_cap,
        "action": d.action,
        "reason": d.reason,
        "apply": d.apply,
        **settings,
    }
    if len(result.families) > 1:
        out["families"] = [
            {
                "family": f.family,
                **crossover_json(f.crossover),
                "recommended_cap": f.decision.recommended_cap,
                "action": f.decision.action,
                "reason": f.decision.reason,
            }
            for f in result.families
        ]
    return out
