"""The sentences the decision and the addendum say about the tests and the curve, built from numbers only: every
sentence of a decision's reason is made here, from the structured values the policy found (cap_move.py,
decide.py), and nothing reads a reason back.

Why here, apart from the policy: a statement such as "fused wins at Dff 6400" is printed in the decision's reason,
in the addendum's table and findings, and read by the property test (tests/output/addendum/test_addendum_truth.py); each
is made by one function from the structured values, so it can be true of the data by construction and reads the same
wherever it appears. Every figure goes through harness.analysis.number_format.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from harness.analysis import number_format
from harness.analysis.decision.vocabulary import Action, Move, Side, WithheldWhy
from harness.config.schema import kind_meaning


def band(margin: float, side: Side) -> str:
    """`1 + 1%` (fused must beat it) or `1 − 1%` (fallback must beat it)."""
    return f"1 {'+' if side == 'fused' else '−'} {number_format.percent(margin)}"


def point_test_words(question: Side, passed: bool, bound: float | None, level: float, margin: float) -> str:
    """One one-sided test the decision read, as the table's `decision test` cell and the reason state it:
    `fused wins beyond 1 + 1% (one-sided 95% lower bound 1.0123)`; a bound that is not finite (JSON records it as
    null) reads `n/a`."""
    winner = "fused" if question == "fused" else "fallback"
    side = "lower" if question == "fused" else "upper"
    result = f"{winner} wins" if passed else f"{winner} not shown to win"
    one_sided = f"one-sided {number_format.percent(level)} {side} bound {number_format.ratio(bound)}"
    return f"{result} beyond {band(margin, question)} ({one_sided})"


def sign_runs(dffs: Sequence[int], above: Sequence[bool]) -> str:
    """Where the estimated ratio lies above 1.0, computed from the points: `above 1.0 at every measured Dff`,
    `not above 1.0 at any measured Dff`, or both lists (`above 1.0 at Dff 1792, 6400 and not above it at Dff 8192,
    14336`)."""
    if all(above):
        return "above 1.0 at every measured Dff"
    if not any(above):
        return "not above 1.0 at any measured Dff"
    up = ", ".join(str(int(d)) for d, a in zip(dffs, above, strict=True) if a)
    down = ", ".join(str(int(d)) for d, a in zip(dffs, above, strict=True) if not a)
    return f"above 1.0 at Dff {up} and not above it at Dff {down}"


_LAYER = re.compile(
    r"layer d_model=(?P<d>\d+) top_k=(?P<k>\d+) experts=(?P<e>\d+) q(?P<bits>\d+)g(?P<group>\d+) (?P<dtype>\S+)$"
)


def family_words(label: str, benchmark: str = "") -> str:
    """A shape family as people say it: `one MoE layer, d_model 2048, top-8 of 16, 4-bit g64, float32` for
    harness.analysis.points.stats.family_labels' `layer d_model=2048 top_k=8 experts=16 q4g64 float32`; `mlxcel models`
    for an external program's run of mlxcel's benchmark (`benchmark`: the command line); else the words the kind's
    registry entry gives a whole-model family, or the label itself."""
    layer = _LAYER.match(str(label))
    if layer:
        g = layer.groupdict()
        return f"one MoE layer, d_model {g['d']}, top-{g['k']} of {g['e']}, {g['bits']}-bit g{g['group']}, {g['dtype']}"
    kind, _, depth = str(label).partition(" ")  # a whole-model family's label: its kind's name [and its context]
    meaning = kind_meaning(kind)
    words = "mlxcel models" if meaning.external and "mlxcel" in benchmark else meaning.family_words or kind
    return f"{words} at a {depth.removeprefix('ctx')}-token context" if depth.startswith("ctx") else words


# --- the reason of a decision, part by part ----------------------------------------------------------------------


def finding(where: str, outcome: str, dff: float | None, several: bool, ci: str, gap: str, confidence: float) -> str:
    """The curve in one sentence, every claim computed from the points: `where` (sign_runs) the estimate lies above
    1.0, and the crossover with its interval `ci` (the crossing the interval belongs to; the estimate lies inside it);
    `several`: more than one crossing; `gap`: the crossover's unmeasured bracket (Crossover.gap_text)."""
    ci = (
        f"{number_format.percent(confidence)} CI {ci}, which includes the error of interpolating between measured "
        "points"
    )
    if outcome == "crossing":
        assert dff is not None, "a crossing has a Dff"  # Crossover.dff is None only when nothing crosses
        gap = f"; {gap}" if gap else ""
        several_text = "the first downward crossing after fused first leads; " if several else ""
        return (
            f"The estimated ratio is {where}; it crosses 1.0 at Dff ≈ {number_format.dff(dff)} "
            f"({several_text}{ci}{gap})"
        )
    if outcome == "fused_everywhere":
        return (
            f"The estimated ratio is {where}, with no downward crossing after fused first leads, so where fused stops "
            f"winning is not located ({ci})"
        )
    return f"The estimated ratio is {where} (where fused stops winning: {ci})"


