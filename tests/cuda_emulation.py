"""Run the CUDA kernels of kernels/cuda/ on the CPU, compiled by g++ (tests only).

There is no GPU here, yet the kernels must be right when an H200 runs them. This module compiles the very
translation unit the runtime hands CuPy (`KernelVariant.source()`, with the variant's -D options) as C++ against
tests/cuda_shim.h, which turns the CUDA built-ins into host code: one block at a time, each block blockDim.x real
threads, __syncthreads a barrier, __shfl_down_sync an exchange over the warp's 32 threads. `EmulatedCudaBackend`
is the real `CudaBackend` with only its array module and its kernel launches replaced, so the Python side of
both paths (buffers, grids, argument order, poisoning, the arrival counters) runs as on a GPU.

What it checks: indexing, unpacking, dequantization, reductions, the fold over slots, dtype conversions and
every launch configuration. What it cannot: the three inline-PTX helpers (MOE_HOST_EMULATION twins run
instead), blocks running concurrently (the fold's memory ordering), anything NVRTC rejects but g++ accepts
(the NVRTC compile test covers that), and speed. Out-of-bounds writes are caught by guard elements after
every buffer.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from harness.backends.cuda import CudaBackend, KernelSet
from harness.backends.cuda_source import KERNEL_NAMES, KernelVariant

SHIM = Path(__file__).with_name("cuda_shim.h")
GUARD_LEN = 64  # guard elements after every emulated device buffer
CACHE_DIR = Path(tempfile.gettempdir()) / "moecal-cuda-emulation"


def compiler() -> str | None:
    """The C++ compiler used (g++ >= 12 for std::barrier, std::atomic_ref and _Float16), or None."""
    return shutil.which("g++")


def _source(variant: KernelVariant) -> str:
    """The runtime's translation unit plus one C entry point per kernel: emu_<name>(grid_x, grid_y, block, args)."""
    entries = "".join(
        f'extern "C" void emu_{name}(unsigned gx, unsigned gy, unsigned bx, void** args) '
        f"{{ emu_launch({name}, gx, gy, bx, args); }}\n"
        for name in KERNEL_NAMES
    )
    return variant.source() + "\n" + entries


def _flags(variant: KernelVariant) -> list[str]:
    # The runtime's -D options; its --std (NVRTC's C++17) is replaced by C++20 for the shim's std::barrier.
    defines = [option for option in variant.options() if option.startswith("-D")]
    return ["-std=c++20", "-O2", "-shared", "-fPIC", "-pthread", "-DMOE_HOST_EMULATION", *defines]


@cache
def _library(variant: KernelVariant) -> ctypes.CDLL:
    """Compile (or reuse, keyed by source, shim and flags) the variant's shared library."""
    source, flags = _source(variant), _flags(variant)
    key = hashlib.sha256("\0".join([source, SHIM.read_text(), *flags]).encode()).hexdigest()[:24]
    library = CACHE_DIR / f"{key}.so"
    if not library.exists():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as scratch:
            cpp = Path(scratch) / "kernels.cpp"
            cpp.write_text(source)
            built = Path(scratch) / "kernels.so"
            command = [compiler() or "g++", *flags, "-include", str(SHIM), str(cpp), "-o", str(built)]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"g++ failed for {variant.label()}:\n{result.stderr[-4000:]}")
            shutil.move(built, library)
    return ctypes.CDLL(str(library))


@dataclass(frozen=True)
class EmulatedKernel:
    """Callable like a CuPy RawKernel: kernel(grid, block, args) with numpy arrays and numpy scalars."""

    entry: Any

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple) -> None:
        holders = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else _scalar(a) for a in args]
        params = (ctypes.c_void_p * len(holders))(*(ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders))
        grid_y = grid[1] if len(grid) > 1 else 1
        self.entry(ctypes.c_uint(grid[0]), ctypes.c_uint(grid_y), ctypes.c_uint(block[0]), params)


def _scalar(value: Any) -> ctypes._SimpleCData:
    if isinstance(value, np.int32):
        return ctypes.c_int32(int(value))
    raise TypeError(f"kernel argument {value!r} must be a numpy array or np.int32 (what CuPy would be given)")


class GuardedArrays:
    """The slice of CuPy's API the backend uses, on host memory: every array is followed by GUARD_LEN guard
    elements holding a sentinel, and `check_guards` fails if a kernel wrote past an array's end."""

    def __init__(self) -> None:
        self._guarded: list[tuple[np.ndarray, np.ndarray]] = []

    def _alloc(self, dims: tuple[int, ...] | int, dtype: Any) -> np.ndarray:
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        size = int(np.prod(dims))
        whole = np.empty(size + GUARD_LEN, dtype=dtype)
        whole.view(np.uint8)[:] = 0xA5
        self._guarded.append((whole, whole[size:].copy()))
        return whole[:size].reshape(dims)

    def empty(self, dims: tuple[int, ...] | int, dtype: Any) -> np.ndarray:
        return self._alloc(dims, dtype)

    def zeros(self, dims: tuple[int, ...] | int, dtype: Any) -> np.ndarray:
        out = self._alloc(dims, dtype)
        out[...] = 0
        return out

    def asarray(self, array: np.ndarray) -> np.ndarray:
        out = self._alloc(array.shape, array.dtype)
        out[...] = array
        return out

    @staticmethod
    def asnumpy(array: np.ndarray) -> np.ndarray:
        return np.array(array)

    def check_guards(self) -> None:
        for whole, guard in self._guarded:
            tail = whole[-GUARD_LEN:]
            if not np.array_equal(tail.view(np.uint8), guard.view(np.uint8)):
                raise AssertionError(
                    f"a kernel wrote past the end of a {whole.dtype} buffer of {whole.size - GUARD_LEN}"
                )


class EmulatedCudaBackend(CudaBackend):
    """The real CudaBackend, with host arrays and g++-compiled kernels in place of CuPy and NVRTC."""

    def __init__(self, poison: bool = True, sgy: int = 8, rows: int = 1):
        super().__init__(poison=poison, sgy=sgy, rows=rows)
        self.arrays = GuardedArrays()

    def _xp(self) -> GuardedArrays:
        return self.arrays

    def _module(self, variant: KernelVariant) -> KernelSet:
        library = _library(variant)
        return KernelSet(*(EmulatedKernel(getattr(library, f"emu_{name}")) for name in KERNEL_NAMES))

    def synchronize(self) -> None:
        """Nothing to wait for: an emulated launch returns when its last block has finished."""

    def arrivals(self) -> np.ndarray:
        """kernel B's arrival counters (each launch must leave them at zero)."""
        return self._arrivals
