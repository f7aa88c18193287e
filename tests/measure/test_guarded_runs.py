"""Guarded and keyed runs (issue 37): mlxcel's host lock taken as rocm_gpu_guard.sh takes it, the guard's probes on
recorded output and fakes, a contended run re-run and marked (never pooled), rocm_gpu_guard.sh's exit 75 retried, a run
on another decode loop excluded, and the shell's arm-changing variables refused unless the config names them.

Everything runs on fakes in tmp dirs: the "GPU holders" are files in a fake KFD directory naming pid 1 (a process that
exists and is not moecal's descendant), the benchmarks are SYNTHETIC (tests/fixtures), no number is a measurement.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.config.schema import GuardSettings, load_config
from harness.measure import guard_probes as probes
from harness.measure import host_lock
from harness.measure.guard import Guard, GuardedRunner
from harness.measure.protocol import Point, RoundSchedule, RunFailed, RunOutcome, measure_point
from harness.measure.workloads.command import CommandRunner, SweepKeys
from tests.support.fake_models import bench_command, write_models
from tests.support.helpers import cli

# recorded answers (the formats the tools print; the values are made up)
COMPUTE_APPS = "12345, /usr/bin/python3\n23456, ./target/release/mlxcel-bench-decode\n"
THROTTLE = "0x0000000000000000\n0x0000000000000044\n"  # GPU 1: sw power cap (not counted) + sw thermal


def test_probe_output_is_parsed_as_nvidia_smi_prints_it():
    assert probes.parse_compute_apps(COMPUTE_APPS) == [
        (12345, "/usr/bin/python3"),
        (23456, "./target/release/mlxcel-bench-decode"),
    ]
    assert probes.parse_compute_apps("No running processes found\n") == []
    assert probes.parse_throttle(THROTTLE) == ["sw thermal"]
    assert probes.parse_throttle("0x0000000000000001\n") == []  # GPU idle is not a slowdown


def test_kfd_and_compiler_probes_read_their_directories(tmp_path):
    assert probes.kfd_holders(str(tmp_path / "absent")) is None  # no KFD driver: absent, not an error
    kfd = tmp_path / "kfd"
    kfd.mkdir()
    assert probes.kfd_holders(str(kfd)) == []
    (kfd / "1").mkdir()
    assert [pid for pid, _ in probes.kfd_holders(str(kfd))] == [1]
    proc = tmp_path / "proc"
    for pid, comm in (("self", "python"), ("7", "cc1plus"), ("8", "make"), ("9", "clang-18")):
        (proc / pid).mkdir(parents=True)
        (proc / pid / "comm").write_text(comm + "\n")
    assert probes.compilers(proc=str(proc)) == [(7, "cc1plus"), (9, "clang-18")]  # exact names; make is a driver
    assert probes.compilers(proc=str(tmp_path / "kfd")) is None  # no /proc: absent


def test_the_host_lock_serializes_and_honours_rocm_gpu_guard_lock_held(tmp_path, monkeypatch):
    path = tmp_path / "mlxcel-rocm-gpu-guard.lock"
    assert host_lock.lock_path(True, {}) == Path("/tmp/mlxcel-rocm-gpu-guard.lock")
    assert host_lock.lock_path(False, {}) == Path(host_lock.OTHER_HOST_LOCK)
    assert host_lock.lock_path(True, {"ROCM_GPU_GUARD_LOCK": str(path)}) == path
    env: dict[str, str] = {}
    with host_lock.held(path, environ=env) as lock:
        assert lock.skipped == "" and env["ROCM_GPU_GUARD_LOCK_HELD"] == str(os.getpid())
        assert oct(path.stat().st_mode & 0o777) == "0o666"  # created world-writable, as the script does
        # another process cannot take it while we hold it (flock(2), the call util-linux flock makes)
        holder = [sys.executable, "-c", "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); "
                  "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(path)]  # fmt: skip
        assert subprocess.run(holder, capture_output=True).returncode != 0
        if shutil.which("flock"):
            assert subprocess.run(["flock", "-n", str(path), "true"]).returncode != 0
    assert "ROCM_GPU_GUARD_LOCK_HELD" not in env  # restored
    # held by another process: waited for, and given up after lock_wait_s
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDONLY); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", str(path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert sleeper.stdout.readline().strip() == "held"
        waits: list[str] = []
        with (
            pytest.raises(host_lock.LockUnavailable, match="gave up waiting"),
            host_lock.held(path, max_wait_s=0.5, environ={}, on_wait=waits.append),
        ):
            pass
        assert waits and "waiting for guard lock" in waits[0]
    finally:
        sleeper.kill()
        sleeper.wait()
    with host_lock.held(path, max_wait_s=5, environ={}) as lock:
        assert lock.waited_s < 5
    # an outer guard (an ancestor's pid) holds it for this tree; a stale pid does not
    with host_lock.held(path, environ={"ROCM_GPU_GUARD_LOCK_HELD": str(os.getppid())}) as lock:
        assert "outer guard" in lock.skipped
    assert host_lock.outer_guard({"ROCM_GPU_GUARD_LOCK_HELD": "999999999"}) is None
    assert host_lock.outer_guard({"ROCM_GPU_GUARD_LOCK_HELD": str(os.getpid())}) is None  # itself is not outer


def test_a_lock_path_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "lock"
    os.mkfifo(fifo)
    with pytest.raises(host_lock.LockUnavailable, match="not a regular file"), host_lock.held(fifo, environ={}):
        pass


class _Runner:
    """A fake point runner: SYNTHETIC outcomes, 50 ms a run; `during(n, started)` lets a test change the host while
    run n runs (called at its start and at its end)."""

    def __init__(self, during=lambda n, started: None):
        self.calls = 0
        self.during = during
        self.last_text = ""

    def run(self, path: str, extra_env: dict[str, str] | None = None) -> RunOutcome:
        self.calls += 1
        self.during(self.calls, True)
        time.sleep(0.05)
        self.during(self.calls, False)
        return RunOutcome(tokens=10, seconds=0.01, tok_s=100.0 if path == "fused" else 90.0)

    def close(self) -> None:
        pass


class _Rows:
    def __init__(self):
        self.rows: list[dict] = []

    def append(self, row: dict) -> None:
        self.rows.append(row)


def _point() -> Point:
    return Point(key={"model": "m", "dff": 768}, caps={"fused": 20000, "fallback": 1}, label="m")


def test_a_foreign_gpu_process_in_round_2_makes_round_2_rerun_and_marked(tmp_path):
    """The fake guard's KFD directory shows pid 1 (not a descendant of moecal) while round 2's first run runs: that
    run's row is marked contended and excluded, the slot is run again, and the log beside samples.csv has it all."""
    kfd = tmp_path / "kfd"
    kfd.mkdir()

    def host(n: int, started: bool) -> None:  # runs 1-2: round 0, 3-4: round 1, 5: round 2's first, 6: its re-run
        if n == 5:
            (kfd / "1").mkdir() if started else (kfd / "1").rmdir()

    guard = Guard(GuardSettings(kfd_dir=str(kfd), interval_s=0.01, retry_wait_s=0), log_path=tmp_path / "guard.csv")
    inner = _Runner(host)

    class Opener:
        def open(self, point: Point) -> GuardedRunner:
            return GuardedRunner(inner, guard, point.label)

    rows = _Rows()
    plan = RoundSchedule(rounds=3, warmup_runs=0, order="fixed", seed=0)
    measure_point(Opener(), _point(), plan, rows, "run", {}, lambda _: None)
    round2 = [r for r in rows.rows if r["round"] == 2]
    assert [r["status"] for r in round2] == ["fail", "ok", "ok"]
    assert round2[0]["error"].startswith("contended: foreign GPU process 1:") and "run again" in round2[0]["error"]
    assert all(r["status"] == "ok" for r in rows.rows if r["round"] != 2)
    log = (tmp_path / "guard.csv").read_text().splitlines()
    assert log[0].startswith("timestamp,point,arm,sample,contended") and any(",1,foreign GPU" in x for x in log)


