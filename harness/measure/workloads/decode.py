"""The `decode` workload: greedy decode of a synthetic MoE model (harness.measure.workloads.decoder) at a catalog
model's shapes, one point per model; metric decode tok/s.

Each run decodes `warmup_tokens` untimed tokens, then times `tokens` more (from the same start token and KV state
every run, so runs of one path do identical work). When a point opens, one untimed decode with the fallback path
fixes the reference: its timed tokens (for `tokens_agree`: positions where an arm's greedy token equals the
fallback's, so the fallback arm agrees with itself unless the device is nondeterministic) and the float64 reference
of its first MoE call (layer 0, first token), whose inputs do not depend on the arm — every arm's output of that
call is compared with it (`rel_rms`).

Memory: the whole model must fit (harness.measure.workloads.builtin plans it); reduce `layers` (or `context`, `vocab`)
in the config's model entry to fit. The time estimate is bytes per token / measured copy bandwidth — a lower
bound that ignores per-operation overhead, labelled as an estimate in `moecal plan`.
"""

from __future__ import annotations

import gc

import numpy as np

from harness.config.backend_specs import backend_spec
from harness.config.schema import DecodeSettings, LayerSettings
from harness.devices.backends.base import Backend
from harness.devices.reference import moe_reference, rel_err
from harness.devices.timing import time_calls
from harness.measure.protocol import Point, PointRunner, RunFailed, RunOutcome
from harness.measure.workloads.arrays import array_ops
from harness.measure.workloads.builtin import BuiltinWorkload, open_or_fail
from harness.measure.workloads.decoder import Capture, DecoderShapes, SyntheticDecoder


class DecodeRunner:
    """One model on the device plus the fallback reference (tokens and the first MoE call's float64 output)."""

    def __init__(self, backend: Backend, shapes: DecoderShapes, settings: DecodeSettings):
        self.backend = backend
        self.warmup, self.tokens = settings.warmup_tokens, settings.tokens
        self.decoder = SyntheticDecoder(backend, array_ops(backend.name, shapes.moe.dtype), shapes, settings.seed)
        capture: list[Capture] = []
        generated = self.decoder.generate("fallback", self.decoder.start_token, 0, self.warmup + self.tokens, capture)
        self.reference_tokens = self.decoder.host_tokens(generated[self.warmup :])
        first = capture[0]
        self.reference = moe_reference(
            self.decoder.routed_layer,
            backend.to_numpy(first.x),
            backend.to_numpy(first.indices).astype(np.int64),
            backend.to_numpy(first.scores),
        )

    def run(self, path: str) -> RunOutcome:
        capture: list[Capture] = []
        timed: list = []
        try:
            warm = self.decoder.generate(path, self.decoder.start_token, 0, self.warmup, capture)
            last = warm[-1] if warm else self.decoder.start_token

            def decode() -> None:
                timed.extend(self.decoder.generate(path, last, self.warmup, self.tokens, capture))

            seconds = time_calls(self.backend, decode, 1)
            tokens = self.decoder.host_tokens(timed)
            parity = rel_err(self.backend.to_numpy(capture[0].out), self.reference)
        except Exception as exc:  # a device error in one run is a `fail` row; the sweep goes on
            raise RunFailed(f"{path} decode failed: {type(exc).__name__}: {exc}") from exc
        agree = sum(a == b for a, b in zip(tokens, self.reference_tokens, strict=True))
        return RunOutcome(
            tokens=self.tokens, seconds=seconds, tok_s=self.tokens / seconds, rel_rms=parity, tokens_agree=agree
        )

    def close(self) -> None:
        """Drop the model so the next point can reuse the memory."""
        del self.decoder
        gc.collect()


class DecodeWorkloadRunner(BuiltinWorkload):
    """One point per model entry (the catalog shape with the entry's overrides, e.g. fewer layers)."""

    kind = "decode"

    @classmethod
    def follow_up(cls, layer: BuiltinWorkload) -> DecodeWorkloadRunner:
        """The decode run a layer workload's `decode:` block asks for, in the layer workload's format."""
        assert isinstance(layer.settings, LayerSettings) and layer.settings.decode is not None
        block = layer.settings.decode
        quant = layer.settings.model_dump(include={"bits", "group_size", "dtype", "seed"})
        runs = block.model_dump(include={"tokens", "warmup_tokens", "context"})
        settings = DecodeSettings(kind="decode", **quant, **runs)
        return cls(layer.config, layer.config_path, layer.backend, settings, block.models, "workload.decode.models")

    def shapes(self, index: int) -> DecoderShapes:
        assert isinstance(self.settings, DecodeSettings)
        model = self.models[index]
        moe = self.moe_shape(model, self.field(index))
        shared = (
            model.shared_shape(self.settings.bits, self.settings.group_size, self.dtype) if model.shared_dff else None
        )
        return DecoderShapes(
            model=model,
            moe=moe,
            shared=shared,
            dense_bytes=4 if self.dtype == "float32" or backend_spec(self.backend.name).emulates_half else 2,
            context=self.settings.context,
            new_tokens=self.settings.warmup_tokens + self.settings.tokens,
        )

    def points(self) -> list[Point]:
        assert isinstance(self.settings, DecodeSettings)
        out = []
        for index, model in enumerate(self.models):
            shapes = self.shapes(index)
            memory = shapes.memory_bytes()
            seconds = shapes.new_tokens * shapes.bytes_per_token() / self.bandwidth
            out.append(
                Point(
                    key=self.point_key(model, shapes.moe),
                    caps=self.caps(),
                    label=f"{model.name} decode L{model.layers}",
                    skip_reason=self.skip_reason(
                        memory, f"{self.field(index)}.layers ({model.layers}), context or vocab"
                    ),
                    memory_bytes=memory,
                    run_seconds_estimate=seconds,
                    extra={"shapes": shapes},
                )
            )
        return out

    def open(self, point: Point) -> PointRunner:
        settings = self.settings
        assert isinstance(settings, DecodeSettings)
        return open_or_fail(lambda: DecodeRunner(self.backend, point.extra["shapes"], settings))


WORKLOAD = DecodeWorkloadRunner
