"""The pull-model fleet's final job (scripts/fleet_merge.sh, the `merge` job of .github/workflows/
fleet-calibration.yml) on three artifact folders made here: a metal, a cuda and a rocm run of the SYNTHETIC fake
mlxcel benchmark (tests/fixtures/fake_mlxcel_bench.py: true crossovers metal 5000, cuda 12000, rocm 9000), each
named as the workflow names its artifacts (`run-<device class>-<runner>-<run id>-<attempt>`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from harness.cli.app import app
from harness.measure import sweep_loop as sweeps
from harness.measure import sweep_setup
from harness.output.defaults.autotune_entry import read_entries
from tests.support.fake_models import CONFIGS, text_generator_command, write_models
from tests.support.helpers import REPO

pytestmark = pytest.mark.slow  # three sweeps of the fake benchmark
MACHINES = {"metal": "m3-ultra", "cuda": "gb10", "rocm": "gfx1151"}
DEFAULTS = {"metal": 4096, "cuda": 8192, "rocm": 8192}  # mlxcel's compiled-in caps (ROCm takes the CUDA one)
MODELS = ("qwen3-30b-a3b-4bit", "phi-3.5-moe-4bit", "mixtral-8x7b-4bit")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    config = root / "mlxcel.yaml"
    models = write_models(root, {name: CONFIGS[name] for name in MODELS})
    args = ["init", "--models", str(models), "--bench", text_generator_command(), "--out", str(config)]
    assert CliRunner().invoke(app, args).exit_code == 0
    data = yaml.safe_load(config.read_text())
    data["workload"]["dispatch_check"]["enabled"] = False  # tested elsewhere; here it costs time
    config.write_text(yaml.safe_dump(data))
    folder = root / "artifacts"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAKE_MLXCEL_NOISE_STATE", str(root / "noise-state"))
        for backend, device_class in MACHINES.items():
            patch.setenv("FAKE_MLXCEL_BACKEND", backend)
            run = folder / f"run-{device_class}-runner-1-4242-1"
            plan = sweep_setup.prepare(config, out=run, backend=backend, rounds=3)
            plan.meta["current_default"] = DEFAULTS[backend]
            with sweeps.writing(plan):
                sweeps.execute(plan, lambda message: None)
    return root, folder


def test_merge_job_writes_one_addendum_over_the_three_artifacts(artifacts):
    root, folder = artifacts
    out = root / "fleet-report"
    moecal = f"{sys.executable} -m harness"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "fleet_merge.sh"), str(folder), str(out), moecal],
        capture_output=True,
        text=True,
        cwd=root,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (addendum,) = out.glob("*-dff-defaults.md")  # one addendum over every machine
    text = addendum.read_text()
    for backend in MACHINES:
        assert any(line.startswith(f"| {backend} |") for line in text.splitlines()), backend
    assert (out / "pr-body.md").read_text() == text  # the pull request body is the addendum
    (entries_file,) = out.glob("*-autotune.json")
    entries = read_entries(entries_file)  # read back and validated
    assert {(e["runner"], e["level"]) for e in entries} == {
        (b, lvl) for b in MACHINES for lvl in ("device", "architecture")
    }
    dashboard = json.loads((out / "github-action-benchmark.json").read_text())
    prefixes = {entry["name"].split("/")[1] for entry in dashboard}
    assert prefixes == set(MACHINES)  # every machine's export, concatenated
    assert sorted(p.name for p in (out / "export").iterdir()) == sorted(f"{p.name}.json" for p in folder.iterdir())


def test_merge_job_without_runs_says_so(tmp_path):
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "fleet_merge.sh"), str(tmp_path), str(tmp_path / "out"), "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "no run directory" in done.stderr


def test_workflow_runs_moecal_sweep_per_device_class_and_export():
    """The template's shape (actionlint checks its syntax in make lint; this checks what it runs)."""
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "fleet-calibration.yml").read_text())
    sweep, merge = workflow["jobs"]["sweep"], workflow["jobs"]["merge"]
    labels = {tuple(m["runner"]) for m in sweep["strategy"]["matrix"]["include"]}
    assert labels == {
        ("self-hosted", "macos", "m3-ultra"),
        ("self-hosted", "linux", "gb10"),
        ("self-hosted", "linux", "gfx1151"),
    }
    runs = " ".join(step.get("run", "") for step in sweep["steps"])
    assert "moecal sweep" in runs
    upload = next(s for s in sweep["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert "steps.machine.outputs.id" in upload["with"]["name"]  # one artifact per machine, never clobbered
    assert merge["needs"] == "sweep" and any("fleet_merge.sh" in s.get("run", "") for s in merge["steps"])


@pytest.mark.skipif(shutil.which("actionlint", path=str(REPO / ".venv" / "bin")) is None, reason="no actionlint")
def test_actionlint_passes_on_the_templates():
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "actionlint"), "-config-file", ".github/actionlint.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
