"""Backends: one module per device family, each implementing `harness.devices.backends.base.Backend`, found
through the registry (harness/config/backend_specs.py): what this machine offers (`detect`), what `auto` means,
and a usable instance (`get_backend`).

Importing this package never imports MLX or CuPy; `get_backend` imports lazily so a machine without Metal or a
GPU can still use the rest of the harness.
"""

from __future__ import annotations

import functools
import importlib
import platform
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from harness.config.backend_specs import BACKEND_NAMES, BACKENDS, backend_spec
from harness.devices.backends.base import Backend
from harness.errors import BackendUnavailable


def backend_class(name: str) -> type[Backend]:
    return importlib.import_module(backend_spec(name).module).BACKEND


def availability(name: str) -> tuple[bool, str]:
    """(usable, reason) for one backend, never raising: `moecal doctor` prints this."""
    try:
        return backend_class(name).availability()
    except Exception as exc:  # an import error in an optional dependency is a reason, not a crash
        from harness.config.install_hint import missing_module_hint

        hint = missing_module_hint(exc.name) if isinstance(exc, ModuleNotFoundError) else None
        return False, hint or f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Detection:
    """What this machine offers, found once per process (`detect()`): every question about "which backend or
    device is here" — `auto`, doctor's table, the default config, an external command's label — reads this."""

    usable: Mapping[str, tuple[bool, str]]  # backend → (usable, reason), in BACKEND_NAMES order
    gpu: dict[str, str]  # nvidia-smi's gpu / driver / gpu_memory ({} without an NVIDIA GPU)
    apple_silicon: bool

    @property
    def auto(self) -> str | None:
        """What `auto` means for built-in workloads: the first usable backend in registry order."""
        return next((name for name, (ok, _) in self.usable.items() if ok), None)

    @property
    def platform(self) -> str:
        """The backend an external command most likely runs on (each spec's `hosts_commands`: cuda with an NVIDIA
        GPU, metal on Apple silicon, else cpu). The command picks its own device; our Python backends need not be
        usable for it."""
        return next(s.name for s in BACKENDS if s.hosts_commands(self))

    @property
    def gpu_name(self) -> str:
        return self.gpu.get("gpu", "")


class _Probed(Mapping[str, tuple[bool, str]]):
    """Every backend's availability, probed on first use: importing a backend's library can write (CuPy makes its
    kernel cache folder on import), so a question about the GPU alone (an external command's label, `moecal plan`
    of a command workload) must not probe them."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[bool, str]] | None = None

    def _all(self) -> dict[str, tuple[bool, str]]:
        if self._found is None:
            self._found = {name: availability(name) for name in BACKEND_NAMES}
        return self._found

    def __getitem__(self, name: str) -> tuple[bool, str]:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


@functools.cache
def detect() -> Detection:
    from harness.runs import provenance  # provenance probes nvidia-smi; imported here to keep this package light

    return Detection(
        usable=_Probed(),
        gpu=provenance.nvidia_gpu(),
        apple_silicon=sys.platform == "darwin" and platform.machine() == "arm64",
    )


def resolve_name(name: str) -> str:
    """Map `auto` to the first usable backend in registry order (metal → cuda → cpu)."""
    if name != "auto":
        return name
    found = detect().auto
    if found is None:
        raise BackendUnavailable("no backend is usable here; run `moecal doctor` to see why")
    return found


def device_facts(name: str) -> Backend:
    """What a plan needs of backend `name` (device name and info, memory, cache, copy bandwidth) at the least cost:
    the registry's `plan_facts` where a backend has them (the CPU's, without importing numba: its libraries need
    only be installed), else the backend instantiated as `get_backend` does."""
    spec = backend_spec(resolve_name(name))
    if spec.plan_facts is None:
        return get_backend(name)
    import importlib.util

    for library in spec.libraries:
        if importlib.util.find_spec(library) is None:  # get_backend's refusal, without importing the library
            from harness.config.install_hint import missing_module_hint

            raise BackendUnavailable(f"backend {spec.name!r} is not usable here: {missing_module_hint(library)}")
    module, _, attribute = spec.plan_facts.partition(":")
    return getattr(importlib.import_module(module), attribute)()  # the facts part of the Backend interface


def get_backend(name: str = "auto") -> Backend:
    """Instantiate a usable backend or raise BackendUnavailable with the reason."""
    resolved = resolve_name(name)
    ok, reason = availability(resolved)
    if not ok:
        raise BackendUnavailable(f"backend {resolved!r} is not usable here: {reason}")
    try:
        return backend_class(resolved)()
    except ValueError as exc:  # a kernel variant from the environment (e.g. MOECAL_CUDA_ROWS=3) that is none
        raise BackendUnavailable(f"backend {resolved!r}: {exc}") from None
