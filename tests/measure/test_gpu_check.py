"""The prepared GPU session must not waste scarce device time on a typo: rehearse it here on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.helpers import REPO


@pytest.mark.slow  # the whole prepared script in a subprocess (~10-25 s): its point is the real entry points
def test_gpu_check_dry_run_validates_every_stage(tmp_path):
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh"],
        cwd=REPO,
        env={**os.environ, "DRY_RUN": "1", "BACKEND": "cpu", "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "gpu_check.log").read_text()
    stages = ["provenance", "copy-bandwidth", "pytest-cpu", "verify", "ab-default", "pack-ab", "sweep", "summarize",
              "crossover", "report", "pack"]  # fmt: skip
    for stage in stages:
        assert f"  {stage}: planned" in log
    assert "dry run: config check failed" not in log
    assert len(list(tmp_path.iterdir())) <= 8  # the device tool returns at most 8 files


def test_cuda_path_imports_without_mlx():
    """The H200 image has no MLX: everything the CUDA session touches must import without it."""
    code = (
        "import sys; sys.modules['mlx'] = None; sys.modules['mlx.core'] = None\n"
        "import harness.cli.app, harness.measure.sweep_loop, harness.devices.backends.cuda as cuda\n"
        "import harness.measure.workloads.layer, harness.measure.workloads.decode, harness.cli.verify\n"
        "from harness.devices.backends import availability\n"
        "ok, reason = cuda.CudaBackend.availability(); assert isinstance(reason, str) and reason\n"
        "assert availability('cpu')[0], availability('cpu')\n"
        "assert 'mlx.core' not in sys.modules or sys.modules['mlx.core'] is None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
