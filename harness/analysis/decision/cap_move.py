"""The policy at one shape family's curve: keep / raise / lower / set the cap, read from a table of candidate caps
on the measured Dff and one-sided tests at the measured points. docs/design.md §7:

At the current cap c ("fused when Dff ≤ cap"), on measured points only (candidate_caps lists, per cap, which measured
points change path and the aggregate effect): **lower** when fallback wins beyond δ at the largest measured Dff ≤ c,
to the largest measured Dff below it where fused is not measurably worse (so no measured point where fused wins is
switched); **raise** when fused wins beyond δ at every measured Dff above c up to the new cap (never past the measured
range); each is a one-sided question, tested one-sided at α (the intervals shown stay two-sided); else **keep**,
saying about how many rounds give an 80% chance of a decision. A straight line across an unmeasured gap never moves
the cap: it is reported as a withheld raise. **set**: no current default was given; the cap to set is the crossover
interval's lower end. A run whose A/A comparison lies beyond the margin gets no raise/lower at all (keep, saying
which was withheld and why): its drift is larger than its noise model.

The decision carries what it found as data (action, cap, the point tests, what was withheld); its reason is rendered
from those values by harness.analysis.decision.decision_words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.analysis.decision import decision_words as words
from harness.analysis.decision.curve import Crossover, Curve, format_ci
from harness.analysis.decision.decision_record import CapOption, Decision, PointTest, Switch, Withheld
from harness.analysis.decision.rounds_hint import BUDGET_ROUNDS, Measured, rounds_to_decide
from harness.analysis.decision.vocabulary import Move, Side, WithheldWhy
from harness.analysis.points.stats import ratio_interval, t_quantile
from harness.analysis.points.sweep_drift import MIN_PASS_ROUNDS, one_round_words
from harness.policy import Policy


def candidate_caps(curve: Curve, current: int | None, policy: Policy) -> tuple[CapOption, ...]:
    """One row per cap that sends a different set of measured points to fused: below the smallest measured Dff,
    then each measured Dff (a cap anywhere up to the next measured Dff selects the same paths for measured models)."""
    if len(curve.dffs) == 0:
        return ()
    current = int(curve.dffs[0]) - 1 if current is None else current
    labels = curve.labels or tuple(f"Dff {int(d)}" for d in curve.dffs)
    total = len(curve.dffs)
    half = t_quantile(policy.confidence, curve.df) * curve.se  # one t quantile per point: the table is built per sweep
    out = []
    for cap in [_below_all(curve, policy.grid), *(int(d) for d in curve.dffs)]:
        moved = np.flatnonzero((curve.dffs > min(cap, current)) & (curve.dffs <= max(cap, current)))
        sign = 1.0 if cap > current else -1.0
        to: Side = "fused" if sign > 0 else "fallback"
        switched = tuple(
            Switch(
                dff=int(curve.dffs[i]),
                model=labels[i],
                to=to,
                effect=math.exp(sign * curve.theta[i]),
                ci_low=math.exp(sign * curve.theta[i] - half[i]),
                ci_high=math.exp(sign * curve.theta[i] + half[i]),
            )
            for i in moved
        )
        if moved.size:
            theta = sign * float(np.sum(curve.theta[moved])) / total
            # the aggregate's se over the t quantile of the fewest degrees of freedom among the switched points
            width = float(np.max(half[moved] / curve.se[moved])) * float(np.sqrt(np.sum(curve.se[moved] ** 2))) / total
            effect, low, high = math.exp(theta), math.exp(theta - width), math.exp(theta + width)
        else:
            effect, low, high = 1.0, 1.0, 1.0
        out.append(CapOption(cap=cap, switched=switched, effect=effect, ci_low=low, ci_high=high))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class _Reading:
    """The one-sided tests at the current cap c, each point once (module docstring): `worse` (fallback wins beyond
    1 − δ, at the lower level) and `better` (fused wins beyond 1 + δ) per measured point; `at` the largest measured
    Dff ≤ c, `above` the measured points above c, `wins` how many of them in a row fused wins at; `tests` the ones
    the policy read, as data: the lower test at `at`, then (when it did not lower) the raise test at each measured
    Dff above c up to the first that fails."""

    worse: np.ndarray
    better: np.ndarray
    at: int | None
    above: np.ndarray
    wins: int
    lowered: bool
    tests: tuple[PointTest, ...]


def _point_tests(
    theta: np.ndarray, se: np.ndarray, df: np.ndarray, policy: Policy, lower_level: float
) -> tuple[np.ndarray, np.ndarray]:
    """(worse, better) per point, any shape: fallback wins beyond 1 − δ at `lower_level`, fused beyond 1 + δ at the
    policy's confidence, each one-sided (the questions the decision asks; the rounds hint's simulated sweeps ask
    them too)."""
    t_low, t_raise = t_quantile(2 * lower_level - 1, df), t_quantile(2 * policy.confidence - 1, df)
    return theta + t_low * se < math.log1p(-policy.margin), theta - t_raise * se > math.log1p(policy.margin)


def _read(curve: Curve, current: int, policy: Policy, lower_level: float) -> _Reading:
    # one-sided questions (does fused win beyond δ at every point a raise switches?), so one-sided tests at α
    levels = (lower_level, policy.confidence)
    t_low, t_raise = t_quantile(2 * lower_level - 1, curve.df), t_quantile(2 * policy.confidence - 1, curve.df)
    worse, better = _point_tests(curve.theta, curve.se, curve.df, policy, lower_level)
    fused_now = np.flatnonzero(curve.dffs <= current)
    above = np.flatnonzero(curve.dffs > current)
    m = int(fused_now[-1]) if fused_now.size else None
    lowered = m is not None and bool(worse[m])
    wins = 0
    while not lowered and wins < above.size and better[above[wins]]:
        wins += 1
    bounds = (np.exp(curve.theta + t_low * curve.se), np.exp(curve.theta - t_raise * curve.se))
    labels = curve.labels or tuple(f"Dff {int(d)}" for d in curve.dffs)

    def test(i: int, question: int) -> PointTest:
        name: Side = "fused" if question else "fallback"
        passed = (worse, better)[question]
        return PointTest(
            dff=int(curve.dffs[i]),
            model=labels[i],
            question=name,
            level=levels[question],
            bound=float(bounds[question][i]),
            passed=bool(passed[i]),
        )

    tests = [test(m, 0)] if m is not None else []
    if not lowered:
        tests += [test(int(i), 1) for i in above[: wins + 1]]
    return _Reading(worse=worse, better=better, at=m, above=above, wins=wins, lowered=lowered, tests=tuple(tests))


def _line_raise(curve: Curve, start: int, policy: Policy) -> tuple[int, int, int] | None:
    """(cap, a, b): the largest grid multiple above `start` up to which the straight line between the measured Dff
    a < cap < b around it still shows fused winning beyond the margin — a suggestion across an unmeasured gap."""
    nxt = np.flatnonzero(curve.dffs > start)
    if not nxt.size or nxt[0] == 0:
        return None
    a, b = int(curve.dffs[nxt[0] - 1]), int(curve.dffs[nxt[0]])
    grid = policy.grid
    above = np.arange(start // grid * grid + grid, b, grid)
    if not above.size:
        return None
    _, low, _ = ratio_interval(*curve.at(above), policy.confidence)
    wins = np.atleast_1d(low) > 1.0 + policy.margin
    stop = int(np.argmin(wins)) if not wins.all() else len(wins)
    return (int(above[stop - 1]), a, b) if stop else None


def _gap_next(crossover: Crossover, a: int, b: int, grid: int) -> int:
    if crossover.gap == (a, b) and crossover.next_dff is not None:
        return crossover.next_dff
    return max(a + grid, min(b - grid, round((a + b) / 2 / grid) * grid))


def _finding(curve: Curve, c: Crossover, confidence: float) -> str:
    """The curve in one sentence (decision_words.finding) from the points and the crossover."""
    where = words.sign_runs(curve.dffs.tolist(), (curve.theta > 0).tolist())
    return words.finding(where, c.outcome, c.dff, len(c.crossings) > 1, format_ci(c), c.gap_text(), confidence)


def _tested(curve: Curve, test: PointTest, margin: float, role: str) -> str:
    i = int(np.flatnonzero(curve.dffs == test.dff)[0])
    return words.tested(test.dff, role, math.exp(curve.theta[i]), test.words(margin))


def _to_decide(
    curve: Curve, i: int, read: _Reading, policy: Policy, lower_level: float, rounds: np.ndarray, sweep: Sweep
) -> tuple[str, int | None, float | None]:
    """The rounds hint of a keep at measured point i (decision_words.rounds_hint), the rounds per arm that give
    an 80% chance of a decision there (None: no number up to rounds_hint.BUDGET_ROUNDS does) and the chance at that
    budget (None: nothing simulated, the point has the budget already or no spread to scale), from simulated fresh
    sweeps of the family (rounds_hint.rounds_to_decide) decided by the tests this decision read: a sweep decides
    when it lowers or raises (a move its passes or `sweep.withhold` would withhold decides nothing) or point i's
    own test passes either way, its passes agreeing."""
    n = int(rounds[i])
    at, above = read.at, (int(read.above[0]) if read.above.size else None)
    bound = np.ones(len(curve.dffs)) if sweep.bound is None else np.asarray(sweep.bound, float)
    slowed, slowdown = sweep.slowed
    measured = Measured(
        theta=curve.theta,
        se=curve.se,
        df=curve.df,
        rounds=np.asarray(rounds),
        bound=bound,
        passes=sweep.passes,
        slowed=slowed,
        slowdown=slowdown,
    )

    def decided(theta: np.ndarray, se: np.ndarray, df: np.ndarray, drifted: np.ndarray, then: int) -> np.ndarray:
        worse, better = _point_tests(theta, se, df, policy, lower_level)
        lowered = worse[:, at] if at is not None else np.zeros(len(theta), bool)
        raised = ~lowered & better[:, above] if above is not None else np.zeros(len(theta), bool)
        held = bool(sweep.withhold) or (sweep.passes == 2 and then // 2 < MIN_PASS_ROUNDS)
        moves = (lowered | raised) & (drifted | held)  # moves the decision would withhold: nothing decided
        settled: np.ndarray = ((lowered | raised) & ~moves) | ((worse[:, i] | better[:, i]) & ~moves & ~drifted)
        return settled

    hint = rounds_to_decide(measured, decided) if measured.usable() and n >= 1 else None
    needed = hint.needed if hint else None
    spread = hint is not None
    chance = hint.chance if hint else 0.0
    drift_seen = sweep.passes >= 2 and bool(np.any(measured.bound > 1.0))
    said = words.rounds_hint(int(curve.dffs[i]), n, needed, spread, BUDGET_ROUNDS, chance, drift_seen)
    return said, needed, (chance if hint and math.isfinite(chance) else None)


@dataclass(frozen=True, kw_only=True)
class Sweep:
    """How the family's points were measured, as the rounds hint simulates the sweep that follows it: the drift
    bound's variance factor in each point's se² (None: none), the passes over the grid, a reason that withholds
    every move (recommend's `withhold`), and the share of runs the outlier screen dropped with their typical slowdown
    (ln)."""

    bound: np.ndarray | None = None
    passes: int = 1
    withhold: str = ""
    slowed: tuple[float, float] = (0.0, 0.0)


def recommend(
    curve: Curve,
    crossover: Crossover,
    current_default: int | None,
    policy: Policy = Policy(),
    *,
    lower_confidence: float | None = None,
    rounds: np.ndarray | None = None,
    withhold: str = "",
    withhold_why: WithheldWhy = "aa_drift",
    table: bool = True,
    short_passes: bool = False,
    sweep: Sweep | None = Sweep(),
) -> Decision:
    """Keep / raise / lower / set for one family from its measured points (module docstring); `withhold` (a
    reason, recorded as `withhold_why`) turns a raise or lower into keep; `table`: attach the candidate-cap table
    (simulations skip it); `rounds`: the rounds per arm behind each point (for a keep's rounds hint, and, with
    `short_passes` — the family was measured in passes and a point's earlier half holds one round — a move read at
    a point of fewer than 2·MIN_PASS_ROUNDS rounds is withheld: its passes cannot bound a drift of one arm).
    Raises are tested at the policy's confidence: a raise needs every family and every point it switches to agree
    (an intersection-union test needs no multiplicity correction); lowers, which any one family can trigger, at
    `lower_confidence`. `sweep`: how the points were measured, for a keep's rounds hint (None: no hint simulated,
    for the engine's own simulations, which read only the action and cap)."""
    caps = candidate_caps(curve, current_default, policy) if table else ()
    if crossover.outcome == "no_points":
        return Decision(action="keep", recommended_cap=current_default, reason=words.NO_POINTS)
    finding = _finding(curve, crossover, policy.confidence)
    lo = int(curve.dffs[0])
    if current_default is None:
        from_interval = math.isfinite(crossover.ci_low)
        cap = int(crossover.ci_low) if from_interval else _below_all(curve, policy.grid)
        return Decision(
            action="set", recommended_cap=cap, reason=words.set_reason(finding, cap, lo, from_interval), caps=caps
        )
    c = current_default
    read = _read(curve, c, policy, lower_confidence or policy.confidence)
    move = _move(curve, read, c, policy)
    if move is not None and not withhold and short_passes and _short(read, curve, rounds):
        withhold, withhold_why = one_round_words(), "drift_not_excluded"
    if move is not None and withhold:
        verb, cap, evidence, _ = move
        held = Withheld(move=verb, cap=cap, why=withhold_why, because=withhold)
        reason = words.withheld_sentence(finding, evidence, held.words())
        return Decision(action="keep", recommended_cap=c, reason=reason, caps=caps, tests=read.tests, withheld=held)
    if move is not None:
        verb, cap, evidence, where = move
        line = _line_raise(curve, cap, policy) if verb == "raise" else None
        gap = (
            "" if line is None else words.straight_line(line[0], line[1:], _gap_next(crossover, *line[1:], policy.grid))
        )
        reason = words.move_reason(finding, evidence, verb, cap, where, gap)
        return Decision(action=verb, recommended_cap=cap, reason=reason, caps=caps, tests=read.tests)
    rounds = np.zeros(len(curve.dffs), int) if rounds is None else rounds
    return _keep(curve, crossover, read, c, policy, lower_confidence or policy.confidence, rounds, sweep, finding, caps)


def _short(read: _Reading, curve: Curve, rounds: np.ndarray | None) -> bool:
    """Whether a point the move passed its test at has fewer rounds than two passes of MIN_PASS_ROUNDS each (unknown
    rounds: yes). Only the points the move reads: a look of --until-decided that adds rounds there lifts it."""
    if rounds is None:
        return True
    at = {int(d): n for d, n in zip(curve.dffs, np.asarray(rounds), strict=True)}
    return any(at.get(t.dff, 0) < 2 * MIN_PASS_ROUNDS for t in read.tests if t.passed)


def _below_all(curve: Curve, grid: int) -> int:
    """The largest grid multiple below every measured Dff."""
    return (int(curve.dffs[0]) - 1) // grid * grid


def _move(curve: Curve, read: _Reading, c: int, policy: Policy) -> tuple[Move, int, str, str] | None:
    """The lower or raise the tests support at cap c, as (move, cap, evidence, where the cap goes); None: neither."""
    if read.lowered:
        # the largest measured Dff where fused is not shown worse: every measured point the lower switches is one
        # where fallback wins beyond the margin. The crossover interval's lower end (the earlier target) is wide at
        # few rounds and switched clear fused wins in 11-24% of simulated lowers (tests/support/calibration.py).
        fine = np.flatnonzero(~read.worse[: read.at])
        target = int(curve.dffs[fine[-1]]) if fine.size else _below_all(curve, policy.grid)
        evidence = _tested(curve, read.tests[0], policy.margin, words.at_or_below(c))
        return "lower", target, evidence, words.lower_target(int(curve.dffs[0]), c, not fine.size)
    if read.wins:
        best = int(curve.dffs[read.above[read.wins - 1]])
        passed = [(t.dff, t.bound) for t in read.tests if t.question == "fused" and t.passed]
        evidence = words.raise_evidence(policy.margin, c, best, policy.confidence, passed)
        return "raise", best, evidence, words.raise_target(best, best == int(curve.dffs[-1]))
    return None


def _keep(
    curve: Curve,
    crossover: Crossover,
    read: _Reading,
    c: int,
    policy: Policy,
    lower_level: float,
    rounds: np.ndarray,
    sweep: Sweep | None,
    finding: str,
    caps: tuple[CapOption, ...],
) -> Decision:
    """Keep c: the tests it read, a raise the straight line across an unmeasured gap would make (withheld), and
    how many rounds would likely decide at the first undecided point next to c."""
    m, above = read.at, read.above
    parts = [] if m is not None else [words.no_point_at_or_below(c)]
    for test in read.tests:
        role = words.at_or_below(c) if test.question == "fallback" else words.smallest_above(c)
        parts.append(_tested(curve, test, policy.margin, role))
    near = ([m] if m is not None else []) + [int(j) for j in above[:1]]
    undecided = [i for i in near if not (read.worse[i] or read.better[i])]
    hint, needed, chance = (
        _to_decide(curve, undecided[0], read, policy, lower_level, rounds, sweep)
        if undecided and sweep is not None
        else ("", None, None)
    )
    line = _line_raise(curve, c, policy)
    held = None
    if line is not None:
        gap = (line[1], line[2])
        measure = _gap_next(crossover, *gap, policy.grid)
        held = Withheld(move="raise", cap=line[0], why="unmeasured_gap", gap=gap, measure_next=measure)
    reason = words.keep_reason(finding, parts, c, held.words() if held else "", hint)
    at = int(curve.dffs[undecided[0]]) if undecided else None
    return Decision(
        action="keep",
        recommended_cap=c,
        reason=reason,
        caps=caps,
        tests=read.tests,
        rounds_dff=at,
        rounds_needed=needed,
        rounds_chance=chance,
        withheld=held,
    )