def test_a_guard_that_stays_contended_leaves_a_marked_failure_not_a_measurement(tmp_path):
    kfd = tmp_path / "kfd"
    (kfd / "1").mkdir(parents=True)
    guard = Guard(GuardSettings(kfd_dir=str(kfd), interval_s=0.01, retry_wait_s=0))

    class Opener:
        def open(self, point: Point) -> GuardedRunner:
            return GuardedRunner(_Runner(), guard, point.label)

    rows = _Rows()
    measure_point(Opener(), _point(), RoundSchedule(1, 0, "fixed", 0), rows, "run", {}, lambda _: None)
    assert rows.rows and all(r["status"] == "fail" and r["error"].startswith("contended:") for r in rows.rows)
    assert "every retry was contended" in rows.rows[-1]["error"]


def _script(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "bench.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return [str(script)]


def test_exit_75_of_the_guard_script_is_retried_not_failed(tmp_path):
    """rocm_gpu_guard.sh exits 75 when every attempt was contended ("nothing COMMAND printed should be used"): the
    run is re-run, its row marked; any other exit code is a plain failure."""
    counter = tmp_path / "n"
    argv = _script(
        tmp_path,
        f'n=$(cat "{counter}" 2>/dev/null || echo 0); echo $((n + 1)) > "{counter}"\n'
        'if [ "$n" = 0 ]; then echo "rocm_gpu_guard: every attempt (5) was contended" >&2; exit 75; fi\n'
        'echo "Decode: 10.00 ms (100.00 tok/s)"\necho "Decode path: engine"\n',
    )
    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "mlxcel-command.yaml")

    class Opener:
        def open(self, point: Point) -> CommandRunner:
            return CommandRunner(config.workload, argv)

    rows = _Rows()
    point = Point(key={"model": "m"}, caps={"fused": 20000}, label="m")
    measure_point(Opener(), point, RoundSchedule(1, 0, "fixed", 0), rows, "run", {}, lambda _: None)
    assert [r["status"] for r in rows.rows] == ["fail", "ok"]
    assert rows.rows[0]["error"].startswith("contended: exit 75") and rows.rows[1]["decode_path"] == "engine"
    failing = CommandRunner(config.workload, _script(tmp_path, "exit 3\n"))
    with pytest.raises(RunFailed, match="exit code 3"):
        failing.run("fused")


