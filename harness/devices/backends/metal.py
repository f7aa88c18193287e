"""Metal backend: MLX on an Apple GPU. Fused = the two kernels of kernels/metal/moe_fused.metal via
`mx.fast.metal_kernel`; fallback = `mx.gather_qmm` exactly as mlx-lm calls it (harness.devices.backends.mlx_paths).

Importing this module never imports MLX: availability() is asked on every machine (`moecal doctor`, `auto`),
and Linux or a Mac without MLX must get a reason, not an ImportError. MLX and the kernel objects are loaded on
first use; MLX itself caches one compiled pipeline per template instantiation (dtype, bits, group_size).
"""

from __future__ import annotations

import platform
import re
import sys
import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from harness.config import resources
from harness.config.install_hint import install_command
from harness.devices.backends.base import Backend
from harness.devices.backends.base import Path as StepPath
from harness.devices.quant_layer import QuantLayer

METAL_SOURCE = resources.kernel_dir() / "metal" / "moe_fused.metal"
SIMD_WIDTH = 32  # lanes per simdgroup on every Apple GPU; the kernels assume one simdgroup per output row

# Apple does not publish an API for the system-level cache (SLC). The largest SLC on current chips is 96 MB
# (Ultra parts: two 48 MB Max dies); base M-series chips have 8-16 MB. Workloads rotate over more layer
# copies than this, so an over-estimate only costs memory, while an under-estimate would time cache hits.
APPLE_SLC_UPPER_BOUND = 96 * 1024 * 1024

