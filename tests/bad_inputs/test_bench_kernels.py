"""Bad inputs of `moecal bench-kernels`: where it may not write."""

from __future__ import annotations

import pytest

from tests.bad_inputs.corpus import assert_case

# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("bench-out-stored", ["bench-kernels", "--backend", "cpu", "--out", "{ws}/stored/bench.csv"], 2, "read-only"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)
