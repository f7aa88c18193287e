"""Spread the points of one sweep over Ray workers, one device each; the driver alone writes the rows.

Why Ray and not a home-made scheduler: placing one worker per GPU (`num_gpus=1` sets CUDA_VISIBLE_DEVICES), on
machines labelled by a custom resource (`moecal fleet`), restarting a worker that died and waiting for a machine of
the right class are what Ray already does; vLLM's MoE tuner uses it the same way.

The protocol is unchanged (harness.measure.protocol): a worker rebuilds the sweep from its config and runs
`measure_point` for whole points, so both arms of a point and every round of it run on one worker with the usual
rotation. Each finished row streams back to the driver at once (a Ray streaming generator), and the driver appends
it to samples.csv through the sweep's own SampleWriter, so a killed driver or a dead worker loses at most the runs in
flight, and a re-run finishes only what is missing (resume works exactly as for a single process).

Which worker ran which row goes to `workers.csv` next to samples.csv (run key + host, device id, worker pid), not into
samples.csv's `device` column: `device` names the device model of the run directory (one backend, one device per
run directory), and the statistics and `moecal check` group and join points by it — a per-GPU suffix would split a
point resumed on another GPU and make a baseline from GPU 3 incomparable with a run on GPU 5.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import socket
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from harness.config.backend_specs import backend_spec
from harness.config.install_hint import missing_module_hint
from harness.errors import InputError
from harness.measure.protocol import RERUN_NOTE, Point, ProgressHook, RoundSchedule, measure_point, runs_again
from harness.runs.formats import RUN_KEY, SAMPLE_COLUMNS, csv_line, point_key, run_key
from harness.runs.provenance_keys import Provenance
from harness.runs.rundir import SampleRow, SampleWriter, truncate_torn_tail

if TYPE_CHECKING:
    from harness.measure.sweep_setup import PreparedSweep

WORKER_COLUMNS = [*RUN_KEY, "host", "device_id", "worker_pid", "timestamp"]
# A worker that dies this many times in a row without finishing a run is given up (a crash loop, not a lost machine).
MAX_DEATHS_IN_A_ROW = 3
CONNECT_TIMEOUT_S = 5.0  # `fleet --address`: how long the head node may take to accept a TCP connection
RESTART_WAIT_S = 60.0  # how long a dead worker may take to come back before its thread gives up


def require_ray(option: str) -> ModuleType:
    """The ray module, or the one-line error that names the extra to install."""
    try:
        import ray
    except ImportError:
        raise InputError(option, "", missing_module_hint("ray")) from None
    return ray


def parse_workers(text: str) -> int | None:
    """`--workers N|auto`: a positive count, or None for auto (resolved against the cluster once Ray is up)."""
    if text == "auto":
        return None
    if not text.isdigit() or int(text) < 1:
        raise InputError("--workers", "", f"expected a positive number or 'auto', got {text!r}")
    return int(text)


def connect(ray: ModuleType, address: str | None) -> None:
    """Join the Ray cluster at `address` (None: start a private one on this node), unless this process already has.

    The private instance of `--workers` has no dashboard. It cannot be kept to the loopback address: Ray replaces
    a `_node_ip_address` of 127.0.0.1 by the node's own address, and its gRPC servers listen on every interface;
    what guards it is Ray's token authentication (`RAY_AUTH_MODE`, on by default in the Ray this was tested with).
    Worker output stays out of the driver's terminal: rows and errors come back as values, not log lines. What Ray
    itself prints while connecting is held back: after a failure the one error line replaces it, after a success
    it is passed on.
    """
    if ray.is_initialized():
        return
    if address:
        check_reachable(address)
    with _held_stderr() as held:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
            held.failed = True  # Ray's own log lines about the failure: the error line below replaces them
            where = address or "(local)"
            raise InputError("--address", where, join_failure(exc, held.text())) from None


# What Ray says (in its exception, or only in its C++ log lines) when the cluster wants a token this driver lacks.
TOKEN_REFUSED = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError", "authentication token")


def join_failure(exc: BaseException, ray_log: str) -> str:
    """The error line for a driver that could not join, naming the cause Ray only logs. Ray ≥ 2.5x enables token
    authentication on a head started with a token (`ray get-auth-token --generate`, or RAY_AUTH_MODE=token); a
    driver given an explicit address sends its token only when RAY_AUTH_MODE=token, and otherwise retries for
    seconds and then reports a bare "Failed to connect"."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if type(exc).__name__ == "AuthenticationError" or any(mark in ray_log for mark in TOKEN_REFUSED):
        return (
            f"cannot join the Ray cluster: it uses token authentication and refused this driver's token ({first}); "
            "copy the head's ~/.ray/auth_token to ~/.ray/auth_token here (or set RAY_AUTH_TOKEN) and run with "
            "RAY_AUTH_MODE=token"
        )
    return f"cannot join the Ray cluster: {first}"


