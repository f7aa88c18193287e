"""Bad inputs of `moecal summarize`: samples, summaries, mlxcel CSVs and run records that cannot be read."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
from pathlib import Path

import pytest

from harness.runs.formats import format_provenance, read_frame
from tests.bad_inputs.corpus import DEEP, assert_case, one_error_line, synthetic_run
from tests.support.helpers import REPO, cli, run_cli
from tests.support.synthetic_sweeps import (
    SYNTHETIC_META,
    linear_curve,
    synthetic_samples,
    write_run,
)

# Hardening v4 (issue 28): results that must not be silently wrong. Not error lines: what moecal writes and reads back.
FORMULA_NAME = '=HYPERLINK("http://x","click"),\n@SUM(1+1)'  # a formula, a comma and a newline in one model name


def _formula_cells(path: Path) -> list[str]:
    """Cells of a CSV (its `#` header skipped) that a spreadsheet would run as a formula."""
    from harness.runs.formats import FORMULA_STARTS

    lines = path.read_text().splitlines(keepends=True)
    body = "".join(line for line in lines if not line.startswith("#"))
    cells = [cell for row in csv.reader(io.StringIO(body)) for cell in row]
    return [c for c in cells if c.startswith(FORMULA_STARTS) and not re.fullmatch(r"[-+]?[\d.]+([eE][-+]?\d+)?", c)]


def header_lines_text(path: Path) -> list[str]:
    """The lines before the CSV's column row (what the `#` provenance header holds)."""
    lines = path.read_text().splitlines()
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]


# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("missing-argument", ["summarize"], 2, "moecal summarize: Missing argument"),
    ("input-missing", ["summarize", "{ws}/nope.csv"], 2, "no such file or directory"),
    ("input-not-utf8", ["summarize", "{ws}/latin1.csv"], 2, "latin1.csv: cannot read"),
    ("samples-nan", ["summarize", "{ws}/nan-tok-s.csv"], 2, "tok_s: line"),
    ("samples-inf", ["summarize", "{ws}/inf-tok-s.csv"], 2, "inf must be finite and > 0"),
    ("samples-bad-arm", ["summarize", "{ws}/bad-arm.csv"], 2, "arm: line"),
    ("samples-two-devices", ["summarize", "{ws}/two-devices.csv"], 2, "a run holds one device"),
    ("samples-no-dff", ["summarize", "{ws}/no-dff.csv"], 2, "dff: line"),
    ("samples-duplicate", ["summarize", "{ws}/duplicate.csv"], 2, "already an ok row"),
    ("samples-short-row", ["summarize", "{ws}/short-row.csv"], 2, "3 fields, the header has 29"),
    ("mlxcel-nan", ["summarize", "{ws}/mlxcel-nan.csv"], 2, "fallback_run3: line 2: throughput must be finite"),
    ("mlxcel-negative", ["summarize", "{ws}/mlxcel-negative.csv"], 2, "throughput must be finite and > 0"),
    ("mlxcel-ragged", ["summarize", "{ws}/mlxcel-ragged.csv"], 2, "more fields than the header"),
    ("mlxcel-run-order", ["summarize", "{ws}/mlxcel-order.csv"], 2, "expected columns fallback_run1..N"),
    ("meta-not-an-object", ["summarize", "{ws}/meta-list"], 2, "meta.json: not a moecal meta.json"),
    ("run-dir-empty", ["summarize", "{ws}/reports"], 2, "neither is there"),
    ("margin-negative", ["summarize", "{ws}/good", "--margin", "-0.1"], 2, "Invalid value for '--margin'"),
    ("summarize-out-stored", ["summarize", "{ws}/good", "--out", "{ws}/stored/summary.csv"], 2, "read-only"),
    ("summarize-out-unwritable", ["summarize", "{ws}/good", "--out", "/proc/moecal.csv"], 2, "cannot write"),
    ("summarize-mlxcel-dir", ["summarize", "{ws}/good", "--mlxcel", "{ws}/a-directory.csv"], 2, "a-directory.csv"),
    # readers
    ("mlxcel-duplicate-row", ["summarize", "{ws}/mlxcel-duplicate.csv"], 2, "model: line 3: 'm' at dff 1792 already"),
    ("meta-other-device", ["summarize", "{ws}/meta-other-device"], 2, "meta.json: device: 'another device', but"),
    ("summarize-out-link", ["summarize", "{ws}/good", "--out", "{ws}/summary-link.csv"], 2, "is a symbolic link"),
    (
        "mlxcel-torn-last-row",
        ["summarize", "{ws}/mlxcel-torn.csv"],
        2,
        "mlxcel-torn.csv: line 3: 5 fields, the header has 12",
    ),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