NO_POINTS = "No point with an interval to decide from; nothing changes."


def set_reason(curve_finding: str, cap: int, lowest: int, from_interval: bool) -> str:
    """No current default: set the crossover interval's lower end, or (open below) a cap below every measured Dff."""
    bound = "the crossover interval's lower end" if from_interval else f"below Dff {lowest}"
    return f"{curve_finding}; with no current default given, set {cap} ({bound}, a measured Dff or below them all)."


def tested(dff: int, role: str, ratio: float, test: str) -> str:
    """`at Dff 4096 (role) the ratio is 0.9855; fallback not shown to win beyond 1 − 1% (one-sided … bound …)`."""
    return f"at Dff {dff} ({role}) the ratio is {number_format.ratio(ratio)}; {test}"


def at_or_below(current: int) -> str:
    return f"the largest measured Dff at or below {current}"


def smallest_above(current: int) -> str:
    return f"the smallest measured Dff above {current}"


def lower_target(lowest: int, current: int, below_all: bool) -> str:
    """Where a lower goes: the largest measured Dff below the cap where fused is not measurably worse."""
    if below_all:
        return f"below the smallest measured Dff {lowest}: fallback wins beyond the margin at every one up to {current}"
    return "the largest measured Dff below it where fused is not measurably worse"


def raise_evidence(
    margin: float, current: int, best: int, confidence: float, bounds: Sequence[tuple[int, float]]
) -> str:
    """The raise's evidence: fused wins beyond the band at every measured Dff above the cap up to `best`."""
    bounds_text = ", ".join(f"{dff}: {number_format.ratio(bound)}" for dff, bound in bounds)
    return (
        f"fused wins beyond {band(margin, 'fused')} at every measured Dff above {current} up to {best} (one-sided "
        f"{number_format.percent(confidence)} lower bounds {bounds_text})"
    )


def raise_target(best: int, unmeasured_above: bool) -> str:
    where = "the largest measured Dff up to which every measured point shows it"
    return where + (f"; Dff above {best} are unmeasured" if unmeasured_above else "")


def move_reason(curve_finding: str, evidence: str, move: Move, cap: int, where: str, line: str) -> str:
    """A raise or lower made: `…; evidence. Raise it to 8192, where (line)`."""
    return f"{curve_finding}; {evidence}. {move.capitalize()} it to {cap}, {where}{line}."


def straight_line(cap: int, gap: tuple[int, int], measure_next: int) -> str:
    """What a made raise leaves to the next sweep: the line across the unmeasured gap beyond it."""
    return (
        f" (the straight line from {gap[0]} to {gap[1]} would go on to {cap}, but no Dff between them was measured; "
        f"measure Dff {measure_next} next)"
    )


def withheld_words(
    move: Move,
    cap: int,
    why: WithheldWhy,
    because: str = "",
    gap: tuple[int, int] | None = None,
    measure_next: int | None = None,
    families: Sequence[str] = (),
) -> str:
    """`a raise to 8192 was withheld because …`, the why given by the caller (the A/A drift), the unmeasured gap the
    straight line crosses, or the families that do not support it."""
    if why == "unmeasured_gap" and gap is not None:
        because = (
            f"no Dff between {gap[0]} and {gap[1]} was measured: the straight line across that gap is not evidence; "
            f"measure Dff {measure_next} next"
        )
    elif why == "family_disagrees":
        because = f"{', '.join(families)} does not support it"
    return f"a {move} to {cap} was withheld because {because}"


