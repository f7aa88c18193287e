"""bench-kernels and the timing helper: the rotation rule, a tiny real run, the CSV with provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.backends.cpu import CpuBackend
from harness.bench import COLUMNS, bench_shape
from harness.kernel_cases import BENCH_D_MODELS, BENCH_DFF_GRID, bench_shapes
from harness.results import read_frame, read_provenance
from harness.shapes import MoeShape
from harness.timing import time_calls
from tests.helpers import run_cli


class _CountingBackend:
    """Only what time_calls touches: synchronize, counted."""

    def __init__(self) -> None:
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1


def test_time_calls_synchronises_around_the_batch_and_returns_seconds_per_call() -> None:
    backend, calls = _CountingBackend(), []
    seconds = time_calls(backend, lambda: calls.append(1), repeats=7)  # type: ignore[arg-type]
    assert len(calls) == 7 and backend.syncs == 2 and 0 < seconds < 0.01
    with pytest.raises(ValueError):
        time_calls(backend, lambda: None, repeats=0)  # type: ignore[arg-type]


class _EightMiBCache(CpuBackend):
    def cache_bytes(self) -> int:
        return 8 << 20


def test_bench_rotates_over_the_layer_workloads_copies() -> None:
    """One cache rule: with a 7.5 MiB step and an 8 MiB cache, the copies between two visits must stream ≥ 16 MiB:
    ceil(16 / 7.5) = 3 others, 4 in all (what the layer sweep records); the old bench rule said 3."""
    shape = MoeShape(2048, 1024, 2, 2)  # 7,864,320 bytes a step
    rows = bench_shape(_EightMiBCache(), shape, ["fused"], rounds=1, seed=0, copy_gb_s=20)
    assert rows[0].copies == 4


def test_default_grid_spans_the_catalog() -> None:
    shapes = bench_shapes()
    assert BENCH_D_MODELS == (2048, 4096) and min(BENCH_DFF_GRID) == 768 and max(BENCH_DFF_GRID) == 14336
    assert len(shapes) == len(BENCH_D_MODELS) * len(BENCH_DFF_GRID)


def test_bench_shape_times_each_path() -> None:
    shape = MoeShape(2048, 1024, 2, 2)  # ~8 MB a step: a handful of copies
    rows = bench_shape(CpuBackend(), shape, ["fused", "fallback"], rounds=3, seed=0, copy_gb_s=20)
    assert [r.path for r in rows] == ["fused", "fallback"] and {r.variant for r in rows} == {"default"}
    for row in rows:
        assert row.us_min <= row.us_per_step <= row.us_max and row.copies >= 2 and row.rounds == 3
        assert row.gb_s == pytest.approx(shape.weight_bytes_per_step() / row.us_per_step / 1e3)


def test_bench_kernels_cli_writes_csv_with_provenance(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "bench.csv"
    options = ["--d-model", "2048", "--dff", "768,1024", "--n-experts", "2", "--rounds", "2", "--copy-mib", "16"]
    done = run_cli("bench-kernels", "--backend", "cpu", *options, "--out", out)
    assert done.returncode == 0, done.stderr
    frame = read_frame(out)
    assert list(frame.columns) == COLUMNS
    assert sorted(set(zip(frame["dff"], frame["path"], strict=True))) == [
        (768, "fallback"), (768, "fused"), (1024, "fallback"), (1024, "fused"),
    ]  # fmt: skip
    assert (frame["us_per_step"] > 0).all() and (frame["frac_of_copy"] > 0).all()
    meta = read_provenance(out)
    assert meta["backend"] == "cpu" and "bench-kernels" in meta["command"] and float(meta["copy_gb_s"]) > 0


def test_bench_kernels_rejects_a_bad_grid() -> None:
    done = run_cli("bench-kernels", "--backend", "cpu", "--d-model", "500", "--dff", "256")
    assert done.returncode == 2 and "error:" in done.stderr and "multiple of group_size" in done.stderr
