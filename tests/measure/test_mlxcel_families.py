"""Today's mlxcel (issue 27 items 1-4): every wired family found and forced the way it needs, the protocol learned
from the binary's --help, ROCm as a backend label. SYNTHETIC: one config.json per family (published key names,
shapes of the public checkpoints, no weights) against the emulation tests/fixtures/emulated_mlxcel_bench_decode.py;
no number here is a measurement.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.config import knobs as launch_knobs
from harness.config.backend_specs import backend_spec, mlxcel_caps
from harness.config.discover import scan
from harness.config.mlxcel_families import null_reason_by_name
from harness.config.mlxcel_tree import derive
from harness.config.schema import ModelEntry, load_config
from harness.measure import dispatch
from harness.measure.bench_capabilities import capabilities, leading_args
from harness.measure.bench_output import decode_path, memory_lines, parity_calls
from harness.measure.protocol import Point
from harness.measure.workloads.command import CommandRunner, device_missing
from tests.support.fake_models import emulated_build, write_models
from tests.support.helpers import cli

Q4 = {"group_size": 64, "bits": 4}


def _moe(family: str, dff_key: str, experts_key: str, dff: int, experts: int, k: int, d: int, **extra) -> dict:
    return {
        "model_type": family,
        "hidden_size": d,
        dff_key: dff,
        experts_key: experts,
        "num_experts_per_tok": k,
        "num_hidden_layers": 4,
        "quantization": Q4,
        **extra,
    }


# one checkpoint per family mlxcel has (expert sizes of the public checkpoints), plus an unknown one and a dense one
FAMILY_CONFIGS: dict[str, dict] = {
    "qwen3-30b-a3b-4bit": _moe("qwen3_moe", "moe_intermediate_size", "num_experts", 768, 128, 8, 2048),
    "qwen3-vl-30b-a3b-4bit": {
        "model_type": "qwen3_vl_moe",
        "text_config": _moe("qwen3_vl_moe_text", "moe_intermediate_size", "num_experts", 768, 128, 8, 2048),
        "quantization": Q4,
    },
    "qwen1.5-moe-a2.7b-4bit": _moe(
        "qwen2_moe", "moe_intermediate_size", "num_experts", 1408, 60, 4, 2048, shared_expert_intermediate_size=5632
    ),
    "lfm2-8b-a1b-4bit": _moe("lfm2_moe", "moe_intermediate_size", "num_experts", 1792, 32, 4, 2048),
    "olmoe-1b-7b-4bit": _moe("olmoe", "intermediate_size", "num_experts", 1024, 64, 8, 2048),
    "phi-3.5-moe-4bit": _moe("phimoe", "intermediate_size", "num_local_experts", 6400, 16, 2, 4096),
    "mixtral-8x7b-4bit": _moe("mixtral", "intermediate_size", "num_local_experts", 14336, 8, 2, 4096),
    "dots.llm1-4bit": {
        **_moe("dots1", "moe_intermediate_size", "n_routed_experts", 1408, 128, 6, 4096, n_shared_experts=2),
        "quantization": {**Q4, "model.layers.1.mlp.experts.down_proj": {"bits": 6, "group_size": 64}},
    },
    "minimax-m2-4bit": _moe("minimax", "intermediate_size", "num_local_experts", 1536, 256, 8, 3072),
    "command-a-moe-4bit": _moe("cohere2_moe", "intermediate_size", "num_experts", 2048, 64, 8, 4096),
    "mellum-4bit": _moe("mellum", "moe_intermediate_size", "num_experts", 768, 64, 8, 2048),
    "laguna-xs.2-4bit": _moe(
        "laguna", "moe_intermediate_size", "num_experts", 512, 128, 8, 2048, shared_expert_intermediate_size=512
    ),
    "qwen3-next-80b-a3b-4bit": _moe(
        "qwen3_next", "moe_intermediate_size", "num_experts", 512, 512, 10, 2048, shared_expert_intermediate_size=512
    ),
    "qwen3.5-35b-a3b-4bit": {
        "model_type": "qwen3_5_moe",
        "text_config": _moe(
            "qwen3_5_moe_text",
            "moe_intermediate_size",
            "num_experts",
            512,
            256,
            8,
            2048,
            shared_expert_intermediate_size=512,
        ),  # fmt: skip
        "quantization": Q4,
    },
    "gemma-4-26b-a4b-it-4bit": {
        "model_type": "gemma4",
        "text_config": {
            "model_type": "gemma4_text",
            "hidden_size": 2816,
            "moe_intermediate_size": 704,
            "num_experts": 128,
            "top_k_experts": 8,
            "num_hidden_layers": 4,
        },
        "quantization": Q4,
    },
    "nemotron-h-30b-a3b-4bit": _moe(
        "nemotron_h",
        "moe_intermediate_size",
        "n_routed_experts",
        1856,
        128,
        6,
        2688,
        moe_shared_expert_intermediate_size=3712,
    ),  # fmt: skip
    "llama-4-scout-17b-16e-4bit": {
        "model_type": "llama4",
        "text_config": _moe("llama4_text", "intermediate_size", "num_local_experts", 8192, 16, 1, 5120),
        "quantization": Q4,
    },
    "gpt-oss-20b-mxfp4": {
        **_moe("gpt_oss", "intermediate_size", "num_local_experts", 2880, 32, 4, 2880),
        "quantization_config": {"quant_method": "mxfp4"},
        "quantization": None,
    },
    "deepseek-v3-4bit": _moe("deepseek_v3", "moe_intermediate_size", "n_routed_experts", 2048, 256, 8, 7168),
    "afmoe-4bit": _moe("afmoe", "moe_intermediate_size", "num_experts", 1024, 64, 6, 2048),  # unknown to moecal
    "gemma-4-31b-dense-4bit": {
        "model_type": "gemma4",
        "text_config": {"model_type": "gemma4_text", "hidden_size": 5376},
    },
}
CAP = {"qwen3-30b-a3b-4bit", "qwen3-vl-30b-a3b-4bit", "qwen1.5-moe-a2.7b-4bit", "lfm2-8b-a1b-4bit"}
CAP |= {"olmoe-1b-7b-4bit", "phi-3.5-moe-4bit", "mixtral-8x7b-4bit", "dots.llm1-4bit", "minimax-m2-4bit"}
CAP |= {"command-a-moe-4bit", "mellum-4bit", "laguna-xs.2-4bit"}
SWITCH = {"qwen3-next-80b-a3b-4bit", "qwen3.5-35b-a3b-4bit", "gemma-4-26b-a4b-it-4bit"}
NEVER = {"nemotron-h-30b-a3b-4bit", "llama-4-scout-17b-16e-4bit", "gpt-oss-20b-mxfp4", "deepseek-v3-4bit"}


def _configs() -> dict[str, dict]:
    return {n: {k: v for k, v in c.items() if v is not None} for n, c in FAMILY_CONFIGS.items()}


def _init(tmp_path: Path, *extra: str, bench: str = "") -> tuple[Path, str]:
    models = write_models(tmp_path, _configs())
    out = tmp_path / "mlxcel.yaml"
    bench = bench or emulated_build(tmp_path / "bin", "today")
    result = cli("init", "--models", models, "--bench", bench, "--backend", "cuda", "--out", out, *extra)
    assert result.returncode == 0, result.stderr
    return out, result.stdout


def test_init_includes_every_family_with_its_arm_forcing(tmp_path):
    out, listing = _init(tmp_path)
    config = load_config(out)
    entries = {m.name: m for m in config.models}
    assert set(entries) == CAP | SWITCH | NEVER | {"afmoe-4bit"}  # only the dense gemma4 is skipped
    assert "gemma-4-31b-dense-4bit: skipped — no MoE layers" in listing
    for name in CAP:
        assert entries[name].forced_by == "cap" and entries[name].expect_null is None, name
    for name in SWITCH:
        assert entries[name].forced_by == "switch" and "ignores the cap" in entries[name].eligibility, name
    for name in NEVER:
        assert entries[name].expect_null, name
    assert "nemotron_h" in entries["nemotron-h-30b-a3b-4bit"].expect_null
    unknown = entries["afmoe-4bit"]
    assert (unknown.dff, unknown.forced_by, unknown.expect_null) == (1024, "switch", None)
    assert unknown.eligibility.startswith("eligibility unknown: family afmoe")
    assert entries["qwen3.5-35b-a3b-4bit"].dff == 512 and entries["gemma-4-26b-a4b-it-4bit"].top_k == 8
    assert entries["dots.llm1-4bit"].shared_dff == 2 * 1408
    assert config.workload.command[-1] == "--ignore-eos"  # today's binary: a fixed budget
    assert "families and rules from moecal's shipped table" in listing and "src/models/gemma4.rs" in listing


def _run(runner: CommandRunner, path: str) -> bool:
    """Whether the fused kernel ran in one run of `path` (the emulated probe logs only from inside it)."""
    runner.run(path, extra_env={"MLXCEL_FUSED_MOE_PARITY_CHECK": "1", "MLXCEL_FUSED_MOE_PARITY_THRESHOLD": "0"})
    return bool(parity_calls(runner.last_text))


@pytest.mark.parametrize("name", sorted(CAP | SWITCH))
def test_each_arm_reaches_its_path_the_way_the_family_needs(tmp_path, name):
    """Per family through the emulated binary: the fused arm runs the kernel, the fallback arm does not. For a
    family that ignores the cap, forcing the fallback with the cap alone would leave the kernel running."""
    out, _ = _init(tmp_path, "--no-dispatch-check")
    config = load_config(out)
    model = next(m for m in config.models if m.name == name)
    argv = [a.format_map(model.placeholders()) for a in config.workload.command]
    runner = CommandRunner(config.workload, argv, forced_by=model.forced_by)
    assert _run(runner, "fused") and not _run(runner, "fallback")
    cap_only = CommandRunner(config.workload, argv, forced_by="cap")
    assert _run(cap_only, "fallback") == (name in SWITCH)


def test_a_july_binary_under_todays_table_is_caught_by_the_dispatch_pass(tmp_path):
    """The table says qwen3_moe reads the cap (true since 2026-09-14); a July binary's qwen3_moe copy ignores it. The
    verification pass sees the kernel in the cap-forced fallback run too, and the point becomes null with that."""
    bench = emulated_build(tmp_path / "bin", "july")
    out, _ = _init(tmp_path, bench=bench)
    data = yaml.safe_load(out.read_text())
    data["models"] = [m for m in data["models"] if m["name"] in ("qwen3-30b-a3b-4bit", "olmoe-1b-7b-4bit")]
    data["measure"].update(rounds=1, warmup_runs=0)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    assert "--ignore-eos" not in data["workload"]["command"]  # the July binary has no such flag
    run = tmp_path / "run"
    assert cli("sweep", out, "--out", run).returncode == 0
    points = {p["model"]: p for p in json.loads(cli("crossover", run, "--json").stdout)["points"]}
    assert points["qwen3-30b-a3b-4bit"]["verdict"] == "null" and "fallback" in points["qwen3-30b-a3b-4bit"]["reason"]
    assert points["olmoe-1b-7b-4bit"]["dispatch"] == "verified"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["bench_protocol"] == "stop at EOS (July protocol)" and meta["bench_version"] == ""


def test_switch_families_are_measured_but_kept_out_of_the_crossover(tmp_path):
    out, _ = _init(tmp_path)
    data = yaml.safe_load(out.read_text())
    keep = ("gemma-4-26b-a4b-it-4bit", "lfm2-8b-a1b-4bit", "mixtral-8x7b-4bit")
    data["models"] = [m for m in data["models"] if m["name"] in keep]
    data["measure"].update(rounds=2, warmup_runs=0)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tmp_path / "run"
    assert cli("sweep", out, "--out", run).returncode == 0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["arm_forcing"]["gemma-4-26b-a4b-it-4bit"]["fallback"].endswith("MLXCEL_FUSED_MOE=0")
    assert meta["arm_forcing"]["lfm2-8b-a1b-4bit"] == {
        "forced_by": "cap",
        "fused": "MLXCEL_FUSED_MOE_MAX_DFF=20000",
        "fallback": "MLXCEL_FUSED_MOE_MAX_DFF=1",
    }
    points = {p["model"]: p for p in json.loads(cli("crossover", run, "--json").stdout)["points"]}
    gemma = points["gemma-4-26b-a4b-it-4bit"]
    assert gemma["dispatch"] == "verified" and gemma["verdict"] == "null"  # measured, its own kernel ran ...
    assert "kept out of the cap's crossover" in gemma["reason"]  # ... but it says nothing about the cap
    assert points["lfm2-8b-a1b-4bit"]["verdict"] != "null"


def test_a_binary_that_never_answers_help_costs_seconds_and_is_reported_unusable(tmp_path):
    hang = tmp_path / "hangs"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    started = time.monotonic()
    caps = capabilities(str(hang), timeout_s=1.0)
    assert time.monotonic() - started < 4
    assert not caps.usable and "did not answer --help within 1s" in caps.problem
    assert not caps.fixed_budget  # the July protocol: nothing is assumed of a binary that does not answer
    again = time.monotonic()
    assert capabilities(str(hang), timeout_s=1.0) is caps and time.monotonic() - again < 0.5  # read once per binary


def test_capabilities_and_new_output_lines_of_todays_binary(tmp_path):
    bench = emulated_build(tmp_path, "today")
    caps = capabilities(bench)
    assert caps.usable and {"--ignore-eos", "--temperature", "--top-p"} <= caps.flags
    assert (caps.commit, caps.mlx_pin) == ("77afbb1d", "81ba1c6a")
    assert leading_args([sys.executable, "-I", bench, "-m", "{model_path}"]) == ("-I", bench)
    assert leading_args(["mlxcel-bench-decode", "-m", "{model_path}"]) == ()
    text = "[Load] wall: 1 s\n[Memory] weights 1.0 GB\n  Generated tokens: 5\nDecode path: x (y)\n[Unknown] z\n"
    assert decode_path(text) == "x (y)" and memory_lines(text) == ["weights 1.0 GB"]
    assert decode_path("  Generated tokens: 5\n") is None


def test_rocm_is_a_backend_with_its_default_cap_and_sgy(tmp_path):
    caps, sgy = mlxcel_caps(), launch_knobs.known()[launch_knobs.SGY]
    assert (caps["rocm"].default, sgy.default_for("rocm"), caps["rocm"].shared_with) == (8192, 2, "cuda")
    assert (sgy.default_for("metal"), sgy.default_for("cuda")) == (8, 8)
    models = write_models(tmp_path, {"lfm2-8b-a1b-4bit": _configs()["lfm2-8b-a1b-4bit"]})
    out = tmp_path / "rocm.yaml"
    bench = emulated_build(tmp_path / "bin", "today", backend="rocm")
    result = cli("init", "--models", models, "--bench", bench, "--backend", "rocm", "--out", out)
    assert result.returncode == 0, result.stderr
    config = load_config(out)
    assert (config.backend, config.current_default) == ("rocm", 8192)
    present = backend_spec("rocm").hosts_commands(None)
    assert (device_missing("rocm") == "") == present
    data = yaml.safe_load(out.read_text())
    data["measure"].update(rounds=1, warmup_runs=0)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tmp_path / "run"
    assert cli("sweep", out, "--out", run).returncode == 0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["backend"] == "rocm"
    assert ("backend_device_missing" in meta) == (not present)  # this machine's answer, recorded for the heading
    if not present:
        assert "no rocm device" in meta["backend_device_missing"]


def _tree(root: Path) -> Path:
    """A SYNTHETIC mlxcel-like tree: the shared kernel reads the cap; one family calls it, one has its own copy
    without the cap, one imports that copy's block, one never calls the kernel."""
    models = root / "src" / "models"
    models.mkdir(parents=True)
    (models / "switch_layers.rs").write_text(
        "const FUSED_MOE_MAX_DFF_METAL: i32 = 4096;\nconst FUSED_MOE_MAX_DFF_CUDA: i32 = 8192;\n"
        "impl SwitchGLU {\n    pub fn forward_fused_kernel(&self) -> Option<X> {\n"
        "        if gate.bits != 4 && gate.bits != 8 { return None; }\n"
        "        if down.bits != 4 && down.bits != 8 { return None; }\n"
        '        if gate.mode != "affine" { return None; }\n'
        '        let max_dff = fused_moe_max_dff_from(std::env::var("MLXCEL_FUSED_MOE_MAX_DFF").ok());\n'
        "        if down.bits == 6 && dff % 32 != 0 { return None; }\n    }\n"
        "    pub fn from_weights() {}\n}\n"
    )
    (models / "mixtral.rs").write_text(
        "use crate::models::switch_layers::SwitchGLU;\nfn f() { self.experts.forward_fused_kernel(&x_flat) }\n"
    )
    (models / "qwen3_next.rs").write_text(
        "pub struct SwitchGLU {}\nimpl SwitchGLU {\n    pub fn forward_fused_kernel(&self) {}\n}\n"
        "fn g() { self.switch_mlp.forward_fused_kernel(&x_flat) }\n"
    )
    (models / "qwen3_5.rs").write_text("use crate::models::qwen3_next::{MLP, SparseMoeBlock};\n")
    (models / "llama4.rs").write_text("struct SwitchGLU {}\n")
    return root


