"""Property test: over hundreds of SYNTHETIC sweeps (flat, curved, non-monotone, one point, all null; one or two
shape families; whole-model or layer points), the rendered addendum is parsed back and every figure and every claim
in it is checked against the record it was rendered from (the sidecar's `decision`).

Nothing here was measured: the per-point estimates are drawn from seeded random curves and go straight into the
decision engine (harness.analysis.decision.decide.decide), so one sweep costs milliseconds; the statistics that make
those estimates from runs are tested elsewhere (tests/analysis/points/test_stats.py). No file is written.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from harness.analysis import number_format
from harness.analysis.decision.cap_target import CapTarget
from harness.analysis.decision.decide import decide
from harness.analysis.decision.decision_json import decision_json, ratio_of_medians
from harness.analysis.decision.decision_words import band, family_words, point_test_words
from harness.analysis.decision.pipeline import Options, applied
from harness.analysis.points.stats import DECIDED, classify, ratio_interval
from harness.output.addendum.addendum_findings import VERDICT_WORDS
from harness.output.addendum.addendum_markdown import render_markdown
from harness.output.addendum.report_data import ReportData
from harness.output.markdown_text import md_text
from harness.output.mlxcel_source import known_defaults
from harness.runs.summary_columns import SUMMARY_COLUMNS, SummaryCol

SWEEPS = 300
SHAPES = ("flat", "curved", "non-monotone", "one point", "all null")
GRID = (512, 768, 1024, 1792, 2048, 4096, 6400, 8192, 14336)


def _family(rng: np.random.Generator, shape: str, d_model: int, workload: str) -> list[dict[str, object]]:
    """One family's points (SYNTHETIC): θ̂ per Dff from the shape, its se and df, medians that may disagree."""
    count = 1 if shape == "one point" else int(rng.integers(2, 7))
    dffs = np.sort(rng.choice(GRID, count, replace=False))
    if shape == "flat":
        theta = rng.normal(0, 0.01, count)
    elif shape == "curved":
        crossover = rng.uniform(600, 16000)
        theta = rng.uniform(0.02, 0.15) * (crossover / dffs - 1)
    else:  # non-monotone, one point, all null: signs drawn at random
        theta = rng.normal(0, 0.05, count)
    se = rng.uniform(0.002, 0.05, count)
    df = rng.integers(2, 10, count).astype(float)
    rows = []
    for d, t, s, f in zip(dffs, theta, se, df, strict=True):
        estimate, low, high = (float(v) for v in ratio_interval(t, s, f))
        fallback = 1e5 / d * rng.uniform(0.8, 1.2)
        medians = estimate * math.exp(rng.normal(0, 0.02))  # the ratio of medians: near the estimate, not equal
        null = shape == "all null"
        rows.append(
            {
                "workload": workload,
                "model": f"synthetic-{workload}-{d_model}-{d}",
                "dff": int(d),
                "d_model": d_model,
                "top_k": 8,
                "n_experts": 64,
                "bits": 4,
                "group_size": 64,
                "dtype": "float32",
                SummaryCol.FALLBACK_TOK_S: fallback,
                SummaryCol.FUSED_TOK_S: fallback * medians,
                SummaryCol.RATIO: medians,
                SummaryCol.ESTIMATE: math.nan if null else estimate,
                SummaryCol.CI_LOW: math.nan if null else low,
                SummaryCol.CI_HIGH: math.nan if null else high,
                SummaryCol.LN_ESTIMATE: math.nan if null else float(t),
                SummaryCol.SE: math.nan if null else float(s),
                SummaryCol.DF: float(f),
                SummaryCol.VERDICT: "null" if null else str(classify(low, high)),
                SummaryCol.REASON: "synthetic null point" if null else "",
                SummaryCol.N_FALLBACK: 5,
                SummaryCol.N_FUSED: 5,
            }
        )
    return rows


