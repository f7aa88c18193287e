"""Defaults per device class (harness.output.defaults.device_defaults): the class of a device, the markdown table with
the commits a cap was measured under, and the Rust match arms patched into an mlxcel tree. Runs are SYNTHETIC
(tests/support/synthetic_sweeps.py), the tree a FIXTURE shaped like mlxcel's (tests/output/test_mlxcel_outputs.py).
"""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from harness.output.defaults.device_defaults import BEGIN, device_class
from harness.output.mlxcel_source import SWITCH_LAYERS
from tests.output.test_mlxcel_outputs import fixture_tree
from tests.support.helpers import cli
from tests.support.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run


@pytest.mark.parametrize(
    ("backend", "device", "provenance", "expected"),
    [
        ("metal", "Apple M3 Max", {}, "metal-m3"),
        ("metal", "Apple M1 Ultra", {}, "metal-m1"),
        ("cuda", "NVIDIA GB10", {}, "cuda-sm121"),
        ("cuda", "NVIDIA H200", {}, "cuda-sm90"),
        ("cuda", "Some New GPU", {"compute_capability": "10.3"}, "cuda-sm103"),
        ("rocm", "AMD_Radeon_8060S_Graphics_gfx1151_ROCm10.0.0_96GB", {}, "rocm-gfx1151"),
        ("cpu", "x86", {}, "cpu-x86"),
        ("cuda", "", {"compute_capability": "12.1"}, "cuda-sm121"),  # no device named, the class recorded
        ("cuda", "", {}, None),  # nothing names the class: no `cuda-` key of the backend alone
    ],
)
def test_device_class(backend, device, provenance, expected):
    assert device_class(backend, device, provenance) == expected


def _run(folder, backend: str, device: str, crossover: float, current: int, build: dict[str, str]):
    parts = []
    for dff, ratio in linear_curve([1792, 4096, 6400, 8192, 10240, 12288, 14336], crossover, 0.03).items():
        one = synthetic_samples({dff: ratio}, rounds=5, noise=0.004, seed=dff, workload="command", backend=backend)
        one["model"], one["device"] = f"model-{dff}", device
        one[["d_model", "n_experts", "top_k", "bits", "group_size"]] = float("nan")
        parts.append(one)
    meta = {**SYNTHETIC_META, "workload": "command", "backend": backend, "device": device, "run_id": folder.name}
    meta.update(current_default=current, **build)
    if not device:  # a run that records no device
        del meta["device"]
    return write_run(folder, pd.concat(parts, ignore_index=True), meta)


def test_defaults_per_device_class_with_commits_and_rust_arms_that_apply_to_the_tree(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    tree = fixture_tree(tmp_path / "mlxcel")
    build = {"mlxcel_commit": "2fcdbe5f", "mlx_commit": "81ba1c6a"}
    metal = _run(tmp_path / "results" / "m3", "metal", "Apple M3 Max", 5000, 4096, build)
    cuda = _run(tmp_path / "results" / "gb10", "cuda", "NVIDIA GB10", 11000, 8192, build)
    done = cli("report", metal, cuda, "--out", tmp_path / "reports", "--mlxcel-src", tree, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (addendum,) = (tmp_path / "reports").glob("*-dff-defaults.md")
    text = addendum.read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `")}
    assert set(rows) == {"metal-m3", "cuda-sm121"}
    for row in rows.values():
        assert "`2fcdbe5f`" in row and "`81ba1c6a`" in row and "not swept: the build's default" in row
        assert "when the MLX pin moves off 81ba1c6a" in row
    assert " | 8 | " in rows["cuda-sm121"]
    (rust,) = (tmp_path / "reports").glob("*-device-defaults.rs")
    block = rust.read_text()
    cap = int(rows["cuda-sm121"].split("|")[3])
    assert f'"cuda-sm121" => Some({cap}),' in block and block.startswith(BEGIN)
    (patch,) = (tmp_path / "reports").glob("*-device-defaults.diff")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "apply", str(patch)], check=True)
    patched = (tree / SWITCH_LAYERS).read_text()
    assert block in patched and "const FUSED_MOE_MAX_DFF_CUDA: i32 = 8192;" in patched
    again = cli("report", metal, cuda, "--out", tmp_path / "again", "--mlxcel-src", tree, cwd=tmp_path)
    assert again.returncode == 0 and not list((tmp_path / "again").glob("*-device-defaults.diff"))  # already there


def test_a_run_that_names_no_device_gets_no_device_class_row_arm_entry_or_replication(tmp_path):
    """Two SYNTHETIC CUDA runs with no device in their provenance once became the class `cuda-unknown device`: a
    table row, a Rust arm and autotune entries keyed by it, and a replicated raise "in" that class. They count for
    the backend's default only, and each is named with what to record."""
    (tmp_path / "pyproject.toml").write_text("")
    build = {"mlxcel_commit": "2fcdbe5f", "mlx_commit": "81ba1c6a"}
    nameless = [_run(tmp_path / "results" / name, "cuda", "", 11000, 8192, build) for name in ("nodev-a", "nodev-b")]
    gb10 = _run(tmp_path / "results" / "gb10", "cuda", "NVIDIA GB10", 11000, 8192, build)
    done = cli("report", *nameless, gb10, "--out", tmp_path / "reports", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "cuda [FUSED_MOE_MAX_DFF_CUDA] (unknown device, NVIDIA GB10): raise 8192 → 10240" in done.stdout
    for name in ("nodev-a", "nodev-b"):
        assert f"no device class: {name} (cuda) records no device: no class row, Rust arm or autotune" in done.stdout
    (addendum,) = (tmp_path / "reports").glob("*-dff-defaults.md")
    text = addendum.read_text()
    rows = {line.split("|")[1].strip(" `") for line in text.splitlines() if line.startswith("| `")}
    assert rows == {"cuda-sm121"}
    assert (
        "Not in this table: nodev-a (cuda) records no device" in text
        and "record its device (meta.json's device; a CSV's" in text
    )
    assert "| cuda | raise | replicated: no (a proposal from nodev-a, nodev-b, gb10; a second session" in text
    (rust,) = (tmp_path / "reports").glob("*-device-defaults.rs")
    assert "unknown" not in rust.read_text() and '"cuda-sm121" => Some(10240),' in rust.read_text()
    (entries,) = (tmp_path / "reports").glob("*-autotune.json")
    keys = [(e["level"], e["device"], e["architecture"]) for e in json.loads(entries.read_text())["entries"]]
    assert keys == [("device", "NVIDIA GB10", "cuda-sm121"), ("architecture", "", "cuda-sm121")]
    checked = cli("check-reports", tmp_path / "reports", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout
