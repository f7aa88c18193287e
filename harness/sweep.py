"""Sweep orchestration: config → workload → points → run directory, then the measurement loop.

`prepare` does everything that can fail on bad input (config, backend, binaries, resume compatibility) before any
run starts, so `--dry-run` and `moecal plan` exercise exactly the checks a real sweep would hit.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness import dispatch, provenance, resources
from harness.backends import BACKEND_NAMES, BackendUnavailable, backend_spec, detect, resolve_name
from harness.config import SweepConfig, load_config
from harness.errors import InputError
from harness.measure import Point, ProgressHook, SweepPlan, Workload, measure_point, pending_runs
from harness.rundir import (
    DEFAULT_RESULTS,
    RunDirectory,
    RunLock,
    SampleWriter,
    default_run_id,
    fresh_run_dir,
    mixed_settings,
    new_segment,
    newest_resumable,
    refuse_links,
    refuse_stored,
    same_run_kind,
)
from harness.summary_columns import SummaryCol
from harness.synth_sweep import with_synthetic_models
from harness.workloads import build_workload, workload_kind

if TYPE_CHECKING:  # the analysis (pandas, scipy) loads when a sweep is summarised, not for `moecal plan`
    import pandas as pd

CONFIG_DIR = resources.config_dir()


def default_config() -> Path:
    """The shipped config for the backend `auto` finds here (its registry entry's `default_config`: m-series on
    Apple GPUs, gb10 or h200 on NVIDIA, cpu-smoke on a plain machine) — so `make sweep` does real work anywhere."""
    return CONFIG_DIR / backend_spec(resolve_name("auto")).default_config(detect().gpu_name)


@dataclass
class Sweep:
    config: SweepConfig
    config_path: Path
    workload: Workload
    points: list[Point]
    plan: SweepPlan
    run_id: str
    run_dir: Path
    meta: dict[str, object]
    resuming: bool  # continuing an existing run (--resume), as opposed to starting a new one
    segment: dict[str, object]  # this sweep's entry in meta.json's `segments`
    measure_null: bool = False  # --measure-null: expected-null command models are measured (Ray workers need it too)


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
) -> Sweep:
    """Everything a sweep needs, checked. `resume`: None starts a new run (in `out`, or a fresh run id under
    `results`); "" continues the newest unfinished run of this config on this device; a path continues that run.
    A resumed run must have been written by the same kernels and launch settings unless `allow_mixed`.
    `measure_null` runs the command models whose config says expect_null (they stay null points). `plan_only`
    (`moecal plan`) builds a built-in workload on the backend's device facts (harness.backends.device_facts): its
    points, memory and estimates are the same, it cannot run, and the CPU plan never imports numba."""
    config_path = Path(config_path)
    try:
        config = load_config(config_path)
    except UnicodeDecodeError as exc:
        raise InputError(str(config_path), "(file)", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    source = str(config_path)
    config = with_synthetic_models(config, source)
    try:
        backend_name = backend_for(config, backend)
        workload = build_workload(config, source, backend_name, plan_only)
    except BackendUnavailable as exc:
        raise InputError(source, "backend", str(exc)) from None
    workload.preflight()
    points = workload.points()
    if only:
        names = {p.key["model"] for p in points}
        unknown = [n for n in only if n not in names]
        if unknown:
            raise InputError(source, "models", f"--only {unknown[0]!r} is not a model of this config ({sorted(names)})")
        points = [p for p in points if p.key["model"] in only]
    plan = SweepPlan(
        rounds=rounds or config.measure.rounds,
        warmup_runs=config.measure.warmup_runs,
        order=config.measure.order,
        seed=config.measure.seed,
        adaptive=config.measure.adaptive,
        max_rounds=max(config.measure.max_rounds, rounds or 0),
        target_ci_width=config.measure.target_ci_width,
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
    workload.describe_run(meta, points, measure_null)
    run_dir = _choose_run_dir(out, resume, results, meta, source, lambda folder: _pending(points, plan, folder))
    previous = RunDirectory(run_dir).read_meta() if resume is not None else {}
    meta["run_id"] = run_id = str(previous.get("run_id") or run_dir.name)
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
    return Sweep(config, config_path, workload, points, plan, run_id, run_dir, meta, resuming, segment, measure_null)


def _choose_run_dir(
    out: Path | None,
    resume: str | None,
    results: Path,
    meta: dict[str, object],
    source: str,
    pending: Callable[[Path], int],
) -> Path:
    """A new run directory, or the one to resume after checking that it may be continued (see harness.rundir)."""
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


def check_resumable(run_dir: Path, meta: dict[str, object], source: str) -> None:
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


def _pending(points: list[Point], plan: SweepPlan, run_dir: Path) -> int:
    return pending_runs(points, plan, "", RunDirectory(run_dir).done_runs())


@contextlib.contextmanager
def writing(sweep: Sweep) -> Iterator[None]:
    """Hold the run directory as its one writer (creating it: an unwritable place fails here, before any output)."""
    with RunLock(sweep.run_dir):
        if not sweep.resuming and RunDirectory(sweep.run_dir).is_run():  # another sweep started it since `prepare`
            raise InputError(str(sweep.run_dir), "--out", "already holds a run; continue it with --resume")
        yield


def execute(sweep: Sweep, on_run: ProgressHook, workers: str | None = None) -> int:
    """Run every pending run (inside `writing(sweep)`); returns the number of rows written. Safe to interrupt:
    `--resume` continues. Writes no file until the first row.

    `workers` (a count or 'auto') spreads whole points over Ray workers (harness.scale); rows still go through
    this process's writer."""
    written = 0
    verify_dispatch(sweep)
    with SampleWriter(sweep.run_dir, sweep.meta, sweep.segment) as writer:
        done = writer.done_keys()
        if workers is not None:
            from harness.scale import measure_on_workers  # Ray is an optional extra

            if sweep.config.measure.refine_budget_runs:
                raise InputError(
                    str(sweep.config_path),
                    "measure.refine_budget_runs",
                    "Dff refinement runs in one process: drop --workers, or set the refinement budget to 0",
                )

            return measure_on_workers(sweep, writer, done, on_run, workers)
        for point in sweep.points:
            written += measure_point(sweep.workload, point, sweep.plan, writer, sweep.run_id, done, on_run)
        if sweep.config.measure.refine_budget_runs and sweep.workload.refinable:
            from harness.refine import refine  # adaptive Dff refinement: bisect the crossover bracket (DESIGN §7)

            def measure(point: Point) -> int:
                return measure_point(sweep.workload, point, sweep.plan, writer, sweep.run_id, done, on_run)

            default = sweep.config.current_default
            written += refine(sweep.run_dir, sweep.workload, sweep.points, measure, sweep.config.measure, default)
    return written


