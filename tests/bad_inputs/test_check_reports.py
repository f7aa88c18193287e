"""Bad inputs of `moecal check-reports`: missing folders, sidecars too deep, raw data out of reach."""

from __future__ import annotations

import json
import sys

import pytest

from tests.bad_inputs.corpus import DEEP, assert_case, synthetic_run
from tests.support.helpers import cli
from tests.support.synth_sources import source_folder
from tests.support.synthetic_sweeps import (
    linear_curve,
    synthetic_samples,
    write_run,
)

# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("check-reports-missing", ["check-reports", "{ws}/nope"], 2, "nope: FOLDERS: no such folder"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


def test_check_reports_never_reads_raw_data_outside_what_it_was_given(tmp_path):
    """A committed sidecar naming a file elsewhere as its raw data (absolute, `../` past the tree, a link in the
    tree to a file outside, a non-CSV file inside): check-reports says so and fails, and never reads or quotes it."""
    from harness.output.addendum.report_data import sidecar_path
    from harness.output.report_files import write_report

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "reports").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    elsewhere.mkdir()
    secret = elsewhere / "secret.csv"
    secret.write_text("model,SECRET-TOKEN-1234\nx,1\n")
    run = write_run(project / "results" / "run", synthetic_samples(linear_curve([1024, 4096], 5000), seed=9))
    md_path, _, _, _ = write_report(run, project / "reports")
    sidecar = json.loads(sidecar_path(md_path).read_text())
    (project / "results" / "planted.csv").symlink_to(secret)
    (project / ".env").write_text("SECRET-TOKEN-5678=1\n")  # inside the project, but no raw data
    outside = "lies outside the addendum's project"
    for raw, problem in (
        (str(secret), outside),
        ("../elsewhere/secret.csv", outside),
        ("results/planted.csv", outside),
        (".env", "is neither a run directory nor a CSV"),
    ):
        sidecar_path(md_path).write_text(json.dumps({**sidecar, "raw_data": raw}))
        done = cli("check-reports", project / "reports", cwd=project)
        assert done.returncode == 1 and problem in done.stdout, done.stdout + done.stderr
        assert "SECRET-TOKEN" not in done.stdout + done.stderr


def test_a_sidecar_nested_too_deep(tmp_path):
    """The addendum's record (check-reports) and a synthetic checkpoint's record (init reads it as real)."""
    run = synthetic_run(tmp_path, "run", [1024, 4096, 8192])
    reports = tmp_path / "reports"
    assert cli("report", run, "--out", reports).returncode == 0
    (sidecar,) = [p for p in reports.glob("*.json")]
    sidecar.write_text(DEEP)
    done = cli("check-reports", reports)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    said = done.stdout + done.stderr
    assert "unreadable sidecar" in said and "nested 100000 levels deep" in said
    models = tmp_path / "models"
    source = source_folder(models, "mixtral")
    (source / "moecal-synth.json").write_text(DEEP)
    init = cli("init", "--models", models, "--out", tmp_path / "init.yaml", "--bench", sys.executable)
    assert "Traceback" not in init.stderr + init.stdout, init.stderr
