"""Run directories: their identity, which ones are read-only, choosing one to write or resume.

A run directory (`results/<run-id>/`) holds one sweep: samples.csv, meta.json, summary.csv and, by default, its
addendum. The rules that keep runs trustworthy live here, in one place:

- **Identity.** A new sweep gets a fresh run id, `<UTC yyyymmddThhmm>-<backend>-<device slug>-<config name>`
  (e.g. `20261130T1905-cpu-amd-epyc-cpu-smoke`): readable, sortable by time, and different on another machine or
  another minute. Should that directory exist anyway (two sweeps started in one minute), `-2`, `-3`, … is appended.
  A fresh sweep never writes into an existing run; continuing one is explicit (`--resume`).
- **Stored runs are read-only.** A run directory with any file tracked by git in its enclosing repository (the
  committed CI baselines under results/), or holding a `STORED_MARKER` file (a baseline copied outside git), is a
  stored run: every command refuses to write into it, naming the file. The same holds for any other tracked file a
  command would overwrite (a committed addendum under reports/).
- **Resume.** `--resume` picks the newest run under the results folder of the same config (file hash), backend and
  device that still has runs to do; `--resume DIR` names it.
- **One writer.** A writer holds an advisory `fcntl.flock` on `<run>/.lock` (which also records its pid and start
  time for the error message). The kernel drops the lock when the process dies, however it dies, so a lock left by
  a killed sweep never blocks the next one.
- **Durable rows.** Each row is one `os.write` of a complete line on an O_APPEND descriptor followed by fsync, so
  a SIGKILL loses at most the run in flight; a torn last line (no newline) is not a row to any reader and is
  truncated before the next append. Nothing is written until the first row: a sweep with nothing left to do
  changes no file.
- **Segments.** meta.json keeps the first segment's provenance at the top level (what reports show) and one entry
  per segment (every start of a sweep into the directory that wrote rows) under `segments`: start, end, rows,
  harness commit and dirty flag, kernel source hash, launch settings, command. Resuming with another kernel hash or
  launch setting than an earlier segment is refused unless allowed (`--allow-mixed`), and then recorded. A
  segment's rows and end are rewritten after every row, so a sweep killed without warning still says how far it got.
- **meta.json** is a record (harness.runs.run_meta.RunMeta: the provenance, the sweep's policy, the format
  version and its migrations); `RunDirectory.read_record`/`write_record` are its only reader and writer.
- **No links.** A symbolic link in a run directory would carry a write (an append to samples.csv, the lock, a
  report) to a file outside it: such a directory is refused (`refuse_links`), and every file is opened with
  O_NOFOLLOW or replaced by a rename (which replaces a link instead of following it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, get_args

import pandas as pd

from harness.errors import InputError
from harness.json_input import load_json_object
from harness.policy import Policy
from harness.runs.formats import (
    SAMPLE_COLUMNS,
    SAMPLES_FILE,
    RunKey,
    csv_columns,
    csv_line,
    done_runs,
    format_provenance,
    read_samples,
    refuse_link,
    write_text_atomic,
)
from harness.runs.provenance_keys import SEGMENTS, Provenance, check_provenance
from harness.runs.run_meta import RunMeta

DEFAULT_RESULTS = Path("results")
STORED_MARKER = ".stored"  # documented in README 'Run directories': marks a read-only baseline outside git
META_FILE = "meta.json"
SUMMARY_FILE = "summary.csv"
RUN_FILES = (SAMPLES_FILE, META_FILE)  # either one makes a folder a run directory
LOCK_FILE = ".lock"
# the provenance a segment restates: what may differ between the processes that appended to one run
SegmentKey = Literal["harness_commit", "harness_dirty", "kernel_source_hash", "launch", "command"]
SEGMENT_KEYS: tuple[SegmentKey, ...] = get_args(SegmentKey)
MIXABLE_KEYS = ("kernel_source_hash", "launch")  # what a resumed run may not change silently
SLUG_WORDS = 2  # of the device name: "amd-epyc", "nvidia-h200", "apple-m3" — enough to tell machines apart
SLUG_CHARS = 20


def device_slug(device: str) -> str:
    """A short file-name-safe form of a device name: the first words, lower case, parenthesised details dropped."""
    text = re.sub(r"\(.*?\)", " ", device).lower()
    words = [w for w in re.split(r"[^a-z0-9]+", text) if w and w not in ("r", "tm", "cpu", "gpu")]
    return "-".join(words[:SLUG_WORDS])[:SLUG_CHARS].strip("-") or "device"


def default_run_id(config_name: str, backend: str, device: str, now: _dt.datetime | None = None) -> str:
    """`<UTC yyyymmddThhmm>-<backend>-<device slug>-<config name>` (see the module docstring)."""
    now = now or _dt.datetime.now(_dt.UTC)
    return f"{now:%Y%m%dT%H%M}-{backend}-{device_slug(device)}-{config_name}"


def fresh_run_dir(results: Path, run_id: str) -> Path:
    """`results/<run_id>`, or with `-2`, `-3`, … appended while that name is taken."""
    candidate, number = results / run_id, 2
    while candidate.exists():
        candidate, number = results / f"{run_id}-{number}", number + 1
    return candidate


def tracked_by_git(path: Path) -> bool:
    """True when `path` (a file, or a folder with any tracked file in it) is tracked in its enclosing git checkout.

    Outside a checkout, or without git, nothing is tracked; the STORED_MARKER covers baselines kept there."""
    path = Path(path).absolute()
    anchor = next((p for p in (path, *path.parents) if p.is_dir()), None)
    if anchor is None:
        return False
    try:
        done = subprocess.run(
            ["git", "-C", str(anchor), "ls-files", "-z", "--", str(path)],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and bool(done.stdout)


def stored_reason(path: Path) -> str | None:
    """Why `path` (a file or a run directory) is a read-only stored result, or None when it may be written."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if (folder / STORED_MARKER).exists():
        return f"a stored run ({folder / STORED_MARKER} marks it read-only)"
    if tracked_by_git(path):
        return "a stored result (tracked by git) is read-only"
    if folder != path and RunDirectory(folder).is_run() and tracked_by_git(folder):  # a new file inside a committed run
        return f"{folder} is a stored run (tracked by git): read-only"
    return None


