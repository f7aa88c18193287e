"""number_format's one rule for a figure a text or a JSON record may show: a finite real number, numpy's included;
NaN, ±inf, None and anything that is not a number are shown as null / n/a (the JSON writers, the mlxcel CSV export and
the decision's dispatch cells all read it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.number_format import json_exact, json_rounded, ratio


@pytest.mark.parametrize("value", [1.25, 3, np.float32(0.5), np.float64(2.0), np.int64(7)])
def test_a_finite_number_is_kept_as_a_float(value):
    assert json_exact(value) == float(value) and type(json_exact(value)) is float
    assert ratio(value) == f"{float(value):.4f}"


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf, np.float32("nan"), "1.5", "", [1.0]])
def test_anything_else_is_null(value):
    assert json_exact(value) is None and json_rounded(value, 2) is None  # type: ignore[arg-type]
    assert ratio(value) == "n/a"  # type: ignore[arg-type]
