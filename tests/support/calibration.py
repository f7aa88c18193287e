"""Run the decision engine on SYNTHETIC simulated sweeps (tests/support/simulation.py) and score it against the known
truth.

Shared by tests/analysis/decision/test_calibration.py; nothing is written anywhere. `python -m
tests.support.calibration` prints the whole calibration table (regime × rounds → coverage, action rate, power) with
larger replicate counts.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.analysis.comparison.regression import judge_decision
from harness.analysis.decision.curve import Curve
from harness.analysis.decision.decide import StagedFamily, decide_curves
from harness.analysis.decision.decision_record import Decision, DecisionResult
from harness.analysis.decision.rounds_hint import BUDGET_ROUNDS
from harness.analysis.points import sweep_drift
from harness.analysis.points.stats import CONFIDENCE, FULL_PRECISION_FLOOR, Comparison, estimate_family, ratio_interval
from harness.analysis.points.sweep_drift import estimate_in_passes
from harness.policy import Policy
from tests.support.simulation import AR_INNOVATION, AR_RHO, DENSE, SPARSE, Regime, SimulatedSweeps, draw_truth, simulate

CURRENT_DEFAULT = 8192


@dataclass(frozen=True)
class Score:
    sweeps: int
    point_coverage: float  # share of per-point intervals holding the true ratio
    crossover_coverage: float  # share of family crossover intervals holding the true crossover (NaN: flat truth)
    action_rate: float  # share of sweeps whose overall decision is not `keep`
    raise_rate: float  # share of sweeps whose overall decision is `raise`
    false_action: float  # share of sweeps with a raise or lower the truth does not support (_false_action)

    def mc_error(self, share: float) -> float:
        """Monte-Carlo standard error of a share estimated from this many sweeps."""
        return math.sqrt(max(share * (1 - share), 0.0) / self.sweeps) if math.isfinite(share) else math.nan


def _in_passes(sim: SimulatedSweeps) -> tuple[Comparison, np.ndarray, np.ndarray | None]:
    paired = np.full(sim.truth.shape, sim.interleaved or sim.by_pass)
    first = np.full(sim.truth.shape, sim.first_pass or 0)
    return estimate_in_passes(estimate_family, sim.fused, sim.fallback, paired, FULL_PRECISION_FLOOR, first)


def estimate(sim: SimulatedSweeps) -> tuple[Comparison, np.ndarray | None]:
    """Every point's comparison and each family's residual test (None: one pass), exactly as the summary runs them
    (sweep_drift.estimate_in_passes around stats.estimate_family: two passes centred, drift-corrected, widened and
    tested)."""
    comparison, _, drift_p = _in_passes(sim)
    return comparison, drift_p


def _slowed(sim: SimulatedSweeps, flagged: np.ndarray) -> list[list[tuple[float, float]]]:
    """Per sweep and family, the share of runs the outlier screen dropped and their median ln deviation from the
    arm's median: what the summary's dropped field tells the rounds hint (decide._slowed reads it there)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dev = np.stack([y - np.nanmedian(y, axis=-1, keepdims=True) for y in (sim.fused, sim.fallback)])
    sweeps, families = sim.truth.shape[:2]
    out = []
    for s in range(sweeps):
        row = []
        for f in range(families):
            found = dev[:, s, f][flagged[:, s, f]]
            row.append((found.size / flagged[:, s, f].size, float(np.median(found))) if found.size else (0.0, 0.0))
        out.append(row)
    return out


def pass_means(sim: SimulatedSweeps, flagged: np.ndarray) -> np.ndarray | None:
    """Each pass's own estimate of every point's ln ratio (sweeps, families, points, 2): the mean of its rounds'
    y_fused − y_fallback, the runs the estimate dropped left out; None for a one-pass sweep."""
    if sim.first_pass is None:
        return None
    d = np.where(flagged.any(axis=0), np.nan, sim.fused - sim.fallback)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a pass whose every run was dropped: NaN
        return np.stack([np.nanmean(d[..., : sim.first_pass], -1), np.nanmean(d[..., sim.first_pass :], -1)], -1)


def replicated(
    result: DecisionResult, passes: np.ndarray, grid: np.ndarray, share: float, margin: float = 0.01
) -> bool:
    """The replication rule measured for issue 29 (docs/design.md §7, a negative result, not in the decision): a
    raise or lower stands only when, at every point a family's move was tested at and passed, each pass on its own
    (passes: one sweep's (families, points, 2)) lies beyond 1 ± share·δ on the move's side (a pass without runs
    left: not replicated). A raise needs every family that raised to replicate, a lower one family that lowered."""
    action = result.decision.action
    if action not in ("raise", "lower"):
        return True
    question, sign = ("fused", 1.0) if action == "raise" else ("fallback", -1.0)
    shown = []
    for f, family in enumerate(result.families):
        if family.decision.action != action:
            continue
        tests = family.decision.tests
        tested = [int(np.flatnonzero(grid == t.dff)[0]) for t in tests if t.question == question and t.passed]
        both = sign * passes[f, tested] > math.log1p(share * margin)
        shown.append(bool(np.all(both)))
    return all(shown) if action == "raise" else any(shown)


