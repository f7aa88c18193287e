"""The launch-knob table (harness.config.knobs): its one real row read as mlxcel's source states the knob, and a new
knob as one row. A SYNTHETIC row (`MLXCEL_SYNTH_TILE`, a knob mlxcel does not have) is added to the table by
monkeypatch and followed, with no other code changed, through config validation, the shell refusal, the knob
analysis's "where to set it", the mlxcel tree reader (on a SYNTHETIC tree in tmp_path) and the per-device-class
outputs (table, Rust lookup, autotune entries) of a SYNTHETIC knob sweep. No number here is a measurement.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.analysis.comparison.backend_defaults import build_defaults
from harness.analysis.comparison.knobs import analyse_knobs, where_to_set
from harness.config import knobs as launch_knobs
from harness.config.backend_specs import BACKEND_NAMES
from harness.config.mlxcel_tree import caps_and_knob_defaults
from harness.config.schema import load_config
from harness.errors import InputError
from harness.measure.arm_env import why_refused
from harness.output.defaults.autotune_entry import build_entries, write_entries
from harness.output.defaults.device_defaults import class_defaults, class_markdown, rust_block
from harness.output.mlxcel_source import SWITCH_LAYERS, read_source
from tests.analysis.comparison.test_knobs import _config
from tests.output.test_mlxcel_outputs import fixture_tree
from tests.support.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run

SGY = launch_knobs.SGY
# SYNTHETIC: no such variable exists in mlxcel; outside the MLXCEL_FUSED_MOE prefix on purpose (the shell refusal
# must come from the table, not from the name)
TILE = launch_knobs.LaunchKnob(
    env="MLXCEL_SYNTH_TILE",
    name="synth_tile",
    heading="TILE",
    low=1,
    high=4,
    default=2,
    backend_defaults={"cuda": 3},
    source_file="src/lib/mlxcel-core/cpp/synthetic_tile.cpp",
    declaration="const int tile_rows = {value};",
)


@pytest.fixture
def with_tile(monkeypatch: pytest.MonkeyPatch) -> launch_knobs.LaunchKnob:
    monkeypatch.setattr(launch_knobs, "KNOBS", (*launch_knobs.KNOBS, TILE))
    return TILE


def test_the_sgy_row_says_what_mlxcel_s_source_says():
    sgy = launch_knobs.known()[SGY]
    assert (sgy.low, sgy.high, sgy.default, sgy.default_for("rocm"), sgy.default_for("metal")) == (1, 32, 8, 2, 8)
    assert sgy.default_line("cuda") == "int sgy = 8;" and sgy.default_line("rocm") == "int sgy = 2;"
    assert sgy.source == "src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp (1–32; default 8, ROCm 2)"
    assert (sgy.op, sgy.class_function) == ("fused_moe_sgy", "fused_moe_sgy_for_class")
    # the declaration is read as a pattern: one default per build branch, whatever else the file holds
    text = "#ifdef MLXCEL_BRIDGE_ROCM_BACKEND\n    int sgy = 2;\n#else\n    int sgy = 8;\n#endif\nint sgy_x = 3;\n"
    assert sgy.declared_defaults(text) == [2, 8]


def test_every_row_is_well_formed():
    knobs = launch_knobs.KNOBS
    assert len({k.env for k in knobs}) == len({k.name for k in knobs}) == len({k.heading for k in knobs}) == len(knobs)
    for knob in knobs:
        assert set(knob.backend_defaults) <= set(BACKEND_NAMES), knob.env
        assert knob.low <= knob.default <= knob.high and all(
            knob.low <= v <= knob.high for v in knob.backend_defaults.values()
        )
        assert knob.declaration.count("{value}") == 1 and knob.env not in launch_knobs.REFUSED
        assert knob.name == knob.name.lower() and knob.name.isidentifier()  # a Rust function name and a JSON label


def test_a_new_knob_row_is_accepted_by_the_config_and_refused_from_the_shell(tmp_path, with_tile):
    config = load_config(_config(tmp_path, {TILE.env: [1, 3], SGY: [8]}))
    assert config.knobs == {TILE.env: [1, 3], SGY: [8]}
    assert launch_knobs.reference(config.knobs, "cuda") == {TILE.env: "3", SGY: "8"}  # the row's cuda default
    assert launch_knobs.reference(config.knobs, "metal") == {TILE.env: "1", SGY: "8"}  # 2 is not listed: the first
    with pytest.raises(InputError, match="MLXCEL_SYNTH_TILE=5 is outside 1–4"):
        load_config(_config(tmp_path, {TILE.env: [1, 5]}))
    with pytest.raises(ValueError, match="did you mean MLXCEL_SYNTH_TILE"):
        launch_knobs.check_name("MLXCEL_SYNTH_TILES")
    assert why_refused(TILE.env) == "changes what the fused-MoE path does"


def test_without_the_row_the_same_knob_is_refused(tmp_path):
    with pytest.raises(InputError, match="MLXCEL_SYNTH_TILE is not a launch knob the binary reads"):
        load_config(_config(tmp_path, {TILE.env: [1, 3]}))
    assert why_refused(TILE.env) is None


def test_where_to_set_a_new_knob_quotes_its_declaration(with_tile):
    words = where_to_set(f"{SGY}=4 {TILE.env}=1", "cuda")
    assert words == (
        f"per run: `{SGY}=4 {TILE.env}=1` in the environment; the compiled-in default of {SGY} (8 on cuda): "
        "`int sgy = 8;` in src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp (1–32; default 8, ROCm 2); the compiled-in "
        f"default of {TILE.env} (3 on cuda): `const int tile_rows = 3;` in "
        "src/lib/mlxcel-core/cpp/synthetic_tile.cpp (1–4; default 2, CUDA 3)"
    )


def test_the_tree_reader_reads_a_new_knob_s_defaults(tmp_path, with_tile):
    tree = fixture_tree(tmp_path / "mlxcel")
    source = tree / TILE.source_file
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("#ifdef MLXCEL_BRIDGE_CUDA\nconst int tile_rows = 3;\n#else\nconst int tile_rows = 2;\n#endif\n")
    notes = caps_and_knob_defaults(tree)
    assert f"{TILE.env} default(s) 2, 3 ({TILE.source_file})" in notes
    assert not any(n.startswith(SGY) for n in notes)  # the fixture tree has no kernel source: nothing said of SGY


def _knob_sweep(folder, setting_gain: dict[str, float]) -> object:
    """A SYNTHETIC knob sweep on an H200 (class cuda-sm90): per setting the same crossover, every tok/s of the
    setting scaled by its gain (so a gain well beyond the margin moves the knob)."""
    parts = []
    for setting, gain in setting_gain.items():
        for dff, ratio in linear_curve([1792, 4096, 6400, 8192, 10240, 12288, 14336], 9000, 0.03).items():
            one = synthetic_samples({dff: ratio}, rounds=6, noise=0.004, seed=dff, workload="command", backend="cuda")
            one["model"], one["device"], one["knobs"] = f"model-{dff}", "NVIDIA H200", setting
            one["tok_s"] *= gain
            one[["d_model", "n_experts", "top_k", "bits", "group_size"]] = float("nan")
            parts.append(one)
    meta = {**SYNTHETIC_META, "workload": "command", "backend": "cuda", "device": "NVIDIA H200", "run_id": folder.name}
    meta.update(
        current_default=8192,
        mlxcel_commit="2fcdbe5f",
        mlx_commit="81ba1c6a",
        knobs={TILE.env: [1, 3]},
        knob_reference=f"{TILE.env}=3",
    )
    return write_run(folder, pd.concat(parts, ignore_index=True), meta)


def test_a_new_knob_reaches_the_per_class_outputs(tmp_path, with_tile):
    run = _knob_sweep(tmp_path / "run", {f"{TILE.env}=1": 1.10, f"{TILE.env}=3": 1.0})
    result = analyse_knobs(run)
    assert result is not None and result.recommended == f"{TILE.env}=1", result.reason
    defaults = build_defaults([run])
    (row,) = class_defaults(defaults)
    chosen = {k.knob.env: k for k in row.knobs}
    assert chosen[TILE.env].value == 1 and chosen[TILE.env].evidence.startswith(f"swept {{'{TILE.env}': [1, 3]}}")
    assert chosen[SGY].value is None and chosen[SGY].swept  # the sweep's setting does not name SGY: no arm for it
    table = class_markdown([row])
    assert "| SGY | SGY evidence | TILE | TILE evidence | mlxcel |" in table
    assert "|---|---|--:|---|--:|---|--:|---|---|---|---|" in table
    assert " | - | swept " in table and " | 1 | swept " in table  # SGY: no value; TILE: the sweep's choice
    block = rust_block([row])
    assert "pub(crate) fn fused_moe_synth_tile_for_class(device_class: &str) -> Option<i32> {" in block
    assert f"/// {TILE.env} default per device class (moecal); None: the build's default." in block
    assert '"cuda-sm90" => Some(1), // swept ' in block and block.count("=> Some(") == 2  # the cap and the tile
    entries = build_entries(defaults)
    tile = [e for e in entries if e["op"] == "fused_moe_synth_tile"]
    assert len(tile) == 1 and tile[0]["tactic"] == {"label": "synth_tile=1", "params": [1]}
    path, read = write_entries(defaults, tmp_path / "out", "x")  # read back: the new op passes the reader's checks
    assert read == json.loads(path.read_text())["entries"] == entries


def test_a_tree_defining_a_new_knob_s_lookup_outside_the_markers_is_refused(tmp_path, with_tile):
    tree = fixture_tree(tmp_path / "mlxcel")
    switch = tree / SWITCH_LAYERS
    switch.write_text(
        switch.read_text() + "\npub(crate) fn fused_moe_synth_tile_for_class(c: &str) -> Option<i32> {}\n"
    )
    with pytest.raises(InputError, match="defines the per-class functions outside moecal's markers"):
        read_source(tree)
