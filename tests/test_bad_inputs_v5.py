"""Hardening v5 (issue 38): knobs that cannot poison a decision, moecal's own files always readable, odd inputs
(FIFOs, BOMs, markers) refused in one line before anything is written. Every input is SYNTHETIC, built in a tmp
folder; each refused case ends in one `error:` line with exit code 2 and no traceback."""

from __future__ import annotations

import sys
import time

import pytest

from harness.config import knobs as launch_knobs
from tests.helpers import cli, fake_config
from tests.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run


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


# --- moecal's own files: a non-finite parity figure ---------------------------------------------------------------

# A SYNTHETIC benchmark whose fused kernel (the fused arm: the cap above its Dff) logs a parity call with a NaN and an
# overflowing (1e999 → inf) error when the probe is on; every run prints a Decode line.
NAN_PARITY = """import os, sys
dff, cap = int(sys.argv[1]), int(os.environ.get("MLXCEL_FUSED_MOE_MAX_DFF", "0"))
if os.environ.get("MLXCEL_FUSED_MOE_PARITY_CHECK") == "1" and dff <= cap:
    print(f"[fused-moe-parity] call 1: fused-vs-ref=nan fused-vs-truth=1e999 ref-vs-truth=1.0e-03 ref_rms=1.0e+00 "
          f"truth_rms=1.0e+00 (act=0 k=8 din=2048 dff={dff})", file=sys.stderr)
print("Decode: 1.00 ms (100.00 tok/s)")
"""


def test_a_nan_parity_figure_is_recorded_readably_and_reported(tmp_path):
    import json

    (tmp_path / "bench.py").write_text(NAN_PARITY)
    workload = {
        "command": [sys.executable, str(tmp_path / "bench.py"), "{dff}"],
        "dispatch_check": {},
        "dispatch_probe": None,
    }
    config = fake_config(tmp_path, models=[{"name": "a", "dff": 1024}, {"name": "b", "dff": 2048}], workload=workload)
    run = tmp_path / "run"
    done = cli("sweep", config, "--out", run, "--rounds", "2")
    assert done.returncode in (0, 1), done.stderr
    record = json.loads((run / "verification.json").read_text())  # strict: no NaN token in the file
    fused = next(r for r in record["models"]["a"]["runs"] if r["path"] == "fused")
    assert fused["fused_vs_ref_worst"] == "nan" and fused["fused_vs_truth_worst"] == "inf"
    summary = cli("summarize", run, "--json")
    assert summary.returncode == 0, summary.stderr
    points = {p["model"]: p for p in json.loads(summary.stdout)["points"]}
    assert "CHECK: non-finite" in points["a"]["parity_class"]
    assert points["a"]["fused_vs_ref_worst"] is None  # JSON output: null, never NaN


@pytest.mark.parametrize("field", ["current_default", "rounds"])
def test_a_400_digit_integer_in_meta_json_is_one_line(tmp_path, field):
    meta = {**SYNTHETIC_META, field: int("9" * 400)}
    run = write_run(tmp_path / "run", synthetic_samples(linear_curve([1024, 4096, 8192], 6000)), meta)
    for command in ("summarize", "crossover"):
        _one_error_line(cli(command, run), "(400 digits) does not fit in 64 bits")