def check_reachable(address: str) -> None:
    """Refuse an address nothing answers at, in CONNECT_TIMEOUT_S: Ray itself retries such an address for minutes,
    printing a log line every few seconds, instead of failing. `auto` (the cluster `ray start` runs here) is Ray's
    to find."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise InputError("--address", address, "expected HOST:PORT (the head node's GCS address, e.g. 10.0.0.1:6379)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise InputError(
            "--address", address, f"cannot join the Ray cluster: nothing answers there ({reason})"
        ) from None


class _Held:
    """What was written to file descriptor 2 while held; `failed` drops it instead of passing it on."""

    def __init__(self, file: Any):
        self.file = file
        self.failed = False

    def text(self) -> str:
        sys.stderr.flush()
        self.file.seek(0)
        return self.file.read().decode(errors="replace")


@contextlib.contextmanager
def _held_stderr() -> Iterator[_Held]:
    """Redirect file descriptor 2 (Ray's C++ parts and Python logging write there) into a temporary file."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as file:
        held = _Held(file)
        os.dup2(file.fileno(), 2)
        try:
            yield held
        except BaseException:  # a failure, Ctrl-C or a signal: Ray's lines about it are noise next to the error line
            held.failed = True
            raise
        finally:
            text = held.text()
            os.dup2(saved, 2)
            os.close(saved)
            if text and not held.failed:
                os.write(2, text.encode())


class WorkerView(TypedDict):
    """A worker's view of the sweep (Worker.describe): its host and either the error that stops it (source, field,
    problem: an InputError's parts) or the sweep's provenance, points and round plan as that machine prepared them."""

    error: tuple[str, str, str] | None
    host: str
    meta: NotRequired[Provenance]
    points: NotRequired[list[Point]]
    plan: NotRequired[RoundSchedule]


@dataclass(frozen=True)
class SweepSpec:
    """What a worker needs to rebuild the same sweep: the config's text (the worker may be another machine) and
    the options that shape the plan. `cwd` is where relative command paths resolve (None: the worker's own)."""

    config_name: str
    config_text: str
    backend: str | None = None
    only: tuple[str, ...] = ()
    rounds: int | None = None
    cwd: str | None = None
    measure_null: bool = False


class SweepWorker:
    """One Ray actor: owns one device, rebuilds the sweep there and measures whole points on request.

    A problem building the sweep (a binary missing on that machine) is kept and returned by `describe`, so the
    driver can print it as one line instead of a dead actor's traceback.
    """

    def __init__(self, spec: SweepSpec):
        from harness.measure import sweep_setup

        if spec.cwd and Path(spec.cwd).is_dir():
            os.chdir(spec.cwd)
        self.host = socket.gethostname()
        self.device_id = _device_id()
        self.error: InputError | None = None
        self.sweep: PreparedSweep | None = None
        # the config is only read while preparing (later it names the file in messages), so a scratch copy will do
        with tempfile.TemporaryDirectory(prefix="moecal-worker-") as scratch:
            config_path = Path(scratch) / spec.config_name
            config_path.write_text(spec.config_text, encoding="utf-8")
            try:
                self.sweep = sweep_setup.prepare(
                    config_path,
                    out=Path(scratch) / "run",
                    backend=spec.backend,
                    only=spec.only,
                    rounds=spec.rounds,
                    measure_null=spec.measure_null,
                )
            except InputError as exc:
                self.error = exc
        self.points = {point_key(p.key): p for p in self.sweep.points} if self.sweep else {}

    def ready(self) -> int:
        """A cheap call that answers once the actor is up (after a restart, too)."""
        return os.getpid()

    def describe(self) -> WorkerView:
        """This machine's view of the sweep: its provenance and points (or the error that stops it)."""
        if self.error is not None or self.sweep is None:
            error = self.error or InputError("(worker)", "", "the sweep could not be prepared")
            return {"error": (error.source, error.field, error.problem), "host": self.host}
        return {
            "error": None,
            "host": self.host,
            "meta": self.sweep.meta,
            "points": self.sweep.points,
            "plan": self.sweep.plan,
        }

    def run_point(self, key: tuple, run_id: str, done: dict[tuple, str]) -> Iterator[SampleRow]:
        """Measure the pending runs of one point; yields each row as soon as it is written (streamed to the driver).

        measure_point runs in a thread because it reports rows through a writer callback; the generator hands them
        on.
        """
        assert self.sweep is not None, "describe() reported why this worker has no sweep"
        point = self.points[key]
        relay = RowRelay()
        failure: list[BaseException] = []

        def measure() -> None:
            try:
                measure_point(self.sweep.workload, point, self.sweep.plan, relay, run_id, done, lambda _: None)
            except BaseException as exc:  # handed to the driver below, not lost in a thread
                failure.append(exc)
            finally:
                relay.rows.put(None)

        thread = threading.Thread(target=measure, daemon=True)
        thread.start()
        try:
            while (row := relay.rows.get()) is not None:
                yield {**row, "_host": self.host, "_device_id": self.device_id, "_pid": os.getpid()}
        finally:
            thread.join()
        if failure:
            raise failure[0]


def _device_id() -> str:
    """The device this worker owns: the GPU Ray assigned (CUDA_VISIBLE_DEVICES), else 'cpu' (shared cores)."""
    import ray

    gpus = ray.get_gpu_ids()
    return f"cuda:{','.join(str(g) for g in gpus)}" if gpus else "cpu"


class RowRelay:
    """The writer measure_point sees on a worker: each row goes to the driver (through `rows`)."""

    def __init__(self) -> None:
        self.rows: queue.Queue[SampleRow | None] = queue.Queue()

    def append(self, row: Mapping[str, object]) -> None:
        self.rows.put(dict(row))


def largest_first(points: Sequence[Point]) -> list[Point]:
    """Longest points first, so the last point to finish is a short one (the tail of the sweep stays short)."""

    def size(point: Point) -> tuple[float, float, float]:
        dff = float(point.key.get("dff") or 0)
        width = float(point.key.get("d_model") or 1)
        return (point.run_seconds_estimate or 0.0, float(point.memory_bytes or 0), dff * width)

    return sorted(points, key=size, reverse=True)


class WorkerLog:
    """workers.csv: which host, device and process ran each row, appended (and fsync'd) right after the row; a torn
    last line (a crash inside the write) is cut on reopening, as samples.csv's is."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "workers.csv"
        self.path.parent.mkdir(parents=True, exist_ok=True)  # samples.csv may not exist yet: it starts with a row
        if self.path.exists() and self.path.stat().st_size > 0:
            truncate_torn_tail(self.path)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        if fresh:
            self._write(WORKER_COLUMNS)

    def append(self, row: Mapping[str, object], host: str, device_id: str, pid: int) -> None:
        self._write([*run_key(row), host, device_id, pid, row.get("timestamp", "")])

    def _write(self, values: Sequence[object]) -> None:
        os.write(self._fd, csv_line(values).encode("utf-8"))  # spreadsheet-safe, as every CSV moecal writes
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


@dataclass
class Pool:
    """The points of one run directory and the workers that measure them (one thread each on the driver)."""

    name: str
    actors: list[Any]
    points: list[Point]
    plan: RoundSchedule
    run_id: str
    writer: SampleWriter
    done: dict[tuple, str]
    on_run: ProgressHook
    say: Callable[[str], None]
    waiting_for: str = "Ray to restart the worker on this node"
    written: int = 0
    queue: deque[Point] = field(init=False)

    def __post_init__(self) -> None:
        self.queue = deque(largest_first(self.points))
        self.log = WorkerLog(self.writer.run_dir)
        self.lock = threading.Lock()


def serve(ray: ModuleType, pool: Pool) -> int:
    """Run the pool's queue to the end on its workers; returns rows written. Raises what a worker raised (other than
    dying), and InputError when points are left because the workers kept dying."""
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_worker_loop, args=(ray, pool, actor, index, errors), daemon=True)
        for index, actor in enumerate(pool.actors)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():  # join in slices so Ctrl-C reaches the driver
                thread.join(0.2)
    finally:
        pool.log.close()
    if errors:
        raise errors[0]
    if pool.queue:
        raise InputError(
            pool.name,
            "",
            f"{len(pool.queue)} points not measured: their workers kept dying; "
            "finish them with `moecal sweep CONFIG --resume <run dir>`",
        )
    return pool.written


def _worker_loop(ray: ModuleType, pool: Pool, actor: Any, index: int, errors: list[BaseException]) -> None:
    """One worker's thread on the driver: take the largest pending point, stream its rows into the run directory;
    when the worker dies, put the point back (its finished rows stay) and wait until Ray has restarted it."""
    deaths = 0
    while deaths < MAX_DEATHS_IN_A_ROW:
        with pool.lock:
            if not pool.queue:
                return
            point = pool.queue.popleft()
            done = dict(pool.done)
        progressed = False
        try:
            for ref in actor.run_point.remote(point_key(point.key), pool.run_id, done):
                _record(pool, ray.get(ref))
                progressed = True
            deaths = 0
        except ray.exceptions.RayActorError:
            with pool.lock:
                pool.queue.appendleft(point)
            deaths = 0 if progressed else deaths + 1
            pool.say(
                f"{pool.name}: worker {index} died while measuring {point.label}; its finished rows are kept and the "
                f"point's remaining runs wait for {pool.waiting_for}"
            )
            if not _wait_until_restarted(ray, actor):
                return
        except BaseException as exc:
            errors.append(exc.cause if isinstance(exc, ray.exceptions.RayTaskError) and exc.cause else exc)
            with pool.lock:
                pool.queue.clear()
            return


def _wait_until_restarted(ray: ModuleType, actor: Any) -> bool:
    """Block until Ray has restarted the actor (on a machine with its resources, whenever one is there); False when
    it is gone for good (still failing after RESTART_WAIT_S). A call that lands while
    Ray is still restarting it can fail like a dead actor's, so that alone is no reason to give up (giving up
    early left points unmeasured: "their workers kept dying")."""
    deadline = time.monotonic() + RESTART_WAIT_S
    while True:
        try:
            ray.get(actor.ready.remote())
            return True
        except ray.exceptions.ActorUnavailableError:
            time.sleep(0.5)
        except ray.exceptions.RayActorError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)


def _record(pool: Pool, streamed: SampleRow) -> None:
    """Append one streamed row (driver side): samples.csv first, then workers.csv, then the resume map."""
    row = {k: v for k, v in streamed.items() if k in SAMPLE_COLUMNS}
    with pool.lock:
        pool.writer.append(row)
        pool.log.append(row, str(streamed["_host"]), str(streamed["_device_id"]), int(streamed["_pid"]))
        if row.get("status") in ("ok", "skip"):
            key = run_key(row)
            if pool.done.get(key) != "ok":
                pool.done[key] = str(row["status"])
        pool.written += 1
    pool.on_run(f"{row['model']} {row['arm']} r{row['round']}: {row['status']}{RERUN_NOTE * runs_again(row)}")


def worker_options(ray: ModuleType, backend: str, count: int | None) -> tuple[int, dict[str, object]]:
    """How many workers on this node, and the Ray options that give each its own device here.

    The backend's registry entry says what a worker claims (`RayWorker`): cuda one GPU each; cpu one core each —
    workers share the machine's cores and memory bandwidth, so their timings interfere; metal one Apple GPU per
    machine, so one worker (spread Macs with `moecal fleet`).
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    resources = next(n["Resources"] for n in ray.nodes() if n["NodeID"] == node)
    claim = backend_spec(backend).ray_worker
    kind, options = claim.unit, dict(claim.options)
    have = 1 if claim.resource is None else int(resources.get(claim.resource, 0))
    wanted = have if count is None else count
    if wanted < 1 or wanted > have:
        raise InputError("--workers", "", f"{wanted} workers need {wanted} {kind}; this node has {have} for Ray")
    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
    return wanted, options


