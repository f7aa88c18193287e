"""Test helpers: run the real CLI in a subprocess, write configs for the fake benchmark fixture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
FAKE_BENCH = REPO / "tests" / "fixtures" / "fake_decode_bench.py"


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
            "command": [str(FAKE_BENCH), "--dff", "{dff}"],
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
