"""The harness's own cost: CPU and wall per benchmark run, and the time to summarize large CSVs (issue 38's targets:
≤ 5 ms of harness CPU per run at 300 runs whatever else runs on the host, 1,000,000 rows summarized in < 60 s).

    .venv/bin/python scripts/bench_harness.py                 # 300 runs, 500 sleepers, 10k and 1M rows
    .venv/bin/python scripts/bench_harness.py --rows 10000    # skip the 1M-row file (it takes about a minute)
    make bench-harness

Per-run cost, measured twice — on the host as it is, and with `--sleepers` idle sleeping processes started by this
script (the clean-up must not grow with the host's processes; they are ended before it exits):
- `proc`: harness.measure.proc.run_with_deadline alone, `--runs` times, on a no-op benchmark (a C program printing a
  Decode line when a C compiler is found, else `/bin/sh -c 'echo …'`): this process's CPU (time.process_time, which
  excludes the benchmark's own) and wall per run;
- `sweep`: a whole `moecal sweep` of a command workload on the same benchmark, in this process (--runs timed runs:
  points × rounds × 2 arms, no warm-up), its CPU divided by the runs — everything the harness does per run (the
  schedule, the rows written atomically, the analysis and report at the end), so an upper bound of the per-run cost.
Summarize: `moecal summarize FILE --out S.csv` on SYNTHETIC mlxcel CSVs (scripts/bench_mlxcel_read.py's generator),
as a process of its own, wall and CPU seconds. Everything is written into a temporary folder, nothing in the checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import yaml

HERE = Path(__file__).resolve().parent
DECODE = "Decode: 1.00 ms (100.00 tok/s)"
NOOP_C = f'#include <stdio.h>\nint main(void) {{ puts("{DECODE}"); return 0; }}\n'
POINTS = 5  # the sweep's points (models); rounds follow from --runs


def noop_benchmark(folder: Path) -> list[str]:
    """argv of a benchmark that prints one Decode line and exits: compiled C where a compiler exists."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler:
        source, binary = folder / "noop.c", folder / "noop"
        source.write_text(NOOP_C)
        if subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], capture_output=True).returncode == 0:
            return [str(binary)]
    return ["/bin/sh", "-c", f"echo '{DECODE}'"]


@contextlib.contextmanager
def sleepers(count: int) -> Iterator[None]:
    """`count` idle `sleep` processes for the duration of the block, ended afterwards. A shell of its own session
    starts them, so they are the host's processes, not this one's children."""
    if not count:
        yield
        return
    script = f"for i in $(seq {count}); do sleep 3600 & done; echo started; wait"
    shell = subprocess.Popen(["/bin/sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True, text=True)
    try:
        assert shell.stdout is not None
        shell.stdout.readline()  # every sleeper is forked
        yield
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


def proc_cost(argv: list[str], runs: int) -> tuple[float, float]:
    """(CPU ms, wall ms) of this process per run_with_deadline call."""
    from harness.measure.proc import run_with_deadline

    run_with_deadline(argv, os.environ, 10)  # warm: imports, the first fork
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(runs):
        finished = run_with_deadline(argv, os.environ, 10)
        if finished.returncode != 0 or "Decode" not in finished.stdout:
            raise SystemExit(f"the no-op benchmark failed: {finished}")
    return (time.process_time() - cpu) * 1000 / runs, (time.perf_counter() - wall) * 1000 / runs


def sweep_cost(argv: list[str], runs: int, folder: Path) -> tuple[float, float, int]:
    """(CPU ms, wall ms, timed runs) of this process per timed run of a whole `moecal sweep`."""
    from harness.cli.app import main

    rounds = max(1, runs // (2 * POINTS))
    config = {
        "name": "noop",
        "backend": "cpu",
        "current_default": 4096,
        "workload": {"kind": "command", "command": argv, "timeout_s": 10},
        "models": [{"name": f"m{i}", "dff": 1024 * (i + 1)} for i in range(POINTS)],
        "measure": {"warmup_runs": 0, "rounds": rounds, "order": "rotate"},
    }
    path = folder / "noop.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = folder / f"run-{time.time_ns()}"
    cpu, wall = time.process_time(), time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            main(["sweep", str(path), "--out", str(out), "--rounds", str(rounds)])
        except SystemExit as exc:
            if exc.code:
                raise SystemExit(f"the sweep failed ({exc.code}): {err.getvalue()[-2000:]}") from None
    timed = rounds * POINTS * 2
    return (time.process_time() - cpu) * 1000 / timed, (time.perf_counter() - wall) * 1000 / timed, timed


def summarize_cost(rows: int, folder: Path) -> tuple[float, float]:
    """(wall s, CPU s) of `moecal summarize` on a SYNTHETIC mlxcel CSV of `rows` rows, as a process of its own."""
    sys.path.insert(0, str(HERE))
    from bench_mlxcel_read import synthetic_csv, time_one

    path = folder / f"synthetic-{rows}.csv"
    synthetic_csv(rows, path)
    return time_one(path, str(Path(sys.executable).parent / "moecal"), ("summarize",))["summarize"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="benchmark runs per measurement")
    parser.add_argument("--sleepers", type=int, default=500, help="idle processes started for the second pass")
    parser.add_argument("--rows", type=int, nargs="*", default=[10_000, 1_000_000], help="CSV sizes to summarize")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        argv = noop_benchmark(folder)
        print(f"no-op benchmark: {' '.join(argv)}; host processes: {len(psutil.pids())}")
        heads = ("proc CPU ms/run", "proc wall ms/run", "sweep CPU ms/run", "sweep wall ms/run")
        print(f"{'host':<22} " + " ".join(f"{head:>17}" for head in heads))
        sweep_cost(argv, 2 * POINTS, folder)  # warm: the sweep's imports and first-use costs, not per-run ones
        for label, extra in (("as is", 0), (f"+{args.sleepers} sleepers", args.sleepers)):
            with sleepers(extra):
                proc_cpu, proc_wall = proc_cost(argv, args.runs)
                sweep_cpu, sweep_wall, timed = sweep_cost(argv, args.runs, folder)
            print(
                f"{label:<22} {proc_cpu:>16.2f} {proc_wall:>17.2f} {sweep_cpu:>17.2f} {sweep_wall:>18.2f}", flush=True
            )
        print(f"(proc: {args.runs} calls; sweep: {timed} timed runs, the whole command after a warm-up sweep)")
        for rows in args.rows:
            wall, cpu = summarize_cost(rows, folder)
            print(f"summarize {rows:>9} rows: {wall:7.2f} s wall, {cpu:7.2f} s CPU", flush=True)


if __name__ == "__main__":
    main()
