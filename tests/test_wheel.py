"""moecal installed from its wheel works from any directory (issue 14), and the analysis commands need no backend.

The module fixture builds the sdist from a copy of the sources (so the checkout gets no build/ or egg-info), builds
the wheel from that sdist with pip — both offline, with the test environment's setuptools — installs it with
--no-deps into a fresh virtualenv that sees the test environment's site-packages through a .pth file (its
dependencies, never its harness: PYTHONPATH is dropped), and the tests run its `moecal` script, each command in an
empty temporary directory.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import PIPE

import pytest
import yaml

import harness
from tests.support.helpers import REPO
from tests.support.synthetic_sweeps import DESIGN_EXAMPLE_CSV

BUILD_INPUTS = ("pyproject.toml", "README.md", "harness", "kernels", "configs")
KERNEL_SUFFIXES = (".cu", ".cuh", ".h", ".metal")  # those provenance.kernel_source_hash covers
BACKEND_LIBRARIES = ("mlx", "numba", "llvmlite", "cupy", "cupyx", "cupy_backends")


def packaged_files() -> list[str]:
    """Every file the tool reads at run time, by its repository path (kernels/…, configs/…)."""
    kernels = [p for p in (REPO / "kernels").rglob("*") if p.suffix in KERNEL_SUFFIXES]
    configs = list((REPO / "configs").glob("*.yaml"))
    return sorted(p.relative_to(REPO).as_posix() for p in kernels + configs)


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@dataclass(frozen=True)
class Installed:
    sdist: Path
    wheel: Path
    python: Path  # the fresh virtualenv's interpreter
    env: dict[str, str]  # the test environment's, less PYTHONPATH/PYTHONHOME


# What the tests run with the installed `moecal` script, each in its own empty directory outside the checkout.
SMALL_SHAPE = "d256-f256-e4-k2-q4g64-float32"
OUTSIDE_COMMANDS = {
    "version": ["--version"],
    "presets": ["presets"],
    "plan": ["plan", "cpu-smoke"],
    "sweep": ["sweep", "--dry-run"],
    "verify": ["verify", "--backend", "cpu", "--shapes", SMALL_SHAPE],
    "crossover": ["crossover", "sweep.csv", "--current-default", "8192"],
}


@dataclass(frozen=True)
class Outside:
    """One command started in `workdir`; result() waits for it."""

    workdir: Path
    process: subprocess.Popen

    def result(self) -> subprocess.CompletedProcess:
        stdout, stderr = self.process.communicate(timeout=300)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    source, dist, venv = (root / name for name in ("source", "dist", "venv"))
    source.mkdir()
    for name in BUILD_INPUTS:
        src = REPO / name
        if src.is_dir():  # symlinks=True keeps harness/data's links, so the build copies the files behind them
            shutil.copytree(src, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, source / name)
    build_sdist = "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])"
    done = _run([sys.executable, "-c", build_sdist, dist], source)
    assert done.returncode == 0, done.stderr
    (sdist,) = dist.glob("moecal-*.tar.gz")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    done = _run([*pip_wheel, sdist, "-w", dist], root)
    assert done.returncode == 0, done.stderr
    (wheel,) = dist.glob("moecal-*.whl")
    done = _run([sys.executable, "-m", "venv", "--without-pip", venv], root)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip()
    # Plain directory lines: the test environment's own .pth files (its editable moecal) are not processed.
    (Path(purelib) / "test-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # Wide enough that rich never wraps a line the tests read (long temporary paths included).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")} | {"COLUMNS": "1000"}
    # --ignore-installed: pip sees the test environment's moecal through the .pth and must not try to replace it.
    pip_install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed"]
    done = _run([*pip_install, wheel], root, env)
    assert done.returncode == 0, done.stderr
    return Installed(sdist, wheel, python, env)


@pytest.fixture(scope="module")
def outside(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outside]]:
    """Every command of OUTSIDE_COMMANDS started at once: they are independent, and side by side they take about
    as long as the slowest (verify's JIT compile) instead of their sum."""
    started = {}
    for name, args in OUTSIDE_COMMANDS.items():
        workdir = tmp_path_factory.mktemp(f"outside-{name}")
        if name == "crossover":
            (workdir / "sweep.csv").write_text(DESIGN_EXAMPLE_CSV)  # docs/design.md §6's example, not a measurement
        argv = [str(installed.python.parent / "moecal"), *args]
        process = subprocess.Popen(argv, cwd=workdir, env=installed.env, stdout=PIPE, stderr=PIPE, text=True)
        started[name] = Outside(workdir, process)
    yield started
    for command in started.values():  # a command whose test did not wait for it
        if command.process.poll() is None:
            command.process.kill()
            command.process.communicate()


def test_harness_comes_from_the_wheel(installed: Installed, tmp_path: Path) -> None:
    done = _run([installed.python, "-c", "import harness; print(harness.__file__)"], tmp_path, installed.env)
    assert done.returncode == 0, done.stderr
    location = Path(done.stdout.strip())
    assert location.is_relative_to(installed.python.parents[1]), location
    assert not location.is_relative_to(REPO), location


def test_sdist_and_wheel_carry_the_catalog_presets_and_kernels(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        in_wheel = {name: wheel.read(name) for name in wheel.namelist() if name.startswith("harness/data/")}
    with tarfile.open(installed.sdist) as sdist:
        prefix = f"{installed.sdist.name.removesuffix('.tar.gz')}/harness/data/"
        in_sdist = {m.name.removeprefix(prefix) for m in sdist.getmembers() if m.isfile() and m.name.startswith(prefix)}
    expected = packaged_files()
    assert sorted(name.removeprefix("harness/data/") for name in in_wheel) == expected
    assert sorted(in_sdist) == expected
    for name in expected:  # the same bytes as the repository's one copy
        assert in_wheel[f"harness/data/{name}"] == (REPO / name).read_bytes(), name


def test_version_outside_a_checkout(outside: dict[str, Outside]) -> None:
    done = outside["version"].result()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"moecal {harness.__version__} (harness commit unknown)"


def test_presets_lists_every_shipped_config(outside: dict[str, Outside]) -> None:
    done = outside["presets"].result()
    assert done.returncode == 0, done.stderr
    listed = [line.split()[:3] for line in done.stdout.split("\n\n")[0].splitlines()]  # name, backend, workload
    expected = []
    for path in sorted((REPO / "configs").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        if path.name != "models.yaml":
            expected.append([path.stem, config["backend"], config["workload"]["kind"]])
    assert listed == expected


def test_plan_a_preset_by_name(outside: dict[str, Outside]) -> None:
    done = outside["plan"].result()
    assert done.returncode == 0, done.stderr
    assert "plan: cpu-smoke (cpu, layer)" in done.stdout
    assert "results → results/" in done.stdout  # under the caller's working directory
    assert list(outside["plan"].workdir.iterdir()) == []  # plan runs nothing and writes nothing


def test_sweep_without_config_uses_the_packaged_preset(installed: Installed, outside: dict[str, Outside]) -> None:
    done = outside["sweep"].result()
    assert done.returncode == 0, done.stderr
    config_line = next(line for line in done.stderr.splitlines() if line.startswith("config: "))
    config = Path(config_line.removeprefix("config: ").split(" (")[0])
    assert config.parent.parts[-3:] == ("harness", "data", "configs")
    assert config.is_relative_to(installed.python.parents[1])
    assert "would write results/" in done.stderr
    assert list(outside["sweep"].workdir.iterdir()) == []


def test_verify_cpu_kernels_from_the_wheel(outside: dict[str, Outside]) -> None:
    done = outside["verify"].result()
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if SMALL_SHAPE in line]
    assert len(rows) == 3 and all(row.rstrip(" │").endswith("ok") for row in rows), done.stdout


def test_crossover_on_a_csv(outside: dict[str, Outside]) -> None:
    done = outside["crossover"].result()
    assert done.returncode == 0, done.stderr
    # the 07-10 GB10 sweep, llama-4-scout read as the A/A point it is
    assert "crossover: Dff ≈ 11905" in done.stdout and "decision: keep" in done.stdout, done.stdout


# Runs the analysis commands in one process in which the backend libraries cannot be imported, as after
# `pip install moecal` without extras, then reports any backend module that got imported anyway.
WITHOUT_BACKENDS = """
import sys
from importlib.abc import MetaPathFinder

BLOCKED = set(sys.argv[1].split(","))


class NotInstalled(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (the test hides it)", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
from harness.cli.app import app

for args in (
    ["import-mlxcel", "sweep.csv", "--out", "run"],
    ["summarize", "run"],
    ["crossover", "sweep.csv"],
    ["report", "run", "--out", "reports"],
    ["check", "--baseline", "sweep.csv", "--current", "run"],
):
    code = app(args, standalone_mode=False)
    assert not code, (args, code)
print("imported:", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
"""


def test_analysis_commands_need_no_backend_library(tmp_path: Path) -> None:
    (tmp_path / "sweep.csv").write_text(DESIGN_EXAMPLE_CSV)  # docs/design.md §6's example, not a measurement
    env = os.environ | {"PYTHONPATH": str(REPO), "COLUMNS": "200"}
    done = _run([sys.executable, "-c", WITHOUT_BACKENDS, ",".join(BACKEND_LIBRARIES)], tmp_path, env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert done.stdout.splitlines()[-1] == "imported: []"
    assert (tmp_path / "run" / "summary.csv").is_file()
    assert len(list((tmp_path / "reports").glob("*.md"))) == 1
