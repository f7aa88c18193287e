"""Run the CUDA kernels of kernels/cuda/ on the CPU, compiled by g++ (tests only).

There is no GPU here, yet the kernels must be right when an H200 runs them. This module compiles the very
translation unit the runtime hands CuPy (`KernelVariant.source()`, with the variant's -D options) as C++ against
tests/support/cuda_shim.h, which turns the CUDA built-ins into host code: one block at a time, each block blockDim.x
real threads, __syncthreads a barrier, __shfl_down_sync an exchange over the warp's 32 threads. `EmulatedCudaBackend`
is the real `CudaBackend` with only its array module, its kernel launches and its graph capture replaced, so the
Python side of both paths (buffers, grids, argument order, poisoning, the arrival counters) runs as on a GPU.

Closer to a GPU than "one block after the other":
- Block order: each launch runs its blocks forward, reversed or in a seeded random permutation (`block_order`;
  "cycle" changes order every launch), so a result that depends on which block runs last shows up.
- Aborted launches: `abort_next(kernel, blocks)` makes the next launch of that kernel stop after `blocks` blocks;
  like an asynchronous CUDA error, the launch returns and the next `synchronize()` raises.
- Graphs: `graph()` records the launches with raw addresses, as a CUDA graph keeps raw device pointers, and every
  replay first checks that each address still lies inside a live buffer (buffers are tracked by weak reference,
  so a buffer the backend dropped is freed) instead of reading freed memory.

What it checks: indexing, unpacking, dequantization, reductions, the fold over slots, dtype conversions and
every launch configuration. What it cannot: the three inline-PTX helpers (MOE_HOST_EMULATION twins run
instead), blocks running concurrently (the fold's memory ordering), anything NVRTC rejects but g++ accepts
(the NVRTC compile test covers that), and speed. Out-of-bounds writes are caught by guard elements after
every buffer.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from harness.devices.backends.cuda import CudaBackend, KernelSet
from harness.devices.backends.cuda_source import KERNEL_NAMES, KernelVariant

SHIM = Path(__file__).with_name("cuda_shim.h")
GUARD_LEN = 64  # guard elements after every emulated device buffer
CACHE_DIR = Path(tempfile.gettempdir()) / "moecal-cuda-emulation"
BLOCK_ORDERS = ("forward", "reversed", "random")  # codes 0, 1, 2 of the shim's EmuOrder
NO_LIMIT = 2**63 - 1


def compiler() -> str | None:
    """The C++ compiler used (g++ >= 12 for std::barrier, std::atomic_ref and _Float16), or None."""
    return shutil.which("g++")


def _source(variant: KernelVariant) -> str:
    """The runtime's translation unit plus one C entry point per kernel: emu_<name>(grid_x, grid_y, block, args)."""
    entries = "".join(
        f'extern "C" unsigned long emu_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, void** args, '
        f"int order, unsigned seed, unsigned long max_blocks) "
        f"{{ return emu_launch({name}, gx, gy, gz, bx, args, order, seed, max_blocks); }}\n"
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


@dataclass
class Launch:
    """One kernel launch as the emulator runs (or a graph replays) it: arguments as raw addresses and values."""

    name: str
    entry: Any
    grid: tuple[int, int, int]
    block: int
    holders: list  # ctypes values the parameter array points at (kept alive with it)
    pointers: list[tuple[int, int]] = field(default_factory=list)  # (argument position, address)

    @classmethod
    def build(cls, name: str, entry: Any, grid: tuple[int, ...], block: tuple[int, ...], args: tuple) -> Launch:
        holders, pointers = [], []
        for position, arg in enumerate(args):
            if isinstance(arg, np.ndarray):
                holders.append(ctypes.c_void_p(arg.ctypes.data))
                pointers.append((position, arg.ctypes.data))
            else:
                holders.append(_scalar(arg))
        gx, gy, gz = (int(g) for g in (*grid, 1, 1)[:3])
        return cls(name, entry, (gx, gy, gz), int(block[0]), holders, pointers)

    def run(self, order: int, seed: int, max_blocks: int) -> int:
        """Run the grid (at most max_blocks blocks); returns how many blocks ran."""
        params = (ctypes.c_void_p * len(self.holders))(
            *(ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in self.holders)
        )
        grid = (ctypes.c_uint(g) for g in self.grid)
        limits = (ctypes.c_int(order), ctypes.c_uint(seed), ctypes.c_ulong(max_blocks))
        return int(self.entry(*grid, ctypes.c_uint(self.block), params, *limits))


@dataclass(frozen=True)
class EmulatedKernel:
    """Callable like a CuPy RawKernel: kernel(grid, block, args) with numpy arrays and numpy scalars."""

    name: str
    entry: Any
    backend: EmulatedCudaBackend

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple) -> None:
        self.backend.launch(Launch.build(self.name, self.entry, grid, block, args))


def _scalar(value: Any) -> ctypes._SimpleCData:
    if isinstance(value, np.int32):
        return ctypes.c_int32(int(value))
    raise TypeError(f"kernel argument {value!r} must be a numpy array or np.int32 (what CuPy would be given)")


