"""The measurement protocol (docs/design.md §5): warm-up, interleaved rounds with rotating arm order, durable rows.

Workloads only know how to run one arm once at one point; this module owns ordering, warm-up, failures, resume
and progress, so every workload gets the same protocol.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from harness.config import knobs as launch_knobs
from harness.runs.formats import FALLBACK, NULL, POINT_COLUMNS, RunKey, run_key
from harness.runs.provenance_keys import Provenance
from harness.runs.rundir import SampleRow

if TYPE_CHECKING:
    from harness.devices.backends.base import Backend


def arm_path(arm: str) -> str:
    """The path an arm runs: its own name, except the A/A noise-floor arm `null`, which runs the fallback path a
    second time under its own label (a kernel benchmark's arms are its paths, `library` included)."""
    return FALLBACK if arm == NULL else arm


ArmCaps = dict[str, int | str]  # arm → the cap written to its rows' `cap` column ('' when the workload has no cap)


@dataclass
class Point:
    """One measured configuration: the POINT_COLUMNS values plus the cap each arm is forced with."""

    key: dict[str, object]
    caps: ArmCaps
    label: str
    skip_reason: str = ""
    memory_bytes: int | None = None
    run_seconds_estimate: float | None = None
    extra: dict[str, object] = field(default_factory=dict)  # workload-private data (model entry, shape, ...)
    # the launch-knob settings (harness.config.knobs) each arm runs under: [{}] is the plain run; a knob sweep
    # measures every (setting, arm) slot once per round
    knobs: list[dict[str, str]] = field(default_factory=lambda: [{}])

    @property
    def arms(self) -> list[str]:
        return list(self.caps)

    def slots(self) -> list[tuple[dict[str, str], str]]:
        """(knob setting, arm) pairs: what one round runs, before its rotation."""
        return [(setting, arm) for setting in self.knobs for arm in self.arms]


@dataclass
class RunOutcome:
    """What one timed run measured."""

    tokens: float | None
    seconds: float
    tok_s: float
    rel_rms: float | None = None
    tokens_agree: int | None = None
    dispatch_ok: bool | None = None
    decode_path: str | None = None  # the binary's `Decode path:` line (harness.measure.bench_output)


class RunFailed(Exception):
    """One run failed (crash, timeout, unparsable output); recorded as a `fail` row and the sweep goes on."""


class RunContended(RunFailed):
    """A run another process may have distorted (harness.measure.guard; exit 75 of mlxcel's rocm_gpu_guard.sh): its
    row is written marked `contended:` and excluded like a failure, and the same slot is run again, up to
    CONTENDED_RETRIES times, so a contended round is re-run and never pooled."""


CONTENDED_RETRIES = 3
RUN_AGAIN = "; run again"  # a contended row's error ends so when its slot is run again (not after the last retry)
# ends the progress line of such a row: the sweep's count of runs to do grows by the run it adds
RERUN_NOTE = " (contended, run again)"


def runs_again(row: Mapping[str, object]) -> bool:
    """A row written for a contended run whose slot is then run again: one run more than the sweep planned."""
    error = str(row.get("error") or "")
    return row.get("status") == "fail" and error.startswith("contended:") and error.endswith(RUN_AGAIN)


class PointRunner(Protocol):
    def run(self, path: str) -> RunOutcome: ...

    def close(self) -> None: ...


class PointOpener(Protocol):
    """All the measurement loop needs of a workload: a runner for one point (a Workload, or a kernel benchmark's
    single shape in harness.measure.kernel_bench)."""

    def open(self, point: Point) -> PointRunner: ...


class RowSink(Protocol):
    """Where the loop writes its rows: a run's SampleWriter, a Ray worker's relay, a benchmark's list."""

    def append(self, row: SampleRow) -> None: ...


class Workload(Protocol):
    """What the sweep asks of every workload kind (registered in harness.measure.workloads), so it never branches on
    one."""

    kind: str
    backend: Backend | None  # the live backend a built-in workload runs on; None for an external command
    refinable: bool  # Dff refinement (harness.measure.refine) can add points between measured Dffs

    def points(self) -> list[Point]: ...

    def preflight(self) -> None:
        """Raise InputError for problems that doom every run (missing binary), before anything runs."""

    def open(self, point: Point) -> PointRunner: ...

    def describe_arms(self) -> dict[str, str]:
        """How each arm is forced, for meta.json and the report."""

    def device_info(self) -> dict[str, str]:
        """Provenance of the device the runs use (`device` and what else is known), for meta.json."""

    def describe_run(self, meta: Provenance, points: list[Point], measure_null: bool) -> None:
        """Add this kind's own provenance to `meta` (after the common fields; may mark `points` skipped or not)."""

    def point_at(self, template: Point, dff: int) -> Point | None:
        """A new point like `template` at `dff`, built by the workload itself (its memory and skip rules apply),
        for Dff refinement; None when it cannot make one (only called when `refinable`)."""


def arm_order(arms: Sequence[str], round_index: int, order: str, seed: int, point_label: str) -> list[str]:
    """Arm order for one round: rotate shifts by one each round (A B, B A, ...) so drift cannot favour an arm."""
    arms = list(arms)
    if order == "fixed":
        return arms
    if order == "random":
        rng = random.Random(f"{seed}:{point_label}:{round_index}")
        rng.shuffle(arms)
        return arms
    shift = round_index % len(arms)
    return arms[shift:] + arms[:shift]


@dataclass
class RoundSchedule:
    rounds: int
    warmup_runs: int
    order: str
    seed: int
    # rounds of each point in the first of two passes over the grid (harness.measure.sweep_loop); its later rounds
    # are the second pass. 0: one pass, and the rows' `pass` stays empty
    first_pass: int = 0
    start: int = 0  # the first round to run: the second pass begins where the first ended (its failures stay rows)

    def pass_of(self, round_index: int) -> int | str:
        """The `pass` column of a round's rows: 1 or 2, '' for a sweep measured in one pass."""
        if not self.first_pass:
            return ""
        return 1 if round_index < self.first_pass else 2


ProgressHook = Callable[[str], None]  # one call per row written; a message ending in RERUN_NOTE adds a run to do


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def row_for(
    run_id: str, point: Point, arm: str, round_index: int, position: int, setting: dict[str, str] | None = None
) -> SampleRow:
    row: SampleRow = {"run_id": run_id, **{c: point.key.get(c, "") for c in POINT_COLUMNS}}
    row.update(arm=arm, cap=point.caps[arm], round=round_index, position=position, timestamp=_now())
    row["knobs"] = launch_knobs.label(setting or {})
    return row


def checked(outcome: RunOutcome) -> RunOutcome:
    """The outcome, if its throughput can be a measurement: NaN, ±inf, 0 or a negative tok/s (a benchmark that
    printed garbage, or a timer that ran backwards) is a failed run, never an `ok` row the statistics would trust."""
    if not (math.isfinite(outcome.tok_s) and outcome.tok_s > 0):
        raise RunFailed(f"the benchmark reported {outcome.tok_s!r} tok/s; a throughput must be finite and > 0")
    if not (math.isfinite(outcome.seconds) and outcome.seconds > 0):
        raise RunFailed(f"the run took {outcome.seconds!r} s; a timed span must be finite and > 0")
    return outcome


def outcome_fields(outcome: RunOutcome) -> SampleRow:  # the fields of a row a finished run fills
    return {
        "tokens": "" if outcome.tokens is None else outcome.tokens,
        "seconds": f"{outcome.seconds:.6g}",
        "tok_s": f"{outcome.tok_s:.6g}",
        "rel_rms": "" if outcome.rel_rms is None else f"{outcome.rel_rms:.3e}",
        "tokens_agree": "" if outcome.tokens_agree is None else outcome.tokens_agree,
        "dispatch_ok": "" if outcome.dispatch_ok is None else int(outcome.dispatch_ok),
        "decode_path": outcome.decode_path or "",
        "status": "ok",
    }


def measure_point(
    workload: PointOpener,
    point: Point,
    plan: RoundSchedule,
    writer: RowSink,
    run_id: str,
    done: dict[RunKey, str],
    on_run: ProgressHook,
) -> int:
    """Run every pending (arm, round) of one point; returns how many rows were written.

    Warm-up runs are not written; they run only when the point still has timed work to do (a resumed point re-warms,
    since JIT caches and clocks did not survive the restart). Rounds past the first pass are the until-decided
    allocation's (harness.measure.allocation): it calls this again with a plan of more rounds.
    """
    if point.skip_reason:
        return _write_skips(point, writer, run_id, done, on_run)
    written = 0
    runner: PointRunner | None = None
    try:
        slots = point.slots()
        names = [str(i) for i in range(len(slots))]  # rotated like arms: each round a different slot goes first
        round_index = plan.start
        while round_index < plan.rounds:
            order = [slots[int(i)] for i in arm_order(names, round_index, plan.order, plan.seed, point.label)]
            for position, (setting, arm) in enumerate(order):
                if done.get(_key(run_id, point, arm, round_index, setting)) == "ok":
                    continue
                if runner is None:
                    runner = _open_warm(workload, point, plan)
                for attempt in range(CONTENDED_RETRIES + 1):
                    row = row_for(run_id, point, arm, round_index, position, setting)
                    row["pass"] = plan.pass_of(round_index)
                    contended = _run_once(runner, arm, setting, row, last=attempt == CONTENDED_RETRIES)
                    writer.append(row)
                    written += 1
                    where = f" {row['knobs']}" if setting else ""
                    on_run(f"{point.label}{where} {arm} r{round_index}: {row['status']}{RERUN_NOTE * runs_again(row)}")
                    if not contended:
                        break
            round_index += 1
    finally:
        if runner is not None:
            runner.close()
    return written


def _run_once(runner: PointRunner, arm: str, setting: dict[str, str], row: SampleRow, last: bool) -> bool:
    """Run one slot into `row`; True when it was contended and will be run again (never after the `last` try, whose
    row stays a marked failure)."""
    try:
        # only a command runner takes extra environment; a config gives knobs to command workloads only
        outcome = runner.run(arm_path(arm), setting) if setting else runner.run(arm_path(arm))
        row.update(outcome_fields(checked(outcome)))
    except RunContended as exc:
        tail = "; every retry was contended, so this slot has no clean run" if last else RUN_AGAIN
        row.update(status="fail", error=f"contended: {exc}{tail}")
        return not last
    except RunFailed as exc:
        row.update(status="fail", error=str(exc))
    return False


def _open_warm(workload: PointOpener, point: Point, plan: RoundSchedule) -> PointRunner:
    runner = workload.open(point)
    for _ in range(plan.warmup_runs):
        for arm in point.arms:
            # a failing warm-up will fail again when timed, and is recorded there
            with contextlib.suppress(RunFailed):
                runner.run(arm_path(arm))
    return runner


def _write_skips(point: Point, writer: RowSink, run_id: str, done: dict[RunKey, str], on_run: ProgressHook) -> int:
    written = 0
    for setting, arm in point.slots():
        if _key(run_id, point, arm, 0, setting) in done:
            continue
        row = row_for(run_id, point, arm, 0, 0, setting)
        row.update(status="skip", error=point.skip_reason)
        writer.append(row)
        written += 1
        on_run(f"{point.label} {arm}: skip")
    return written


def _key(run_id: str, point: Point, arm: str, round_index: int, setting: dict[str, str] | None = None) -> RunKey:
    knobs = launch_knobs.label(setting or {})
    return run_key({**point.key, "knobs": knobs, "arm": arm, "round": round_index, "run_id": run_id})


def pending_runs(points: Sequence[Point], plan: RoundSchedule, run_id: str, done: dict[RunKey, str]) -> int:
    total = 0
    for point in points:
        rounds = 1 if point.skip_reason else plan.rounds
        settled = ("ok", "skip") if point.skip_reason else ("ok",)
        slots = point.slots()
        total += sum(done.get(_key(run_id, point, a, r, k)) not in settled for k, a in slots for r in range(rounds))
    return total
