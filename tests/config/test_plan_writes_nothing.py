"""`moecal plan` runs nothing and writes nothing: a config with a `synth:` block is planned over checkpoints that
are described from their plan, not written (the sweep writes them). Source folders are tiny labelled test configs
(tests/support/synth_sources.py); the benchmark is the EMULATED one (tests/fixtures/fake_mlxcel_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.helpers import FIXTURE_PYTHON, REPO, cli
from tests.support.synth_sources import source_folder

FAKE = REPO / "tests" / "fixtures" / "fake_mlxcel_bench.py"


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time: what a side effect would change."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.parametrize("command", [("plan", "--json"), ("sweep", "--dry-run")])
def test_plan_over_synthetic_checkpoints_leaves_the_filesystem_untouched(tmp_path, monkeypatch, command):
    """`moecal plan`, and `sweep --dry-run` ("run nothing"): no checkpoint written, no cache, no results/ folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # any default cache would land in tmp_path too
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    source = source_folder(tmp_path / "src", "mixtral")
    config = tmp_path / "synth.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "synth-plan",
                "backend": "cpu",
                "workload": {
                    "kind": "command",
                    "command": [*FIXTURE_PYTHON, str(FAKE), "-m", "{model_path}", "-p", "hi", "-n", "8"],
                    "dispatch_probe": {"regex": "path=fused"},
                },
                "synth": {"like": str(source), "dff": [6400, 14336], "layers": 1, "cache": str(tmp_path / "cache")},
            },
            sort_keys=False,
        )
    )
    before = _tree(tmp_path)
    done = cli(command[0], config, command[1], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _tree(tmp_path) == before  # no checkpoint, no cache folder, no results/ folder
    if command[0] == "sweep":
        assert "dry run: config, backend and commands are usable" in done.stderr
        return
    record = json.loads(done.stdout)
    planned = {p["dff"] for p in record["points"]}
    assert planned == {6400, 14336}  # the points are the synthetic models', described from their plan


def test_plan_of_a_built_in_workload_leaves_the_filesystem_untouched(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    config = tmp_path / "cpu-smoke.yaml"
    config.write_text((REPO / "configs" / "cpu-smoke.yaml").read_text())
    before = _tree(tmp_path)
    done = cli("plan", config, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _tree(tmp_path) == before
    assert json.loads(done.stdout)["points"]  # it planned something
