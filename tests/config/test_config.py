"""Config validation: every bad-input class gives one line `error: <file>: <field>: <problem>` and exit code 2."""

from __future__ import annotations

import copy

import pytest
import yaml

from harness.config.schema import load_config, parse_config
from harness.errors import InputError
from harness.policy import Policy, PolicyError
from tests.support.helpers import REPO, cli, fake_config

EXAMPLE = REPO / "configs" / "mlxcel-command.yaml"


def _mutated(mutate) -> dict:
    data = yaml.safe_load(EXAMPLE.read_text())
    data = copy.deepcopy(data)
    mutate(data)
    return data


def test_shipped_mlxcel_example_is_valid():
    config = load_config(EXAMPLE)
    assert config.workload.kind == "command"
    assert config.workload.cap_env == "MLXCEL_FUSED_MOE_MAX_DFF"
    assert (config.workload.fused_cap, config.workload.fallback_cap) == (20000, 1)
    assert [m.dff for m in config.models] == [6400, 14336]


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda d: d["workload"].update(timeot_s=3), "workload.timeot_s", "unknown key"),
        (lambda d: d["workload"].update(timeout_s="soon"), "workload.timeout_s", "valid number"),
        (lambda d: d["models"][1].pop("dff"), "models[1].dff", "required"),
        (lambda d: d.pop("workload"), "workload", "missing"),
        (lambda d: d.update(models=[]), "models", "at least 1"),
        (lambda d: d["workload"].update(metric_regex="(["), "workload.metric_regex", "invalid regular expression"),
        (lambda d: d["workload"].update(metric_regex="tok/s"), "workload.metric_regex", "capture group"),
        (lambda d: d["workload"].update(dispatch_probe={"regex": "(["}), "workload.dispatch_probe.regex", "invalid"),
        (lambda d: d["workload"]["dispatch_check"].update(threshold=-1), "workload.dispatch_check.threshold", "0"),
        (lambda d: d["workload"].update(kind="binary"), "workload", "unknown kind"),
        (lambda d: d["measure"].update(order="zigzag"), "measure.order", "rotate"),
        (lambda d: d["models"][0].pop("model_path"), "models[0]", "{model_path}"),
        (lambda d: d["workload"].update(fallback_cap=20000), "workload", "same code"),
        (lambda d: d.update(backend="tpu"), "backend", "metal"),
        (lambda d: d["measure"].update(confidence=1.0), "measure.confidence", "1.0 is not a number in [0.5, 1.0)"),
        (lambda d: d["measure"].update(margin=0.5), "measure.margin", "0.5 is not a number in [0.0, 0.5)"),
        (lambda d: d["measure"].update(margin=True), "measure.margin", "is not a number in [0.0, 0.5)"),
        # a number or "from-null": the union member pydantic tried is not part of the field's name
        (lambda d: d["measure"].update(margin="x"), "measure.margin", "valid number"),
        (lambda d: d["measure"].update(margin=[1]), "measure.margin", "valid number"),
    ],
)
def test_bad_input_names_the_field(mutate, field, problem):
    with pytest.raises(InputError) as info:
        parse_config(_mutated(mutate), "cfg.yaml")
    assert info.value.field == field
    assert problem in info.value.problem


@pytest.mark.parametrize(
    ("confidence", "margin"),
    [(0.5, 0.0), (0.999, 0.499), (0.4999, 0.01), (1.0, 0.01), (0.95, 0.5), (0.95, -1e-9), (float("nan"), 0.01)],
)
def test_the_config_refuses_exactly_the_levels_policy_refuses(confidence, margin):
    """One range check: a config's `measure:` levels pass or fail as harness.policy.Policy's constructor decides."""
    try:
        Policy(confidence=confidence, margin=margin)
        policy_accepts = True
    except PolicyError:
        policy_accepts = False
    data = _mutated(lambda d: d["measure"].update(confidence=confidence, margin=margin))
    try:
        parse_config(data, "cfg.yaml")
        config_accepts = True
    except InputError as exc:
        assert exc.field in ("measure.confidence", "measure.margin")
        config_accepts = False
    assert config_accepts == policy_accepts


def test_cli_prints_one_line_and_exits_2_for_bad_config(tmp_path):
    path = fake_config(tmp_path, workload={"timeot_s": 5})
    done = cli("sweep", path, "--dry-run")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"error: {path}: workload.timeot_s: unknown key (check the spelling; see README 'Config reference')"
    ]
    assert "Traceback" not in done.stdout + done.stderr


def test_unreadable_and_malformed_files(tmp_path):
    missing = cli("plan", tmp_path / "nope.yaml")
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"error: {tmp_path / 'nope.yaml'}: (file): cannot read")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nworkload: [unclosed\n")
    done = cli("plan", broken)
    assert done.returncode == 2
    assert "invalid YAML" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    not_mapping = tmp_path / "list.yaml"
    not_mapping.write_text("- 1\n- 2\n")
    done = cli("plan", not_mapping)
    assert done.returncode == 2 and "(top level)" in done.stderr
