"""Bad inputs of `moecal check`: missing baselines, and its JSON."""

from __future__ import annotations

import pytest

from tests.bad_inputs.corpus import assert_case, strict_json
from tests.support.helpers import cli
from tests.support.synthetic_sweeps import (
    linear_curve,
    synthetic_samples,
    write_run,
)

# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("check-baseline-missing", ["check", "--baseline", "{ws}/nope", "--current", "{ws}/good"], 2, "nope"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


def test_check_json_never_prints_nan(tmp_path):
    runs = [
        write_run(tmp_path / name, synthetic_samples(linear_curve([1024, 4096, 8192], crossover), rounds=2, seed=seed))
        for name, crossover, seed in (("a", 6000, 1), ("b", 5000, 2))
    ]
    done = cli("check", "--baseline", runs[0], "--current", runs[1], "--json")
    assert done.returncode == 0, done.stderr
    strict_json(done.stdout)  # a point of two rounds has no finite interval: null, not NaN
