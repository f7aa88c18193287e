"""meta.json's provenance key registry (harness.runs.provenance_keys): a listed key with a value of the wrong kind is
refused in one line where meta.json is read and before it is written; what moecal writes, and what an import
carries over from a CSV header as text, passes."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.errors import InputError
from harness.runs import provenance_keys as keys
from harness.runs.formats import SAMPLE_COLUMNS
from harness.runs.rundir import RunDirectory, SampleWriter
from tests.support.helpers import REPO, cli

STORED = REPO / "results" / "20261130-cpu-vm-cpu-smoke"

BAD = [
    ("cpu_count", "two", "is not a whole number"),
    ("rounds", -1, "is not a whole number"),
    ("harness_dirty", "yes", "is not true or false"),
    ("packages", {"numpy": 2}, "is not an object of text values"),
    ("backend", 7, "is not text"),
    ("segments", {"start": "x"}, "is not a list of objects"),
    ("knobs", {"MLXCEL_X": "1"}, "is not an object of lists"),
    (keys.UNTIL_DECIDED, ["looks"], "is not an object"),
    (keys.DISPATCH_OVERRIDES, ["qwen3-30b-a3b"], "is not an object of text values"),
    (keys.EXPECT_NULL, {"qwen3-30b-a3b": None}, "is not an object of text values"),
]


def _copy_with(tmp_path, key, value):
    run_dir = tmp_path / "run"
    shutil.copytree(STORED, run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    (run_dir / "meta.json").write_text(json.dumps({**meta, key: value}))
    return run_dir


@pytest.mark.parametrize(("key", "value", "problem"), BAD)
def test_a_bad_value_is_refused_where_meta_json_is_read(tmp_path, key, value, problem):
    run_dir = _copy_with(tmp_path, key, value)
    with pytest.raises(InputError) as caught:
        RunDirectory(run_dir).read_meta()
    assert (caught.value.source, caught.value.field) == (str(run_dir / "meta.json"), key)
    assert problem in caught.value.problem


@pytest.mark.parametrize(
    ("level", "problem"),
    [(None, "None is not a number in [0.5, 1.0)"), (1.5, "1.5 is not a number"), ("high", "'high' is not a number")],
)
def test_an_older_records_look_level_is_checked_by_the_policy_it_moves_into(tmp_path, level, problem):
    """An older run's record carried the look level (harness.runs.run_meta moves it into the policy): its one range
    check is the Policy's (harness.policy), named by the record's field; a null one is no level."""
    run_dir = _copy_with(tmp_path, keys.UNTIL_DECIDED, {"looks": 2, "look_confidence": level})
    with pytest.raises(InputError) as caught:
        RunDirectory(run_dir).read_meta()
    assert (caught.value.source, caught.value.field) == (str(run_dir / "meta.json"), "until_decided.look_confidence")
    assert problem in caught.value.problem


def test_a_bad_value_is_one_line_and_exit_2_on_the_command_line(tmp_path):
    run_dir = _copy_with(tmp_path, "harness_dirty", "yes")
    done = cli("summarize", run_dir, "--out", tmp_path / "summary.csv")
    assert done.returncode == 2 and not (tmp_path / "summary.csv").exists()
    assert done.stderr.strip() == f"error: {run_dir / 'meta.json'}: harness_dirty: 'yes' is not true or false"


def test_a_bad_value_is_refused_before_meta_json_is_written(tmp_path):
    row = dict.fromkeys(SAMPLE_COLUMNS, "")
    row.update(backend="cpu", device="d", workload="layer", model="m", dff=1024, arm="fused", round=0, status="ok")
    with (
        pytest.raises(InputError, match="cpu_count: 'many' is not a whole number"),
        SampleWriter(tmp_path, {"backend": "cpu", "cpu_count": "many"}) as writer,
    ):
        writer.append(row)
    assert not (tmp_path / "meta.json").exists() and not (tmp_path / "samples.csv").exists()


def test_what_moecal_writes_and_a_csv_header_carries_passes():
    stored = json.loads((STORED / "meta.json").read_text())
    keys.check_provenance(stored, "meta.json")  # a sweep's own values
    as_text = {"cpu_count": "2", "rounds": "6", "harness_dirty": "False", "packages": {"numpy": "2.4.6"}}
    as_text |= {keys.EXPECT_NULL: {"m": "declined"}, keys.CAP_IGNORED: {"m": "switch"}}
    keys.check_provenance(as_text, "meta.json")  # an import of moecal's exported CSV: the header's text
    keys.check_provenance({"a_backend_fact": [1, {"x": None}]}, "meta.json")  # an open mapping: unlisted keys pass


def test_every_key_named_in_code_is_registered():
    named = [keys.UNTIL_DECIDED, keys.SEGMENTS, keys.LIBRARY_VERSION, keys.LIBRARY_COMMIT, keys.MLX_PIN]
    named += [keys.EXPECT_NULL, keys.CAP_IGNORED, keys.DISPATCH_OVERRIDES]
    assert all(name in keys.KEYS for name in [*named, keys.BACKEND_DEVICE_MISSING])
    assert all(key.name == name and key.meaning for name, key in keys.KEYS.items())
