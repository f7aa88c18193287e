"""The result file formats: samples.csv columns, the point and run keys, `# key: value` provenance headers, reading
and validating a CSV, and writing a file atomically.

Everything that reads a samples.csv goes through `read_samples`, so every command trusts the same rows: anything
it would have to guess about (a short row, a non-number, a non-finite or non-positive throughput of an `ok` run,
the same run recorded twice, two devices in one run) is an InputError naming the file, column and line (exit 2).
How a run directory is written (append, lock, resume, segments) is harness.runs.rundir.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from harness.errors import InputError

SAMPLES_FILE = "samples.csv"  # a run directory's rows (harness.runs.rundir.RunDirectory owns the other files)

# Columns of samples.csv. `tok_s` is the throughput of the run: tokens/s for decode and command workloads,
# layer steps/s for the layer workload (one step = one token through one MoE layer); `seconds` is the timed span
# and `tokens` the tokens (or steps) in it, so µs/step = seconds / tokens * 1e6.
POINT_COLUMNS = [
    "backend",
    "device",
    "workload",
    "model",
    "quant_mode",
    "d_model",
    "dff",
    "n_experts",
    "top_k",
    "bits",
    "group_size",
    "dtype",
]
SAMPLE_COLUMNS = [
    "run_id",
    *POINT_COLUMNS,
    "arm",
    "cap",
    "round",
    "position",
    "tokens",
    "seconds",
    "tok_s",
    "rel_rms",  # relative RMS error of this arm's MoE output vs the float64 reference (first step)
    "tokens_agree",  # decode: greedy tokens on which this arm agrees with the fallback arm
    "dispatch_ok",  # command workloads with a dispatch probe: 1 matched, 0 not, empty when no probe
    "status",  # ok | fail | skip
    "error",
    "timestamp",
    "knobs",  # the launch-knob setting of the run (harness.config.knobs), "" without knobs
    "pass",  # 1 or 2: the pass over the grid the run belongs to (harness.analysis.points.sweep_drift), "" for one pass
    "decode_path",  # command workloads: what the binary's `Decode path:` line said ("" when it prints none)
]
# columns a samples.csv written before they existed lacks: read as "" (and a resumed run keeps its own header)
LATER_COLUMNS = ("knobs", "pass", "decode_path")
# A run is identified by (point, knob setting, arm, round); round -1 marks warm-up rows, which are never written.
RUN_KEY = [*POINT_COLUMNS[2:], "knobs", "arm", "round"]  # backend/device are constant within a run directory
DONE_STATUSES = ("ok", "skip")
# The arm names, defined once. ARMS is the order a sweep runs them in; COMPARED_ARMS the two a decision compares,
# in the order every table and summary column lists them (fallback first, as mlxcel's CSV does).
Arm = Literal["fused", "fallback", "null"]
FUSED: Arm = "fused"
FALLBACK: Arm = "fallback"
NULL: Arm = "null"
ARMS: tuple[Arm, ...] = (FUSED, FALLBACK, NULL)
COMPARED_ARMS: tuple[Arm, Arm] = (FALLBACK, FUSED)
RunStatus = Literal["ok", "fail", "skip"]
STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
TEXT_COLUMNS = ["run_id", "backend", "device", "workload", "model", "quant_mode", "dtype", "arm", "status", "error"]
NUMBER_COLUMNS = ["d_model", "dff", "n_experts", "top_k", "bits", "group_size", "round", "tok_s"]

# A point's identity: its POINT_COLUMNS values as text ("" for missing, 2048.0 → "2048"), so rows read from a CSV
# and rows built in memory compare equal. RunKey is the same for RUN_KEY (a point, an arm, a round).
PointKey = tuple[str, ...]
RunKey = tuple[str, ...]
# a row by column name: a plain mapping, or a frame row's `to_dict()` (whose keys pandas types as Hashable)
Row = Mapping[Any, object]


def key_text(value: object) -> str:
    """One key cell as text: missing → "", integral floats without ".0"."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def point_key(row: Row) -> PointKey:
    return tuple(key_text(row.get(c, "")) for c in POINT_COLUMNS)


