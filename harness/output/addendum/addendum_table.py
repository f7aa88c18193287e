"""The addendum's tables: mlxcel's per-point table, one per unit of the workload kinds in the run (the kind's
registry entry names the unit: harness.config.kind_meaning), with the interval, the verdict, the decision's test
and the dispatch pass's columns; the method sentence that explains them; and the lists of points left out of the
crossover and of the family table's mistakes. Rendered from the report data (harness.output.addendum.report_data)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from harness.analysis import number_format
from harness.analysis.decision.decision_facts import SWITCH_LABEL, is_switch_point
from harness.analysis.decision.decision_json import PointJSON, TestJSON, ratio_of_medians
from harness.analysis.decision.decision_words import family_words, point_test_words
from harness.analysis.decision.pipeline import Options
from harness.analysis.evidence.dispatch_evidence import parity_words
from harness.config.kind_meaning import KindMeaning
from harness.config.schema import kind_meaning, kind_of_family
from harness.output.markdown_text import md_text
from harness.runs.summary_columns import SummaryCol


def point_name(point: PointJSON, several_families: bool) -> str:
    """`model (Dff 4096)`, with the shape family when there are several (layer sweeps share one model name)."""
    family = f", {family_words(point['family'])}" if several_families else ""
    return f"{point['model']} (Dff {point['dff']}{family})"


# the per-point fields of the dispatch verification pass (command workloads; `crossover --json` names them): a
# column appears when any point of the table carries the field, so built-in runs and older data render as before
OptionalColumn = Literal["dispatch", "parity_class", "tokens_fused"]
OPTIONAL_COLUMNS: tuple[tuple[OptionalColumn, str], ...] = (
    ("dispatch", "dispatch"),
    ("parity_class", "parity"),
    ("tokens_fused", "tokens fallback/fused"),
)


def meaning(point: PointJSON) -> KindMeaning:
    """What the point's workload kind measures (its unit, whether it is a whole model), from its family label."""
    return kind_meaning(kind_of_family(point["family"]))


def tables(points: list[PointJSON], name: Callable[[str], str], options: Options) -> list[str]:
    """One table per unit (whole-model kinds first, as mlxcel's addenda show models before layers), by family,
    then Dff: a reader scans the table along Dff as along the plot's axis."""
    units = sorted({meaning(p) for p in points}, key=lambda m: (not m.whole_model, m.unit))
    lines = []
    for unit in dict.fromkeys(m.unit for m in units):
        mine = sorted((p for p in points if meaning(p).unit == unit), key=lambda p: (str(p["family"]), p["dff"]))
        lines += [*_table(mine, name, options, unit), ""]
    return lines


def _optional(point: PointJSON, key: OptionalColumn) -> str:
    """A cell of an optional column: tokens as `fallback/fused` (bold and flagged when the arms generated different
    counts: they did different work), parity with its fused-vs-reference NRMS (worst, median) when known."""
    if key == "tokens_fused":
        counts = "/".join(f"{point[k]:.0f}" if point.get(k) is not None else "-" for k in ("tokens_fallback", key))
        return f"**{counts} differ**" if point.get("tokens_differ") else counts
    value = point.get(key)
    if key == "parity_class" and value:
        return parity_cell(point)
    return "-" if value in (None, "") else md_text(value)


