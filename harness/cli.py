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

# --- command registration: each command module defines `register(app)` --------------------------------------
from harness.commands import (  # noqa: E402
    bench_kernels,
    check,
    crossover,
    doctor,
    import_mlxcel,
    plan,
    report,
    summarize,
    sweep,
    verify,
)

for _module in (sweep, plan, doctor, summarize, crossover, report, check, import_mlxcel, verify, bench_kernels):
    _module.register(app)
# --- end of command registration -------------------------------------------------------------------------------


# Options whose value may be left out: `--resume` alone means "the newest unfinished run", `--resume DIR` that one.
OPTIONAL_VALUE = {"--resume": ""}


def _optional_values(argv: list[str]) -> list[str]:
    """Spell a value-less optional option as `--opt=<default>`, the form click parses. A following word is the
    option's value unless it is another option or a YAML file (the sweep's CONFIG argument)."""
    out: list[str] = []
    for index, arg in enumerate(argv):
        following = argv[index + 1] if index + 1 < len(argv) else None
        if arg in OPTIONAL_VALUE and (
            following is None or following.startswith("-") or following.endswith((".yaml", ".yml"))
        ):
            out.append(f"{arg}={OPTIONAL_VALUE[arg]}")
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: typer handles usage errors itself (exit 2); InputError becomes one line with exit code 2."""
    if argv is not None:  # an in-process call (tests): what a sweep records as its command line
        sys.argv = ["moecal", *argv]
    try:
        app(args=_optional_values(sys.argv[1:]), prog_name="moecal")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
