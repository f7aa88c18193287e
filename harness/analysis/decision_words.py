"""The sentences the decision and the addendum say about the tests and the curve, built from numbers only.

Why here, apart from the policy (decision.py): a statement such as "fused wins at Dff 6400" is printed in the
decision's reason, in the addendum's table and findings, and read by the property test (tests/test_addendum_truth.py);
each is made by one function from the structured values, so it can be true of the data by construction and reads the
same wherever it appears. Every figure goes through harness.analysis.figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from harness.analysis import figures


def band(margin: float, side: str) -> str:
    """`1 + 1%` (fused must beat it) or `1 − 1%` (fallback must beat it)."""
    return f"1 {'+' if side == 'fused' else '−'} {figures.percent(margin)}"


def point_test_words(question: str, passed: bool, bound: float, level: float, margin: float) -> str:
    """One one-sided test the decision read, as the table's `decision test` cell and the reason state it:
    `fused wins beyond 1 + 1% (one-sided 95% lower bound 1.0123)`."""
    winner = "fused" if question == "fused" else "fallback"
    side = "lower" if question == "fused" else "upper"
    result = f"{winner} wins" if passed else f"{winner} not shown to win"
    one_sided = f"one-sided {figures.percent(level)} {side} bound {figures.ratio(bound)}"
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
    harness.analysis.stats.family_labels' `layer d_model=2048 top_k=8 experts=16 q4g64 float32`; `mlxcel models`
    for a command run of mlxcel's benchmark (`benchmark`: the command line); the label itself when it is neither."""
    layer = _LAYER.match(str(label))
    if layer:
        g = layer.groupdict()
        return f"one MoE layer, d_model {g['d']}, top-{g['k']} of {g['e']}, {g['bits']}-bit g{g['group']}, {g['dtype']}"
    if label == "command":
        return "mlxcel models" if "mlxcel" in benchmark else "whole models (benchmark command)"
    if label == "decode":
        return "whole model (moecal's synthetic decoder)"
    return str(label)


def family_namer(context: dict[str, object]) -> Callable[[str], str]:
    """Family label → the words a report uses for it, given the run's recorded context: `mlxcel models` when the
    benchmark (its command line, or an imported file's format) is mlxcel's. One rule for the addendum and the plot."""
    bench = str(context.get("bench_command") or context.get("source_format") or "")
    return lambda label: family_words(label, bench)
