"""Where moecal may read a path that a file (not the user) names: a sidecar's raw data, an imported model name.

A path written inside a file is only as trustworthy as whoever committed the file: read naively, a report's sidecar
naming `/etc/shadow` as its raw data would make `moecal check-reports` read (and quote) it, and a model name of
`../../x` in an imported CSV would become a folder outside the run. These checks keep such paths inside the trees
the user pointed at.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def outside_trees(paths: Sequence[Path | None], trees: Sequence[Path]) -> str | None:
    """A problem line for the first path that does not resolve (links followed) inside one of `trees`, or that is
    neither a folder nor a CSV; None when all are fine. The line names the path only: the file is never opened."""
    homes = [Path(tree).resolve() for tree in trees]
    for path in paths:
        if path is None:
            continue
        target = Path(path).resolve()
        if not any(target.is_relative_to(home) for home in homes):
            return (
                f"raw data {path} lies outside the addendum's project and the folders given: not read "
                "(a sidecar may only name raw data inside them)"
            )
        if not (target.is_dir() or target.suffix == ".csv"):  # a `.env` inside the project is no raw data either
            return f"raw data {path} is neither a run directory nor a CSV: not read"
    return None


def plain_name_problem(name: str) -> str | None:
    """Why `name` cannot be a name (a model's, a file's) that moecal may turn into a path part, or None: a path
    separator, `.`/`..`, or an absolute path would place what moecal writes elsewhere."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or "\x00" in name:
        return f"{name!r} is a path, not a name (no '/', '\\', '.' or '..')"
    return None
