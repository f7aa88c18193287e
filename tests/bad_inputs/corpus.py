"""The bad-input corpus's shared parts: inputs through the real CLI must each end in exactly one `error:` line on
stderr, the expected exit code, no traceback, no existing file changed (in the workspace, and outside it where
symbolic links point) and no process of the case left running. Inputs are SYNTHETIC files built in a tmp folder
(conftest.py's workspace); the hostile benchmarks are small scripts written there. Each command's cases and tests
are in test_<command>.py; most call `harness.cli.app.main` in-process (an exception escaping it fails the test, which
is the point), a few go through `python -m harness` to check the real entry point prints the same single line."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import yaml

from harness.runs.formats import csv_line
from tests.support.fake_models import CONFIGS as FAKE_MODELS
from tests.support.fake_models import write_models
from tests.support.helpers import cli
from tests.support.synth_sources import source_folder
from tests.support.synthetic_sweeps import (
    DESIGN_EXAMPLE_CSV,
    SYNTHETIC_META,
    linear_curve,
    synthetic_samples,
    write_run,
)

MLXCEL_HEADER = DESIGN_EXAMPLE_CSV.splitlines(keepends=True)[2]


BENCH_HEADER = (  # mlxcel's scripts/bench_decode.sh CSV (tests/runs/test_mlxcel_bench_csv.py)
    "model,model_path,prompt_tokens,generated_tokens,prefill_ms,prefill_tok_s,decode_ms,decode_tok_s,date,hardware,"
    "mlx_version,build_type,max_tokens,prompt,prompt_target_len"
)


def samples_with(ws: Path, name: str, edit) -> Path:
    """A copy of the good run's samples.csv with one row changed by `edit(row dict)`."""
    lines = (ws / "good" / "samples.csv").read_text().splitlines(keepends=True)
    header_end = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    columns = lines[header_end].strip().split(",")
    row = dict(zip(columns, lines[header_end + 1].rstrip("\n").split(","), strict=True))
    edit(row)
    lines[header_end + 1] = csv_line(row.values())
    path = ws / f"{name}.csv"
    path.write_text("".join(lines))
    return path


# Hostile benchmarks (SYNTHETIC; they measure nothing). Each names the workspace in its command line (the
# leftover check looks for it); `child` starts a process in a session of its own that keeps stdout open.
SLEEPER = "import time; time.sleep(120)\n"


HOSTILE = {
    # exits at once, without a metric line, leaving a child that left its session and holds stdout
    "leaves-a-child.py": """import subprocess, sys
subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True)
print("no metric here", flush=True)
""",
    # never exits, and neither does its child
    "never-exits.py": """import subprocess, sys, time
subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True)
time.sleep(120)
""",
    # the first run succeeds; every later one writes its pid and hangs with a child (for the signal tests)
    "hangs-after-first.py": """import os, subprocess, sys, time
if "--help" in sys.argv:  # the sweep's usage check before measuring: answered, not counted as a run
    print("usage: hangs-after-first.py SLEEPER COUNTER PIDFILE")
    sys.exit(0)
counter = sys.argv[2]
runs = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(runs + 1))
if runs:
    subprocess.Popen([sys.executable, sys.argv[1]], start_new_session=True)
    open(sys.argv[3], "w").write(str(os.getpid()))
    time.sleep(120)
print("Decode: 1.00 ms (100.00 tok/s)", flush=True)
""",
}


def hostile_config(ws: Path, name: str, script: str, timeout_s: float, *extra: str) -> Path:
    data = {
        "name": name,
        "backend": "cpu",
        "current_default": 4096,
        "workload": {
            "kind": "command",
            "command": [sys.executable, str(ws / script), str(ws / "sleeper.py"), *extra],
            "timeout_s": timeout_s,
        },
        "models": [{"name": "m", "dff": 1024}],
        "measure": {"warmup_runs": 0, "rounds": 1},
    }
    path = ws / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def edited_config(ws: Path, name: str, edit) -> None:
    """A copy of the fake benchmark's config with `edit(data)` applied (written with yaml, so any string fits)."""
    data = yaml.safe_load((ws / "config.yaml").read_text())
    edit(data)
    (ws / name).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def link_run(ws: Path, outside: Path, name: str, link: str) -> None:
    """A copy of the good run whose `link` file is a symbolic link to a file outside the workspace."""
    folder = ws / name
    write_run(folder, synthetic_samples(linear_curve([1024, 4096], 5000), seed=4))
    target = outside / f"{name}-{link}"
    target.write_text("a file outside the run directory\n")
    (folder / link).unlink(missing_ok=True)
    (folder / link).symlink_to(target)


