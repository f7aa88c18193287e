"""The decision as a record: what the policy read (candidate caps, point tests) and what it decided (action, cap,
what was withheld and why). Its JSON, the one machine-readable form, is harness.analysis.decision.decision_json.

Why apart from the engine (harness.analysis.decision.decide, .cap_move): the output layer and the tests read these
records, never the curve maths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.analysis.decision.curve import Crossover
from harness.analysis.decision.decision_words import point_test_words, withheld_words
from harness.analysis.decision.vocabulary import Action, Move, Side, WithheldWhy
from harness.config.schema import kind_meaning, kind_of_family


@dataclass(frozen=True, kw_only=True)
class Switch:
    """One measured point that changes path when the cap moves: the new path's tok/s over the old path's."""

    dff: int
    model: str
    to: Side
    effect: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True, kw_only=True)
class CapOption:
    """One candidate cap (each differs from its neighbours in which measured points run fused): the points that
    change path against the current default and the aggregate effect over all the family's measured points (the
    geometric mean of every point's tok/s change; a point that keeps its path counts as 1)."""

    cap: int
    switched: tuple[Switch, ...]
    effect: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True, kw_only=True)
class PointTest:
    """One one-sided test the policy read at a measured point (the table's `decision test` column shows it)."""

    dff: int
    model: str
    question: Side  # "fused": does fused win beyond 1 + δ (a raise)? "fallback": beyond 1 − δ (a lower)?
    level: float  # one-sided confidence
    bound: float  # the one-sided bound of the ratio: the lower bound for "fused", the upper bound for "fallback"
    passed: bool

    def words(self, margin: float) -> str:
        return point_test_words(self.question, self.passed, self.bound, self.level, margin)


@dataclass(frozen=True, kw_only=True)
class Withheld:
    """A raise or lower the decision held back: the move, its cap and why — the A/A comparison lies beyond the
    margin (`because`: the caller's words), the raise rests only on a straight line across an unmeasured gap
    (`gap`, and the Dff to measure next), or another deciding family does not support it (`families`)."""

    move: Move
    cap: int
    why: WithheldWhy
    because: str = ""
    gap: tuple[int, int] | None = None
    measure_next: int | None = None
    families: tuple[str, ...] = ()

    def words(self) -> str:
        """`a raise to 8192 was withheld because …`."""
        return withheld_words(self.move, self.cap, self.why, self.because, self.gap, self.measure_next, self.families)


@dataclass(frozen=True, kw_only=True)
class Decision:
    action: Action
    recommended_cap: int | None
    reason: str  # rendered from the fields below (harness.analysis.decision.decision_words), never parsed back
    # the environment line that applies the cap: set by the analysis from the run's CapTarget, never by the engine
    # (None: no variable sets the cap for this workload, or the decision was not made for a run)
    apply: str | None = None
    caps: tuple[CapOption, ...] = ()  # the candidate-cap table the decision was read from
    tests: tuple[PointTest, ...] = ()  # the point tests the decision read, in the order it read them
    # drift between points (between_points): the relative size √τ² added to every point's interval, None when the
    # points scatter no more than their intervals allow
    drift_between_points: float | None = None
    # the rounds hint of a keep: the measured Dff it is about and the runs per arm that give an 80% chance of a
    # decision there (None with a Dff: no affordable number does, rounds_hint.BUDGET_ROUNDS)
    rounds_dff: int | None = None
    rounds_needed: int | None = None
    # the hint's simulated chance of a decision at rounds_hint.BUDGET_ROUNDS per arm (what a withheld hint quotes;
    # None: nothing was simulated), so calibrations can set it beside how often the budget's rounds then decided
    rounds_chance: float | None = None
    withheld: Withheld | None = None  # the raise or lower a keep held back, and why
    # the two-pass test for drift of one arm (sweep_drift), its p-value when it made the data unusable for a
    # decision (a raise or lower withheld, or none to withhold), None when it was not run or did not reject
    sweep_drift: float | None = None


@dataclass(frozen=True, kw_only=True)
class FamilyDecision:
    family: str
    rows: tuple[int, ...]  # positions in the summary
    crossover: Crossover
    decision: Decision
    valid_points: int = 0  # distinct Dffs with an interval the crossover was located from


@dataclass(frozen=True, kw_only=True)
class DecisionResult:
    """Per shape family and overall; the overall decision is the most conservative (smallest) family cap."""

    families: tuple[FamilyDecision, ...]
    crossover: Crossover  # of the binding family
    decision: Decision
    binding: str = ""  # the family whose cap is the overall one (its reason is the overall reason's second part)


def deciding_families(families: Sequence[FamilyDecision]) -> list[FamilyDecision]:
    """The families allowed to set the overall cap.

    A family of a kind that decides the cap (its registry entry: `layer`, the kernels at a fixed shape) decides when a
    run has any; whole-model points (`decode`, `command`) then only show the effect on tok/s. A family also needs two
    valid points to locate a crossover: a single point says which path won there, not where the paths cross. If no
    family qualifies, all do.
    """
    kernel = [f for f in families if kind_meaning(kind_of_family(f.family)).decides_cap] or list(families)
    located = [f for f in kernel if f.valid_points >= 2]
    return located or kernel