def _sweep(seed: int) -> dict[str, object]:
    """One SYNTHETIC sweep's report record, built as build_report_data builds it (no files)."""
    rng = np.random.default_rng(seed)
    shape = SHAPES[seed % len(SHAPES)]
    workload = ("layer", "command", "decode")[int(rng.integers(0, 3))]
    families = 2 if workload == "layer" and rng.random() < 0.4 else 1
    rows = [r for f in range(families) for r in _family(rng, shape, 2048 * (f + 1), workload)]
    summary = pd.DataFrame(rows).reindex(columns=SUMMARY_COLUMNS)
    for column in (SummaryCol.UNSTABLE, SummaryCol.PAIRED):
        summary[column] = False
    summary[SummaryCol.OUTLIERS] = ""
    summary[SummaryCol.METHOD] = "paired"
    current = [None, 4096, 8192, 1024][int(rng.integers(0, 4))]
    cap_env = "" if workload != "command" else "MLXCEL_FUSED_MOE_MAX_DFF"
    options = Options(current_default=current)
    result = applied(decide(summary, current), CapTarget(env=cap_env))
    backend = ("cpu", "cuda", "metal")[int(rng.integers(0, 3))]
    settings = options.settings()
    d = decision_json(summary, result, {"current_default": current, "cap_env": cap_env, "noise_scale": None,
                                        "aa_points": 0, "aa_beyond_margin": [], **settings})  # fmt: skip
    return {
        "moecal_report": 3,
        "date": "2026-01-02",
        "host": "synthetic-host",
        "backend": backend,
        "library_pin": "synthetic 1.0",
        "raw_data": "samples.csv",
        "options": {**settings, "current_default": current},
        "files": {
            "addendum": "x.md",
            "plot": "x.png",
            "sidecar": "x.json",
            "mlxcel_csv": None,
            "patch": "x.diff",
            "raw_data": "samples.csv",
            "raw_name": "samples.csv",
        },  # fmt: skip
        "context": {"workload": workload, **({"bench_command": "mlxcel-bench-decode -m m"} if cap_env else {})},
        "mlxcel": known_defaults().as_json() if backend != "cpu" else None,
        "decision": d,
        "previous": None,
    }


def _families(d: dict) -> list[dict]:
    return d.get("families") or [{**d, "family": d["points"][0]["family"] if d["points"] else "", "decides": True}]


TEST = re.compile(
    r"at Dff (\d+) \([^)]*\) the ratio is ([0-9.]+); (fused|fallback) (wins|not shown to win) beyond 1 [+−] "
    r"([0-9.]+%) \(one-sided ([0-9.]+%) (lower|upper) bound ([0-9.]+)\)"
)
RAISED = re.compile(r"fused wins beyond 1 \+ [0-9.]+% at every measured Dff above \d+ up to \d+ \(one-sided "
                    r"[0-9.]+% lower bounds ([^)]*)\)")  # fmt: skip
CROSSES = re.compile(r"crosses 1\.0 at Dff ≈ (\d+) \((?:[^;]*; )?(\d+%) CI \[(<?\d+), (>?\d+)\]")
SIGNS = re.compile(r"The estimated ratio is (above 1\.0 at every measured Dff|not above 1\.0 at any measured Dff|"
                   r"above 1\.0 at Dff (\d+(?:, \d+)*) and not above it at Dff (\d+(?:, \d+)*))")  # fmt: skip


def _inside(value: int, low: str, high: str) -> bool:
    return (low.startswith("<") or int(low) <= value) and (high.startswith(">") or value <= int(high))


def _check_reason(reason: str, family: dict, points: list[dict], margin: float) -> None:
    """Every figure and claim of one family's reason against that family's record."""
    valid = sorted((p for p in points if p["verdict"] in DECIDED), key=lambda p: p["dff"])
    by_dff = {p["dff"]: p for p in valid}
    tests = {t["dff"]: t for t in family["tests"]}
    for dff, ratio, question, outcome, margin_text, level, side, bound in TEST.findall(reason):
        test = tests[int(dff)]  # the reason cites only tests the decision read
        assert ratio == number_format.ratio(by_dff[int(dff)]["estimate"])
        assert (question, outcome == "wins", bound) == (
            test["question"],
            test["passed"],
            number_format.ratio(test["bound"]),
        )
        assert level == number_format.percent(test["level"]) and margin_text == number_format.percent(margin)
        assert side == ("lower" if question == "fused" else "upper")
    raised = RAISED.search(reason)
    if raised:  # a raise cites the bound of every test that passed
        cited = {int(dff): bound for dff, bound in re.findall(r"(\d+): ([0-9.]+)", raised.group(1))}
        assert cited == {t["dff"]: number_format.ratio(t["bound"]) for t in tests.values() if t["passed"]}, reason
    else:  # keep and lower cite every test they read
        assert len(TEST.findall(reason)) == len(tests), reason
    for dff, _, low, high in CROSSES.findall(reason):
        assert dff == number_format.dff(family["crossover_dff"]) and _inside(int(dff), low, high), reason
    signs = SIGNS.search(reason)
    if valid:
        assert signs, reason
        above = [p["dff"] for p in valid if p["estimate"] > 1]
        below = [p["dff"] for p in valid if p["estimate"] <= 1]
        if signs.group(1).startswith("above 1.0 at every"):
            assert not below
        elif signs.group(1).startswith("not above"):
            assert not above
        else:
            assert [int(x) for x in signs.group(2).split(", ")] == above
            assert [int(x) for x in signs.group(3).split(", ")] == below


