"""The `layer` workload: one MoE layer decode step per call, at each model shape × dff in `dff_grid`.

Fixing the model shape and sweeping only Dff separates the kernel crossover from whole-model effects (the published
mlxcel sweeps used one model per Dff, so Dff was confounded with d_model, top_k and layer count).

Cache rule. A decode token streams every layer's weights from memory once, so a step must not find its weights in
cache. The runner rotates over `copies` independent layers, each with its own input (its own expert choice):

    copies = ceil(2 × cache_bytes / step_bytes) + 1

where step_bytes = the packed weights + scales + biases of the top_k experts one step reads and cache_bytes is
the backend's last-level cache (GPU L2, Apple SLC upper bound, CPU L3). Between two visits to the same copy the
other copies stream at least twice the cache size, so an LRU-like cache has evicted it. `workload.copies` overrides
the rule; a point whose copies do not fit in memory is skipped (see harness.measure.workloads.builtin).

Timing. Each timed run repeats steps (rotating over the copies) for `steps` steps, calibrated once per point when it
opens so a run lasts about `min_run_s`; both arms use the same step count, so their runs are comparable. The
metric is steps/s (`tok_s`; µs/step = seconds / tokens × 1e6). On a backend that offers CUDA-graph replay
(`backend.graph`), each (path, copy) step is captured once and replayed, so per-launch Python overhead — which
would favour the path with fewer launches for a reason that is not the kernels — stays out of the timing.

Parity. Every run first computes one untimed step on copy 0 and records its relative error against the float64
reference (computed once per point) in `rel_rms`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from harness.config.catalog import ModelShape
from harness.config.schema import LayerSettings, SweepConfig
from harness.config.shapes import MoeShape
from harness.devices.backends.base import Backend
from harness.devices.quant_layer import make_inputs, make_layer
from harness.devices.reference import moe_reference, rel_err
from harness.devices.timing import time_calls
from harness.errors import InputError
from harness.measure.protocol import Point, PointRunner, RunFailed, RunOutcome
from harness.measure.workloads.builtin import BuiltinWorkload, open_or_fail
from harness.measure.workloads.decode import DecodeWorkloadRunner

# Calibration times this many rotations per path (after one untimed rotation that compiles and faults pages in).
CALIBRATION_ROTATIONS = 1


def copies_for_cache(step_bytes: int, cache_bytes: int) -> int:
    """The rotation size that keeps a step's weights out of a `cache_bytes` cache (module docstring)."""
    return math.ceil(2 * cache_bytes / step_bytes) + 1


def layer_memory_bytes(shape: MoeShape, copies: int) -> int:
    """Device copies of the whole layer (all experts) plus one host-side layer being built before upload."""
    return (copies + 1) * shape.expert_bytes()


class LayerRunner:
    """One point: `copies` layers on the device, their inputs, the reference output, the calibrated step count."""

    def __init__(
        self,
        backend: Backend,
        shape: MoeShape,
        copies: int,
        seed: int,
        min_run_s: float,
        paths: Sequence[str] = ("fused", "fallback"),
    ):
        self.backend = backend
        # One random host layer, uploaded `copies` times: what defeats the cache is distinct device memory, not
        # distinct values, and generating random packed words (~0.2-0.8 GB/s on one core) would otherwise dominate
        # a GPU sweep's wall time. Each copy gets its own input, so each step selects its own experts.
        host = make_layer(shape, seed)
        self.layers: list[Any] = [backend.upload(host) for _ in range(copies)]
        self.inputs: list[tuple] = []
        for copy in range(copies):
            x, indices, scores = make_inputs(shape, seed + copy)
            if copy == 0:
                self.reference = moe_reference(host, x, indices, scores)
            self.inputs.append(backend.upload_inputs(x, indices, scores, shape.dtype))
        del host
        self.steps_by_path = {name: self._step_calls(name) for name in paths}
        self.steps = self._calibrate(min_run_s)

    def _step_calls(self, path: str) -> list[Callable[[], Any]]:
        """One zero-argument call per copy running one step of `path` (a CUDA-graph replay where offered)."""
        graph = getattr(self.backend, "graph", None)
        step = self.backend.paths()[path]
        if graph is not None:
            return [graph(path, *inputs, layer) for inputs, layer in zip(self.inputs, self.layers, strict=True)]
        return [
            lambda inputs=inputs, layer=layer: step(*inputs, layer)
            for inputs, layer in zip(self.inputs, self.layers, strict=True)
        ]

    def _rotation(self, path: str) -> Callable[[], Any]:
        """A call that runs the next copy's step each time, starting from copy 0."""
        calls = itertools.cycle(self.steps_by_path[path])
        return lambda: next(calls)()

    def _calibrate(self, min_run_s: float) -> int:
        """Steps per timed run: enough for the slower path to last `min_run_s`, a whole number of rotations."""
        copies = len(self.layers)
        per_step = 0.0
        for path in self.steps_by_path:
            time_calls(self.backend, self._rotation(path), copies)  # compile, fault pages in, warm clocks
            seconds = time_calls(self.backend, self._rotation(path), copies * CALIBRATION_ROTATIONS)
            per_step = max(per_step, seconds)
        rotations = max(1, math.ceil(min_run_s / (per_step * copies)))
        return rotations * copies

    def run(self, path: str) -> RunOutcome:
        try:
            out = self.steps_by_path[path][0]()
            self.backend.synchronize()
            parity = rel_err(self.backend.to_numpy(out), self.reference)
            seconds = time_calls(self.backend, self._rotation(path), self.steps) * self.steps
        except Exception as exc:  # a device error in one run is a `fail` row; the sweep goes on
            raise RunFailed(f"{path} step failed: {type(exc).__name__}: {exc}") from exc
        return RunOutcome(tokens=self.steps, seconds=seconds, tok_s=self.steps / seconds, rel_rms=parity)

    def close(self) -> None:
        """Drop the device layers so the next point can reuse the memory."""
        self.layers.clear()
        self.inputs.clear()
        self.steps_by_path.clear()


