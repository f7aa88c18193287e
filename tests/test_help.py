"""Command help: metavars in words, rendered without the analysis or a backend loaded, shell completion."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from harness.cli.app import COMMANDS
from tests.support.helpers import REPO, cli

# What takes seconds to import: the analysis (pandas, scipy), plotting, and the backends' libraries.
HEAVY = ("pandas", "scipy", "matplotlib", "numpy", "numba", "llvmlite", "mlx", "cupy", "ray")
PROBE = """
import contextlib, io, json, sys
from harness.cli.app import main
helps = {}
for name in sys.argv[1:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([name, *(["x.yaml"] if name == "plan" else []), "-h" if name == "report" else "--help"])
    helps[name] = out.getvalue()
print(json.dumps(helps))
print(sorted({m.split(".")[0] for m in sys.modules} & set(%r)))
"""


def test_command_help_imports_no_heavy_module() -> None:
    """Every command's --help (and -h) is rendered from its signature alone, in a fresh process: the modules that
    make a command slow to load are imported inside the command function, not at module level."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), *COMMANDS],
        cwd=REPO,
        env={**os.environ, "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    helps_line, heavy_line = done.stdout.splitlines()[-2:]
    helps = json.loads(helps_line)
    for name in COMMANDS:
        assert helps[name].startswith(f"Usage: moecal {name} "), (name, helps[name])
    assert heavy_line == "[]"


def test_metavars_are_words_not_python_types() -> None:
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