def run_engine(
    sim: SimulatedSweeps,
    rounds: int,
    current_default: int | None | Sequence[int | None] = CURRENT_DEFAULT,
    replication: float | None = None,
    policy: Policy = Policy(),
    one_visit_rule: bool = True,
    one_round_rule: bool = True,
    hint: bool = False,
) -> list[DecisionResult]:
    """The engine on every simulated sweep: estimate_family per family (exactly what the summary runs), then
    decide_curves on the families' curves (exactly what `crossover` runs). `current_default`: one for every sweep,
    or one per sweep (the check gate decides each current sweep at its baseline's cap). `replication` (a share of
    δ): the replication rule (replicated) applied after, an unreplicated move turned into keep; None: the engine
    alone. `policy`: the decision policy (its margin δ: a from-null margin, scripts/null_margin_calibration.py).
    `one_visit_rule` False: points measured in one visit, not interleaved, decide as before issue 36 (a move is not
    withheld), to measure what the rule changed; `one_round_rule` False: likewise for passes of one round. `hint`:
    simulate each keep's rounds hint (rounds_hint: the sweeps' drift bound factors and passes as the summary records
    them; off by default, since only hint_calibration reads it)."""
    sweeps, families, points = sim.truth.shape
    comparison, flagged, drift_p = _in_passes(sim)
    passes = pass_means(sim, flagged) if replication is not None else None
    # what decide_curves withholds a move for (sweep_drift.unchecked_drift, cap_move.recommend's short_passes)
    unchecked = sweep_drift.one_visit_words() if one_visit_rule and not sim.interleaved and not sim.first_pass else ""
    short = one_round_rule and sim.first_pass is not None and sim.first_pass < sweep_drift.MIN_PASS_ROUNDS
    bound = np.broadcast_to(comparison.pass_bound, comparison.se.shape)
    slowed = _slowed(sim, flagged)
    grid_passes = 2 if sim.first_pass else 1  # passes over the grid, as the rounds hint simulates them
    results = []
    for s in range(sweeps):
        staged = []
        for f in range(families):
            keep = np.isfinite(comparison.se[s, f])
            curve = Curve(
                dffs=sim.grid[keep].astype(float),
                theta=comparison.theta[s, f, keep],
                se=comparison.se[s, f, keep],
                df=comparison.df[s, f, keep],
            )
            staged.append(
                StagedFamily(
                    family=f"layer family {f}",
                    curve=curve,
                    rounds=np.full(keep.sum(), rounds),
                    unchecked=unchecked,
                    short_passes=short,
                    bound=bound[s, f, keep],
                    passes=grid_passes,
                    slowed=slowed[s][f],
                )
            )
        p = None if drift_p is None else sweep_drift.combined([float(x) for x in drift_p[s]])
        default = current_default[s] if isinstance(current_default, Sequence) else current_default
        result = decide_curves(staged, default, policy, table=False, sweep_drift=p, hint=hint)
        if passes is not None and not replicated(result, passes[s], sim.grid, replication or 0.0):
            result = replace(result, decision=replace(result.decision, action="keep", recommended_cap=default))
        results.append(result)
    return results


def _point_coverage(sim: SimulatedSweeps) -> float:
    comparison, _ = estimate(sim)
    _, low, high = ratio_interval(comparison.theta, comparison.se, comparison.df, CONFIDENCE)
    truth = np.exp(sim.truth)
    valid = np.isfinite(low)
    return float(np.mean(((low <= truth) & (truth <= high))[valid]))


def _false_action(sim: SimulatedSweeps, s: int, result: DecisionResult, margin: float = 0.01) -> bool:
    """A raise that sends to fused a measured point where fused does not truly win beyond δ (in any family), or a
    lower triggered at a point (the largest measured Dff ≤ the current default) where fallback does not truly win
    beyond δ in any family."""
    cap = result.decision.recommended_cap
    ratio = np.exp(sim.truth[s])
    if result.decision.action == "raise" and cap is not None:
        moved = (sim.grid > CURRENT_DEFAULT) & (sim.grid <= cap)
        return bool(np.any(ratio[:, moved] <= 1 + margin))
    if result.decision.action == "lower":
        trigger = np.flatnonzero(sim.grid <= CURRENT_DEFAULT)[-1]
        return bool(np.all(ratio[:, trigger] >= 1 - margin))
    return False


def _crossover_coverage(sim: SimulatedSweeps, results: list[DecisionResult]) -> float:
    """Share of family crossover intervals holding the true crossover, over crossovers inside the measured range
    (NaN: none, a flat truth)."""
    inside = (sim.crossover > sim.grid[0]) & (sim.crossover < sim.grid[-1])
    covered = [
        family.crossover.ci_low <= sim.crossover[s, f] <= family.crossover.ci_high
        for s, result in enumerate(results)
        for f, family in enumerate(result.families)
        if inside[s, f]
    ]
    return float(np.mean(covered)) if covered else math.nan


def score(regime: Regime, rounds: int, sweeps: int, seed: int) -> Score:
    sim = simulate(regime, rounds, sweeps, seed)
    results = run_engine(sim, rounds)
    covered = _crossover_coverage(sim, results)
    actions = [r.decision.action for r in results]
    return Score(
        sweeps,
        _point_coverage(sim),
        covered,
        float(np.mean([a != "keep" for a in actions])),
        float(np.mean([a == "raise" for a in actions])),
        float(np.mean([_false_action(sim, s, r) for s, r in enumerate(results)])),
    )


