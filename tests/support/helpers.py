"""Test helpers: run the real CLI (in a subprocess or in-process), write configs for the fake benchmark fixture."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
FAKE_BENCH = REPO / "tests" / "fixtures" / "fake_decode_bench.py"
# How the tests start the fixtures' benchmark scripts (tests/fixtures/*.py, the standard library alone): this
# interpreter, isolated (-I) and without the site module (-S), since the sweep tests start them thousands of times.
# Measured per start here: through a script's own `#!/usr/bin/env python3` (python3 on PATH was a pyenv shim) ~100 ms,
# `python -I` ~50 ms (site imports the editable install's .pth finder), `python -I -S` ~20 ms.
FIXTURE_PYTHON = (sys.executable, "-I", "-S")
# tests/measure/test_sweep_command.py still runs the fake once as an executable of its own (its #! line), as a user's is
FAKE_BENCH_COMMAND = (*FIXTURE_PYTHON, str(FAKE_BENCH))


def run_cli(*args: str, cwd: Path = REPO, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m harness ARGS` as a user would run it (real exit codes, real stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "harness", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


def fake_config(tmp_path: Path, models: list[dict] | None = None, **overrides: object) -> Path:
    """A command-workload config driving the SYNTHETIC fake benchmark (tests only; nothing reaches results/)."""
    data: dict = {
        "name": "fake",
        "backend": "cpu",
        "current_default": 4096,
        "workload": {
            "kind": "command",
            "command": [*FAKE_BENCH_COMMAND, "--dff", "{dff}"],
            "timeout_s": 20,
            "dispatch_probe": {"regex": "path=fused"},
        },
        "models": models or [{"name": "small", "dff": 1792}, {"name": "big", "dff": 14336}],
        "measure": {"warmup_runs": 0, "rounds": 3, "order": "rotate"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real CLI (`harness.cli.app.main`) called in-process: same exit codes and output as `run_cli`, without the
    ~1 s interpreter start. `cwd` matters for the default results/ folder."""
    from harness.cli.app import main

    stdout, stderr = io.StringIO(), io.StringIO()
    argv = [str(a) for a in args]
    saved_argv = sys.argv
    with contextlib.chdir(cwd or Path.cwd()), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = saved_argv
    return subprocess.CompletedProcess(["moecal", *argv], code, stdout.getvalue(), stderr.getvalue())


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 300) -> None:
    """Poll until `condition()` holds. The bound only turns a hang into a failure: tests that use this wait for an
    event (a file a fixture writes), so no result depends on how fast the machine is."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what} after {seconds:.0f} s"
        time.sleep(0.02)


def final_table(run_dir: Path, summary: Any) -> Any:
    """A sweep's final table (harness.measure.sweep_loop.quick_table) of a run directory and its analysed summary,
    the run's files read here as the sweep's end reads them."""
    from harness.analysis.evidence import dispatch_evidence
    from harness.measure.sweep_loop import quick_table
    from harness.runs.rundir import RunDirectory

    run = RunDirectory(run_dir)
    return quick_table(summary, run.read_samples(), run.read_meta(), dispatch_evidence.read_record(run_dir))