def point_keys(frame: pd.DataFrame) -> pd.Series:
    """point_key of every row of a frame with POINT_COLUMNS, aligned with its index."""
    keys: list[PointKey] = [point_key(r) for r in frame[POINT_COLUMNS].to_dict("records")]
    return pd.Series(keys, index=frame.index, dtype=object)


def run_key(row: Row) -> RunKey:
    return tuple(key_text(row.get(c, "")) for c in RUN_KEY)


# --- provenance headers ------------------------------------------------------------------------------------------


def format_provenance(meta: Mapping[str, object]) -> str:
    """`# key: value` lines, the header every CSV we write starts with (flat values only). Keys are one line too:
    a nested key can be a model name (`expect_null.<model>`), and a newline in it would start a line of its own."""
    lines = []
    for key, value in meta.items():
        if isinstance(value, Mapping):
            for sub, subvalue in value.items():
                lines.append(f"# {key}.{_one_line(sub)}: {_one_line(subvalue)}")
        else:
            lines.append(f"# {key}: {_one_line(value)}")
    return "".join(line + "\n" for line in lines)


# every character str.splitlines() breaks at: a reader that splits the text with it would see a new `#` line
_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _one_line(value: object) -> str:
    text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
    return _LINE_BREAKS.sub(" ", text)


# every CSV is read as UTF-8 with an optional byte-order mark: Excel's "CSV UTF-8" starts the file with one, which
# read as plain UTF-8 glues U+FEFF to the first column's name (then "no column model") or hides a `#` header line
ENCODING = "utf-8-sig"


def header_lines(path: Path) -> list[str]:
    """The leading `#` lines of a CSV (without the `#`), the one scanner every reader uses."""
    lines = []
    try:
        with open(path, encoding=ENCODING) as handle:
            for line in handle:
                if not line.startswith("#"):
                    break
                lines.append(line[1:].rstrip("\r\n"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "", f"cannot read: {exc}") from None
    return lines


def csv_columns(path: Path) -> list[str]:
    """The column row of a CSV (the first line after its `#` header); [] for an empty file."""
    skip = len(header_lines(path))
    with open(path, encoding=ENCODING, newline="") as handle:
        lines = itertools.islice(handle, skip, skip + 1)
        return next(csv.reader(lines), [])


def read_provenance(path: Path) -> dict[str, str]:
    """The `# key: value` header of a CSV as a dict (empty when there is none)."""
    out: dict[str, str] = {}
    for line in header_lines(path):
        key, sep, value = line.strip().partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


# --- reading ----------------------------------------------------------------------------------------------------


def read_csv_text(path: Path) -> str:
    """The file's text; unreadable or not UTF-8 → InputError."""
    try:
        return Path(path).read_text(encoding=ENCODING)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), "", f"cannot read: {exc}") from None


