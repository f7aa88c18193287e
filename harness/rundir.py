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
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from harness.errors import InputError

DEFAULT_RESULTS = Path("results")
STORED_MARKER = ".stored"  # documented in README 'Run directories': marks a read-only baseline outside git
RUN_FILES = ("samples.csv", "meta.json")  # either one makes a folder a run directory
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


def is_run_dir(path: Path) -> bool:
    return any((Path(path) / name).exists() for name in RUN_FILES)


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
    return None


def refuse_stored(path: Path, advice: str) -> None:
    """InputError naming `path` when it is a stored result (a committed run or addendum)."""
    reason = stored_reason(path)
    if reason:
        raise InputError(str(path), "", f"{reason}; {advice}")


def read_meta(run_dir: Path) -> dict:
    """meta.json of a run directory ({} when there is none); unreadable or not an object → InputError."""
    path = Path(run_dir) / "meta.json"
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise InputError(str(path), "", f"not a moecal meta.json: {exc}") from None
    if not isinstance(meta, dict):
        raise InputError(str(path), "", "not a moecal meta.json: expected a JSON object")
    return meta


def same_run_kind(meta: dict, wanted: dict) -> str | None:
    """The first of config hash, backend, device on which an existing run differs from `wanted`, else None."""
    for key in ("config_sha256", "backend", "device"):
        if meta.get(key) != wanted.get(key):
            return key
    return None


def newest_resumable(results: Path, wanted: dict, pending: Callable[[Path], int]) -> Path | None:
    """The newest run directory under `results` of the same config, backend and device with runs still to do.

    Newest by the run's start date in meta.json (run ids sort by time too, but a user may have named one);
    stored runs are never candidates."""
    if not results.is_dir():
        return None
    candidates = []
    for folder in results.iterdir():
        if not folder.is_dir() or not (folder / "meta.json").exists():
            continue
        try:
            meta = read_meta(folder)
        except InputError:
            continue  # not ours to judge here; `--resume DIR` on it reports the problem
        if same_run_kind(meta, wanted) is None:
            candidates.append((str(meta.get("date", "")), folder.name, folder))
    for _, _, folder in sorted(candidates, reverse=True):
        if stored_reason(folder) is None and pending(folder) > 0:
            return folder
    return None
