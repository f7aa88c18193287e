"""What the built-in workloads (`layer`, `decode`) share: model resolution, point keys, arms, memory planning.

Memory planning is deliberately conservative: a point is planned as fitting only when its estimated footprint is at
most MEMORY_HEADROOM of the memory the backend reports free. Host-side staging (the numpy layer built before
upload) is counted as if it lived in the same memory — true on the CPU backend and on unified-memory machines (Apple
silicon, GB10), a slight over-count on a discrete GPU. A point that does not fit becomes `skip` rows with the
reason, never an out-of-memory crash halfway through a sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Self

from harness.config.catalog import ModelShape, load_catalog, resolve_model
from harness.config.schema import DecodeSettings, LayerSettings, ModelEntry, SweepConfig, resolved_dtype
from harness.config.shapes import MoeShape, gib
from harness.devices.backends import device_facts, get_backend
from harness.devices.backends.base import Backend
from harness.errors import InputError
from harness.measure.protocol import ArmCaps, Point, PointRunner, RunFailed, RunOutcome
from harness.runs.formats import FALLBACK, FUSED, NULL
from harness.runs.provenance_keys import Provenance

# Fraction of the reported free memory a point may plan to use: the rest covers allocator pools and fragmentation,
# the framework's own buffers and whatever else the machine is doing.
MEMORY_HEADROOM = 0.85
# Bytes per copy probe of the bandwidth estimate: large enough to leave every cache, small enough to be quick.
BANDWIDTH_PROBE_BYTES = 1 << 28
ARM_TEXT = {
    "fused": "the backend's fused path (kernel A gate+up+SwiGLU, kernel B down×score)",
    "fallback": "the backend's unfused path (separate gathered GEMVs, activation, weighted sum)",
    "null": "the fallback path again under its own label (A/A noise floor)",
}


class SetupFailed:
    """Stands in for a point whose setup raised (device out of memory, kernel compile error): every run of it
    becomes a `fail` row with the reason, and the sweep goes on to the next point (a re-run retries it)."""

    def __init__(self, reason: str):
        self.reason = reason

    def run(self, path: str) -> RunOutcome:
        raise RunFailed(self.reason)

    def close(self) -> None:
        """Nothing was built."""


def open_or_fail(build: Callable[[], PointRunner]) -> PointRunner:
    """The point's runner, or a SetupFailed carrying why it could not be built."""
    try:
        return build()
    except Exception as exc:  # one point's setup failure must not end the sweep
        return SetupFailed(f"point setup failed: {type(exc).__name__}: {exc}")


class BuiltinWorkload:
    """Base of LayerWorkloadRunner and DecodeWorkloadRunner: holds the live backend (`.backend`, which the sweep
    asks for device provenance) and the resolved model shapes.

    `settings` and `entries` default to the config's workload and models; a layer workload's `decode:` block
    passes its own (with `entries_field` naming where they sit in the config, for error messages).
    """

    kind = ""
    refinable = False

    @classmethod
    def build(cls, config: SweepConfig, config_path: str, backend_name: str, plan_only: bool = False) -> Self:
        """The workload on a live backend (raises BackendUnavailable when it is not usable here); `plan_only`: on
        the backend's device facts (harness.devices.backends.device_facts), enough to list and size points, not to
        run."""
        return cls(config, config_path, device_facts(backend_name) if plan_only else get_backend(backend_name))

    def __init__(
        self,
        config: SweepConfig,
        config_path: str,
        backend: Backend,
        settings: LayerSettings | DecodeSettings | None = None,
        entries: list[ModelEntry] | None = None,
        entries_field: str = "models",
    ):
        self.config = config
        self.settings = settings or config.workload
        assert isinstance(self.settings, LayerSettings | DecodeSettings)
        self.config_path = config_path
        self.backend = backend
        self.dtype = resolved_dtype(self.settings.dtype, backend.name)
        self.entries_field = entries_field
        catalog = load_catalog()
        entries = config.models if entries is None else entries
        self.models = [resolve_model(m, self.field(i), config_path, catalog) for i, m in enumerate(entries)]

    def field(self, index: int) -> str:
        """The config field path of model entry `index` (e.g. 'models[0]')."""
        return f"{self.entries_field}[{index}]"

    def caps(self) -> ArmCaps:
        """Built-in arms call a path directly: there is no environment cap, so the `cap` column stays empty."""
        arms = [FUSED, FALLBACK, *([NULL] if self.config.measure.null_arm else [])]
        return dict.fromkeys(arms, "")

    def describe_arms(self) -> dict[str, str]:
        """How each arm is forced, for meta.json and the report."""
        return {arm: f"{self.backend.name}: {ARM_TEXT[arm]}" for arm in self.caps()}

    def device_info(self) -> dict[str, str]:
        return {"device": self.backend.device_name(), **self.backend.device_info()}

    def describe_run(self, meta: Provenance, points: list[Point], measure_null: bool) -> None:
        """Nothing beyond the common fields: the backend's device info is the provenance."""

    def point_at(self, template: Point, dff: int) -> Point | None:
        """No refinement unless a kind says how (`refinable`)."""
        return None

    def preflight(self) -> None:
        """Nothing external to check: the backend was instantiated (so it is usable) and shapes are checked in
        points(), where each problem can name the config field it comes from."""

    @cached_property
    def device(self) -> str:
        return self.backend.device_name()

    @cached_property
    def bandwidth(self) -> float:
        """Measured copy bandwidth (bytes/s), the basis of every run-time estimate (estimates, not measurements)."""
        return self.backend.copy_bandwidth(BANDWIDTH_PROBE_BYTES)

    @cached_property
    def usable_memory(self) -> tuple[int, int]:
        """(bytes a point may use, bytes free now), read once before the sweep starts."""
        free, _total = self.backend.memory_info()
        return int(free * MEMORY_HEADROOM), free

    def moe_shape(self, model: ModelShape, field: str) -> MoeShape:
        """The routed-expert layer of `model` in this workload's format; a shape the format cannot store is a
        config error naming `field` (the model entry or the dff_grid value it came from)."""
        try:
            return model.moe_shape(self.settings.bits, self.settings.group_size, self.dtype)
        except ValueError as exc:
            raise InputError(self.config_path, field, str(exc)) from None

    def point_key(self, model: ModelShape, shape: MoeShape) -> dict[str, object]:
        return {
            "backend": self.backend.name,
            "device": self.device,
            "workload": self.kind,
            "model": model.name,
            "quant_mode": "affine",
            "d_model": shape.d_model,
            "dff": shape.dff,
            "n_experts": shape.n_experts,
            "top_k": shape.top_k,
            "bits": shape.bits,
            "group_size": shape.group_size,
            "dtype": shape.dtype,
        }

    def skip_reason(self, memory_bytes: int, what: str) -> str:
        """'' when `memory_bytes` fits, else why not and what to change."""
        usable, free = self.usable_memory
        if memory_bytes <= usable:
            return ""
        return (
            f"needs ~{gib(memory_bytes)} but only {gib(usable)} of the {gib(free)} free may be used "
            f"({MEMORY_HEADROOM:.0%}); reduce {what}"
        )
