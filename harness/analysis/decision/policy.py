"""The decision policy: the settings every step of the decision reads (confidence, margin, cap grid, interpolation),
as one frozen value built once from the options and checked there.

Why one object: the engine used to take these as 8-11 loose positional parameters, each step passing them on in its
own order, and the margin was checked in three places. Now the command line (or a simulation) builds one `Policy`,
its constructor checks it, and every step receives the same value; a look at a stricter level is
`policy.at(confidence)`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from harness.errors import InputError
from harness.thresholds import CONFIDENCE, CONFIDENCE_RANGE, DEFAULT_GRID, MARGIN, MARGIN_RANGE, in_range

Interpolation = Literal["linear", "log2"]  # how θ̂ = ln ratio runs between measured Dffs (docs/design.md §7)
INTERPOLATIONS: tuple[Interpolation, ...] = get_args(Interpolation)
# What the policy can decide, and the words of its questions (the values the decision JSON carries):
Action = Literal["keep", "raise", "lower", "set"]  # set: no current default was given, the cap to set from scratch
Move = Literal["raise", "lower"]  # what a keep can have held back
Side = Literal["fused", "fallback"]  # the path a switched point runs, the path a point test asks to win
# drift_not_excluded: points measured in one visit, or in passes of one round (sweep_drift.unchecked_drift)
WithheldWhy = Literal["aa_drift", "unmeasured_gap", "family_disagrees", "drift_not_excluded"]


@dataclass(frozen=True)
class Policy:
    """What the decision reads besides the points: every interval at `confidence`, a path wins only beyond
    1 ± `margin`, caps are multiples of `grid`, the curve interpolates `interpolation` between points.

    Bad values are bad user input (they come from the options): InputError naming the option, checked once here."""

    confidence: float = CONFIDENCE
    margin: float = MARGIN
    grid: int = DEFAULT_GRID
    interpolation: Interpolation = "linear"

    def __post_init__(self) -> None:
        if self.interpolation not in INTERPOLATIONS:
            raise InputError("--interpolation", self.interpolation, f"must be one of {', '.join(INTERPOLATIONS)}")
        if self.grid <= 0:
            raise InputError("--grid", str(self.grid), "must be a positive integer")
        if not in_range(self.margin, MARGIN_RANGE):
            raise InputError("--margin", str(self.margin), "must be in [0, 0.5)")
        if not in_range(self.confidence, CONFIDENCE_RANGE):
            raise InputError("--confidence", str(self.confidence), "must be in [0.5, 1)")

    def at(self, confidence: float) -> Policy:
        """The same policy read at another level (an interim look of the until-decided loop, a Bonferroni level)."""
        return replace(self, confidence=confidence)