def refuse_stored(path: Path, advice: str) -> None:
    """InputError naming `path` when it is a stored result (a committed run or addendum), or a symbolic link
    (writing through it would change a file elsewhere)."""
    reason = stored_reason(path)
    if reason:
        raise InputError(str(path), "", f"{reason}; {advice}")
    refuse_link(path)


def refuse_links(run_dir: Path) -> None:
    """A run directory whose entries include a symbolic link is refused: moecal writes its files (samples.csv,
    meta.json, .lock, summary, addendum) in place, and a link would carry those writes out of the directory."""
    try:
        entries = list(Path(run_dir).iterdir())
    except OSError:
        return  # not there yet (a new run) or unreadable: creating or opening it reports that
    for entry in sorted(entries):
        if entry.is_symlink():
            raise InputError(
                str(entry), "", f"is a symbolic link (to {os.readlink(entry)}); a run directory's files must be its own"
            )


# --- the directory and its files --------------------------------------------------------------------------------


class RunDirectory:
    """One run directory's files — samples.csv, meta.json, summary.csv, the lock — and the format of meta.json.

    Every caller reaches a run's files through here, so their names and meta.json's version are kept in one place."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.samples = self.path / SAMPLES_FILE
        self.meta_path = self.path / META_FILE
        self.summary = self.path / SUMMARY_FILE
        self.lock_path = self.path / LOCK_FILE

    def is_run(self) -> bool:
        """Holds samples.csv or meta.json: a run directory, as opposed to an empty or foreign folder."""
        return any((self.path / name).exists() for name in RUN_FILES)

    def read_record(self) -> RunMeta:
        """meta.json as a record, migrated to the current format (an empty one when there is none); unreadable, not
        an object, of an unknown format or with a malformed policy → InputError."""
        if not self.meta_path.exists():
            return RunMeta()
        try:
            meta = load_json_object(self.meta_path)
        except InputError as exc:
            raise InputError(str(self.meta_path), "", f"not a moecal meta.json: {exc.field}: {exc.problem}") from None
        return RunMeta.from_json(meta, self.meta_path)

    def read_meta(self) -> Provenance:
        """meta.json's provenance: without its `format` and `policy` ({} when there is no meta.json)."""
        return self.read_record().provenance

    def read_policy(self) -> Policy | None:
        """The policy the run's sweep measured to, None for a run that recorded none (see harness.runs.run_meta)."""
        return self.read_record().policy

    def write_record(self, record: RunMeta) -> None:
        """meta.json at the current format, replaced atomically (a reader never sees half a file); a value the
        registry refuses (harness.runs.provenance_keys) is an InputError before anything is written."""
        check_provenance(record.provenance, self.meta_path)
        write_text_atomic(self.meta_path, record.to_text())

    def read_samples(self) -> pd.DataFrame:
        """samples.csv, validated (harness.runs.formats.read_samples)."""
        return read_samples(self.samples)

    def done_runs(self) -> dict[RunKey, str]:
        """Runs already recorded as ok or skip ({} before the first row); reads, never writes."""
        return done_runs(self.samples)


