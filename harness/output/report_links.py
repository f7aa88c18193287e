"""Paths in what a report writes: links that keep working once the addendum sits in another tree, and recorded
paths shown to a reader without this machine's absolute locations.

Why a module of its own: the addendum is pasted (or `--append-to`-inserted) into mlxcel's design doc, far from
where moecal wrote it. A link is therefore relative to the folder the document is read from (`--link-base`, by
default the folder the addendum is written to), and only to files inside that folder's project (the nearest folder
above it with `.git` or `pyproject.toml`): a `../../home/me/…` link would resolve nowhere in another checkout. Text
the reader sees (the sweep's command line, the benchmark command, the config path, notes) never shows an absolute
path: a path inside the project is shown relative to its root, one outside it by its name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# an absolute POSIX path inside free text: `/` at a word start, then one or more path characters
_ABSOLUTE = re.compile(r"(?<![\w.~/-])/[\w.@%+~=-][\w.@%+~=/-]*")


def project_root(start: Path) -> Path:
    """The nearest folder at or above `start` holding `.git` or `pyproject.toml` (`start` itself when none)."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists() or (folder / "pyproject.toml").exists():
            return folder
    return start


def relative_path(path: Path, base: Path) -> str:
    """`path` relative to the folder `base` (`../` steps where needed): a machine-readable location that stays
    valid when the whole tree moves, never an absolute path."""
    return Path(os.path.relpath(Path(path).resolve(), Path(base).resolve())).as_posix()


def link_target(path: Path, link_base: Path) -> str | None:
    """`path` as a markdown link target from a document in `link_base`, or None when `path` lies outside
    `link_base`'s project (a link there would break as soon as the document moves to another machine)."""
    path, base = Path(path).resolve(), Path(link_base).resolve()
    if not path.is_relative_to(project_root(base)):
        return None
    return relative_path(path, base)


def shown_path(path: str, root: Path) -> str:
    """A recorded path as a reader can use it: relative to the project `root`, or the tail of it that exists under
    `root` (a run made in another checkout of the project), else its bare name."""
    candidate = Path(path)
    if not candidate.is_absolute():
        return candidate.as_posix()
    if candidate.is_relative_to(root):
        return candidate.relative_to(root).as_posix()
    parts = candidate.parts
    for start in range(1, len(parts)):
        if (root / Path(*parts[start:])).exists():
            return Path(*parts[start:]).as_posix()
    return parts[-1] if len(parts) > 1 else str(path)


def shown_text(text: str, root: Path) -> str:
    """`text` (a command line, a note) with every absolute path in it replaced by `shown_path`."""
    return _ABSOLUTE.sub(lambda match: shown_path(match.group(0), root), text)
