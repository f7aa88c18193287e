"""`moecal report INPUT`: the design-doc addendum (markdown) and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.analysis_options import (
    ConfidenceOpt,
    CurrentDefaultOpt,
    ExcludeOpt,
    GridOpt,
    InterpolationOpt,
    MarginOpt,
    RunsArg,
    build_options,
)
from harness.cli.provenance_options import (
    BackendOpt,
    DateOpt,
    GpuOpt,
    HostOpt,
    LibraryPinOpt,
    provenance_overrides,
)
from harness.errors import InputError
from harness.thresholds import DEFAULT_GRID


def report(
    input_paths: RunsArg,
    out: Annotated[Path, typer.Option(metavar="DIR", help="folder for the addendum and the plot")] = Path("reports"),
    previous: Annotated[
        Path | None,
        typer.Option(metavar="RUN", help="an earlier run (any input form) to compare with", show_default=False),
    ] = None,
    exclude: ExcludeOpt = None,
    current_default: CurrentDefaultOpt = None,
    grid: GridOpt = DEFAULT_GRID,
    interpolation: InterpolationOpt = "linear",
    confidence: ConfidenceOpt = None,
    margin: MarginOpt = None,
    mlxcel_src: Annotated[
        Path | None,
        typer.Option(
            "--mlxcel-src",
            help="an mlxcel checkout: its FUSED_MOE_MAX_DFF_* caps are the current defaults, its MLX pin is stated, "
            "and the switch_layers.rs patch targets it (without it: the published defaults, unchecked)",
            show_default=False,
        ),
    ] = None,
    link_base: Annotated[
        Path | None,
        typer.Option(
            "--link-base",
            metavar="DIR",
            help="the folder the addendum will be read from: its links (raw data, plot, record) are relative to it "
            "(default: the --append-to doc's folder, else --out)",
            show_default=False,
        ),
    ] = None,
    append_to: Annotated[
        Path | None,
        typer.Option(
            "--append-to",
            metavar="DESIGN.md",
            help="also insert the addendum into this design doc, replacing an earlier addendum of the same run "
            "(between <!-- moecal:addendum RUN --> markers); the rest of the doc stays byte-identical",
            show_default=False,
        ),
    ] = None,
    date: DateOpt = None,
    host: HostOpt = None,
    backend: BackendOpt = None,
    gpu: GpuOpt = None,
    library_pin: LibraryPinOpt = None,
    unreplicated: Annotated[
        bool,
        typer.Option(
            "--unreplicated",
            help="several runs: write the switch_layers.rs patch for every move, not only those a second session of "
            "the same device class replicates (said in the addendum)",
        ),
    ] = False,
) -> None:
    """Write one run's addendum and plot, or one per-backend defaults addendum over several runs.

    One run: `<run-id>-dff-crossover.md` and `.png` into --out (never over another run's addendum). Several runs
    (backends, devices): `<date>-<backends>-dff-defaults.md` instead (no plot). Beside the addendum: its record
    `<run-id>.json`, the runs in mlxcel's sweep layout `<run-id>-mlxcel.csv` and, when a Metal or CUDA default
    changes, a patch of mlxcel's src/models/switch_layers.rs. Over several runs also `<date>-<backends>-autotune.json`:
    the decided caps as entries in the shape of mlxcel's autotune store (docs/mlxcel.md), read back and validated.
    A move decided by one session is a proposal: the several-run patch carries only moves two sessions of one device
    class agree on (harness.analysis.comparison.replication).
    """
    from harness.analysis.comparison.backend_defaults import run_checks
    from harness.output.addendum.design_doc import append_to as insert_into
    from harness.output.addendum.design_doc import check_doc
    from harness.output.addendum.knob_report import write_knob_report
    from harness.output.addendum.report_data import ADDENDUM_SUFFIX
    from harness.output.defaults.autotune_entry import write_entries
    from harness.output.defaults.defaults_addendum import print_defaults, write_defaults
    from harness.output.mlxcel_source import read_source
    from harness.output.report_files import write_report

    options = build_options(exclude, confidence, margin, current_default, grid, interpolation, input_paths)
    overrides = provenance_overrides(date, host, backend, gpu, library_pin)
    source = read_source(mlxcel_src) if mlxcel_src is not None else None
    if len(input_paths) > 1:
        single = {"--previous": previous, "--append-to": append_to, "--date/--host/…": overrides or None}
        for name, given in single.items():
            if given is not None:
                raise InputError(name, "", "applies to one run's addendum; give a single RUN")
        md_path, defaults = write_defaults(input_paths, out, options, source, unreplicated)
        print_defaults(defaults, typer.echo)
        typer.echo(f"addendum → {md_path}")
        entries_path, entries = write_entries(defaults, md_path.parent, md_path.name.removesuffix("-dff-defaults.md"))
        typer.echo(f"autotune entries → {entries_path}")
        if any(not e["mlxcel_version"] or not e["mlx_commit"] for e in entries):
            typer.echo("autotune entries: a run recorded no mlxcel version or MLX commit; no binary loads its entries")
        return
    if append_to is not None:
        check_doc(append_to)  # a missing doc, a link or broken markers are refused before anything is written
    base = link_base if link_base is not None else append_to.parent if append_to is not None else None
    written = write_report(input_paths[0], out, previous, options, mlxcel=source, overrides=overrides, link_base=base)
    md_path, png_path, decision, record = written
    for line in run_checks(input_paths[0]):
        typer.echo(line)
    typer.echo(f"addendum → {md_path}\nplot     → {png_path}\ndecision: {decision.action} — {decision.reason}")
    knobs = write_knob_report(input_paths[0], md_path, options)  # a knob sweep: the crossover per setting
    if knobs:
        typer.echo(f"knobs    → {knobs[0]}\nknobs plot → {knobs[1]}")
    patch = record.files.patch
    if patch:
        typer.echo(f"patch    → {md_path.parent / Path(patch).name}")
    if decision.apply:
        typer.echo(f"apply: {decision.apply}")
    if append_to is not None:
        run_id = md_path.name.removesuffix(ADDENDUM_SUFFIX)
        replaced = insert_into(append_to, written.markdown, run_id)
        typer.echo(f"{'replaced in' if replaced else 'appended to'} {append_to}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
