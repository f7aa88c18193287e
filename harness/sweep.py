"""Sweep orchestration: config → workload → points → run directory, then the measurement loop.

`prepare` does everything that can fail on bad input (config, backend, binaries, resume compatibility) before any
run starts, so `--dry-run` and `moecal plan` exercise exactly the checks a real sweep would hit.
"""

from __future__ import annotations

import datetime as _dt
import os
import shlex
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import provenance, resources
from harness.backends import BACKEND_NAMES, BackendUnavailable, resolve_name
from harness.config import SweepConfig, load_config
from harness.errors import InputError
from harness.measure import Point, ProgressHook, SweepPlan, Workload, measure_point, pending_runs
from harness.results import SampleWriter, read_meta, read_samples
from harness.workloads import build_workload

DEFAULT_RESULTS = Path("results")
CONFIG_DIR = resources.config_dir()


def default_config() -> Path:
    """The shipped config for the backend `auto` finds here: m-series on Apple GPUs, gb10 or h200 on NVIDIA,
    cpu-smoke on a plain machine — so `make sweep` does real work anywhere."""
    backend = resolve_name("auto")
    if backend == "metal":
        return CONFIG_DIR / "m-series.yaml"
    if backend == "cuda":
        gpu = str(provenance.nvidia_gpu().get("gpu", ""))
        return CONFIG_DIR / ("gb10.yaml" if "GB10" in gpu.upper() else "h200.yaml")
    return CONFIG_DIR / "cpu-smoke.yaml"


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


def backend_for(config: SweepConfig, override: str | None) -> str:
    """The backend label of a run. For external commands `auto` means the platform's GPU (the binary picks its own
    device); for built-in workloads it is the first usable of metal → cuda → cpu."""
    name = override or config.backend
    if name not in (*BACKEND_NAMES, "auto"):
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    if name != "auto":
        return name
    if config.workload.kind == "command":
        return provenance.platform_backend()
    return resolve_name("auto")


def default_run_id(config: SweepConfig, backend: str) -> str:
    """date + backend + host + config name: re-running the same sweep the same day resumes it."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"{_dt.date.today():%Y%m%d}-{backend}-{host}-{config.name}"


def prepare(
    config_path: str | Path,
    out: Path | None = None,
    backend: str | None = None,
    only: Sequence[str] = (),
    rounds: int | None = None,
) -> Sweep:
    config_path = Path(config_path)
    config = load_config(config_path)
    source = str(config_path)
    try:
        backend_name = backend_for(config, backend)
        device_info: dict[str, str] = {}
        device = ""
        if config.workload.kind == "command":
            device = str(provenance.nvidia_gpu().get("gpu") or provenance.cpu_name())
        workload = build_workload(config, source, backend_name, device)
    except BackendUnavailable as exc:
        raise InputError(source, "backend", str(exc)) from None
    live_backend = getattr(workload, "backend", None)
    if live_backend is not None:
        device_info = {"device": live_backend.device_name(), **live_backend.device_info()}
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
    run_id = out.name if out else default_run_id(config, backend_name)
    run_dir = out or DEFAULT_RESULTS / run_id
    meta = provenance.collect(backend_name, device_info)
    if device:
        meta["device"] = device
    if config.library_pin:
        meta["library_pin"] = config.library_pin
    elif config.workload.kind == "command":
        meta["library_pin"] = f"the command's own build ({config.workload.command[0]})"
    meta.update(
        run_id=run_id,
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
    _check_resumable(run_dir, meta, source)
    return Sweep(config, config_path, workload, points, plan, run_id, run_dir, meta)


def _check_resumable(run_dir: Path, meta: dict[str, object], source: str) -> None:
    """The run directory must be usable, and hold (if anything) a run of the same config on the same backend and
    device: mixing them would make the samples incomparable, and resume would count another device's rows as done."""
    where = str(run_dir)
    existing = next((p for p in (run_dir, *run_dir.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise InputError(where, "--out", f"{existing} exists and is not a directory")
    if not os.access(existing, os.W_OK):
        raise InputError(where, "--out", f"{existing} is not writable")
    try:
        previous = read_meta(run_dir)
        if (run_dir / "samples.csv").exists():
            read_samples(run_dir)
    except (ValueError, OSError) as exc:  # JSONDecodeError is a ValueError
        raise InputError(where, "(file)", f"not a moecal run directory ({exc}); use --out for a new one") from None
    for key in ("config_sha256", "backend", "device"):
        if previous.get(key) not in (None, meta.get(key)):
            raise InputError(
                source,
                "(file)",
                f"{run_dir} holds a run with a different {key} ({previous.get(key)!s:.16}); "
                "use --out to start a new run directory",
            )


def execute(sweep: Sweep, on_run: ProgressHook, workers: str | None = None) -> int:
    """Run every pending run; returns the number of rows written. Safe to interrupt and re-run (resumes).

    `workers` (a count or 'auto') spreads whole points over Ray workers (harness.scale); rows still go through
    this process's writer."""
    written = 0
    with SampleWriter(sweep.run_dir, sweep.meta) as writer:
        done = writer.done_keys()
        if workers is not None:
            from harness.scale import measure_on_workers  # Ray is an optional extra

            return measure_on_workers(sweep, writer, done, on_run, workers)
        for point in sweep.points:
            written += measure_point(sweep.workload, point, sweep.plan, writer, sweep.run_id, done, on_run)
        if sweep.config.measure.refine_budget_runs and sweep.config.workload.kind == "layer":
            from harness.refine import refine  # adaptive Dff refinement: bisect the crossover bracket (DESIGN §7)

            def measure(point: Point) -> int:
                return measure_point(sweep.workload, point, sweep.plan, writer, sweep.run_id, done, on_run)

            default = sweep.config.current_default
            written += refine(sweep.run_dir, sweep.workload, sweep.points, measure, sweep.config.measure, default)
    return written


def pending(sweep: Sweep) -> int:
    done: dict[tuple, str] = {}
    if (sweep.run_dir / "samples.csv").exists():
        with SampleWriter(sweep.run_dir, sweep.meta) as writer:
            done = writer.done_keys()
    return pending_runs(sweep.points, sweep.plan, sweep.run_id, done)


def quick_table(run_dir: Path) -> pd.DataFrame:
    """Per point: median tok/s of each arm and the ratio of medians (the full statistics are `moecal summarize`)."""
    samples = read_samples(run_dir).fillna({"d_model": 0})
    keys = ["workload", "model", "d_model", "dff"]  # a layer config's decode block shares model names and dffs
    ok = samples[samples["status"] == "ok"]
    table = ok.pivot_table(index=keys, columns="arm", values="tok_s", aggfunc="median").reset_index()
    for arm in ("fallback", "fused"):
        if arm not in table.columns:
            table[arm] = float("nan")
    table["ratio"] = table["fused"] / table["fallback"]
    counts = samples.groupby(keys)["status"].value_counts().unstack(fill_value=0)
    counts = counts.reindex(columns=["ok", "fail", "skip"], fill_value=0).reset_index()
    table = table.merge(counts, on=keys, how="outer").fillna({"ok": 0, "fail": 0, "skip": 0})
    return table.sort_values(["workload", "d_model", "dff"])