def read_frame(path: Path, text: str | None = None) -> pd.DataFrame:
    """A CSV with its `#` header skipped, strings kept as strings; unparseable text is an InputError.

    Only empty cells and `NA` read as missing: pandas' default list also swallows `null`, which is an arm name.
    pandas silently turns leading fields into an index when rows are longer than the header; that is refused.
    """
    text = read_csv_text(path) if text is None else text
    try:
        frame = pd.read_csv(
            io.StringIO(text),
            skiprows=len(header_lines(path)),
            keep_default_na=False,
            na_values=["", "NA"],
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise InputError(str(path), "", f"cannot parse as CSV: {exc}") from None
    if not isinstance(frame.index, pd.RangeIndex):
        raise InputError(str(path), "", "some rows have more fields than the header row")
    for column in frame.select_dtypes(include=["object", "string"]).columns:
        # each distinct value looked at once (a million-row file's model names, its quant modes: one value)
        marked = {v: plain for v in pd.unique(frame[column]) if (plain := sheet_text(v)) is not v}
        if marked:
            frame[column] = frame[column].map(lambda v, marked=marked: marked.get(v, v))
    return frame


def data_line(path: Path, position: int) -> int:
    """1-based file line of data row `position` (after the `#` header and the column row)."""
    return len(header_lines(path)) + 2 + position


def first_bad(path: Path, frame: pd.DataFrame, bad: pd.Series, column: str, problem: str) -> None:
    """InputError for the first row where `bad` holds: `<file>: <column>: line N: <problem>` ({value} = its cell)."""
    if bad.any():
        first = int(bad.to_numpy().argmax())
        value = frame[column].iloc[first]
        value = value.item() if hasattr(value, "item") else value  # numpy scalar → plain number for the message
        raise InputError(str(path), column, f"line {data_line(path, first)}: {problem.format(value=value)}")


def text_column(column: pd.Series) -> pd.Series:
    """A text column with missing cells as "" (an all-empty column is read as floats)."""
    return column.map(lambda value: "" if pd.isna(value) else str(value)).astype(object)


def cell_numbers(cells: pd.Series) -> np.ndarray:
    """Cells as floats, NaN where a cell is not a number: pd.to_numeric(errors="coerce"), with a shortcut for a text
    column that is all "" (a run's positions, passes and probes when it recorded none), which pandas tried to parse
    cell by cell: a second each per ten million rows."""
    values = cells.to_numpy()
    if values.dtype == object and len(values) and (values == "").all():
        return np.full(len(values), np.nan)
    return pd.to_numeric(cells, errors="coerce").to_numpy(float)


def numeric_column(frame: pd.DataFrame, path: Path, column: str, required: pd.Series | None) -> None:
    """Convert a column to numbers in place; a non-number in a `required` row names the line."""
    values = pd.to_numeric(frame[column], errors="coerce")
    if required is not None:
        first_bad(path, frame, required & values.isna(), column, "{value!r} is not a number")
    frame[column] = values


def positive_column(frame: pd.DataFrame, path: Path, column: str, required: pd.Series) -> None:
    """A throughput (or ratio) in a `required` row must be finite and > 0: NaN, inf, 0 and negatives are refused."""
    good = frame[column].map(lambda v: math.isfinite(v) and v > 0)
    first_bad(path, frame, required & ~good, column, "{value!r} must be finite and > 0")


def _complete_text(path: Path) -> str:
    """The file without a torn tail: a last line with no newline is a write a crash cut short, not a row."""
    text = read_csv_text(path)
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return text


def check_field_counts(path: Path, text: str, width: int) -> None:
    """Every data row has exactly one field per column (pandas would pad a short row with NaN). Only the lines
    after the `#` header are parsed as CSV: a quote in a provenance line must not join lines."""
    skip = len(header_lines(path))
    body = "".join(text.splitlines(keepends=True)[skip:])
    if '"' not in body and "\r" not in body:  # nothing quoted, one kind of line end: a line's commas + 1 fields
        # (the csv module built a list of every row's fields: seconds for a million rows)
        for number, line in enumerate(body.split("\n"), start=skip + 1):
            if number > skip + 1 and line and line.count(",") + 1 != width:
                raise InputError(str(path), "", f"line {number}: {line.count(',') + 1} fields, the header has {width}")
        return
    for number, fields in enumerate(csv.reader(io.StringIO(body)), start=skip + 1):
        if number > skip + 1 and fields and len(fields) != width:
            raise InputError(str(path), "", f"line {number}: {len(fields)} fields, the header has {width}")


def read_samples(path: Path) -> pd.DataFrame:
    """samples.csv (or the run directory holding it), validated; text columns as str, NUMBER_COLUMNS as numbers."""
    path = Path(path)
    if path.is_dir():
        path = path / SAMPLES_FILE
    text = _complete_text(path)
    frame = read_frame(path, text)
    missing = [c for c in SAMPLE_COLUMNS if c not in frame.columns and c not in LATER_COLUMNS]
    if missing:
        raise InputError(str(path), "columns", f"not a samples.csv: missing {', '.join(missing)}")
    check_field_counts(path, text, len(frame.columns))
    for column in LATER_COLUMNS:
        if column not in frame.columns:
            frame[column] = ""
    for column in (*TEXT_COLUMNS, *LATER_COLUMNS):  # the later columns are text too
        frame[column] = text_column(frame[column])
    for column, allowed in (("arm", ARMS), ("status", STATUSES)):
        first_bad(path, frame, ~frame[column].isin(allowed), column, "{value!r} is not one of " + ", ".join(allowed))
    ok = frame["status"] == "ok"
    for column in NUMBER_COLUMNS:
        numeric_column(frame, path, column, ok if column in ("dff", "round", "tok_s") else None)
    positive_column(frame, path, "tok_s", ok)
    for column in ("backend", "device"):
        if len(frame):
            problem = "{value!r}: a run holds one " + f"{column}, the first row has {frame[column].iloc[0]!r}"
            first_bad(path, frame, frame[column] != frame[column].iloc[0], column, problem)
    keys = pd.Series(list(map(run_key, frame[RUN_KEY].to_dict("records"))), index=frame.index)
    first_bad(path, frame, ok & keys.where(ok).duplicated(), "round", "this (point, arm, round) is already an ok row")
    return frame


def done_runs(path: Path) -> dict[RunKey, str]:
    """Runs already recorded as ok or skip: RunKey → status; {} without a samples.csv.

    A `skip` row only settles a point that is still skipped; once the point fits (more free memory), its runs are
    measured. Read-only: resume decisions and `--dry-run` must not touch the files."""
    path = Path(path)
    if path.is_dir():
        path = path / SAMPLES_FILE
    if not path.exists():
        return {}
    frame = read_samples(path)
    frame = frame[frame["status"].isin(DONE_STATUSES)]
    done: dict[RunKey, str] = {}
    for row in frame.to_dict("records"):
        key = run_key(row)
        if done.get(key) != "ok":
            done[key] = row["status"]
    return done


# --- writing ----------------------------------------------------------------------------------------------------


# --- spreadsheet-safe cells -------------------------------------------------------------------------------------
# A CSV opened in a spreadsheet runs a text cell that starts with one of these as a formula (`=HYPERLINK(...)` in a
# model name). Every CSV moecal writes prefixes such a text cell with an apostrophe, the spreadsheets' own "this is
# text" mark, and so is a cell that already starts with an apostrophe, so that every reader (read_frame) strips
# exactly one and a name reads back as written. A number ("-1.5") is data in every spreadsheet and stays as it is.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def sheet_cell(value: object) -> object:
    """A cell as written: text that a spreadsheet would run as a formula (or that starts with the escape mark)
    gets a leading apostrophe; anything else is returned unchanged."""
    if isinstance(value, str) and value.startswith((*FORMULA_STARTS, "'")) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def sheet_text(value: object) -> object:
    """Undo sheet_cell on a cell read back. Only an apostrophe before a formula start or another apostrophe is
    moecal's mark; any other leading apostrophe (a file moecal did not write) is kept."""
    if isinstance(value, str) and len(value) > 1 and value[0] == "'" and value[1] in (*FORMULA_STARTS, "'"):
        return value[1:]
    return value


def frame_csv(frame: pd.DataFrame) -> str:
    """A frame as CSV text (no index), its text cells made spreadsheet-safe (sheet_cell): the text pandas' `to_csv`
    writes, made column by column (_column_cells) where every column is of a kind that has a fast form. pandas
    formatted every cell of a million-row, fifty-column summary through one object array (23 s of `summarize`); a
    column here is one list of its cells' text, a constant or empty one a single string. Any other frame (a column
    of another dtype, text cells holding non-text, one column only) goes to pandas."""
    cells = [_column_cells(frame.iloc[:, i]) for i in range(frame.shape[1])]
    if frame.shape[1] < 2 or not all(isinstance(c, str) for c in frame.columns) or any(c is None for c in cells):
        return _pandas_csv(frame)
    merged: list[str | list[str]] = []  # adjacent constant columns joined into one field of the row's join
    for column in cells:
        if isinstance(column, str) and merged and isinstance(merged[-1], str):
            merged[-1] += "," + column
        else:
            merged.append(column)  # type: ignore[arg-type]
    header = ",".join(_csv_cell(name) for name in frame.columns) + "\n"
    if not len(frame):
        return header
    if all(isinstance(c, str) for c in merged):  # every column one value: the same row, len(frame) times
        return header + (",".join(merged) + "\n") * len(frame)  # type: ignore[arg-type]
    fields = [itertools.repeat(c) if isinstance(c, str) else c for c in merged]  # zip ends with the shortest list
    return header + "\n".join(map(",".join, zip(*fields, strict=False))) + "\n"


def _pandas_csv(frame: pd.DataFrame) -> str:
    """frame_csv through pandas' `to_csv`: each distinct text value made spreadsheet-safe once."""
    safe = frame.copy()
    for column in safe.select_dtypes(include=["object", "string"]).columns:
        escaped = {v: cell for v in pd.unique(safe[column]) if (cell := sheet_cell(v)) is not v}
        if escaped:
            safe[column] = safe[column].map(lambda v, escaped=escaped: escaped.get(v, v))
    return safe.to_csv(index=False)


def _column_cells(column: pd.Series) -> str | list[str] | None:
    """One column's cells as `to_csv` writes them (missing → "", a float as its repr, which is numpy's text of a
    float64, booleans True/False, text quoted where the csv module quotes it), or one string when every cell is the
    same; None for a column without a fast form (frame_csv then leaves the frame to pandas). Each distinct value is
    written once where a column repeats its values (pandas hashes them in C); a float column of distinct values,
    or one holding -0.0 (which hashes as 0.0), is written cell by cell."""
    dtype = column.dtype
    if dtype == np.float64 or dtype == np.int64 or dtype == np.bool_:
        values = column.to_numpy()
        write = float.__repr__ if dtype == np.float64 else str
        if dtype == np.float64 and (np.signbit(values) & (values == 0)).any():
            cells = list(map(write, values.tolist()))
            for at in np.flatnonzero(np.isnan(values)).tolist():
                cells[at] = ""
            return cells
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        text = [*map(write, uniques.tolist()), ""]  # code -1 (NaN) takes the last: an empty cell
    elif pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype):
        codes, found = pd.factorize(column, use_na_sentinel=True)
        distinct = np.asarray(found, dtype=object).tolist()  # not cell by cell through the text array
        if set(map(type, distinct)) - {str}:
            return None
        text = [*(_csv_cell(sheet_cell(v)) for v in distinct), ""]  # type: ignore[arg-type]
    else:
        return None
    if not len(codes) or (codes == codes[0]).all():
        return text[codes[0]] if len(codes) else ""
    if len(text) == len(codes) + 1 and (codes == np.arange(len(codes))).all():  # every cell distinct, in order
        return text[:-1]
    spread: list[str] = np.array(text, dtype=object)[codes].tolist()
    return spread


