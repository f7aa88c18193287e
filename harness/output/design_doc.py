"""`moecal report --append-to DESIGN.md`: the addendum inserted into a design doc, so updating mlxcel's
`docs/benchmark_results/fused-moe-decode-kernel-design.md` is one command.

The addendum sits between two HTML comments naming its run id (invisible when the markdown is rendered):
`<!-- moecal:addendum RUN -->` … `<!-- /moecal:addendum RUN -->`. Reporting the same run again replaces what lies
between them; a run not in the doc yet is appended at its end. Every byte outside the markers stays as it was (line
endings included), the file is replaced atomically (a reader sees the old doc or the new one), and a doc that is
missing, a symbolic link, not UTF-8 text or holding a marker without its partner is refused with one line.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from harness.errors import InputError
from harness.runs.formats import write_text_atomic


def markers(run_id: str) -> tuple[str, str]:
    """The opening and closing comment around one run's addendum (run ids are file-name-safe: no `-->` in them)."""
    return f"<!-- moecal:addendum {run_id} -->", f"<!-- /moecal:addendum {run_id} -->"


def read_doc(doc: Path) -> str:
    """The doc's text exactly as stored; InputError (one line) for a missing file, a link or non-UTF-8 text."""
    if doc.is_symlink():
        raise InputError(str(doc), "--append-to", f"is a symbolic link (to {os.readlink(doc)}); give the file itself")
    if not doc.is_file():
        raise InputError(str(doc), "--append-to", "no such file: --append-to inserts into an existing design doc")
    try:
        with open(doc, encoding="utf-8", newline="") as handle:  # newline="": \r\n stays \r\n
            return handle.read()
    except UnicodeDecodeError as exc:
        raise InputError(str(doc), "--append-to", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise InputError(str(doc), "--append-to", f"cannot read: {exc.strerror or exc}") from None


def insert_addendum(text: str, addendum: str, run_id: str, source: str = "design doc") -> tuple[str, bool]:
    """`text` with `addendum` between its run's markers: replacing the block already there (True), or appended
    after a blank line at the end (False)."""
    start, end = markers(run_id)
    newline = "\r\n" if "\r\n" in text else "\n"
    block = newline.join([start, *addendum.rstrip("\n").split("\n"), end])
    opened, closed = text.count(start), text.count(end)
    if opened == closed == 1 and text.index(start) < text.index(end):
        head, rest = text.split(start, 1)
        return head + block + rest.split(end, 1)[1], True
    if opened or closed:
        raise InputError(
            source, "--append-to", f"the markers of {run_id} are not one opening and one closing comment: fix by hand"
        )
    separator = "" if not text or text.endswith(newline * 2) else newline if text.endswith(newline) else newline * 2
    return text + separator + block + newline, False


def append_to(doc: Path, addendum: str, run_id: str) -> bool:
    """Insert `addendum` into the file `doc` (insert_addendum), atomically, keeping its permissions; returns
    whether an earlier addendum of the run was replaced."""
    doc = Path(doc)
    new, replaced = insert_addendum(read_doc(doc), addendum, run_id, str(doc))
    mode = doc.stat().st_mode & 0o7777
    write_text_atomic(doc, new)
    with contextlib.suppress(OSError):
        os.chmod(doc, mode)
    return replaced