def _table_rows(text: str) -> dict[str, list[str]]:
    """Model → its row's cells (each synthetic model names one point), from every table of the addendum."""
    rows: dict[str, list[str]] = {}
    head: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            head = []
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not head:
            head = cells
        elif not line.startswith("|--") and not line.startswith("|---"):
            rows[cells[head.index("model")]] = dict(zip(head, cells, strict=True))
    return rows


def _check(data: dict) -> None:
    text = render_markdown(ReportData.from_json(data))
    d, opts = data["decision"], data["options"]
    margin = opts["margin"]
    rows = _table_rows(text)
    families = _families(d)
    deciding = {f["family"] for f in families if f.get("decides", True)}
    for p in d["points"]:
        row = rows[p["model"]]
        assert row["fused/fallback"].strip("*") == number_format.ratio(p["estimate"])
        assert row["95% CI"] == number_format.interval(p["ci_low"], p["ci_high"])
        unit = "layer steps/s" if p["family"].startswith("layer") else "tok/s"
        assert row[f"fallback {unit}"].strip("*") == number_format.tok_s(p["fallback_tok_s"])
        assert row[f"fused {unit}"].strip("*") == number_format.tok_s(p["fused_tok_s"])
        assert row["verdict"].split(" ")[0] == p["verdict"]
        test = p["decision_test"]
        assert p["decides"] == (test is not None)
        if test is not None:
            assert p["family"] in deciding
            words = point_test_words(test["question"], test["passed"], test["bound"], test["level"], margin)
            assert row["decision test"].strip("*") == words
        elif "decision test" in row:
            assert row["decision test"] == ""
        # the medians-vs-ratio line exactly where they point opposite ways
        opposite = (ratio_of_medians(p) - 1) * ((p["estimate"] or 1) - 1) < 0
        line = next((x for x in text.splitlines() if x.startswith(f"- At {p['model']} (") and "medians" in x), None)
        assert (line is not None) == opposite
        if line:
            assert f"while fused/fallback is {number_format.ratio(p['estimate'])}:" in line
    # each paragraph and each family's reason once; the decision's first line states action and value
    paragraphs = [block for block in text.split("\n\n") if block.strip()]
    assert len(paragraphs) == len(set(paragraphs))
    for family in families:
        assert text.count(md_text(family["reason"])) <= 1  # the binding family's reason only in the decision
        points = [p for p in d["points"] if p["family"] == family["family"]]
        _check_reason(family["reason"], family, points, margin)
        name = family_words(family["family"], data["context"].get("bench_command", ""))
        # the family's bullet lists each verdict's Dffs exactly as the verdict column has them
        bullet = next(x for x in text.splitlines() if x.startswith(f"- {md_text(name)}: "))
        for verdict, words in VERDICT_WORDS.items():
            said = words.format(
                margin=number_format.percent(margin), fused=band(margin, "fused"), fallback=band(margin, "fallback")
            )
            listed = re.search(re.escape(said) + r" (\d+(?:, \d+)*)", bullet)
            dffs = sorted(p["dff"] for p in points if p["verdict"] == verdict)
            assert (listed is not None) == bool(dffs), (verdict, bullet)
            if listed:
                assert [int(x) for x in listed.group(1).split(", ")] == dffs, (verdict, bullet)
        crossings = len(family["crossings"])
        assert ("not monotone" in text.split(f"- {name}: ")[1].split("\n- ")[0]) == (crossings > 1) or not points
    cap = d["recommended_cap"]
    assert f"**Decision: {d['action']} " in text and (cap is None or str(cap) in text.split("**Decision: ")[1][:40])
    # a line to apply only where a variable sets the cap (command workloads here); never for a built-in one
    assert ("per run: `" in text) == (bool(d["apply"]) and d["action"] in ("raise", "lower", "set") and cap is not None)
    if data["context"]["workload"] != "command":
        assert d["apply"] is None
    kinds = {p["verdict"] for p in d["points"]}
    not_used = next((line for line in text.splitlines() if line.startswith("Not used")), "")
    assert ("insufficient:" in not_used) == ("insufficient" in kinds) and ("null:" in not_used) == ("null" in kinds)


@pytest.mark.parametrize("chunk", range(3))
def test_every_figure_and_claim_of_the_addendum_matches_its_record(chunk):
    for seed in range(chunk * SWEEPS // 3, (chunk + 1) * SWEEPS // 3):
        data = _sweep(seed)
        try:
            _check(data)
        except (AssertionError, KeyError, IndexError) as exc:
            raise AssertionError(
                f"SYNTHETIC sweep seed {seed}: {exc!r}\n\n{render_markdown(ReportData.from_json(data))}"
            ) from exc