@dataclass(frozen=True)
class CheckPairs:
    """`check`'s decision rule (regression.judge_decision) on SYNTHETIC sweep pairs, baseline then current: the share
    of pairs it fails; of pairs whose current truth does not contradict the baseline's decision (no family truly
    loses beyond δ at the largest measured Dff at or below the baseline's cap), the share it fails anyway (false
    fails); of pairs whose current truth does contradict it, the share it fails (power; NaN: no such pair)."""

    pairs: int
    fails: float
    false_fails: float
    contradicted: float  # share of pairs whose current truth contradicts the baseline's decision
    detected: float

    def words(self) -> str:
        power = "no pair's truth contradicts" if math.isnan(self.detected) else f"detected {self.detected:.3f}"
        return (
            f"fails {self.fails:.3f}, false fails {self.false_fails:.3f}; truth contradicts in "
            f"{self.contradicted:.3f}, {power}"
        )


def _take(sim: SimulatedSweeps, rows: slice) -> SimulatedSweeps:
    """The sweeps `rows` of a simulated batch (the baselines or the currents of interleaved pairs)."""
    return replace(
        sim, fused=sim.fused[rows], fallback=sim.fallback[rows], truth=sim.truth[rows], crossover=sim.crossover[rows]
    )


def check_pairs(
    regime: Regime,
    rounds: int,
    pairs: int,
    seed: int,
    moved: float = 1.0,
    default: int = CURRENT_DEFAULT,
    margin: float = 0.01,
) -> CheckPairs:
    """`check`'s decision rule on `pairs` sweep pairs: the baseline's truth drawn from the regime, the current's the
    same curve a·(C/d − 1) with its crossover C multiplied by `moved` (1: the same truth). Each baseline is decided at
    `default`; each current at `default` and at its baseline's recommended cap, exactly as check_runs does."""
    rng = np.random.default_rng(seed)
    ln_ratio, crossover = draw_truth(regime, pairs, rng)
    if regime.flat:
        later = ln_ratio
    else:
        slope = ln_ratio[..., :1] / (crossover[..., None] / regime.grid[0] - 1.0)  # a of a·(C/d − 1)
        later = slope * (moved * crossover[..., None] / regime.grid - 1.0)
    both = (np.stack([ln_ratio, later], axis=1).reshape(2 * pairs, *ln_ratio.shape[1:]), np.repeat(crossover, 2, 0))
    sim = simulate(regime, rounds, 2 * pairs, seed + 1, truth=both)
    before = run_engine(_take(sim, slice(0, None, 2)), rounds, default)
    current = _take(sim, slice(1, None, 2))
    after = run_engine(current, rounds, default)
    caps = [r.decision.recommended_cap for r in before]
    at_cap = run_engine(current, rounds, caps)
    failed, truly = [], []
    for i in range(pairs):
        findings = judge_decision(before[i], at_cap[i] if caps[i] is not None else None, after[i], default, margin)
        failed.append(bool(findings.contradicted))
        below = np.flatnonzero(sim.grid <= caps[i]) if caps[i] is not None else np.array([], int)
        # beyond δ by more than rounding: a truth built to lie on the margin's edge does not contradict
        truly.append(bool(below.size) and bool(np.any(later[i, :, below[-1]] < math.log1p(-margin) - 1e-9)))
    fails, truth = np.array(failed), np.array(truly)
    return CheckPairs(
        pairs,
        float(fails.mean()),
        float(fails[~truth].mean()) if (~truth).any() else math.nan,
        float(truth.mean()),
        float(fails[truth].mean()) if truth.any() else math.nan,
    )


def _edge(crossover: float, ratio: float, at: int) -> tuple[float, float]:
    """(C, a) of the curve a·(C/d − 1) that crosses 1 at `crossover` and has `ratio` at Dff `at`."""
    return crossover, math.log(ratio) / (crossover / at - 1.0)


_ISSUE_EDGE = _edge(11226.0, 1.01, 8192)  # issue 35: fused ≈ +1% at 8192, cap 4096 (9 of 20 pairs failed)
_FALLBACK_EDGE = _edge(8192 * (1 + math.log(0.99) / 0.06), 0.99, 8192)  # fallback wins by exactly δ at the cap

