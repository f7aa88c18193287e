"""Bad inputs of `moecal history`: where it may not write, library pins that are TeX."""

from __future__ import annotations

import pytest

from tests.bad_inputs.corpus import assert_case, synthetic_run
from tests.support.helpers import cli

# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("history-out-link", ["history", "{ws}/good", "{ws}/good", "--out", "{ws}/history-link.png"], 2, "symbolic link"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


@pytest.mark.parametrize("pin", ["$\\undefinedcmd$", "$^$", "a $ b", "50% _x_ {y} \\n"])
def test_a_library_pin_with_tex_is_plotted_as_text(tmp_path, pin):
    runs = [
        synthetic_run(tmp_path, "a", [1024, 4096, 8192], library_pin=pin),
        synthetic_run(tmp_path, "b", [1024, 4096, 8192]),
    ]
    done = cli("history", *runs, "--out", tmp_path / "history.png")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "history.png").stat().st_size > 0
