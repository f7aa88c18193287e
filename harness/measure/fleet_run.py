"""`moecal fleet FLEET.yaml`: one calibration over several hardware classes of a running Ray cluster.

A fleet file lists sweeps and where each runs:

    entries:
      - {config: configs/gb10.yaml, where: {hw_gb10: 1}}
      - {config: configs/m-series.yaml, where: {hw_m3max: 1}, workers: 1, name: m3max}

`where` is a Ray custom resource that names a hardware class: each machine joins the cluster with
`ray start --address=HEAD:6379 --resources='{"hw_gb10": 1}'`, so Ray places an entry's workers only on machines of
its class. Each entry's rows stream back into its own run directory on the driver (`<out>/<name>/`), with the
provenance of the machine that measured them (the worker prepares the sweep there). A machine that disappears keeps
its finished rows; Ray restarts its worker on the next machine of the same class, and until one joins the entry waits
(and says so). Re-running the same command resumes every entry.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.config.backend_specs import backend_spec
from harness.config.schema import SweepConfig, field_path, load_config, load_yaml
from harness.errors import InputError
from harness.measure.protocol import ProgressHook, pending_runs
from harness.measure.ray_workers import Pool, SweepSpec, connect, require_ray, serve, start_workers, stop_workers
from harness.runs.rundir import RunDirectory, RunLock, SampleWriter, mixed_settings, new_segment

# Ray's own resources: a hardware class needs a custom label, or every machine would match.
BUILTIN_RESOURCES = {"CPU", "GPU", "TPU", "memory", "object_store_memory"}
# Bounds a fleet file is held to before Ray sees it: each worker is an actor with its own process and a copy of the
# sweep, so 10^9 workers would exhaust the driver long before Ray refused them; a hardware class is counted in units.
MAX_WORKERS = 1024
MAX_AMOUNT = 1e6
LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


class FleetEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    config: str = Field(min_length=1, description="sweep config, relative to the fleet file")
    where: dict[str, float] = Field(min_length=1, description="Ray custom resources naming a hardware class")
    workers: int = Field(1, ge=1, le=MAX_WORKERS, description="workers of this class (each takes `where` once)")
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]+$", description="run directory name")

    @field_validator("where")
    @classmethod
    def _custom_labels(cls, value: dict[str, float]) -> dict[str, float]:
        for label, amount in value.items():
            if label in BUILTIN_RESOURCES or label.startswith(("node:", "accelerator_type:")):
                raise ValueError(f"{label!r} is one of Ray's own resources; name the class, e.g. hw_gb10: 1")
            if not LABEL.match(label):
                raise ValueError(f"{label!r} is not a resource label (letters, digits, _ . -)")
            if not 0 < amount <= MAX_AMOUNT:  # also NaN and .inf, which Ray cannot schedule
                raise ValueError(f"{label}: amount must be > 0 and at most {MAX_AMOUNT:g}, got {amount}")
        return value


class FleetFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    entries: list[FleetEntry] = Field(min_length=1)


@dataclass(frozen=True)
class Entry:
    """One validated fleet entry: its sweep config (already validated here) and where it runs."""

    name: str
    config_path: Path
    config: SweepConfig
    where: dict[str, float]
    workers: int

    @property
    def label(self) -> str:
        return ", ".join(f"{k}: {v:g}" for k, v in self.where.items())


def load_fleet(path: str | Path) -> list[Entry]:
    """Read and validate a fleet file and every config it names; the first problem is an InputError (one line)."""
    path = Path(path)
    source = str(path)
    try:
        data = load_yaml(path)  # duplicate keys and deep nesting refused as in a sweep config
    except UnicodeDecodeError as exc:
        raise InputError(source, "(file)", f"invalid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(source, "(top level)", "expected a mapping with `entries:` (a list of {config, where})")
    try:
        fleet = FleetFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        problem = {"extra_forbidden": "unknown key", "missing": "required field is missing"}.get(first["type"])
        message = problem or first["msg"].removeprefix("Value error, ")
        raise InputError(source, field_path(tuple(first["loc"])), message) from None
    entries: list[Entry] = []
    for index, item in enumerate(fleet.entries):
        config_path = (
            (path.parent / item.config).resolve() if not Path(item.config).is_absolute() else Path(item.config)
        )
        if not config_path.is_file():
            raise InputError(source, f"entries[{index}].config", f"no such file: {config_path}")
        config = load_config(config_path)  # a bad config is reported with its own file and field
        name = item.name or f"{config.name}-{'-'.join(item.where)}"
        if name in (".", ".."):  # `<out>/..` is the parent of --out: the entry's run would land outside it
            raise InputError(source, f"entries[{index}].name", f"{name!r} names no folder of its own; choose a name")
        if any(e.name == name for e in entries):
            raise InputError(source, f"entries[{index}].name", f"{name!r} is used twice; give each entry a `name`")
        entries.append(Entry(name, config_path, config, dict(item.where), item.workers))
    return entries


@dataclass
class EntryResult:
    """What one entry produced: its run directory, the machine's identity, row counts and the decision."""

    entry: Entry
    run_dir: Path
    host: str = ""
    backend: str = ""
    device: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    action: str = ""
    recommended_cap: int | None = None
    addendum: Path | None = None
    error: str = ""


