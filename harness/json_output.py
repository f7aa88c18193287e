"""`--json` text that stays fast for a million points.

`json.dumps(obj, indent=1)` cannot use Python's C encoder (it only writes the compact form), and the pure-Python
one took most of `moecal summarize --json` on a 10^5-row mlxcel CSV. Here every top-level field, and every item of
a top-level list, is encoded by the C encoder and put on a line of its own: the same JSON value, still one object
that reads line by line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import TextIO


def json_text(obj: object) -> str:
    """`obj` as JSON: a dict one field per line, a list field one item per line (each item on one line)."""
    return "".join(json_pieces(obj))


def write_json(obj: object, out: TextIO) -> None:
    """json_text(obj) and a newline written to `out` piece by piece: a million points' JSON (1.2 GB) joined into one
    string, then copied again by each concatenation and by the echo, cost `crossover --json` seconds and gigabytes."""
    out.writelines(json_pieces(obj))
    out.write("\n")


def json_pieces(obj: object) -> Iterator[str]:
    """json_text's text in pieces, a list field's item one piece."""
    if not isinstance(obj, dict) or not obj:
        yield json.dumps(obj)
        return
    yield "{\n"
    for at, (key, value) in enumerate(obj.items()):
        yield (",\n" if at else "") + f" {json.dumps(key)}: "
        if isinstance(value, list) and value:
            yield "[\n  "
            for index, item in enumerate(value):
                yield (",\n  " if index else "") + json.dumps(item)
            yield "\n ]"
        else:
            yield json.dumps(value)
    yield "\n}"


def finite(obj: object) -> object:
    """`obj` with every non-finite float (NaN, ±inf) as None: Python's json writes them as NaN / Infinity, which no
    strict JSON reader (jq, JSON.parse, moecal's own) accepts. numpy floats are floats too."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(value) for value in obj]
    return obj
