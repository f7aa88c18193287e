"""The command line as a whole: unknown commands, the real entry point, errors as JSON, the corpus itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.bad_inputs.corpus import JSON_COMMANDS, all_cases, assert_case, case_argv
from tests.support.helpers import REPO, cli, run_cli

# the first refused case of each command with --json, and summarize failing after it printed its object
JSON_CASES = [
    *{c[1][0]: c for c in reversed(all_cases()) if c[1][0] in JSON_COMMANDS and c[2] == 2}.values(),
    next(c for c in all_cases() if c[0] == "summarize-out-unwritable"),
    next(c for c in all_cases() if c[0] == "unknown-option"),
]


# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("unknown-command", ["sweeps"], 2, "moecal: No such command 'sweeps'"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


def test_the_corpus_is_large_and_names_are_unique():
    assert len(all_cases()) >= 80 and len({c[0] for c in all_cases()}) == len(all_cases())


@pytest.mark.parametrize("name", ["unknown-option", "config-not-utf8", "samples-duplicate", "out-unwritable"])
def test_the_real_entry_point_prints_the_same_one_line(ws, name):
    argv, code, expected = next(c[1:] for c in all_cases() if c[0] == name)
    done = run_cli(*case_argv(argv, ws), cwd=ws)
    assert done.returncode == code and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], done.stderr


@pytest.mark.parametrize(("argv", "expected"), [(c[1], c[3]) for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_with_json_an_error_is_the_one_object_on_stdout(ws, tmp_path, argv, expected):
    """`--json` promises one JSON object on stdout on every path: an error is `{"error": <the line>, ...}`, and
    nothing the command printed before failing (summarize prints its object, then writes --out) comes along."""
    done = cli(*case_argv(argv, ws, tmp_path), "--json", cwd=ws)
    assert done.returncode == 2, done.stderr
    result = json.loads(done.stdout)  # exactly one JSON document, or this raises
    assert isinstance(result, dict) and result["exit_code"] == 2
    assert expected in result["error"] and done.stderr.strip() == f"error: {result['error']}"


def test_json_text_is_the_same_value_one_point_per_line():
    from harness.json_output import json_text

    value = {"points": [{"model": 'a,\n"b"', "ratio": 1.5, "nested": {"x": [1, None]}}, {"model": "c"}], "empty": []}
    value |= {"margin": 0.02, "text": "é"}
    text = json_text(value)
    assert json.loads(text) == value
    assert len(text.splitlines()) == 9  # {, 4 fields, the two points and the closing ] on lines of their own, }
    assert json.loads(json_text([1, 2])) == [1, 2] and json.loads(json_text({})) == {}


def test_analysis_commands_load_blas_with_one_thread():
    code = (
        "import os, sys; sys.argv = ['moecal', 'summarize', '--help']; from harness.cli import app\n"
        "try:\n    app.main()\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), file=sys.stderr)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env, check=False)
    assert done.stderr.strip().splitlines()[-1] == "1", done.stderr
