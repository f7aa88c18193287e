"""Backends: one module per device family, each implementing `harness.backends.base.Backend`, and the registry
(`BACKENDS`) that says everything the rest of the harness needs to know about each without importing it.

Importing this package never imports MLX or CuPy; `get_backend` imports lazily so a machine without Metal or a
GPU can still use the rest of the harness. That is why a backend's facts live in its registry entry and not as
attributes of its class: the report, provenance, the install hint and the config schema need them on machines
where the backend's module cannot be imported at all. Adding a backend = its module + one `BackendSpec` line here;
no other module names a backend.
"""

from __future__ import annotations

import functools
import importlib
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from harness.backends.base import Backend, BackendUnavailable

PinRule = Callable[[Mapping[str, str], Mapping[str, str]], str]


@dataclass(frozen=True)
class MlxcelCap:
    """The compiled-in cap mlxcel has for this backend (src/models/switch_layers.rs): its constant, its published
    value, and the line it sits on in the published file (a patch made without a tree needs a position)."""

    constant: str
    default: int
    published_line: int


@dataclass(frozen=True)
class RayWorker:
    """What one Ray worker of this backend claims: `unit` names it in errors, `resource` is the Ray node resource
    counted to size the pool (None: one per machine), `options` go to `actor.options`."""

    unit: str
    resource: str | None
    options: Mapping[str, int]


@dataclass(frozen=True)
class BackendSpec:
    """One backend's facts, readable without importing its module (see the module docstring)."""

    name: str
    module: str  # defines BACKEND = the Backend subclass; imported only when the backend is used
    extra: str  # the pip extra that installs its libraries
    libraries: tuple[str, ...]  # import names of the array libraries its built-in workloads run on
    library_pin: PinRule  # (package versions, device info) -> the addendum heading's "under <pin>" phrase
    default_config: Callable[[str], str]  # GPU name -> the shipped config `make sweep` uses here
    hosts_commands: Callable[[Detection], bool]  # an external command on this machine most likely runs on it
    ray_worker: RayWorker
    default_dtype: str = "bfloat16"  # the `auto` activation dtype
    emulates_half: bool = False  # float16/bfloat16 are held as float32 (so dense weights read 4 bytes each)
    array_ops: str = "harness.workloads.arrays:ArrayOps"  # module:class of its non-MoE decode math
    mlxcel: MlxcelCap | None = None  # None: mlxcel has no cap for this backend
    install_modules: tuple[str, ...] = field(default=())  # extra top-level modules its extra installs


def _cuda_pin(packages: Mapping[str, str], device_info: Mapping[str, str]) -> str:
    cupy = next((packages[p] for p in ("cupy-cuda13x", "cupy-cuda12x", "cupy") if p in packages), "")
    cuda = device_info.get("cuda") or device_info.get("cuda_runtime") or ""
    return " / ".join(p for p in (f"CuPy {cupy}" if cupy else "", f"CUDA {cuda}" if cuda else "") if p) or "CUDA"


def _metal_pin(packages: Mapping[str, str], device_info: Mapping[str, str]) -> str:
    return f"MLX {packages['mlx']}" if "mlx" in packages else "metal"


def _cpu_pin(packages: Mapping[str, str], device_info: Mapping[str, str]) -> str:
    return f"numba {packages['numba']}" if "numba" in packages else f"numpy {packages.get('numpy', '')}"


# In `auto` order: the first usable one is what `auto` means for built-in workloads.
BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec(
        name="metal",
        module="harness.backends.metal",
        extra="metal",
        libraries=("mlx",),
        library_pin=_metal_pin,
        default_config=lambda gpu: "m-series.yaml",
        hosts_commands=lambda found: found.apple_silicon,
        ray_worker=RayWorker("Apple GPUs", None, {"num_cpus": 0}),  # one Apple GPU per machine
        array_ops="harness.workloads.arrays:MlxOps",
        mlxcel=MlxcelCap("FUSED_MOE_MAX_DFF_METAL", 4096, 80),
    ),
    BackendSpec(
        name="cuda",
        module="harness.backends.cuda",
        extra="cuda",
        libraries=("cupy",),
        library_pin=_cuda_pin,
        default_config=lambda gpu: "gb10.yaml" if "GB10" in gpu.upper() else "h200.yaml",
        hosts_commands=lambda found: bool(found.gpu),
        ray_worker=RayWorker("GPUs", "GPU", {"num_gpus": 1, "num_cpus": 0}),
        array_ops="harness.workloads.arrays:CupyOps",
        mlxcel=MlxcelCap("FUSED_MOE_MAX_DFF_CUDA", 8192, 101),
        install_modules=("cupy_backends",),
    ),
    BackendSpec(
        name="cpu",
        module="harness.backends.cpu",
        extra="cpu",
        libraries=("numba", "numpy"),
        library_pin=_cpu_pin,
        default_config=lambda gpu: "cpu-smoke.yaml",
        hosts_commands=lambda found: True,
        ray_worker=RayWorker("CPU cores", "CPU", {"num_cpus": 1}),  # workers share the cores' memory bandwidth
        default_dtype="float32",  # MLX CPU low-precision quantized matmuls are inaccurate; the kernels accumulate f32
        emulates_half=True,
        install_modules=("mlx",),
    ),
)
BACKEND_NAMES = tuple(spec.name for spec in BACKENDS)
_SPECS = {spec.name: spec for spec in BACKENDS}


def backend_spec(name: str) -> BackendSpec:
    """The registry entry of a backend name (not `auto`: resolve it first)."""
    if name not in _SPECS:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    return _SPECS[name]


def mlxcel_caps() -> dict[str, MlxcelCap]:
    """backend -> mlxcel's cap for it, for the backends mlxcel has one for."""
    return {s.name: s.mlxcel for s in BACKENDS if s.mlxcel is not None}


def backend_class(name: str) -> type[Backend]:
    return importlib.import_module(backend_spec(name).module).BACKEND


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


@functools.cache
def detect() -> Detection:
    from harness import provenance  # provenance probes nvidia-smi; imported here to keep this package light

    return Detection(
        usable={name: availability(name) for name in BACKEND_NAMES},
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
