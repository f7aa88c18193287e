"""SYNTHETIC sweep data for the decision-engine tests: generated here from a known ratio curve and seeded noise.

Nothing here was measured and nothing is written under results/ — tests write into pytest's tmp_path only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.runs.formats import SAMPLE_COLUMNS, format_provenance

# docs/design.md §6: the GB10 example (MLX 0.32.1) whose linear-interpolated crossover is Dff ≈ 7672.
DESIGN_EXAMPLE_CSV = """\
# GB10, MLX 0.32.1 (the example of DESIGN §6)
# host: gb10
model,dff,quant_mode,fallback_run1,fallback_run2,fallback_run3,fallback_median,fused_run1,fused_run2,fused_run3,fused_median,fused_over_fallback
lfm2-8b-a1b-4bit,1792,affine,141.92,138.43,140.68,140.68,161.14,160.63,159.63,160.63,1.1418
phi-3.5-moe-4bit,6400,affine,53.52,53.85,54.16,53.85,55.80,55.64,56.12,55.80,1.0362
llama-4-scout-17b-4bit,8192,affine,21.85,21.64,21.33,21.64,21.26,21.37,21.32,21.32,0.9852
mixtral-8x7b-4bit,14336,affine,28.26,28.27,28.17,28.26,27.78,27.79,27.77,27.78,0.9830
"""

SYNTHETIC_META = {
    "date": "2026-01-02T03:04:05Z",
    "host": "synthetic-host",
    "backend": "cpu",
    "device": "synthetic device",
    "os": "Linux (synthetic)",
    "packages": {"numpy": "x.y"},
    "library_pin": "synthetic 1.0",
    "command": "moecal sweep configs/synthetic.yaml --out results/x",
    "arms": {"fused": "fused kernel", "fallback": "unfused path"},
    "cap_env": "MLXCEL_FUSED_MOE_MAX_DFF",
    "workload": "layer",
}


def synthetic_samples(
    ratios: Mapping[int, float],
    rounds: int = 8,
    noise: float = 0.01,
    seed: int = 0,
    base: float = 1000.0,
    d_model: int = 2048,
    top_k: int = 8,
    backend: str = "cpu",
    with_null_arm: bool = False,
    quant_mode: str = "affine",
    workload: str = "layer",
) -> pd.DataFrame:
    """Samples of a layer-workload Dff sweep whose true fused/fallback ratio at Dff d is `ratios[d]`.

    tok/s = base · (ratio for fused) · exp(shared round drift + per-run noise): lognormal noise keeps medians at
    their true values, the drift is shared by the arms of a round (what rotation + pairing are meant to cancel).
    """
    rng = np.random.default_rng(seed)
    arms = ("fallback", "fused", "null") if with_null_arm else ("fallback", "fused")
    rows = []
    for dff, ratio in ratios.items():
        drift = rng.normal(0.0, noise, size=rounds)
        for r in range(rounds):
            for position, arm in enumerate(arms):
                scale = ratio if arm == "fused" else 1.0
                rows.append(
                    {
                        "run_id": "synthetic",
                        "backend": backend,
                        "device": "synthetic device",
                        "workload": workload,
                        "model": "synthetic-layer",
                        "quant_mode": quant_mode,
                        "d_model": d_model,
                        "dff": dff,
                        "n_experts": 64,
                        "top_k": top_k,
                        "bits": 4,
                        "group_size": 64,
                        "dtype": "float32",
                        "arm": arm,
                        "cap": "",
                        "round": r,
                        "position": position,
                        "tokens": 100,
                        "seconds": 0.1,
                        "tok_s": base * scale * float(np.exp(drift[r] + rng.normal(0.0, noise))),
                        "rel_rms": "",
                        "tokens_agree": "",
                        "dispatch_ok": "",
                        "status": "ok",
                        "error": "",
                        "timestamp": "",
                    }
                )
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


def linear_curve(dffs: Sequence[int], crossover: float, slope_per_1k: float = 0.025) -> dict[int, float]:
    """True ratios on a straight line through 1.0 at `crossover` (fused wins below it)."""
    return {d: 1.0 + slope_per_1k * (crossover - d) / 1000.0 for d in dffs}


def write_run(folder: Path, samples: pd.DataFrame, meta: Mapping[str, object] | None = None) -> Path:
    """A run directory (samples.csv with a provenance header + meta.json) as a sweep would leave it."""
    meta = dict(SYNTHETIC_META if meta is None else meta)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "samples.csv").write_text(format_provenance(meta) + samples.to_csv(index=False), encoding="utf-8")
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


def design_example(folder: Path) -> Path:
    path = folder / "gb10-sweep.csv"
    path.write_text(DESIGN_EXAMPLE_CSV, encoding="utf-8")
    return path
