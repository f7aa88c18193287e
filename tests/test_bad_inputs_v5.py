"""Hardening v5 (issue 38): knobs that cannot poison a decision, moecal's own files always readable, odd inputs
(FIFOs, BOMs, markers) refused in one line before anything is written. Every input is SYNTHETIC, built in a tmp
folder; each refused case ends in one `error:` line with exit code 2 and no traceback."""

from __future__ import annotations

import time

import pytest

from harness.config import knobs as launch_knobs
from tests.helpers import cli, fake_config


def _one_error_line(done, expected: str, code: int = 2) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr + done.stdout
    assert lines and lines[-1].startswith("error: "), done.stderr
    assert sum(line.startswith("error: ") for line in lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert expected in lines[-1], lines[-1]


# --- knobs: only the binary's launch knobs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("MLXCEL_FUSED_MOE", "the kill switch"),
        ("MLXCEL_FUSED_MOE_MAX_DFF", "the cap itself"),
        ("MLXCEL_FUSED_MOE_PARITY_CHECK", "the parity probe"),
        ("MLXCEL_FUSED_MOE_PARITY_THRESHOLD", "the parity probe's threshold"),
        ("MLXCEL_FUSED_MOE_PARITY_CHECK_EVERY", "the parity probe"),
        ("MLXCEL_FUSED_MOE_SGV", "did you mean MLXCEL_FUSED_MOE_SGY?"),
        ("MLXCEL_NO_SUCH_THING", "is not a launch knob the binary reads"),
    ],
)
def test_a_knob_that_is_no_launch_knob_is_refused_before_anything_runs(tmp_path, name, expected):
    config = fake_config(tmp_path, knobs={name: [0, 1]})
    _one_error_line(cli("plan", config), expected)
    _one_error_line(cli("sweep", config, "--out", tmp_path / "run"), expected)
    assert not (tmp_path / "run").exists()


def test_six_knobs_of_32_values_are_refused_at_once(tmp_path):
    knobs = {f"MLXCEL_FUSED_MOE_SGY{'_' * i}": list(range(1, 33)) for i in range(6)}
    started = time.monotonic()
    _one_error_line(cli("plan", fake_config(tmp_path, knobs=knobs)), "knobs")
    assert time.monotonic() - started < 10


def test_the_product_of_settings_is_bounded_before_it_is_built():
    launch_knobs.check_count({"A": list(range(8)), "B": list(range(8))})  # 64: allowed
    with pytest.raises(ValueError, match="9 × 8 = 72 combinations"):
        launch_knobs.check_count({"A": list(range(9)), "B": list(range(8))})
    with pytest.raises(ValueError, match="at most 64"):  # counted, never built: 32**6 would not fit in memory
        launch_knobs.check_count({f"K{i}": list(range(32)) for i in range(6)})
