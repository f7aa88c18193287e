"""The built-in `layer` and `decode` workloads on the CPU backend at tiny shapes, through the real sweep path."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.config.catalog import load_catalog, resolve_model
from harness.config.schema import ModelEntry, load_config, resolved_dtype
from harness.devices.quant_layer import bfloat16_bits_to_float32, float32_to_bfloat16_bits, round_to_dtype
from harness.devices.reference import rel_err
from harness.errors import InputError
from harness.measure.sweep_loop import execute
from harness.measure.sweep_setup import prepare
from harness.measure.workloads.arrays import array_ops
from harness.measure.workloads.decoder import DecoderShapes, SyntheticDecoder
from harness.measure.workloads.layer import copies_for_cache
from harness.runs.formats import read_samples
from tests.support.helpers import REPO, cli, run_cli

# A tiny model defined inline (every shape field given), small enough for a sweep in seconds.
TINY = {
    "name": "tiny-moe",
    "d_model": 256,
    "dff": 256,
    "n_experts": 8,
    "top_k": 2,
    "layers": 2,
    "shared_dff": 0,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 64,
    "vocab": 512,
}


def write_config(tmp_path: Path, workload: dict, models: list[dict], **measure: object) -> Path:
    data = {
        "name": "builtin-test",
        "backend": "cpu",
        "workload": workload,
        "models": models,
        "measure": {"rounds": 2, "warmup_runs": 1, **measure},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sweep(tmp_path: Path, config: Path, run: Callable[..., subprocess.CompletedProcess] = cli):
    """The sweep through the CLI, in-process unless `run` is run_cli (a process of its own, as a user runs it)."""
    out = tmp_path / "run"
    done = run("sweep", config, "--out", out, "--no-report")  # reports are the decision engine's tests
    assert done.returncode == 0, done.stderr
    return read_samples(out)


def test_layer_sweep_over_a_dff_grid_at_a_fixed_shape_then_its_decode_block(tmp_path):
    decode_block = {"tokens": 3, "warmup_tokens": 0, "context": 8, "models": [{**TINY, "layers": 1}]}
    workload = {"kind": "layer", "dff_grid": [128, 384], "min_run_s": 0.02, "copies": 3, "decode": decode_block}
    # the one built-in sweep in a process of its own (the others run in-process: the same command, no interpreter start)
    everything = sweep(tmp_path, write_config(tmp_path, workload, [TINY], null_arm=True), run=run_cli)
    assert set(everything["status"]) == {"ok"}
    decode = everything[everything["workload"] == "decode"]
    assert len(decode) == 3 * 2 and set(decode["dff"]) == {256} and (decode["tokens_agree"] == 3).all()
    samples = everything[everything["workload"] == "layer"]
    assert len(samples) == 2 * 3 * 2  # dff values × arms (fused, fallback, null) × rounds
    assert sorted(set(samples["dff"])) == [128, 384]  # from the grid, not the model's own dff
    assert set(samples["d_model"]) == {256} and set(samples["n_experts"]) == {8} and set(samples["top_k"]) == {2}
    assert set(samples["dtype"]) == {"float32"}
    assert (samples["bits"] == 4).all() and (samples["group_size"] == 64).all()
    assert samples["cap"].isna().all()  # built-in arms have no environment cap
    assert (samples["rel_rms"] > 0).all() and (samples["rel_rms"] < 1e-5).all()
    # the same calibrated step count for every arm of a point's visit (it is calibrated when the point opens, once
    # per pass over the grid), a whole number of rotations over the 3 copies
    steps = samples.groupby(["dff", "pass"])["tokens"].agg(set)
    assert all(len(s) == 1 and next(iter(s)) % 3 == 0 for s in steps)
    seconds_per_step = samples["seconds"] / samples["tokens"]
    assert np.allclose(samples["tok_s"], 1 / seconds_per_step, rtol=1e-4)


def test_decode_sweep_records_parity_and_greedy_agreement(tmp_path):
    # a catalog model shrunk by overrides; head_dim (128) and the shared expert's presence come from the catalog
    overrides = {"d_model": 256, "dff": 256, "n_experts": 8, "top_k": 2, "layers": 3, "shared_dff": 512}
    model = {"name": "qwen1.5-moe-a2.7b", **overrides, "n_heads": 4, "n_kv_heads": 2, "vocab": 512}
    workload = {"kind": "decode", "tokens": 6, "warmup_tokens": 1, "context": 32}
    config = write_config(tmp_path, workload, [model], null_arm=True)
    (point,) = prepare(config, out=tmp_path / "plan-only").points
    resolved = point.extra["shapes"].model
    assert (resolved.layers, resolved.head_dim, resolved.shared_dff, resolved.vocab) == (3, 128, 512, 512)
    samples = sweep(tmp_path, config)
    assert set(samples["status"]) == {"ok"} and len(samples) == 3 * 2
    assert set(samples["workload"]) == {"decode"} and set(samples["dff"]) == {256}
    assert (samples["tokens"] == 6).all() and (samples["tok_s"] > 0).all()
    assert (samples["rel_rms"] > 0).all() and (samples["rel_rms"] < 1e-5).all()
    assert (samples["tokens_agree"] == 6).all()  # float32: both paths pick the same greedy tokens


def test_points_that_cannot_fit_become_skip_rows(tmp_path):
    huge_layer = {**TINY, "d_model": 8192, "dff": 16384, "n_experts": 4096}  # ~0.6 TB of experts
    config = write_config(tmp_path, {"kind": "layer", "copies": 2}, [huge_layer])
    samples = sweep(tmp_path, config)
    assert set(samples["status"]) == {"skip"} and len(samples) == 2  # one row per arm
    assert samples["error"].str.contains("needs ~.* GiB but only .* may be used").all()

    decode = write_config(tmp_path, {"kind": "decode"}, [{"name": "mixtral-8x7b", "layers": 4000}])
    (tmp_path / "run").rename(tmp_path / "run-layer")
    samples = sweep(tmp_path, decode)
    assert set(samples["status"]) == {"skip"}
    assert samples["error"].str.contains(r"reduce models\[0\].layers \(4000\)").all()


def test_config_errors_name_the_field(tmp_path):
    cases = [
        ({"kind": "decode"}, [{"name": "mixtral-8x8b"}], "models[0].name: unknown model 'mixtral-8x8b'; known: "),
        ({"kind": "layer", "dff_grid": [256, 300]}, [TINY], "workload.dff_grid[1]: invalid MoE shape"),
        ({"kind": "decode"}, [{"name": "olmoe-1b-7b", "top_k": 65}], "models[0]: top_k=65 exceeds n_experts=64"),
    ]
    for workload, models, message in cases:
        done = cli("plan", write_config(tmp_path, workload, models))
        assert done.returncode == 2, done.stdout
        assert message in done.stderr


def test_catalog_overrides_and_inline_models():
    catalog = load_catalog()
    assert {"qwen3-30b-a3b", "mixtral-8x7b", "llama-4-scout-17b-16e", "lfm2-8b-a1b", "phi-3.5-moe"} <= set(catalog)
    scout = resolve_model(ModelEntry(name="llama-4-scout-17b-16e", layers=4, dff=2048), "models[0]", "c.yaml", catalog)
    assert (scout.layers, scout.dff, scout.d_model, scout.shared_dff) == (4, 2048, 5120, 8192)
    assert resolve_model(ModelEntry(**TINY), "models[0]", "c.yaml", catalog).d_model == 256
    with pytest.raises(
        InputError, match=r"models\[3\].name: unknown model 'nope'.*define it inline with dff, n_experts"
    ):
        resolve_model(ModelEntry(name="nope", d_model=64), "models[3]", "c.yaml", catalog)


def test_copies_rule_streams_twice_the_cache_between_visits():
    for step, cache in ((1 << 20, 50 << 20), (300 << 20, 32 << 20), (7_000_000, 96 << 20)):
        copies = copies_for_cache(step, cache)
        assert (copies - 1) * step >= 2 * cache and (copies - 2) * step < 2 * cache


def test_bfloat16_bit_conversion_matches_the_host_rounding():
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 100
    bits = float32_to_bfloat16_bits(np, values)
    assert bits.dtype == np.uint16
    assert np.array_equal(bfloat16_bits_to_float32(np, bits), round_to_dtype(values, "bfloat16"))


def test_decoder_math_agrees_between_numpy_and_mlx():
    """The decoder is written once for every array library: numpy (cpu) and MLX (metal's namespace, here on MLX's
    CPU device, with mx.gather_qmm as the MoE path) must decode the same greedy tokens from the same weights."""
    pytest.importorskip("mlx.core")
    from harness.devices.backends.cpu import CpuBackend
    from harness.devices.backends.metal import MetalBackend

    model = resolve_model(ModelEntry(**TINY), "models[0]", "test", load_catalog())
    shapes = DecoderShapes(model, model.moe_shape(4, 64, "float32"), None, dense_bytes=4, context=32, new_tokens=8)
    runs = {}
    for backend in (CpuBackend(), MetalBackend()):
        decoder = SyntheticDecoder(backend, array_ops(backend.name, "float32"), shapes, seed=3)
        capture: list = []
        tokens = decoder.generate("fallback", decoder.start_token, 0, 8, capture)
        runs[backend.name] = (decoder.host_tokens(tokens), backend.to_numpy(capture[0].out))
    assert runs["cpu"][0] == runs["metal"][0]
    assert len(set(runs["cpu"][0])) > 1  # a decode that repeats one token would agree trivially
    assert rel_err(runs["metal"][1], runs["cpu"][1]) < 1e-5


@pytest.mark.parametrize("name", ["cpu-smoke", "h200", "gb10", "m-series"])
def test_shipped_configs_resolve_against_the_catalog(name):
    """Every shipped config validates, names catalog models, and every shape fits the quantized format (the GPU
    configs cannot be planned without their device, so this checks what can be checked anywhere)."""
    config = load_config(REPO / "configs" / f"{name}.yaml")
    catalog = load_catalog()
    blocks = [(config.workload, config.models, "models")]
    if config.workload.kind == "layer" and config.workload.decode:
        blocks.append((config.workload, config.workload.decode.models, "workload.decode.models"))
    for settings, entries, field in blocks:
        for index, entry in enumerate(entries):
            model = resolve_model(entry, f"{field}[{index}]", str(name), catalog)
            dtype = resolved_dtype(settings.dtype, config.backend)
            dffs = settings.dff_grid if field == "models" and settings.kind == "layer" else [model.dff]
            for dff in dffs:
                model.model_copy(update={"dff": dff}).moe_shape(settings.bits, settings.group_size, dtype)
    assert config.current_default


def test_host_matvec_matches_float64():
    from harness.measure.workloads.host_gemv import matvec

    rng = np.random.default_rng(5)
    w = rng.standard_normal((301, 517), dtype=np.float32)
    x = rng.standard_normal(517, dtype=np.float32)
    out = matvec(w, x)
    assert out.dtype == np.float32 and out.shape == (301,)
    assert rel_err(out, w.astype(np.float64) @ x.astype(np.float64)) < 1e-6


def test_a_point_whose_setup_fails_becomes_fail_rows_and_the_sweep_goes_on(tmp_path, monkeypatch):
    from harness.measure.workloads import layer as layer_workload

    workload = {"kind": "layer", "dff_grid": [128, 256], "min_run_s": 0.01, "copies": 2}
    run = prepare(write_config(tmp_path, workload, [TINY], rounds=1, warmup_runs=0), out=tmp_path / "run")
    real_make_layer = layer_workload.make_layer

    def make_layer(shape, seed):
        if shape.dff == 128:
            raise MemoryError("out of device memory")
        return real_make_layer(shape, seed)

    monkeypatch.setattr(layer_workload, "make_layer", make_layer)
    execute(run, lambda message: None)
    samples = read_samples(tmp_path / "run")
    failed = samples[samples["dff"] == 128]
    assert set(failed["status"]) == {"fail"} and len(failed) == 2
    assert failed["error"].str.contains("point setup failed: MemoryError: out of device memory").all()
    assert set(samples[samples["dff"] == 256]["status"]) == {"ok"}


def test_plan_of_the_cpu_preset_imports_no_backend_library() -> None:
    """`moecal plan` lays out the CPU sweep from shapes and host facts (harness.devices.backends.cpu_host): numba, and
    the analysis's scipy, stay unimported, and the plan is the one the sweep would run."""
    probe = (
        "import contextlib, io, json, sys\n"
        "from harness.cli.app import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['plan', 'cpu-smoke', '--json'])\n"
        "print(out.getvalue())\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'llvmlite', 'scipy', 'matplotlib'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *record, imported = done.stdout.strip().splitlines()
    assert imported == "[]"
    plan = json.loads("\n".join(record))
    config = load_config(REPO / "configs" / "cpu-smoke.yaml")
    assert plan["backend"] == "cpu" and plan["workload"] == "layer"
    assert len(plan["points"]) == 2 * len(config.workload.dff_grid) + 1  # two models × the grid, then the decode
    assert all(p["memory_bytes"] > 0 and p["model_seconds"] > 0 and p["runs"] == 3 * 6 for p in plan["points"])
