"""The decision's vocabulary: what the policy (harness.policy.Policy) can decide and the words of its questions,
as the literal values the records and the decision JSON carry."""

from __future__ import annotations

from typing import Literal

Action = Literal["keep", "raise", "lower", "set"]  # set: no current default was given, the cap to set from scratch
Move = Literal["raise", "lower"]  # what a keep can have held back
Side = Literal["fused", "fallback"]  # the path a switched point runs, the path a point test asks to win
# drift_not_excluded: points measured in one visit, or in passes of one round (PassCol.ONE_VISIT, ONE_ROUND_PASS)
WithheldWhy = Literal["aa_drift", "unmeasured_gap", "family_disagrees", "drift_not_excluded"]
