"""Machine and software provenance for meta.json and CSV headers (asv keeps machine metadata in its own module too).

Everything here is best effort: a field that cannot be detected is left out rather than guessed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from harness.config import resources
from harness.config.backend_specs import known_backend
from harness.runs.formats import FALLBACK, FUSED
from harness.runs.provenance_keys import BACKEND_DEVICE_MISSING, Provenance

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
    "devices/backends/*.py",
    "measure/workloads/*.py",
    "devices/timing.py",
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


def collect(backend: str, device_info: dict[str, str] | None = None) -> Provenance:
    """Provenance of this machine for a run on `backend` (device_info comes from the backend when one is live)."""
    device_info = dict(device_info or {})
    commit, dirty = git_state()
    packages = package_versions()
    meta: Provenance = {
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


# --- what the addendum heading states, by key ---------------------------------------------------------------------
_ISO_DATE = re.compile(r"(?<!\d)(20\d\d)-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(?!\d)")
_MLX_PIN = re.compile(r"\bMLX(?: pin)?[ :]+`?([0-9a-f]{7,40}|\d+\.\d+(?:\.\d+)?)`?", re.IGNORECASE)
_FORCED = re.compile(r"\b(fallback|fused) side forced with (\w+=\d+)(?: \(([^)]*)\))?", re.IGNORECASE)
# words in a free-text hardware line that name the backend the runs used (mlxcel builds for one GPU API per machine)
_BACKEND_WORDS = (
    ("cuda", re.compile(r"\bCUDA\b|\bsm_\d{2,3}|\bNVIDIA\b|\bDGX\b|\bGB10\b|\b[HB]200\b|\bH100\b|\bA100\b")),
    ("metal", re.compile(r"\bMetal\b|\bApple\b|\bM[1-9] (?:Pro|Max|Ultra)\b|\bM[1-9]\b")),
    ("rocm", re.compile(r"\bROCm\b|\bgfx\d{3,4}\b|\bHIP\b")),
)


def iso_date(text: str) -> str | None:
    """The first yyyy-mm-dd in `text` (a file name, a header line), else None."""
    match = _ISO_DATE.search(text)
    return match.group(0) if match else None


def _statements(lines: list[str]) -> list[str]:
    """Header lines joined into statements: a line that starts in lower case after one that did not end a
    sentence continues it (mlxcel wraps its prose header at ~80 columns)."""
    out: list[str] = []
    for line in (text.strip() for text in lines):
        if out and line[:1].islower() and not out[-1].endswith((".", ";")):
            out[-1] += " " + line
        elif line:
            out.append(line)
    return out


def csv_header_provenance(fields: dict[str, object], lines: list[str], path: Path) -> Provenance:
    """`fields` (a CSV's `# key: value` lines) completed from what mlxcel's published sweeps write in prose
    (`lines`, the header without its `#`): `Host: GB10 (DGX Spark), sm_121, CUDA 13.0. MLX pin e9463bb.` gives
    host, hardware (GPU, architecture, CUDA version), backend and library pin; `Harness: …` the benchmark's
    description; `Fallback side forced with X=1 (…)` how each side was forced; the date comes from the file name
    (`…-2026-07-03.csv`) or a header line. Why here: these CSVs name their machine and pin only in prose, and an
    addendum that says "unknown-host … dated today" for them is false. A lower-case key the file states itself
    (`# host: gb10`, moecal's own export) always wins."""
    out = dict(fields)
    statements = _statements(lines)
    said = {s.partition(":")[0]: s.partition(":")[2].strip() for s in statements if ":" in s[:20]}
    hardware = said.get("Host") or said.get("Hardware") or ""
    text = " ".join(statements)
    if hardware and "host" not in out:
        out["host"] = hardware.split(",")[0].strip().rstrip(".")
    if hardware and "hardware" not in out:  # the machine as the file describes it, up to its first full stop
        out["hardware"] = hardware.split(". ")[0].strip().rstrip(".")
    backend = next((name for name, words in _BACKEND_WORDS if words.search(text)), None)
    if backend and "backend" not in out:
        out["backend"] = backend
    pin = _MLX_PIN.search(text)
    if pin and "library_pin" not in out:
        out["library_pin"] = f"MLX pin {pin.group(1)}" if "pin" in pin.group(0).lower() else f"MLX {pin.group(1)}"
    if said.get("Harness") and "bench_description" not in out:
        out["bench_description"] = said["Harness"].rstrip(".")
    forced = {m.group(1).lower(): m for m in _FORCED.finditer(text)}
    if {FALLBACK, FUSED} <= forced.keys():  # both, or the recorded convention stands
        stated = out.get("arms")
        arms: dict[str, object] = dict(stated) if isinstance(stated, dict) else {}
        for arm, m in forced.items():
            arms[arm] = m.group(2) + (f" ({m.group(3)})" if m.group(3) else "") + ", as the CSV's header states"
        out["arms"] = arms
    date = iso_date(Path(path).name) or iso_date(str(fields.get("date") or "")) or iso_date(text)
    if date and "date" not in out:
        out["date"] = date
    return out


def backend_device_missing(meta: Provenance) -> str | None:
    """For a run labelled with a GPU backend (cuda, metal, rocm): the phrase saying its machine had no such
    device, when the record says so (BACKEND_DEVICE_MISSING) or shows it (a cuda run with no NVIDIA GPU found, a
    metal run not on macOS); None when the device was there or nothing tells. Why: an emulated or misconfigured
    run must not read as a GPU measurement ("Hardware: AMD EPYC" under a cuda heading)."""
    backend = str(meta.get("backend") or "")
    spec = known_backend(backend)
    if spec is None or spec.device_missing is None or meta.get("source_format"):
        return None  # not a GPU backend, or imported data: the label is the file's own statement about its machine
    missing = bool(meta[BACKEND_DEVICE_MISSING]) if BACKEND_DEVICE_MISSING in meta else spec.device_missing(meta)
    if missing is None:
        return None
    return f"labelled {backend}, measured without a {backend} device" if missing else None
