"""Bad inputs of `moecal crossover`: inputs that are no table, odd encodings and earlier engines' files."""

from __future__ import annotations

import json

import pytest

from tests.bad_inputs.corpus import assert_case, one_error_line
from tests.support.helpers import REPO, cli
from tests.support.synthetic_sweeps import (
    linear_curve,
    synthetic_samples,
    write_run,
)

# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("input-empty", ["crossover", "{ws}/empty.csv"], 2, "empty.csv: empty file"),
    ("input-unknown-columns", ["crossover", "{ws}/other.csv"], 2, "not a samples.csv, summary.csv or mlxcel"),
    ("samples-zero", ["crossover", "{ws}/zero-tok-s.csv"], 2, "must be finite and > 0"),
    ("summary-verdict", ["crossover", "{ws}/summary-verdict.csv"], 2, "unknown verdict 'maybe'"),
    ("summary-inf", ["crossover", "{ws}/summary-inf.csv"], 2, "fused_tok_s: line"),
    ("summary-duplicate", ["crossover", "{ws}/summary-duplicate.csv"], 2, "already has a row"),
    ("mlxcel-inf", ["crossover", "{ws}/mlxcel-inf.csv"], 2, "fused_run2: line 2"),
    ("cli-default-huge", ["crossover", "{ws}/good", "--current-default", "1000000000000"], 2, "--current-default"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


def test_a_summary_of_the_earlier_engine_points_to_the_samples():
    """The stored CPU baseline's summary.csv predates the t-interval engine: reading it alone must say what to do."""
    stored = REPO / "results" / "20261130-cpu-vm-cpu-smoke"
    done = cli("crossover", stored / "summary.csv")
    assert done.returncode == 2 and "earlier bootstrap engine" in done.stderr and str(stored) in done.stderr
    assert cli("crossover", stored).returncode == 0  # the run directory reads its samples


def test_a_fifo_given_as_input_is_not_a_regular_file(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.csv")
    one_error_line(cli("crossover", tmp_path / "pipe.csv"), "not a regular file")


def test_a_csv_with_a_utf8_byte_order_mark_is_read(tmp_path):
    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 6000))
    run = write_run(tmp_path / "run", samples)
    plain = cli("crossover", run / "samples.csv", "--json")
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (run / "samples.csv").read_bytes())
    marked = cli("crossover", bom, "--json")
    assert plain.returncode == marked.returncode == 0, marked.stderr
    same = marked.stdout.replace(str(bom), str(run / "samples.csv"))
    assert json.loads(same) == json.loads(plain.stdout)  # the same analysis, the mark gone
