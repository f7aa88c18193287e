"""The addendum's findings: what each family's verdicts say (never more than they say), crossings of 1.0 when
there are several, the A/A check, outliers, points whose medians and ratio point opposite ways, what the dispatch
pass could not establish, and the comparison with a previous run. Rendered from the report data
(harness.output.addendum.report_data)."""

from __future__ import annotations

import math

from harness.analysis import number_format
from harness.analysis.decision.decision_json import (
    CrossingJSON,
    CrossoverJSON,
    DecisionJSON,
    FamilyJSON,
    PointJSON,
    ratio_of_medians,
)
from harness.analysis.decision.decision_words import band
from harness.analysis.points.stats import DECIDED as DECIDED_VERDICTS
from harness.output.addendum.addendum_heading import family_namer
from harness.output.addendum.addendum_table import point_name
from harness.output.addendum.report_data import PreviousJSON, ReportData
from harness.output.markdown_text import md_code, md_text
from harness.runs.summary_columns import SummaryCol


def _dff_list(dffs: list[int]) -> str:
    return ", ".join(str(d) for d in dffs)


VERDICT_WORDS = {
    "fused": "fused wins beyond {fused} at Dff",
    "fallback": "fallback wins beyond {fallback} at Dff",
    "equivalent": "the paths are equivalent (within 1 ± {margin}) at Dff",
    "inconclusive": "inconclusive at Dff",
    "insufficient": "too few runs for an interval at Dff",
    "null": "null (not used) at Dff",
}


def _verdicts(points: list[PointJSON], margin: float) -> str:
    """What one family's verdict column says, verdict by verdict (never more than it says)."""
    by_verdict: dict[str, list[int]] = {}
    for p in sorted(points, key=lambda p: p["dff"]):
        by_verdict.setdefault(p[SummaryCol.VERDICT], []).append(p["dff"])
    bands = {
        "margin": number_format.percent(margin),
        "fused": band(margin, "fused"),
        "fallback": band(margin, "fallback"),
    }
    parts = [f"{VERDICT_WORDS[v].format(**bands)} {_dff_list(by_verdict[v])}" for v in VERDICT_WORDS if v in by_verdict]
    return "; ".join(parts) or "no points"


def _crossings(family: CrossoverJSON, points: list[PointJSON], conf: str) -> str | None:
    """Every crossing of 1.0 with its own interval, and which one the crossover is — only when there are several
    (one crossing is the crossover, stated in the decision)."""
    listed = family["crossings"]
    if len(listed) < 2:
        return None
    valid = sorted(p["dff"] for p in points if p[SummaryCol.VERDICT] in DECIDED_VERDICTS)
    smallest, largest = (valid[0], valid[-1]) if valid else (None, None)

    def one(c: CrossingJSON) -> str:
        low = -math.inf if c["ci_low"] is None else c["ci_low"]
        high = math.inf if c["ci_high"] is None else c["ci_high"]
        ci = number_format.dff_interval(low, high, smallest, largest)
        at = "n/a" if c["dff"] is None else number_format.dff(c["dff"])  # null: not finite (json_exact)
        return f"{at} ({c['direction']}, {conf} CI {ci})"

    text = f"  - The estimated ratio is not monotone: it crosses 1.0 at {', '.join(one(c) for c in listed)}"
    chosen = family["crossover_dff"]
    if chosen is None:
        return f"{text}; none is a downward crossing after fused first leads, so none is the crossover."
    return f"{text}; the crossover is {number_format.dff(chosen)}, the first downward crossing after fused first leads."


def _opposite(points: list[PointJSON], several: bool) -> list[str]:
    """One line where the medians and the ratio point opposite ways (the table shows both; this says why)."""
    out = []
    for p in points:
        medians, estimate = ratio_of_medians(p), p[SummaryCol.ESTIMATE]
        if medians is None or estimate is None or (medians - 1) * (estimate - 1) >= 0:
            continue
        faster = "fused" if medians > 1 else "fallback"
        fused, fallback = (
            number_format.tok_s(p[SummaryCol.FUSED_TOK_S]),
            number_format.tok_s(p[SummaryCol.FALLBACK_TOK_S]),
        )
        out.append(
            f"- At {md_text(point_name(p, several))} the medians favour {faster} ({fused} vs {fallback}) while "
            f"fused/fallback is {number_format.ratio(estimate)}: "
            f"the medians compare each side's middle run, the ratio {_how(p)}, so a few outlying runs move the "
            "ratio and not the medians."
        )
    return out


def _how(point: PointJSON) -> str:
    """How this point's ratio was formed, as its `method` says (paired by round, or Welch on unpaired runs)."""
    if str(point.get(SummaryCol.METHOD, "")).startswith("paired"):
        return "averages every round's fused/fallback pair"
    return "compares the geometric means of each side's runs (not paired)"


def _families(d: DecisionJSON) -> list[tuple[str, bool, FamilyJSON | DecisionJSON]]:
    """The families the decision was made for: each one's name, whether it decides the cap, and its crossover and
    decision (one, unnamed in the JSON, when the run has one: the decision's own)."""
    if d.get("families"):
        return [(f["family"], f.get("decides", True), f) for f in d["families"]]
    return [(d["points"][0]["family"] if d["points"] else "all", True, d)]