class LayerWorkloadRunner(BuiltinWorkload):
    """Points = each model shape × each dff of `dff_grid` (the model's own dff when the grid is empty), then the
    points of the optional `decode:` block (a synthetic decode of its models, run by DecodeWorkloadRunner)."""

    kind = "layer"
    refinable = True

    def __init__(self, config: SweepConfig, config_path: str, backend: Backend):
        super().__init__(config, config_path, backend)
        assert isinstance(self.settings, LayerSettings)
        self.decode = DecodeWorkloadRunner.follow_up(self) if self.settings.decode else None

    def _grid(self, model: ModelShape, index: int) -> list[tuple[int, str]]:
        """(dff, config field it came from) for one model entry."""
        assert isinstance(self.settings, LayerSettings)
        if not self.settings.dff_grid:
            return [(model.dff, self.field(index))]
        return [(dff, f"workload.dff_grid[{j}]") for j, dff in enumerate(self.settings.dff_grid)]

    def points(self) -> list[Point]:
        return self.layer_points() + (self.decode.points() if self.decode else [])

    def layer_points(self) -> list[Point]:
        assert isinstance(self.settings, LayerSettings)
        cache = self.backend.cache_bytes()
        out: list[Point] = []
        seen: dict[tuple, int] = {}
        for index, base in enumerate(self.models):
            for dff, field in self._grid(base, index):
                model = base.model_copy(update={"dff": dff})
                shape = self.moe_shape(model, field)
                key = self.point_key(model, shape)
                identity = tuple(key.values())
                if identity in seen:
                    raise InputError(
                        self.config_path, self.field(index), f"repeats the point of {self.field(seen[identity])}"
                    )
                seen[identity] = index
                step_bytes = shape.weight_bytes_per_step()
                copies = self.settings.copies or copies_for_cache(step_bytes, cache)
                memory = layer_memory_bytes(shape, copies)
                out.append(
                    Point(
                        key=key,
                        caps=self.caps(),
                        label=f"{model.name} d{shape.d_model}/f{shape.dff}",
                        skip_reason=self.skip_reason(memory, f"workload.copies ({copies}) or n_experts"),
                        memory_bytes=memory,
                        run_seconds_estimate=max(self.settings.min_run_s, 2 * step_bytes / self.bandwidth),
                        extra={"shape": shape, "copies": copies},
                    )
                )
        return out

    def point_at(self, template: Point, dff: int) -> Point | None:
        """The layer point like `template` at `dff`: the points `dff_grid = [dff]` makes (so the memory and skip
        rules apply), the one whose key matches the template's but for Dff."""
        assert isinstance(self.settings, LayerSettings)
        settings = self.settings
        self.settings = settings.model_copy(update={"dff_grid": [dff]})
        try:
            candidates = self.layer_points()
        finally:
            self.settings = settings
        same = [p for p in candidates if all(p.key[k] == v for k, v in template.key.items() if k != "dff")]
        return same[0] if same else None

    def open(self, point: Point) -> PointRunner:
        settings = self.settings
        assert isinstance(settings, LayerSettings)
        if point.key["workload"] == "decode" and self.decode:
            return self.decode.open(point)
        shape, copies = point.extra["shape"], point.extra["copies"]
        return open_or_fail(lambda: LayerRunner(self.backend, shape, copies, settings.seed, settings.min_run_s))


WORKLOAD = LayerWorkloadRunner
