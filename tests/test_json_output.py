"""`--json` on the commands whose result a CI reads: sweep (final result), plan, summarize (doctor, compare, check
and crossover have theirs tested with the command). Each prints exactly one JSON object on stdout."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.helpers import cli, fake_config

DESIGN_CSV = Path(__file__).parent / "fixtures" / "gb10-design-example.csv"


def test_sweep_json_is_the_one_object_on_stdout(tmp_path: Path) -> None:
    """The run's files and the decision; tables and progress go to stderr."""
    done = cli("sweep", fake_config(tmp_path), "--out", tmp_path / "run", "--rounds", "3", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["run_dir"] == str(tmp_path / "run") and result["runs_written"] > 0
    assert result["decision"]["action"] in ("keep", "raise", "lower", "set")
    assert Path(result["addendum"]).exists() and Path(result["plot"]).exists()


def test_plan_json_counts_runs_and_says_where_the_estimate_comes_from(tmp_path: Path) -> None:
    done = cli("plan", fake_config(tmp_path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["timed_runs"] == sum(p["runs"] for p in plan["points"] if not p["skip"])
    # tmp_path has no results/ yet
    assert "no earlier run of this config and kernel code here" in plan["estimate_source"]


def test_summarize_json_has_every_point_and_writes_nothing_to_stdout_besides(tmp_path: Path) -> None:
    done = cli("summarize", DESIGN_CSV, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [p["dff"] for p in data["points"]] == [1792, 6400, 8192, 14336]
    assert {p["kind"] for p in data["points"]} == {"command"}  # the workload kind, beside the family
    assert data["confidence"] == 0.95
