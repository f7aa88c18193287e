"""The shell variables that can change what an arm runs, recorded per run and refused where they would move a
measurement without the config saying so.

The cap chooses between the fused kernel and `gather_qmm`, and since July the fallback moves under variables nobody
set on purpose (lablup/mlxcel docs/environment-variables.md and the PRs it cites): #2178 made ROCm's mxfp4 gather
several times faster (`MLX_ROCM_GATHER_QMV_USE_WARP`, `MLX_ROCM_GATHER_QMV_THREADS_PER_COL`), #2156 folded batched
decode into `MLX_ROCM_WMMA_QMM`, and `MLX_ROCM_QMM_DEQUANT_M_THRESHOLD`, `MLX_ROCM_MAX_INFLIGHT_MB` (#2084),
`MLXCEL_CACHE_LIMIT` (2 GiB default on ROCm, #2062), `MLXCEL_PAGED_V2_MIN_KV_TOKENS`, `MLXCEL_SDPA_DETERMINISTIC` (the
CUDA SDPA overlay, ADR 0007) and `MLXCEL_FORCE_SYNC` (B=1 lookahead pipeline off, #2192) each change an arm. Every
variable under ARM_PREFIXES is recorded (meta.json `shell_env`); the known arm-changing ones, and the fused-MoE
switches themselves, refuse a sweep unless the config names them (workload.env holds one fixed, `knobs:` sweeps it),
because every run would measure the shell's value while nothing in the run said so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from harness.config import knobs as launch_knobs

# what the binary and its runtimes read: mlxcel, MLX (MLX_ROCM_*, MLX_CUDA_*, MLX_METAL_* included), HIP and the
# ROCm runtime (ROCR_*, HSA_*), CUDA (CUDA_VISIBLE_DEVICES, CUDA_LAUNCH_BLOCKING, …)
ARM_PREFIXES = ("MLXCEL_", "MLX_", "HIP_", "ROCR_", "HSA_", "CUDA_")
# every fused-MoE switch (cap, on/off, SGY, the parity probe): the arms themselves
FUSED_MOE_PREFIX = "MLXCEL_FUSED_MOE"
# named in lablup/mlxcel's docs/environment-variables.md (or the PR the issue cites) as changing the fused or the
# fallback path, the decode loop, or the allocator under both
KNOWN_ARM_CHANGING = {
    "MLX_ROCM_GATHER_QMV_USE_WARP": "ROCm mxfp4 gather_qmm kernel choice (#2178)",
    "MLX_ROCM_GATHER_QMV_THREADS_PER_COL": "ROCm gather_qmm lanes per column (#2178)",
    "MLX_ROCM_WMMA_QMM": "ROCm WMMA quantized matmul (#2156)",
    "MLX_ROCM_QMM_DEQUANT_M_THRESHOLD": "ROCm dequantize-then-GEMM route threshold",
    "MLX_ROCM_MAX_INFLIGHT_MB": "ROCm in-flight command-batch bound (#2084)",
    "MLX_MAX_OPS_PER_BUFFER": "MLX ops per command buffer (Metal, CUDA)",
    "MLXCEL_CACHE_LIMIT": "MLX buffer-cache bound (2 GiB default on ROCm, #2062)",
    "MLXCEL_CACHE_CLEAR_INTERVAL": "decode-loop cache-clear cadence",
    "MLXCEL_PAGED_V2_MIN_KV_TOKENS": "paged-attention v2 kernel floor",
    "MLXCEL_SDPA_DETERMINISTIC": "CUDA SDPA reduction order (ADR 0007)",
    "MLXCEL_FORCE_SYNC": "B=1 lookahead decode pipeline off (#2192)",
    "MLXCEL_PREFILL_CHUNK": "prefill chunk (ADR 0007)",
    "MLXCEL_GATHER_QMM_GROUPED": "grouped gather_qmm fallback",
}


def arm_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """Every variable under ARM_PREFIXES in `environ`, sorted by name."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(ARM_PREFIXES)}


def why_refused(name: str) -> str | None:
    """Why a shell variable must not reach a sweep unnamed (None when it may: it is recorded only)."""
    if name.startswith(FUSED_MOE_PREFIX) or name in launch_knobs.known():  # a launch knob under another prefix too
        return "changes what the fused-MoE path does"
    known = KNOWN_ARM_CHANGING.get(name)
    return f"changes an arm ({known}; lablup/mlxcel docs/environment-variables.md)" if known else None


def shell_environment(environ: Mapping[str, str], owned: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(every arm variable this shell sets that the config does not own, name → why for those that would change
    what is measured). A sweep records the first in meta.json and refuses to start on the second."""
    mine = set(owned)
    found = {k: v for k, v in arm_variables(environ).items() if k not in mine}
    refused = {k: why for k in found if (why := why_refused(k))}
    return found, refused
