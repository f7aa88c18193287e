"""`moecal report --append-to DESIGN.md`: the addendum inserted into a design doc, so updating mlxcel's
`docs/benchmark_results/fused-moe-decode-kernel-design.md` is one command.

The addendum sits between two HTML comments naming its run id (invisible when the markdown is rendered):
`<!-- moecal:addendum RUN -->` … `<!-- /moecal:addendum RUN -->`. Reporting the same run again replaces what lies
between them; a run not in the doc yet is appended at its end. Every byte outside the markers stays as it was (line
endings included), the file is replaced atomically (a reader sees the old doc or the new one), and a doc that is
missing, a symbolic link, not UTF-8 text or holding a marker without its partner is refused with one line — checked
for every run's markers before `report` writes anything. A marker inside a fenced code block (``` or ~~~) is an
example shown to the reader, not a place to insert: it is neither counted nor replaced.
"""

from __future__ import annotations

import contextlib
import os
import re
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


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_ANY_MARKER = re.compile(r"<!-- /?moecal:addendum (\S+) -->")


def _fenced(text: str) -> list[tuple[int, int]]:
    """The character spans of fenced code blocks (an unclosed fence runs to the end, as markdown renders it)."""
    spans, opened = [], None
    for fence in _FENCE.finditer(text):
        if opened is None:
            opened = fence
        elif fence.group(1)[0] == opened.group(1)[0] and len(fence.group(1)) >= len(opened.group(1)):
            spans.append((opened.start(), fence.end()))
            opened = None
    if opened is not None:
        spans.append((opened.start(), len(text)))
    return spans


def _outside(text: str, needle: str, spans: list[tuple[int, int]]) -> list[int]:
    """Where `needle` occurs in `text` outside the fenced `spans`."""
    found = [m.start() for m in re.finditer(re.escape(needle), text)]
    return [at for at in found if not any(a <= at < b for a, b in spans)]


def _pair(text: str, run_id: str, source: str, spans: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(start, end) offsets of the run's one marker pair outside code fences; None without markers; InputError for
    anything else (doubled, reversed, one of the two)."""
    start, end = markers(run_id)
    opened, closed = _outside(text, start, spans), _outside(text, end, spans)
    if len(opened) == len(closed) == 1 and opened[0] < closed[0]:
        return opened[0], closed[0]
    if opened or closed:
        raise InputError(
            source, "--append-to", f"the markers of {run_id} are not one opening and one closing comment: fix by hand"
        )
    return None


def check_doc(doc: Path) -> None:
    """read_doc, and every run's markers well formed: what `report --append-to` checks before it writes anything."""
    text = read_doc(doc)
    spans = _fenced(text)
    for run_id in sorted({m.group(1) for m in _ANY_MARKER.finditer(text)}):
        _pair(text, run_id, str(doc), spans)


def insert_addendum(text: str, addendum: str, run_id: str, source: str = "design doc") -> tuple[str, bool]:
    """`text` with `addendum` between its run's markers: replacing the block already there (True), or appended
    after a blank line at the end (False)."""
    start, end = markers(run_id)
    newline = "\r\n" if "\r\n" in text else "\n"
    block = newline.join([start, *addendum.rstrip("\n").split("\n"), end])
    pair = _pair(text, run_id, source, _fenced(text))
    if pair is not None:
        return text[: pair[0]] + block + text[pair[1] + len(end) :], True
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
