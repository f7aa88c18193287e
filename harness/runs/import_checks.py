"""What `moecal import-mlxcel` refuses whatever the CSV layout: a run directory no other command could read, or one
that says less than its CSV did.

Each reader (harness.runs.mlxcel_csv, harness.runs.mlxcel_bench_csv) turns its layout into sample rows; these checks
then hold for every layout, before anything is written: model names are names (never a path that `--models DIR`
would join), every ok row has a finite positive throughput, no run is recorded twice, token counts are whole, the
two arms are two files, and at least one run was measured.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from harness.errors import InputError
from harness.runs.formats import RUN_KEY, run_key
from harness.runs.safe_paths import plain_name_problem


def check_model_name(name: str, source: Path | str, where: str) -> None:
    """A model name read from a CSV names a model, never a folder elsewhere (`../../x`, `/etc`)."""
    problem = plain_name_problem(name)
    if problem:
        raise InputError(str(source), "model", f"{where}: {problem}")


def whole_tokens(value: float, source: Path | str, where: str) -> int:
    """A generated-token count as an int; a fraction would be truncated silently, so it is refused."""
    if not (math.isfinite(value) and value == int(value)):
        raise InputError(str(source), "generated_tokens", f"{where}: {value!r} is not a whole number of tokens")
    return int(value)


def check_distinct_files(fallback: Sequence[Path], fused: Sequence[Path]) -> None:
    """No file serves twice: the same file as both arms would compare a run with itself (ratio 1, "keep")."""
    seen: dict[tuple[int, int], Path] = {}
    for option, paths in (("--fallback", fallback), ("--fused", fused)):
        for path in paths:
            try:
                info = os.stat(path)
            except OSError:
                continue  # the reader reports a missing file with its own message
            identity = (info.st_dev, info.st_ino)
            if identity in seen:
                raise InputError(
                    str(path), option, f"is the same file as {seen[identity]}: each arm and run needs its own"
                )
            seen[identity] = Path(path)


def check_imported(samples: pd.DataFrame, source: Path | str) -> None:
    """The rows an import would write: names, throughputs and runs another command can read, and at least one."""
    for name in samples["model"].astype(str).unique():
        check_model_name(name, source, "a model name")
    ok = samples[samples["status"] == "ok"]
    if ok.empty:
        raise InputError(str(source), "", "no measured run in it (every run NA, skipped or failed): nothing to import")
    tok_s = pd.to_numeric(ok["tok_s"], errors="coerce")
    bad = ~tok_s.map(lambda v: math.isfinite(v) and v > 0)
    if bad.any():
        row = ok[bad].iloc[0]
        raise InputError(
            str(source), "tok_s", f"{row['model']!r} {row['arm']}: {float(tok_s[bad].iloc[0])!r} must be finite and > 0"
        )
    keys = pd.Series(list(map(run_key, ok[RUN_KEY].to_dict("records"))), index=ok.index)
    if keys.duplicated().any():
        row = ok[keys.duplicated()].iloc[0]
        raise InputError(
            str(source),
            "model",
            f"{row['model']!r} {row['arm']} run {int(row['round']) + 1} appears twice: which is the measurement?",
        )
