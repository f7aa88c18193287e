"""`moecal doctor`: which backends are usable on this machine, and why not; optionally the copy bandwidth."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from harness import provenance
from harness.backends import BackendUnavailable, detect, get_backend
from harness.errors import InputError


def doctor(
    backend: str | None = typer.Option(None, "--backend", help="Also instantiate this backend (metal|cuda|cpu|auto)."),
    bandwidth: bool = typer.Option(
        False, "--bandwidth", help="Measure the backend's device-to-device copy bandwidth (the GB/s ceiling)."
    ),
) -> None:
    """Print each backend's availability with the reason, what `auto` would pick, and package versions."""
    table = Table(title="moecal doctor")
    table.add_column("backend")
    table.add_column("usable")
    table.add_column("details")
    found = detect()
    for name, (ok, reason) in found.usable.items():
        table.add_row(name, "yes" if ok else "no", reason)
    console = Console()
    console.print(table)
    console.print(
        f"auto → {found.auto or 'nothing usable'}; external commands would be labelled "
        f"'{found.platform}' (from the GPU this machine has)"
    )
    versions = provenance.package_versions()
    console.print("packages: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if backend or bandwidth:
        try:
            live = get_backend(backend or "auto")
        except BackendUnavailable as exc:
            raise InputError("--backend", backend or "auto", str(exc)) from None
        console.print(f"{live.name}: {live.device_name()}")
        for key, value in live.device_info().items():
            console.print(f"  {key}: {value}")
        if bandwidth:
            copy = live.copy_bandwidth()
            console.print(f"copy bandwidth ({live.name}, bytes read + written): {copy / 1e9:.1f} GB/s")


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
