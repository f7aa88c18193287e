"""`moecal bisect --src TREE --good C1 --bad C2 --build "CMD {rev}" CONFIG`: the first commit that changed the
decision, after checking that the change reproduces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def bisect(
    config: Annotated[
        Path, typer.Argument(metavar="CONFIG", help="the sweep config to measure each build with", show_default=False)
    ],
    src: Annotated[Path, typer.Option("--src", metavar="MLXCEL_TREE", help="the mlxcel checkout (clean)")],
    good: Annotated[str, typer.Option("--good", metavar="C1", help="a commit whose decision is the old one")],
    bad: Annotated[str, typer.Option("--bad", metavar="C2", help="a later commit whose decision differs")],
    build: Annotated[
        str,
        typer.Option(
            "--build",
            metavar="CMD {rev}",
            help="the shell command that builds the checked-out commit, run in MLXCEL_TREE; {rev} is its hash",
        ),
    ],
    out: Annotated[
        Path, typer.Option(metavar="DIR", help="folder of the run directories, one per built commit")
    ] = Path("results/_scratch/bisect"),
    rounds: Annotated[
        int | None, typer.Option(min=1, help="rounds per sweep (default: the config's measure.rounds)")
    ] = None,
) -> None:
    """The first commit whose decision differs, after checking that the change reproduces.

    Builds and sweeps both ends first; when `moecal check`'s gate (throughput threshold lifted) finds their
    decisions agree, prints "does not reproduce" and stops (exit 1). Otherwise bisects the commits between them
    (git rev-list --ancestry-path), sweeping only the points the decision turns on, and names the first commit whose
    decision differs from the good end's (exit 0). The tree is put back on its branch or commit afterwards.
    """
    from harness.measure.bisect import Tree, run_bisect

    result = run_bisect(Tree(src, build), good, bad, config, out, rounds, typer.echo)
    typer.echo(f"builds: {len(result.builds)} ({len(result.builds) - 2} after the two ends)")
    if result.first_bad is None:
        typer.echo(f"bisect: {result.status}")
        raise typer.Exit(1)
    typer.echo(f"first commit whose decision differs: {result.first_bad}")


def register(app: typer.Typer) -> None:
    app.command("bisect")(bisect)
