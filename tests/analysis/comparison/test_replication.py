"""Replication before a default moves (issue 37): a move one session decides is a proposal; two sessions of the same
device class that agree write the patch; `--unreplicated` writes it anyway and says so. Sessions are sweeps of the
SYNTHETIC fake benchmark (tests/fixtures/fake_mlxcel_bench.py: fused wins below Dff 12000 on `cuda`), with the cap in
force set to 4096 so that the move is a raise; no number here is a measurement."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harness.cli.app import app
from harness.measure import sweep_loop as sweeps
from harness.measure import sweep_setup
from tests.support.fake_models import text_generator_command, write_models


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    root = tmp_path_factory.mktemp("replication")
    config = root / "mlxcel.yaml"
    args = ["init", "--models", str(write_models(root)), "--bench", text_generator_command(), "--out", str(config)]
    assert CliRunner().invoke(app, [*args, "--backend", "cuda", "--tokens", "8"]).exit_code == 0
    runs = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAKE_MLXCEL_NOISE_STATE", str(root / "noise-state"))
        patch.setenv("FAKE_MLXCEL_BACKEND", "cuda")
        for session in ("monday", "tuesday"):
            plan = sweep_setup.prepare(config, out=root / session, backend="cuda", rounds=4)
            plan.meta["current_default"] = 4096
            with sweeps.writing(plan):
                sweeps.execute(plan, lambda message: None)
            runs.append(plan.run_dir)
    return root, runs


def _report(root, runs, out, *extra):
    result = CliRunner().invoke(app, ["report", *map(str, runs), "--out", str(root / out), *extra])
    assert result.exit_code == 0, result.output
    (addendum,) = (root / out).glob("*-dff-defaults.md")
    return addendum.read_text(), list((root / out).glob("*-switch_layers.diff"))


def test_one_session_proposes_two_agreeing_sessions_write_the_patch(sessions):
    root, (monday, tuesday) = sessions
    text, patches = _report(root, [monday, monday], "same")  # one session named twice is still one session
    assert "| cuda | raise | replicated: no" in text and not patches
    text, patches = _report(root, [monday, tuesday], "two")
    assert "| cuda | raise | replicated: yes in " in text and len(patches) == 1
    assert "The patch carries replicated moves only" in text


def test_unreplicated_writes_the_proposal_and_says_so(sessions):
    root, (monday, _) = sessions
    text, patches = _report(root, [monday, monday], "forced", "--unreplicated")
    assert "replicated: no" in text and len(patches) == 1
    assert "The patch carries every move, replicated or not (`--unreplicated`)" in text