def hardening_v4(ws: Path, outside: Path, config: Path) -> None:
    """Inputs of issue 28 items 1-3: paths that lead out of what the user named, silent wrong results, deletions."""
    fleet = {"entries": [{"config": str(config), "where": {"hw_a": 1}, "name": ".."}]}
    (ws / "fleet-dotdot.yaml").write_text(yaml.safe_dump(fleet))
    source = source_folder(ws / "synth-src", "mixtral")
    (outside / "secret").write_text("a file outside the model folder\n")
    (source / "tokenizer_config.json").unlink()
    (source / "tokenizer_config.json").symlink_to(outside / "secret")
    workload = lambda **kw: lambda d: d["workload"].update(kw)  # noqa: E731
    edited_config(ws, "check-env-cap.yaml", workload(dispatch_check={"check_env": "MLXCEL_FUSED_MOE_MAX_DFF"}))
    edited_config(ws, "threshold-env-bad.yaml", workload(dispatch_check={"threshold_env": "A=B"}))
    edited_config(ws, "probe-env-same.yaml", workload(dispatch_check={"check_env": "P", "threshold_env": "P"}))
    (ws / "parity-existing.txt").write_text("a file the user keeps\n")
    edited_config(ws, "parity-existing.yaml", workload(parity={"output_file": str(ws / "parity-existing.txt")}))
    (ws / "history-link.png").symlink_to(outside / "history-target.png")  # dangling: writing would create it
    row = "m,1792,affine,1,2,3,2,3,3,3,3,1.5\n"
    (ws / "mlxcel-path-name.csv").write_text(MLXCEL_HEADER + row.replace("m,", "../../x,", 1))
    (ws / "mlxcel-all-na.csv").write_text(MLXCEL_HEADER + "m,1792,affine,NA,NA,NA,NA,NA,NA,NA,NA,NA\n")
    (ws / "mlxcel-torn.csv").write_text(MLXCEL_HEADER + row + "m,4096,affine,1,2\n")
    write_models(ws / "bench", {"mixtral-8x7b-4bit": FAKE_MODELS["mixtral-8x7b-4bit"]})
    bench = {
        "bench-ok": ["mixtral-8x7b-4bit,60,50.00"],
        "bench-inf": ["mixtral-8x7b-4bit,60,inf"],
        "bench-twice": ["mixtral-8x7b-4bit,60,50.00", "mixtral-8x7b-4bit,60,51.00"],
        "bench-fraction": ["mixtral-8x7b-4bit,60.5,50.00"],
        "bench-abs-name": ["/etc,60,50.00"],
    }
    for name, rows in bench.items():
        lines = [BENCH_HEADER]
        for text in rows:
            model, generated, tok_s = text.split(",")
            lines.append(
                f"{model},./m,36,{generated},9.77,3685.82,1200.00,{tok_s},2026-07-03,GB10,0.3.3,release,100,p,"
            )
        (ws / f"{name}.csv").write_text("\n".join(lines) + "\n")


def snapshot(*folders: Path) -> dict[Path, bytes]:
    """Every file's bytes (a link reads as its target's, which `outside` holds too)."""
    return {p: p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file() and p.name != ".lock"}


def running(marker: Path) -> list[str]:
    """Command lines of live processes that name `marker` (a case's hostile benchmark and its children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(marker) in command:
                found.append(f"{entry.name}: {command}")
    return found


def case_argv(args: list[str], ws: Path, out: Path | None = None) -> list[str]:
    return [a.format(ws=ws, config=ws / "config.yaml", out=out) for a in args]


def assert_one_error_line(stderr: str, stdout: str, code: int, returncode: int, expected: str) -> None:
    """Exactly one `error:` line, the last one; before it only a sweep that ran (exit 1, or stopped by a signal)
    may print its progress lines."""
    lines = stderr.strip().splitlines()
    assert returncode == code, stderr
    assert lines and lines[-1].startswith("error: "), stderr
    assert len(lines) == 1 or code != 2, stderr
    assert sum(line.startswith("error: ") for line in lines) == 1, stderr
    assert expected in lines[-1] and "Traceback" not in stderr + stdout, lines[-1]


def assert_case(ws: Path, outside: Path, tmp_path: Path, argv: list[str], code: int, expected: str) -> None:
    """One case: its one error line, nothing changed, nothing left running."""
    before = snapshot(ws, outside)
    done = cli(*case_argv(argv, ws, tmp_path), cwd=ws)
    assert_one_error_line(done.stderr, done.stdout, code, done.returncode, expected)
    assert snapshot(ws, outside) == before, "a failing command changed a file"
    assert not running(ws), "a process of the case is still running"


JSON_COMMANDS = ("summarize", "crossover", "plan", "sweep", "check", "compare", "history", "doctor")


def one_error_line(done, expected: str, code: int = 2) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr + done.stdout
    assert lines and lines[-1].startswith("error: "), done.stderr
    assert sum(line.startswith("error: ") for line in lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert expected in lines[-1], lines[-1]


def synthetic_run(root: Path, name: str, dffs: list[int], seed: int = 1, **meta: object) -> Path:
    return write_run(root / name, synthetic_samples(linear_curve(dffs, 5000), seed=seed), {**SYNTHETIC_META, **meta})


DEEP = "[" * 100_000 + "]" * 100_000


def strict_json(text: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    value = json.loads(text, parse_constant=refuse)
    assert isinstance(value, dict)
    return value


def all_cases() -> list[tuple]:
    """Every command file's CASES (tests/bad_inputs/test_*.py), for the checks over the whole corpus."""
    return [
        case
        for path in sorted(Path(__file__).parent.glob("test_*.py"))
        for case in getattr(importlib.import_module(f"tests.bad_inputs.{path.stem}"), "CASES", [])
    ]