def test_families_and_rules_derived_from_a_tree(tmp_path):
    knowledge, notes = derive(_tree(tmp_path / "mlxcel"))
    wiring = {f: w.wiring for f, w in knowledge.families.items()}
    assert (wiring["mixtral"], wiring["qwen3_next"], wiring["qwen3_5_moe"], wiring["llama4"]) == (
        "cap",
        "switch",
        "switch",
        "none",
    )
    assert "qwen3_next.rs" in knowledge.families["qwen3_5_moe"].source
    assert "lfm2_moe" not in knowledge.families  # the tree does not wire it: unknown, the dispatch pass settles it
    rules = knowledge.rules
    assert (rules.gate_up_bits, rules.down_bits, rules.six_bit_dff_multiple) == ((4, 8), (4, 8), 32)
    assert "cap cuda = 8192 (src/models/switch_layers.rs)" in notes
    out, listing = _init(tmp_path, "--mlxcel-src", str(tmp_path / "mlxcel"))
    entries = {m.name: m for m in load_config(out).models}
    assert "at 6 bits" in entries["dots.llm1-4bit"].expect_null  # this tree's down kernel has no 6-bit path
    assert entries["lfm2-8b-a1b-4bit"].eligibility.startswith("eligibility unknown")
    assert f"families and rules from the mlxcel tree {tmp_path / 'mlxcel'}" in listing
    assert load_config(out).library_pin == f"mlxcel (tree {tmp_path / 'mlxcel'})"  # no Cargo.toml, git or pin here


