"""How each kind of figure is written, once: the console table, the addendum, the decision's sentences and the
plot all format a quantity through the one function for it.

Why: a figure that appears twice must read the same both times (a reader who sees `[1.0062, 1.0532]` in the
table and `[1.0061, 1.0532]` in the text stops trusting both). That needs two things: one format per quantity
(here), and the same stored number behind both (the sidecar keeps full-precision floats, never pre-rounded ones:
rounding to 5 digits and then formatting to 4 rounds twice and can move the last digit).
"""

from __future__ import annotations

import math
import numbers
from typing import TypeGuard

RATIO_DIGITS = 4  # fused/fallback: 0.01% resolution, finer than any interval moecal has measured
TOK_S_DIGITS = 2  # the tok/s mlxcel's benchmark prints (two decimals)


def _finite(value: object) -> TypeGuard[float]:
    """A finite real number (numpy's included): the one rule for a figure a text or a JSON record may show."""
    return isinstance(value, numbers.Real) and math.isfinite(value)


def json_exact(value: object) -> float | None:
    """A figure as a JSON record stores it: never pre-rounded (the texts format the one stored number); NaN, ±inf,
    None and anything but a number become null."""
    return float(value) if _finite(value) else None


def json_rounded(value: float | None, digits: int) -> float | None:
    """A figure a JSON record stores rounded to `digits` (a record no text formats again); NaN, ±inf and None become
    null."""
    return round(float(value), digits) if _finite(value) else None


def ratio(value: float | None) -> str:
    """A fused/fallback ratio or an interval bound: `1.0358`; `n/a` when there is none."""
    return f"{float(value):.{RATIO_DIGITS}f}" if _finite(value) else "n/a"


def interval(low: float | None, high: float | None) -> str:
    """A ratio interval: `[1.0034, 1.0692]`; `-` when the point has none."""
    if not (_finite(low) and _finite(high)):
        return "-"
    return f"[{ratio(low)}, {ratio(high)}]"


def tok_s(value: float | None) -> str:
    """A throughput (median tok/s or layer steps/s): `53.91`."""
    return f"{float(value):.{TOK_S_DIGITS}f}" if _finite(value) else "n/a"


def dff(value: float) -> str:
    """A Dff, measured or interpolated (a crossing between two points): whole numbers, `7711`."""
    return f"{float(value):.0f}"


def dff_interval(low: float, high: float, smallest: int | None, largest: int | None) -> str:
    """A crossover interval: `[6400, 14336]`, an open end written `<smallest` / `>largest` measured Dff."""
    lo = f"<{smallest}" if low == -math.inf else dff(low)
    hi = f">{largest}" if high == math.inf else dff(high)
    return f"[{lo}, {hi}]"


def percent(value: float) -> str:
    """A share such as the margin or a confidence level: `1.0%`, `95%`, `97.5%` (one decimal only when needed)."""
    text = f"{value:.1%}"
    return text.replace(".0%", "%") if value >= 0.1 else text


def speed_change(value: float) -> str:
    """A throughput ratio as a change: `+0.82%` for 1.0082, `—` when there is none."""
    return f"{float(value) - 1:+.2%}" if _finite(value) else "—"


def speed_change_interval(low: float, high: float) -> str:
    """An interval of throughput ratios as changes: `[+0.60%, +1.04%]`."""
    return f"[{speed_change(low)}, {speed_change(high)}]"
