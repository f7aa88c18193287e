"""The run's policy (confidence, margin, the until-decided look level): set in the config's `measure:`, recorded in
meta.json as its own record field (harness.runs.run_meta), read by the sweep's own decisions (refinement, the
until-decided looks) and by every later analysis as its default. A run without one behaves as before: module
defaults. Runs here are copies of the stored CPU smoke run or empty folders in tmp_path; nothing is measured."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from harness.analysis.rounds.decision_value import StopRule
from harness.errors import InputError
from harness.measure import allocation, refine
from harness.policy import Policy
from harness.runs.run_meta import policy_to_json
from harness.runs.rundir import RunDirectory, SampleWriter
from harness.thresholds import CONFIDENCE, MARGIN
from tests.support.helpers import REPO, cli

STORED = REPO / "results" / "20261130-cpu-vm-cpu-smoke"


def _run_with_policy(tmp_path, policy):
    run = tmp_path / "run"
    shutil.copytree(STORED, run)
    (run / "summary.csv").unlink()  # the stored summary is of an earlier engine; the samples are what is analysed
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "policy": policy}))
    return run


def test_a_new_run_records_its_policy_apart_from_its_provenance_and_a_resume_keeps_it(tmp_path):
    row = {"backend": "cpu", "device": "d", "workload": "layer", "model": "m", "dff": 1024, "arm": "fused"}
    row.update(round=0, tok_s=10.0, status="ok")
    with SampleWriter(
        tmp_path, {"backend": "cpu", "device": "d"}, policy=Policy(confidence=0.9, margin=0.02)
    ) as writer:
        writer.append(row)
    assert json.loads((tmp_path / "meta.json").read_text())["policy"] == {"confidence": 0.9, "margin": 0.02}
    run = RunDirectory(tmp_path)
    assert run.read_policy() == Policy(confidence=0.9, margin=0.02) and "policy" not in run.read_meta()
    assert "policy" not in (tmp_path / "samples.csv").read_text()  # a setting, not a provenance line
    with SampleWriter(
        tmp_path, {"backend": "cpu", "device": "d"}, policy=Policy(confidence=0.99, margin=0.05)
    ) as writer:
        writer.append({**row, "round": 1})
    assert run.read_policy() == Policy(confidence=0.9, margin=0.02), "a resumed run keeps the policy it was measured to"


def test_a_run_without_a_policy_is_analysed_at_the_defaults_as_before(tmp_path):
    assert RunDirectory(STORED).read_policy() is None
    answer = json.loads(cli("crossover", STORED, "--json").stdout)
    assert (answer["confidence"], answer["margin"]) == (CONFIDENCE, MARGIN)


def test_a_later_analysis_defaults_to_the_recorded_policy_and_the_command_line_overrides_it(tmp_path):
    run = _run_with_policy(tmp_path, {"confidence": 0.9, "margin": 0.03})
    answer = json.loads(cli("crossover", run, "--json").stdout)
    assert (answer["confidence"], answer["margin"]) == (0.9, 0.03)
    summarized = json.loads(cli("summarize", run / "samples.csv", "--json", "--out", tmp_path / "s.csv").stdout)
    assert (summarized["confidence"], summarized["margin"]) == (0.9, 0.03)
    given = json.loads(cli("crossover", run, "--json", "--confidence", "0.95").stdout)
    assert (given["confidence"], given["margin"]) == (0.95, 0.03)


def test_an_until_decided_run_is_analysed_at_the_level_its_looks_read(tmp_path):
    run = _run_with_policy(tmp_path, {"confidence": 0.9, "margin": 0.01})
    rule = StopRule(looks=4, policy=Policy(confidence=0.9))
    allocation.save(run, allocation.Allocation(rule, None, looks=2, stop="decided"))
    assert RunDirectory(run).read_policy() == Policy(confidence=0.9, margin=0.01, look_confidence=0.975)
    assert RunDirectory(run).read_meta()["until_decided"]["looks"] == 2
    answer = json.loads(cli("crossover", run, "--json").stdout)
    assert answer["confidence"] == pytest.approx(0.975)


@pytest.mark.parametrize(
    ("policy", "record_level", "expected"),
    [
        (
            {"confidence": 0.9, "margin": 0.01, "look_confidence": 0.975},
            0.975,
            Policy(confidence=0.9, margin=0.01, look_confidence=0.975),
        ),
        ({"confidence": 0.9, "margin": 0.01}, 0.975, Policy(confidence=0.9, margin=0.01, look_confidence=0.975)),
        (None, 0.9875, Policy(confidence=CONFIDENCE, margin=MARGIN, look_confidence=0.9875)),
    ],
    ids=["both-keys", "record-only", "record-only-no-policy"],
)
def test_an_older_run_with_the_look_level_in_its_record_reads_it_and_a_rewrite_writes_it_once(
    tmp_path, policy, record_level, expected
):
    """meta.json files written before the look level had one key (SYNTHETIC: the stored run with a hand-made
    record): it is read from the record where the policy lacks it, a later analysis reads the run at it, and the
    file rewritten (as a resume does) holds it in the policy alone. A run with no policy was measured at the
    module defaults, which its looks read at."""
    run = _run_with_policy(tmp_path, policy) if policy else shutil.copytree(STORED, tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    meta["until_decided"] = {"looks": 2, "look_confidence": record_level}
    (run / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if v is not None}))
    directory = RunDirectory(run)
    assert directory.read_policy() == expected
    assert json.loads(cli("crossover", run, "--json").stdout)["confidence"] == pytest.approx(expected.look_confidence)
    directory.write_record(directory.read_record())
    rewritten = json.loads((run / "meta.json").read_text())
    assert rewritten["until_decided"] == {"looks": 2} and rewritten["policy"] == policy_to_json(expected)


@pytest.mark.parametrize(
    ("policy", "field"),
    [("high", "policy"), ({"confidence": 1.5, "margin": 0.01}, "policy.confidence"), ({"confidence": 0.9}, "margin")],
)
def test_a_malformed_policy_is_one_line(tmp_path, policy, field):
    run = _run_with_policy(tmp_path, policy)
    with pytest.raises(InputError, match=field):
        RunDirectory(run).read_policy()
    done = cli("crossover", run)
    assert done.returncode == 2 and field in done.stderr and done.stderr.count("\n") == 1, done.stderr


class _Captured(Exception):
    pass


@pytest.mark.parametrize("module", [refine, allocation])
def test_the_sweeps_own_decisions_read_the_recorded_policy(tmp_path, monkeypatch, module):
    """Refinement's next Dff and the until-decided looks analyse the run at its recorded confidence and margin, not
    at the module defaults: the analysis call is captured, nothing is measured."""
    run = _run_with_policy(tmp_path, {"confidence": 0.9, "margin": 0.03})
    seen = []

    def capture(path, options):
        seen.append((path, options.policy.confidence, options.policy.margin, options.current_default))
        raise _Captured

    monkeypatch.setattr(module, "analyse_path", capture)
    with pytest.raises(_Captured):
        if module is refine:
            refine.refine(run, None, [], lambda point: 0, None, 4096)  # type: ignore[arg-type]
        else:
            allocation.allocate(run, [], lambda p, n: 0, StopRule(), 4096, None, 0.0, print)
    assert seen == [(run, 0.9, 0.03, 4096)]


def test_the_config_sets_the_policy_and_refuses_one_out_of_range(tmp_path):
    data = yaml.safe_load((REPO / "configs" / "cpu-smoke.yaml").read_text())
    data.setdefault("measure", {}).update(confidence=0.9, margin=0.02)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    from harness.config.schema import load_config

    assert load_config(path).measure.policy == Policy(confidence=0.9, margin=0.02)
    data["measure"]["margin"] = 0.5
    path.write_text(yaml.safe_dump(data))
    done = cli("plan", path)
    assert done.returncode == 2 and "measure.margin" in done.stderr and done.stderr.count("\n") == 1, done.stderr
