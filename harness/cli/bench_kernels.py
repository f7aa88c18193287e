"""`moecal bench-kernels`: µs per MoE layer step and GB/s of weights, fused vs fallback, over a Dff grid.

The protocol (layer rotation, interleaved rounds, graphs) is harness.measure.kernel_bench.bench_shape; this module
parses the options, prints the table and writes the CSV.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from harness.devices import kernel_cases
from harness.errors import InputError

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.measure.kernel_bench import BenchRow


def _table(rows: list[BenchRow], title: str) -> Table:
    table = Table(title=title)
    for column in ("d_model", "dff", "path", "µs/step", "GB/s", "of copy", "fused speed-up"):
        table.add_column(column, justify="left" if column == "path" else "right")
    fallback = {(r.d_model, r.dff): r.us_per_step for r in rows if r.path == "fallback"}
    for r in rows:
        speedup = fallback.get((r.d_model, r.dff), 0) / r.us_per_step if r.path == "fused" else None
        table.add_row(
            str(r.d_model),
            str(r.dff),
            r.path,
            f"{r.us_per_step:.1f}",
            f"{r.gb_s:.2f}",
            f"{r.frac_of_copy:.0%}",
            "" if not speedup else f"{speedup:.3f}×",
        )
    return table


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(option, text, "expected comma-separated integers") from None
    if not values:
        raise InputError(option, text, "no value given")
    return values


def register(app: typer.Typer) -> None:
    @app.command("bench-kernels")
    def bench_kernels(
        backend: str = typer.Option("auto", "--backend", "-b", help="metal, cuda, cpu or auto."),
        out: Path | None = typer.Option(None, "--out", help="Write the rows as CSV (with provenance) here."),
        d_model: str = typer.Option(",".join(map(str, kernel_cases.BENCH_D_MODELS)), "--d-model"),
        dff: str = typer.Option(",".join(map(str, kernel_cases.BENCH_DFF_GRID)), "--dff"),
        n_experts: int = typer.Option(kernel_cases.BENCH_N_EXPERTS, "--n-experts"),
        top_k: int = typer.Option(kernel_cases.BENCH_TOP_K, "--top-k"),
        bits: int = typer.Option(kernel_cases.BENCH_BITS, "--bits"),
        group_size: int = typer.Option(kernel_cases.BENCH_GROUP_SIZE, "--group-size"),
        dtype: str = typer.Option(kernel_cases.BENCH_DTYPE, "--dtype"),
        library: bool = typer.Option(False, "--library", help="Also time the backend's `library` path."),
        rounds: int = typer.Option(5, "--rounds", min=1, help="Timed samples per path and point (median)."),
        seed: int = typer.Option(0, "--seed"),
        copy_mib: int = typer.Option(1024, "--copy-mib", min=1, help="Size of the copy-bandwidth measurement."),
    ) -> None:
        """µs per layer step, fused vs fallback, over a Dff grid at two d_model values."""
        from harness.devices.backends import get_backend
        from harness.errors import BackendUnavailable
        from harness.measure.kernel_bench import bench_shape, write_csv
        from harness.runs.provenance import collect
        from harness.runs.rundir import refuse_stored

        try:
            shapes = kernel_cases.bench_shapes(
                _int_list(d_model, "--d-model"), _int_list(dff, "--dff"), n_experts, top_k, bits, group_size, dtype
            )
        except ValueError as exc:
            raise InputError("bench-kernels", "shape", str(exc)) from None
        if out is not None:  # before minutes of benchmarking, not after
            refuse_stored(out, "write the benchmark somewhere else (--out)")
        try:
            device = get_backend(backend)
        except BackendUnavailable as exc:  # also a kernel variant from the environment (MOECAL_CUDA_*) that is none
            raise InputError("--backend", backend, str(exc)) from None
        paths = ["fused", "fallback"] + (["library"] if library else [])
        missing = [p for p in paths if p not in device.paths()]
        if missing:
            raise InputError("--library", device.name, f"this backend offers no {', '.join(missing)} path here")
        console = Console(stderr=True)
        copy_gb_s = device.copy_bandwidth(copy_mib << 20) / 1e9
        console.print(
            f"{device.device_name()}: copy bandwidth {copy_gb_s:.1f} GB/s (read + write)",
            highlight=False,
            soft_wrap=True,
        )
        rows: list[BenchRow] = []
        for shape in shapes:
            rows.extend(bench_shape(device, shape, paths, rounds, seed, copy_gb_s))
            done = ", ".join(f"{r.path} {r.us_per_step:.0f} µs" for r in rows[-len(paths) :])
            console.print(f"{shape.label()}: {done}", highlight=False, soft_wrap=True)
        Console().print(_table(rows, f"{device.name}: {device.device_name()}, kernels {rows[0].variant}"))
        if out is not None:
            meta = collect(device.name, device.device_info())
            meta |= {"command": " ".join(["moecal", *sys.argv[1:]]), "copy_gb_s": f"{copy_gb_s:.2f}"}
            write_csv(out, rows, meta)
            console.print(f"wrote {out}", highlight=False, soft_wrap=True)
