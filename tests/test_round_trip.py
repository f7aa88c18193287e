"""moecal never writes a file its own readers refuse: every writer's output read back by every reader of it, with
hostile strings (SYNTHETIC runs, seeded). Writers: the sample writer (samples.csv + meta.json), `summarize --out`
(summary.csv), `summarize --mlxcel` (the mlxcel CSV export), the dispatch record (verification.json, non-finite
parity figures included), `report` (the addendum and its sidecar JSON). Readers: every analysis command
(`crossover --json` on the run, on summary.csv, on the export), RunDirectory, read_record, read_sidecar,
check-reports. A property test by seeded generation (hypothesis is not a dependency): each trial draws model names
and provenance values from hostile fragments; the names must come back exactly, and the addendum must carry no
control or bidirectional character."""

from __future__ import annotations

import json
import random
import re

import pytest

from harness.analysis.evidence.dispatch_evidence import RECORD, read_record
from harness.measure.bench_output import parity_calls
from harness.measure.dispatch import _figures
from harness.output.addendum.report_data import read_sidecar
from harness.runs.formats import SAMPLE_COLUMNS, write_text_atomic
from harness.runs.rundir import RunDirectory, SampleWriter
from tests.support.helpers import cli
from tests.support.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples

FRAGMENTS = [
    "a,b", 'q"uote', "new\nline", "#hash", "=HYPERLINK(1)", "'apos", "+1", "-x", "@at", "bidi\u202eevil",
    "sep\u2028line", "pipe|x", "<b>tag</b>", "emoji\U0001f642", "tab\tx", "back\\slash", "$math$", "`code`",
    "[link](x)", "\ufeffbom", "cr\rx", "# backend: metal",
]  # fmt: skip
DFFS = [1024, 4096, 8192]
BIDI_OR_CONTROL = re.compile("[\\x00-\\x08\\x0b-\\x1f\\x7f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069\\u2028]")


def _names(rng: random.Random) -> list[str]:
    """len(DFFS) distinct hostile model names: each a fragment, sometimes two, with a unique suffix."""
    return [f"{''.join(rng.sample(FRAGMENTS, rng.randint(1, 2)))}-{i}" for i in range(len(DFFS))]


def _write_run(folder, names: list[str], pin: str):
    samples = synthetic_samples(linear_curve(DFFS, 5000), rounds=3, seed=3)
    samples["model"] = samples["dff"].map(dict(zip(DFFS, names, strict=True)))
    meta = {**SYNTHETIC_META, "library_pin": pin, "host": pin}
    with SampleWriter(folder, meta) as writer:
        for row in samples.to_dict("records"):
            writer.append({k: v for k, v in row.items() if k in SAMPLE_COLUMNS})
    return folder


def _models(done) -> set[str]:
    assert done.returncode == 0, done.stderr
    return {str(point["model"]) for point in json.loads(done.stdout)["points"]}


@pytest.mark.parametrize("seed", range(3))
def test_every_writer_round_trips_through_every_reader(tmp_path, seed):
    rng = random.Random(seed)
    (tmp_path / "pyproject.toml").write_text("")  # the project root check-reports re-derives the addendum in
    names, pin = _names(rng), "".join(rng.sample(FRAGMENTS, 3))
    run = _write_run(tmp_path / "run", names, pin)
    assert RunDirectory(run).read_meta()["library_pin"] == pin
    assert _models(cli("summarize", run, "--json")) == set(names)

    summary, export = tmp_path / "summary.csv", tmp_path / "export.csv"
    done = cli("summarize", run, "--out", summary, "--mlxcel", export)
    assert done.returncode == 0, done.stderr
    assert _models(cli("summarize", summary, "--json")) == set(names)
    assert _models(cli("summarize", export, "--json")) == set(names)
    header = [line for line in export.read_text(encoding="utf-8").split("\n") if line.startswith("#")]
    assert all(": " in line for line in header) and not any(line.startswith("# backend: metal") for line in header)

    parity = (
        "[fused-moe-parity] call 1: fused-vs-ref=nan fused-vs-truth=1e999 ref-vs-truth=1.0e-03 ref_rms=1.0e+00 "
        "truth_rms=1.0e+00 (act=0 k=8 din=2048 dff=1024)"
    )
    runs = [
        {"path": "fused", "status": "ok", **_figures(parity_calls(parity))},
        {"path": "fallback", "status": "ok", "calls": 0, "dffs": []},
    ]
    record = {name: {"dff": dff, "runs": runs} for name, dff in zip(names, DFFS, strict=True)}
    write_text_atomic(run / RECORD, json.dumps({"models": record}, indent=1) + "\n")  # as harness.measure.dispatch
    assert set(read_record(run)) == set(names)

    reports = tmp_path / "reports"
    done = cli("report", run, "--out", reports)
    assert done.returncode == 0, done.stderr
    (addendum,) = reports.glob("*-dff-crossover.md")
    sidecar = read_sidecar(addendum)
    assert sidecar is not None  # strict JSON, read back
    assert not BIDI_OR_CONTROL.search(addendum.read_text(encoding="utf-8")), "a control character in the addendum"
    checked = cli("check-reports", reports)
    assert checked.returncode == 0, checked.stdout + checked.stderr
