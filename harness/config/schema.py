"""Sweep configuration: YAML → validated pydantic model.

The schema is a contract with users' config files: keys may be added, never renamed. Any problem is reported as
`InputError(<file>, <field path>, <problem>)`, which the CLI prints as one line with exit code 2.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, get_args

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from harness.config import knobs as launch_knobs
from harness.config.backend_specs import BACKEND_NAMES, backend_spec
from harness.config.duration import parse_duration
from harness.config.kind_meaning import UNKNOWN, KindMeaning
from harness.errors import InputError
from harness.json_input import MAX_NESTING
from harness.policy import Policy, PolicyError
from harness.thresholds import CONFIDENCE, MARGIN, MAX_CAP

DEFAULT_METRIC_REGEX = r"Decode:\s+[0-9.]+ ms \(([0-9.]+) tok/s\)"
DEFAULT_CAP_ENV = "MLXCEL_FUSED_MOE_MAX_DFF"
PARITY_CHECK_ENV = "MLXCEL_FUSED_MOE_PARITY_CHECK"
PARITY_THRESHOLD_ENV = "MLXCEL_FUSED_MOE_PARITY_THRESHOLD"
CONTEXT_PLACEHOLDER = "prompt_tokens"  # a command workload's context axis (CommandSettings.prompt_tokens)
MAX_DIM = 1 << 20  # Dff and every shape field: far above any model, low enough that sizes derived from it stay sane
# `{dff:>999999999}` would build a gigabyte argument per run; no benchmark flag needs a field padded wider than this
MAX_FORMAT_WIDTH = 64
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # what a shell accepts as a variable name (no "=", no NUL)


def _no_bool(value: object) -> object:
    """YAML's `true` would pass as 1 where an integer is meant: refuse it."""
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")
    return value


Dim = Annotated[int, BeforeValidator(_no_bool), Field(gt=0, le=MAX_DIM)]  # a Dff or a shape field
Cap = Annotated[int, BeforeValidator(_no_bool), Field(ge=0, le=MAX_CAP)]


def _env_name(value: str) -> str:
    if not ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return value


class Strict(BaseModel):
    """Unknown keys are errors: a typo in a config must not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


def _check_regex(pattern: str, min_groups: int) -> str:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    if compiled.groups < min_groups:
        raise ValueError(f"regular expression {pattern!r} needs a capture group (group 1 = the metric)")
    return pattern


class DispatchProbe(Strict):
    """A regex that must match the fused arm's output; if it never does, the point is a null point."""

    regex: str

    @field_validator("regex")
    @classmethod
    def _valid(cls, value: str) -> str:
        return _check_regex(value, 0)


class DispatchCheck(Strict):
    """The untimed verification pass (harness.measure.dispatch): per model, one fused-arm and one fallback-arm run with
    mlxcel's in-kernel parity probe switched on (`check_env`=1, `threshold_env`=`threshold`). The probe logs a
    `[fused-moe-parity]` line for a fused-kernel call only when the fused kernel runs, so its lines say which path
    ran without any trace switch, and they carry the call's numerical parity. The probe adds evals to every MoE
    call, so these runs are never timed and the timed runs never carry its variables."""

    enabled: bool = True
    check_env: str = Field(PARITY_CHECK_ENV, min_length=1)
    threshold_env: str = Field(PARITY_THRESHOLD_ENV, min_length=1)
    threshold: float = Field(0.0, ge=0)  # 0: every call is logged, so every fused call is seen

    @field_validator("check_env", "threshold_env")
    @classmethod
    def _env(cls, value: str) -> str:
        return _env_name(value)  # "A=B" would reach the benchmark as no variable at all

    @model_validator(mode="after")
    def _two_variables(self) -> DispatchCheck:
        if self.check_env == self.threshold_env:  # the threshold's value would overwrite the switch's "1"
            raise ValueError(f"check_env and threshold_env are both {self.check_env!r}: the probe never switches on")
        return self


