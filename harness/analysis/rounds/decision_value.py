"""Which further rounds can still change the decision, and when to stop (`moecal sweep --until-decided`,
docs/design.md §7).

A fixed protocol spends the same rounds on every point, though the decision (keep / raise / lower and the cap)
usually turns on one or two of them: the measured Dff next to the current cap and next to the crossover. Here each
point's value is the chance that the rounds still affordable there change the decision, per device-second:

- **preposterior flips**: the point's estimate, standard error and degrees of freedom are updated as if `extra`
  more rounds had run, at quantiles of where the updated estimate can land (today's uncertainty about the truth and
  the new rounds' noise); the decision engine (a black box: `decide`) decides again, and a flip is a different
  action or cap. The normal mass of the quantiles that flip is the point's flip probability. A point whose most
  extreme plausible update (±2.5 σ) changes nothing costs two calls of the engine.
- **repeated looks**: the sweep reads the decision after the first pass and after every allocation step, and stops
  as soon as it looks settled, which would inflate false actions at a fixed level. The decision is therefore read at
  1 − α/K at every one of at most K looks (Bonferroni alpha spending, extended from the per-point rule the sweep
  used to have to the decision itself): the chance of any false raise or lower over all looks stays ≤ α.
- **the drift bound's part** (two passes): a point's se² holds the runs' noise, which its own rounds shrink, and the
  drift of one arm the family's passes cannot exclude (harness.analysis.points.sweep_drift, the variance factor F),
  which they barely move (updated_se); what narrows it is rounds at every point, so a pass over the stretch of the
  grid around the point of highest flip probability is priced as one more candidate (pass_flip), and a look that
  gives rounds to a point gives each point within PASS_REACH grid steps of it at least one.
- **stop** when no affordable round changes the decision with probability ≥ ε (`decided`), when the budget cannot
  pay the cheapest round (`budget`), when every point that matters is at its round cap (`max_rounds`), or when the
  K looks are spent (`looks`).

Pure: curves in, rounds out. The sweep (harness.measure.allocation) maps curve points to measured points and
their cost; the simulations (tests/support/until_decided.py) to arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.analysis.decision.curve import Curve
from harness.analysis.decision.decide import StagedFamily
from harness.analysis.decision.rounds_hint import Measured, bound_narrowing, read_share
from harness.analysis.decision.vocabulary import Action
from harness.policy import Policy

Key = tuple[int, int]  # (family index in the staged list, point index on its curve)
Outcome = tuple[Action, int | None]  # (action, recommended cap): what a flip changes
Decider = Callable[[Sequence[StagedFamily]], Outcome]

STOP_REASONS = {
    "decided": "settled: no affordable round changes the decision with probability ≥ {epsilon:.0%}",
    "budget": "the device-time budget cannot pay another round",
    "max_rounds": "every point that could change the decision is at its round cap",
    "looks": "all {looks} looks are spent (each read the decision at {level:.4f})",
    # the residual test (harness.analysis.points.sweep_drift) found a drift its trend cannot fit: more rounds in this
    # sweep add to the second pass and cannot undo it, so the loop stops instead of calling a forced keep settled
    "drift": "the two passes disagree in a way a drift trending in time cannot explain (residual test): the data "
    "cannot decide; re-measure on a quiet machine",
    # the stop rule held at the final look, but the decision the looks read was not the same at every look
    "flipped": "not settled: the decision flipped across looks ({history}); the stop rule held at the final look, "
    "but the rounds between looks moved it",
    # the stop rule held on a keep whose own hint names more rounds than the round cap allows
    "undecided": "not settled: no round within the round cap ({max_rounds}) changes the keep, but the point it turns "
    "on is undecided",
}


@dataclass(frozen=True, kw_only=True)
class StopRule:
    """The until-decided protocol's settings: first pass, caps and error targets. Its level is the policy's
    (the run's: harness.measure.allocation.rule_for), read at 1 − α/K at each look."""

    first_rounds: int = 3
    max_rounds: int = 20
    looks: int = 8  # K: the decision is read at 1 − α/K at each of at most K looks
    policy: Policy = Policy()  # α = 1 − policy.confidence
    settle_probability: float = 0.05  # ε: a decision that flips with a smaller chance is settled
    # measure.passes: 2 splits the first pass's rounds over two passes over the grid
    # (harness.analysis.points.sweep_drift), and every later round counts as the second; the simulations
    # (harness.analysis.rounds.decision_cost) estimate alike
    passes: int = 2

    @property
    def look_confidence(self) -> float:
        return 1.0 - (1.0 - self.policy.confidence) / max(self.looks, 1)

    def describe(self, reason: str, history: Sequence[Outcome] = ()) -> str:
        return STOP_REASONS[reason].format(
            epsilon=self.settle_probability,
            looks=self.looks,
            level=self.look_confidence,
            history=" → ".join(outcome_words(o) for o in history),
            max_rounds=self.max_rounds,
        )


def outcome_words(outcome: Outcome) -> str:
    """`lower 6400`, `keep 8192`: one look's decision."""
    action, cap = outcome
    return f"{action} {cap}" if cap is not None else str(action)


def flipped(looks: Sequence[Outcome]) -> bool:
    """Whether the looks' decisions went back and forth: a decision some look left came back at a later one (keep →
    lower → keep). A decision that moved once as rounds accrued (keep → lower, lower 6400 → lower 2880) did not."""
    left: list[Outcome] = []
    for outcome in looks:
        if left and outcome != left[-1] and outcome in left:
            return True
        if not left or outcome != left[-1]:
            left.append(outcome)
    return False


def final_stop(stop: str, looks: Sequence[Outcome], keep_undecided: bool = False) -> str:
    """The stop to report, from the stop rule's reason at the final look, every look's decision (the last one: the
    final analysis of all the runs, at the look level) and `keep_undecided`: the final decision is a keep whose rounds
    hint names no number of rounds per arm within the round cap (more than the cap, or none up to the hint's budget,
    harness.analysis.decision.rounds_hint).

    `decided` (settled) stands only when the stop rule held at the final look and nothing below undoes it. A decision
    that went back and forth across looks (keep ↔ lower at a cap near the margin's edge) and met the stop rule at the
    first look that read it again is `flipped`: a few rounds moved it before and no second look has held it, so
    calling it settled overstates it (issue 35: a --rounds 3 sweep on rocm flipped keep ↔ lower and stopped
    "settled" on keep; a fixed 5-round sweep lowered). One that held at the last two looks stays settled, and the
    record says that it flipped before. A keep the stop rule
    called settled because no round up to the cap can move it, while its own hint asks for more rounds than that
    (about 100 in issue 35) or names none, is `undecided`: the cap stays, but nothing decided it. The other stops
    already say the decision is not settled and keep their reason (the record says beside it that the decision
    flipped)."""
    if stop == "decided" and flipped(looks) and (len(looks) < 2 or looks[-1] != looks[-2]):
        return "flipped"
    return "undecided" if stop == "decided" and keep_undecided else stop


def settle_words(rounds_dff: int | None, rounds_needed: int | None, action: str, max_rounds: int) -> str:
    """What would settle a decision the loop did not settle, from the final decision's rounds hint
    (cap_move._keep): the rounds that give an 80% chance at the point a keep turns on, none affordable (a truth at
    the margin's edge), or, for a move, a fixed sweep at the round cap that confirms it."""
    if rounds_needed is not None and rounds_dff is not None:
        return (
            f"about {rounds_needed} rounds per arm at Dff {rounds_dff} give an 80% chance of a decision "
            f"(a fixed sweep: --rounds {rounds_needed})"
        )
    if rounds_dff is not None:
        return (
            f"no affordable number of rounds decides at Dff {rounds_dff} (its ratio lies near the margin's edge): "
            "a second sweep at another time, compared with `moecal check`"
        )
    return f"a fixed sweep of {max_rounds} rounds per point (--rounds {max_rounds}) that confirms the {action}"


@dataclass(frozen=True, kw_only=True)
class Step:
    """One look: the decision at the look level, why the sweep stops (None: it goes on), the rounds to add per
    point, and every point's flip probability over its affordable horizon."""

    outcome: Outcome
    stop: str | None
    rounds: dict[Key, int]
    flip: dict[Key, float]


def _with_point(
    staged: Sequence[StagedFamily], key: Key, theta: float, se: float, df: float, n: int
) -> list[StagedFamily]:
    f, i = key
    family = staged[f]
    c = family.curve
    values = [c.theta.copy(), c.se.copy(), c.df.copy()]
    for array, value in zip(values, (theta, se, df), strict=True):
        array[i] = value
    rounds = None if family.rounds is None else np.asarray(family.rounds).copy()
    if rounds is not None:
        rounds[i] = n
    curve = Curve(
        dffs=c.dffs, theta=values[0], se=values[1], df=values[2], interpolation=c.interpolation, labels=c.labels
    )
    out = list(staged)
    out[f] = replace(family, curve=curve, rounds=rounds)
    return out


def _bound_at(family: StagedFamily, i: int) -> float:
    """The drift bound's variance factor F in point i's se² (1: measured in one pass, or no bound)."""
    if family.bound is None:
        return 1.0
    return max(float(np.asarray(family.bound, float)[i]), 1.0)


def updated_se(se: float, bound: float, rounds_now: int, total: int, bound_shrink: float = 1.0) -> float:
    """A point's standard error after `total` rounds, from `rounds_now`, as its own rounds change it: the runs' part
    se²/F shrinks as n/total; the drift bound's part se²(1 − 1/F) (F: the bound's variance factor, the
    visit-to-visit drift τ² at its upper bound, sweep_drift.drift_trend) moves only by the point's share of τ²
    (rounds_hint.read_share), since τ²'s bound rests on every point's passes and not on this one's rounds.

    Why: the preposterior took the whole se to shrink as √(n/total). In two passes, where the bound multiplied a
    sparse family's variance by about 3-4, that promised flips the rounds could not bring, and the looks spent
    rounds at the deciding point whose interval then stayed near where the first pass put it (docs/design.md §7).
    `bound_shrink`: how much a look that adds rounds at every point of the family narrows τ²'s bound (pass_flip)."""
    runs = se**2 / bound
    share = read_share(np.array([total, rounds_now]))
    drift = (se**2 - runs) * bound_shrink * float(share[0] / share[1])
    return math.sqrt(runs * rounds_now / total + drift)


_Z = np.linspace(-2.5, 2.5, 11)  # quadrature nodes of the updated estimate, in its standard deviations
_EDGES = np.concatenate([[-np.inf], (_Z[1:] + _Z[:-1]) / 2, [np.inf]])
_MASS = np.diff(0.5 * (1 + np.vectorize(math.erf)(_EDGES / math.sqrt(2))))  # normal mass of each node's cell


def flip_probability(
    staged: Sequence[StagedFamily],
    key: Key,
    rounds_now: int,
    extra: int,
    decide: Decider,
    current: Outcome | None = None,
) -> float:
    """The chance that `extra` more rounds at one point change the decision (module docstring: preposterior flips).

    The updated estimate (n·θ̂ + extra·mean of the new rounds) / (n + extra) is spread around θ̂ by
    se·√(extra/(n+extra)) (the truth's uncertainty and the new rounds' noise together); the decision is read at 11 fixed
    quantiles of it and each flip weighted by its normal mass: deterministic, so two looks at the same data agree, and
    11 calls of the engine instead of hundreds of random draws. The extremes go first: when neither flips, nothing
    between them is read. The per-round spread is the point's se·√n, so a drift-widened interval stays wide."""
    f, i = key
    c = staged[f].curve
    theta, se, df = float(c.theta[i]), float(c.se[i]), float(c.df[i])
    if extra <= 0 or not (math.isfinite(se) and se > 0 and rounds_now > 0):
        return 0.0
    current = decide(staged) if current is None else current
    total = rounds_now + extra
    new_se, new_df = updated_se(se, _bound_at(staged[f], i), rounds_now, total), df + extra
    spread = math.sqrt(max(se**2 - new_se**2, 0.0))

    def flips(z: float) -> bool:
        return decide(_with_point(staged, key, theta + z * spread, new_se, new_df, total)) != current

    return _quadrature(flips)


def _quadrature(flips: Callable[[float], bool]) -> float:
    """The normal mass of the quantiles _Z at which the decision flips, the extremes read first (neither flips: 0)."""
    ends = (flips(_Z[0]), flips(_Z[-1]))
    if not any(ends):
        return 0.0
    flipped = [ends[0], *(flips(z) for z in _Z[1:-1]), ends[1]]
    return float(np.dot(_MASS, flipped))


def pass_flip(
    staged: Sequence[StagedFamily],
    family: int,
    extra: Mapping[int, int],
    decide: Decider,
    current: Outcome,
) -> float:
    """The chance that a pass over the family (`extra` rounds at each of its curve points, by index) changes the
    decision: every point's se updated at once, the drift bound's part narrowed as τ²'s bound would with every
    point's new halves (rounds_hint.bound_narrowing: the bound rests on every point's two halves; where the passes
    show no drift of one arm it is the runs' noise read at its upper end and narrows as that noise does, where they
    show one only the noise's part narrows), and the flip read at each point's preposterior in turn; the largest of
    them (the chance that some point flips is at least that).

    Why: a flip probability per point alone cannot see that rounds everywhere narrow every point's interval
    (updated_se); before it the looks' pass was a fixed rule (_with_a_pass) and the value of a pass went unpriced."""
    fam = staged[family]
    c = fam.curve
    if fam.rounds is None or not extra:
        return 0.0
    now = np.asarray(fam.rounds, int)
    after = now.copy()
    for i, h in extra.items():
        after[i] += h
    bound = np.ones(len(now)) if fam.bound is None else np.asarray(fam.bound, float)
    shrink = bound_narrowing(
        Measured(theta=c.theta, se=c.se, df=c.df, rounds=now, bound=bound, passes=fam.passes), after
    )
    se, df = c.se.copy(), c.df.copy()
    for i, h in extra.items():
        se[i] = updated_se(float(c.se[i]), _bound_at(fam, i), int(now[i]), int(after[i]), shrink)
        df[i] += h
    narrowed = list(staged)
    narrowed[family] = replace(
        fam,
        curve=Curve(dffs=c.dffs, theta=c.theta, se=se, df=df, interpolation=c.interpolation, labels=c.labels),
        rounds=after,
    )
    best = 0.0
    for i in extra:
        spread = math.sqrt(max(float(c.se[i]) ** 2 - float(se[i]) ** 2, 0.0))
        key, theta = (family, i), float(c.theta[i])

        def flips(z: float, key: Key = key, theta: float = theta, spread: float = spread, i: int = i) -> bool:
            moved = _with_point(narrowed, key, theta + z * spread, float(se[i]), float(df[i]), int(after[i]))
            return decide(moved) != current

        best = max(best, _quadrature(flips))
    return best


def new_point_flip(staged: Sequence[StagedFamily], family: int, dff: float, rounds: int, decide: Decider) -> float:
    """The chance that measuring a new Dff (in `rounds` rounds) changes the decision: its ratio is predicted by
    interpolating the family's neighbouring points, uncertain by their standard errors and by half their difference
    (the curve bends between them), and the decision is read at the same quantiles as `flip_probability`."""
    c = staged[family].curve
    if len(c.dffs) < 2 or dff in c.dffs or not c.dffs[0] < dff < c.dffs[-1]:
        return 0.0
    j = int(np.searchsorted(c.dffs, dff))
    theta = float(np.interp(dff, c.dffs, c.theta))
    se = float(np.interp(dff, c.dffs, c.se))
    df = float(min(c.df[j - 1], c.df[j]))
    spread = math.hypot(se, abs(c.theta[j] - c.theta[j - 1]) / 2)
    current = decide(staged)

    def flips(z: float) -> bool:
        curve = Curve(
            dffs=np.insert(c.dffs, j, dff),
            theta=np.insert(c.theta, j, theta + z * spread),
            se=np.insert(c.se, j, se),
            df=np.insert(c.df, j, df),
            interpolation=c.interpolation,
            labels=tuple(c.labels[:j]) + ("(new)",) + tuple(c.labels[j:]) if c.labels else (),
        )
        rounds_now = staged[family].rounds
        counts = None if rounds_now is None else np.insert(np.asarray(rounds_now), j, rounds)
        out = list(staged)
        out[family] = replace(staged[family], curve=curve, rounds=counts)
        return decide(out) != current

    return float(np.dot(_MASS, [flips(z) for z in _Z]))


def next_step(
    staged: Sequence[StagedFamily],
    rounds_done: Mapping[Key, int],
    cost: Mapping[Key, float],
    rule: StopRule,
    decide: Decider,
    looks_done: int,
    budget_left: float | None = None,
    passes_disagree: bool = False,
) -> Step:
    """One look (module docstring). `rounds_done` and `cost` (device-seconds of one more round, every arm) per curve
    point; `decide` reads the decision at `rule.look_confidence`; `looks_done` counts the looks before this one.
    Rounds go to the points whose flip probability per device-second of their horizon is at least half the best
    one's, and to the stretch of a family whose pass (_stretch_passes) is worth as much, each an equal share of its
    horizon over the looks left; the decision is settled when neither a point nor a pass flips it with ε.
    `passes_disagree` (the sweep's pass test rejected, harness.analysis.points.sweep_drift): stop as `drift` before
    pricing anything, since rounds in this sweep add to its later half and cannot repair a drift between the passes."""
    current = decide(staged)
    if passes_disagree:
        return Step(outcome=current, stop="drift", rounds={}, flip={})
    horizons: dict[Key, int] = {}
    capped_by_budget = False
    for key, n in rounds_done.items():
        horizon = rule.max_rounds - n
        if budget_left is not None and cost[key] > 0:
            affordable = int(budget_left // cost[key])
            capped_by_budget |= affordable < horizon
            horizon = min(horizon, affordable)
        if horizon > 0:
            horizons[key] = horizon
    flip = {key: flip_probability(staged, key, rounds_done[key], h, decide, current) for key, h in horizons.items()}
    passes = _stretch_passes(staged, horizons, decide, current, flip) if rule.passes == 2 else {}
    looks_left = rule.looks - looks_done - 1
    if flip and max([*flip.values(), *(p for p, _ in passes.values())]) < rule.settle_probability:
        return Step(outcome=current, stop="decided", rounds={}, flip=flip)
    if not horizons:
        return Step(outcome=current, stop="budget" if capped_by_budget else "max_rounds", rounds={}, flip=flip)
    if looks_left <= 0:
        return Step(outcome=current, stop="looks", rounds={}, flip=flip)
    value = {key: flip[key] / (max(cost[key], 1e-9) * horizons[key]) for key in flip}
    # a stretch's pass is one candidate, priced at every horizon in it
    pass_value = {f: p / max(sum(cost[k] * horizons[k] for k in keys), 1e-9) for f, (p, keys) in passes.items()}
    best = max([*value.values(), *pass_value.values()])
    chosen = [key for key, v in value.items() if v >= best / 2]
    chosen += [key for f, (_, keys) in passes.items() if pass_value[f] >= best / 2 for key in keys]
    rounds = {key: math.ceil(horizons[key] / looks_left) for key in chosen if best > 0}
    if rule.passes == 2:
        rounds = _with_a_pass(rounds, horizons, cost, budget_left)
    return Step(outcome=current, stop=None, rounds=rounds, flip=flip)


def _stretch_passes(
    staged: Sequence[StagedFamily],
    horizons: Mapping[Key, int],
    decide: Decider,
    current: Outcome,
    flip: Mapping[Key, float],
) -> dict[int, tuple[float, list[Key]]]:
    """Per family whose points carry a drift bound (F > 1 at some point): a pass at every point within PASS_REACH
    grid steps of its point of highest flip probability (the whole family when none flips), each at its horizon, as
    (pass_flip, its points).

    Why a stretch and not the family: on a 16-point dense grid a pass over every point cost 16 rounds a look, while
    the decision turns on the few next to the cap and the crossover (`python -m tests.support.until_decided --matched
    40 "dense 1 family"`: 110.3 rounds at power .41 over the family, 99.7 at .45 over the stretch). Where no point
    flips alone the pass is the whole family, and on the dense grid that makes until-decided a fixed protocol read
    at the looks' level (100 sweeps: 1.34 of the fixed rounds of its power; docs/design.md §7, and the variants
    measured there)."""
    out = {}
    for f, family in enumerate(staged):
        if family.bound is None or not np.any(np.asarray(family.bound, float) > 1.0):
            continue
        mine = {i: h for (g, i), h in horizons.items() if g == f}
        centre = max(mine, key=lambda i: flip.get((f, i), 0.0), default=None)
        if centre is not None and flip.get((f, centre), 0.0) > 0:
            mine = {i: h for i, h in mine.items() if abs(i - centre) <= PASS_REACH}
        if mine:
            out[f] = (pass_flip(staged, f, mine, decide, current), [(f, i) for i in sorted(mine)])
    return out


PASS_REACH = 3  # a look's pass round goes to the points within this many grid steps of a point the look measures


def _with_a_pass(
    rounds: dict[Key, int], horizons: Mapping[Key, int], cost: Mapping[Key, float], budget_left: float | None
) -> dict[Key, int]:
    """Every point within PASS_REACH grid steps of a point that gets rounds in this look gets at least one (within
    its horizon): a look is then also a pass over that stretch of the family's grid (the whole of a 6-point sparse
    grid around its middle). With a budget, the added rounds go cheapest first while the look still fits in what is
    left (the rounds the flip probabilities chose are priced first).

    Why: measured in two passes, each point's interval carries the drift of one arm that the family's passes cannot
    exclude (harness.analysis.points.sweep_drift.drift_trend: τ² around the trend), an upper bound that rests on every
    point's two halves and shrinks only as all of them grow. Rounds at the one or two points the decision turns on
    left it where the first pass put it, and their intervals stopped narrowing (simulated sparse curved truths,
    `python -m tests.support.until_decided 60`: power .15 at 24 rounds per sweep, against .58 for a fixed 10 rounds at
    60; one round everywhere per look: .50 at 30).

    Why a reach and not the whole grid: on a 16-point dense grid the pass over every point cost 16 rounds a look, and
    until-decided spent more than fixed 5 for fixed 5's power (`python -m tests.support.until_decided --matched 40
    "dense 1 family"`, seed 36: 103.8 rounds, power .38, against 80 and .38). Within 3 steps: 74.1 rounds, power .34
    (within 1: 60.7, .21, the bound then stays where the first pass put it). The bound is still computed over every
    point of the family from the rounds it has, so it only stays wider where points were left out: the protection
    holds."""
    out = dict(rounds)
    spent = sum(n * cost[key] for key, n in rounds.items())
    chosen = list(rounds)

    def near(key: Key) -> bool:
        return any(f == key[0] and abs(i - key[1]) <= PASS_REACH for f, i in chosen)

    added = sorted((k for k, h in horizons.items() if h > 0 and k not in out and near(k)), key=lambda k: cost[k])
    for key in added:
        if budget_left is not None and spent + cost[key] > budget_left:
            break
        out[key] = 1
        spent += cost[key]
    return out
