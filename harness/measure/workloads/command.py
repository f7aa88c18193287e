"""The `command` workload: an external decode benchmark (e.g. mlxcel-bench-decode), one fresh process per run.

Each arm is forced through an environment variable (`cap_env`): the fused arm sets it above every Dff, the fallback
arm below every Dff. A model whose family ignores the cap (`forced_by: switch`, harness.config.eligibility) also sets
MLXCEL_FUSED_MOE (1 fused, 0 fallback); how each model's arms were forced, the models kept out of the cap's crossover,
the binary's version and protocol (harness.measure.bench_capabilities) and a backend label without its device here
go to the run's meta.json. tok/s is parsed from the output with `metric_regex` (group 1, last match wins, so a benchmark
that prints per-phase lines reports its final figure). An optional dispatch probe must match the fused arm's output;
a point where it never does ran the same code in both arms and is a null point (see
harness.analysis.points.point_summary).

Greedy parity (config `parity:`): each run's generated output is captured and compared with the latest run of the
other path (harness.analysis.evidence.parity). A model with `expect_null` (written by `moecal init` when the fused
kernel should decline the checkpoint) is a skipped point unless the sweep runs with --measure-null; either way it is
null.

Before any run, `preflight` shows each distinct command line to the benchmark once (`--help`), so a flag the binary
lacks stops the sweep with one line instead of failing every run. A run's `tokens` is the binary's `Generated
tokens` count (harness.measure.bench_output). The untimed dispatch verification pass (harness.measure.dispatch) runs
through the same runner with the parity probe's variables added; timed runs never carry them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

from harness.analysis.evidence.parity import agreement, capture_file, capture_regex
from harness.config.backend_specs import backend_spec
from harness.config.mlxcel_families import SWITCH_ENV, SWITCH_OFF, SWITCH_ON
from harness.config.schema import (
    CONTEXT_PLACEHOLDER,
    PARITY_CHECK_ENV,
    PARITY_THRESHOLD_ENV,
    CommandSettings,
    ModelEntry,
    SweepConfig,
)
from harness.devices.backends import detect
from harness.errors import InputError
from harness.measure import guard
from harness.measure.bench_capabilities import capabilities, leading_args
from harness.measure.bench_output import decode_path, generated_tokens, rejected_flag, usage_error
from harness.measure.proc import HELP_TIMEOUT_S, ask_help, run_with_deadline
from harness.measure.protocol import ArmCaps, Point, RunContended, RunFailed, RunOutcome
from harness.measure.synth_models import synthetic_provenance
from harness.runs.formats import FALLBACK, FUSED
from harness.runs.provenance import cpu_name
from harness.runs.provenance_keys import CAP_IGNORED, EXPECT_NULL, Provenance

TAIL_CHARS = 400
# what mlxcel's scripts/rocm_gpu_guard.sh exits with when every attempt was contended or its --max-wait ran out
# ("nothing COMMAND printed should be used"): the run is re-run, not failed
GUARD_CONTENDED_EXIT = 75


class SweepKeys:
    """What every run of a sweep must share with its first: the decode loop (the `Decode path:` line; mlxcel retired
    CxxGenerator for the batch-native engine, ADR 0007, and the line says which loop timed the run) and the build (the
    benchmark binary's size and modification time: a binary rebuilt mid-sweep is another build). A run that differs
    is excluded (a failed row with the reason), never pooled with the others."""

    def __init__(self) -> None:
        self.first: str | None = None
        self.build: tuple[str, int, int] | None = None

    def check(self, path: str | None) -> None:
        """Raise RunFailed when `path` differs from the sweep's first (a binary printing no line is not judged)."""
        if path is None:
            return
        if self.first is None:
            self.first = path
        elif path != self.first:
            raise RunFailed(
                f"decode path {path!r} differs from the sweep's first run ({self.first!r}): excluded, never pooled "
                "across decode loops"
            )

    def check_build(self, program: str) -> None:
        """Raise RunFailed when the program's file changed since the sweep's first run (not judged when unresolved)."""
        found = _resolve_executable(program)
        if found is None:
            return
        stat = Path(found).stat()
        build = (str(Path(found).resolve()), stat.st_size, stat.st_mtime_ns)
        if self.build is None:
            self.build = build
        elif build != self.build:
            raise RunFailed(f"{program} was rebuilt since the sweep's first run: another build, never pooled with it")


def _tail(text: str) -> str:
    text = text.strip().replace("\r", "")
    return text[-TAIL_CHARS:].replace("\n", " | ")


def argv_for(settings: CommandSettings, model: ModelEntry, depth: int | None = None) -> list[str]:
    """The command line for one model, `{placeholders}` filled from the model entry (validated by the config) and
    `{prompt_tokens}` with the context axis's depth (its first depth when none is given)."""
    values = model.placeholders()
    if settings.prompt_tokens:
        values[CONTEXT_PLACEHOLDER] = depth if depth is not None else settings.prompt_tokens[0]
    return [arg.format_map(values) for arg in settings.command]


def context_label(depth: int) -> str:
    """A context axis point's `dtype` cell and label suffix (`ctx8192`): a command's dtype is the binary's own, so
    the column names the depth instead, and harness.analysis.points.stats.family_labels makes each depth its own
    family."""
    return f"ctx{depth}"


class CommandRunner:
    """Runs one model's command; `run(path)` forces the path through the cap environment variable."""

    def __init__(
        self,
        settings: CommandSettings,
        argv: list[str],
        output_file: Path | None = None,
        forced_by: str = "cap",
        paths: SweepKeys | None = None,
    ):
        self.settings = settings
        self.paths = paths or SweepKeys()
        self.argv = argv
        self.forced_by = forced_by  # ModelEntry.forced_by: `switch` also sets MLXCEL_FUSED_MOE per arm
        self.metric = re.compile(settings.metric_regex)
        self.probe = re.compile(settings.dispatch_probe.regex) if settings.dispatch_probe else None
        parity = settings.parity
        self.parity_regex = re.compile(parity.regex) if parity and parity.regex else None
        self.output_file = output_file
        self.last_output: dict[str, list[str]] = {}  # path -> pieces of its latest run, for parity
        self.last_text = ""  # stdout + stderr of the latest run that exited (the verification pass reads it)

    def environment(self, path: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The run's environment: the cap that forces `path`, the config's `env`, then `extra`. A model whose family
        ignores the cap (`forced_by: switch`) also gets MLXCEL_FUSED_MOE: 0 in the fallback arm, 1 in the fused one
        (so a shell's `=0` cannot make both arms the fallback). The parity probe's variables are removed unless
        `extra` sets them (the verification pass): the probe adds evals to every MoE call, so a timed run must never
        carry them, not even from the user's shell."""
        cap = self.settings.fused_cap if path == FUSED else self.settings.fallback_cap
        env = {**os.environ, **self.settings.env, self.settings.cap_env: str(cap)}
        if self.forced_by == "switch":
            env[SWITCH_ENV] = SWITCH_ON if path == FUSED else SWITCH_OFF
        for name in probe_env_names(self.settings):
            env.pop(name, None)
        return {**env, **(extra or {})}

    def run(self, path: str, extra_env: dict[str, str] | None = None) -> RunOutcome:
        if self.output_file is None:
            return self._run(path, extra_env)
        self.output_file.unlink(missing_ok=True)  # a stale file of this sweep must not pass for this run's output
        try:
            return self._run(path, extra_env)
        finally:  # read: gone again, so the next sweep's preflight finds no file it would have to delete
            self.output_file.unlink(missing_ok=True)

    def _run(self, path: str, extra_env: dict[str, str] | None) -> RunOutcome:
        try:
            finished = run_with_deadline(self.argv, self.environment(path, extra_env), self.settings.timeout_s)
        except OSError as exc:
            raise RunFailed(f"cannot start {self.argv[0]!r}: {exc.strerror or exc}") from None
        stdout, stderr, seconds = finished.stdout, finished.stderr, finished.seconds
        if finished.timed_out:
            raise RunFailed(f"timed out after {self.settings.timeout_s:g}s; stdout tail: {_tail(stdout)}")
        output = self.last_text = stdout + "\n" + stderr
        if finished.returncode == GUARD_CONTENDED_EXIT:
            raise RunContended(
                f"exit {GUARD_CONTENDED_EXIT}: the command's GPU guard found every attempt contended "
                f"(mlxcel's rocm_gpu_guard.sh); stderr tail: {_tail(stderr)}"
            )
        if finished.returncode != 0:
            raise RunFailed(
                f"exit code {finished.returncode}; stderr tail: {_tail(stderr)}; stdout tail: {_tail(stdout)}"
            )
        matches = self.metric.findall(output)
        if not matches:
            raise RunFailed(f"metric_regex did not match; stdout tail: {_tail(stdout)}")
        last = matches[-1]
        try:
            tok_s = float(last[0] if isinstance(last, tuple) else last)
        except ValueError:
            raise RunFailed(f"metric_regex group 1 is not a number: {last!r}") from None
        dispatch_ok = None
        if self.probe is not None and path == FUSED:
            dispatch_ok = bool(self.probe.search(output))
        loop = decode_path(output)
        self.paths.check(loop)
        self.paths.check_build(self.argv[0])
        outcome = RunOutcome(generated_tokens(output), seconds, tok_s, dispatch_ok=dispatch_ok, decode_path=loop)
        return self._with_parity(path, output, outcome)

    def _with_parity(self, path: str, output: str, outcome: RunOutcome) -> RunOutcome:
        """Record agreement with the latest run of the other path. With parity capture, `tokens` is the pieces
        compared (harness.analysis.evidence.parity); without it, the binary's `Generated tokens` count."""
        if self.parity_regex is not None:
            generated = capture_regex(self.parity_regex, output)
        elif self.output_file is not None:
            generated = capture_file(self.output_file)
        else:
            return outcome
        if generated is None:
            return outcome
        self.last_output[path] = generated
        other = self.last_output.get(FALLBACK if path == FUSED else FUSED)
        if other is None:
            outcome.tokens = len(generated)
        else:
            outcome.tokens_agree, outcome.tokens = agreement(generated, other)
        return outcome

    def close(self) -> None:
        """Nothing to release: every run is its own process."""


def probe_env_names(settings: CommandSettings) -> tuple[str, str]:
    """The parity probe's environment variables (the config's, else mlxcel's names)."""
    check = settings.dispatch_check
    return (check.check_env, check.threshold_env) if check else (PARITY_CHECK_ENV, PARITY_THRESHOLD_ENV)


def check_usage(argv: list[str], timeout_s: float) -> str | None:
    """Ask the benchmark whether it accepts these arguments, without measuring: `argv --help`. A clap binary
    parses in order, so an unknown flag before `--help` is still a usage error (exit 2, `error: unexpected
    argument '--x' found`), while accepted arguments print the help and exit 0. Returns the complaint, or None.
    A program that answers `--help` otherwise (exit code other than 2, no `error:` line) is not judged here; one
    that does not answer within a few seconds is (harness.measure.proc.ask_help)."""
    answer = ask_help(argv, os.environ, min(timeout_s, HELP_TIMEOUT_S))
    if answer.finished is None:
        return None  # preflight already named a program that cannot be started
    if not answer.answered:
        return answer.unusable()
    done = answer.finished
    if done.returncode != 2:
        return None
    return usage_error(done.stderr + "\n" + done.stdout)


def _resolve_executable(program: str) -> str | None:
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program)
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(program)


class CommandWorkloadRunner:
    """Builds points (one per model) for an external benchmark."""

    kind = "command"
    backend = None  # the command picks its own device; no backend of ours runs

    @classmethod
    def build(
        cls, config: SweepConfig, config_path: str, backend_name: str, plan_only: bool = False
    ) -> CommandWorkloadRunner:
        """The workload labelled with this machine's GPU (or CPU): the device the command most likely runs on (a
        plan builds the same: a command workload instantiates no backend of ours)."""
        return cls(config, config_path, backend_name, detect().gpu_name or cpu_name())

    def __init__(self, config: SweepConfig, config_path: str, backend: str, device: str):
        assert isinstance(config.workload, CommandSettings)
        self.config = config
        self.settings = config.workload
        self.config_path = config_path
        self.backend_name = backend
        self.device = device
        self.sweep_keys = SweepKeys()  # one per sweep: every point's runs are judged against the same first
        self.guard = guard.build(config.guard)  # None: off, or nothing to guard against on this host

    def caps(self) -> ArmCaps:
        caps: ArmCaps = {FUSED: self.settings.fused_cap, FALLBACK: self.settings.fallback_cap}
        if self.config.measure.null_arm:
            caps["null"] = self.settings.fallback_cap
        return caps

    def points(self) -> list[Point]:
        depths = self.settings.prompt_tokens or [None]
        return [self.point_for(model, depth) for depth in depths for model in self.config.models]

    def point_for(self, model: ModelEntry, depth: int | None = None) -> Point:
        """One model's point at one depth of the context axis (skipped when the config expects it null)."""
        key = {
            "backend": self.backend_name,
            "device": self.device,
            "workload": "command",
            "model": model.name,
            "quant_mode": model.quant_mode,
            "d_model": model.d_model or "",
            "dff": model.dff,
            "n_experts": model.n_experts or "",
            "top_k": model.top_k or "",
            "bits": model.bits or "",
            "group_size": model.group_size or "",
            "dtype": "" if depth is None else context_label(depth),
        }
        skip = f"expected null: {model.expect_null} (--measure-null measures it)" if model.expect_null else ""
        label = model.name if depth is None else f"{model.name} {context_label(depth)}"
        return Point(key=key, caps=self.caps(), label=label, skip_reason=skip, extra={"model": model, "depth": depth})

    def point_at(self, template: Point, dff: int) -> Point | None:
        """A point at a Dff no model has, synthesized from the config's `synth.like` (Dff refinement; every
        synthesized model is the template's family); None when the config has no `synth:` block or that Dff cannot
        be synthesized (a Dff the fused kernel declines)."""
        if self.config.synth is None:
            return None
        from harness.measure.synth_models import synthesize  # MLX writes the checkpoint

        try:
            return self.point_for(synthesize(self.config.synth, dff), template.extra.get("depth"))
        except InputError:
            return None

    def preflight(self) -> None:
        """Fail before the sweep starts if a model's command cannot be started at all."""
        for index, model in enumerate(self.config.models):
            program = argv_for(self.settings, model)[0]
            if _resolve_executable(program) is None:
                raise InputError(
                    self.config_path,
                    "workload.command[0]" if program == self.settings.command[0] else f"models[{index}]",
                    f"cannot run {program!r} for model {model.name!r}: not found or not executable "
                    "(install it, put it on PATH, or give an absolute path)",
                )
        self._refuse_foreign_output_files()  # before the usage check, whose `--help` run may write the file
        self._check_usage()

    def _refuse_foreign_output_files(self) -> None:
        """`parity.output_file` is deleted before every run (a stale file must not pass for a run's output) and after
        it (see CommandRunner.run), so a file already there was not written by this sweep: refuse rather than delete
        what moecal did not create."""
        parity = self.settings.parity
        if parity is None or parity.output_file is None:
            return
        for model in self.config.models:
            path = Path(parity.output_file.format_map(model.placeholders()))
            if path.exists() or path.is_symlink():
                raise InputError(
                    self.config_path,
                    "workload.parity.output_file",
                    f"{str(path)!r} (model {model.name!r}) already exists; moecal deletes this file around every run "
                    "and never deletes what it did not create: move it away or name another output_file",
                )

    def _check_usage(self) -> None:
        """Each distinct command line is shown to the benchmark once (`--help`) before any measurement: a flag the
        binary does not have would otherwise fail every run of the sweep."""
        seen: set[tuple[str, ...]] = set()
        for model in self.config.models:
            argv = argv_for(self.settings, model)
            if tuple(argv) in seen:
                continue
            seen.add(tuple(argv))
            complaint = check_usage(argv, self.settings.timeout_s)
            if complaint:
                flag = rejected_flag(complaint)
                what = f"has no flag {flag!r}" if flag else "rejects the command line"
                raise InputError(
                    self.config_path,
                    "workload.command",
                    f"{argv[0]} {what} (for model {model.name!r}: {complaint}); fix the command before measuring",
                )

    def open(self, point: Point) -> CommandRunner | guard.GuardedRunner:
        model = point.extra["model"]
        parity = self.settings.parity
        output_file = None
        if parity and parity.output_file:
            output_file = Path(parity.output_file.format_map(model.placeholders()))
        argv = argv_for(self.settings, model, point.extra.get("depth"))
        runner = CommandRunner(self.settings, argv, output_file, model.forced_by, self.sweep_keys)
        return runner if self.guard is None else guard.GuardedRunner(runner, self.guard, point.label)

    def describe_arms(self) -> dict[str, str]:
        """How each arm is forced, for the report."""
        env = self.settings.cap_env
        return {arm: f"{env}={cap}" for arm, cap in self.caps().items()}

    @property
    def refinable(self) -> bool:
        """Only a `synth:` block can make a checkpoint at a Dff between the measured ones."""
        return self.config.synth is not None

    def device_info(self) -> dict[str, str]:
        return {"device": self.device}

    def describe_run(self, meta: Provenance, points: list[Point], measure_null: bool) -> None:
        """The command and its build as the library pin (unless the config names one), the expected-null models,
        and the synthetic checkpoints' provenance."""
        if not self.config.library_pin:
            meta["library_pin"] = f"the command's own build ({self.settings.command[0]})"
        meta["bench_command"] = shlex.join(self.settings.command)  # the addendum's "Harness:" (prompt, tokens)
        if self.settings.prompt_tokens:
            meta["context_axis"] = list(self.settings.prompt_tokens)
        command = self.settings.command
        meta.update(capabilities(command[0], leading_args(command)).as_meta())
        missing = device_missing(self.backend_name)
        if missing:
            meta["backend_device_missing"] = missing
        meta["guard"] = guard.describe(self.guard, self.config.guard)
        record_arm_forcing(self.config, meta)
        apply_null_policy(points, self.config, meta, measure_null)
        synthetic = synthetic_provenance(self.config)
        if synthetic:
            meta["synthetic"] = synthetic


WORKLOAD = CommandWorkloadRunner


def device_missing(backend: str) -> str:
    """Why this machine cannot be the device a command run is labelled with ("" when it can): a ROCm label on a
    machine without /dev/kfd, metal off Apple silicon, cuda without an NVIDIA GPU. The run is still labelled as
    asked (a sweep may run the binary elsewhere through a wrapper); the flag makes the heading say so."""
    if backend_spec(backend).hosts_commands(detect()):
        return ""
    return f"labelled {backend}, but this machine has no {backend} device; the label is taken as given"


def record_arm_forcing(config: SweepConfig, meta: Provenance) -> None:
    """Per model, how each arm was forced (meta `arm_forcing`), and the models kept out of the cap's crossover
    because their family ignores the cap or is unknown (meta `cap_ignored`: model → reason; the analysis keeps
    them null, with the reason, after reporting their fused-vs-fallback ratio)."""
    settings = config.workload
    assert isinstance(settings, CommandSettings)
    forcing: dict[str, dict[str, str]] = {}
    ignored: dict[str, str] = {}
    for model in config.models:
        fused = f"{settings.cap_env}={settings.fused_cap}"
        fallback = f"{settings.cap_env}={settings.fallback_cap}"
        if model.forced_by == "switch":
            fused, fallback = f"{fused} {SWITCH_ENV}={SWITCH_ON}", f"{fallback} {SWITCH_ENV}={SWITCH_OFF}"
            ignored[model.name] = f"kept out of the cap's crossover: {model.eligibility or 'forced by the switch'}"
        forcing[model.name] = {"forced_by": model.forced_by, "fused": fused, "fallback": fallback}
    meta["arm_forcing"] = forcing
    if ignored:
        meta[CAP_IGNORED] = ignored


def apply_null_policy(points: list[Point], config: SweepConfig, meta: Provenance, measure: bool) -> None:
    """Record the models expected null in the run's provenance (the analysis keeps them null and checks the
    prediction against the dispatch probe); with `measure` (--measure-null) their points are run, not skipped."""
    expected = {m.name: m.expect_null for m in config.models if m.expect_null}
    if expected:
        meta[EXPECT_NULL] = expected
    if not measure:
        return
    for point in points:
        model = point.extra.get("model")
        if isinstance(model, ModelEntry) and model.expect_null:
            point.skip_reason = ""
