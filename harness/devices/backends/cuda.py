"""CUDA backend: CuPy RawModule kernels from kernels/cuda/ on an NVIDIA GPU.

fused    = moe_gate_up_swiglu + moe_down_scale (two launches; the sum over slots is folded into the second)
fallback = qmv_gather (gate) + qmv_gather (up) + moe_swiglu + qmv_gather (down) + moe_weighted_sum (five
           launches, intermediates in the activation dtype, like MLX's gather_qmm decode path)
Both paths share one GEMV core (kernels/cuda/moe_common.cuh), so the comparison measures fusion alone.

Importing this module never imports CuPy: availability() must answer on every machine. CuPy is imported inside
the methods. Device arrays in the activation dtype are float32, float16, or uint16 holding bfloat16 bit
patterns (CuPy has no bfloat16); `to_numpy` reads uint16 arrays as bfloat16.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.install_hint import install_command
from harness.config.shapes import MoeShape
from harness.devices.backends.base import Backend
from harness.devices.backends.base import Path as StepPath
from harness.devices.backends.cuda_compile import nvrtc_status
from harness.devices.backends.cuda_source import (
    ACT_LOAD_CODES,
    DEFAULT_ACT_LOAD,
    DEFAULT_ROWS,
    DEFAULT_SGY,
    KERNEL_NAMES,
    KernelVariant,
)
from harness.devices.quant_layer import QuantLayer, QuantMatrix, bfloat16_bits_to_float32, round_to_dtype

WARP = 32
ELEMENTWISE_BLOCK = 256  # threads per block of the fallback's elementwise kernels
DEFAULT_SPLIT_K = 1  # kernel A's d_model split when its grid has fewer blocks than SMs (1 = never split)
SPLIT_K_CHOICES = (1, 2, 4, 8)
# The variant options and the environment variables that set them when the constructor is not given them.
VARIANT_ENV = {
    "sgy": "MOECAL_CUDA_SGY",
    "rows": "MOECAL_CUDA_ROWS",
    "act_load": "MOECAL_CUDA_ACT",
    "split_k": "MOECAL_CUDA_SPLIT_K",
}
_BF16_NAN = 0x7FC0
_NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")


@dataclass(frozen=True)
class CudaMatrix:
    """One stacked expert matrix on the device: packed words (E, out, in*bits/32) uint32, scales and biases
    (E, out, in/group_size) in the activation dtype's storage type."""

    w: Any
    scales: Any
    biases: Any


@dataclass(frozen=True)
class CudaLayer:
    shape: MoeShape
    gate: CudaMatrix
    up: CudaMatrix
    down: CudaMatrix