def same_run_kind(meta: Mapping[str, object], wanted: Mapping[str, object]) -> str | None:
    """The first of config hash, backend, device on which an existing run differs from `wanted`, else None."""
    for key in ("config_sha256", "backend", "device"):
        if meta.get(key) != wanted.get(key):
            return key
    return None


def newest_resumable(results: Path, wanted: Mapping[str, object], pending: Callable[[Path], int]) -> Path | None:
    """The newest run directory under `results` of the same config, backend and device with runs still to do.

    Newest by the run's start date in meta.json (run ids sort by time too, but a user may have named one);
    stored runs are never candidates."""
    if not results.is_dir():
        return None
    candidates = []
    for folder in results.iterdir():
        run = RunDirectory(folder)
        if not folder.is_dir() or not run.meta_path.exists():
            continue
        try:
            meta = run.read_meta()
        except InputError:
            continue  # not ours to judge here; `--resume DIR` on it reports the problem
        if same_run_kind(meta, wanted) is None:
            candidates.append((str(meta.get("date", "")), folder.name, folder))
    for _, _, folder in sorted(candidates, reverse=True):
        if stored_reason(folder) is None and pending(folder) > 0:
            return folder
    return None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- one writer ------------------------------------------------------------------------------------------------


class RunLock:
    """`with RunLock(run_dir):` — the one writer of a run directory (see the module docstring)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = RunDirectory(run_dir).lock_path
        self._fd = -1

    def __enter__(self) -> RunLock:
        refuse_links(self.run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise InputError(str(self.run_dir), "", f"cannot create the run directory's lock: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").split()
            os.close(fd)
            who = f"pid {holder[0]} since {holder[1]}" if len(holder) >= 2 else "another process"
            raise InputError(str(self.run_dir), "", f"in use by {who}; wait for it to finish or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {_now()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = -1


# --- segments --------------------------------------------------------------------------------------------------


class SegmentJSON(TypedDict):
    """One process's entry in meta.json's `segments` (new_segment): when it started and last appended, how many rows
    it appended, the SEGMENT_KEYS of its provenance as recorded, and the settings it mixed into a resumed run
    (sweep --allow-mixed)."""

    start: str
    end: str
    rows: int
    harness_commit: NotRequired[object]
    harness_dirty: NotRequired[object]
    kernel_source_hash: NotRequired[object]
    launch: NotRequired[object]
    command: NotRequired[object]
    mixed: NotRequired[list[str]]


def segments(meta: Mapping[str, object]) -> list[dict[str, object]]:
    """The run's segments as stored (SegmentJSON's, as the moecal that wrote each one wrote it); a run written before
    segments existed counts as one, described by its top level."""
    stored = meta.get(SEGMENTS)
    if isinstance(stored, list):
        return [dict(s) for s in stored if isinstance(s, dict)]
    if not meta:
        return []
    return [{"start": meta.get("date", ""), **{k: meta[k] for k in SEGMENT_KEYS if k in meta}}]


def new_segment(meta: Mapping[str, object]) -> SegmentJSON:
    """This process's segment entry, from its provenance (end and rows are filled in as rows are appended)."""
    segment: SegmentJSON = {"start": _now(), "end": "", "rows": 0}
    for key in SEGMENT_KEYS:
        if key in meta:
            segment[key] = meta[key]
    return segment


def mixed_settings(previous: Mapping[str, object], segment: Mapping[str, object]) -> list[str]:
    """Which of MIXABLE_KEYS differ between the new segment and any earlier one (with the values, for the error)."""
    out = []
    for key in MIXABLE_KEYS:
        before = {json.dumps(s.get(key), sort_keys=True) for s in segments(previous) if key in s}
        now = json.dumps(segment.get(key), sort_keys=True)
        if before and before != {now}:
            out.append(f"{key} {' / '.join(sorted(before))} before, {now} now")
    return out


# --- durable rows ----------------------------------------------------------------------------------------------


# one row of samples.csv as a sweep builds it: column (SAMPLE_COLUMNS) → value, written as the CSV's text
SampleRow = dict[str, object]