# `check`'s calibration: name → (regime, crossover multiplier of the current truth, default in force). Same truth:
# drawn curved truths, flat truths, and truths on the margin's edge on either side. Moved: the drawn truths with
# their crossover 25% lower, and a crossover 25% above the cap moved to 25% below it.
CHECK_REGIMES: dict[str, tuple[Regime, float, int]] = {
    "same truth, curved (drawn), cap 8192": (Regime("pairs", SPARSE), 1.0, 8192),
    "same truth, flat, cap 8192": (Regime("pairs flat", SPARSE, flat=True), 1.0, 8192),
    "same truth, fused +1% at 8192, cap 4096": (
        Regime("edge", SPARSE, crossover=(_ISSUE_EDGE[0],) * 2, slope=(_ISSUE_EDGE[1],) * 2),
        1.0,
        4096,
    ),
    "same truth, fused −1% at 8192, cap 8192": (
        Regime("edge", SPARSE, crossover=(_FALLBACK_EDGE[0],) * 2, slope=(_FALLBACK_EDGE[1],) * 2),
        1.0,
        8192,
    ),
    "crossover moved 25% down (drawn), cap 8192": (Regime("pairs", SPARSE), 0.75, 8192),
    # the crossover 25% above the cap (10240) moved to 25% below it (6144): how much fallback then wins at the cap
    # depends on the curve's slope, drawn, or set so that it wins by 2% or 3% there
    "crossover 10240 → 6144 across cap 8192": (Regime("across", SPARSE, crossover=(10240.0,) * 2), 0.6, 8192),
    "crossover 10240 → 6144, fused −2% at 8192": (
        Regime("across", SPARSE, crossover=(10240.0,) * 2, slope=(-math.log(0.98) / 0.25,) * 2),
        0.6,
        8192,
    ),
    "crossover 10240 → 6144, fused −3% at 8192": (
        Regime("across", SPARSE, crossover=(10240.0,) * 2, slope=(-math.log(0.97) / 0.25,) * 2),
        0.6,
        8192,
    ),
}


