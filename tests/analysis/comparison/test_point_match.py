"""One rule matches points across runs (harness.analysis.comparison.point_match): the measured cells always, dtype
included; backend and device only for a check against the same machine. Tiny hand-made summaries, no measurement."""

from __future__ import annotations

import pandas as pd

from harness.analysis.comparison.point_match import match_keys, match_points
from harness.runs.formats import POINT_COLUMNS


def _point(**changes: object) -> dict[str, object]:
    row = dict.fromkeys(POINT_COLUMNS, "")
    row.update(backend="cpu", device="vm", workload="layer", model="m", quant_mode="affine", d_model=2048.0)
    row.update(dff=1024.0, n_experts=16.0, top_k=4.0, bits=4.0, group_size=64.0, dtype="float32")
    row.update(changes)
    return row


def test_the_machine_is_the_callers_choice_and_the_dtype_never_is():
    a = pd.DataFrame([_point(), _point(dff=2048.0), _point(dff=4096.0)])
    b = pd.DataFrame([_point(device="gb10", dff=1024), _point(dff=2048.0, dtype="bfloat16"), _point(dff=4096)])
    assert match_points(a, b, same_machine=True) == (
        [(2, 2)],
        list(match_keys(a.iloc[:2], True)),
        match_keys(b[:2], True),
    )
    pairs, only_a, only_b = match_points(a, b, same_machine=False)
    assert pairs == [(0, 0), (2, 2)]  # another device still matches; 2048.0 and 2048 are one Dff
    assert only_a == [match_keys(a, False)[1]] and only_b == [match_keys(b, False)[1]]  # the dtype differs
