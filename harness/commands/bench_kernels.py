"""`moecal bench-kernels`: µs per MoE layer step and GB/s of weights, fused vs fallback, over a Dff grid.

A decode step streams its top_k experts' weights from memory (every layer of a model is visited once per token),
so timing one layer over and over would measure cache, not memory. Each point therefore builds
`copies = max(1, ceil(2 · cache_bytes / step_bytes))` independent layers (cache_bytes = the backend's
last-level cache, step_bytes = the packed weights + scales + biases one step reads) and every call steps the
next copy in turn: a full rotation touches at least twice the cache, so a step's weights were evicted before
they are read again. One sample = a whole number of rotations, at least MIN_SAMPLE_SECONDS long, timed by
`harness.timing.time_calls`; rounds interleave the paths (rotating their order) and the reported figure is the
median over rounds. GB/s = step_bytes / seconds; frac_of_copy compares it with the backend's measured copy
bandwidth (read + write), the memory ceiling.

Backends that can capture a whole step into one replayable call (`graph`, CUDA graphs) are timed through it, so
the host-side cost of issuing each launch from Python — not part of the kernels, and far smaller in a C++
engine — does not decide the comparison.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from harness import kernel_cases
from harness.backends import BackendUnavailable, get_backend
from harness.backends.base import Backend
from harness.errors import InputError
from harness.layer import make_inputs, make_layers
from harness.provenance import collect
from harness.results import format_provenance
from harness.shapes import MoeShape
from harness.timing import time_calls

MIN_SAMPLE_SECONDS = 0.02  # long enough that timer and thread wake-up jitter stay below ~1%


@dataclass(frozen=True)
class BenchRow:
    backend: str
    device: str
    d_model: int
    dff: int
    n_experts: int
    top_k: int
    bits: int
    group_size: int
    dtype: str
    path: str
    us_per_step: float
    us_min: float
    us_max: float
    gb_s: float
    copy_gb_s: float
    frac_of_copy: float
    copies: int
    steps_per_sample: int
    rounds: int


COLUMNS = [f.name for f in fields(BenchRow)]


def rotation_copies(shape: MoeShape, cache_bytes: int) -> int:
    """Layer copies to rotate over so that one rotation reads at least twice the last-level cache."""
    return max(1, math.ceil(2 * cache_bytes / shape.weight_bytes_per_step()))


def _steppers(backend: Backend, path: str, device_layers: list, inputs: tuple) -> list[Callable]:
    """One zero-argument call per layer copy that runs one step of `path` on it."""
    graph = getattr(backend, "graph", None)
    if graph is not None:
        return [graph(path, *inputs, layer) for layer in device_layers]
    step = backend.paths()[path]
    return [lambda layer=layer: step(*inputs, layer) for layer in device_layers]


def _rotation(steppers: list[Callable]) -> Callable[[], object]:
    """A call that runs the next copy's step each time it is called."""
    position = [0]

    def call() -> object:
        stepper = steppers[position[0]]
        position[0] = (position[0] + 1) % len(steppers)
        return stepper()

    return call


def bench_shape(
    backend: Backend, shape: MoeShape, paths: list[str], rounds: int, seed: int, copy_gb_s: float
) -> list[BenchRow]:
    """Time every path at one shape (see the module docstring for the protocol)."""
    copies = rotation_copies(shape, backend.cache_bytes())
    device_layers = [backend.upload(layer) for layer in make_layers(shape, seed, copies)]
    inputs = backend.upload_inputs(*make_inputs(shape, seed), shape.dtype)
    calls = {path: _rotation(_steppers(backend, path, device_layers, inputs)) for path in paths}
    steps = {}
    for path, call in calls.items():  # warm-up: compile, fault pages in; also sizes the samples
        warm = time_calls(backend, call, copies)
        steps[path] = copies * max(1, math.ceil(MIN_SAMPLE_SECONDS / (warm * copies)))
    samples: dict[str, list[float]] = {path: [] for path in paths}
    for index in range(rounds):
        order = paths[index % len(paths) :] + paths[: index % len(paths)]
        for path in order:
            samples[path].append(time_calls(backend, calls[path], steps[path]))
    rows = []
    for path in paths:
        seconds = statistics.median(samples[path])
        gb_s = shape.weight_bytes_per_step() / seconds / 1e9
        rows.append(
            BenchRow(
                backend=backend.name,
                device=backend.device_name(),
                **shape.as_dict(),
                path=path,
                us_per_step=seconds * 1e6,
                us_min=min(samples[path]) * 1e6,
                us_max=max(samples[path]) * 1e6,
                gb_s=gb_s,
                copy_gb_s=copy_gb_s,
                frac_of_copy=gb_s / copy_gb_s,
                copies=copies,
                steps_per_sample=steps[path],
                rounds=rounds,
            )
        )
    return rows


def write_csv(path: Path, rows: list[BenchRow], meta: dict) -> None:
    """The rows under a `# key: value` provenance header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(format_provenance(meta))
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _csv_value(value) for key, value in asdict(row).items()})


def _csv_value(value: object) -> object:
    return f"{value:.4g}" if isinstance(value, float) else value


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
        try:
            shapes = kernel_cases.bench_shapes(
                _int_list(d_model, "--d-model"), _int_list(dff, "--dff"), n_experts, top_k, bits, group_size, dtype
            )
        except ValueError as exc:
            raise InputError("bench-kernels", "shape", str(exc)) from None
        try:
            device = get_backend(backend)
        except BackendUnavailable as exc:
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
        Console().print(_table(rows, f"{device.name}: {device.device_name()}"))
        if out is not None:
            meta = collect(device.name, device.device_info())
            meta |= {"command": " ".join(["moecal", *sys.argv[1:]]), "copy_gb_s": f"{copy_gb_s:.2f}"}
            write_csv(out, rows, meta)
            console.print(f"wrote {out}", highlight=False, soft_wrap=True)
