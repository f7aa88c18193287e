"""The defaults addendum's replication section (harness.analysis.comparison.replication): per backend, whether its move
is replicated across sessions, and what the patch carries."""

from __future__ import annotations

from harness.analysis.comparison.backend_defaults import Defaults
from harness.analysis.comparison.replication import replicated_caps, replication
from harness.output.defaults.device_defaults import run_class
from harness.output.markdown_text import md_text


def patch_caps(defaults: Defaults, changed: dict[str, int], unreplicated: bool) -> dict[str, int]:
    """The changed caps the switch_layers.rs patch carries: replicated moves only, unless `unreplicated`."""
    return replicated_caps(defaults, changed, unreplicated, run_class)


def replication_markdown(defaults: Defaults, unreplicated: bool) -> str:
    """The addendum's replication section: per backend and move, replicated yes/no and why."""
    lines = ["#### Replication", "", "| backend | move | replicated |", "|---|---|---|"]
    for backend, r in replication(defaults, run_class).items():
        lines.append(f"| {backend} | {r.action} | {md_text(r.words())} |")
    note = (
        "The patch carries every move, replicated or not (`--unreplicated`): an unreplicated move is a proposal."
        if unreplicated
        else "The patch carries replicated moves only; an unreplicated move is a proposal until a second session of "
        "the same device class decides it too (`--unreplicated` writes it anyway)."
    )
    return "\n".join([*lines, "", note]) + "\n"
