"""Command help: metavars in words, cached rendering (harness/help_cache.py), shell completion."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from harness import help_cache
from harness.cli import COMMANDS
from tests.helpers import REPO, cli

PROBE = (
    "import sys\n"
    "from harness.cli import main\n"
    "try:\n"
    "    main(['plan', '--help'])\n"
    "except SystemExit:\n"
    "    pass\n"
    "print('heavy:', sorted(m for m in ('pandas', 'scipy', 'matplotlib', 'numba') if m in sys.modules))\n"
)


def _probe(cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_second_help_imports_no_heavy_module(tmp_path: Path) -> None:
    first = _probe(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "Usage: moecal plan [OPTIONS]" in first.stdout
    assert list((tmp_path / "moecal" / "help").glob("plan-100-*.txt"))
    second = _probe(tmp_path)
    assert second.stdout.split("heavy:")[0] == first.stdout.split("heavy:")[0]  # the same text…
    assert "heavy: []" in second.stdout  # …without importing pandas, scipy, matplotlib or numba


def test_only_a_command_help_is_answered_from_the_cache() -> None:
    commands = set(COMMANDS)
    assert help_cache.wants_help(["plan", "x.yaml", "--help"], commands) == "plan"
    assert help_cache.wants_help(["--help"], commands) is None
    assert help_cache.wants_help(["plan", "x.yaml"], commands) is None
    assert help_cache.wants_help(["nosuch", "--help"], commands) is None


def test_metavars_are_words_not_python_types(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in ("report", "sweep", "summarize", "compare", "plan", "doctor"):
        text = cli(name, "--help").stdout
        assert text.startswith(f"Usage: moecal {name}")
        assert not re.search(r"<(list\[|path>|int|float|str>|bool>)", text, re.IGNORECASE), (name, text)


def test_shell_completion_lists_commands() -> None:
    env = {**os.environ, "_MOECAL_COMPLETE": "complete_bash", "COMP_WORDS": "moecal his", "COMP_CWORD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "harness"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["history"]
