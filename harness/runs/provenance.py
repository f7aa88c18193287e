"""Machine and software provenance for meta.json and CSV headers (asv keeps machine metadata in its own module too).

Everything here is best effort: a field that cannot be detected is left out rather than guessed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from harness.config import resources

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("moecal", "numpy", "scipy", "pandas", "numba", "mlx", "cupy-cuda13x", "cupy-cuda12x", "cupy")


def _run(argv: list[str], timeout: float = 5.0) -> str:
    """stdout of a small probe command, or '' if it is missing or fails (provenance must never break a sweep)."""
    if not shutil.which(argv[0]):
        return ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def cpu_name() -> str:
    if sys.platform == "darwin":
        return _run(["sysctl", "-n", "machdep.cpu.brand_string"]) or platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_gpu() -> dict[str, str]:
    """GPU name and driver from nvidia-smi (present on CUDA machines even when CuPy is not installed)."""
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if not out:
        return {}
    name, driver, memory = (part.strip() for part in (out.splitlines()[0].split(",") + ["", ""])[:3])
    info = {"gpu": name, "driver": driver, "gpu_memory": memory}
    header = _run(["nvidia-smi"])
    for token in header.split("|"):
        if "CUDA Version" in token:
            info["cuda_driver_api"] = token.split("CUDA Version:")[1].strip()
    return info


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_state() -> tuple[str, bool]:
    """(commit, dirty) of the harness checkout; ('unknown', False) outside one. An installed moecal has no .git
    beside the package: asking git there would report whatever repository the environment sits in."""
    if not (REPO_ROOT / ".git").exists():
        return "unknown", False
    commit = _run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"])
    if not commit:
        return "unknown", False
    status = _run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return commit, bool(status)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# What the measured code is made of: the kernel sources, the backends that compile and launch them, the workloads
# that drive them and the timing helper. A change in any of these can move a throughput; a change elsewhere (the
# statistics, the CLI) cannot.
KERNEL_SUFFIXES = (".cu", ".cuh", ".metal", ".h")  # sources, not the kernels/README.md beside them
HARNESS_SOURCES = (
    "measure/backends/*.py",
    "measure/workloads/*.py",
    "measure/timing.py",
)  # relative to the harness package
# Environment variables that change how kernels are launched (block shapes, thread counts, vectorisation).
LAUNCH_ENV_PREFIXES = ("MOECAL_", "NUMBA_", "OMP_NUM_THREADS", "MLX_", "CUDA_VISIBLE_DEVICES")


def kernel_source_hash() -> str:
    """One hash over every kernel source file and HARNESS_SOURCES (names and bytes), so a result is tied to the
    exact code that produced it and a resumed run can tell whether that code changed in between. Files are named
    relative to their folder (kernels/…, harness/…), so a checkout and an installed wheel hash alike."""
    package = Path(__file__).resolve().parents[1]
    kernels = resources.kernel_dir()
    named = [
        (f"kernels/{p.relative_to(kernels).as_posix()}", p) for p in kernels.rglob("*") if p.suffix in KERNEL_SUFFIXES
    ]
    named += [(f"harness/{p.relative_to(package).as_posix()}", p) for g in HARNESS_SOURCES for p in package.glob(g)]
    digest = hashlib.sha256()
    for name, path in sorted(named):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def launch_settings() -> dict[str, str]:
    """The launch-relevant environment (LAUNCH_ENV_PREFIXES) of this process, sorted."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(LAUNCH_ENV_PREFIXES)}


def library_pin(backend: str, packages: dict[str, str], device_info: dict[str, str]) -> str:
    """The short 'under <library pin>' phrase of an addendum heading (the backend's registered rule)."""
    from harness.config.backend_specs import backend_spec

    return backend_spec(backend).library_pin(packages, device_info)


def collect(backend: str, device_info: dict[str, str] | None = None) -> dict[str, object]:
    """Provenance of this machine for a run on `backend` (device_info comes from the backend when one is live)."""
    device_info = dict(device_info or {})
    commit, dirty = git_state()
    packages = package_versions()
    meta: dict[str, object] = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count() or 0,
        "backend": backend,
    }
    meta.update({k: v for k, v in nvidia_gpu().items() if k not in device_info})
    meta.update(device_info)
    meta["device"] = str(device_info.get("device") or meta.get("gpu") or meta["cpu"])
    meta["packages"] = packages
    meta["library_pin"] = library_pin(backend, packages, device_info)
    meta["harness_commit"] = commit
    meta["harness_dirty"] = dirty
    meta["kernel_source_hash"] = kernel_source_hash()
    meta["launch"] = launch_settings()
    return meta
