"""The refusal `compare`, `check` and `history` share: runs timed by different decode loops are not set side by side
unless `--across-decode-paths` says so (harness.runs.run_keys); a build or arm-variable change is named."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from harness.errors import InputError

if TYPE_CHECKING:
    from harness.analysis.decision.pipeline import Analysis

AcrossDecodePathsOpt = Annotated[
    bool,
    typer.Option(
        "--across-decode-paths",
        help="compare runs timed by different decode loops (`Decode path:` differs), said in the output",
    ),
]


def key_changes(runs: list[tuple[str, Analysis]], across: bool) -> list[str]:
    """One line per key that changes between consecutive runs; InputError on a decode-loop change unless `across`."""
    from harness.runs.run_keys import changes, decode_path_changed, run_keys

    keys = [(name, run_keys(a.provenance, a.samples)) for name, a in runs]
    lines = []
    for (first, a), (second, b) in zip(keys, keys[1:], strict=False):
        if decode_path_changed(a, b) and not across:
            raise InputError(
                second,
                "decode_path",
                f"timed by decode path {b['decode_path']!r}, {first} by {a['decode_path']!r}: different code, not "
                "pooled or compared (pass --across-decode-paths to compare them anyway)",
            )
        lines += [f"{first} → {second}: {change}" for change in changes(a, b)]
    return lines