def _table(points: list[PointJSON], name: Callable[[str], str], options: Options, unit: str) -> list[str]:
    """mlxcel's addendum table (`| Dff | model | fallback … | fused … | fused/fallback |`, the winner in bold) with
    the interval and the verdict; fused/fallback is the estimate the interval belongs to. `decision test`: the
    one-sided test the decision read at that point (empty where it read none), so the table shows what decided."""
    several_families = len({p["family"] for p in points}) > 1
    extra = [(key, head) for key, head in OPTIONAL_COLUMNS if any(p.get(key) not in (None, "") for p in points)]
    if all(p.get("dispatch") in (None, "", "unverified") for p in points):  # one finding says so, not every row
        extra = [(key, head) for key, head in extra if key != "dispatch"]
    tested = any(p.get("decides") for p in points)
    ci_head = f"{number_format.percent(options.policy.confidence)} CI"
    heads = ["Dff", "model", f"fallback {unit}", f"fused {unit}", "fused/fallback", ci_head, "verdict"]
    rule = ["--:", "---", "--:", "--:", "--:", "---", "---"]
    if tested:
        heads, rule = [*heads, "decision test"], [*rule, "---"]
    if several_families:
        heads, rule = ["family", *heads], ["---", *rule]
    heads += [head for _, head in extra]
    rule += ["---"] * len(extra)
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join(rule) + "|"]
    for p in points:
        fallback, fused, ratio = (
            number_format.tok_s(p[SummaryCol.FALLBACK_TOK_S]),
            number_format.tok_s(p[SummaryCol.FUSED_TOK_S]),
            number_format.ratio(p[SummaryCol.ESTIMATE]),
        )
        if p[SummaryCol.VERDICT] == "fused":
            fused, ratio = f"**{fused}**", f"**{ratio}**"
        elif p[SummaryCol.VERDICT] == "fallback":
            fallback, ratio = f"**{fallback}**", f"**{ratio}**"
        ci = number_format.interval(p[SummaryCol.CI_LOW], p[SummaryCol.CI_HIGH])
        verdict = p[SummaryCol.VERDICT] + (" (unstable)" if p[SummaryCol.UNSTABLE] else "")
        if is_switch_point(p[SummaryCol.REASON]):  # measured, but with the switch: not a point of the cap's curve
            verdict = SWITCH_LABEL
        cells = [str(p["dff"]), md_text(p["model"]), fallback, fused, ratio, ci, verdict]
        if tested:
            cells.append(_test_cell(p.get("decision_test"), options.policy.margin))
        if several_families:
            cells.insert(0, md_text(name(p["family"])))
        cells += [_optional(p, key) for key, _ in extra]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def parity_cell(point: PointJSON) -> str:
    """The parity column in a word: `ok (≤ 0.05)` when no fused call's NRMS exceeded mlxcel's threshold, `CHECK`
    (bold) when some did; the figures behind it (calls, worst and median NRMS) are in the sidecar."""
    words = parity_words(point.get("parity_calls"), point.get("parity_calls_over"))
    return f"**{words[:5]}**{words[5:]}" if words.startswith("CHECK") else words or "-"


def _test_cell(test: TestJSON | None, margin: float) -> str:
    """The decision's one-sided test at this point, bold when it passed (the words the reason uses)."""
    if not test:
        return ""
    words = point_test_words(test["question"], bool(test["passed"]), test["bound"], float(test["level"]), margin)
    return f"**{words}**" if test["passed"] else words


def method(options: Options, tested: bool) -> str:
    """What the table's columns are, and which test the decision read (only when the table shows one)."""
    conf, band = number_format.percent(options.policy.confidence), number_format.percent(options.policy.margin)
    text = (
        f"fused/fallback is the geometric mean of the per-run ratios (exp of the mean ln difference, paired by round "
        f"where the arms were interleaved, Welch otherwise) with its {conf} t interval; the verdict reads that "
        f"two-sided interval: a path wins (bold) only when it lies beyond 1 ± {band}, `equivalent` inside it, else "
        "`inconclusive`. The throughput columns are the median of each side."
    )
    if tested:
        text += (
            " The decision asks one-sided questions (does fused win beyond 1 + δ at each Dff a raise would switch? "
            "does fallback win beyond 1 − δ at the largest Dff at or below the cap?); the `decision test` column shows "
            "each test it read, with its one-sided bound, so a point can be `inconclusive` two-sided and still pass "
            "the one-sided test the decision used."
        )
    return text


def not_used(points: list[PointJSON], several: bool) -> list[str]:
    """The points left out of the crossover, with the words for only the kinds of reason that occur."""
    left = [p for p in points if p[SummaryCol.VERDICT] in ("null", "insufficient")]
    if not left:
        return []
    kinds = {p[SummaryCol.VERDICT] for p in left}
    why = {"null": "null: both arms ran the same code, or excluded", "insufficient": "insufficient: too few runs"}
    head = f"Not used for the crossover ({'; '.join(why[k] for k in ('null', 'insufficient') if k in kinds)}):"
    return [
        head,
        "",
        *(f"- {md_text(point_name(p, several))}: {md_text(p[SummaryCol.REASON])}{measured(p)}" for p in left),
        "",
    ]


def table_corrections(wrong: dict[str, str]) -> list[str]:
    """Where the dispatch pass proved moecal's family table (docs/mlxcel.md) wrong, in either direction: the
    observation decided (a model predicted null that ran the kernel is measured; one predicted to run it that the
    kernel declined is null), and the addendum says so, since a wrong table is what to update first."""
    if not wrong:
        return []
    head = "moecal's family table was wrong here (the dispatch pass's observation decided):"
    return [head, "", *(f"- {md_text(model)}: {md_text(why)}" for model, why in sorted(wrong.items())), ""]


def measured(point: PointJSON) -> str:
    """What a left-out point measured when both arms ran (a family that ignores the cap compared by its switch, an
    A/A point timed with --measure-null): its ratio of medians, so the comparison is reported though it decides
    nothing."""
    ratio = ratio_of_medians(point)
    if ratio is None or not (point.get(SummaryCol.N_FUSED) and point.get(SummaryCol.N_FALLBACK)):
        return ""
    return f"; measured fused/fallback {number_format.ratio(ratio)} (ratio of medians, not used for the cap)"
