"""Adaptive Dff refinement (harness.measure.refine) on SYNTHETIC sweeps: bisection inside the crossover bracket, on grid
multiples, within the run budget, until the interval is narrow enough; each new Dff the one most likely to change the
decision."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from harness.analysis.decision.decide import stage_families
from harness.analysis.decision.pipeline import Options, analyse_path
from harness.config.schema import Measure
from harness.measure.protocol import Point
from harness.measure.refine import next_dff, refine
from tests.support.synthetic_sweeps import linear_curve, synthetic_samples, write_run

TRUE_CROSSOVER = 7000


@dataclass
class GridSettings:
    dff_grid: list[int]

    def model_copy(self, update: dict) -> GridSettings:
        return replace(self, **update)


class SyntheticLayerWorkload:
    """Just what refine needs: `point_at` (one synthetic shape, the family of every template)."""

    kind = "layer"

    def __init__(self, dffs: list[int]):
        self.settings = GridSettings(dffs)

    def layer_points(self) -> list[Point]:
        keys = synthetic_samples({d: 1.0 for d in self.settings.dff_grid}, rounds=1)
        return [
            Point(key=row.to_dict(), caps={"fused": "", "fallback": ""}, label=f"d{row['dff']}")
            for _, row in keys.drop_duplicates("dff")[["backend", "device", "workload", "model", "quant_mode",
                                                          "d_model", "dff", "n_experts", "top_k", "bits",
                                                          "group_size", "dtype"]].iterrows()
        ]  # fmt: skip

    def point_at(self, template: Point, dff: int) -> Point | None:
        return SyntheticLayerWorkload([dff]).layer_points()[0]


def _sweep(tmp_path, dffs, budget, target=0.05):
    run_dir = tmp_path / "run"
    measured = [synthetic_samples(linear_curve(dffs, TRUE_CROSSOVER), rounds=5, noise=0.01, seed=1)]
    write_run(run_dir, measured[0])
    workload = SyntheticLayerWorkload(dffs)
    points = workload.layer_points()

    def measure(point: Point) -> int:
        dff = int(point.key["dff"])
        new = synthetic_samples(linear_curve([dff], TRUE_CROSSOVER), rounds=5, noise=0.01, seed=dff)
        measured.append(new)
        write_run(run_dir, pd.concat(measured, ignore_index=True))
        return len(new)

    settings = Measure(rounds=5, refine_budget_runs=budget, target_crossover_width=target)
    spent = refine(run_dir, workload, points, measure, settings, current_default=4096)
    return run_dir, points, spent


def test_refinement_splits_the_bracket_on_grid_multiples_within_the_budget(tmp_path):
    before = analyse_path(_sweep(tmp_path / "none", [2048, 12288], budget=0)[0]).result.crossover
    run_dir, points, spent = _sweep(tmp_path / "refined", [2048, 12288], budget=40)
    added = [int(p.key["dff"]) for p in points[2:]]
    # by value, not bisection: the quarter point 4608 lies just above the cap 4096, so a raise turns on it (the
    # middle, 7168, would only narrow the crossover)
    assert added[0] == 4608
    # 4608 settles the raise; the next points close in on the crossing until its bracket is one grid step wide and
    # cannot split (6656 | 6912), which ends the refinement inside the budget
    assert all(d % 256 == 0 for d in added) and 3 <= len(added) <= 4 and spent == 10 * len(added) <= 40
    after = analyse_path(run_dir, Options(current_default=4096)).result.crossover
    # two far-apart points: the straight line between them is a guess, so the interval is their whole bracket
    # (it holds the truth, but says little); bisection narrows it with measured points
    assert (before.ci_low, before.ci_high) == (2048, 12288) and before.gap == (2048, 12288)
    assert abs(after.dff - TRUE_CROSSOVER) < 0.5 * abs(before.dff - TRUE_CROSSOVER)
    low, high = after.crossings[0].between
    # one of the points went to the decision (4608, which settles the raise); the others narrowed the crossing's
    # bracket to a single grid step
    assert high - low <= 256
    decision = analyse_path(run_dir, Options(current_default=4096)).result.decision
    assert (decision.action, decision.recommended_cap) == ("raise", 4608)


def test_refinement_stops_once_the_interval_is_narrow_enough(tmp_path):
    _, points, spent = _sweep(tmp_path, [2048, 12288], budget=1000, target=0.2)
    assert 0 < spent < 1000 and len(points) < 10


def test_the_bandwidth_prior_s_predicted_crossover_is_a_candidate_by_value(tmp_path):
    run_dir = _sweep(tmp_path, [2048, 12288], budget=0)[0]
    analysis = analyse_path(run_dir, Options(current_default=4096))
    staged = stage_families(analysis.summary)
    family = analysis.result.families[0]

    def decide(curves):  # a stand-in engine: only a point measured at 9984 would change the decision
        return ("raise", 9984) if 9984 in curves[0].curve.dffs else ("keep", None)

    assert next_dff(family, staged, decide, 256, 0.05, 5) == 7168  # no candidate changes it: the midpoint
    assert next_dff(family, staged, decide, 256, 0.05, 5, predicted=10000.0) == 9984  # 10000 on the 256 grid
