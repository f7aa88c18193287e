"""Times reading and analysing a large SYNTHETIC mlxcel sweep CSV: the benchmark behind issue 20's targets
(10,000 rows under 10 s, 1,000,000 rows under 2 min, `moecal crossover FILE.csv` as a whole).

    .venv/bin/python scripts/bench_mlxcel_read.py 10000 100000 1000000
    .venv/bin/python scripts/bench_mlxcel_read.py 10000 --keep /tmp/synth-10k.csv   # also keep the file

Each size gets a seeded file in a temporary folder (nothing is written into the checkout): one row per (model, dff),
models m{i}, dff = 256·(1 + i mod 64), 5 run columns per arm of which the last one or two are NA on some rows
(3–5 runs per arm, as published sweeps have), tok/s with 2 decimals around a ratio curve that falls
through 1 as Dff grows, with 2% run noise and 3% of runs slowed by 15%. Printed per size: the read
(harness.runs.mlxcel_csv.read_mlxcel), the analysis (harness.analysis.decision.pipeline.analyse on the read input), both
in this process, and the whole `moecal crossover FILE --json`, `moecal summarize FILE --out S.csv` and `moecal summarize
FILE
--json` as separate processes, each in wall and CPU seconds (on a shared machine the CPU seconds are the steadier
figure). `--steps` picks some of them.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

RUNS = 5  # run columns per arm; rows have 3–5 of them measured
SEED = 20
SLOWED = 0.03  # the share of runs slowed by 15% (outliers for the screen to drop)


def synthetic_csv(rows: int, path: Path, seed: int = SEED) -> None:
    """A seeded mlxcel-format sweep of `rows` (model, dff) rows at `path`."""
    rng = np.random.default_rng(seed)
    index = np.arange(rows)
    dff = 256 * (1 + index % 64)
    ratio = 1.15 - 0.25 * (dff / 16384.0)  # fused wins at small Dff, crosses 1 near Dff 9800
    fallback_level = rng.uniform(30.0, 200.0, rows)
    measured = 3 + rng.integers(0, 3, rows)  # runs per row, both arms alike
    arms = {}
    for arm, level in (("fallback", fallback_level), ("fused", fallback_level * ratio)):
        runs = level[:, None] * np.exp(rng.normal(0.0, 0.02, (rows, RUNS)))
        runs *= np.where(rng.random((rows, RUNS)) < SLOWED, 0.85, 1.0)  # a background task slowed the run
        runs = np.where(np.arange(RUNS)[None, :] < measured[:, None], runs, np.nan)
        arms[arm] = runs
    medians = {arm: np.nanmedian(runs, axis=1) for arm, runs in arms.items()}
    columns = ["model", "dff", "quant_mode"]
    for arm in arms:
        columns += [f"{arm}_run{r + 1}" for r in range(RUNS)] + [f"{arm}_median"]
    columns.append("fused_over_fallback")
    with path.open("w") as out:
        out.write("# Synthetic sweep (scripts/bench_mlxcel_read.py): not a measurement.\n")
        out.write(",".join(columns) + "\n")
        for i in range(rows):
            cells = [f"m{i}", str(dff[i]), "affine"]
            for arm, runs in arms.items():
                cells += ["NA" if np.isnan(v) else f"{v:.2f}" for v in runs[i]] + [f"{medians[arm][i]:.2f}"]
            cells.append(f"{medians['fused'][i] / medians['fallback'][i]:.4f}")
            out.write(",".join(cells) + "\n")


def _timed(step: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of step(); CPU counts this process and its finished children, so a busy shared machine,
    which stretches the wall time, leaves it about the same."""
    wall, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    step()
    return time.perf_counter() - wall, time.process_time() - cpu + _children_cpu() - children


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


STEPS = ("read", "analysis", "crossover", "summarize", "summarize-json")


def time_one(path: Path, moecal: str, steps: tuple[str, ...] = STEPS) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds of each of `steps` for one file: the read and the analysis in this process, the commands
    (`crossover --json`, `summarize --out`, `summarize --json`) as processes of their own."""
    from harness.analysis.decision.pipeline import analyse
    from harness.analysis.points.inputs import load_input
    from harness.runs.mlxcel_csv import read_mlxcel

    commands = {
        "crossover": [moecal, "crossover", str(path), "--json"],
        "summarize": [moecal, "summarize", str(path), "--out", str(path.with_suffix(".summary.csv"))],
        "summarize-json": [moecal, "summarize", str(path), "--json"],
    }
    out: dict[str, tuple[float, float]] = {}
    for step in steps:
        if step == "read":
            out[step] = _timed(lambda: read_mlxcel(path))
        elif step == "analysis":
            loaded = load_input(path)
            out[step] = _timed(lambda loaded=loaded: analyse(loaded))
        else:
            command = commands[step]
            out[step] = _timed(lambda command=command: subprocess.run(command, check=True, stdout=subprocess.DEVNULL))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", type=int, nargs="+", help="file sizes in rows")
    parser.add_argument("--keep", type=Path, help="also write the (last) file here, outside the checkout")
    parser.add_argument("--moecal", default=str(Path(sys.executable).parent / "moecal"), help="the CLI to time")
    parser.add_argument("--generate-only", action="store_true", help="write --keep and time nothing")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, of {', '.join(STEPS)}")
    args = parser.parse_args()
    if args.generate_only:
        if not args.keep:
            parser.error("--generate-only needs --keep")
        synthetic_csv(args.rows[-1], args.keep)
        return
    steps = tuple(args.steps.split(","))
    if set(steps) - set(STEPS):
        parser.error(f"--steps: unknown {sorted(set(steps) - set(STEPS))}")
    print(f"{'rows':>9} " + " ".join(f"{f'{step} wall/cpu s':>24}" for step in steps))
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"synthetic-{rows}.csv"
            synthetic_csv(rows, path)
            if args.keep:
                args.keep.write_bytes(path.read_bytes())
            t = time_one(path, args.moecal, steps)
        print(f"{rows:>9} " + " ".join(f"{t[step][0]:>15.2f} / {t[step][1]:>6.2f}" for step in steps), flush=True)


if __name__ == "__main__":
    main()
