"""`moecal import-mlxcel CSV`: an mlxcel sweep CSV as a run directory (samples.csv + meta.json)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.provenance_options import (
    BackendOpt,
    DateOpt,
    GpuOpt,
    HostOpt,
    LibraryPinOpt,
    provenance_overrides,
)
from harness.errors import InputError
from harness.thresholds import MAX_CAP

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.runs.mlxcel_csv import MlxcelImport


def import_mlxcel(
    csv_path: Annotated[Path | None, typer.Argument(help="the mlxcel sweep CSV", show_default=False)] = None,
    fallback: Annotated[
        list[Path] | None,
        typer.Option(
            help="bench_decode.sh CSV of the fallback arm (repeat: one per run; the i-th --fallback and --fused "
            "files are pass i, measure the pairs at different times)"
        ),
    ] = None,
    fused: Annotated[list[Path] | None, typer.Option(help="bench_decode.sh CSV of the fused arm (repeat)")] = None,
    models: Annotated[
        Path | None, typer.Option(help="with --fallback/--fused: the model folders (config.json gives each Dff)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="run directory to write (default: results/mlxcel-<name>)")] = None,
    date: DateOpt = None,
    host: HostOpt = None,
    backend: BackendOpt = None,
    gpu: GpuOpt = None,
    device: Annotated[str | None, typer.Option(help="provenance: device name")] = None,
    library_pin: LibraryPinOpt = None,
    current_default: Annotated[
        int | None, typer.Option(min=1, max=MAX_CAP, help="provenance: the cap in force when measured")
    ] = None,
    fused_arm: Annotated[str | None, typer.Option(help="engine_bench_rounds.py JSONL: the fused arm's name")] = None,
    fallback_arm: Annotated[
        str | None, typer.Option(help="JSONL: the fallback arm's name (its `-null` arm is the A/A arm)")
    ] = None,
    dff: Annotated[int | None, typer.Option(min=1, max=MAX_CAP, help="JSONL: the model's expert Dff")] = None,
) -> None:
    """Each run becomes a sample row (round = run index); NA runs become skip rows with the reason.

    `--fallback A.csv --fused B.csv --models DIR` reads mlxcel's scripts/bench_decode.sh CSVs instead, one file per
    arm and run; files that differ in mlxcel version, prompt, token budget, date or hardware are refused. The model
    folders class each point as `init` does (A/A, declined, ignores the cap). Without --current-default the cap in
    force is the backend's compiled-in constant (rocm and cuda: FUSED_MOE_MAX_DFF_CUDA; metal: _METAL). The i-th
    files of both arms are pass i: two pairs or more let the decision test their agreement (drift of one arm); one
    visit per point (a single pair, a sweep CSV) withholds any raise or lower.
    A `.jsonl` of mlxcel's scripts/engine_bench_rounds.py is read with --fused-arm, --fallback-arm and --dff
    (harness.runs.engine_rounds_jsonl)."""
    from harness.runs.import_checks import check_distinct_files
    from harness.runs.mlxcel_bench_csv import read_bench_pair
    from harness.runs.mlxcel_csv import import_run_dir
    from harness.runs.rundir import DEFAULT_RESULTS

    if (fallback or fused) and csv_path is not None:
        raise InputError(str(csv_path), "CSV", "give a sweep CSV or --fallback/--fused bench_decode.sh CSVs, not both")
    read = None
    if fallback or fused:
        if not (fallback and fused):
            raise InputError("--fallback/--fused", "", "bench_decode.sh CSVs need both arms: --fallback A --fused B")
        check_distinct_files(fallback, fused)
        csv_path = fused[0]

        def read(_: object) -> MlxcelImport:
            return read_bench_pair(fallback, fused, models)

    elif csv_path is not None and csv_path.suffix == ".jsonl":
        from harness.runs.engine_rounds_jsonl import read_engine_rounds

        if not (fused_arm and fallback_arm and dff):
            raise InputError(str(csv_path), "--fused-arm/--fallback-arm/--dff", "a JSONL import needs all three")
        jsonl, arms = csv_path, (fused_arm, fallback_arm, dff)

        def read(_: object) -> MlxcelImport:
            return read_engine_rounds(jsonl, *arms)

    elif csv_path is None:
        raise InputError("import-mlxcel", "CSV", "give an mlxcel sweep CSV, or --fallback A.csv --fused B.csv")
    extra = {
        **provenance_overrides(date, host, backend, gpu, library_pin),
        "device": device,
        "current_default": current_default,
    }
    run_dir = out or DEFAULT_RESULTS / f"mlxcel-{csv_path.stem}"
    imported = import_run_dir(csv_path, run_dir, {k: str(v) for k, v in extra.items() if v is not None}, read)
    ok = int((imported.samples["status"] == "ok").sum())
    typer.echo(f"{ok} runs imported from {csv_path} → {run_dir}")
    for line in imported.skipped:
        typer.echo(f"skipped: {line}")


def register(app: typer.Typer) -> None:
    app.command("import-mlxcel")(import_mlxcel)