_MARKER = re.compile(r"^// ==== (header|kernel (\w+)) ====$", re.MULTILINE)
_NAMES = re.compile(r"^// (inputs|outputs): (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class MetalKernelSource:
    """One kernel body of moe_fused.metal and the parameter names MLX generates its signature from."""

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    body: str


def split_metal_source(text: str) -> tuple[str, dict[str, MetalKernelSource]]:
    """Split a marked .metal file into (header, kernels by name).

    The file holds one `// ==== header ====` section and `// ==== kernel NAME ====` sections; each kernel
    section names its parameters on `// inputs: a, b` and `// outputs: c` lines. Text before the header
    marker is the file's own comment and belongs to neither.
    """
    markers = list(_MARKER.finditer(text))
    if not markers or markers[0].group(1) != "header":
        raise ValueError("Metal source must start its code with a '// ==== header ====' marker")
    ends = [m.start() for m in markers[1:]] + [len(text)]
    header = text[markers[0].end() : ends[0]].strip("\n") + "\n"
    kernels: dict[str, MetalKernelSource] = {}
    for marker, end in zip(markers[1:], ends[1:], strict=True):
        name = marker.group(2)
        if name is None:
            raise ValueError("Metal source has a second '// ==== header ====' marker")
        body = text[marker.end() : end].strip("\n") + "\n"
        names = {kind: tuple(n.strip() for n in value.split(",")) for kind, value in _NAMES.findall(body)}
        if set(names) != {"inputs", "outputs"}:
            raise ValueError(f"Metal kernel {name!r} must declare '// inputs: ...' and '// outputs: ...'")
        if name in kernels:
            raise ValueError(f"Metal kernel {name!r} is defined twice")
        kernels[name] = MetalKernelSource(name, names["inputs"], names["outputs"], body)
    if not kernels:
        raise ValueError("Metal source defines no '// ==== kernel NAME ====' section")
    return header, kernels


def kernel_template(dtype: str, bits: int, group_size: int, rows: int = 1) -> list[tuple[str, Any]]:
    """metal_kernel's `template=` for one layer format: T (the activation dtype; it also keys MLX's pipeline
    cache, since the parameter types come from the arrays), BITS, GROUP_SIZE and ROWS (rows per simdgroup)."""
    from harness.devices.backends.mlx_paths import mx_dtype

    return [("T", mx_dtype(dtype)), ("BITS", bits), ("GROUP_SIZE", group_size), ("ROWS", rows)]


@cache
def _metal_kernels() -> dict[str, tuple[MetalKernelSource, Any]]:
    """Build the metal_kernel objects once per process (Metal compiles each instantiation on first launch)."""
    import mlx.core as mx

    header, kernels = split_metal_source(METAL_SOURCE.read_text())
    return {
        name: (
            k,
            mx.fast.metal_kernel(
                name=name,
                input_names=list(k.input_names),
                output_names=list(k.output_names),
                source=k.body,
                header=header,
            ),
        )
        for name, k in kernels.items()
    }


class MetalBackend(Backend):
    """Apple GPU through MLX.

    `poison=True` (verify, tests) fills every kernel output with NaN before the kernel runs, so an element a
    kernel forgets to write fails the comparison instead of passing with stale memory. `sgy` is the number of
    simdgroups per threadgroup, `rows` the output rows each simdgroup computes (1, 2 or 4; it divides 32, and
    so every d_model and dff, which are multiples of the group size).
    """

    name = "metal"

    def __init__(self, poison: bool = False, sgy: int = 8, rows: int = 1):
        if not 1 <= sgy <= 1024 // SIMD_WIDTH:
            raise ValueError(f"sgy={sgy} must be in 1..{1024 // SIMD_WIDTH} (at most 1024 threads per threadgroup)")
        if rows not in (1, 2, 4):
            raise ValueError(f"rows={rows} must be 1, 2 or 4")
        self.poison = poison
        self.sgy = sgy
        self.rows = rows

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        if sys.platform != "darwin":
            return False, f"Metal needs macOS on Apple silicon; this machine runs {sys.platform}"
        try:
            import mlx.core as mx

            if not mx.metal.is_available():
                return False, "MLX is installed but sees no Metal GPU (mx.metal.is_available() is False)"
            return True, f"MLX {mx.__version__} on Metal"
        except ImportError as exc:
            return False, f"MLX is not installed ({exc}); install it with `{install_command('metal')}`"
        except Exception as exc:  # a broken install is a reason to print, never a crash of `doctor`
            return False, f"MLX failed to start: {type(exc).__name__}: {exc}"

    @staticmethod
    def _info() -> dict[str, Any]:
        import mlx.core as mx

        return dict(mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info())

    def device_name(self) -> str:
        import mlx.core as mx

        info = self._info()
        gpu = info.get("device_name") or info.get("architecture", "Apple GPU")
        memory_gib = info.get("memory_size", 0) / 2**30
        return f"{gpu} ({info.get('architecture', '?')}, {memory_gib:.0f} GiB unified, MLX {mx.__version__})"

    def device_info(self) -> dict[str, str]:
        import mlx.core as mx

        info = self._info()
        return {
            "gpu": str(info.get("device_name", "")),
            "gpu_architecture": str(info.get("architecture", "")),
            "gpu_memory_bytes": str(info.get("memory_size", "")),
            "gpu_working_set_bytes": str(info.get("max_recommended_working_set_size", "")),
            "macos": platform.mac_ver()[0],
            "mlx": mx.__version__,
        }

    def memory_info(self) -> tuple[int, int]:
        """Unified memory: total is the machine's RAM; 'free' is what Metal recommends for one process's
        working set minus what MLX holds now (macOS reports no free-GPU-memory figure)."""
        import mlx.core as mx

        info = self._info()
        total = int(info.get("memory_size", 0))
        budget = int(info.get("max_recommended_working_set_size", total))
        return max(budget - mx.get_active_memory(), 0), total

    def cache_bytes(self) -> int:
        return APPLE_SLC_UPPER_BOUND

    def upload(self, layer: QuantLayer) -> Any:
        from harness.devices.backends.mlx_paths import upload_mlx

        return upload_mlx(layer)

    def upload_inputs(self, x: np.ndarray, indices: np.ndarray, scores: np.ndarray, dtype: str) -> tuple:
        from harness.devices.backends.mlx_paths import upload_mlx_inputs

        return upload_mlx_inputs(x, indices, scores, dtype)

    def paths(self) -> dict[str, StepPath]:
        return {"fused": self.fused, "fallback": self.fallback}

    def fused(self, x: Any, indices: Any, scores: Any, layer: Any) -> Any:
        """Kernel A (gate+up GEMV, SwiGLU) then kernel B (down GEMV x score), then the f32 sum over the top-k
        partials rounded once to the activation dtype. Returns (d_model,) with its work enqueued."""
        from harness.devices.backends.mlx_paths import enqueue, mx_dtype

        top_k, d_model, dff = indices.size, x.size, layer.gate.w.shape[1]
        arrays = {"x": x.reshape(-1), "indices": indices.reshape(-1), "scores": scores.reshape(-1)}
        for part in ("gate", "up", "down"):
            matrix = getattr(layer, part)
            arrays |= {f"{part}_w": matrix.w, f"{part}_scales": matrix.scales, f"{part}_biases": matrix.biases}
        arrays["act"] = self._launch("moe_gate_up_swiglu", arrays, layer, rows=dff, top_k=top_k)
        partial = self._launch("moe_down_scale", arrays, layer, rows=d_model, top_k=top_k)
        return enqueue(partial.sum(axis=0).astype(mx_dtype(layer.dtype)))

    def _launch(self, name: str, arrays: dict[str, Any], layer: Any, rows: int, top_k: int) -> Any:
        """One launch over (top_k, rows) f32 outputs (NaN-filled first when poisoning): a simdgroup per slot and
        `self.rows` consecutive rows, `sgy` simdgroups per threadgroup. Inputs go in the order the source
        declares them."""
        import mlx.core as mx

        spec, kernel = _metal_kernels()[name]
        (out,) = kernel(
            inputs=[arrays[input_name] for input_name in spec.input_names],
            template=kernel_template(layer.dtype, layer.bits, layer.group_size, self.rows),
            grid=(SIMD_WIDTH, rows // self.rows, top_k),
            threadgroup=(SIMD_WIDTH, self.sgy, 1),
            output_shapes=[(top_k, rows)],
            output_dtypes=[mx.float32],
            init_value=float("nan") if self.poison else None,
        )
        return out

    def fallback(self, x: Any, indices: Any, scores: Any, layer: Any) -> Any:
        from harness.devices.backends.mlx_paths import enqueue, gather_qmm_step

        return enqueue(gather_qmm_step(x, indices, scores, layer))

    def synchronize(self) -> None:
        import mlx.core as mx

        mx.synchronize()

    def to_numpy(self, array: Any) -> np.ndarray:
        from harness.devices.backends.mlx_paths import to_numpy

        return to_numpy(array)

    def copy_bandwidth(self, nbytes: int = 1 << 30) -> float:
        """Best of 5 elementwise copies (`src + 0`: reads and writes nbytes, like a copy kernel)."""
        import mlx.core as mx

        src = mx.ones((nbytes // 4,), dtype=mx.float32)
        mx.eval(src)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            dst = src + 0
            mx.eval(dst)
            mx.synchronize()
            best = min(best, time.perf_counter() - start)
            del dst
        return 2 * (nbytes // 4) * 4 / best


BACKEND = MetalBackend