class GuardedArrays:
    """The slice of CuPy's API the backend uses, on host memory: every array is followed by GUARD_LEN guard
    elements holding a sentinel, and `check_guards` fails if a kernel wrote past an array's end. Arrays are
    tracked by weak reference only: one the backend drops is freed, as device memory would be."""

    def __init__(self) -> None:
        self._guarded: list[tuple[weakref.ref, int, int, bytes]] = []  # (whole array, address, size, guard)

    def _alloc(self, dims: tuple[int, ...] | int, dtype: Any) -> np.ndarray:
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        size = int(np.prod(dims))
        whole = np.empty(size + GUARD_LEN, dtype=dtype)
        whole.view(np.uint8)[:] = 0xA5
        guard = whole[size:].tobytes()
        self._guarded.append((weakref.ref(whole), whole.ctypes.data, whole.nbytes, guard))
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

    def is_live(self, address: int) -> bool:
        """Whether `address` lies inside an array that still exists."""
        return any(start <= address < start + size and ref() is not None for ref, start, size, _ in self._guarded)

    def check_guards(self) -> None:
        for ref, _, _, guard in self._guarded:
            whole = ref()
            if whole is not None and whole[-GUARD_LEN:].tobytes() != guard:
                raise AssertionError(
                    f"a kernel wrote past the end of a {whole.dtype} buffer of {whole.size - GUARD_LEN}"
                )


class EmulatedCudaBackend(CudaBackend):
    """The real CudaBackend, with host arrays, g++-compiled kernels and recorded graphs in place of CuPy, NVRTC
    and CUDA graphs. `block_order` is one of BLOCK_ORDERS or "cycle" (forward, reversed, random in turn, one
    order per launch); random permutations come from `seed` and the launch count, so a run is reproducible."""

    def __init__(
        self,
        poison: bool = True,
        sgy: int = 8,
        rows: int = 1,
        act_load: str = "f32",
        split_k: int = 1,
        block_order: str = "forward",
        seed: int = 0,
        sm_count: int = 132,
    ):
        super().__init__(poison=poison, sgy=sgy, rows=rows, act_load=act_load, split_k=split_k)
        if block_order not in (*BLOCK_ORDERS, "cycle"):
            raise ValueError(f"block_order must be one of {BLOCK_ORDERS} or 'cycle', got {block_order!r}")
        self.arrays = GuardedArrays()
        self.block_order = block_order
        self.seed = seed
        self.launches = itertools.count()
        self._aborts: dict[str, int] = {}
        self._aborted: list[str] = []
        self._recording: list[Launch] | None = None
        self.grids: dict[str, list[tuple[int, int, int]]] = {}  # every launch's grid, by kernel
        self.sm_count = sm_count  # an H200's by default, so small test grids take the split-K path

    def _sm_count(self) -> int:
        return self.sm_count

    def _xp(self) -> GuardedArrays:
        return self.arrays

    def _module(self, variant: KernelVariant) -> KernelSet:
        library = _library(variant)
        return KernelSet(*(EmulatedKernel(name, getattr(library, f"emu_{name}"), self) for name in KERNEL_NAMES))

    def abort_next(self, kernel: str, blocks: int) -> None:
        """The next launch of `kernel` runs only its first `blocks` blocks (in the launch's block order)."""
        self._aborts[kernel] = blocks

    def launch(self, launch: Launch) -> None:
        if self._recording is not None:
            self._recording.append(launch)
            return
        number = next(self.launches)
        self.grids.setdefault(launch.name, []).append(launch.grid)
        order = self.block_order if self.block_order != "cycle" else BLOCK_ORDERS[number % len(BLOCK_ORDERS)]
        limit = self._aborts.pop(launch.name, NO_LIMIT)
        ran = launch.run(BLOCK_ORDERS.index(order), self.seed * 1_000_003 + number, limit)
        if limit != NO_LIMIT:
            self._aborted.append(f"{launch.name} aborted after {ran} of {np.prod(launch.grid)} blocks")

    def _capture(self, run: Callable[[], Any]) -> Callable[[], Any]:
        """Record `run`'s launches; a replay re-runs them with the recorded raw addresses, after checking that
        every one still points into a live buffer (a real graph would read or write freed memory)."""
        self._recording = []
        try:
            out = run()
            recorded, self._recording = self._recording, None
        finally:
            self._recording = None

        def replay() -> Any:
            for index, launch in enumerate(recorded):
                for position, address in launch.pointers:
                    if not self.arrays.is_live(address):
                        raise AssertionError(
                            f"graph launch {index} ({launch.name}) argument {position} points at freed memory: "
                            "a buffer the graph was captured with has been released"
                        )
            for launch in recorded:
                self.launch(launch)
            return out

        return replay

    def _wait(self) -> None:
        """An emulated launch has finished when it returns; an aborted one is reported here, as CUDA reports an
        asynchronous launch error at the next synchronisation."""
        if self._aborted:
            aborted, self._aborted = self._aborted, []
            raise RuntimeError(f"emulated launch error: {'; '.join(aborted)}")