class SampleWriter:
    """Appends rows to `<run>/samples.csv` (see the module docstring); use inside a RunLock.

    The header, the meta.json segment and the torn-tail repair happen at the first `append`; `close` records the
    segment's end and row count (also rewritten after every row, see `_record_segment`)."""

    def __init__(
        self,
        run_dir: Path,
        meta: Mapping[str, object],
        segment: SegmentJSON | None = None,
        policy: Policy | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.run = RunDirectory(run_dir)
        self.path = self.run.samples
        self.meta = dict(meta)
        self.policy = policy  # recorded for a new run; a resumed run keeps the one it has
        self.segment = SegmentJSON(**segment) if segment is not None else new_segment(meta)
        self._fd = -1
        self._record = RunMeta()
        self._columns: list[str] = list(SAMPLE_COLUMNS)  # the file's own header once it exists (see _start)

    def done_keys(self) -> dict[RunKey, str]:
        return self.run.done_runs()

    def _start(self) -> None:
        check_provenance(self.meta, self.run.meta_path)  # before samples.csv's header states it
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            previous = self.run.read_record()
            if self.path.exists() and self.path.stat().st_size > 0:
                truncate_torn_tail(self.path)
                self._columns = csv_columns(self.path) or SAMPLE_COLUMNS  # a run from before a LATER_COLUMNS column
            else:
                write_text_atomic(self.path, format_provenance(self.meta) + csv_line(SAMPLE_COLUMNS))
            earlier = previous.provenance
            self._record = RunMeta(
                provenance={**(earlier or self.meta), SEGMENTS: [*segments(earlier), self.segment]},
                policy=previous.policy if earlier else self.policy,
            )
            self.run.write_record(self._record)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        except OSError as exc:
            raise InputError(str(self.path), "", f"cannot write: {exc.strerror or exc}") from None

    def append(self, row: Mapping[str, object]) -> None:
        unknown = set(row) - set(SAMPLE_COLUMNS)
        if unknown:
            raise KeyError(f"unknown sample columns: {sorted(unknown)}")
        if self._fd < 0:
            self._start()
        lost = [c for c in row if row[c] not in ("", None) and c not in self._columns]
        if lost:  # a knob sweep resumed into a run written without the column: its rows could not say their setting
            raise InputError(str(self.path), lost[0], "this run's samples.csv has no such column; start a new run")
        line = csv_line([row.get(c, "") for c in self._columns]).encode("utf-8")
        before = os.fstat(self._fd).st_size
        try:
            written = os.write(self._fd, line)
            if written != len(line):  # disk full or a file-size limit: part of the row reached the file
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes; disk full or file too big)")
            os.fsync(self._fd)
        except OSError as exc:
            self._undo_row(before)
            raise InputError(str(self.path), "", f"cannot append a row: {exc.strerror or exc}") from None
        self.segment["rows"] += 1  # new_segment's count, this process's own
        try:
            self._record_segment()
        except InputError:  # meta.json could not say so: the row goes too, so its count stays exact
            self.segment["rows"] -= 1
            self._undo_row(before)
            raise

    def update_record(self, change: Callable[[RunMeta], None]) -> None:
        """Apply `change` to meta.json now (atomically, like every rewrite of it). Once rows are being written the
        change goes into the writer's own copy, which it rewrites after every row: written beside it, the change
        would be lost at the next row."""
        if self._fd >= 0:
            change(self._record)
            self.run.write_record(self._record)
            return
        record = self.run.read_record()
        change(record)
        self.run.write_record(record)

    def _undo_row(self, size: int) -> None:
        """Cut samples.csv back to `size` bytes: a row is in the file exactly when meta.json counts it."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, size)
            os.fsync(self._fd)

    def _record_segment(self) -> None:
        """meta.json with this segment's rows and end as of now: after every row, so a sweep killed by SIGKILL
        leaves a segment that says how far it got (the last row's time as its end)."""
        self.segment["end"] = _now()
        self._record.provenance[SEGMENTS][-1] = self.segment  # type: ignore[index]
        self.run.write_record(self._record)

    def close(self) -> None:
        if self._fd < 0:
            return
        os.close(self._fd)
        self._fd = -1
        self._record_segment()

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truncate_torn_tail(path: Path) -> None:
    """Cut a last line without its newline (a write a crash interrupted): no reader takes it for a row."""
    with os.fdopen(os.open(path, os.O_RDWR | os.O_NOFOLLOW), "r+b") as handle:
        data = handle.read()
        if not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)
