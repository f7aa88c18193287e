"""The measurement loop on its own, with a tiny in-test workload (SYNTHETIC outcomes: nothing is timed)."""

from __future__ import annotations

from harness.measure.protocol import Point, RoundSchedule, RunOutcome, arm_order, measure_point
from harness.runs.formats import read_samples
from harness.runs.rundir import SampleWriter


class CountingWorkload:
    """Returns fixed synthetic outcomes and counts runs per path."""

    kind = "synthetic"

    def __init__(self) -> None:
        self.runs: list[str] = []

    def open(self, point: Point) -> CountingWorkload:
        return self

    def run(self, path: str) -> RunOutcome:
        self.runs.append(path)
        return RunOutcome(tokens=1, seconds=0.01, tok_s=100.0)

    def close(self) -> None:
        """Nothing to release."""


def _point(skip_reason: str = "") -> Point:
    key = {"backend": "cpu", "device": "d", "workload": "layer", "model": "m", "dff": 512, "d_model": 64}
    return Point(key=key, caps={"fused": "", "fallback": ""}, label="m", skip_reason=skip_reason)


def test_rotation_alternates_which_arm_goes_first():
    assert [arm_order(["a", "b"], r, "rotate", 0, "p") for r in range(3)] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert arm_order(["a", "b", "c"], 1, "fixed", 0, "p") == ["a", "b", "c"]
    assert sorted(arm_order(["a", "b", "c"], 5, "random", 0, "p")) == ["a", "b", "c"]


def test_a_point_skipped_once_is_measured_in_full_when_it_fits_later(tmp_path):
    plan = RoundSchedule(rounds=2, warmup_runs=0, order="rotate", seed=0)
    workload = CountingWorkload()
    with SampleWriter(tmp_path, {"backend": "cpu"}) as writer:
        assert measure_point(workload, _point("needs 2 GiB, 1 GiB free"), plan, writer, "r", writer.done_keys(), print)
        assert measure_point(workload, _point("still too big"), plan, writer, "r", writer.done_keys(), print) == 0
        assert measure_point(workload, _point(), plan, writer, "r", writer.done_keys(), print) == 4
    samples = read_samples(tmp_path)
    ok = samples[samples["status"] == "ok"]
    assert sorted(zip(ok["arm"], ok["round"], strict=True)) == [
        ("fallback", 0),
        ("fallback", 1),
        ("fused", 0),
        ("fused", 1),
    ]
    assert (samples["status"] == "skip").sum() == 2
