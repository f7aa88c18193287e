"""`--json` text that stays fast for a million points.

`json.dumps(obj, indent=1)` cannot use Python's C encoder (it only writes the compact form), and the pure-Python
one took most of `moecal summarize --json` on a 10^5-row mlxcel CSV. Here every top-level field, and every item of
a top-level list, is encoded by the C encoder and put on a line of its own: the same JSON value, still one object
that reads line by line.
"""

from __future__ import annotations

import json
import math


def json_text(obj: object) -> str:
    """`obj` as JSON: a dict one field per line, a list field one item per line (each item on one line)."""
    if not isinstance(obj, dict) or not obj:
        return json.dumps(obj)
    fields = []
    for key, value in obj.items():
        if isinstance(value, list) and value:
            body = "[\n  " + ",\n  ".join(json.dumps(item) for item in value) + "\n ]"
        else:
            body = json.dumps(value)
        fields.append(f" {json.dumps(key)}: {body}")
    return "{\n" + ",\n".join(fields) + "\n}"


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
