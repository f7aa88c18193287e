"""The analysis defaults every layer shares: the statistics, the crossover and the command signatures.

They live in this import-free module, not in harness.stats or harness.crossover, because the command modules need
them in their signatures when the CLI starts, before (and without) importing numpy and scipy.
"""

from __future__ import annotations

CONFIDENCE = 0.95
MARGIN = 0.01
DEFAULT_GRID = 256  # a recommended cap is a multiple of this
