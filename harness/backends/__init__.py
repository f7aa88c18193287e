"""Backends: one module per device family, each implementing `harness.backends.base.Backend`.

Importing this package never imports MLX or CuPy; `get_backend` imports lazily so a machine without Metal or a
GPU can still use the rest of the harness.
"""

from __future__ import annotations

import functools
import importlib
import platform
import sys
from dataclasses import dataclass

from harness.backends.base import Backend, BackendUnavailable

BACKEND_NAMES = ("metal", "cuda", "cpu")
_MODULES = {"metal": "harness.backends.metal", "cuda": "harness.backends.cuda", "cpu": "harness.backends.cpu"}


def backend_class(name: str) -> type[Backend]:
    if name not in _MODULES:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    return importlib.import_module(_MODULES[name]).BACKEND


def availability(name: str) -> tuple[bool, str]:
    """(usable, reason) for one backend, never raising: `moecal doctor` prints this."""
    try:
        return backend_class(name).availability()
    except Exception as exc:  # an import error in an optional dependency is a reason, not a crash
        from harness.install_hint import missing_module_hint

        hint = missing_module_hint(exc.name) if isinstance(exc, ModuleNotFoundError) else None
        return False, hint or f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Detection:
    """What this machine offers, found once per process (`detect()`): every question about "which backend or
    device is here" — `auto`, doctor's table, the default config, an external command's label — reads this."""

    usable: dict[str, tuple[bool, str]]  # backend → (usable, reason), in BACKEND_NAMES order
    gpu: dict[str, str]  # nvidia-smi's gpu / driver / gpu_memory ({} without an NVIDIA GPU)
    apple_silicon: bool

    @property
    def auto(self) -> str | None:
        """What `auto` means for built-in workloads: the first usable of metal → cuda → cpu."""
        return next((name for name, (ok, _) in self.usable.items() if ok), None)

    @property
    def platform(self) -> str:
        """The backend an external command most likely runs on: cuda with an NVIDIA GPU, metal on Apple silicon.
        (The command picks its own device; our Python backends need not be usable for it.)"""
        return "cuda" if self.gpu else "metal" if self.apple_silicon else "cpu"

    @property
    def gpu_name(self) -> str:
        return self.gpu.get("gpu", "")


@functools.cache
def detect() -> Detection:
    from harness import provenance  # provenance probes nvidia-smi; imported here to keep this package light

    return Detection(
        usable={name: availability(name) for name in BACKEND_NAMES},
        gpu=provenance.nvidia_gpu(),
        apple_silicon=sys.platform == "darwin" and platform.machine() == "arm64",
    )


def resolve_name(name: str) -> str:
    """Map `auto` to the first usable backend in the order metal → cuda → cpu."""
    if name != "auto":
        return name
    found = detect().auto
    if found is None:
        raise BackendUnavailable("no backend is usable here; run `moecal doctor` to see why")
    return found


def device_facts(name: str) -> Backend:
    """What a plan needs of backend `name` (device name and info, memory, cache, copy bandwidth) at the least cost:
    the CPU's facts without numba (harness.backends.cpu_host; numba need only be installed), any other backend
    instantiated as `get_backend` does — its facts come from the device library itself."""
    if resolve_name(name) != "cpu":
        return get_backend(name)
    import importlib.util

    if importlib.util.find_spec("numba") is None:  # get_backend's refusal, without importing numba
        from harness.install_hint import missing_module_hint

        raise BackendUnavailable(f"backend 'cpu' is not usable here: {missing_module_hint('numba')}")
    from harness.backends.cpu_host import CpuHost

    return CpuHost()  # type: ignore[return-value]  # the facts part of the Backend interface, all a plan calls


def get_backend(name: str = "auto") -> Backend:
    """Instantiate a usable backend or raise BackendUnavailable with the reason."""
    resolved = resolve_name(name)
    ok, reason = availability(resolved)
    if not ok:
        raise BackendUnavailable(f"backend {resolved!r} is not usable here: {reason}")
    try:
        return backend_class(resolved)()
    except ValueError as exc:  # a launch setting from the environment (e.g. MOECAL_CUDA_ROWS=3) names no variant
        raise BackendUnavailable(f"backend {resolved!r}: {exc}") from None