def findings(data: ReportData) -> list[str]:
    """The findings list: per family its verdicts (and crossings), then the A/A check, outliers, medians against the
    ratio, the dispatch pass, unstable points and the comparison with a previous run."""
    d = data.decision
    conf = number_format.percent(data.options.policy.confidence)
    families = _families(d)
    several = len(families) > 1
    out = []
    binding = d.get("binding_family")
    for family, decides, record in families:
        mine = [p for p in d["points"] if p["family"] == family]
        name = md_text(family_namer(data.context)(family))
        out.append(f"- {name}: {_verdicts(mine, data.options.policy.margin)}.")
        crossings = _crossings(record, mine, conf)
        if crossings:
            out.append(crossings)
        if several and family != binding and record["reason"] not in d["reason"]:
            role = "its own decision (it does not decide the cap)" if not decides else "its own decision"
            out.append(f"  - {role}: {record['action']}: {md_text(record['reason'])}")
    aa = _aa_sentence(d, data.options.policy.margin)
    if aa:
        out.append(aa)
    for p in d["points"]:
        if p[SummaryCol.OUTLIERS]:
            where = md_text(point_name(p, several))
            out.append(f"- Outliers dropped (> 6 robust σ from the arm's median) at {where}: {p[SummaryCol.OUTLIERS]}.")
    out += _opposite(d["points"], several)
    out += _dispatch_findings(d["points"], several)
    unstable = [md_text(point_name(p, several)) for p in d["points"] if p[SummaryCol.UNSTABLE]]
    if unstable:
        out.append(f"- Unstable (an arm's robust spread > 5%): {', '.join(unstable)}.")
    if data.previous:
        out += _previous_findings(data.previous)
    return out + list(data.run_notes)


def _dispatch_findings(points: list[PointJSON], several: bool) -> list[str]:
    """What the verification pass could not establish, in words: a path predicted rather than observed, a point
    whose arms did different work."""
    out = []
    marked = [p for p in points if p.get("dispatch")]
    if marked and all(p["dispatch"] == "unverified" for p in marked):
        out.append("- The dispatch was not verified at any point (the input has no verification pass).")
        marked = []
    for state, words in (
        (
            "predicted",
            "the dispatch was not observed (the binary printed no probe line); the path is init's prediction",
        ),
        ("unverified", "the dispatch was not verified"),
    ):
        names = [md_text(point_name(p, several)) for p in marked if p["dispatch"] == state]
        if names:
            out.append(f"- At {', '.join(names)} {words}.")
    differ = [md_text(point_name(p, several)) for p in points if p.get("tokens_differ")]
    if differ:
        out.append(f"- The arms generated different token counts at {', '.join(differ)}: they did different work.")
    return out


def _aa_sentence(d: DecisionJSON, margin: float) -> str | None:
    """One sentence on the A/A arm: its spread against the noise model, and whether any A/A interval lies beyond
    the margin (then raise/lower are withheld) — both facts in one place so they can never read as a contradiction."""
    phi, aa = d.get("noise_scale"), d.get("aa_points", 0)
    if not aa or phi is None:
        return None
    if phi > 1.0:
        spread = f"spreads more than the noise model expects (φ = {phi:.2f}: every standard error is widened by φ)"
    else:
        spread = "spreads as the noise model expects (φ = 1)"
    beyond = d.get("aa_beyond_margin") or []
    if beyond:
        where = ", ".join(md_text(b) for b in beyond)
        tail = f"; at {where} it lies beyond 1 ± {margin:.1%}: drift larger than noise, so raise/lower are withheld"
    else:
        tail = f" and lies within 1 ± {margin:.1%} at every point"
    return f"- A/A check (the fallback measured twice, {aa} points): it {spread}{tail}."


def _previous_findings(prev: PreviousJSON) -> list[str]:
    then = f"Dff ≈ {number_format.dff(prev['crossover_dff'])}" if prev["crossover_dff"] is not None else prev["outcome"]
    out = [
        f"- Previous sweep ({prev['date']}, {md_text(prev['library_pin'])}, {md_code(prev['raw_data'])}): "
        f"crossover {then}, recommended cap {prev['recommended_cap']} ({prev['action']})."
    ]
    comparison = prev.get("comparison") or {"crossover": [], "points": []}
    out.extend(f"  - {md_text(s['family'])}: {s['text']}" for s in comparison["crossover"])
    changes = {(c["model"], c["dff"]): c for c in comparison["points"]}
    for p in prev["points"]:
        ratios = f"estimate {number_format.ratio(p['ratio_before'])} → {number_format.ratio(p['ratio_now'])}"
        c = changes.get((p["model"], p["dff"]))
        change = f", change ×{c['change']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]: {c['verdict']}" if c else ""
        out.append(
            f"  - {md_text(p['model'])} ({p['dff']}): {ratios}, verdict {p['verdict_before']} → {p['verdict_now']}"
            f"{change}"
        )
    if prev["not_compared"]:
        out.append(f"  - {prev['not_compared']} points had no comparable counterpart and were not compared.")
    return out
