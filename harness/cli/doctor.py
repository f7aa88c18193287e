"""`moecal doctor`: which backends are usable on this machine, and why not; optionally the copy bandwidth."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.cli.analysis_options import JsonOpt
from harness.errors import InputError

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.devices.backends import Detection


def _platform_note(found: Detection) -> str:
    """Where an external command's label comes from, worded for what this machine has."""
    if found.gpu:
        return f"from the GPU this machine has: {found.gpu_name}"
    return "Apple silicon" if found.apple_silicon else "no NVIDIA GPU and no Apple silicon found here"


def doctor(
    backend: str | None = typer.Option(
        None, "--backend", metavar="BACKEND", help="Also instantiate this backend (metal|cuda|cpu|auto)."
    ),
    bandwidth: bool = typer.Option(
        False, "--bandwidth", help="Measure the backend's device-to-device copy bandwidth (the GB/s ceiling)."
    ),
    as_json: JsonOpt = False,
) -> None:
    """Print each backend's availability with the reason, what `auto` would pick, and package versions."""
    from harness.devices.backends import detect, get_backend
    from harness.errors import BackendUnavailable
    from harness.runs import provenance

    found = detect()
    versions = provenance.package_versions()
    record: dict[str, object] = {
        "backends": {name: {"usable": ok, "reason": reason} for name, (ok, reason) in found.usable.items()},
        "auto": found.auto,
        "platform": found.platform,
        "gpu": found.gpu,
        "packages": versions,
    }
    console = Console(highlight=False)
    if not as_json:
        table = Table(title="moecal doctor")
        table.add_column("backend")
        table.add_column("usable")
        table.add_column("details")
        for name, (ok, reason) in found.usable.items():
            table.add_row(name, "yes" if ok else "no", escape(reason))  # escape: `[cuda]` is no console markup
        console.print(table)
        console.print(
            escape(
                f"auto → {found.auto or 'nothing usable'}; external commands would be labelled "
                f"'{found.platform}' ({_platform_note(found)})"
            )
        )
        console.print(escape("packages: " + ", ".join(f"{k} {v}" for k, v in versions.items())))
    if backend or bandwidth:
        try:
            live = get_backend(backend or "auto")
        except BackendUnavailable as exc:
            raise InputError("--backend", backend or "auto", str(exc)) from None
        info = {"backend": live.name, "device": live.device_name(), **live.device_info()}
        if bandwidth:
            info["copy_bandwidth_gb_s"] = round(live.copy_bandwidth() / 1e9, 1)
        record["instantiated"] = info
        if not as_json:
            console.print(escape(f"{live.name}: {live.device_name()}"))
            for key, value in live.device_info().items():
                console.print(escape(f"  {key}: {value}"))
            if bandwidth:
                console.print(f"copy bandwidth ({live.name}, bytes read + written): {info['copy_bandwidth_gb_s']} GB/s")
    if as_json:
        typer.echo(json.dumps(record, indent=1, default=str))


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