def start_workers(ray: ModuleType, spec: SweepSpec, count: int, options: Mapping[str, object]) -> list[Any]:
    """`count` SweepWorker actors; Ray restarts one that dies (the driver resubmits its point)."""
    actor_class = ray.remote(SweepWorker)
    return [actor_class.options(max_restarts=-1, **options).remote(spec) for _ in range(count)]


def stop_workers(ray: ModuleType, actors: Sequence[Any]) -> None:
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def measure_on_workers(
    sweep: PreparedSweep, writer: SampleWriter, done: dict[tuple, str], on_run: ProgressHook, workers: str
) -> int:
    """`moecal sweep --workers N|auto`: the pending runs of `sweep` on N workers on this node; returns rows written."""
    ray = require_ray("--workers")
    count = parse_workers(workers)
    connect(ray, None)
    backend = str(sweep.meta.get("backend", ""))
    count, options = worker_options(ray, backend, count)
    spec = SweepSpec(
        config_name=Path(sweep.config_path).name,
        config_text=Path(sweep.config_path).read_text(encoding="utf-8"),
        backend=backend,
        only=tuple(sorted({str(p.key["model"]) for p in sweep.points})),
        rounds=sweep.plan.rounds,
        cwd=os.getcwd(),
        measure_null=sweep.measure_null,
    )
    actors = start_workers(ray, spec, count, options)
    try:
        say = functools.partial(print, file=sys.stderr)
        pool = Pool(str(sweep.run_dir), actors, sweep.points, sweep.plan, sweep.run_id, writer, done, on_run, say)
        return serve(ray, pool)
    finally:
        stop_workers(ray, actors)
