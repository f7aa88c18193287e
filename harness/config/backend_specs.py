"""Which backends exist, and every fact about each that the rest of the harness needs without importing it.

This is the backend registry: one `BackendSpec` per backend, each naming the module that implements it
(harness/devices/backends/<name>.py, imported only when the backend is used). The facts live here and not on the
backend classes because the config schema, provenance, the install hint and the report need them on machines where
a backend's module cannot be imported at all (no Metal, no GPU). It sits with the configuration, below every layer
that reads it. Adding a backend = its module + one `BackendSpec` entry here; no other module names a backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import BackendUnavailable

PinRule = Callable[[Mapping[str, str], Mapping[str, str]], str]
# (the device's words: its name and recorded GPU, the run's provenance) -> the device class mlxcel's default would be
# chosen by (`metal-m3`, `cuda-sm90`, `rocm-gfx1151`), None when the words do not say
DeviceClassRule = Callable[[str, Mapping[str, object]], str | None]
# a GPU run's provenance (with `os`) -> whether it shows the machine had no such device; None: it cannot tell
MissingDeviceRule = Callable[[Mapping[str, object]], bool | None]


@dataclass(frozen=True)
class MlxcelCap:
    """The compiled-in cap mlxcel has for this backend (src/models/switch_layers.rs): its constant, its published
    value, and the line it sits on in the published file (a patch made without a tree needs a position).
    `shared_with` names the backend whose constant this one inherits (ROCm: not Metal, so the CUDA one). The launch
    knobs' defaults per backend are the knob table's (harness.config.knobs)."""

    constant: str
    default: int
    published_line: int
    shared_with: str = ""


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
    title: str  # the backend as words name it ("ROCm"): a build in mlxcel's source, a heading
    module: str  # defines BACKEND = the Backend subclass; imported only when the backend is used
    extra: str  # the pip extra that installs its libraries
    libraries: tuple[str, ...]  # import names of the array libraries its built-in workloads run on
    library_pin: PinRule  # (package versions, device info) -> the addendum heading's "under <pin>" phrase
    default_config: Callable[[str], str]  # GPU name -> the shipped config `make sweep` uses here
    # a harness.devices.backends.Detection -> whether an external command on this machine most likely runs on it
    hosts_commands: Callable[[Any], bool]
    ray_worker: RayWorker
    default_dtype: str = "bfloat16"  # the `auto` activation dtype
    emulates_half: bool = False  # float16/bfloat16 are held as float32 (so dense weights read 4 bytes each)
    array_ops: str = "harness.measure.workloads.arrays:ArrayOps"  # module:class of its non-MoE decode math
    mlxcel: MlxcelCap | None = None  # None: mlxcel has no cap for this backend
    install_modules: tuple[str, ...] = field(default=())  # extra top-level modules its extra installs
    # module:class giving the device facts a plan needs (name, memory, cache, bandwidth) without the device library;
    # None: a plan instantiates the backend itself
    plan_facts: str | None = None
    device_class: DeviceClassRule | None = None  # None: `<backend>-<device>`
    device_missing: MissingDeviceRule | None = None  # None: not a GPU backend (a label nothing can contradict)


def _cuda_pin(packages: Mapping[str, str], device_info: Mapping[str, str]) -> str:
    cupy = next((packages[p] for p in ("cupy-cuda13x", "cupy-cuda12x", "cupy") if p in packages), "")
    cuda = device_info.get("cuda") or device_info.get("cuda_runtime") or ""
    return " / ".join(p for p in (f"CuPy {cupy}" if cupy else "", f"CUDA {cuda}" if cuda else "") if p) or "CUDA"


def _metal_pin(packages: Mapping[str, str], device_info: Mapping[str, str]) -> str:
    return f"MLX {packages['mlx']}" if "mlx" in packages else "metal"


def _rocm_pin(packages: Mapping[str, str], device_info: Mapping[str, str]) -> str:
    return f"ROCm {device_info['rocm']}" if device_info.get("rocm") else "ROCm"


def rocm_device_present(found: Any = None) -> bool:
    """Whether this machine has a ROCm device (the amdgpu kernel driver's /dev/kfd); the Detection is unused:
    nothing else in it knows AMD GPUs."""
    return Path("/dev/kfd").exists()


# NVIDIA compute capability by product name, for devices whose run did not record it (from NVIDIA's CUDA GPU list)
COMPUTE_CAPABILITY = {
    "GB10": "12.1",
    "B200": "10.0",
    "H200": "9.0",
    "H100": "9.0",
    "GH200": "9.0",
    "L40": "8.9",
    "4090": "8.9",
    "A100": "8.0",
    "A10": "8.6",
    "3090": "8.6",
    "V100": "7.0",
    "T4": "7.5",
}


def _metal_class(text: str, provenance: Mapping[str, object]) -> str | None:
    found = re.search(r"\bM(\d+)\b", text)  # the Apple chip generation
    return f"metal-m{found.group(1)}" if found else None


def _cuda_class(text: str, provenance: Mapping[str, object]) -> str | None:
    capability = str(provenance.get("compute_capability") or "")
    if not capability:
        capability = next((cc for name, cc in COMPUTE_CAPABILITY.items() if name in text.upper()), "")
    return f"cuda-sm{capability.replace('.', '')}" if capability else None


def _rocm_class(text: str, provenance: Mapping[str, object]) -> str | None:
    found = re.search(r"gfx[0-9a-f]+", text)
    return f"rocm-{found.group(0)}" if found else None


def _cuda_missing(meta: Mapping[str, object]) -> bool | None:
    """A run that looked for an NVIDIA GPU (`os` recorded) and found neither a GPU nor a driver."""
    return not (meta.get("gpu") or meta.get("driver")) if "os" in meta else None


def _metal_missing(meta: Mapping[str, object]) -> bool | None:
    """Metal needs macOS: a run recorded on another OS had no Metal device."""
    return not str(meta["os"]).startswith("Darwin") if "os" in meta else None


def _cpu_pin(packages: Mapping[str, str], device_info: Mapping[str, str]) -> str:
    return f"numba {packages['numba']}" if "numba" in packages else f"numpy {packages.get('numpy', '')}"


# In `auto` order: the first usable one is what `auto` means for built-in workloads.
BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec(
        name="metal",
        title="Metal",
        module="harness.devices.backends.metal",
        extra="metal",
        libraries=("mlx",),
        library_pin=_metal_pin,
        default_config=lambda gpu: "m-series.yaml",
        hosts_commands=lambda found: found.apple_silicon,
        ray_worker=RayWorker("Apple GPUs", None, {"num_cpus": 0}),  # one Apple GPU per machine
        array_ops="harness.measure.workloads.arrays:MlxOps",
        mlxcel=MlxcelCap("FUSED_MOE_MAX_DFF_METAL", 4096, 80),
        device_class=_metal_class,
        device_missing=_metal_missing,
    ),
    BackendSpec(
        name="cuda",
        title="CUDA",
        module="harness.devices.backends.cuda",
        extra="cuda",
        libraries=("cupy",),
        library_pin=_cuda_pin,
        default_config=lambda gpu: "gb10.yaml" if "GB10" in gpu.upper() else "h200.yaml",
        hosts_commands=lambda found: bool(found.gpu),
        ray_worker=RayWorker("GPUs", "GPU", {"num_gpus": 1, "num_cpus": 0}),
        array_ops="harness.measure.workloads.arrays:CupyOps",
        mlxcel=MlxcelCap("FUSED_MOE_MAX_DFF_CUDA", 8192, 101),
        install_modules=("cupy_backends",),
        device_class=_cuda_class,
        device_missing=_cuda_missing,
    ),
    # mlxcel's ROCm backend (gfx1151, PR #2098): command workloads only (moecal has no HIP kernels of its own).
    # fused_moe_max_dff_from picks the CUDA constant whenever Metal is absent, so ROCm inherits 8192, never swept
    # (its SGY default of 2 is the knob table's, harness.config.knobs).
    BackendSpec(
        name="rocm",
        title="ROCm",
        module="harness.devices.backends.rocm",
        extra="rocm",
        libraries=(),
        library_pin=_rocm_pin,
        default_config=lambda gpu: "cpu-smoke.yaml",
        hosts_commands=rocm_device_present,
        ray_worker=RayWorker("AMD GPUs", "GPU", {"num_gpus": 1, "num_cpus": 0}),
        mlxcel=MlxcelCap("FUSED_MOE_MAX_DFF_CUDA", 8192, 101, shared_with="cuda"),
        device_class=_rocm_class,
        device_missing=lambda meta: None,  # a GPU backend, but only the run's own flag says its device was absent
    ),
    BackendSpec(
        name="cpu",
        title="CPU",
        module="harness.devices.backends.cpu",
        extra="cpu",
        libraries=("numba", "numpy"),
        library_pin=_cpu_pin,
        default_config=lambda gpu: "cpu-smoke.yaml",
        hosts_commands=lambda found: True,
        ray_worker=RayWorker("CPU cores", "CPU", {"num_cpus": 1}),  # workers share the cores' memory bandwidth
        default_dtype="float32",  # MLX CPU low-precision quantized matmuls are inaccurate; the kernels accumulate f32
        emulates_half=True,
        install_modules=("mlx",),
        plan_facts="harness.devices.backends.cpu_host:CpuHost",  # numba need only be installed, not imported
    ),
)
BACKEND_NAMES = tuple(spec.name for spec in BACKENDS)
_SPECS = {spec.name: spec for spec in BACKENDS}


def backend_spec(name: str) -> BackendSpec:
    """The registry entry of a backend name (not `auto`: resolve it first)."""
    if name not in _SPECS:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    return _SPECS[name]


def known_backend(name: object) -> BackendSpec | None:
    """The registry entry of a recorded backend name; None for a name no entry knows (imported or older data)."""
    return _SPECS.get(str(name))


def mlxcel_caps() -> dict[str, MlxcelCap]:
    """backend -> mlxcel's cap for it, for the backends mlxcel has one for."""
    return {s.name: s.mlxcel for s in BACKENDS if s.mlxcel is not None}
