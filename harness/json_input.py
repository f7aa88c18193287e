"""Reading a JSON file someone else may have written (config.json, meta.json, verification.json, sidecars) as one
object, with every way it can be malformed turned into an InputError instead of an exception from the parser.

Python's json parser recurses per `[`/`{`, so a file nested a hundred thousand levels deep ends in RecursionError
(a traceback, after seconds); the depth is therefore counted before parsing. NaN, Infinity and numbers beyond a
float (1e400) are refused: no field moecal reads means them, and they would travel into sums and comparisons. So are
integers beyond 64 bits (a 400-digit cap): Python reads them, but the first float() or numpy cast overflows.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from harness.errors import InputError

MAX_NESTING = 64  # YAML and JSON inputs: deeper is no config, and would exhaust the parser's recursion


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


INT_LIMIT = 2**63  # integers moecal writes (caps, rounds, token counts, seconds in ns) all fit a signed 64-bit word


def _bounded(text: str) -> int:
    if len(text.lstrip("-")) > 19 or abs(value := int(text)) >= INT_LIMIT:
        raise ValueError(f"integer {text[:20]}… ({len(text.lstrip('-'))} digits) does not fit in 64 bits")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def nesting(text: str) -> int:
    """The deepest nesting of `[` and `{` outside strings, counted before parsing (json's parser recurses)."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    depth = deepest = 0
    for char in without_strings:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


# a JSON object as parsed: the kind of each value is checked where it is read (a record's reader names what it needs)
JSONObject = dict[str, Any]


def load_json_object(path: Path) -> JSONObject:
    """The JSON object in `path`: finite numbers only (NaN, Infinity, 1e400 refused), nested at most MAX_NESTING
    deep, UTF-8; anything else (unreadable, not JSON, not an object) is an InputError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), "(file)", f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(path), "(file)", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    depth = nesting(text)
    if depth > MAX_NESTING:
        raise InputError(str(path), "(file)", f"nested {depth} levels deep (at most {MAX_NESTING})")
    try:
        data = json.loads(text, parse_float=_finite, parse_int=_bounded, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"line {exc.lineno}", f"invalid JSON: {exc.msg}") from None
    except ValueError as exc:  # a number beyond a float, NaN, Infinity; an integer of more than 4300 digits
        raise InputError(str(path), "(file)", f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "(top level)", "expected a JSON object")
    return data
