"""One analysis per command (docs/design.md §8): the end of `moecal sweep` and `moecal report` read and analyse the
run once and hand that analysis to the final table, summary.csv, the addendum and the mlxcel CSV; only
`check-reports` re-derives on purpose. Counted on a sweep of the SYNTHETIC fake benchmark (tests/fixtures)."""

from __future__ import annotations

import pytest

from harness.analysis.decision import pipeline
from tests.support.helpers import cli, fake_config


@pytest.fixture
def analyses(monkeypatch) -> list[int]:
    """Counts the pipeline's analyses. `_null_excludes` runs exactly once inside every `pipeline.analyse` and is
    looked up as a module global there, so the count holds whatever name a caller imported `analyse` under."""
    calls: list[int] = []
    original = pipeline._null_excludes

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_null_excludes", counting)
    return calls


def test_sweep_and_report_each_analyse_the_run_once(tmp_path, analyses):
    (tmp_path / "pyproject.toml").write_text("")  # a project, so check-reports may read the run
    config = fake_config(tmp_path, measure={"rounds": 2})
    run = tmp_path / "run"
    done = cli("sweep", config, "--out", run)
    assert done.returncode == 0, done.stderr
    assert (run / "summary.csv").is_file() and (run / "run-mlxcel.csv").is_file()  # the table, summary, addendum, CSV
    assert len(analyses) == 1
    analyses.clear()
    done = cli("report", run, "--out", tmp_path / "reports")
    assert done.returncode == 0, done.stderr
    assert len(analyses) == 1
    analyses.clear()
    done = cli("check-reports", tmp_path / "reports")
    assert done.returncode == 0, done.stdout
    assert len(analyses) == 1  # re-derived once from the raw data: record and mlxcel CSV compared against it


def test_the_sweeps_end_reads_its_samples_and_meta_once(tmp_path, monkeypatch):
    """conclude reads samples.csv and meta.json once each and passes what it read to the no-result check, the
    analysis, the final table, the until-decided record and the every-run-failed check (whole-file reads counted)."""
    from pathlib import Path

    from harness.measure import sweep_end

    reads: list[str] = []
    original_read_text, original_conclude = Path.read_text, sweep_end.conclude

    def counting_read_text(self, *args, **kwargs):
        reads.append(self.name)
        return original_read_text(self, *args, **kwargs)

    def counting_conclude(*args, **kwargs):
        with monkeypatch.context() as inside:
            inside.setattr(Path, "read_text", counting_read_text)
            return original_conclude(*args, **kwargs)

    monkeypatch.setattr(sweep_end, "conclude", counting_conclude)
    done = cli("sweep", fake_config(tmp_path, measure={"rounds": 2}), "--out", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert (reads.count("samples.csv"), reads.count("meta.json")) == (1, 1), reads
