"""The analysis defaults and limits a command line shows in `--help`: confidence level, practical margin, cap grid,
tolerated regression, the largest cap.

They live in a module that imports nothing so that a command module can use them in its option declarations without
loading what the analysis itself needs (pandas, scipy): `moecal <command> --help` stays fast (tests/test_help.py).
harness.analysis.points.stats, harness.analysis.decision.policy, harness.analysis.comparison.regression and
harness.config.schema use them from here.
"""

from __future__ import annotations

CONFIDENCE = 0.95
MARGIN = 0.01
DEFAULT_GRID = 256  # recommended caps are multiples of this
MAX_REGRESSION = 0.05  # `moecal check`: tolerated drop of an arm's tok/s
MAX_CAP = 2**31 - 1  # caps (current_default, fused_cap, --current-default): what a 32-bit signed reader takes