Track = Callable[[str, int], ProgressHook]  # (entry name, runs to do) -> per-row hook


def run_fleet(
    entries: list[Entry],
    out: Path,
    address: str | None,
    say: Callable[[str], None],
    track: Track,
    on_entry_done: Callable[[EntryResult], None] | None = None,
) -> list[EntryResult]:
    """Run every entry concurrently on its hardware class; each writes its own run directory under `out`.
    `on_entry_done` runs on each entry that measured something (the CLI writes its summary and addendum there); an
    error it raises is that entry's error, like one of its sweep."""
    ray = require_ray("fleet")
    connect(ray, address or os.environ.get("RAY_ADDRESS") or "auto")  # a running cluster, never a private one
    available = ray.cluster_resources()
    results = [EntryResult(entry, out / entry.name) for entry in entries]
    for result in results:
        missing = [label for label in result.entry.where if label not in available]
        if missing:
            say(
                f"{result.entry.name}: no machine with {', '.join(missing)} in the cluster yet; it waits for one "
                "(join with: RAY_AUTH_MODE=token ray start --address=<head>:6379 "
                f"--resources='{json.dumps(_whole(result.entry.where))}')"
            )
    work = [(ray, result, say, track, on_entry_done) for result in results]
    threads = [threading.Thread(target=_run_entry, args=args, daemon=True) for args in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():  # join in slices so Ctrl-C reaches the driver
            thread.join(0.2)
    return results


def _whole(where: dict[str, float]) -> dict[str, float | int]:
    """Resource amounts as a user writes them (1, not 1.0)."""
    return {k: int(v) if float(v).is_integer() else v for k, v in where.items()}


def _run_entry(
    ray,
    result: EntryResult,
    say: Callable[[str], None],
    track: Track,
    on_entry_done: Callable[[EntryResult], None] | None,
) -> None:
    """Prepare the entry's sweep on a machine of its class, then measure its points there; errors end up in
    `result.error` (one line) so one broken entry does not stop the others."""
    from harness.measure import sweep_setup

    entry = result.entry
    spec = SweepSpec(config_name=entry.config_path.name, config_text=entry.config_path.read_text(encoding="utf-8"))
    options: dict[str, object] = {"resources": entry.where, "num_cpus": 0}
    if entry.config.backend != "auto":  # a GPU backend's worker claims its GPU (the registry's RayWorker)
        claim = backend_spec(entry.config.backend).ray_worker.options
        options.update({key: value for key, value in claim.items() if key == "num_gpus"})
    actors = start_workers(ray, spec, entry.workers, options)
    try:
        described = ray.get(actors[0].describe.remote())
        if described["error"]:
            _, field_name, problem = described["error"]
            raise InputError(f"{entry.config_path} (on {described['host']})", field_name, problem)
        meta = dict(described["meta"])
        meta.update(
            run_id=entry.name,
            config_path=str(entry.config_path),
            command=shlex.join(["moecal", *sys.argv[1:]]),
            fleet_where=entry.label,
        )
        result.host, result.backend, result.device = str(meta["host"]), str(meta["backend"]), str(meta["device"])
        segment = new_segment(meta)
        run = RunDirectory(result.run_dir)
        if run.is_run():  # re-running the fleet continues each entry's run, with the same code only
            sweep_setup.check_resumable(result.run_dir, meta, str(entry.config_path))
            mixed = mixed_settings(run.read_meta(), segment)
            if mixed:
                raise InputError(
                    str(result.run_dir),
                    "(resume)",
                    f"this entry was measured with other settings ({'; '.join(mixed)}); give the fleet another --out",
                )
        points, plan = described["points"], described["plan"]
        with (
            RunLock(result.run_dir),
            SampleWriter(result.run_dir, meta, segment, entry.config.measure.policy) as writer,
        ):
            done = writer.done_keys()
            on_run = track(entry.name, pending_runs(points, plan, entry.name, done))
            pool = Pool(entry.name, actors, points, plan, entry.name, writer, done, on_run, say)
            pool.waiting_for = f"a machine with {entry.label} (Ray restarts the worker there)"
            serve(ray, pool)
        counts = run.read_samples()["status"].value_counts()
        result.counts = {status: int(counts.get(status, 0)) for status in ("ok", "fail", "skip")}
        if on_entry_done is not None and result.counts["ok"]:
            on_entry_done(result)
    except InputError as exc:
        result.error = str(exc)
    except Exception as exc:  # a worker's crash: keep the other entries going, report it as one line
        result.error = f"{entry.name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        stop_workers(ray, actors)