_RARE = re.compile('["\r\n]')


def _csv_cell(value: str) -> str:
    """A text cell as the csv module writes it inside a row (what `to_csv` uses): in quotes when it holds a comma
    (a reason, an outlier list: most of a summary's text); a cell with a quote or a line break (rare) is left to
    the csv module itself, whose rules for those are its own."""
    if _RARE.search(value):
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow([value, ""])
        return buffer.getvalue()[: -len(",\n")]
    return f'"{value}"' if "," in value else value


def csv_line(values: Iterable[object]) -> str:
    """One CSV row, quoted where needed (a comma or newline in a name stays inside its cell), spreadsheet-safe."""
    # None and NaN are a missing value: an empty cell, which every reader reads as missing ("nan" would be text)
    cells = [sheet_cell("" if v is None or (isinstance(v, float) and v != v) else v) for v in values]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    line = buffer.getvalue()
    if line.startswith("#"):  # a row must never read as a comment or header line (a model named "#x"): quote it
        first = str(cells[0])
        line = '"' + first.replace('"', '""') + '"' + line[len(first) :]
    return line


def refuse_link(path: Path) -> None:
    """The one check every writer makes: moecal never writes at a symbolic link, neither through it (the write would
    change a file elsewhere) nor over it (the link the user placed would silently become a file)."""
    if Path(path).is_symlink():
        raise InputError(str(path), "", f"is a symbolic link (to {os.readlink(path)}); moecal never writes through one")


def write_text_atomic(path: Path, text: str) -> Path:
    """Write `text` to `path` so that a reader sees the old file or the new one, never half of one: a temporary file
    beside it (created anew, never through a link), fsync'd, then renamed over it; a link at `path` is refused
    (refuse_link). OSError (read-only folder, disk full) → InputError naming the file."""
    path = Path(path)
    refuse_link(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)  # a stale one of a crashed process; a link planted here is removed, not followed
        with os.fdopen(
            os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666), "w", encoding="utf-8"
        ) as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # the error names `path`, never the temporary file
            tmp.unlink(missing_ok=True)
        raise InputError(str(path), "", f"cannot write: {exc.strerror or exc}") from None
    return path