def storage_dtype(dtype: str) -> np.dtype:
    """The device array dtype holding activation-dtype values (bfloat16 as raw uint16 bits)."""
    return np.dtype({"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}[dtype])


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Host float array -> the storage dtype, rounding to nearest even (exact for values already representable)."""
    rounded = round_to_dtype(values, dtype)
    if dtype == "bfloat16":
        return (rounded.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return rounded.astype(storage_dtype(dtype))


@dataclass(frozen=True)
class KernelSet:
    """The launchable kernels of one variant, each called as kernel(grid, block, args) like a CuPy RawKernel."""

    gate_up_swiglu: Any
    down_scale: Any
    qmv_gather: Any
    swiglu: Any
    weighted_sum: Any


@cache
def _kernels(variant: KernelVariant) -> KernelSet:
    """Compile (or load from CuPy's on-disk cache) one variant's module; every kernel of both paths is in it."""
    import cupy

    module = cupy.RawModule(code=variant.source(), options=variant.options())
    return KernelSet(*(module.get_function(name) for name in KERNEL_NAMES))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _driver_version() -> str:
    """The kernel driver's version string (e.g. '580.82.07'); CUDA APIs only report the CUDA level it supports."""
    try:
        words = _NVIDIA_DRIVER_FILE.read_text().split()
    except OSError:
        return "unknown"
    return next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), "unknown")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} must be an integer") from None


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, "") or default
    if value not in choices:
        raise ValueError(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value


def _gpu_name(props: dict[str, Any]) -> str:
    name = props["name"]  # bytes in CuPy's property dict
    return name.decode() if isinstance(name, bytes) else str(name)


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


@dataclass(frozen=True)
class GraphReplay:
    """A captured step: calling it replays the graph on the current stream and returns the path's output. It holds
    the backend, so the buffers the graph's raw pointers address live as long as the replay."""

    graph: Any
    out: Any
    backend: Backend

    def __call__(self) -> Any:
        self.graph.launch()
        return self.out


class CudaBackend(Backend):
    """NVIDIA GPU through CuPy.

    `poison=True` (verify, tests) fills every buffer a path writes (the output and each intermediate) with NaN
    before the launches, so an element a kernel forgets to write fails the comparison instead of passing with
    stale memory.

    Kernel variants, for A/B runs without code changes (each left unset comes from its VARIANT_ENV variable, else
    the reference design; device_info() reports the values in force, so they land in every run's provenance):
    `sgy` warps per block (8); `rows` output rows per warp (1; 2 or 4 let a warp reuse each input it loads and
    converts); `act_load` how kernel B reads act ("f32" from global memory, "dtype" = stored in the activation
    dtype, "shared" = staged in shared memory); `split_k` how many ways kernel A splits d_model when its grid has
    fewer blocks than the GPU has SMs (1 = never).

    Buffers are allocated once per (path, shape) and reused, and never freed while the backend lives: a path's
    returned array is overwritten by the next call of the same path at the same shape (copy it, e.g. with
    to_numpy, to keep it). This keeps allocation out of the timed step, and a captured `graph`, which holds raw
    pointers, never points at freed memory.

    Kernels check every expert index against the layer; an index out of range is reported by the next
    `synchronize()` as the ValueError the CPU backend raises at once.
    """

    name = "cuda"

    def __init__(
        self,
        poison: bool = False,
        sgy: int | None = None,
        rows: int | None = None,
        act_load: str | None = None,
        split_k: int | None = None,
    ):
        sgy = _env_int(VARIANT_ENV["sgy"], DEFAULT_SGY) if sgy is None else sgy
        rows = _env_int(VARIANT_ENV["rows"], DEFAULT_ROWS) if rows is None else rows
        if act_load is None:
            act_load = _env_choice(VARIANT_ENV["act_load"], DEFAULT_ACT_LOAD, tuple(ACT_LOAD_CODES))
        split_k = _env_int(VARIANT_ENV["split_k"], DEFAULT_SPLIT_K) if split_k is None else split_k
        try:  # validate now, not at the first launch
            KernelVariant(4, 64, "float32", sgy, rows, act_load)
            if split_k not in SPLIT_K_CHOICES:
                raise ValueError(f"split_k must be one of {SPLIT_K_CHOICES}, got {split_k}")
        except ValueError as exc:
            raise ValueError(f"{exc} (set by the arguments or by {', '.join(VARIANT_ENV.values())})") from None
        self.poison = poison
        self.sgy = sgy
        self.rows = rows
        self.act_load = act_load
        self.split_k = split_k
        self._buffers: dict[tuple, Any] = {}
        self._counters: dict[tuple[str, int], Any] = {}
        self._errors: Any = None
        self._sms: int | None = None

    def variant_label(self) -> str:
        """The kernel variant in force, e.g. 'sgy8-rows1-act_f32-splitk1' (bench rows carry it)."""
        return f"sgy{self.sgy}-rows{self.rows}-act_{self.act_load}-splitk{self.split_k}"

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        try:
            import cupy
        except ImportError as exc:
            return False, f"CuPy is not installed ({exc}); install it with `{install_command('cuda')}`"
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError: no driver, insufficient driver, no device
            # without a kernel driver CuPy reports "insufficient driver": say the plain fact first
            driver = "" if _driver_version() != "unknown" else "no NVIDIA driver on this machine; "
            return False, f"{driver}CuPy {cupy.__version__} finds no usable CUDA device ({type(exc).__name__}: {exc})"
        if count == 0:
            return False, f"CuPy {cupy.__version__} sees no CUDA device"
        ok, nvrtc = nvrtc_status()
        if not ok:
            return False, nvrtc
        return True, f"CuPy {cupy.__version__}, {count} CUDA device(s), {nvrtc}"

    # ---- device facts ---------------------------------------------------------------------------------------
    @staticmethod
    def _properties() -> dict[str, Any]:
        import cupy

        return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)

    def device_name(self) -> str:
        import cupy

        name = _gpu_name(self._properties())
        runtime = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        return f"{name} (driver {_driver_version()}, CUDA {runtime})"

    def device_info(self) -> dict[str, str]:
        import cupy

        props = self._properties()
        ok, nvrtc = nvrtc_status()
        return {
            "gpu": _gpu_name(props),
            "driver": _driver_version(),
            "cuda": _cuda_version(cupy.cuda.runtime.runtimeGetVersion()),  # the runtime CuPy runs on
            "cuda_driver_api": _cuda_version(cupy.cuda.runtime.driverGetVersion()),  # newest the driver supports
            "cupy": cupy.__version__,
            "nvrtc": nvrtc if ok else "unavailable",
            "compute_capability": f"{props['major']}.{props['minor']}",
            "sm_count": str(props["multiProcessorCount"]),
            "l2_bytes": str(props["l2CacheSize"]),
            "memory_bytes": str(props["totalGlobalMem"]),
            "kernel_variant": self.variant_label(),
            **{f"cuda_{option}": str(getattr(self, option)) for option in VARIANT_ENV},
        }

    def memory_info(self) -> tuple[int, int]:
        import cupy

        free, total = cupy.cuda.runtime.memGetInfo()
        return int(free), int(total)

    def cache_bytes(self) -> int:
        return int(self._properties()["l2CacheSize"])

    def _sm_count(self) -> int:
        """Asked once: fused() consults it every step, and the property query costs more than a launch."""
        if self._sms is None:
            self._sms = int(self._properties()["multiProcessorCount"])
        return self._sms

    # ---- data -----------------------------------------------------------------------------------------------
    def _xp(self) -> Any:
        """The array module device arrays come from: CuPy (tests/support/cuda_emulation.py swaps in host arrays)."""
        import cupy

        return cupy

    def _module(self, variant: KernelVariant) -> KernelSet:
        """The launchable kernels of one variant (tests/support/cuda_emulation.py swaps in CPU-compiled ones)."""
        return _kernels(variant)

    def upload(self, layer: QuantLayer) -> CudaLayer:
        shape = layer.shape
        return CudaLayer(
            shape=shape,
            gate=self._upload_matrix(layer.gate, shape, shape.dff, shape.d_model, "gate"),
            up=self._upload_matrix(layer.up, shape, shape.dff, shape.d_model, "up"),
            down=self._upload_matrix(layer.down, shape, shape.d_model, shape.dff, "down"),
        )

    def _upload_matrix(self, matrix: QuantMatrix, shape: MoeShape, n_out: int, n_in: int, name: str) -> CudaMatrix:
        # The kernels trust these shapes (they index with them), so a mismatch must stop here, not corrupt memory.
        words = (shape.n_experts, n_out, n_in * shape.bits // 32)
        groups = (shape.n_experts, n_out, n_in // shape.group_size)
        for field, array, expected in (("w", matrix.w, words), ("scales", matrix.scales, groups)):
            if array.shape != expected:
                raise ValueError(f"{name}.{field} has shape {array.shape}, expected {expected} for {shape.label()}")
        if matrix.biases.shape != groups:
            raise ValueError(f"{name}.biases has shape {matrix.biases.shape}, expected {groups}")
        xp = self._xp()
        return CudaMatrix(
            w=xp.asarray(np.ascontiguousarray(matrix.w, dtype=np.uint32)),
            scales=xp.asarray(to_storage(matrix.scales, shape.dtype)),
            biases=xp.asarray(to_storage(matrix.biases, shape.dtype)),
        )

    def upload_inputs(self, x: np.ndarray, indices: np.ndarray, scores: np.ndarray, dtype: str) -> tuple:
        if np.asarray(indices).shape != np.asarray(scores).shape:
            raise ValueError(f"indices {np.shape(indices)} and scores {np.shape(scores)} must have one entry per slot")
        xp = self._xp()
        return (
            xp.asarray(to_storage(np.asarray(x).ravel(), dtype)),
            xp.asarray(np.asarray(indices, dtype=np.int32)),
            xp.asarray(np.asarray(scores, dtype=np.float32)),
        )

    def to_numpy(self, array: Any) -> np.ndarray:
        host = self._xp().asnumpy(array)
        if host.dtype == np.uint16:
            host = bfloat16_bits_to_float32(np, host)
        return host.astype(np.float64)

    # ---- paths ----------------------------------------------------------------------------------------------
    def paths(self) -> dict[str, StepPath]:
        return {"fused": self.fused, "fallback": self.fallback}

    def _variant(self, shape: MoeShape) -> KernelVariant:
        return KernelVariant(shape.bits, shape.group_size, shape.dtype, self.sgy, self.rows, self.act_load)

    def _buffer(self, path: str, name: str, shape: MoeShape, dims: tuple[int, ...], dtype: np.dtype) -> Any:
        """The reused device buffer `name` of `path` at `shape`; NaN-filled first when poisoning."""
        key = (path, name, shape.d_model, shape.dff, shape.top_k, shape.dtype, dims, np.dtype(dtype).str)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = self._xp().empty(dims, dtype=dtype)
        if self.poison:
            buffer.fill(_BF16_NAN if buffer.dtype == np.uint16 else np.nan)
        return buffer

    def _arrival_counters(self, kernel: str, count: int) -> Any:
        """`count` fold counters of `kernel` ("gate_up" or "down"): allocated zeroed once per size, never freed or
        reallocated (a captured graph keeps their address); each fused kernel zeroes the other one's."""
        key = (kernel, max(count, 1))
        counters = self._counters.get(key)
        if counters is None:
            counters = self._counters[key] = self._xp().zeros(key[1], dtype=np.uint32)
        return counters

    def _error_word(self) -> Any:
        """(flag, expert index, n_experts) of the first out-of-range expert a kernel met; zero when none."""
        if self._errors is None:
            self._errors = self._xp().zeros(3, dtype=np.uint32)
        return self._errors

    def _split_k(self, blocks: int, d_model: int, bits: int) -> int:
        """Kernel A's d_model split: split_k when its `blocks` would leave SMs idle, capped so every lane of a
        warp still gets a chunk of 16 bytes in each split; else 1."""
        if self.split_k == 1 or blocks >= self._sm_count():
            return 1
        chunks = d_model * bits // 128
        return max(1, min(self.split_k, chunks // WARP))

    @staticmethod
    def _check_inputs(x: Any, indices: Any, scores: Any, layer: CudaLayer) -> None:
        """Metadata checks only (no device sync): a wrong dtype or length would be read as garbage, silently."""
        shape = layer.shape
        if x.dtype != storage_dtype(shape.dtype) or x.size != shape.d_model:
            raise ValueError(
                f"x must be {shape.d_model} values of {storage_dtype(shape.dtype)} (upload_inputs makes it), "
                f"got {x.size} of {x.dtype}"
            )
        if indices.dtype != np.int32 or scores.dtype != np.float32 or indices.size != scores.size:
            raise ValueError("indices must be int32 and scores float32, one of each per slot (use upload_inputs)")

    def fused(self, x: Any, indices: Any, scores: Any, layer: CudaLayer) -> Any:
        """Kernel A (gate+up GEMVs, SwiGLU -> act) then kernel B (down GEMV x score, folded sum) -> out."""
        self._check_inputs(x, indices, scores, layer)
        shape, top_k = layer.shape, int(indices.size)
        kernels = self._module(self._variant(shape))
        act_dtype = storage_dtype(shape.dtype) if self.act_load == "dtype" else np.dtype(np.float32)
        act = self._buffer("fused", "act", shape, (top_k, shape.dff), act_dtype)
        partial = self._buffer("fused", "partial", shape, (top_k, shape.d_model), np.float32)
        out = self._buffer("fused", "out", shape, (shape.d_model,), storage_dtype(shape.dtype))
        tile, block = self.sgy * self.rows, (WARP * self.sgy,)
        a_tiles, b_tiles = _ceil_div(shape.dff, tile), _ceil_div(shape.d_model, tile)
        splits = self._split_k(a_tiles * top_k, shape.d_model, shape.bits)
        split_count = a_tiles * top_k if splits > 1 else 0
        partial_dims = (splits, top_k, shape.dff, 2) if splits > 1 else (0,)  # kernel A's split-K partial (g, u)
        gate_up_partial = self._buffer("fused", "gate_up_partial", shape, partial_dims, np.float32)
        split_arrivals = self._arrival_counters("gate_up", split_count)
        fold_arrivals = self._arrival_counters("down", b_tiles)
        errors = self._error_word()
        gate, up, down = layer.gate, layer.up, layer.down
        sizes = (np.int32(shape.d_model), np.int32(shape.dff))
        n_experts = np.int32(shape.n_experts)
        kernels.gate_up_swiglu(
            (a_tiles, top_k, splits),
            block,
            (x, indices, gate.w, gate.scales, gate.biases, up.w, up.scales, up.biases, act, gate_up_partial)
            + (split_arrivals, fold_arrivals, np.int32(b_tiles), errors, *sizes, n_experts),
        )
        kernels.down_scale(
            (b_tiles, top_k),
            block,
            (act, indices, scores, down.w, down.scales, down.biases, partial, fold_arrivals, out, split_arrivals)
            + (np.int32(split_count), errors, *sizes, np.int32(top_k), n_experts),
        )
        return out

    def fallback(self, x: Any, indices: Any, scores: Any, layer: CudaLayer) -> Any:
        """qmv_gather for gate and for up, SwiGLU, qmv_gather for down, weighted sum: five launches."""
        self._check_inputs(x, indices, scores, layer)
        shape, top_k = layer.shape, int(indices.size)
        kernels = self._module(self._variant(shape))
        act_dtype = storage_dtype(shape.dtype)
        gate_out = self._buffer("fallback", "gate", shape, (top_k, shape.dff), act_dtype)
        up_out = self._buffer("fallback", "up", shape, (top_k, shape.dff), act_dtype)
        act = self._buffer("fallback", "act", shape, (top_k, shape.dff), act_dtype)
        down_out = self._buffer("fallback", "down", shape, (top_k, shape.d_model), act_dtype)
        out = self._buffer("fallback", "out", shape, (shape.d_model,), act_dtype)
        tile, block = self.sgy * self.rows, (WARP * self.sgy,)
        d_model, dff = np.int32(shape.d_model), np.int32(shape.dff)
        errors, n_experts = self._error_word(), np.int32(shape.n_experts)

        def gemv(vec: Any, slot_stride: int, m: CudaMatrix, y: Any, n_out: np.int32, n_in: np.int32) -> None:
            grid = (_ceil_div(int(n_out), tile), top_k)
            args = (vec, np.int32(slot_stride), indices, m.w, m.scales, m.biases, y, errors, n_out, n_in, n_experts)
            kernels.qmv_gather(grid, block, args)

        gemv(x, 0, layer.gate, gate_out, dff, d_model)
        gemv(x, 0, layer.up, up_out, dff, d_model)
        count = top_k * shape.dff
        elementwise = (ELEMENTWISE_BLOCK,)
        kernels.swiglu((_ceil_div(count, ELEMENTWISE_BLOCK),), elementwise, (gate_out, up_out, act, np.int32(count)))
        gemv(act, shape.dff, layer.down, down_out, d_model, dff)
        sum_args = (down_out, scores, out, d_model, np.int32(top_k))
        kernels.weighted_sum((_ceil_div(shape.d_model, ELEMENTWISE_BLOCK),), elementwise, sum_args)
        return out

    def graph(self, path: str, x: Any, indices: Any, scores: Any, layer: CudaLayer) -> Callable[[], Any]:
        """Capture one step of `path` into a CUDA graph; calling the result replays it with one host call.

        Without it a CuPy step costs a few microseconds of Python per launch, which at small shapes exceeds the
        GPU time and would favour the path with fewer launches for a reason that is not the kernels. The step
        runs once uncaptured first (compiles the module, allocates the reused buffers), so nothing is allocated
        during capture. The replay launches on the current stream and returns the path's output array.
        """
        step = self.paths()[path]
        step(x, indices, scores, layer)
        return self._capture(lambda: step(x, indices, scores, layer))

    def _capture(self, run: Callable[[], Any]) -> Callable[[], Any]:
        """`run`'s launches captured into one CUDA graph, and a call that replays it (tests/support/cuda_emulation.py
        records and replays them on the CPU instead). A graph holds raw device pointers, not references."""
        import cupy

        capture_stream = cupy.cuda.Stream(non_blocking=True)
        with capture_stream:
            capture_stream.begin_capture()
            out = run()
            captured = capture_stream.end_capture()

        return GraphReplay(captured, out, self)

    # ---- timing support ---------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for the stream, then raise what a kernel reported (an expert index out of range) since the last
        call. Reading the 12-byte error word back costs one small copy (~10 µs) per call; timing calls it only
        around whole batches of steps."""
        self._wait()
        if self._errors is None:
            return
        flag, index, n_experts = (int(v) for v in self._xp().asnumpy(self._errors))
        if flag:
            self._errors.fill(0)
            index = index - (1 << 32) if index >= 1 << 31 else index  # the kernel stored an int's bits
            raise ValueError(f"expert index {index} out of range 0..{n_experts - 1} (reported by a CUDA kernel)")

    def _wait(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()

    def copy_bandwidth(self, nbytes: int = 1 << 30) -> float:
        """Best of 10 device-to-device copies of `nbytes`, timed with CUDA events: 2*nbytes (read + write) / s."""
        import cupy

        src = cupy.empty(nbytes, dtype=np.uint8)
        dst = cupy.empty_like(src)
        stream = cupy.cuda.get_current_stream()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        dst.data.copy_from_device_async(src.data, nbytes, stream)  # warm-up
        best = float("inf")
        for _ in range(10):
            start.record(stream)
            dst.data.copy_from_device_async(src.data, nbytes, stream)
            stop.record(stream)
            stop.synchronize()
            best = min(best, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        return 2 * nbytes / best


BACKEND = CudaBackend