def test_a_formula_name_is_inert_in_every_csv_and_reads_back_to_the_same_decision(tmp_path):
    """SYNTHETIC run whose model name is a formula with a comma and a newline: samples.csv (as the sweep writes it),
    summary.csv and the mlxcel export hold no formula cell and no injected header line, and all three read back
    to the same name and the same decision."""
    from harness.runs.formats import frame_csv

    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=8, workload="command")
    samples["model"] = FORMULA_NAME
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.csv").write_text(format_provenance(SYNTHETIC_META) + frame_csv(samples))
    (run / "meta.json").write_text(json.dumps(SYNTHETIC_META))
    summary, export = tmp_path / "summary.csv", tmp_path / "mlxcel.csv"
    assert cli("summarize", run, "--out", summary, "--mlxcel", export).returncode == 0
    decisions = []
    for path in (run / "samples.csv", summary, export):
        assert _formula_cells(path) == [], path
        assert all(line.startswith("#") for line in header_lines_text(path)), path  # nothing injected
        assert set(read_frame(path)["model"]) == {FORMULA_NAME}, path
        done = cli("crossover", path if path != run / "samples.csv" else run, "--json")
        assert done.returncode == 0, done.stderr
        decision = json.loads(done.stdout)
        # the crossover as the addendum prints it (whole Dff): the export keeps tok/s to 2 decimals, so its last
        # digits move by far less than one Dff
        decisions.append((decision["action"], decision["recommended_cap"], round(decision["crossover_dff"])))
    assert len(set(decisions)) == 1, decisions


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        ("meta.json", DEEP, "meta.json: not a moecal meta.json: (file): nested 100000 levels deep"),
        ("meta.json", '{"format": 1e400}', "meta.json: not a moecal meta.json: (file): invalid JSON"),
        ("verification.json", DEEP, "verification.json: not a moecal verification record: (file): nested"),
        ("verification.json", '{"models": {"synthetic-layer": {}}}', "models.synthetic-layer: expected {dff: N"),
        (
            "verification.json",
            '{"models": {"synthetic-layer": {"dff": 1024, "runs": [{"path": "fused"}]}}}',
            "models.synthetic-layer.runs[0].status: missing or not str",
        ),
        (
            "verification.json",
            '{"models": {"m": {"dff": 1024, "runs": []}}}',
            "models.m.runs: expected one fused and one fallback run",
        ),
    ],
    ids=["meta-deep", "meta-1e400", "verification-deep", "verification-no-keys", "run-no-keys", "runs-empty"],
)
def test_a_run_record_nested_too_deep_or_missing_keys(tmp_path, file, text, expected):
    run = synthetic_run(tmp_path, "run", [1024, 4096, 8192])
    (run / file).write_text(text)
    one_error_line(cli("summarize", run, "--out", tmp_path / "summary.csv"), expected)


def test_a_large_mlxcel_csv_summarises_to_one_json_object(tmp_path):
    """Correctness on 2,000 SYNTHETIC rows (the 10^6-row timing is scripts/bench_mlxcel_read.py's job)."""
    spec = importlib.util.spec_from_file_location("bench_mlxcel_read", REPO / "scripts" / "bench_mlxcel_read.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "sweep.csv"
    bench.synthetic_csv(2000, path)
    done = run_cli("summarize", path, "--json")
    assert done.returncode == 0, done.stderr
    points = json.loads(done.stdout)["points"]
    assert len(points) == 2000 and {p["model"] for p in points} == {f"m{i}" for i in range(2000)}
    crossover = json.loads(cli("crossover", path, "--json").stdout)
    assert [p["model"] for p in crossover["points"]] == [p["model"] for p in points]


@pytest.mark.parametrize("field", ["current_default", "rounds"])
def test_a_400_digit_integer_in_meta_json_is_one_line(tmp_path, field):
    meta = {**SYNTHETIC_META, field: int("9" * 400)}
    run = write_run(tmp_path / "run", synthetic_samples(linear_curve([1024, 4096, 8192], 6000)), meta)
    for command in ("summarize", "crossover"):
        one_error_line(cli(command, run), "(400 digits) does not fit in 64 bits")
