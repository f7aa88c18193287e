"""The analysis defaults and limits a command line shows in `--help`: confidence level, practical margin, cap grid,
tolerated regression, the largest cap.

They live in a module that imports nothing so that a command module can use them in its option declarations without
loading what the analysis itself needs (pandas, scipy): `moecal <command> --help` stays fast (tests/test_help.py).
harness.analysis.points.stats, harness.policy, harness.analysis.comparison.regression and harness.config.schema use
them from here.
"""

from __future__ import annotations

from typing import TypeGuard

CONFIDENCE = 0.95
MARGIN = 0.01
DEFAULT_GRID = 256  # recommended caps are multiples of this
MAX_REGRESSION = 0.05  # `moecal check`: tolerated drop of an arm's tok/s
# [low, high) of a confidence level and of a practical margin: a level under 0.5 is no confidence, one of 1 an
# infinite interval; a margin of 0.5 or more calls a path that is half as fast equivalent
CONFIDENCE_RANGE = (0.5, 1.0)
MARGIN_RANGE = (0.0, 0.5)
MAX_CAP = 2**31 - 1  # caps (current_default, fused_cap, --current-default): what a 32-bit signed reader takes


def in_range(value: object, bounds: tuple[float, float]) -> TypeGuard[float]:
    """`value` is a number (not a bool, not NaN) in [low, high): the range check of a confidence or a margin, made
    by harness.policy.Policy's constructor wherever a policy is built (options, meta.json's policy and an older
    until-decided record, a config's `measure:`)."""
    low, high = bounds
    return not isinstance(value, bool) and isinstance(value, int | float) and low <= value < high