# --- protocols: how a sweep spends its rounds, scored on the decision it reaches --------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a protocol did with each simulated sweep: its decision and the runs per arm it spent (all points and
    families together)."""

    results: list[DecisionResult]
    runs: np.ndarray  # (sweeps,)


@dataclass(frozen=True)
class Protocol:
    """A way to measure and decide: `run` gets simulated sweeps of `max_rounds` rounds per point (the most it may
    use; a protocol that stops early reads a prefix of a point's rounds, in time order) and returns its Outcome."""

    name: str
    max_rounds: int
    run: Callable[[SimulatedSweeps], Outcome]


def fixed(
    rounds: int, replication: float | None = None, one_visit_rule: bool = True, one_round_rule: bool = True
) -> Protocol:
    """The fixed protocol: `rounds` rounds at every point, then one decision (`replication`: with the replication
    rule at that share of δ, run_engine; named `fixed n r<share>`; `one_visit_rule` False: named `fixed n 1v-off`,
    `one_round_rule` False: `fixed n 1r-off`)."""

    def run(sim: SimulatedSweeps) -> Outcome:
        results = run_engine(
            sim, rounds, replication=replication, one_visit_rule=one_visit_rule, one_round_rule=one_round_rule
        )
        return Outcome(results, np.full(sim.truth.shape[0], rounds * np.prod(sim.truth.shape[1:])))

    name = (
        f"fixed {rounds}"
        + ("" if replication is None else f" r{replication:g}")
        + ("" if one_visit_rule else " 1v-off")
        + ("" if one_round_rule else " 1r-off")
    )
    return Protocol(name, rounds, run)


@dataclass(frozen=True)
class ProtocolScore:
    """A protocol on one regime: runs per decision, how often it acts wrongly, its power, its crossover coverage."""

    protocol: str
    regime: str
    sweeps: int
    runs: float  # mean runs per arm per decision
    wrong_action: float  # a raise or lower the truth does not support (_false_action), or a lower past a clear win
    over_lower: float  # a lower that switches a measured point where fused truly wins beyond δ in every family
    power: float  # share of sweeps that take the right action, among those whose truth calls for one (NaN: none)
    actionable: int  # sweeps whose truth calls for a raise or a lower
    crossover_coverage: float  # NaN: flat truth
    action_rate: float
    # share of sweeps whose drift the trend could not fit (sweep_drift: unusable, keep); NaN: measured in one pass,
    # where no residual test runs
    unusable: float = math.nan
    median_width: float = math.nan  # median Dff width of the closed crossover intervals (NaN: none closed)
    closed: float = math.nan  # share of crossover intervals closed at both ends (NaN: flat truth)

    def mc_error(self, share: float, count: int | None = None) -> float:
        """Monte-Carlo standard error of a share estimated from `count` sweeps (default: all of them)."""
        return math.sqrt(max(share * (1 - share), 0.0) / (count or self.sweeps))


def right_action(sim: SimulatedSweeps, s: int, margin: float = 0.01) -> str:
    """What the truth of sweep s calls for at CURRENT_DEFAULT: `lower` when some family truly loses beyond δ at the
    largest measured Dff ≤ the default, `raise` when every family truly wins beyond δ at the first measured Dff above
    it, else `keep`."""
    ratio = np.exp(sim.truth[s])
    at = np.flatnonzero(sim.grid <= CURRENT_DEFAULT)
    above = np.flatnonzero(sim.grid > CURRENT_DEFAULT)
    if at.size and np.any(ratio[:, at[-1]] < 1 - margin):
        return "lower"
    if above.size and np.all(ratio[:, above[0]] > 1 + margin):
        return "raise"
    return "keep"


def lowered_past_a_win(sim: SimulatedSweeps, s: int, result: DecisionResult, margin: float = 0.01) -> bool:
    """A lower whose cap sends to fallback a measured point where fused truly wins beyond δ in every family."""
    cap = result.decision.recommended_cap
    if result.decision.action != "lower" or cap is None:
        return False
    switched = (sim.grid > cap) & (sim.grid <= CURRENT_DEFAULT)
    return bool(np.any(np.all(np.exp(sim.truth[s][:, switched]) > 1 + margin, axis=0)))


def wrong_action(sim: SimulatedSweeps, s: int, result: DecisionResult) -> bool:
    """A raise or lower the truth of sweep s does not support, or a lower past a clear fused win."""
    return _false_action(sim, s, result) or lowered_past_a_win(sim, s, result)


def score_protocol(regime: Regime, protocol: Protocol, sweeps: int, seed: int) -> ProtocolScore:
    """The protocol on `sweeps` simulated sweeps of the regime (truths drawn from the regime, seeded)."""
    sim = simulate(regime, protocol.max_rounds, sweeps, seed)
    outcome = protocol.run(sim)
    results = outcome.results
    covered = _crossover_coverage(sim, results)
    right = [right_action(sim, s) for s in range(sweeps)]
    over = [lowered_past_a_win(sim, s, r) for s, r in enumerate(results)]
    wrong = [wrong_action(sim, s, r) for s, r in enumerate(results)]
    hits = [r.decision.action == want for r, want in zip(results, right, strict=True) if want != "keep"]
    return ProtocolScore(
        protocol.name,
        regime.name,
        sweeps,
        float(np.mean(outcome.runs)),
        float(np.mean(wrong)),
        float(np.mean(over)),
        float(np.mean(hits)) if hits else math.nan,
        len(hits),
        covered,
        float(np.mean([r.decision.action != "keep" for r in results])),
        float(np.mean([r.decision.sweep_drift is not None for r in results])) if sim.first_pass else math.nan,
        *_widths(sim, results),
    )


def _widths(sim: SimulatedSweeps, results: list[DecisionResult]) -> tuple[float, float]:
    """(median width of the closed crossover intervals, share closed) over families whose true crossover lies inside
    the measured range ((NaN, NaN): none, a flat truth)."""
    inside = (sim.crossover > sim.grid[0]) & (sim.crossover < sim.grid[-1])
    widths = [
        family.crossover.ci_high - family.crossover.ci_low
        for s, result in enumerate(results)
        for f, family in enumerate(result.families)
        if inside[s, f]
    ]
    if not widths:
        return math.nan, math.nan
    finite = [w for w in widths if math.isfinite(w)]
    return (float(np.median(finite)) if finite else math.nan), len(finite) / len(widths)


def protocol_scores(
    regimes: list[Regime], protocols: list[Protocol], sweeps: int, seed: int = 0
) -> Iterator[ProtocolScore]:
    """Every regime × protocol scored, in that order (as each is scored). A regime's seed follows its name, and a
    regime measured in two passes gets its one-pass twin's: the same truths, noise and drift, measured in another
    order; the protocol's rounds are added, so each n draws its own truths."""
    for regime in regimes:
        k = zlib.crc32(regime.name.removesuffix(TWO_PASSES).encode()) % 1000
        for protocol in protocols:
            yield score_protocol(regime, protocol, sweeps, seed + 1000 * k + protocol.max_rounds)


def protocol_table(regimes: list[Regime], protocols: list[Protocol], sweeps: int, seed: int = 0) -> Iterator[str]:
    """One line per regime × protocol (as each is scored): runs per decision, wrong-action rate, power, over-lowers,
    coverage (protocol_scores' seeds)."""
    yield (
        f"{'regime':44} {'protocol':9} {'runs':>5} {'wrong':>6} {'over-low':>8} {'power':>6} {'(n)':>5} "
        f"{'cross cov':>9} {'actions':>7} {'unusable':>8} {'width':>6} {'closed':>6}"
    )
    for sc in protocol_scores(regimes, protocols, sweeps, seed):
        yield (
            f"{sc.regime:44} {sc.protocol:9} {sc.runs:5.0f} {sc.wrong_action:6.3f} {sc.over_lower:8.3f} "
            f"{sc.power:6.3f} {sc.actionable:5d} {sc.crossover_coverage:9.3f} {sc.action_rate:7.3f} "
            f"{sc.unusable:8.3f} {sc.median_width:6.0f} {sc.closed:6.3f}"
        )


def _share(x: float, digits: int = 3) -> str:
    """A share as docs/design.md's tables write it: 0, 1 or .xyz; – where it is undefined (NaN)."""
    if math.isnan(x):
        return "–"
    text = f"{x:.{digits}f}"
    return text[0] if float(text) in (0.0, 1.0) else text.removeprefix("0")


def markdown_table(regimes: list[Regime], rounds: list[int], sweeps: int, seed: int = 0) -> Iterator[str]:
    """Issue 36's regime × n table for docs/design.md §7: a markdown row per regime (as each is scored), each cell
    the fixed protocol at every n of `rounds` (protocol_scores' seeds, so the plain table's figures): false actions
    (wrong_action: on a flat truth any raise or lower), power, crossover coverage, median width of the closed
    crossover intervals (their share closed), unusable (– in one pass), runs per arm per decision; then a line with
    the Monte-Carlo standard errors the cells carry."""
    yield "| regime | false actions | power | crossover coverage | width (closed) | unusable | runs per arm |"
    yield "|---|---|---|---|---|---|---|"
    scored: list[ProtocolScore] = []
    for regime in regimes:
        scores = list(protocol_scores([regime], [fixed(n) for n in rounds], sweeps, seed))
        scored += scores
        widths = " ".join("–" if math.isnan(sc.median_width) else f"{sc.median_width:.0f}" for sc in scores)
        closed = " ".join(_share(sc.closed, 2) for sc in scores)
        columns = (
            [sc.wrong_action for sc in scores],
            [sc.power for sc in scores],
            [sc.crossover_coverage for sc in scores],
        )
        cells = [" ".join(map(_share, column)) for column in columns]
        width = "–" if regime.flat else f"{widths} ({closed})"
        unusable = " ".join(_share(sc.unusable) for sc in scores)
        runs = " ".join(f"{sc.runs:.0f}" for sc in scores)
        yield f"| {regime.name} | {' | '.join(cells)} | {width} | {unusable} | {runs} |"
    one = scored[0]
    line = (
        f"n = {' / '.join(map(str, rounds))}; {sweeps} SYNTHETIC sweeps per cell, seed {seed}; Monte-Carlo s.e. "
        f"±{_share(one.mc_error(0.03))} at 3%, ±{_share(one.mc_error(0.10))} at 10%, ±{_share(one.mc_error(0.5))} at "
        "50%"
    )
    if actionable := [sc.actionable for sc in scored if sc.actionable]:
        fewest = min(actionable)
        error = _share(one.mc_error(0.5, fewest))
        line += f"; power over as few as {fewest} sweeps whose truth calls for a move (±{error} at 50%)"
    yield line


# issue 36: each arm's own slow drift (AR(1) ρ = .95 per run, stationary sd 1%) under mlxcel's publishing formats, not
# interleaved: bench_decode.sh file pairs (run r: the fallback file over the grid, then the fused file; each pair a
# pass, paired by pass), the same with every fallback file first, and a sweep CSV (each arm's runs back to back)
DENSE16 = np.arange(1024, 16385, 1024)
SLOW_ONE_PERCENT = {"drift": "per_arm", "own_rho": 0.95, "own_scale": 0.01 / (AR_INNOVATION / math.sqrt(1 - AR_RHO**2))}
MLXCEL_FORMATS = {
    "bench_decode.sh file pairs": {"order": "files", "interleaved": False},
    "bench_decode.sh files, pass not recorded": {"order": "files", "interleaved": False, "file_passes": False},
    "bench_decode.sh arm blocks": {"order": "arm_files", "interleaved": False},
    "sweep CSV": {"interleaved": False},
}
FORMAT_REGIMES = {
    f"sparse {truth} slow drift, {name}": Regime(
        f"sparse {truth} slow drift, {name}", SPARSE, flat=truth == "flat", **SLOW_ONE_PERCENT, **fmt
    )
    for name, fmt in MLXCEL_FORMATS.items()
    for truth in ("flat", "curved")
}

REGIMES = {
    "sparse curved": Regime("sparse curved", SPARSE, crossover=(2000.0, 13000.0)),
    "dense curved": Regime("dense curved", DENSE, crossover=(2000.0, 15000.0)),
    "dense 4 families": Regime("dense 4 families", DENSE, families=4, crossover=(2000.0, 15000.0)),
    "sparse per-arm drift": Regime("sparse per-arm drift", SPARSE, drift="per_arm"),
    "dense per-arm drift": Regime("dense per-arm drift", DENSE, drift="per_arm", crossover=(2000.0, 15000.0)),
    "sparse fused-only drift": Regime("sparse fused-only drift", SPARSE, drift="fused_only"),
    "sparse 15% outliers": Regime("sparse 15% outliers", SPARSE, outlier_rate=0.15),
    "sparse not interleaved": Regime("sparse not interleaved", SPARSE, interleaved=False),
    "sparse flat": Regime("sparse flat", SPARSE, flat=True),
    "dense flat 4 families": Regime("dense flat 4 families", DENSE, families=4, flat=True),
    "sparse flat 15% outliers": Regime("sparse flat 15% outliers", SPARSE, flat=True, outlier_rate=0.15),
    "sparse flat not interleaved": Regime("sparse flat not interleaved", SPARSE, flat=True, interleaved=False),
    # every family clearly wins at the cap 8192 (crossovers 11000–13000, a = .08): the raise's power
    "dense 4 families win at 8192": Regime(
        "dense 4 families win at 8192", DENSE, families=4, crossover=(11000.0, 13000.0), slope=(0.08, 0.08)
    ),
    **FORMAT_REGIMES,
}


TWO_PASSES = ", two passes"  # the suffix of a regime measured in two passes over the grid (sweep_drift)

# issue 29's regimes for the protocol table (scripts/decision_calibration.py): drift of the arms' own on flat truths
# (at the simulation's speed, and slower: ρ = 0.98 per run), curved truths on both grids, 1–3 families, outliers
PROTOCOL_REGIMES = {
    regime.name: regime
    for regime in (
        Regime("sparse flat per-arm drift", SPARSE, flat=True, drift="per_arm"),
        Regime("sparse flat slow per-arm drift", SPARSE, flat=True, drift="per_arm", own_rho=0.98),
        Regime("dense flat per-arm drift", DENSE, flat=True, drift="per_arm"),
        Regime("sparse 3 families flat slow drift", SPARSE, families=3, flat=True, drift="per_arm", own_rho=0.98),
        Regime("sparse flat", SPARSE, flat=True),
        Regime("sparse curved", SPARSE),
        Regime("sparse curved slow per-arm drift", SPARSE, drift="per_arm", own_rho=0.98),
        Regime("dense curved", DENSE, crossover=(2000.0, 15000.0)),
        Regime("sparse 3 families curved", SPARSE, families=3),
        Regime("sparse curved 15% outliers", SPARSE, outlier_rate=0.15),
        # each point's rounds split over two passes over the grid, half a sweep apart (sweep_drift); the same
        # truths as the one-pass regimes above, and a step change of the fused arm half way through a flat sweep
        Regime("sparse flat step 2%", SPARSE, flat=True, step=0.02),
        Regime("sparse flat 15% outliers", SPARSE, flat=True, outlier_rate=0.15),
        Regime("sparse flat per-arm drift, two passes", SPARSE, flat=True, drift="per_arm", order="two_passes"),
        Regime(
            "sparse flat slow per-arm drift, two passes",
            SPARSE,
            flat=True,
            drift="per_arm",
            own_rho=0.98,
            order="two_passes",
        ),
        Regime("dense flat per-arm drift, two passes", DENSE, flat=True, drift="per_arm", order="two_passes"),
        Regime(
            "sparse 3 families flat slow drift, two passes",
            SPARSE,
            families=3,
            flat=True,
            drift="per_arm",
            own_rho=0.98,
            order="two_passes",
        ),
        Regime("sparse flat step 2%, two passes", SPARSE, flat=True, step=0.02, order="two_passes"),
        # a drift of the fused arm that bends (8% by the sweep's end, quadratic in time): more than the sparse grid's
        # linear trend fits, so sweep_drift.drift_trend steps up to a quadratic (issue 36)
        Regime("sparse flat bending drift 8%, two passes", SPARSE, flat=True, bend=0.08, order="two_passes"),
        # quartic in time (40% by the end, most of it in the last fifth: a governor stepping in late): more than the
        # sparse grid's quadratic follows (the residual test: unusable)
        Regime("sparse flat late drift 40%, two passes", SPARSE, flat=True, bend=0.4, bend_power=4, order="two_passes"),
        Regime("sparse flat, two passes", SPARSE, flat=True, order="two_passes"),
        Regime("sparse flat 15% outliers, two passes", SPARSE, flat=True, outlier_rate=0.15, order="two_passes"),
        Regime("sparse curved, two passes", SPARSE, order="two_passes"),
        Regime(
            "sparse curved slow per-arm drift, two passes", SPARSE, drift="per_arm", own_rho=0.98, order="two_passes"
        ),
        Regime("dense curved, two passes", DENSE, crossover=(2000.0, 15000.0), order="two_passes"),
        Regime("sparse 3 families curved, two passes", SPARSE, families=3, order="two_passes"),
        Regime("sparse curved 15% outliers, two passes", SPARSE, outlier_rate=0.15, order="two_passes"),
        # the rounds hint's simulation draws no outliers: its calibration without them (decision_calibration.py --hint)
        Regime("sparse curved no outliers, two passes", SPARSE, outlier_rate=0.0, order="two_passes"),
        *FORMAT_REGIMES.values(),
        # issue 36's dense grid: 16 points (the bound's factor k/χ²ₖ about 2.0), the first pass one round at n = 3
        Regime("dense16 flat per-arm drift, two passes", DENSE16, flat=True, drift="per_arm", order="two_passes"),
        Regime("dense16 flat slow drift, two passes", DENSE16, flat=True, order="two_passes", **SLOW_ONE_PERCENT),
        Regime("dense16 curved, two passes", DENSE16, crossover=(2000.0, 15000.0), order="two_passes"),
        # step-shaped wins: fused +3% up to the crossover, −3% after (3× the margin at the next Dff); their one-pass
        # twins and the sparse grid without slowed runs: what the drift allowance and the outlier screen each cost
        # at 5 rounds (issue 36.5, docs/design.md §7)
        Regime("sparse step 3%, two passes", SPARSE, shape="step", order="two_passes"),
        Regime("dense16 step 3%, two passes", DENSE16, shape="step", crossover=(2000.0, 15000.0), order="two_passes"),
        Regime("sparse step 3%", SPARSE, shape="step"),
        Regime("dense16 step 3%", DENSE16, shape="step", crossover=(2000.0, 15000.0)),
        Regime("sparse step 3% no outliers", SPARSE, shape="step", outlier_rate=0.0),
        Regime("sparse step 3% no outliers, two passes", SPARSE, shape="step", outlier_rate=0.0, order="two_passes"),
        # beyond what the engine was calibrated on: the limits of the drift bound (docs/design.md §7)
        *(
            Regime(f"sparse flat {name} drift, two passes", SPARSE, flat=True, order="two_passes", **kwargs)
            for name, kwargs in (
                ("fused-only", {"drift": "fused_only"}),
                ("per-arm ρ .99", {"drift": "per_arm", "own_rho": 0.99}),
                ("2x per-arm ρ .95", {"drift": "per_arm", "own_rho": 0.95, "own_scale": 2.0}),
                ("2x per-arm ρ .98", {"drift": "per_arm", "own_rho": 0.98, "own_scale": 2.0}),
            )
        ),
    )
}


def table(rounds: tuple[int, ...], sweeps: int) -> list[str]:
    """The calibration table, one line per regime × rounds."""
    lines = [f"{'regime':30} {'n':>3} {'point cov':>9} {'crossover cov':>13} {'actions':>7} {'raises':>6} {'false':>6}"]
    for k, regime in enumerate(REGIMES.values()):
        for n in rounds:
            sc = score(regime, n, sweeps, seed=1000 * k + n)
            lines.append(
                f"{regime.name:30} {n:3d} {sc.point_coverage:9.3f} {sc.crossover_coverage:13.3f} "
                f"{sc.action_rate:7.3f} {sc.raise_rate:6.3f} {sc.false_action:6.3f}"
            )
    return lines


if __name__ == "__main__":
    chosen = tuple(int(a) for a in sys.argv[1:]) or (3, 5, 10, 20, 40)
    print("\n".join(table(chosen, sweeps=400)))


def print_regime_table(
    doc: str, defaults: Sequence[str], header: str, row: Callable[[str, int, int, int], str]
) -> None:
    """A calibration script's command line (--rounds, --sweeps, --seed, --regime …) and its table: `header`, then
    `row(regime, rounds, sweeps, seed)` per regime, printed as each is scored."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--regime", action="append", choices=sorted(REGIMES), help="default: " + ", ".join(defaults))
    args = parser.parse_args()
    print(header)
    for name in args.regime or defaults:
        print(row(name, args.rounds, args.sweeps, args.seed), flush=True)


@dataclass(frozen=True)
class HintScore:
    """The rounds hint of a keep, followed (issue 36): how often it names N, and how often a sweep of the same truth
    measured at N rounds (new noise) then decides at the hinted Dff."""

    keeps: int  # sweeps whose decision was keep with a hint at a Dff (named or withheld)
    named: int  # of those, the hint named N
    followed: int  # of the named, those followed (N up to hint_calibration's limit)
    decided: int  # of the followed, sweeps at N rounds that decided there
    withheld_decided: float  # of the hints withheld (no N named), the share that decided at the limit's rounds
    # of the hints withheld, the mean chance of a decision at the budget they quoted (rounds_hint's simulation):
    # beside withheld_decided, whether withholding was right on average
    withheld_chance: float = math.nan

    def share(self) -> float:
        return self.decided / self.followed if self.followed else math.nan

    def mc_error(self) -> float:
        p = self.share()
        return math.sqrt(p * (1 - p) / self.followed) if self.followed else math.nan


def decided_after(before: Decision, after: Decision) -> bool:
    """Whether a sweep that followed a keep's hint decided: it raises or lowers, or its keep no longer turns on the
    hinted Dff (that point's test passed either way, or another point is now the undecided one) while its passes
    agree and it withheld no move for drift (a withheld move, or data the pass test calls unusable, decide nothing:
    the rounds hint's own simulation, harness.analysis.decision.rounds_hint, counts them alike)."""
    if after.action in ("raise", "lower"):
        return True
    drifted = after.sweep_drift is not None or (
        after.withheld is not None and after.withheld.why in ("aa_drift", "drift_not_excluded")
    )
    return not drifted and after.rounds_dff != before.rounds_dff


def hint_calibration(regime: Regime, rounds: int, sweeps: int, seed: int, limit: int = BUDGET_ROUNDS) -> HintScore:
    """Each sweep of the regime at `rounds` whose decision keeps with a rounds hint; where the hint names N ≤ `limit`
    (default: the most a hint names, measure.max_rounds' default), the same truth measured again at N rounds at every
    point, where it names none at `limit` rounds: decided_after."""
    sim = simulate(regime, rounds, sweeps, seed)
    results = run_engine(sim, rounds, hint=True)
    hinted = [(s, r.decision) for s, r in enumerate(results) if r.decision.action == "keep" and r.decision.rounds_dff]
    named = [(s, d) for s, d in hinted if d.rounds_needed is not None]
    followed = [(s, d) for s, d in named if (d.rounds_needed or 0) <= limit]
    withheld = [(s, d) for s, d in hinted if d.rounds_needed is None]

    def decided_at(n: int, these: list[tuple[int, Decision]], salt: int) -> int:
        if not these:
            return 0
        rows = np.array([s for s, _ in these])
        again = simulate(regime, n, len(rows), seed + 7919 * n + salt, truth=(sim.truth[rows], sim.crossover[rows]))
        return sum(
            decided_after(before, after.decision)
            for (_, before), after in zip(these, run_engine(again, n), strict=True)
        )

    decided = sum(
        decided_at(n, [(s, d) for s, d in followed if d.rounds_needed == n], 0)
        for n in sorted({int(d.rounds_needed or 0) for _, d in followed})
    )
    late = decided_at(limit, withheld, 1) / len(withheld) if withheld else math.nan
    quoted = [d.rounds_chance for _, d in withheld if d.rounds_chance is not None]
    return HintScore(
        len(hinted), len(named), len(followed), decided, late, float(np.mean(quoted)) if quoted else math.nan
    )
