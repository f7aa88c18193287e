"""The bandwidth prior (harness.analysis.evidence.physics_prior): bytes per decode token from shapes, GB/s, the
ceiling."""

from __future__ import annotations

import pytest

from harness.analysis.evidence.physics_prior import (
    DecodeShape,
    bytes_per_token,
    device_bandwidth,
    point_physics,
    predicted_crossover,
    stored_bytes,
    whole_model_extras,
)

MIXTRAL = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "num_hidden_layers": 32,
}


def test_mixtral_reads_about_seven_gigabytes_per_token_at_4_bits():
    attention, head = whole_model_extras(MIXTRAL)
    assert attention == 4096 * 128 * (2 * 32 + 2 * 8) and head == 32000 * 4096
    shape = DecodeShape(d_model=4096, dff=14336, top_k=2, layers=32, attention_weights=attention, head_weights=head)
    # 4 bits + a 4-byte scale/bias pair per 64 weights = 4.5 bits per weight, over the top-2 experts only
    weights = 32 * (3 * 4096 * 14336 * 2 + attention) + head
    assert bytes_per_token(shape) == pytest.approx(weights * 4.5 / 8)
    assert 6.5e9 < bytes_per_token(shape) < 7.5e9


def test_mx_formats_carry_one_byte_per_group_and_no_bias():
    assert stored_bytes(64, 4, 32, "mxfp4") == 32 + 2
    assert stored_bytes(64, 4, 64) == 32 + 4


def test_device_names_match_the_most_specific_spec():
    assert device_bandwidth("NVIDIA H100 PCIe")[0] == 2.0e12
    assert device_bandwidth("NVIDIA H200")[0] == 4.8e12
    assert device_bandwidth("Apple M2 Max")[0] == 400e9
    assert device_bandwidth("NVIDIA GB10")[0] == 273e9
    assert device_bandwidth("a toaster") is None


def test_an_arm_above_the_ceiling_is_flagged_and_the_crossover_predicted_where_the_fallback_nears_it():
    shape = DecodeShape(d_model=4096, dff=8192, top_k=2, layers=1)
    size = bytes_per_token(shape)
    bandwidth = 100e9
    fast = point_physics(
        "too fast", 8192, shape, {"fused": 1.2 * bandwidth / size, "fallback": 0.5 * bandwidth / size}, bandwidth
    )
    assert fast.above_ceiling == ["fused"] and fast.fraction["fallback"] == pytest.approx(0.5)
    points = [
        point_physics(str(d), d, shape, {"fallback": f * bandwidth / size}, bandwidth)
        for d, f in ((1024, 0.4), (4096, 0.6), (16384, 1.0))
    ]
    assert 4096 < predicted_crossover(points) < 16384  # 0.8 lies halfway (in log Dff) between 4096 and 16384
    assert predicted_crossover(points) == pytest.approx(8192)
    assert predicted_crossover(points[:2]) is None
