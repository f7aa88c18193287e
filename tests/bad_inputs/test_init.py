"""Bad inputs of `moecal init`: model folders whose config.json cannot be read, a benchmark that does not run."""

from __future__ import annotations

import sys
import time

import pytest

from tests.bad_inputs.corpus import assert_case, one_error_line
from tests.support.helpers import cli
from tests.support.synth_sources import source_folder

# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("json-nested-deep", ["init", "--models", "{ws}/models/json-deep", "--out", "{out}/c.yaml"], 2, "nested 100001"),
    ("json-nan", ["init", "--models", "{ws}/models/json-nan", "--out", "{out}/c.yaml"], 2, "NaN is not a number"),
    ("json-1e400", ["init", "--models", "{ws}/models/json-huge", "--out", "{out}/c.yaml"], 2, "1e400 is out of range"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


def test_init_checks_that_the_benchmark_runs(tmp_path):
    models = tmp_path / "models"
    source_folder(models, "mixtral")
    missing = cli("init", "--models", models, "--out", tmp_path / "a.yaml", "--bench", str(tmp_path / "no-bench"))
    one_error_line(missing, "cannot be started")
    (tmp_path / "sleeps.py").write_text("import time\ntime.sleep(120)\n")
    started = time.monotonic()
    hangs = cli(
        "init", "--models", models, "--out", tmp_path / "b.yaml", "--bench", f"{sys.executable} {tmp_path}/sleeps.py"
    )
    one_error_line(hangs, "did not answer `--help` within 5 s")
    assert time.monotonic() - started < 30 and not (tmp_path / "a.yaml").exists()
