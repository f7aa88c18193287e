"""A corpus of bad inputs through the real CLI: each must end in exactly one `error:` line on stderr, the expected
exit code, no traceback, and no existing file changed. Inputs are SYNTHETIC files built in a tmp folder.

Most cases call `harness.cli.main` in-process (an exception escaping it fails the test, which is the point); a few
go through `python -m harness` to check the real entry point prints the same single line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.results import csv_line
from tests.helpers import REPO, cli, fake_config, run_cli
from tests.synthetic_sweeps import DESIGN_EXAMPLE_CSV, linear_curve, synthetic_samples, write_run

MLXCEL_HEADER = DESIGN_EXAMPLE_CSV.splitlines(keepends=True)[2]


def _samples_with(ws: Path, name: str, edit) -> Path:
    """A copy of the good run's samples.csv with one row changed by `edit(row dict)`."""
    lines = (ws / "good" / "samples.csv").read_text().splitlines(keepends=True)
    header_end = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    columns = lines[header_end].strip().split(",")
    row = dict(zip(columns, lines[header_end + 1].rstrip("\n").split(","), strict=True))
    edit(row)
    lines[header_end + 1] = csv_line(row.values())
    path = ws / f"{name}.csv"
    path.write_text("".join(lines))
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """The workspace: one good run, a config of the fake benchmark, and every bad file the cases name."""
    ws = tmp_path_factory.mktemp("bad-inputs")
    good = write_run(ws / "good", synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=1))
    config = fake_config(ws)
    (ws / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (ws / "broken.yaml").write_text("name: [unclosed\n")
    (ws / "unknown-key.yaml").write_text(config.read_text() + "colour: blue\n")
    (ws / "empty.yaml").write_text("")
    (ws / "empty.csv").write_text("")
    (ws / "latin1.csv").write_bytes("model,dff\ncaf\xe9,1\n".encode("latin-1"))
    (ws / "other.csv").write_text("a,b\n1,2\n")
    _samples_with(ws, "nan-tok-s", lambda r: r.update(tok_s="nan"))
    _samples_with(ws, "zero-tok-s", lambda r: r.update(tok_s="0"))
    _samples_with(ws, "inf-tok-s", lambda r: r.update(tok_s="inf"))
    _samples_with(ws, "bad-arm", lambda r: r.update(arm="both"))
    _samples_with(ws, "two-devices", lambda r: r.update(device="another device"))
    _samples_with(ws, "no-dff", lambda r: r.update(dff=""))
    lines = (ws / "good" / "samples.csv").read_text().splitlines(keepends=True)
    (ws / "duplicate.csv").write_text("".join(lines) + lines[-1])
    (ws / "short-row.csv").write_text("".join(lines) + "synthetic,cpu,short\n")
    summary = ws / "summary-good.csv"
    assert cli("summarize", good, "--out", summary).returncode == 0
    text = summary.read_text()
    (ws / "summary-verdict.csv").write_text(text.replace(",fused,", ",maybe,", 1))
    rows = text.splitlines(keepends=True)
    (ws / "summary-duplicate.csv").write_text("".join(rows) + rows[-1])
    columns = next(line for line in rows if not line.startswith("#")).strip().split(",")
    last = rows[-1].rstrip("\n").split(",")
    last[columns.index("fused_tok_s")] = "inf"
    (ws / "summary-inf.csv").write_text("".join(rows[:-1]) + ",".join(last) + "\n")
    (ws / "mlxcel-nan.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,NaN,2,3,3,3,3,1.5\n")
    (ws / "mlxcel-inf.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,3,2,3,inf,3,3,1.5\n")
    (ws / "mlxcel-negative.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,-3,2,3,3,3,3,1.5\n")
    (ws / "mlxcel-ragged.csv").write_text(MLXCEL_HEADER + "m,1792,affine,1,2,3,2,3,3,3,3,1.5,9,9\n")
    (ws / "mlxcel-order.csv").write_text(
        "model,dff,quant_mode,fallback_run2,fallback_run1,fallback_median,fused_run1,fused_median,x\nm,1,affine,1,2,1,2,2,2\n"
    )
    no_quant = MLXCEL_HEADER.replace("quant_mode,", "")
    (ws / "mlxcel-no-quant.csv").write_text(no_quant + "m,1792,1,2,3,2,3,3,3,3,1.5\n")
    (ws / "mlxcel-ok.csv").write_text(DESIGN_EXAMPLE_CSV)
    for name, meta_text in (("meta-list", "[1, 2]"), ("meta-broken", "{")):
        folder = write_run(ws / name, synthetic_samples(linear_curve([1024, 4096], 5000), seed=2))
        (folder / "meta.json").write_text(meta_text)
    stored = write_run(ws / "stored", synthetic_samples(linear_curve([1024, 4096], 5000), seed=3))
    (stored / ".stored").write_text("a baseline kept outside git\n")
    (ws / "foreign").mkdir()
    (ws / "foreign" / "samples.csv").write_text("a,b\n1,2\n")
    (ws / "reports").mkdir()
    (ws / "reports" / "2026-01-02-synthetic-host-cpu-dff-crossover.md").write_text("### another run's addendum\n")
    (ws / "reports" / "2026-01-02-synthetic-host-cpu.json").write_text('{"moecal_report": 3, "raw_data": "elsewhere"}')
    (ws / "a-directory.csv").mkdir()
    return ws


# (id, argv with {ws} and {config} placeholders, exit code, text the one error line must contain)
CASES = [
    ("config-missing", ["plan", "{ws}/nope.yaml"], 2, "nope.yaml: (file): cannot read"),
    ("config-not-utf8", ["plan", "{ws}/latin1.yaml"], 2, "latin1.yaml: (file): not UTF-8 text"),
    ("config-invalid-yaml", ["plan", "{ws}/broken.yaml"], 2, "broken.yaml: line 2: invalid YAML"),
    ("config-unknown-key", ["sweep", "{ws}/unknown-key.yaml", "--dry-run"], 2, "unknown-key.yaml: colour"),
    ("config-empty", ["plan", "{ws}/empty.yaml"], 2, "empty.yaml"),
    ("config-is-a-directory", ["plan", "{ws}"], 2, "cannot read"),
    ("rounds-zero", ["plan", "{config}", "--rounds", "0"], 2, "moecal plan: Invalid value for '--rounds'"),
    ("rounds-not-a-number", ["sweep", "{config}", "--rounds", "many"], 2, "Invalid value for '--rounds'"),
    ("unknown-option", ["sweep", "{config}", "--bogus"], 2, "moecal sweep: No such option: --bogus"),
    ("unknown-command", ["sweeps"], 2, "moecal: No such command 'sweeps'"),
    ("missing-argument", ["summarize"], 2, "moecal summarize: Missing argument"),
    ("unknown-backend", ["sweep", "{config}", "--backend", "tpu", "--dry-run"], 2, "unknown backend 'tpu'"),
    ("only-unknown-model", ["sweep", "{config}", "--only", "nope", "--dry-run"], 2, "--only 'nope'"),
    ("out-is-a-file", ["sweep", "{config}", "--out", "{config}", "--dry-run"], 2, "exists and is not a directory"),
    ("out-holds-a-run", ["sweep", "{config}", "--out", "{ws}/good", "--dry-run"], 2, "already holds a run"),
    ("out-unwritable", ["sweep", "{config}", "--out", "/proc/moecal-run", "--no-report"], 2, "/proc/moecal-run"),
    ("resume-missing-dir", ["sweep", "{config}", "--resume", "{ws}/nope", "--dry-run"], 2, "not a moecal run"),
    ("resume-foreign", ["sweep", "{config}", "--resume", "{ws}/foreign", "--dry-run"], 2, "not a samples.csv"),
    ("resume-meta-broken", ["sweep", "{config}", "--resume", "{ws}/meta-broken", "--dry-run"], 2, "not a moecal meta"),
    ("resume-other-config", ["sweep", "{config}", "--resume", "{ws}/good", "--dry-run"], 2, "different config_sha256"),
    ("resume-stored", ["sweep", "{config}", "--resume", "{ws}/stored", "--dry-run"], 2, "marks it read-only"),
    ("resume-and-out", ["sweep", "{config}", "--resume", "{ws}/good", "--out", "{ws}/x"], 2, "--out: "),
    ("resume-nothing", ["sweep", "{config}", "--resume", "--dry-run"], 2, "no unfinished run of this config"),
    ("input-missing", ["summarize", "{ws}/nope.csv"], 2, "no such file or directory"),
    ("input-empty", ["crossover", "{ws}/empty.csv"], 2, "empty.csv: empty file"),
    ("input-not-utf8", ["summarize", "{ws}/latin1.csv"], 2, "latin1.csv: cannot read"),
    ("input-unknown-columns", ["crossover", "{ws}/other.csv"], 2, "not a samples.csv, summary.csv or mlxcel"),
    ("samples-nan", ["summarize", "{ws}/nan-tok-s.csv"], 2, "tok_s: line"),
    ("samples-zero", ["crossover", "{ws}/zero-tok-s.csv"], 2, "must be finite and > 0"),
    ("samples-inf", ["summarize", "{ws}/inf-tok-s.csv"], 2, "inf must be finite and > 0"),
    ("samples-bad-arm", ["summarize", "{ws}/bad-arm.csv"], 2, "arm: line"),
    ("samples-two-devices", ["summarize", "{ws}/two-devices.csv"], 2, "a run holds one device"),
    ("samples-no-dff", ["summarize", "{ws}/no-dff.csv"], 2, "dff: line"),
    ("samples-duplicate", ["summarize", "{ws}/duplicate.csv"], 2, "already an ok row"),
    ("samples-short-row", ["summarize", "{ws}/short-row.csv"], 2, "3 fields, the header has 26"),
    ("summary-verdict", ["crossover", "{ws}/summary-verdict.csv"], 2, "unknown verdict 'maybe'"),
    ("summary-inf", ["crossover", "{ws}/summary-inf.csv"], 2, "fused_tok_s: line"),
    ("summary-duplicate", ["crossover", "{ws}/summary-duplicate.csv"], 2, "already has a row"),
    ("mlxcel-nan", ["summarize", "{ws}/mlxcel-nan.csv"], 2, "fallback_run3: line 2: throughput must be finite"),
    ("mlxcel-inf", ["crossover", "{ws}/mlxcel-inf.csv"], 2, "fused_run2: line 2"),
    ("mlxcel-negative", ["summarize", "{ws}/mlxcel-negative.csv"], 2, "throughput must be finite and > 0"),
    ("mlxcel-ragged", ["summarize", "{ws}/mlxcel-ragged.csv"], 2, "more fields than the header"),
    ("mlxcel-run-order", ["summarize", "{ws}/mlxcel-order.csv"], 2, "expected columns fallback_run1..N"),
    ("mlxcel-no-quant-mode", ["import-mlxcel", "{ws}/mlxcel-no-quant.csv", "--out", "{ws}/imp"], 2, "starts with"),
    ("import-into-a-run", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/good"], 2, "already holds"),
    ("import-into-stored", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/stored"], 2, "read-only"),
    ("meta-not-an-object", ["summarize", "{ws}/meta-list"], 2, "meta.json: not a moecal meta.json"),
    ("run-dir-empty", ["summarize", "{ws}/reports"], 2, "neither is there"),
    ("margin-negative", ["summarize", "{ws}/good", "--margin", "-0.1"], 2, "Invalid value for '--margin'"),
    ("bench-out-stored", ["bench-kernels", "--backend", "cpu", "--out", "{ws}/stored/bench.csv"], 2, "read-only"),
    ("summarize-out-stored", ["summarize", "{ws}/good", "--out", "{ws}/stored/summary.csv"], 2, "read-only"),
    ("summarize-out-unwritable", ["summarize", "{ws}/good", "--out", "/proc/moecal.csv"], 2, "cannot write"),
    ("summarize-mlxcel-dir", ["summarize", "{ws}/good", "--mlxcel", "{ws}/a-directory.csv"], 2, "a-directory.csv"),
    ("report-over-foreign", ["report", "{ws}/good", "--out", "{ws}/reports"], 2, "holds the addendum of elsewhere"),
    ("check-baseline-missing", ["check", "--baseline", "{ws}/nope", "--current", "{ws}/good"], 2, "nope"),
    ("doctor-unknown-backend", ["doctor", "--backend", "tpu"], 2, "unknown backend 'tpu'"),
]


def _snapshot(ws: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in ws.rglob("*") if p.is_file() and p.name != ".lock"}


def _argv(args: list[str], ws: Path) -> list[str]:
    return [a.format(ws=ws, config=ws / "config.yaml") for a in args]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, argv, code, expected):
    before = _snapshot(ws)
    done = cli(*_argv(argv, ws), cwd=ws)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert expected in lines[0] and "Traceback" not in done.stderr + done.stdout
    assert _snapshot(ws) == before, "a failing command changed a file"


def test_the_corpus_is_large_and_names_are_unique():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", ["unknown-option", "config-not-utf8", "samples-duplicate", "out-unwritable"])
def test_the_real_entry_point_prints_the_same_one_line(ws, name):
    argv, code, expected = next(c[1:] for c in CASES if c[0] == name)
    done = run_cli(*_argv(argv, ws), cwd=ws)
    assert done.returncode == code and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], done.stderr


def test_a_summary_of_the_earlier_engine_points_to_the_samples():
    """The stored CPU baseline's summary.csv predates the t-interval engine: reading it alone must say what to do."""
    stored = REPO / "results" / "20261130-cpu-vm-cpu-smoke"
    done = cli("crossover", stored / "summary.csv")
    assert done.returncode == 2 and "earlier bootstrap engine" in done.stderr and str(stored) in done.stderr
    assert cli("crossover", stored).returncode == 0  # the run directory reads its samples


# Hostile user strings: not errors, but they must reach the addendum and the plot as text, never as structure.
HOSTILE_NAMES = [
    ("pipe", "model|with|pipes"),
    ("newline", "model\n### injected heading"),
    ("html", "<img src=x onerror=alert(1)>"),
    ("mathtext", "$x$ and $y$"),
]


def _table_cells(line: str) -> int:
    """Cells of a markdown table row, counting only unescaped `|`."""
    return len([i for i, c in enumerate(line) if c == "|" and (i == 0 or line[i - 1] != "\\")]) - 1


@pytest.mark.parametrize("name", [h[1] for h in HOSTILE_NAMES], ids=[h[0] for h in HOSTILE_NAMES])
def test_a_hostile_name_stays_text_in_the_addendum_and_the_plot(tmp_path, monkeypatch, name):
    import matplotlib.cbook
    import matplotlib.figure
    import matplotlib.text

    from harness.report import write_report

    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=7, workload="command")
    samples["model"] = name  # every SYNTHETIC point carries the hostile model name
    meta = {"host": name, "backend": "cpu", "library_pin": name, "workload": "command", "arms": {"fused": name}}
    run = write_run(tmp_path / "run", samples, meta)
    labels: list[str] = []
    save = matplotlib.figure.Figure.savefig

    def capture(fig, *args, **kwargs):
        labels.extend(t.get_text() for t in fig.findobj(matplotlib.text.Text))
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    md_path, _, _ = write_report(run, tmp_path / "out")
    body = md_path.read_text()
    assert body.count("\n#") == 0 and body.startswith("### ")  # one heading, nothing injected
    prose = re.sub(r"`[^`]*`", "", body)  # inside a code span HTML and `$` are inert (CommonMark)
    assert "<img" not in prose and "$x$" not in prose
    rows = [line for line in body.splitlines() if line.startswith("|")]
    assert rows and len({_table_cells(line) for line in rows}) == 1  # a name never adds or splits a cell
    assert labels and not any(matplotlib.cbook.is_math_text(label) for label in labels)
    shown = name.replace("\n", " ").replace("$", "\\$")  # one line, `$` escaped: mathtext shows it as typed
    assert any(shown in label for label in labels)
