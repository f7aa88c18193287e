"""`moecal presets`: the shipped sweep configs, one line each, so a user of an installed moecal can see what
`moecal plan NAME` / `moecal sweep NAME` accept without a checkout."""

from __future__ import annotations

import typer

from harness.config import resources


def presets() -> None:
    """List the shipped sweep configs: name, backend, workload kind and what each is for."""
    found = resources.presets()
    width = max(len(p.name) for p in found)
    for preset in found:
        print(f"{preset.name:<{width}}  {preset.backend:<6} {preset.workload:<8} {preset.summary}")
    print(
        f"\nRun one by name (moecal plan NAME, moecal sweep NAME); to change one, copy it from {resources.config_dir()}"
    )


def register(app: typer.Typer) -> None:
    app.command("presets")(presets)
