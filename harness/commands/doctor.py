"""`moecal doctor`: which backends are usable on this machine, and why not."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from harness import provenance
from harness.backends import BACKEND_NAMES, availability


def doctor() -> None:
    """Print each backend's availability with the reason, and what `auto` would pick."""
    table = Table(title="moecal doctor")
    table.add_column("backend")
    table.add_column("usable")
    table.add_column("details")
    first = None
    for name in BACKEND_NAMES:
        ok, reason = availability(name)
        first = first or (name if ok else None)
        table.add_row(name, "yes" if ok else "no", reason)
    console = Console()
    console.print(table)
    console.print(
        f"auto → {first or 'nothing usable'}; external commands would be labelled "
        f"'{provenance.platform_backend()}' (from the GPU this machine has)"
    )
    versions = provenance.package_versions()
    console.print("packages: " + ", ".join(f"{k} {v}" for k, v in versions.items()))


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
