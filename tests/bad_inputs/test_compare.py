"""Bad inputs of `moecal compare`: runs that share too little."""

from __future__ import annotations

from tests.bad_inputs.corpus import synthetic_run
from tests.support.helpers import cli


def test_compare_and_report_previous_with_one_shared_point(tmp_path):
    a, b = synthetic_run(tmp_path, "a", [1024, 4096], seed=1), synthetic_run(tmp_path, "b", [4096, 8192], seed=2)
    done = cli("compare", a, b)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "Dff   4096" in done.stdout and "in A only" in done.stdout and "in B only" in done.stdout
    report = cli("report", b, "--previous", a, "--out", tmp_path / "reports")
    assert report.returncode == 0, report.stderr