class Parity(Strict):
    """Where a command run's generated output (text or token ids) is captured for greedy parity: `regex` on the
    run's output (group 1 of every match, joined by spaces) or `output_file`, a file the command writes
    (`{placeholders}` as in `command`)."""

    regex: str | None = None
    output_file: str | None = None

    @field_validator("regex")
    @classmethod
    def _valid(cls, value: str | None) -> str | None:
        return None if value is None else _check_regex(value, 1)

    @model_validator(mode="after")
    def _one_source(self) -> Parity:
        if (self.regex is None) == (self.output_file is None):
            raise ValueError("give exactly one of regex or output_file")
        return self


class CommandSettings(Strict):
    """An external decode benchmark; each arm is forced through an environment variable (`cap_env`)."""

    kind: Literal["command"]
    command: list[str] = Field(min_length=1)
    cap_env: str = DEFAULT_CAP_ENV
    fused_cap: Cap = 20000
    fallback_cap: Cap = 1
    metric_regex: str = DEFAULT_METRIC_REGEX
    timeout_s: float = Field(600, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    dispatch_probe: DispatchProbe | None = None
    dispatch_check: DispatchCheck | None = None
    parity: Parity | None = None
    # the context axis: the command's `{prompt_tokens}` filled with each depth, every depth its own points and its
    # own shape family (a crossover per depth), e.g. [512, 8192] with `--prompt-tokens {prompt_tokens}`
    prompt_tokens: list[Annotated[int, BeforeValidator(_no_bool), Field(gt=0, le=MAX_DIM)]] | None = Field(
        None, min_length=1
    )

    @field_validator("prompt_tokens")
    @classmethod
    def _distinct_depths(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"a depth is listed twice ({value})")
        return value

    @model_validator(mode="after")
    def _axis_in_command(self) -> CommandSettings:
        """A context axis the command never passes would measure one depth under several labels; a placeholder
        without the axis would reach the binary unfilled."""
        used = any(f == CONTEXT_PLACEHOLDER for arg in self.command for _, f, _, _ in string.Formatter().parse(arg))
        if self.prompt_tokens is not None and not used:
            raise _FieldError(("workload", "prompt_tokens"), "the command has no {prompt_tokens} to pass each depth")
        if used and self.prompt_tokens is None:
            raise _FieldError(("workload", "command"), "uses {prompt_tokens}: give the depths (prompt_tokens: [...])")
        return self

    @field_validator("metric_regex")
    @classmethod
    def _valid(cls, value: str) -> str:
        return _check_regex(value, 1)

    @field_validator("cap_env")
    @classmethod
    def _cap_env(cls, value: str) -> str:
        return _env_name(value)  # "" or "A=B" would leave both arms unforced

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _env_name(name)
        return value

    @field_validator("command")
    @classmethod
    def _placeholders_parse(cls, value: list[str]) -> list[str]:
        for index, arg in enumerate(value):
            try:
                list(string.Formatter().parse(arg))
            except ValueError as exc:
                raise ValueError(f"item {index} {arg!r}: bad placeholder: {exc}") from None
        return value

    @model_validator(mode="after")
    def _distinct_caps(self) -> CommandSettings:
        if self.fused_cap == self.fallback_cap:
            raise ValueError("fused_cap and fallback_cap are equal: both arms would run the same code")
        return self

    @model_validator(mode="after")
    def _probe_env_is_not_the_cap(self) -> CommandSettings:
        """The verification pass sets the probe's variables after the cap: one named like the cap would overwrite
        it with "1" or the threshold, so both arms would silently run the binary's default path."""
        check = self.dispatch_check
        for field in ("check_env", "threshold_env"):
            if check is not None and getattr(check, field) == self.cap_env:
                raise _FieldError(
                    ("workload", "dispatch_check", field),
                    f"{self.cap_env!r} is the cap variable (cap_env): the probe would overwrite the arm's cap",
                )
        return self


class QuantSettings(Strict):
    """Quantization and activation dtype shared by the built-in workloads."""

    bits: Literal[4, 8] = 4  # harness.config.shapes.BITS
    group_size: Literal[32, 64, 128] = 64  # harness.config.shapes.GROUP_SIZES
    dtype: Literal["float32", "float16", "bfloat16", "auto"] = "auto"
    seed: int = 0


class DecodeRun(Strict):
    """The decode-specific keys, shared by the `decode` workload and a `layer` workload's `decode:` block."""

    tokens: int = Field(16, ge=1)
    warmup_tokens: int = Field(2, ge=0)
    context: int = Field(256, ge=1)


class LayerDecode(DecodeRun):
    """A `layer` workload's optional `decode:` block: also decode these models (as the `decode` workload does) in
    the same run, with the layer workload's bits, group_size, dtype and seed — one config, one run directory."""

    models: list[ModelEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> LayerDecode:
        names = [m.name for m in self.models]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate:
            raise ValueError(f"model name {duplicate!r} appears twice")
        return self


class LayerSettings(QuantSettings):
    """One MoE layer decode step per call, at each model shape × dff in `dff_grid` (the model's own dff if empty)."""

    kind: Literal["layer"]
    dff_grid: list[Dim] = Field(default_factory=list)
    min_run_s: float = Field(0.25, gt=0, description="each timed run repeats steps until it lasts this long")
    copies: int | None = Field(None, ge=1, description="layer copies to rotate over; default sized from the cache")
    decode: LayerDecode | None = None


class DecodeSettings(QuantSettings, DecodeRun):
    """Synthetic model decode at a catalog model's shapes with random weights; metric decode tok/s."""

    kind: Literal["decode"]


@dataclass(frozen=True)
class WorkloadKind:
    """One kind of workload: its settings model (the config's `workload:` block, discriminated by `kind`) and the
    module that runs it, whose WORKLOAD class `build(config, config_path, backend_name, plan_only)` returns the
    Workload (harness.measure.workloads imports it only when a config of this kind is built). The registry lives
    here, beside the settings models, because the config union is assembled from it: adding a kind is its module
    plus its settings model and one line below."""

    settings: type[Strict]
    module: str
    # an external program that picks its own device: `auto` names this machine's platform (Detection.platform)
    # and no backend of ours is instantiated; built-in kinds run on the first usable backend instead
    picks_own_device: bool = False
    # what its numbers mean to the analysis and the report (unit, library under test, …: harness.config.kind_meaning)
    meaning: KindMeaning = UNKNOWN

    @property
    def name(self) -> str:
        return get_args(self.settings.model_fields["kind"].annotation)[0]


KINDS = (
    WorkloadKind(
        CommandSettings,
        "harness.measure.workloads.command",
        picks_own_device=True,
        meaning=KindMeaning(
            unit="tok/s",
            panel="whole model (tok/s)",
            whole_model=True,
            libraries=(),
            family_words="whole models (benchmark command)",
        ),
    ),
    WorkloadKind(
        LayerSettings,
        "harness.measure.workloads.layer",
        meaning=KindMeaning(
            unit="layer steps/s",
            panel="one MoE layer (layer steps/s)",
            whole_model=False,
            decides_cap=True,
            family_fields=("workload", "d_model", "top_k", "n_experts", "bits", "group_size", "dtype"),
            description="one MoE layer decode step per call on the backend (layer steps/s), cycling over "
            "cache-busting copies",
        ),
    ),
    WorkloadKind(
        DecodeSettings,
        "harness.measure.workloads.decode",
        meaning=KindMeaning(
            unit="tok/s",
            panel="whole model (tok/s)",
            whole_model=True,
            description="moecal's synthetic decoder with random weights at the catalog shapes (decode tok/s)",
            family_words="whole model (moecal's synthetic decoder)",
        ),
    ),
)
KIND_SETTINGS: tuple[type[Strict], ...] = tuple(kind.settings for kind in KINDS)
# the config's `workload:` block: one kind's settings (not harness.measure.protocol.Workload, the runnable it builds)
WorkloadSettings = Annotated[functools.reduce(operator.or_, KIND_SETTINGS), Field(discriminator="kind")]
WORKLOAD_KINDS = tuple(kind.name for kind in KINDS)
KIND_BY_NAME = {kind.name: kind for kind in KINDS}  # the lookup every consumer goes through (tests add a toy kind)


def kind_meaning(name: object) -> KindMeaning:
    """The meaning of a workload kind by its name as the data records it (a point's `workload`); UNKNOWN for a
    name no entry knows (older or foreign data)."""
    entry = KIND_BY_NAME.get(str(name))
    return entry.meaning if entry is not None else UNKNOWN


def kind_of_family(label: object) -> str:
    """The kind name a shape-family label belongs to: harness.analysis.points.stats.family_labels starts every label
    with its points' workload kind (`layer d_model=… …`, `decode`, `command`)."""
    return str(label).split(" ", 1)[0]


class ModelEntry(Strict):
    """A model to measure. Command workloads fill `{placeholders}` from these fields (and `args`); built-in
    workloads look `name` up in configs/models.yaml and let any shape field override the catalog."""

    name: str = Field(min_length=1)
    dff: Dim | None = None
    model_path: str | None = None
    quant_mode: str = "affine"
    d_model: Dim | None = None
    n_experts: Dim | None = None
    top_k: Dim | None = None
    layers: Dim | None = None
    shared_dff: Annotated[int, BeforeValidator(_no_bool), Field(ge=0, le=MAX_DIM)] | None = None
    n_heads: Dim | None = None
    n_kv_heads: Dim | None = None
    head_dim: Dim | None = None
    vocab: Dim | None = None
    args: dict[str, str] = Field(default_factory=dict)
    # command workloads (written by `moecal init`): the checkpoint's family and expert quantization, recorded in
    # the point key, and why the fused kernel is expected to decline it (such points run only with --measure-null)
    family: str | None = None
    bits: Dim | None = None
    group_size: Dim | None = None
    expect_null: str | None = Field(None, min_length=1)
    # how the arms are forced (harness.config.eligibility.arm_forcing): `cap` through cap_env; `switch` where the
    # family ignores the cap (its own kernel copy) or is unknown: the fallback arm sets MLXCEL_FUSED_MOE=0 and the
    # point stays out of the cap's crossover; `eligibility` says why, or that nothing is known of the family
    forced_by: Literal["cap", "switch"] = "cap"
    eligibility: str | None = None
    synthetic: str | None = None  # a `moecal synth` checkpoint: how it was made (named in the addendum)

    def placeholders(self) -> dict[str, object]:
        values = {k: v for k, v in self.model_dump().items() if k != "args" and v is not None}
        values.update(self.args)
        return values


class Measure(Strict):
    warmup_runs: int = Field(1, ge=0)
    rounds: int = Field(5, ge=1)
    order: Literal["rotate", "fixed", "random"] = "rotate"
    seed: int = 0
    null_arm: bool = False
    # 2: the first ⌊rounds/2⌋ rounds of every point, then the rest in a second pass over the grid, so drift of one
    # arm shows as disagreeing passes (harness.analysis.points.sweep_drift); 1: each point's rounds together
    passes: int = Field(2, ge=1, le=2)
    # decision-driven rounds (harness.analysis.rounds.decision_value, harness.measure.allocation): after `rounds` at
    # every point, more rounds only where they can still change the decision, up to max_rounds per point, at most
    # `looks` looks (each reads the decision at 1 − α/looks), within `budget` of device time (900, 90s, 15m, 1h30m)
    until_decided: bool = False
    max_rounds: int = Field(20, ge=1)
    looks: int = Field(8, ge=1)
    budget: str | float | None = None
    # adaptive Dff refinement (layer workloads): points in the crossover's bracket on multiples of `refine_grid` until
    # its interval is narrower than target_crossover_width × the crossover Dff, or refine_budget_runs are spent
    # (0: no refinement). See harness.measure.refine.
    refine_budget_runs: int = Field(0, ge=0)
    target_crossover_width: float = Field(0.05, gt=0)
    refine_grid: int = Field(256, ge=1)
    # the policy the sweep's own decisions aim at (the until-decided looks, refinement's next Dff), recorded in
    # meta.json (`policy` below, harness.runs.run_meta) so a later analysis of the run defaults to the same targets;
    # the schema states their types only: their ranges are checked by harness.policy.Policy (_policy_in_range)
    confidence: float = CONFIDENCE
    # a fraction, or `from-null` (needs null_arm): the widest null-arm per-round delta rounded up to the next 0.5%,
    # as mlxcel's ADR 0007 sets its threshold (harness.analysis.points.null_margin); the sweep's own looks then use
    # MARGIN
    margin: float | Literal["from-null"] = MARGIN

    @model_validator(mode="after")
    def _policy_in_range(self) -> Measure:
        """The range check of confidence and margin is Policy's constructor, the one every policy passes (options,
        meta.json, this block); a value it refuses is named as this file's field. The first of the block's cross-field
        checks, so an out-of-range level is what is reported, as a field's own error would be."""
        try:
            self.policy  # noqa: B018  # built for its constructor's check
        except PolicyError as exc:
            raise _FieldError(("measure", exc.name), exc.in_file(getattr(self, exc.name))) from None
        return self

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data: object) -> object:
        if isinstance(data, dict):
            for old in ("adaptive", "target_ci_width"):
                if old in data:
                    raise _FieldError(("measure", old), "was replaced by until_decided (docs/design.md §5)")
        return data

    @model_validator(mode="after")
    def _null_for_margin(self) -> Measure:
        if self.margin == "from-null" and not self.null_arm:
            raise _FieldError(("measure", "margin"), "from-null needs the A/A arm: set measure.null_arm: true")
        return self

    @property
    def numeric_margin(self) -> float:
        """The margin the sweep's own looks aim at: MARGIN while it is to be derived from the null arm."""
        return MARGIN if self.margin == "from-null" else self.margin

    @property
    def policy(self) -> Policy:
        """The policy a sweep of this block records and its own decisions aim at (the until-decided looks read it
        at their stricter level, harness.measure.allocation.rule_for; the look level is added once they have)."""
        return Policy(confidence=self.confidence, margin=self.numeric_margin)

    @model_validator(mode="after")
    def _max_rounds(self) -> Measure:
        if self.until_decided and self.max_rounds < self.rounds:
            raise _FieldError(("measure", "max_rounds"), f"must be >= rounds ({self.rounds}) with until_decided")
        if self.budget is not None:
            try:
                parse_duration(str(self.budget))
            except ValueError as exc:
                raise _FieldError(("measure", "budget"), str(exc)) from None
        return self


class SynthSettings(Strict):
    """`synth:` (command workloads): synthetic checkpoints of the model folder `like` at each `dff`, made by the
    sweep (harness.measure.synth_models) and measured as models `<like>-dff<D>`; Dff refinement synthesizes more. Cached
    by content hash under `cache` (default $XDG_CACHE_HOME/moecal/synth, i.e. ~/.cache/moecal/synth)."""

    like: str = Field(min_length=1)
    dff: list[Annotated[int, Field(gt=0)]] = Field(min_length=1)
    layers: int | None = Field(None, gt=0)
    experts: int | None = Field(None, gt=0)
    top_k: int | None = Field(None, gt=0)
    seed: int = 0
    dtype: Literal["source", "float32", "float16", "bfloat16"] = "source"
    cache: str | None = None


class GuardSettings(Strict):
    """`guard:` — runs no neighbour can contaminate (harness.measure.guard): before and during every run, other GPU
    compute processes, compilers, load, clock-throttle reasons and suspension gaps; a contended run is re-run and
    marked. `enabled` null (the default): on where any probe exists here. `host_lock`: mlxcel's host-wide guard
    lock (harness.measure.host_lock), held for the whole sweep; `lock_wait_s` bounds the wait (0: no bound)."""

    enabled: bool | None = None
    host_lock: bool = True
    lock_wait_s: float = Field(0.0, ge=0)
    interval_s: float = Field(1.0, gt=0)  # rocm_gpu_guard.sh samples at 1 Hz
    retry_wait_s: float = Field(10.0, ge=0)  # pause before re-running a contended run
    max_load_per_core: float | None = Field(None, gt=0)  # a 1-minute load above this counts as contention
    suspend_gap_s: float = Field(1.0, gt=0)  # a sleep clock falling this far behind during a run: suspended
    kfd_dir: str | None = None  # ROCm's /sys/class/kfd/kfd/proc (ROCM_GPU_GUARD_KFD_DIR in mlxcel's guard)
    compilers: str | None = None  # regex on /proc/<pid>/comm; null: rocm_gpu_guard.sh's list

    @field_validator("compilers")
    @classmethod
    def _valid(cls, value: str | None) -> str | None:
        return None if value is None else _check_regex(value, 0)


class SweepConfig(Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    backend: Literal[(*BACKEND_NAMES, "auto")] = "auto"  # type: ignore[valid-type]  # the registry's names
    current_default: Annotated[Cap, Field(gt=0)] | None = None
    library_pin: str | None = Field(None, description="what the arms run under, e.g. 'mlxcel 0.4 / MLX 0.32.1'")
    workload: WorkloadSettings
    models: list[ModelEntry] = Field(default_factory=list)
    measure: Measure = Field(default_factory=Measure)
    synth: SynthSettings | None = None
    guard: GuardSettings = Field(default_factory=GuardSettings)
    # launch knobs of the binary (harness.config.knobs): every combination of the values is measured, each with
    # both arms, interleaved in every round; command workloads only
    knobs: dict[str, Annotated[list[Annotated[int, BeforeValidator(_no_bool)]], Field(min_length=1)]] = Field(
        default_factory=dict
    )

    @field_validator("knobs")
    @classmethod
    def _knob_values(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        for name, values in value.items():
            _env_name(name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: a value is listed twice ({values})")
            launch_knobs.check_values(name, values)
        launch_knobs.check_count(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: object) -> object:
        """A NUL byte cannot pass into an argv or an environment (the sweep would die at the first run)."""
        where = _nul_path(data, ())
        if where is not None:
            raise _FieldError(where, "contains a NUL byte (\\x00), which no command line or environment can carry")
        return data

    @model_validator(mode="after")
    def _models_fit_workload(self) -> SweepConfig:
        if not self.models and self.synth is None:
            raise _FieldError(("models",), "List should have at least 1 item (or give a synth: block)")
        if self.synth is not None and self.workload.kind != "command":
            raise _FieldError(("synth",), "synthetic checkpoints are measured by command workloads only")
        self._knobs_fit()
        names = [m.name for m in self.models]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate and self.workload.kind != "layer":
            raise ValueError(f"model name {duplicate!r} appears twice")
        if isinstance(self.workload, CommandSettings):
            for index, model in enumerate(self.models):
                if model.dff is None:
                    raise _FieldError(("models", index, "dff"), "required for command workloads")
                parity = self.workload.parity
                extra = [parity.output_file] if parity and parity.output_file else []
                _check_placeholders(self.workload.command, model, index, context=True)
                _check_placeholders(extra, model, index)
        return self

    def _knobs_fit(self) -> None:
        """Knobs are environment variables of an external binary, measured in fixed rounds: until-decided allocation
        and Dff refinement look at one setting's point, so they are refused with knobs rather than mixing them."""
        if not self.knobs:
            return
        if not isinstance(self.workload, CommandSettings):
            raise _FieldError(("knobs",), "launch knobs are environment variables of a command workload's binary")
        owned = {self.workload.cap_env, *self.workload.env}
        clash = next((name for name in self.knobs if name in owned), None)
        if clash:
            raise _FieldError(("knobs", clash), "is also set by workload.cap_env or workload.env: give it in one place")
        for key in ("until_decided", "refine_budget_runs"):
            if getattr(self.measure, key):
                raise _FieldError(("measure", key), "cannot be combined with knobs: a knob sweep runs fixed rounds")


class _FieldError(ValueError):
    """A cross-field problem that knows the exact field path it belongs to."""

    def __init__(self, loc: tuple, problem: str):
        super().__init__(problem)
        self.loc = loc


def _nul_path(data: object, loc: tuple) -> tuple | None:
    """The location of the first string (value or key) holding a NUL byte in a loaded document, else None."""
    if isinstance(data, str):
        return loc if "\x00" in data else None
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        if isinstance(key, str) and "\x00" in key:
            return (*loc, key)
        found = _nul_path(value, (*loc, key))
        if found is not None:
            return found
    return None


def _check_placeholders(command: list[str], model: ModelEntry, index: int, context: bool = False) -> None:
    """`context`: the command line itself, where `{prompt_tokens}` is the axis's depth (checked by CommandSettings)."""
    known = {**({CONTEXT_PLACEHOLDER: 1} if context else {}), **model.placeholders()}
    for arg in command:
        for _, field_name, spec, _ in string.Formatter().parse(arg):
            if field_name and field_name not in known:
                raise _FieldError(
                    ("models", index), f"command uses {{{field_name}}} but this model has no {field_name!r} field"
                )
            if spec and ("{" in spec or any(int(n) > MAX_FORMAT_WIDTH for n in re.findall(r"\d+", spec))):
                raise _FieldError(
                    ("models", index),
                    f"{{{field_name}:{spec}}}: a format spec may pad to at most {MAX_FORMAT_WIDTH} characters "
                    "and hold no placeholder",
                )
        try:
            arg.format_map(known)  # bounded now; `{name:d}` fails here, not in the middle of the sweep
        except (ValueError, TypeError) as exc:
            raise _FieldError(("models", index), f"{arg!r}: {exc}") from None


def field_path(loc: tuple) -> str:
    """('models', 0, 'dff') → 'models[0].dff'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# the tags pydantic names a union's members by in an error's location (`float`, `literal['from-null']`, ...); no
# config key is spelled like one
_UNION_MEMBER = re.compile(r"float|int|str|bool|literal\[.*\]|constrained-\w+|function-\w+")


def _error_location(error: dict) -> tuple:
    loc = tuple(error["loc"])
    # pydantic puts the discriminator tag into the location of tagged-union members: drop it for users
    if len(loc) >= 2 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        loc = (loc[0], *loc[2:])
    # and the member's type into a plain union's (measure.margin: a number or "from-null" → `margin.float`)
    loc = tuple(part for part in loc if not (isinstance(part, str) and _UNION_MEMBER.fullmatch(part)))
    ctx_error = (error.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        loc = ctx_error.loc
    return loc


def _error_message(error: dict) -> str:
    ctx_error = (error.get("ctx") or {}).get("error")
    if ctx_error is not None:
        return str(ctx_error)
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        return "unknown key (check the spelling; see README 'Config reference')"
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "union_tag_invalid":
        return f"unknown kind {error.get('input', {}).get('kind')!r}; expected one of {', '.join(WORKLOAD_KINDS)}"
    return message.removeprefix("Value error, ")


def parse_config(data: object, source: str) -> SweepConfig:
    """Validate an already-loaded YAML document; the first problem becomes an InputError."""
    if not isinstance(data, dict):
        raise InputError(source, "(top level)", "expected a mapping of keys (name, backend, workload, models, ...)")
    try:
        return SweepConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise InputError(source, field_path(_error_location(first)), _error_message(first)) from None


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML's last-wins would silently drop the first)
    and nesting deeper than MAX_NESTING (PyYAML composes recursively: a deep document ends in RecursionError)."""

    depth = 0

    def compose_node(self, parent: object, index: object) -> object:
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested deeper than {MAX_NESTING} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # an unhashable key: the base class reports it
                if key in seen:
                    problem = f"duplicate key {key!r} (each key once per mapping)"
                    raise ConstructorError(None, None, problem, key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml(path: str | Path) -> object:
    """A YAML file as Python data (config, fleet), read strictly (see _StrictLoader); InputError on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), "(file)", f"cannot read: {exc.strerror or exc}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        raise InputError(str(path), where, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep config file; every failure is an InputError naming the file and field."""
    return parse_config(load_yaml(path), str(Path(path)))


def resolved_dtype(dtype: str, backend: str) -> str:
    """`auto` activation dtype: the backend's `default_dtype` (bfloat16 on GPUs, what engines run; float32 on CPU,
    see harness.devices.backends.BACKENDS)."""
    if dtype != "auto":
        return dtype
    return backend_spec(backend).default_dtype
