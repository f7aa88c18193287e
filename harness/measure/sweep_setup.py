"""Sweep set-up: config → workload → points → run directory, checked before any run.

`prepare` does everything that can fail on bad input (config, backend, binaries, resume compatibility) before any
run starts, so `--dry-run` and `moecal plan` exercise exactly the checks a real sweep would hit. A Ray worker
(harness/measure/ray_workers.py) prepares the same sweep on its own machine; the measurement loop that runs a
prepared sweep is harness/measure/sweep_loop.py.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config import knobs as launch_knobs
from harness.config import resources
from harness.config.backend_specs import BACKEND_NAMES, backend_spec
from harness.config.schema import (
    PARITY_CHECK_ENV,
    PARITY_THRESHOLD_ENV,
    SweepConfig,
    kind_meaning,
    load_config,
)
from harness.devices.backends import detect, resolve_name
from harness.errors import BackendUnavailable, InputError
from harness.measure import arm_env
from harness.measure.guard import GUARD_FILE
from harness.measure.model_folders import check_model_folders
from harness.measure.protocol import Point, RoundSchedule, Workload, pending_runs
from harness.measure.synth_models import with_synthetic_models
from harness.measure.workloads import build_workload, workload_kind
from harness.policy import Policy
from harness.runs import provenance
from harness.runs.provenance_keys import Provenance
from harness.runs.rundir import (
    DEFAULT_RESULTS,
    RunDirectory,
    SegmentJSON,
    default_run_id,
    fresh_run_dir,
    mixed_settings,
    new_segment,
    newest_resumable,
    refuse_links,
    refuse_stored,
    same_run_kind,
)

if TYPE_CHECKING:  # the analysis (pandas, scipy) loads when a sweep is summarised, not for `moecal plan`
    pass

CONFIG_DIR = resources.config_dir()


def default_config() -> Path:
    """The shipped config for the backend `auto` finds here (its registry entry's `default_config`: m-series on
    Apple GPUs, gb10 or h200 on NVIDIA, cpu-smoke on a plain machine) — so `make sweep` does real work anywhere."""
    return CONFIG_DIR / backend_spec(resolve_name("auto")).default_config(detect().gpu_name)


@dataclass
class PreparedSweep:
    config: SweepConfig
    config_path: Path
    workload: Workload
    points: list[Point]
    plan: RoundSchedule
    run_id: str
    run_dir: Path
    meta: Provenance
    resuming: bool  # continuing an existing run (--resume), as opposed to starting a new one
    segment: SegmentJSON  # this sweep's entry in meta.json's `segments`
    measure_null: bool = False  # --measure-null: expected-null command models are measured (Ray workers need it too)

    @property
    def policy(self) -> Policy:
        """The policy meta.json records for a new run (its config's, harness.config.schema.Measure.policy)."""
        return self.config.measure.policy


def backend_for(config: SweepConfig, override: str | None) -> str:
    """The backend label of a run. For external commands `auto` means the platform's GPU (the binary picks its own
    device); for built-in workloads it is the first usable of metal → cuda → cpu."""
    name = override or config.backend
    if name not in (*BACKEND_NAMES, "auto"):
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    if name != "auto":
        return name
    if workload_kind(config).picks_own_device:
        return detect().platform
    return resolve_name("auto")


def prepare(
    config_path: str | Path,
    out: Path | None = None,
    backend: str | None = None,
    only: Sequence[str] = (),
    rounds: int | None = None,
    resume: str | None = None,
    results: Path = DEFAULT_RESULTS,
    allow_mixed: bool = False,
    measure_null: bool = False,
    plan_only: bool = False,
    write_checkpoints: bool = True,
) -> PreparedSweep:
    """Everything a sweep needs, checked. `resume`: None starts a new run (in `out`, or a fresh run id under
    `results`); "" continues the newest unfinished run of this config on this device; a path continues that run.
    A resumed run must have been written by the same kernels and launch settings unless `allow_mixed`.
    `measure_null` runs the command models whose config says expect_null (they stay null points). `plan_only`
    (`moecal plan`) builds a built-in workload on the backend's device facts (harness.devices.backends.device_facts):
    its points, memory and estimates are the same, it cannot run, the CPU plan never imports numba, and synthetic
    checkpoints are planned, not written (nothing on disk changes). `write_checkpoints` False (`sweep --dry-run`)
    plans the synthetic checkpoints the same way while everything else is checked as for a real run."""
    config_path = Path(config_path)
    try:
        config = load_config(config_path)
    except UnicodeDecodeError as exc:
        raise InputError(str(config_path), "(file)", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    source = str(config_path)
    given = config
    # a plan or a dry run writes no checkpoint
    config = with_synthetic_models(config, source, write=write_checkpoints and not plan_only)
    try:
        backend_name = backend_for(config, backend)
        workload = build_workload(config, source, backend_name, plan_only)
    except BackendUnavailable as exc:
        raise InputError(source, "backend", str(exc)) from None
    check_model_folders(given, source)  # a synthetic model's folder is read back when written, or not there yet
    workload.preflight()
    points = workload.points()
    if only:
        names = {p.key["model"] for p in points}
        unknown = [n for n in only if n not in names]
        if unknown:
            raise InputError(source, "models", f"--only {unknown[0]!r} is not a model of this config ({sorted(names)})")
        points = [p for p in points if p.key["model"] in only]
    plan = RoundSchedule(
        rounds=rounds or config.measure.rounds,
        warmup_runs=config.measure.warmup_runs,
        order=config.measure.order,
        seed=config.measure.seed,
    )
    meta = provenance.collect(backend_name, workload.device_info())
    if config.library_pin:
        meta["library_pin"] = config.library_pin
    meta.update(
        run_id="",  # known once the run directory is chosen (below)
        config_path=source,
        config_sha256=provenance.file_sha256(config_path),
        config_name=config.name,
        command=shlex.join(["moecal", *sys.argv[1:]]),
        workload=config.workload.kind,
        current_default=config.current_default if config.current_default is not None else "",
        cap_env=getattr(config.workload, "cap_env", ""),
        arms=workload.describe_arms(),
        rounds=plan.rounds,
        warmup_runs=plan.warmup_runs,
        order=plan.order,
    )
    if config.measure.margin == "from-null":  # derived at analysis time (harness.analysis.points.null_margin)
        meta["margin_from_null"] = True
    workload.describe_run(meta, points, measure_null)
    _attach_knobs(config, source, backend_name, points, meta)
    run_dir = _choose_run_dir(out, resume, results, meta, source, lambda folder: _pending(points, plan, folder))
    previous = RunDirectory(run_dir).read_meta() if resume is not None else {}
    meta["run_id"] = run_id = str(previous.get("run_id") or run_dir.name)
    run_guard = getattr(workload, "guard", None)  # command workloads (harness.measure.guard): its log beside samples
    if run_guard is not None:
        run_guard.log_path = run_dir / GUARD_FILE
    segment = new_segment(meta)
    mixed = mixed_settings(previous, segment)
    if mixed and not allow_mixed:
        raise InputError(
            str(run_dir),
            "--resume",
            f"this run was measured with other settings ({'; '.join(mixed)}); resuming would mix them in one run: "
            "start a new run, or pass --allow-mixed to resume anyway (recorded in meta.json)",
        )
    if mixed:
        segment["mixed"] = mixed
    resuming = resume is not None
    return PreparedSweep(
        config, config_path, workload, points, plan, run_id, run_dir, meta, resuming, segment, measure_null
    )


def _attach_knobs(config: SweepConfig, source: str, backend: str, points: list[Point], meta: Provenance) -> None:
    """The config's launch knobs on every point and in meta.json (`knobs`, `knob_reference`: the setting the run's
    plain decision is made at), and the arm variables this shell sets: recorded in meta.json (`shell_env`), and
    refused when one would change what is measured without the config naming it (harness.measure.arm_env)."""
    settings = launch_knobs.settings(config.knobs)
    for point in points:
        point.knobs = settings
    if config.knobs:
        meta["knobs"] = {name: list(values) for name, values in config.knobs.items()}
        meta["knob_reference"] = launch_knobs.label(launch_knobs.reference(config.knobs, backend))
    if not kind_meaning(config.workload.kind).external:  # the shell's variables reach an external program only
        return
    workload = config.workload
    check = getattr(workload, "dispatch_check", None)
    # the parity probe's variables are set or cleared by the harness on every run (harness.measure.dispatch)
    probe = (check.check_env, check.threshold_env) if check else (PARITY_CHECK_ENV, PARITY_THRESHOLD_ENV)
    owned = {getattr(workload, "cap_env", ""), *getattr(workload, "env", {}), *config.knobs, *probe}
    found, refused = arm_env.shell_environment(os.environ, owned)
    if found:
        meta["shell_env"] = found
    if refused:
        name, why = next(iter(refused.items()))
        sweep_it = f", or knobs: {{{name}: [...]}} to calibrate it" if name.startswith(arm_env.FUSED_MOE_PREFIX) else ""
        raise InputError(
            source,
            "knobs",
            f"{name}={found[name]} is set in this shell and {why}, so every run would measure it while the run "
            f"records another setting: unset it, or name it in the config (workload.env to hold it fixed{sweep_it})",
        )


def _choose_run_dir(
    out: Path | None,
    resume: str | None,
    results: Path,
    meta: Provenance,
    source: str,
    pending: Callable[[Path], int],
) -> Path:
    """A new run directory, or the one to resume after checking that it may be continued (see harness.runs.rundir)."""
    if resume is None:
        if out is None:
            device = str(meta.get("device") or "")
            return fresh_run_dir(results, default_run_id(str(meta["config_name"]), str(meta["backend"]), device))
        _check_new(out)
        return out
    if out is not None:
        raise InputError("--out", str(out), "cannot be combined with --resume (the resumed run keeps its directory)")
    if resume == "":
        found = newest_resumable(results, meta, pending)
        if found is None:
            raise InputError(
                source,
                "--resume",
                f"no unfinished run of this config on {meta['backend']} / {meta['device']} under {results}/; "
                "start a new one without --resume",
            )
        run_dir = found
    else:
        run_dir = Path(resume)
    check_resumable(run_dir, meta, source)
    return run_dir


def _check_writable_parent(path: Path, option: str) -> None:
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise InputError(str(path), option, f"{existing} exists and is not a directory")
    if not os.access(existing, os.W_OK):
        raise InputError(str(path), option, f"{existing} is not writable")


def _check_new(out: Path) -> None:
    """`--out` names a new run: it must not hold one already (continuing a run is explicit: --resume)."""
    _check_writable_parent(out, "--out")
    if RunDirectory(out).is_run():
        refuse_stored(out, "choose another --out")
        raise InputError(
            str(out), "--out", f"already holds a run; continue it with --resume {out}, or choose another --out"
        )


def check_resumable(run_dir: Path, meta: Provenance, source: str) -> None:
    """The run directory must be a run of the same config on the same backend and device, and not a stored one:
    mixing them would make the samples incomparable, and resume would count another device's rows as done."""
    run = RunDirectory(run_dir)
    if not run_dir.is_dir() or not run.is_run():
        raise InputError(str(run_dir), "--resume", "not a moecal run directory (no samples.csv or meta.json)")
    refuse_stored(run_dir, "start a new run instead (without --resume)")
    refuse_links(run_dir)
    _check_writable_parent(run_dir, "--resume")
    previous = run.read_meta()
    run.done_runs()  # validates samples.csv: a run whose rows cannot be trusted is not continued
    differs = same_run_kind(previous, meta)
    if differs:
        raise InputError(
            source,
            "--resume",
            f"{run_dir} holds a run with a different {differs} ({previous.get(differs)!s} there, "
            f"{meta.get(differs)!s} now); start a new run without --resume",
        )


def _pending(points: list[Point], plan: RoundSchedule, run_dir: Path) -> int:
    return pending_runs(points, plan, "", RunDirectory(run_dir).done_runs())


def pending(sweep: PreparedSweep) -> int:
    """Runs still to do in the sweep's run directory (all of them for a new run); reads, never writes."""
    return _pending(sweep.points, sweep.plan, sweep.run_dir)