def test_the_dispatch_pass_overrides_a_wrong_null_prediction():
    model = ModelEntry(name="m", dff=768, expect_null="family m never runs the fused kernel")
    point = Point(key={"model": "m", "dff": 768}, caps={}, label="m", skip_reason="expected null", extra={})
    figures = {f"fused_vs_{r}_{s}": 1e-3 for r in ("ref", "truth") for s in ("worst", "median")}
    fused = {"path": "fused", "status": "ok", "calls": 10, "dffs": [768], "over": 0, "tokens": 9, **figures}
    fallback = {"path": "fallback", "status": "ok", "calls": 0, "dffs": [], "tokens": 9}
    record = {"m": {"dff": 768, "runs": [fused, fallback]}}
    overrides = dispatch.settle([point], record, {"m": model.expect_null})
    assert point.skip_reason == "" and "but the fused kernel ran" in overrides["m"]


def test_names_of_a_published_sweep_give_away_its_aa_points():
    assert null_reason_by_name("llama-4-scout-17b-4bit").startswith("A/A point: the name matches llama-4-*")
    assert "on a binary of 2026-07-03" in null_reason_by_name("qwen3-30b-a3b-4bit", "2026-07-03")
    assert null_reason_by_name("qwen3-30b-a3b-4bit", "2026-10-01") is None  # reads the cap since 2026-09-14
    assert null_reason_by_name("phi-3.5-moe-4bit") is None and null_reason_by_name("my-model") is None


def test_unknown_family_without_a_readable_shape_is_skipped_with_the_reason(tmp_path):
    models = write_models(tmp_path, {"odd": {"model_type": "oddmoe", "num_experts": 8, "hidden_size": 64}})
    found, skipped = scan(models)
    assert found == [] and "unknown to moecal and its shape unreadable" in skipped[0].reason
