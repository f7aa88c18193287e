"""The command line itself: lazy loading (fast `--help`), the static command table, `--resume` without a value."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.cli.app import COMMANDS, _optional_values, load_command
from harness.devices.backends import Detection, detect
from tests.support.helpers import REPO, cli

HEAVY = ("pandas", "scipy", "numpy", "matplotlib", "pydantic", "harness.cli.sweep", "harness.devices.backends.cpu")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_help_table_says_what_each_command_says_of_itself(name):
    assert load_command(name).get_short_help_str(limit=300) == COMMANDS[name][1]


def test_top_level_help_imports_no_command():
    code = (
        "import sys\nfrom harness.cli.app import main\ntry:\n    main(['--help'])\nexcept SystemExit as exc:\n"
        f"    assert exc.code == 0\nprint([m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "[]"
    assert all(name in done.stdout for name in COMMANDS)


def test_a_command_help_and_exit_codes_pass_through():
    assert cli("sweep", "--help").returncode == 0
    assert cli("check-reports", REPO / "configs").returncode == 0  # no addendum there: nothing to check


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["sweep", "--resume"], ["sweep", "--resume="]),
        (["sweep", "--resume", "--no-report"], ["sweep", "--resume=", "--no-report"]),
        (["sweep", "--resume", "c.yaml"], ["sweep", "--resume=", "c.yaml"]),
        (["sweep", "--resume", "cpu-smoke"], ["sweep", "--resume=", "cpu-smoke"]),  # a preset name is the CONFIG
        (["sweep", "c.yaml", "--resume", "results/x"], ["sweep", "c.yaml", "--resume", "results/x"]),
        (["sweep", "--resume=results/x"], ["sweep", "--resume=results/x"]),
    ],
)
def test_resume_takes_a_directory_or_nothing(argv, expected):
    assert _optional_values(argv) == expected


def test_detection_answers_auto_and_the_external_commands_platform():
    nothing = {"metal": (False, "no Apple GPU"), "cuda": (False, "no NVIDIA driver"), "cpu": (False, "no numba")}
    assert Detection(nothing, {}, apple_silicon=False).auto is None
    cpu_only = {**nothing, "cpu": (True, "numba 0.68")}
    nvidia = Detection(cpu_only, {"gpu": "NVIDIA GB10"}, apple_silicon=False)
    assert (nvidia.auto, nvidia.platform, nvidia.gpu_name) == ("cpu", "cuda", "NVIDIA GB10")  # CuPy missing here
    assert Detection(cpu_only, {}, apple_silicon=True).platform == "metal"
    done = cli("doctor")
    assert done.returncode == 0 and f"auto → {detect().auto}" in done.stdout
