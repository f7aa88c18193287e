"""`moecal plan`'s time estimate calibrated by the last run of the config on this machine
(harness/measure/plan_estimate.py).

Input: a copy (in tmp_path) of the stored CPU run results/20261130-cpu-vm-cpu-smoke — real timestamps, read only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.measure.plan_estimate import last_run, run_timing
from harness.runs.formats import read_provenance

STORED_RUN = Path(__file__).resolve().parents[2] / "results" / "20261130-cpu-vm-cpu-smoke"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    shutil.copytree(STORED_RUN, folder / STORED_RUN.name)
    return folder


def test_wall_time_from_start_to_last_row(results: Path) -> None:
    timing = run_timing(results / STORED_RUN.name)
    assert timing.rows == 198
    assert timing.wall_seconds == pytest.approx(81.2, abs=0.1)  # 06:55:31 start → last row at 06:56:52.2
    assert timing.estimate(99) == pytest.approx(timing.wall_seconds / 2)


def test_only_the_same_config_host_backend_device_and_kernels_calibrate(results: Path) -> None:
    keys = ("config_name", "host", "backend", "device", "kernel_source_hash")
    meta = {k: read_provenance(STORED_RUN / "samples.csv")[k] for k in keys}
    assert last_run(results, meta).run_dir.name == STORED_RUN.name
    assert last_run(results, meta, exclude=results / STORED_RUN.name) is None
    assert last_run(results, {**meta, "host": "another-host"}) is None
    assert last_run(results, {**meta, "kernel_source_hash": "0123456789abcdef"}) is None  # other kernel code


def test_a_run_with_too_few_rows_calibrates_nothing(results: Path) -> None:
    samples = results / STORED_RUN.name / "samples.csv"
    lines = samples.read_text().splitlines(keepends=True)
    body_start = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    samples.write_text("".join(lines[: body_start + 1 + 5]))  # header + 5 rows
    assert run_timing(results / STORED_RUN.name) is None
