"""Result files: samples.csv (one row per timed run, appended atomically), meta.json, provenance headers.

A sweep writes `results/<run-id>/samples.csv` row by row. Each row is one `os.write` of a complete line on an
O_APPEND descriptor followed by fsync, so a SIGKILL loses at most the run in flight and never leaves half a line
the reader cannot skip; a torn tail (no trailing newline) from a crash inside the kernel call is truncated when the
directory is reopened. Re-running into the same directory resumes: rows whose (point, arm, round) already exist
with status ok/skip are not run again.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

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
]
# A run is identified by (point, arm, round); round -1 marks warm-up rows, which are never written.
RUN_KEY = [*POINT_COLUMNS[2:], "arm", "round"]  # backend/device are constant within a run directory
DONE_STATUSES = ("ok", "skip")


def format_provenance(meta: Mapping[str, object]) -> str:
    """`# key: value` lines, the header every CSV we write starts with (flat values only)."""
    lines = []
    for key, value in meta.items():
        if isinstance(value, Mapping):
            for sub, subvalue in value.items():
                lines.append(f"# {key}.{sub}: {_one_line(subvalue)}")
        else:
            lines.append(f"# {key}: {_one_line(value)}")
    return "".join(line + "\n" for line in lines)


def _one_line(value: object) -> str:
    text = json.dumps(value) if isinstance(value, list | tuple) else str(value)
    return text.replace("\n", " ").replace("\r", " ")


def read_provenance(path: Path) -> dict[str, str]:
    """The `# key: value` header of a CSV as a dict (empty when there is none)."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.startswith("#"):
                break
            key, sep, value = line[1:].strip().partition(":")
            if sep:
                out[key.strip()] = value.strip()
    return out


def read_csv_with_header(path: Path) -> pd.DataFrame:
    """A CSV with optional `#` provenance lines, as a DataFrame (strings kept as strings, NA kept as NaN).

    Only empty cells and `NA` read as missing: pandas' default list also swallows `null`, which is an arm name.
    """
    return pd.read_csv(
        path, comment=None, skiprows=_header_line_count(path), keep_default_na=False, na_values=["", "NA"]
    )


def _header_line_count(path: Path) -> int:
    count = 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.startswith("#"):
                break
            count += 1
    return count


def read_samples(path: Path) -> pd.DataFrame:
    """samples.csv (or the run directory holding it) as a DataFrame with SAMPLE_COLUMNS."""
    path = Path(path)
    if path.is_dir():
        path = path / "samples.csv"
    frame = read_csv_with_header(path)
    missing = [c for c in SAMPLE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a samples.csv: missing columns {', '.join(missing)}")
    return frame


class SampleWriter:
    """Appends sample rows to samples.csv durably and knows which runs are already done (for resume)."""

    def __init__(self, run_dir: Path, meta: Mapping[str, object]):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "samples.csv"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.path.stat().st_size > 0:
            self._truncate_torn_tail()
        else:
            self._write_atomically(self.path, format_provenance(meta) + _csv_line(SAMPLE_COLUMNS))
        write_meta(self.run_dir, meta)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)

    def _truncate_torn_tail(self) -> None:
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as handle:
                handle.truncate(keep)

    @staticmethod
    def _write_atomically(path: Path, text: str) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def done_keys(self) -> dict[tuple, str]:
        return done_runs(self.path)

    def append(self, row: Mapping[str, object]) -> None:
        unknown = set(row) - set(SAMPLE_COLUMNS)
        if unknown:
            raise KeyError(f"unknown sample columns: {sorted(unknown)}")
        os.write(self._fd, _csv_line([row.get(c, "") for c in SAMPLE_COLUMNS]).encode("utf-8"))
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def done_runs(path: Path) -> dict[tuple, str]:
    """Runs already recorded as ok or skip: RUN_KEY values (as strings) → status; {} without a samples.csv.

    A `skip` row only settles a point that is still skipped; once the point fits (more free memory), its runs are
    measured. Read-only: resume decisions and `--dry-run` must not touch the files."""
    path = Path(path)
    if path.is_dir():
        path = path / "samples.csv"
    if not path.exists():
        return {}
    frame = read_samples(path)
    frame = frame[frame["status"].isin(DONE_STATUSES)]
    done: dict[tuple, str] = {}
    for row in frame.to_dict("records"):
        key = run_key(row)
        if done.get(key) != "ok":
            done[key] = row["status"]
    return done


def run_key(row: Mapping[str, object]) -> tuple:
    """The identity of one run, normalised to strings so CSV-read rows and fresh rows compare equal."""
    return tuple(_key_text(row.get(c, "")) for c in RUN_KEY)


def _key_text(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _csv_line(values: Iterable[object]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buffer.getvalue()


def write_meta(run_dir: Path, meta: Mapping[str, object]) -> None:
    """meta.json, replaced atomically (a reader never sees half a file)."""
    SampleWriter._write_atomically(Path(run_dir) / "meta.json", json.dumps(meta, indent=2, default=str) + "\n")
