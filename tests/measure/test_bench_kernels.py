"""bench-kernels and the timing helper: the rotation rule, a tiny real run, the CSV with provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.shapes import MoeShape
from harness.devices import timing
from harness.devices.backends.cpu import CpuBackend
from harness.devices.kernel_cases import BENCH_D_MODELS, BENCH_DFF_GRID, bench_shapes
from harness.devices.timing import time_calls
from harness.measure.kernel_bench import COLUMNS, MIN_SAMPLE_SECONDS, bench_shape
from harness.measure.workloads.layer import copies_for_cache
from harness.runs.formats import read_frame, read_provenance
from tests.support.helpers import cli, run_cli


class _FakeClock:
    """A perf_counter that moves only when a fake step says so: timings exact and independent of machine load."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.now, self.events = 100.0, events if events is not None else []

    def perf_counter(self) -> float:
        self.events.append("clock")
        return self.now

    def step(self, seconds: float) -> None:
        self.events.append("call")
        self.now += seconds


class _RecordingBackend:
    """Only what time_calls touches: synchronize, recorded in the same event list as the clock and the calls."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def synchronize(self) -> None:
        self.events.append("sync")


def test_time_calls_synchronises_around_the_batch_and_returns_seconds_per_call(monkeypatch) -> None:
    events: list[str] = []
    clock = _FakeClock(events)
    monkeypatch.setattr(timing, "time", clock)
    seconds = time_calls(_RecordingBackend(events), lambda: clock.step(0.003), repeats=7)  # type: ignore[arg-type]
    assert seconds == pytest.approx(0.003, rel=1e-12)  # 7 calls of 3 ms: 3 ms per call
    # queued work is finished before the clock starts, and the batch's own work before it stops
    assert events == ["sync", "clock", *["call"] * 7, "sync", "clock"]
    with pytest.raises(ValueError):
        time_calls(_RecordingBackend([]), lambda: None, repeats=0)  # type: ignore[arg-type]


class _EightMiBCache(CpuBackend):
    def cache_bytes(self) -> int:
        return 8 << 20


def test_bench_rotates_over_the_layer_workloads_copies() -> None:
    """One cache rule: with a 7.5 MiB step and an 8 MiB cache, the copies between two visits must stream ≥ 16 MiB:
    ceil(16 / 7.5) = 3 others, 4 in all (what the layer sweep records); the old bench rule said 3."""
    shape = MoeShape(2048, 1024, 2, 2)  # 7,864,320 bytes a step
    rows = bench_shape(_EightMiBCache(), shape, ["fused"], rounds=1, seed=0, copy_gb_s=20)
    assert rows[0].copies == 4


def test_rotation_streams_at_least_twice_the_cache_between_visits() -> None:
    # by hand: 3·2048·768 4-bit weights = 2 359 296 B, 73 728 groups × (scale + bias) × 4 B = 589 824 B; × top_k 2
    small, big = MoeShape(2048, 768, 8, 2), MoeShape(4096, 14336, 8, 2)
    step, big_step = small.weight_bytes_per_step(), big.weight_bytes_per_step()
    assert step == 5_898_240 and big_step == 220_200_960
    assert copies_for_cache(step, 32 << 20) == 13  # 64 MiB / 5.625 MiB = 11.4: twelve others, thirteen in all
    assert copies_for_cache(step, 3 * step) == 7  # the others stream exactly twice the cache: no copy more
    assert copies_for_cache(step, 3 * step + 1) == 8  # one byte more: one copy more
    assert copies_for_cache(big_step, 32 << 20) == 2  # one step reads 210 MiB, far beyond twice the cache


def test_default_grid_spans_the_catalog() -> None:
    shapes = bench_shapes()
    assert BENCH_D_MODELS == (2048, 4096) and min(BENCH_DFF_GRID) == 768 and max(BENCH_DFF_GRID) == 14336
    assert len(shapes) == len(BENCH_D_MODELS) * len(BENCH_DFF_GRID)


class _TimedStepsBackend(CpuBackend):
    """The CPU backend with its paths replaced by steps that advance a fake clock by known times."""

    STEP_SECONDS = {"fused": 100e-6, "fallback": 250e-6}

    def __init__(self, clock: _FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def paths(self) -> dict:
        return {path: lambda *_, s=seconds: self.clock.step(s) for path, seconds in self.STEP_SECONDS.items()}


def test_bench_shape_times_each_path(monkeypatch) -> None:
    clock = _FakeClock()
    monkeypatch.setattr(timing, "time", clock)
    shape = MoeShape(2048, 1024, 2, 2)  # by hand: 3·2048·1024/2 B packed + 98 304 groups × 8 B, × top_k 2
    assert shape.weight_bytes_per_step() == 7_864_320
    rows = bench_shape(_TimedStepsBackend(clock), shape, ["fused", "fallback"], rounds=3, seed=0, copy_gb_s=20)
    assert [r.path for r in rows] == ["fused", "fallback"] and {r.variant for r in rows} == {"default"}
    expected = {"fused": (100.0, 78.6432), "fallback": (250.0, 31.45728)}  # µs per step, 7 864 320 B / that
    for row in rows:
        us, gb_s = expected[row.path]
        assert (row.us_min, row.us_per_step, row.us_max) == pytest.approx((us, us, us), rel=1e-9)
        assert row.gb_s == pytest.approx(gb_s, rel=1e-9) and row.frac_of_copy == pytest.approx(gb_s / 20, rel=1e-9)
        assert row.copies >= 2 and row.rounds == 3
        # a sample is whole rotations (every copy read equally often), one step count for every path (as the sweep
        # times a point), sized so that the slower path's sample lasts at least MIN_SAMPLE_SECONDS
        assert row.steps_per_sample % row.copies == 0 and row.steps_per_sample == rows[0].steps_per_sample
        slow = expected["fallback"][0] * 1e-6
        assert MIN_SAMPLE_SECONDS <= row.steps_per_sample * slow <= MIN_SAMPLE_SECONDS + row.copies * slow + 1e-12


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
    done = cli("bench-kernels", "--backend", "cpu", "--d-model", "500", "--dff", "256")
    assert done.returncode == 2 and "error:" in done.stderr and "multiple of group_size" in done.stderr
