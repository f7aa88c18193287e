"""The kernel benchmark behind `moecal bench-kernels`: µs per MoE layer step and GB/s of weights, fused vs
fallback.

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
import io
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from harness.backends.base import Backend
from harness.layer import make_inputs, make_layers
from harness.results import format_provenance, write_text_atomic
from harness.rundir import refuse_stored
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
    variant: str  # the backend's kernel variant (CUDA: block shape, act load, split-K), "default" elsewhere
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
    variant_label = getattr(backend, "variant_label", None)
    variant = variant_label() if variant_label is not None else "default"
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
                variant=variant,
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
    """The rows under a `# key: value` provenance header, written atomically; a stored result is never replaced."""
    refuse_stored(path, "write the benchmark somewhere else (--out)")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    text.write(format_provenance(meta))
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _csv_value(value) for key, value in asdict(row).items()})
    write_text_atomic(path, text.getvalue())


def _csv_value(value: object) -> object:
    return f"{value:.4g}" if isinstance(value, float) else value
