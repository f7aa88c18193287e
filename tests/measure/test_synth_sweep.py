"""A command sweep over synthetic checkpoints (config `synth:`) with an EMULATED benchmark
(tests/fixtures/fake_mlxcel_bench.py: SYNTHETIC timings, fused/fallback = 1 + 0.1·(1 − Dff/12000) on `cuda`, 0.3%
noise): the sweep makes the checkpoints it needs (cached by content hash), and Dff refinement synthesizes new ones
inside the crossover bracket until it is far narrower than the real models' 6400 → 14336 gap."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.config.schema import SynthSettings
from harness.measure.synth_models import synthesize
from tests.support.helpers import FIXTURE_PYTHON, REPO, cli
from tests.support.synth_sources import source_folder

pytest.importorskip("mlx.core", reason="MLX writes the synthetic checkpoints")
FAKE = REPO / "tests" / "fixtures" / "fake_mlxcel_bench.py"
TRUE_CROSSOVER = 12000  # the fixture's `cuda` truth, not tuned here
REAL_GAP = (6400, 14336)  # phi-3.5-moe and mixtral-8x7b: no wired real model between them on GB10


def _config(tmp_path: Path, source: Path, cache: Path) -> Path:
    data = {
        "name": "synth-fake",
        "backend": "cpu",
        "current_default": 8192,
        "workload": {
            "kind": "command",
            "command": [*FIXTURE_PYTHON, str(FAKE), "-m", "{model_path}", "-p", "hi", "-n", "8"],
            "timeout_s": 30,
            # the noise a fixed sequence: the refinement's path (which Dff, how many runs) is what the test reads
            "env": {"FAKE_MLXCEL_BACKEND": "cuda", "FAKE_MLXCEL_NOISE_STATE": str(tmp_path / "noise-calls")},
            "dispatch_probe": {"regex": "path=fused"},
        },
        "synth": {"like": str(source), "dff": list(REAL_GAP), "layers": 1, "dtype": "float32", "cache": str(cache)},
        "measure": {"warmup_runs": 0, "rounds": 4, "refine_budget_runs": 40, "target_crossover_width": 0.02},
    }
    path = tmp_path / "synth.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_refinement_over_synthetic_checkpoints_narrows_the_real_gap(tmp_path):
    source = source_folder(tmp_path / "src", "mixtral")
    cache = tmp_path / "cache"
    run = tmp_path / "run"
    done = cli("sweep", _config(tmp_path, source, cache), "--out", run)
    assert done.returncode == 0, done.stderr
    samples = pd.read_csv(run / "samples.csv", comment="#")
    dffs = sorted(set(samples["dff"]))
    refined = [d for d in dffs if REAL_GAP[0] < d < REAL_GAP[1]]
    assert refined and all(d % 256 == 0 for d in refined)  # bisection points on the refine grid
    assert len(samples) <= 2 * 8 + 40  # the first two points, then within the refinement budget
    assert len(list(cache.glob("*/mixtral-tiny-dff*"))) == len(dffs)  # every point is a synthetic checkpoint
    assert (samples[samples["arm"] == "fused"]["dispatch_ok"] == True).all()  # noqa: E712 — the fused kernel ran

    answer = json.loads(cli("crossover", run, "--json", "--current-default", "8192").stdout)
    low, high = next(c for c in answer["crossings"] if c["direction"] == "down")["between"]
    assert high - low < (REAL_GAP[1] - REAL_GAP[0]) / 7  # some points go to the decision first (next_dff)
    assert abs(answer["crossover_dff"] - TRUE_CROSSOVER) < 1000

    addendum = next(run.glob("*-dff-crossover.md")).read_text()
    assert "Synthetic checkpoints" in addendum and "1 of 3 layers" in addendum

    # the cache: the same request finds the same folder, written once
    settings = SynthSettings(like=str(source), dff=[6400], layers=1, dtype="float32", cache=str(cache))
    first = Path(synthesize(settings, 6400).model_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert Path(synthesize(settings, 6400).model_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        (lambda d: d["synth"].update(colour="red"), "synth.colour", "unknown key"),
        (lambda d: d["synth"].update(dff=[]), "synth.dff", "at least 1"),
        (lambda d: d.update(models=[], synth=None), "models", "or give a synth: block"),
        (lambda d: d.update(workload={"kind": "layer"}), "synth", "command workloads only"),
    ],
)
def test_bad_synth_blocks_are_one_line(tmp_path, change, field, problem):
    path = _config(tmp_path, tmp_path / "src", tmp_path / "cache")
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))
    done = cli("plan", path)
    assert done.returncode == 2 and f"{field}: " in done.stderr and problem in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


def test_a_planned_checkpoint_is_the_entry_the_written_one_reads_back(tmp_path):
    """`moecal plan` describes a synthetic model from its plan (write=False); the sweep writes it and reads it back:
    the two model entries must be the same, or the plan would show points the sweep does not measure."""
    source = source_folder(tmp_path / "src", "mixtral")
    settings = SynthSettings(like=str(source), dff=[6400], layers=1, dtype="float32", cache=str(tmp_path / "cache"))
    planned = synthesize(settings, 6400, write=False)
    assert not (tmp_path / "cache").exists()
    written = synthesize(settings, 6400)
    assert (Path(written.model_path) / "config.json").is_file()
    assert planned == written
