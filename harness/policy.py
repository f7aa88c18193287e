"""The statistical policy: the settings every decision reads (confidence, margin, cap grid, interpolation) and the
level an until-decided sweep's looks read the decision at, as one frozen value whose constructor is their one
range check.

Why one object, and why here at the bottom of the package: the command line builds it from its options, the
analysis reads it at every step (harness.analysis.decision.pipeline.Options carries it), the sweep's looks read it
at a stricter level (`policy.at(level)`, harness.analysis.rounds.decision_value.StopRule), and meta.json records it
(harness.runs.run_meta). Before, confidence and margin lived in four types and were checked in three places. A value
out of range raises PolicyError: worded as the command-line option it came from, and carrying the field's name, so
that a reader of a file names the file's field instead (harness.runs.run_meta.policy_from_json, the config's
`measure:` in harness.config.schema.Measure).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from harness.errors import InputError
from harness.thresholds import CONFIDENCE, CONFIDENCE_RANGE, DEFAULT_GRID, MARGIN, MARGIN_RANGE, in_range

Interpolation = Literal["linear", "log2"]  # how θ̂ = ln ratio runs between measured Dffs (docs/design.md §7)
INTERPOLATIONS: tuple[Interpolation, ...] = get_args(Interpolation)
# [low, high) of each level, in the order they are checked; the look level may be None (not an until-decided sweep)
LEVEL_RANGES: dict[str, tuple[float, float]] = {
    "confidence": CONFIDENCE_RANGE,
    "margin": MARGIN_RANGE,
    "look_confidence": CONFIDENCE_RANGE,
}


class PolicyError(InputError):
    """A policy value the range check refused, worded as the option `--name` it came from; `name` is the field, so a
    reader of a file can word it by the file's own field."""

    def __init__(self, name: str, value: object, allowed: str):
        super().__init__(f"--{name}", str(value), f"must be {allowed}")
        self.name = name

    def in_file(self, written: object) -> str:
        """The problem worded for a file's field (a config's `measure:`, meta.json's `policy`): the value as the file
        wrote it and the level's range. Only levels come from files; grid and interpolation are options only."""
        low, high = LEVEL_RANGES[self.name]
        return f"{written!r} is not a number in [{low}, {high})"


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What the decision reads besides the points: every interval at `confidence`, a path wins only beyond
    1 ± `margin`, caps are multiples of `grid`, the curve interpolates `interpolation` between points; and
    `look_confidence`, the level an until-decided sweep's looks read the decision at (None: not such a sweep).

    Bad values are bad user input (they come from the options or a file): PolicyError, checked once here. A level
    given as a whole number (JSON's `0`) is kept as the float it means, so a record reads and writes back alike."""

    confidence: float = CONFIDENCE
    margin: float = MARGIN
    grid: int = DEFAULT_GRID
    interpolation: Interpolation = "linear"
    look_confidence: float | None = None

    def __post_init__(self) -> None:
        if self.interpolation not in INTERPOLATIONS:
            raise PolicyError("interpolation", self.interpolation, f"one of {', '.join(INTERPOLATIONS)}")
        if self.grid <= 0:
            raise PolicyError("grid", self.grid, "a positive integer")
        for name, (low, high) in LEVEL_RANGES.items():
            value = getattr(self, name)
            if value is None and name == "look_confidence":
                continue
            if not in_range(value, (low, high)):
                raise PolicyError(name, value, f"in [{low:g}, {high:g})")
            object.__setattr__(self, name, float(value))

    def at(self, confidence: float) -> Policy:
        """The same policy read at another level (an interim look of the until-decided loop, a Bonferroni level)."""
        return replace(self, confidence=confidence)

    def with_look_level(self, level: float) -> Policy:
        """This policy with an until-decided sweep's look level, rounded as meta.json stores it (so the value in
        memory is the one a later reader of the file gets)."""
        return replace(self, look_confidence=round(level, 6))

    def at_look_level(self) -> Policy:
        """The policy read at the level its until-decided looks read (itself when it has none): what an analysis
        after the sweep reads, so that it reports the decision the looks stopped on."""
        return self if self.look_confidence is None else self.at(self.look_confidence)