def test_a_run_on_another_decode_path_is_excluded_with_the_reason(tmp_path, monkeypatch):
    """Two runs on different decode loops are never pooled: the sweep's first path keys it."""
    paths = SweepKeys()
    paths.check(None)  # a binary without the line is not judged
    paths.check("engine")
    paths.check("engine")
    with pytest.raises(RunFailed, match="decode path 'CxxGenerator' differs from the sweep's first run"):
        paths.check("CxxGenerator")
    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "mlxcel-command.yaml")
    argv = _script(tmp_path, 'echo "Decode: 10.00 ms (100.00 tok/s)"\necho "Decode path: $LOOP"\n')
    shared = SweepKeys()
    monkeypatch.setenv("LOOP", "engine")
    assert CommandRunner(config.workload, argv, paths=shared).run("fused").decode_path == "engine"
    monkeypatch.setenv("LOOP", "cxx-generator")
    with pytest.raises(RunFailed, match="never pooled"):
        CommandRunner(config.workload, argv, paths=shared).run("fallback")
    monkeypatch.setenv("LOOP", "engine")
    Path(argv[0]).write_text(Path(argv[0]).read_text() + "# rebuilt\n")  # another build of the benchmark
    with pytest.raises(RunFailed, match="rebuilt since the sweep's first run"):
        CommandRunner(config.workload, argv, paths=shared).run("fused")


def _config(tmp_path: Path, env: dict[str, str] | None = None) -> Path:
    models = write_models(tmp_path)
    out = tmp_path / "c.yaml"
    assert (
        cli("init", "--models", models, "--bench", bench_command(), "--backend", "rocm", "--out", out).returncode == 0
    )
    data = yaml.safe_load(out.read_text())
    data["workload"]["env"] = env or {}
    data["measure"].update(warmup_runs=0, rounds=1)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def test_an_arm_changing_variable_in_the_shell_is_refused_unless_the_config_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_ROCM_WMMA_QMM", "1")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0")
    refused = cli("sweep", _config(tmp_path), "--dry-run")
    line = refused.stderr.strip()
    assert refused.returncode == 2 and "\n" not in line and "MLX_ROCM_WMMA_QMM=1 is set in this shell" in line
    assert "changes an arm" in line and "workload.env" in line
    named = _config(tmp_path, {"MLX_ROCM_WMMA_QMM": "1"})
    out = tmp_path / "run"
    ok = cli("sweep", named, "--out", out, "--only", "qwen3-30b-a3b-4bit", "--no-report")
    assert ok.returncode == 0, ok.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["shell_env"] == {"HIP_VISIBLE_DEVICES": "0"}  # recorded, not refused
    assert meta["guard"]["enabled"] in (True, False)


def test_compare_check_and_history_refuse_runs_timed_by_different_decode_loops(tmp_path, monkeypatch):
    config = _config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["measure"]["rounds"] = 3
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    runs = {}
    for loop in ("engine", "cxx-generator"):
        monkeypatch.setenv("EMULATED_MLXCEL_DECODE_PATH", loop)
        runs[loop] = tmp_path / loop
        done = cli("sweep", config, "--out", runs[loop], "--no-report")
        assert done.returncode == 0, done.stderr
    pair = [runs["engine"], runs["cxx-generator"]]
    for command in (["compare", *pair], ["check", "--baseline", pair[0], "--current", pair[1]]):
        refused = cli(*command)
        assert refused.returncode == 2 and "--across-decode-paths" in refused.stderr, refused.stderr
        assert "'cxx-generator'" in refused.stderr and "'engine'" in refused.stderr
    history = cli("history", *pair, "--out", tmp_path / "h.png")
    assert history.returncode == 2 and "decode path" in history.stderr
    allowed = cli("compare", *pair, "--across-decode-paths")
    assert allowed.returncode == 0, allowed.stderr
    assert "decode path: engine → cxx-generator" in allowed.stdout
