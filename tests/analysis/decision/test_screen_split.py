"""The slowed-runs split of issue 36 deliverable 5 (tests/support/screen_split.py) on SYNTHETIC sweeps: its
counterfactuals rest on a faithful rebuild of the engine's estimate, and its twin differs only in the slowdowns."""

from dataclasses import replace

from tests.support.calibration import PROTOCOL_REGIMES
from tests.support.screen_split import screen_split


def test_the_rebuilt_estimate_reproduces_the_engines_trigger_test():
    split = screen_split(PROTOCOL_REGIMES["sparse step 3%"], 5, 80, seed=3)
    assert split.lowers > 20 and split.slowed_rounds > 0
    assert split.variants[("screen", "own", "inflation")] == split.trigger_test  # the engine's ingredients
    assert split.slowed_dropped <= split.slowed_rounds


def test_without_slowed_runs_the_twin_is_the_sweep_itself():
    regime = replace(PROTOCOL_REGIMES["sparse step 3%"], outlier_rate=0.0)
    split = screen_split(regime, 5, 60, seed=4)
    assert split.slowed_rounds == 0 and split.hit == 0 and split.power == split.clean_power
    # with nothing to screen, the screen and the oracle drop the same (no) runs
    assert split.variants[("screen", "pooled", "inflation")] == split.variants[("oracle", "pooled", "inflation")]
