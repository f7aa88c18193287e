"""mlxcel's scripts/engine_bench_rounds.py JSONL as moecal samples: interleaved rounds of named arms with a null arm.

The script (lablup/mlxcel, ADR 0007's protocol) appends one `{"kind": "header", "model", "bin", "arms",
"prompt_tokens", "max_tokens", "rounds", "host", "time", "sdpa_deterministic"}` line per invocation, then one record
per measurement: the benchmark's `[engine-bench] {…}` JSON (`path`, `prompt_target_len`, `ttft_ms`,
`decode_tok_s`, …) with `arm`, `round` and `started` added. Its null arm repeats an arm under the name `<arm>-null`
(every arm with --null-every-arm). moecal reads the arm named as the fused path, the one named as the fallback, and
`<fallback>-null` as its A/A arm `null`; every other arm is listed as skipped. Each (path, prompt length) is its own
point (`<model>@<path>-pp<N>`, or the model's name alone when the file has one), so depths are never pooled. The run
asks for its margin from the null arm (meta `margin_from_null`), as ADR 0007 sets its threshold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config.schema import DEFAULT_CAP_ENV
from harness.errors import InputError
from harness.runs.formats import FALLBACK, FUSED, NULL
from harness.runs.mlxcel_csv import MlxcelImport, samples_frame
from harness.runs.provenance_keys import Provenance

NULL_SUFFIX = "-null"  # engine_bench_rounds.py's NULL_SUFFIX


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    out = []
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise InputError(str(path), f"line {number}", f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise InputError(str(path), f"line {number}", "not a JSON object")
        out.append((number, value))
    return out


def read_engine_rounds(path: Path, fused_arm: str, fallback_arm: str, dff: int) -> MlxcelImport:
    """The JSONL's records of the two named arms and the fallback's null arm as one run's samples."""
    records = _lines(Path(path))
    headers = [r for _, r in records if r.get("kind") == "header"]
    if not headers:
        raise InputError(str(path), "line 1", 'no engine_bench_rounds.py header record ({"kind": "header", …})')
    header = headers[0]
    models = {str(h.get("model", "")) for h in headers}
    if len(models) != 1:
        raise InputError(str(path), "model", f"the headers name several models ({', '.join(sorted(models))})")
    arms = {fused_arm: FUSED, fallback_arm: FALLBACK, fallback_arm + NULL_SUFFIX: NULL}
    rows: list[dict[str, Any]] = []  # JSON values, checked as they are converted below
    other: set[str] = set()
    for number, record in records:
        if record.get("kind") == "header":
            continue
        arm = str(record.get("arm", ""))
        if arm not in arms:
            other.add(arm)
            continue
        try:
            rows.append(
                {
                    "cell": (str(record["path"]), int(record["prompt_target_len"])),
                    "arm": arms[arm],
                    "round": int(record["round"]),
                    "tok_s": float(record["decode_tok_s"]),
                    "status": "ok",
                }
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(str(path), f"line {number}", f"not an [engine-bench] record: {exc!r}") from None
    found = {r["arm"] for r in rows}
    if not {FUSED, FALLBACK} <= found:
        names = ", ".join(sorted({str(r.get("arm")) for _, r in records if r.get("kind") != "header"}))
        raise InputError(str(path), "arm", f"needs records of both --fused-arm and --fallback-arm (arms: {names})")
    name = Path(str(header.get("model", ""))).name or "model"
    cells = sorted({r["cell"] for r in rows})
    for row in rows:
        loop, depth = row.pop("cell")
        row.update(model=name if len(cells) == 1 else f"{name}@{loop}-pp{depth}", dff=dff, quant_mode="affine")
    provenance: Provenance = {
        "workload": "command",
        "cap_env": DEFAULT_CAP_ENV,
        "arms": {FUSED: fused_arm, FALLBACK: fallback_arm, NULL: fallback_arm + NULL_SUFFIX},
        "host": str(header.get("host", "")),
        "bench_command": str(header.get("bin", "")),
        "max_tokens": header.get("max_tokens", ""),
        "prompt_tokens": header.get("prompt_tokens", ""),
        "sdpa_deterministic": header.get("sdpa_deterministic") or "",
        "source_format": "mlxcel scripts/engine_bench_rounds.py JSONL",
        "source": str(path),
        "margin_from_null": "null" in found,
    }
    if isinstance(header.get("time"), int | float):
        provenance["date"] = pd.Timestamp(header["time"], unit="s").strftime("%Y-%m-%d")
    skipped = [f"arm {a}: neither --fused-arm, --fallback-arm nor its null arm" for a in sorted(other)]
    return MlxcelImport(samples_frame(pd.DataFrame(rows), Path(path).stem, provenance), provenance, skipped)
