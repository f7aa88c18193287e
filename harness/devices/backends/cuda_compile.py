"""Compile every CUDA kernel variant with NVRTC, without a GPU, so a syntax or template error never lands.

NVRTC is a compiler library, not a driver call: `cupy.cuda.nvrtc` loads it from the `nvidia-cuda-nvrtc`
wheel (pinned to 13.0 so the cubins stay loadable by a CUDA 13.0 driver) and works on a machine with no
device. The source and options are `KernelVariant.source()` / `.options()`, the same strings the runtime
hands CuPy; the check adds the options CuPy itself appends, the target architecture and ptxas' verbose flag
(for the register report).

Results are cached on disk (`nvrtc_cache_dir()`), keyed by a hash of the source, the options, the architecture and the
NVRTC version: a compile is deterministic in those, and recompiling unchanged kernels cost the test suite over a
minute per run. An unreadable or unwritable cache only means compiling again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.config.install_hint import install_command
from harness.config.resources import user_cache_dir
from harness.devices.backends.cuda_source import KernelVariant, all_variants

# Ampere (A100, RTX 30), Ada (RTX 40, L4), Hopper (H100/H200), Blackwell (B200; RTX 50; GB10 = sm_121).
SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "sm_121")
# What cupy.RawModule appends to every NVRTC compile besides the architecture (cupy/cuda/compiler.py, CuPy 14):
# the check compiles with them too, so it sees the flags the runtime really uses.
CUPY_ADDED_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")
_PTXAS_VERBOSE = "--ptxas-options=-v"
_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_CACHE_FORMAT = "1"  # bump when CompileResult's stored fields change


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one kernel: registers per thread and bytes spilled to local memory."""

    registers: int
    spill_bytes: int


@dataclass(frozen=True)
class CompileResult:
    """One variant compiled for one architecture. `log` is NVRTC's full log (errors, or ptxas' report)."""

    variant: str
    arch: str
    ok: bool
    log: str
    kernels: dict[str, KernelResources] = field(default_factory=dict)


def nvrtc_status() -> tuple[bool, str]:
    """(loadable, reason): whether NVRTC can be used here, and its version or why not. Never raises."""
    try:
        from cupy.cuda import nvrtc

        major, minor = nvrtc.getVersion()
    except Exception as exc:  # ImportError without cupy, RuntimeError/OSError when libnvrtc is missing
        return False, (
            f"NVRTC cannot be loaded ({type(exc).__name__}: {exc}); "
            f"install the extra: {install_command('nvrtc')} (cupy-cuda13x + nvidia-cuda-nvrtc==13.0.*)"
        )
    return True, f"NVRTC {major}.{minor}"


def supported_archs() -> tuple[str, ...]:
    """The real architectures (sm_XX) the loaded NVRTC can generate code for."""
    from cupy.cuda import nvrtc

    return tuple(f"sm_{cc}" for cc in nvrtc.getSupportedArchs())


def nvrtc_cache_dir() -> Path:
    """Where compile results are kept: $XDG_CACHE_HOME/moecal/nvrtc, else ~/.cache/moecal/nvrtc (never the checkout)."""
    return user_cache_dir("nvrtc")


def compile_variant(variant: KernelVariant, arch: str) -> CompileResult:
    """Compile one variant to a cubin for `arch` (e.g. 'sm_90'), or take the cached result of the identical
    compile; never raises for a compile error."""
    from cupy.cuda import nvrtc

    label = variant.label()
    version = nvrtc.getVersion()
    if arch not in supported_archs():
        return CompileResult(label, arch, False, f"NVRTC {version[0]}.{version[1]} cannot target {arch}")
    source = variant.source()
    options = (*variant.options(), *CUPY_ADDED_OPTIONS, _PTXAS_VERBOSE, f"--gpu-architecture={arch}")
    key = hashlib.sha256("\0".join([_CACHE_FORMAT, str(version), source, *options]).encode()).hexdigest()
    cached = _read_cached(key, label)
    if cached is not None:
        return cached
    result = _compile(source, options, label, arch)
    _write_cached(key, result)
    return result


def _compile(source: str, options: tuple[str, ...], label: str, arch: str) -> CompileResult:
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, "moe_kernels.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            return CompileResult(label, arch, False, f"{exc}\n{nvrtc.getProgramLog(prog)}")
        nvrtc.getCUBIN(prog)  # a compile that produced no binary would fail here
        log = nvrtc.getProgramLog(prog)
        return CompileResult(label, arch, True, log, parse_resources(log))
    finally:
        nvrtc.destroyProgram(prog)


def _read_cached(key: str, label: str) -> CompileResult | None:
    try:
        data = json.loads((nvrtc_cache_dir() / f"{key}.json").read_text(encoding="utf-8"))
        kernels = {name: KernelResources(**usage) for name, usage in data.pop("kernels").items()}
        return CompileResult(**{**data, "variant": label, "kernels": kernels})
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # missing, unreadable or foreign: compile
        return None


def _write_cached(key: str, result: CompileResult) -> None:
    """Atomically (a temporary file renamed into place), so a concurrent reader never sees half a file."""
    directory = nvrtc_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=directory, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump(asdict(result), f)
        os.replace(f.name, directory / f"{key}.json")
    except OSError:
        pass  # a read-only or full disk costs a recompile next time, nothing else


def parse_resources(log: str) -> dict[str, KernelResources]:
    """Registers and spill bytes per kernel from ptxas' verbose report (entries appear in that order)."""
    out: dict[str, KernelResources] = {}
    parts = _ENTRY.split(log)  # [preamble, name, report, name, report, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        spills = _SPILLS.search(body)
        registers = _REGISTERS.search(body)
        if spills and registers:
            out[name] = KernelResources(int(registers.group(1)), int(spills.group(1)) + int(spills.group(2)))
    return out


def compile_all(
    archs: tuple[str, ...] = SUPPORTED_ARCHS, variants: list[KernelVariant] | None = None, jobs: int = 2
) -> list[CompileResult]:
    """Compile every variant (default: all bits x group sizes x dtypes) for every arch.

    NVRTC releases the GIL while compiling, so `jobs` threads compile in parallel. The first compile runs
    alone: NVRTC loads its builtins library on first use, and two threads racing there can fail with
    "failed to open libnvrtc-builtins".
    """
    variants = all_variants() if variants is None else variants
    pairs = [(v, a) for v in variants for a in archs]
    if not pairs:
        return []
    first = compile_variant(*pairs[0])
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return [first, *pool.map(lambda pair: compile_variant(*pair), pairs[1:])]
