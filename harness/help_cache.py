"""`moecal <command> --help` without importing the command: its rendered help, cached per width and source state.

A command's help is built from its module's typer signature, and importing a command module pulls in pandas,
scipy, matplotlib or a backend (2.7–3.8 s on a quiet 2-core machine, more on a busy one). Making every module
import those lazily would touch nearly every module of the package. Instead the first `--help` of a command renders
normally and stores the text; later ones print it in the time Python and click take to start. The key holds the
moecal version, the terminal width and the size and modification time of every `.py` file of the package, so an
edit or an upgrade renders afresh. The cache lives in `$XDG_CACHE_HOME/moecal/help` (default `~/.cache`); when it
cannot be written the help is simply rendered every time.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moecal" / "help"


def _source_state() -> str:
    from harness import __version__

    digest = hashlib.sha256(__version__.encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(PACKAGE)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def cache_path(command: str, width: int) -> Path:
    return cache_dir() / f"{command}-{width}-{_source_state()}.txt"


def wants_help(args: list[str], commands: set[str]) -> str | None:
    """The command whose help `args` ask for (`<command> … --help`), else None."""
    if len(args) >= 2 and args[0] in commands and ("--help" in args[1:] or "-h" in args[1:]):
        return args[0]
    return None


def cached(command: str, width: int) -> str | None:
    try:
        return cache_path(command, width).read_text(encoding="utf-8")
    except OSError:
        return None


def store(command: str, width: int, text: str) -> None:
    path = cache_path(command, width)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)  # atomic: a concurrent `--help` never reads half a file
    except OSError:
        pass  # a read-only home: render every time
