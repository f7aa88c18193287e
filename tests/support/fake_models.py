"""Fake model folders for the mlxcel calibration tests: real config.json shapes, no weights (tests only, tmp dirs).

The shapes are those of the published checkpoints (Hugging Face / mlx-community config.json keys); the emulated
benchmark (tests/fixtures/emulated_mlxcel_bench_decode.py, mlxcel-bench-decode as its public source describes it)
reads them and prints SYNTHETIC timings.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.support.helpers import FIXTURE_PYTHON

EMULATED_BENCH = Path(__file__).resolve().parents[1] / "fixtures" / "emulated_mlxcel_bench_decode.py"
TEXT_GENERATOR = Path(__file__).resolve().parents[1] / "fixtures" / "fake_mlxcel_bench.py"
AFFINE_4BIT = {"group_size": 64, "bits": 4}

CONFIGS: dict[str, dict] = {
    "qwen3-30b-a3b-4bit": {
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 48,
        "quantization": AFFINE_4BIT,
        "quantization_config": AFFINE_4BIT,
    },
    "phi-3.5-moe-4bit": {
        "model_type": "phimoe",
        "hidden_size": 4096,
        "intermediate_size": 6400,
        "num_local_experts": 16,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "quantization": AFFINE_4BIT,
        "emulated_parity_bad": 0.02,  # the emulated probe logs 2% of this model's fused calls over 0.05
        "fake_fused_diverges_at": 3,  # the fake text generator's fused path emits a different 4th word
    },
    "mixtral-8x7b-4bit": {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "quantization": AFFINE_4BIT,
    },
    "gpt-oss-20b-mxfp4": {
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "quantization_config": {"quant_method": "mxfp4"},
    },
    "llama-4-scout-17b-16e-4bit": {
        "model_type": "llama4",
        "text_config": {
            "model_type": "llama4_text",
            "hidden_size": 5120,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "num_local_experts": 16,
            "num_experts_per_tok": 1,
            "num_hidden_layers": 48,
        },
        "quantization": AFFINE_4BIT,
    },
    "llama-3.2-1b-4bit": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "quantization": AFFINE_4BIT,
    },
}


def write_models(root: Path, configs: dict[str, dict] | None = None) -> Path:
    """One folder per model under `root`/models, each holding only config.json."""
    models = root / "models"
    for name, config in (configs or CONFIGS).items():
        folder = models / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=1))
    return models


def bench_command() -> str:
    """The emulated benchmark as `moecal init --bench` takes it (isolated Python without site: a fast start)."""
    return shlex.join([*FIXTURE_PYTHON, str(EMULATED_BENCH)])


def emulated_build(folder: Path, build: str, backend: str = "cuda") -> str:
    """The emulation of one mlxcel build (today | july) as its own executable in `folder` (a binary of its own, as a
    user has one per build: moecal reads each binary's --help once, keyed by its path)."""
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / f"mlxcel-bench-decode-{build}-{backend}"
    wrapper.write_text(
        f"#!/bin/sh\nEMULATED_MLXCEL_BUILD={build} EMULATED_MLXCEL_BACKEND={backend} exec {shlex.join(FIXTURE_PYTHON)} "
        f'"{EMULATED_BENCH}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def text_generator_command() -> str:
    """The fake greedy generator that prints its text (`Output: …`), for the greedy-parity tests."""
    return shlex.join([*FIXTURE_PYTHON, str(TEXT_GENERATOR)])
