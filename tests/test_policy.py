"""The one policy value (harness.policy.Policy): its constructor is the one range check of confidence, margin, grid,
interpolation and the look level; the analysis options carry it (no copies of its fields) and read back from the
record a result keeps beside it. Nothing is measured here."""

from __future__ import annotations

import pytest

from harness.analysis.decision.pipeline import Options
from harness.errors import InputError
from harness.policy import Policy, PolicyError


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"margin": 0.5}, "--margin: 0.5: must be in [0, 0.5)"),
        ({"grid": 0}, "--grid: 0: must be a positive integer"),
        ({"confidence": 1.0}, "--confidence: 1.0: must be in [0.5, 1)"),
        ({"interpolation": "cubic"}, "--interpolation: cubic: must be one of linear, log2"),
        ({"look_confidence": 0.4}, "--look_confidence: 0.4: must be in [0.5, 1)"),
        ({"confidence": True}, "--confidence: True: must be in [0.5, 1)"),
    ],
)
def test_a_policy_is_checked_once_where_it_is_built(settings, message):
    with pytest.raises(PolicyError) as raised:
        Policy(**settings)
    assert str(raised.value) == message and raised.value.name == next(iter(settings))


def test_the_look_level_is_kept_as_meta_json_stores_it_and_read_only_when_asked():
    policy = Policy(confidence=0.9, margin=0)  # JSON's 0: the float it means, so a record writes back alike
    assert (policy.margin, type(policy.margin)) == (0.0, float)
    looked = policy.with_look_level(1 - 0.1 / 3)
    assert looked.look_confidence == 0.966667 and looked.confidence == 0.9
    assert looked.at_look_level() == Policy(confidence=0.966667, margin=0.0, look_confidence=0.966667)
    assert policy.at_look_level() is policy  # no look level: the policy as it is
    with pytest.raises(TypeError):
        Policy(0.9, 0.01)  # type: ignore[misc]  # a record built by keyword only


def test_the_options_carry_the_policy_and_read_back_from_their_record():
    options = Options(policy=Policy(confidence=0.9, grid=512), excludes={"m": "why"}, current_default=4096)
    record = {**options.settings(), "current_default": 4096}
    assert record["confidence"] == 0.9 and record["grid"] == 512 and "policy" not in record
    assert Options.from_settings(record) == options
    with pytest.raises(TypeError):
        Options.from_settings({**record, "look_confidence": 0.99})  # not a setting a record keeps
    with pytest.raises(TypeError):
        Options.from_settings(["confidence"])
    with pytest.raises(InputError, match="--confidence: 1.5"):
        Options.from_settings({**record, "confidence": 1.5})