def verify_dispatch(sweep: Sweep) -> None:
    """The untimed dispatch verification pass of a command sweep with `dispatch_check` (harness.dispatch), before
    any timed run; a model found declined becomes a skipped point (unless --measure-null): both its arms run the
    fallback, so timing them costs model loads for a point that is null anyway."""
    settings = sweep.config.workload
    check = getattr(settings, "dispatch_check", None)
    if check is None or not check.enabled:
        return
    sweep.run_dir.mkdir(parents=True, exist_ok=True)
    record = dispatch.verify(sweep.points, sweep.workload.open, settings, sweep.run_dir)
    if sweep.measure_null:
        return
    declined = dispatch.null_reasons({"verification": record}, dict(sweep.meta.get("expect_null") or {}))
    for point in sweep.points:
        reason = declined.get(str(point.key["model"]))
        if reason and not point.skip_reason:
            point.skip_reason = f"{reason} (--measure-null measures it)"


def pending(sweep: Sweep) -> int:
    """Runs still to do in the sweep's run directory (all of them for a new run); reads, never writes."""
    return _pending(sweep.points, sweep.plan, sweep.run_dir)


def why_no_result(run_dir: Path) -> tuple[str, bool] | None:
    """Why a finished sweep has nothing to analyse (not one ok run), as one line, and whether that is a failure
    (some run failed) rather than every point skipped (nothing fits here); None when it has results."""
    run = RunDirectory(run_dir)
    if not run.samples.exists():
        return "no run was recorded", False
    samples = run.read_samples()
    statuses = samples["status"].value_counts()
    if statuses.get("ok", 0):
        return None
    failed = samples[samples["status"] == "fail"]
    first = f"; first error: {failed['error'].iloc[0]}" if len(failed) else ""
    counts = f"{statuses.get('fail', 0)} failed, {statuses.get('skip', 0)} skipped"
    return f"no run succeeded ({counts}){first}"[:400].replace("\n", " "), bool(len(failed))


def quick_table(run_dir: Path) -> pd.DataFrame:
    """Per point: median tok/s of each arm, the fused/fallback estimate, run counts, the median generated tokens per
    arm and the dispatch the verification pass found (harness.dispatch). The estimate is the geometric-mean ratio the
    summary's interval belongs to (the same number the addendum shows), not a ratio of medians, so the terminal and
    the addendum never disagree."""
    import pandas as pd

    from harness.analysis import analyse_path

    run = RunDirectory(run_dir)
    samples = run.read_samples().fillna({"d_model": 0})
    keys = ["workload", "model", "d_model", "dff"]  # a layer config's decode block shares model names and dffs
    ok = samples[samples["status"] == "ok"]
    table = ok.pivot_table(index=keys, columns="arm", values="tok_s", aggfunc="median").reset_index()
    for arm in ("fallback", "fused"):
        if arm not in table.columns:
            table[arm] = float("nan")
    summary = analyse_path(run_dir).summary.fillna({"d_model": 0})
    table = table.merge(
        summary[[*keys, SummaryCol.ESTIMATE]].rename(columns={SummaryCol.ESTIMATE: "ratio"}), on=keys, how="left"
    )
    # generated tokens per arm (the binary's count): arms that stopped at different EOS did different work
    tokens = ok.assign(n=pd.to_numeric(ok["tokens"], errors="coerce")).groupby(keys + ["arm"])["n"].median()
    tokens = tokens.unstack("arm").reindex(columns=["fallback", "fused"]).add_prefix("tokens_").reset_index()
    table = table.merge(tokens, on=keys, how="left")
    counts = samples.groupby(keys)["status"].value_counts().unstack(fill_value=0)
    counts = counts.reindex(columns=["ok", "fail", "skip"], fill_value=0).reset_index()
    table = table.merge(counts, on=keys, how="outer").fillna({"ok": 0, "fail": 0, "skip": 0})
    facts = dispatch.per_model(dispatch.read_record(run_dir), dict(run.read_meta().get("expect_null") or {}))
    table["dispatch"] = [str(facts.get(str(m), {}).get("dispatch", "")) for m in table["model"]]
    return table.sort_values(["workload", "d_model", "dff"])
