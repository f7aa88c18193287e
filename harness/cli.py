"""The `moecal` command line: argument parsing only; every command's work lives in harness/commands/<name>.py.

Errors in user input are printed as one line (`error: <file>: <field>: <problem>`) with exit code 2.
"""

from __future__ import annotations

import sys

import typer

from harness.errors import InputError

app = typer.Typer(
    name="moecal",
    help="Calibrate the fused decode-MoE Dff cap: sweep, summarize, find the crossover, recommend, report, check.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    """`moecal --version`: the package version, and the harness commit when moecal runs from a git checkout."""
    if not value:
        return
    from harness import __version__, provenance

    commit, dirty = provenance.git_state()
    print(f"moecal {__version__} (harness commit {commit}{', uncommitted changes' if dirty else ''})")
    raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and harness commit."
    ),
) -> None:
    """Options that apply before any command."""


# --- command registration: each command module defines `register(app)` --------------------------------------
from harness.commands import (  # noqa: E402
    bench_kernels,
    check,
    crossover,
    doctor,
    fleet,
    import_mlxcel,
    init,
    plan,
    presets,
    report,
    summarize,
    sweep,
    verify,
)

for _module in (
    init,
    sweep,
    plan,
    presets,
    doctor,
    summarize,
    crossover,
    report,
    check,
    import_mlxcel,
    verify,
    bench_kernels,
    fleet,
):
    _module.register(app)
# --- end of command registration -------------------------------------------------------------------------------


def main() -> None:
    """Entry point: typer handles usage errors itself (exit 2); InputError becomes one line with exit code 2."""
    try:
        app()
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
