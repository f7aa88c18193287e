"""Durations as people write them (`--budget 15m`, `budget: 1h30m`, `900`): seconds as a float."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(h|m|s)?", re.IGNORECASE)
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}


def parse_duration(text: str) -> float:
    """'90s', '15m', '1h30m', '2.5h', '900' (seconds) → seconds > 0; ValueError names what was expected."""
    value = str(text).strip().replace(" ", "")
    total, position = 0.0, 0
    for match in _PART.finditer(value):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT[(match.group(2) or "").lower()]
        position = match.end()
    if not value or position != len(value) or total <= 0:
        raise ValueError(f"{text!r} is not a duration: expected e.g. 900, 90s, 15m, 1h30m (> 0)")
    return total