def withheld_sentence(curve_finding: str, evidence: str, withheld: str) -> str:
    """A raise or lower held back by the A/A drift: the caller's why ends the sentence."""
    return f"{curve_finding}; {evidence}; {withheld}"


def rounds_hint(
    dff: int, now: int, needed: int | None, spread: bool, affordable: int, chance: float, drift_seen: bool = False
) -> str:
    """`about N rounds per arm at Dff D (now n) give an 80% chance of a decision`, or why no affordable number does
    (`spread`: the interval has a spread to scale; `chance`: the chance at `affordable` rounds, NaN: the point already
    has that many). `drift_seen`: the points carry a drift bound from their passes; the named N then says that it
    assumes the drift stays as small as those passes saw (a longer sweep meets drift a short one could not see:
    under slow drift of one arm only .10–.33 of named hints decide, docs/design.md §7, the rounds hint)."""
    where = f"Dff {dff}"
    if needed is not None:
        assumes = ", if one arm drifts no more over them than in these passes" if drift_seen else ""
        return f"about {needed} rounds per arm at {where} (now {now}) give an 80% chance of a decision{assumes}"
    if not spread:
        return f"no number of rounds at {where} can be suggested (its interval has no spread to scale)"
    if math.isnan(chance):
        return (
            f"no number of rounds at {where} can be suggested: it has {now} per arm, the most a hint names is "
            f"{affordable}"
        )
    return (
        f"no affordable number of rounds is likely to decide at {where}: even {affordable} per arm (now {now}) "
        f"give about a {chance:.0%} chance (the ratio may lie within its noise of the margin's edge)"
    )


def keep_reason(curve_finding: str, tests: Sequence[str], current: int, withheld: str, hint: str) -> str:
    """`…; at Dff … ; at Dff … . Keep 8192 (a raise to … was withheld because …); about N rounds … .`"""
    withheld = f" ({withheld})" if withheld else ""
    hint = f"; {hint}" if hint else ""
    return f"{curve_finding}; {'; '.join(tests)}. Keep {current}{withheld}{hint}."


def no_point_at_or_below(current: int) -> str:
    return f"no measured Dff is at or below {current}"


def scatter_note(tau: float) -> str:
    """Appended to a family's reason when its points scatter more than their intervals allow (between_points)."""
    return (
        f"The measured points scatter more than their own intervals allow (drift between points, or a ratio that is "
        f"not monotone in Dff): ±{tau:.2%} was added to every point's interval before deciding; repeating the points "
        f"next to the cap in a later session tells drift from shape."
    )


def curve_notes(notes: Sequence[str]) -> str:
    """Appended to a family's reason: what family_curve noticed while pooling its points."""
    return f"Note: {'; '.join(notes)}."


def models_disagree(dff: float, models: Sequence[str], p: float) -> str:
    """A family_curve note: the models sharing one Dff disagree (Cochran's Q)."""
    return (
        f"the models at Dff {dff:.0f} ({', '.join(models)}) disagree (Cochran's Q, a test of whether they measure one "
        f"ratio: p = {p:.3f}): their average is widened by the spread between them"
    )


def binding_family(action: Action, binding: str, families: int, withheld: str) -> str:
    """Why the overall decision is the binding family's, over `families` deciding families (a lower needs one, at a
    Bonferroni level; a raise needs all, at the plain level; a keep may have held back a raise some supported)."""
    k = families
    if action == "lower":
        return (
            f"The shape family {family_words(binding)} sets the smallest cap (each of the {k} deciding families tests "
            f"a lower at the stricter level 1 − α/{k}, Bonferroni, because any one of them can trigger it)"
        )
    if action == "raise":
        return (
            f"All {k} deciding families support a raise (each tested at the plain level: every family must agree, so "
            f"no correction is needed); the smallest raised cap holds, set by {family_words(binding)}"
        )
    who = f"The shape family {family_words(binding)} keeps the cap"
    return who + (f" ({withheld})" if withheld else "")
