"""The addendum's (and the console's) fixed words state the analysis constants they describe: "> 6 robust σ" is
`stats.OUTLIER_SIGMAS`, "robust spread > 5%" is `point_summary.UNSTABLE_SPREAD`. Those sentences write the number
as text rather than from the constant, so a change of the constant alone would leave a report that says one rule
and applies another; this guard reads each sentence in its module's source and fails until both agree. A
sentence that is reworded fails it too (its pattern finds nothing): update the row with it."""

from __future__ import annotations

import inspect
import re
from types import ModuleType

import pytest

from harness import thresholds
from harness.analysis.decision import decision_words
from harness.analysis.points import point_summary, stats
from harness.output.addendum import addendum_findings
from harness.output.defaults import device_defaults
from harness.output.tables import summary_table

NUMBER = r"(\d+(?:\.\d+)?)"
# (constant's module, its name, how it is written in the words: 1 as is, 100 as a percentage,
#  the module that holds the words, the words with the number as a group)
ROWS: list[tuple[ModuleType, str, float, ModuleType, str]] = [
    (stats, "OUTLIER_SIGMAS", 1, addendum_findings, rf"Outliers dropped \(> {NUMBER} robust σ from the arm's median\)"),
    (point_summary, "UNSTABLE_SPREAD", 100, addendum_findings, rf"Unstable \(an arm's robust spread > {NUMBER}%\)"),
    (point_summary, "UNSTABLE_SPREAD", 100, summary_table, rf"unstable \(an arm's spread is .*, above {NUMBER}%\)"),
    (stats, "POWER", 100, decision_words, rf"give an {NUMBER}% chance of a decision"),
    (thresholds, "CONFIDENCE", 100, device_defaults, rf"\| crossover {NUMBER}% CI \|"),  # the classes' default level
]


@pytest.mark.parametrize(
    ("owner", "name", "scale", "words", "pattern"),
    ROWS,
    ids=[f"{r[0].__name__.rsplit('.', 1)[-1]}.{r[1]}-in-{r[3].__name__.rsplit('.', 1)[-1]}" for r in ROWS],
)
def test_the_words_state_the_constant_they_name(owner, name, scale, words, pattern):
    stated = [float(m) for m in re.findall(pattern, inspect.getsource(words))]
    assert stated, f"{words.__name__} no longer says {pattern!r}: update this row with the new words"
    value = getattr(owner, name) * scale
    assert stated == [pytest.approx(value)] * len(stated), (
        f"{words.__name__} says {stated} where {owner.__name__}.{name} is {getattr(owner, name)}"
    )


def test_a_changed_constant_is_caught(monkeypatch):
    """The guard's own check: with OUTLIER_SIGMAS at 5 the addendum's "> 6 robust σ" no longer agrees."""
    monkeypatch.setattr(stats, "OUTLIER_SIGMAS", 5.0)
    with pytest.raises(AssertionError, match="OUTLIER_SIGMAS is 5.0"):
        test_the_words_state_the_constant_they_name(stats, "OUTLIER_SIGMAS", 1, addendum_findings, ROWS[0][4])
