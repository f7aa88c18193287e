"""What a run is keyed on beyond its config: the decode loop that timed it, the build of the binary, and the arm
variables of the shell it ran in. Two runs that differ in the decode loop measured different code (mlxcel's ADR 0007
retired CxxGenerator for the batch-native engine, and `mlxcel-bench-decode` now prints which one timed the run), so
`compare`, `check` and `history` refuse to set them side by side unless told to; a change of build or of an arm
variable is named, since comparing builds is what those commands are for.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from harness.runs.provenance_keys import LIBRARY_COMMIT, LIBRARY_VERSION

NOT_PRINTED = "(not printed)"


def run_keys(provenance: Mapping[str, object], samples: pd.DataFrame | None) -> dict[str, str]:
    """decode_path (the `Decode path:` lines of the run's ok rows), build (the binary's commit, else its --version
    line) and arm_env (meta.json `shell_env`, `name=value` sorted)."""
    paths: list[str] = []
    if samples is not None and "decode_path" in samples.columns:
        ok = samples[samples["status"] == "ok"] if "status" in samples.columns else samples
        paths = sorted({p for p in ok["decode_path"].tolist() if isinstance(p, str) and p})  # empty cells: NaN
    env = provenance.get("shell_env") or {}
    return {
        "decode_path": ", ".join(paths) or NOT_PRINTED,
        "build": str(provenance.get(LIBRARY_COMMIT) or provenance.get(LIBRARY_VERSION) or ""),
        "arm_env": " ".join(f"{k}={v}" for k, v in sorted(dict(env).items())) if isinstance(env, Mapping) else "",
    }


def changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Each key that differs, as `what: before → after` (a key unknown on either side is not a change)."""
    names = {"decode_path": "decode path", "build": "build", "arm_env": "arm variables in the shell"}
    out = []
    for key, name in names.items():
        a, b = before.get(key, ""), after.get(key, "")
        if a != b and a not in ("", NOT_PRINTED) and b not in ("", NOT_PRINTED):
            out.append(f"{name}: {a} → {b}")
        elif key == "arm_env" and a != b:
            out.append(f"{name}: {a or '(none)'} → {b or '(none)'}")
    return out


def decode_path_changed(before: Mapping[str, str], after: Mapping[str, str]) -> bool:
    return any(change.startswith("decode path:") for change in changes(before, after))
