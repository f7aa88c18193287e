"""Reading what the analysis commands are given: a run directory, a samples.csv, a summary.csv or an mlxcel sweep
CSV — sniffed from the columns, so every command takes any of them. Also writes summary.csv.

Anything unusable becomes an InputError naming the file, the field and the problem (the CLI exits 2), never a
traceback: the check command's exit codes depend on telling "bad input" from "regression".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from harness.errors import InputError
from harness.results import (
    SAMPLE_COLUMNS,
    _header_line_count,
    format_provenance,
    read_csv_with_header,
    read_provenance,
)
from harness.stats import SUMMARY_COLUMNS, VERDICTS

TEXT_COLUMNS = ["run_id", "backend", "device", "workload", "model", "quant_mode", "dtype", "arm", "status", "error"]
NUMBER_COLUMNS = ["d_model", "dff", "n_experts", "top_k", "bits", "group_size", "round", "tok_s"]
ARMS = ("fused", "fallback", "null")
STATUSES = ("ok", "fail", "skip")


class LoadedInput(NamedTuple):
    samples: pd.DataFrame | None
    summary: pd.DataFrame | None
    provenance: dict[str, object]


def load_input(path: str | Path) -> LoadedInput:
    """Samples and/or summary plus provenance (meta.json over the CSV's `#` header) from any supported input."""
    path = Path(path)
    if path.is_dir():
        return _load_run_dir(path)
    if not path.is_file():
        raise InputError(str(path), "", "no such file or directory (expected a run directory or a CSV)")
    from harness import mlxcel  # mlxcel reads its CSV with read_frame from here

    columns = _columns(path)
    if mlxcel.is_mlxcel(columns):
        imported = mlxcel.read_mlxcel(path)
        return LoadedInput(imported.samples, None, imported.provenance)
    # a run directory's meta.json beside its CSV is the fuller provenance
    meta = _read_meta(path.parent) if path.name in ("samples.csv", "summary.csv") else {}
    if set(SAMPLE_COLUMNS) <= set(columns):
        return LoadedInput(_read_samples(path), None, {**_provenance(path), **meta})
    if set(SUMMARY_COLUMNS) <= set(columns):
        return LoadedInput(None, _read_summary(path), {**_provenance(path), **meta})
    raise InputError(
        str(path), "columns", "not a samples.csv, summary.csv or mlxcel sweep CSV (header: " + ",".join(columns) + ")"
    )


def _load_run_dir(path: Path) -> LoadedInput:
    samples_path, summary_path = path / "samples.csv", path / "summary.csv"
    if not samples_path.exists() and not summary_path.exists():
        raise InputError(str(path), "", "a run directory needs samples.csv or summary.csv; neither is there")
    # the same sniffing as for a CSV given directly, so a foreign samples.csv is an InputError, not a KeyError
    return load_input(samples_path if samples_path.exists() else summary_path)


def _columns(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.startswith("#") and line.strip():
                    return [c.strip() for c in line.strip().split(",")]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "", f"cannot read: {exc}") from None
    raise InputError(str(path), "", "empty file: no header row")


def _read_meta(run_dir: Path) -> dict[str, object]:
    meta_path = run_dir / "meta.json"
    if not meta_path.exists():
        return {}
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(str(meta_path), "", f"not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise InputError(str(meta_path), "", "expected a JSON object")
    return meta


def _provenance(path: Path) -> dict[str, object]:
    """The `# key: value` header, with `packages.x` lines folded back into a `packages` dict like meta.json's."""
    out: dict[str, object] = {}
    for key, value in read_provenance(path).items():
        group, dot, sub = key.partition(".")
        if dot:
            out.setdefault(group, {})
            if isinstance(out[group], dict):
                out[group][sub] = value
        else:
            out[key] = value
    return out


def read_frame(path: Path) -> pd.DataFrame:
    """A CSV with its `#` header skipped; unparseable text is an InputError, not a traceback.

    pandas silently turns leading fields into an index when rows are longer than the header; that is refused.
    """
    try:
        frame = read_csv_with_header(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(str(path), "", f"cannot parse as CSV: {exc}") from None
    if not isinstance(frame.index, pd.RangeIndex):
        raise InputError(str(path), "", "some rows have more fields than the header row")
    return frame


def _numeric(frame: pd.DataFrame, path: Path, column: str, required: pd.Series) -> None:
    """Convert a column to numbers in place; a non-number where one is required names the line."""
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = required & values.isna()
    if bad.any():
        first = bad.to_numpy().argmax()
        line = _data_line(path, first)
        raise InputError(str(path), column, f"line {line}: {frame[column].iloc[first]!r} is not a number")
    frame[column] = values


def _data_line(path: Path, position: int) -> int:
    """1-based file line of data row `position` (after the `#` header and the column row)."""
    return _header_line_count(path) + 2 + position


def _text(column: pd.Series) -> pd.Series:
    """A text column with missing cells as "" (an all-empty column is read as floats)."""
    return column.map(lambda value: "" if pd.isna(value) else str(value)).astype(object)


def _read_samples(path: Path) -> pd.DataFrame:
    frame = read_frame(path)
    for column in TEXT_COLUMNS:
        frame[column] = _text(frame[column])
    for column, allowed in (("arm", ARMS), ("status", STATUSES)):
        bad = ~frame[column].isin(allowed)
        if bad.any():
            first = bad.to_numpy().argmax()
            problem = (
                f"line {_data_line(path, first)}: {frame[column].iloc[first]!r} is not one of {', '.join(allowed)}"
            )
            raise InputError(str(path), column, problem)
    ok = frame["status"] == "ok"
    for column in NUMBER_COLUMNS:
        _numeric(frame, path, column, ok if column in ("dff", "round", "tok_s") else pd.Series(False, frame.index))
    positive = ok & ~(frame["tok_s"] > 0)
    if positive.any():
        first = positive.to_numpy().argmax()
        raise InputError(str(path), "tok_s", f"line {_data_line(path, first)}: throughput must be > 0")
    return frame


def _read_summary(path: Path) -> pd.DataFrame:
    frame = read_frame(path)
    for column in ("backend", "device", "workload", "model", "quant_mode", "dtype", "verdict", "reason"):
        frame[column] = _text(frame[column])
    valid = frame["verdict"] != "null"
    for column in ("dff", "ratio", "fallback_tok_s", "fused_tok_s"):
        _numeric(frame, path, column, valid if column != "dff" else pd.Series(True, frame.index))
    for column in ("d_model", "n_experts", "top_k", "bits", "group_size", "ci_low", "ci_high"):
        _numeric(frame, path, column, pd.Series(False, frame.index))
    bad = ~frame["verdict"].isin(VERDICTS)
    if bad.any():
        first = bad.to_numpy().argmax()
        raise InputError(str(path), "verdict", f"line {_data_line(path, first)}: unknown verdict")
    frame["unstable"] = frame["unstable"].astype(str).str.lower().isin(("true", "1"))
    return frame


def write_summary_csv(summary: pd.DataFrame, path: Path, provenance: dict[str, object]) -> Path:
    """summary.csv with the provenance header (the settings that produced it included)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".csv.tmp")
    tmp.write_text(format_provenance(provenance) + summary.to_csv(index=False), encoding="utf-8")
    tmp.replace(path)
    return path
