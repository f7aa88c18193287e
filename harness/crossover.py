"""Crossover Dff with a test-inversion interval, and the keep/raise/lower policy that turns it into a default cap.

Pure functions over arrays and the summary DataFrame; no I/O (ValueError on bad input). DESIGN §7:

- The curve: θ(x) = ln(fused/fallback) interpolated between neighbouring valid points (linear in Dff by default,
  which reproduces the published numbers; log2 Dff optional). Between points i and i+1 at weight w,
  θ̂(x) = (1−w)θ̂ᵢ + wθ̂ᵢ₊₁ and se² = (1−w)²seᵢ² + w²seᵢ₊₁² (the points are measured independently), with the
  smaller of the two degrees of freedom (conservative).
- The crossover is the first Dff, scanning upward, where θ̂ stops being > 0; every sign change is reported.
- Its interval inverts the test: the Dff where |θ̂(x)| ≤ t·se(x) — between a bracketing pair this is Fieller's
  interval (a quadratic in w, solved exactly). The reported interval is the hull of that set (each crossing also
  gets the piece holding it); it is open (±inf, JSON null) where it reaches the end of the measured range, because
  the data say nothing beyond it.
- Policy at the current cap c (the cap means "fused when Dff ≤ cap"): **lower** only when fallback wins beyond δ at
  c (upper bound of the ratio at c below 1 − δ; c above the measured range is judged at the largest measured Dff),
  to the largest grid multiple below c where it no longer does; **raise** only when fused wins beyond δ above c
  (lower bound above 1 + δ), to the largest grid multiple up to which it still does, never past the measured range;
  else **keep**, saying about how many rounds at which Dff would decide. Several deciding families → Bonferroni
  (each family's policy intervals at 1 − α/k). A run whose A/A comparison lies beyond the margin gets no
  raise/lower at all: its drift is larger than its noise model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.config import DEFAULT_CAP_ENV
from harness.stats import CONFIDENCE, DECIDED, MARGIN, family_labels, ratio_interval, rounds_to_decide, t_quantile

INTERPOLATIONS = ("linear", "log2")
DEFAULT_GRID = 256
CI_METHOD = "test inversion (Fieller)"


@dataclass(frozen=True)
class Curve:
    """A family's valid points sorted by Dff: θ̂ = ln ratio, its standard error and degrees of freedom."""

    dffs: np.ndarray
    theta: np.ndarray
    se: np.ndarray
    df: np.ndarray
    interpolation: str = "linear"

    def __post_init__(self) -> None:
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if len(self.dffs) > 1 and np.any(np.diff(self.dffs) <= 0):
            raise ValueError("a curve's Dffs must increase strictly")

    @property
    def x(self) -> np.ndarray:
        return np.log2(self.dffs) if self.interpolation == "log2" else self.dffs.astype(float)

    def to_dff(self, x: np.ndarray | float) -> np.ndarray | float:
        return np.exp2(x) if self.interpolation == "log2" else x

    def at(self, dff: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(θ̂, se, df) at each Dff, interpolated; clamped to the measured range (no extrapolation)."""
        x = self.x
        u = np.clip(np.log2(dff) if self.interpolation == "log2" else np.asarray(dff, float), x[0], x[-1])
        if len(x) == 1:
            shape = np.shape(u)
            return (np.full(shape, self.theta[0]), np.full(shape, self.se[0]), np.full(shape, self.df[0]))
        i = np.clip(np.searchsorted(x, u, side="right") - 1, 0, len(x) - 2)
        w = (u - x[i]) / (x[i + 1] - x[i])
        theta = (1 - w) * self.theta[i] + w * self.theta[i + 1]
        se = np.sqrt((1 - w) ** 2 * self.se[i] ** 2 + w**2 * self.se[i + 1] ** 2)
        df = np.where(w == 0, self.df[i], np.where(w == 1, self.df[i + 1], np.minimum(self.df[i], self.df[i + 1])))
        return theta, se, df


@dataclass(frozen=True)
class Crossing:
    """One sign change of θ̂ between two adjacent measured Dff, with its own test-inversion interval."""

    dff: float
    direction: str  # "down": fused stops winning as Dff grows; "up": fused wins again
    between: tuple[int, int]
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class Crossover:
    outcome: str  # crossing | fused_everywhere | fused_never | no_points
    dff: float | None  # the decision point (None when there is no crossing)
    ci_low: float  # -inf: open below (the interval reaches the smallest measured Dff)
    ci_high: float  # +inf: open above
    crossings: tuple[Crossing, ...]
    ci_method: str
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
    valid_points: int = 0  # distinct Dffs with an interval the crossover was located from


@dataclass(frozen=True)
class DecisionResult:
    """Per shape family and overall; the overall decision is the most conservative (smallest) family cap."""

    families: tuple[FamilyDecision, ...]
    crossover: Crossover  # of the binding family
    decision: Decision


# --- the acceptance set {x : |θ̂(x)| ≤ t·se(x)} --------------------------------------------------------------------


def acceptance_set(curve: Curve, confidence: float = CONFIDENCE) -> list[tuple[float, float]]:
    """Disjoint [low, high] intervals of Dff (sorted) where the data cannot reject ratio = 1."""
    x, a_all, s_all = curve.x, curve.theta, curve.se
    t_all = t_quantile(confidence, curve.df)
    pieces: list[tuple[float, float]] = []
    if len(x) == 1 and abs(a_all[0]) <= t_all[0] * s_all[0]:
        pieces.append((x[0], x[0]))
    for i in range(len(x) - 1):
        a, b, var_a, var_b = a_all[i], a_all[i + 1], s_all[i] ** 2, s_all[i + 1] ** 2
        t2 = max(t_all[i], t_all[i + 1]) ** 2  # the smaller df: conservative
        q2 = (b - a) ** 2 - t2 * (var_a + var_b)
        q1 = 2 * a * (b - a) + 2 * t2 * var_a
        q0 = a**2 - t2 * var_a
        roots = np.roots([q2, q1, q0]) if abs(q2) > 1e-300 else np.roots([q1, q0])
        cuts = sorted({0.0, 1.0, *(float(r.real) for r in roots if abs(r.imag) < 1e-12 and 0 < r.real < 1)})
        for w0, w1 in zip(cuts[:-1], cuts[1:], strict=True):
            mid = (w0 + w1) / 2
            if q2 * mid**2 + q1 * mid + q0 <= 0:
                pieces.append((x[i] + w0 * (x[i + 1] - x[i]), x[i] + w1 * (x[i + 1] - x[i])))
    merged: list[list[float]] = []
    for low, high in pieces:
        if merged and low <= merged[-1][1] + 1e-9 * max(1.0, abs(low)):
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return [(float(curve.to_dff(low)), float(curve.to_dff(high))) for low, high in merged]


def _component(pieces: list[tuple[float, float]], dff: float, lo: float, hi: float) -> tuple[float, float] | None:
    """The piece holding `dff`, opened (±inf) where it reaches the measured range's ends [lo, hi]."""
    for low, high in pieces:
        if low - 1e-6 * lo <= dff <= high + 1e-6 * hi:
            return (-math.inf if low <= lo * (1 + 1e-9) else low, math.inf if high >= hi * (1 - 1e-9) else high)
    return None


def crossings(curve: Curve, pieces: list[tuple[float, float]]) -> tuple[Crossing, ...]:
    """Every change between fused winning (θ̂ > 0) and not, in increasing Dff, each with its interval."""
    wins = curve.theta > 0
    out = []
    lo, hi = float(curve.dffs[0]), float(curve.dffs[-1])
    for i in np.flatnonzero(wins[:-1] != wins[1:]):
        x0, x1 = curve.x[i], curve.x[i + 1]
        w = curve.theta[i] / (curve.theta[i] - curve.theta[i + 1])
        dff = float(curve.to_dff(x0 + w * (x1 - x0)))
        low, high = _component(pieces, dff, lo, hi) or (dff, dff)
        direction = "down" if wins[i] else "up"
        out.append(Crossing(dff, direction, (int(curve.dffs[i]), int(curve.dffs[i + 1])), low, high))
    return tuple(out)


def find_crossover(curve: Curve, confidence: float = CONFIDENCE) -> Crossover:
    """The decision point (first down-crossing) and its interval: the hull of the whole acceptance set, because a
    noisy point can make the estimated curve cross 1.0 early while the true crossing lies in another piece of the
    set (its `crossings` keep each piece). Open where the set reaches an end of the measured range; when the set is
    empty the crossover lies beyond the end where the estimate points (fused winning everywhere: above the largest
    measured Dff)."""
    if len(curve.dffs) == 0:
        return Crossover("no_points", None, -math.inf, math.inf, (), CI_METHOD, None, None)
    lo, hi = int(curve.dffs[0]), int(curve.dffs[-1])
    pieces = acceptance_set(curve, confidence)
    found = crossings(curve, pieces)
    low, high = (pieces[0][0], pieces[-1][1]) if pieces else (math.nan, math.nan)
    low = -math.inf if pieces and low <= lo * (1 + 1e-9) else low
    high = math.inf if pieces and high >= hi * (1 - 1e-9) else high
    if curve.theta[0] <= 0:
        return Crossover("fused_never", None, -math.inf, lo if not pieces else high, found, CI_METHOD, lo, hi)
    first = next((c for c in found if c.direction == "down"), None)
    if first is None:
        return Crossover("fused_everywhere", None, hi if not pieces else low, math.inf, found, CI_METHOD, lo, hi)
    return Crossover("crossing", first.dff, low, high, found, CI_METHOD, lo, hi)


def format_ci(crossover: Crossover) -> str:
    """`[7102, 8310]`, with open ends written as `<min` / `>max` measured Dff."""
    low = f"<{crossover.min_dff}" if crossover.ci_low == -math.inf else f"{crossover.ci_low:.0f}"
    high = f">{crossover.max_dff}" if crossover.ci_high == math.inf else f"{crossover.ci_high:.0f}"
    return f"[{low}, {high}]"


# --- policy -------------------------------------------------------------------------------------------------------


def _finding(c: Crossover, confidence: float) -> str:
    ci = f"{confidence:.0%} CI {format_ci(c)}"
    if c.outcome == "crossing":
        return f"The ratio crosses 1.0 at Dff ≈ {c.dff:.0f} ({ci})"
    if c.outcome == "fused_everywhere":
        return f"The estimated ratio stays above 1.0 up to the largest measured Dff {c.max_dff} (crossover {ci})"
    return f"The estimated ratio is not above 1.0 even at the smallest measured Dff {c.min_dff} (crossover {ci})"


def _bounds(curve: Curve, dff: float, confidence: float) -> tuple[float, float, float]:
    theta, se, df = curve.at(dff)
    estimate, low, high = ratio_interval(theta, se, df, confidence)
    return float(estimate), float(low), float(high)


def _grid_bounds(curve: Curve, dffs: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the ratio at each Dff in one vectorised call (the policy scans whole grids)."""
    if len(dffs) == 0:
        return np.array([]), np.array([])
    _, low, high = ratio_interval(*curve.at(dffs), confidence)
    return np.atleast_1d(low), np.atleast_1d(high)


def _nearest_point(curve: Curve, dff: float) -> int:
    return int(np.argmin(np.abs(curve.dffs - dff)))


def _to_decide(curve: Curve, dff: float, margin: float, confidence: float, rounds: np.ndarray) -> str:
    """`about N rounds at Dff D would likely decide` for the measured point nearest `dff`."""
    i = _nearest_point(curve, dff)
    n = int(rounds[i])
    needed = rounds_to_decide(curve.theta[i], curve.se[i], curve.df[i], n, margin, confidence)
    where = f"Dff {int(curve.dffs[i])}"
    if needed is None:
        return f"the ratio at {where} sits on the edge of the margin; more rounds there would not settle it"
    if needed <= n:
        return f"the interval at {where} is as narrow as it needs to be; it straddles the margin's edge"
    if needed > 100 * max(n, 1):
        return f"at {where} even {100 * n} rounds would likely not decide (the ratio sits near the margin's edge)"
    return f"about {needed} rounds per arm at {where} (now {n}) would likely decide"


def recommend(
    curve: Curve,
    crossover: Crossover,
    current_default: int | None,
    grid: int = DEFAULT_GRID,
    cap_env: str = DEFAULT_CAP_ENV,
    confidence: float = CONFIDENCE,
    margin: float = MARGIN,
    policy_confidence: float | None = None,
    rounds: np.ndarray | None = None,
    withhold: str = "",
) -> Decision:
    """Keep / raise / lower / set for one family (module docstring); `withhold` (a reason) forbids raise/lower."""
    if grid <= 0:
        raise ValueError(f"grid must be positive, got {grid}")
    level = policy_confidence or confidence
    rounds = np.zeros(len(curve.dffs), int) if rounds is None else rounds
    keep_line = f"{cap_env}={current_default}" if current_default is not None else None
    if crossover.outcome == "no_points":
        reason = "No point with an interval to decide from; nothing changes."
        return Decision("keep", current_default, reason, keep_line)
    finding = _finding(crossover, confidence)
    lo, hi = int(curve.dffs[0]), int(curve.dffs[-1])
    if current_default is None:
        if crossover.ci_low == -math.inf:
            cap = (lo - 1) // grid * grid
            bound = f"below the smallest measured Dff {lo} (the interval is open below)"
        else:
            cap = int(crossover.ci_low // grid * grid)
            bound = f"not above the interval's lower end {crossover.ci_low:.0f}"
        reason = f"{finding}; with no current default given, set {cap}, the largest multiple of {grid} {bound}."
        return Decision("set", cap, reason, f"{cap_env}={cap}")
    c = current_default
    low_band, high_band = 1.0 - margin, 1.0 + margin
    band = f"1 ± {margin:.1%}"
    at = f"{level:.1%}" if level != confidence else f"{level:.0%}"
    estimate, low, high = _bounds(curve, c, level)
    judged = f"Dff {c}" if lo <= c <= hi else f"Dff {hi if c > hi else lo} (the measured Dff nearest {c})"
    evidence = f"at {judged} the ratio is {estimate:.4f}, {at} CI [{low:.4f}, {high:.4f}]"
    action = None
    if c >= lo and high < low_band:
        below = np.arange((c - 1) // grid * grid, max(lo - 1, 0), -grid)
        released = np.flatnonzero(_grid_bounds(curve, below, level)[1] >= low_band)
        cap = int(below[released[0]]) if released.size else None
        if cap is None:
            cap = (lo - 1) // grid * grid
            where = f"below the smallest measured Dff {lo}: fallback wins beyond the margin at every Dff down to it"
        else:
            where = f"the largest multiple of {grid} below {c} where fallback no longer wins beyond the margin"
        reason = f"{finding}; {evidence}, below {band}: fallback wins there. Lower it to {cap}, {where}."
        action = ("lower", cap, reason)
    else:
        above = np.arange(max(c // grid * grid + grid, -(-lo // grid) * grid), hi + 1, grid)
        wins = _grid_bounds(curve, above, level)[0] > high_band
        stop = int(np.argmin(wins)) if not wins.all() else len(wins)
        best = int(above[stop - 1]) if stop else None
        if best is not None:
            _, g_low, _ = _bounds(curve, best, level)
            reason = (
                f"{finding}; fused wins beyond {band} above the current default {c} up to Dff {best} (lower bound "
                f"{g_low:.4f} there, {at} CI). Raise it to {best}, the largest multiple of {grid} up to which it does"
            )
            reason += f"; Dff above {hi} are unmeasured." if best + grid > hi else "."
            action = ("raise", best, reason)
    if action is not None and withhold:
        return Decision("keep", c, f"{action[2]} Withheld: {withhold}", keep_line)
    if action is not None:
        return Decision(action[0], action[1], action[2], f"{cap_env}={action[1]}")
    if high < low_band or c < lo:
        why = f"no measured Dff at or below {c}" if c < lo else "fallback wins, but no smaller Dff was measured"
        return Decision("keep", c, f"{finding}; {evidence}; {why}, so it stays.", keep_line)
    if low >= low_band and high <= high_band:
        verdict = f"inside {band}: the two paths are equivalent there"
    elif low > high_band:
        verdict = f"above {band}, but no larger multiple of {grid} within the measured range shows fused winning"
    else:
        verdict = f"which cannot tell it from {band}"
    decide = _to_decide(curve, min(max(c, lo), hi), margin, level, rounds)
    return Decision("keep", c, f"{finding}; {evidence}, {verdict}. It stays; {decide}.", keep_line)


def family_curve(summary: pd.DataFrame, positions: np.ndarray, interpolation: str) -> tuple[Curve, np.ndarray]:
    """The curve of a family's valid points (sorted by Dff) and the rounds per arm behind each curve point.

    Two points of one family can share a Dff: a command sweep of two checkpoints with the same expert size (say
    qwen3-30b-a3b and its VL variant, both 768), or an mlxcel CSV without d_model. They become one curve point: the
    fixed-effect (inverse-variance weighted) mean of their ln ratios, its standard error 1/sqrt(Σ 1/se²), the smaller
    of their degrees of freedom (conservative) and the sum of their rounds."""
    rows = summary.iloc[positions]
    dffs = rows["dff"].to_numpy(float)
    theta, se, df = (pd.to_numeric(rows[c]).to_numpy(float) for c in ("ln_estimate", "se", "df"))
    rounds = np.minimum(rows["n_fused"].to_numpy(int), rows["n_fallback"].to_numpy(int))
    unique = np.unique(dffs)
    if len(unique) < len(dffs):
        weight = 1.0 / se**2
        groups = [dffs == d for d in unique]
        theta = np.array([np.sum(weight[g] * theta[g]) / np.sum(weight[g]) for g in groups])
        se = np.array([1.0 / np.sqrt(np.sum(weight[g])) for g in groups])
        df = np.array([np.min(df[g]) for g in groups])
        rounds = np.array([np.sum(rounds[g]) for g in groups])
        dffs = unique
    return Curve(dffs, theta, se, df, interpolation), rounds


def deciding_families(families: Sequence[FamilyDecision]) -> list[FamilyDecision]:
    """The families allowed to set the overall cap.

    A `layer` family measures the kernels at a fixed shape, so when a run has any, they decide; whole-model
    `decode` (or `command`) points then only show the effect on tok/s. A family also needs two valid points to locate a
    crossover: a single point says which path won there, not where the paths cross. If no family qualifies, all do.
    """
    kernel = [f for f in families if f.family.startswith("layer")] or list(families)
    located = [f for f in kernel if f.valid_points >= 2]
    return located or kernel


def decide(
    summary: pd.DataFrame,
    current_default: int | None,
    grid: int = DEFAULT_GRID,
    interpolation: str = "linear",
    confidence: float = CONFIDENCE,
    cap_env: str = DEFAULT_CAP_ENV,
    margin: float = MARGIN,
    withhold: str = "",
) -> DecisionResult:
    """Crossover and decision per shape family, then overall (the smallest deciding family cap)."""
    labels = family_labels(summary).to_numpy()
    valid = summary["verdict"].isin(DECIDED).to_numpy() if len(summary) else np.array([], bool)
    staged = []
    for family in dict.fromkeys(labels):
        positions = np.flatnonzero((labels == family) & valid)
        positions = positions[np.argsort(summary["dff"].to_numpy()[positions], kind="stable")]
        curve, rounds = family_curve(summary, positions, interpolation)
        staged.append((family, curve, rounds, find_crossover(curve, confidence)))
    draft = [FamilyDecision(f, (), c, Decision("keep", None, "", None), len(k.dffs)) for f, k, _, c in staged]
    n_deciding = len(deciding_families(draft)) if draft else 1
    policy_confidence = 1.0 - (1.0 - confidence) / n_deciding
    families = []
    for family, curve, rounds, crossover in staged:
        decision = recommend(
            curve, crossover, current_default, grid, cap_env, confidence, margin, policy_confidence, rounds, withhold
        )
        all_rows = tuple(int(i) for i in np.flatnonzero(labels == family))
        families.append(FamilyDecision(family, all_rows, crossover, decision, len(curve.dffs)))
    if not families:
        empty = find_crossover(Curve(np.array([]), np.array([]), np.array([]), np.array([]), interpolation))
        curve = Curve(np.array([]), np.array([]), np.array([]), np.array([]), interpolation)
        return DecisionResult((), empty, recommend(curve, empty, current_default, grid, cap_env, confidence, margin))
    candidates = deciding_families(families)
    binding = min(
        candidates, key=lambda f: math.inf if f.decision.recommended_cap is None else f.decision.recommended_cap
    )
    return DecisionResult(tuple(families), binding.crossover, _overall(binding, candidates, current_default))


def _overall(binding: FamilyDecision, candidates: Sequence[FamilyDecision], current_default: int | None) -> Decision:
    """One cap must serve every deciding family, so the smallest family cap wins (a raise needs every family)."""
    decision = binding.decision
    if len(candidates) == 1 or decision.recommended_cap is None:
        return decision
    if current_default is not None and decision.action != "set":
        cap = decision.recommended_cap
        action = "keep" if cap == current_default else ("raise" if cap > current_default else "lower")
        decision = Decision(action, cap, decision.reason, decision.apply)
    caps = {f.decision.recommended_cap for f in candidates}
    who = (
        f"All {len(candidates)} deciding families give the same cap; the reason of {binding.family} follows"
        if len(caps) == 1
        else f"The shape family {binding.family} sets the smallest cap"
    )
    return Decision(
        decision.action,
        decision.recommended_cap,
        f"{who} (policy intervals Bonferroni-corrected for {len(candidates)} deciding families). {decision.reason}",
        decision.apply,
    )


# --- JSON ---------------------------------------------------------------------------------------------------------


def _number(value: float | None, digits: int) -> float | None:
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
            {
                "dff": round(x.dff, 1),
                "direction": x.direction,
                "between": list(x.between),
                "ci_low": _number(x.ci_low, 1),
                "ci_high": _number(x.ci_high, 1),
            }
            for x in c.crossings
        ],
    }


def point_json(row: pd.Series, family: str) -> dict[str, object]:
    return {
        "model": str(row["model"]),
        "dff": int(row["dff"]),
        "family": family,
        "fallback_tok_s": _number(row["fallback_tok_s"], 4),
        "fused_tok_s": _number(row["fused_tok_s"], 4),
        "ratio": _number(row["ratio"], 5),
        "estimate": _number(row["estimate"], 5),
        "ci_low": _number(row["ci_low"], 5),
        "ci_high": _number(row["ci_high"], 5),
        "method": str(row["method"]) if isinstance(row["method"], str) else "",
        "verdict": str(row["verdict"]),
        "unstable": bool(row["unstable"]),
        "n_fallback": int(row["n_fallback"]),
        "n_fused": int(row["n_fused"]),
        "null_ratio": _number(row["null_ratio"], 5),
        "outliers": str(row["outliers"]) if isinstance(row["outliers"], str) else "",
        "reason": str(row["reason"]),
        **(dispatch_json(row) if isinstance(row.get("dispatch"), str) and row["dispatch"] else {}),
    }


def _optional(row: pd.Series, column: str) -> object:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def dispatch_json(row: pd.Series) -> dict[str, object]:
    """What the dispatch verification and the token counts say about a command-workload point
    (harness.dispatch.POINT_FIELDS): `dispatch` (verified | declined | predicted | unverified), the parity
    figures, tokens per arm. Points of built-in workloads have none of these."""
    out: dict[str, object] = {"dispatch": str(row["dispatch"])}
    for column in ("dispatch_note", "parity_class"):
        out[column] = str(_optional(row, column) or "")
    for column in ("parity_calls", "parity_calls_over"):
        value = _optional(row, column)
        out[column] = None if value is None else int(value)
    for column in ("fused_vs_ref_worst", "fused_vs_ref_median", "fused_vs_truth_worst", "fused_vs_truth_median"):
        value = _optional(row, column)
        out[column] = None if value is None or not math.isfinite(float(value)) else float(f"{float(value):.4g}")
    for column in ("tokens_fallback", "tokens_fused"):
        value = _optional(row, column)
        out[column] = None if value is None else _number(float(value), 1)
    out["tokens_differ"] = str(_optional(row, "tokens_differ")).lower() in ("true", "1")
    return out


def decision_json(summary: pd.DataFrame, result: DecisionResult, **settings: object) -> dict[str, object]:
    """The machine-readable decision: what `crossover --json` prints and the report's hidden block records."""
    labels = family_labels(summary)
    d = result.decision
    out = {
        **crossover_json(result.crossover),
        "points": [point_json(row, str(labels.iloc[i])) for i, (_, row) in enumerate(summary.iterrows())],
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
