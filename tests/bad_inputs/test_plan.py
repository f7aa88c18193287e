"""Bad inputs of `moecal plan`: configs, launch knobs and format specs refused before anything runs."""

from __future__ import annotations

import sys
import time

import pytest

from harness.config import knobs as launch_knobs
from tests.bad_inputs.corpus import assert_case, one_error_line
from tests.support.helpers import cli, fake_config

# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("config-missing", ["plan", "{ws}/nope.yaml"], 2, "nope.yaml: (file): cannot read"),
    ("config-not-utf8", ["plan", "{ws}/latin1.yaml"], 2, "latin1.yaml: (file): not UTF-8 text"),
    ("config-invalid-yaml", ["plan", "{ws}/broken.yaml"], 2, "broken.yaml: line 2: invalid YAML"),
    ("config-empty", ["plan", "{ws}/empty.yaml"], 2, "empty.yaml"),
    ("config-is-a-directory", ["plan", "{ws}"], 2, "cannot read"),
    ("rounds-zero", ["plan", "{config}", "--rounds", "0"], 2, "moecal plan: Invalid value for '--rounds'"),
    ("nul-in-command", ["plan", "{ws}/nul-command.yaml"], 2, "workload.command[0]: contains a NUL"),
    ("dff-huge", ["plan", "{ws}/dff-huge.yaml"], 2, "models[0].dff: Input should be less than or equal to 1048576"),
    ("d-model-boolean", ["plan", "{ws}/d-model-boolean.yaml"], 2, "models[0].d_model: expected an integer"),
    ("default-huge", ["plan", "{ws}/default-huge.yaml"], 2, "current_default: Input should be less than or equal"),
    ("yaml-duplicate-key", ["plan", "{ws}/duplicate-key.yaml"], 2, "invalid YAML: duplicate key 'name'"),
    ("yaml-nested-deep", ["plan", "{ws}/deep.yaml"], 2, "deep.yaml: line 2: invalid YAML: nested deeper than 64"),
    ("yaml-nested-deep-block", ["plan", "{ws}/deep-block.yaml"], 2, "invalid YAML: nested deeper than 64 levels"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


@pytest.mark.parametrize("spec", ["{dff:>999999999}", "{dff:.999999999}", "{dff:{dff}}", "{name:d}"])
def test_a_format_spec_that_is_no_flag_is_refused(tmp_path, spec):
    config = fake_config(tmp_path, workload={"command": [sys.executable, "bench.py", "--dff", spec]})
    one_error_line(cli("plan", config), "models[0]")


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
    one_error_line(cli("plan", config), expected)
    one_error_line(cli("sweep", config, "--out", tmp_path / "run"), expected)
    assert not (tmp_path / "run").exists()


def test_six_knobs_of_32_values_are_refused_at_once(tmp_path):
    knobs = {f"MLXCEL_FUSED_MOE_SGY{'_' * i}": list(range(1, 33)) for i in range(6)}
    started = time.monotonic()
    one_error_line(cli("plan", fake_config(tmp_path, knobs=knobs)), "knobs")
    assert time.monotonic() - started < 10


def test_the_product_of_settings_is_bounded_before_it_is_built():
    launch_knobs.check_count({"A": list(range(8)), "B": list(range(8))})  # 64: allowed
    with pytest.raises(ValueError, match="9 × 8 = 72 combinations"):
        launch_knobs.check_count({"A": list(range(9)), "B": list(range(8))})
    with pytest.raises(ValueError, match="at most 64"):  # counted, never built: 32**6 would not fit in memory
        launch_knobs.check_count({f"K{i}": list(range(32)) for i in range(6)})
