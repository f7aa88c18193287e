"""The defaults as entries in mlxcel's autotune-store shape: written by `moecal report` over several runs, read back
and validated, looked up device → architecture → backend default; an edited entry is refused. Inputs: the two stored
GB10 sweeps in tests/fixtures (mlxcel sweep CSVs; their figures are the fixtures', nothing is made up here), each
with a `# device:` line naming the GPU their prose names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.analysis.comparison.backend_defaults import build_defaults
from harness.cli.app import app
from harness.errors import InputError
from harness.output.defaults.autotune_entry import FIELDS, lookup_tactic, read_entries

FIXTURES = Path(__file__).parents[2] / "fixtures"
RUNS = ("gb10-design-example.csv", "gb10-sweep-2026-07-03.csv")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("autotune")
    runs = [root / name for name in RUNS]
    for run in runs:  # the GPU both sweeps' prose names; without a device no device or class entry is written
        run.write_text("# device: NVIDIA GB10\n" + (FIXTURES / run.name).read_text())
    result = CliRunner().invoke(app, ["report", *map(str, runs), "--out", str(root / "reports")])
    assert result.exit_code == 0, result.output
    (path,) = (root / "reports").glob("*-autotune.json")
    assert f"autotune entries → {path}" in result.output
    return path, build_defaults([Path(r) for r in runs])


def test_entries_round_trip_with_every_field(written):
    path, defaults = written
    document = json.loads(path.read_text())
    entries = read_entries(path)
    assert entries == document["entries"] and entries
    for entry in entries:
        assert set(entry) == set(FIELDS)
        assert entry["runner"] == "cuda" and entry["bucket"] == "decode" and entry["dtype"] == "affine"
        assert entry["tactic"]["label"] == f"max_dff={entry['tactic']['params'][0]}"
        assert len(entry["evidence"]["samples_sha256"]) == 2  # both runs are this GB10's evidence
    (device,) = defaults.devices  # both sweeps are one device: one device entry and one class entry
    by_level = {e["level"]: e for e in entries if e["op"] == "fused_moe_max_dff"}
    assert by_level["device"]["tactic"]["params"] == [device.recommended]
    assert by_level["device"]["backend_default"] == device.current == 8192


def test_entries_without_a_recorded_build_never_apply(written):
    """The stored GB10 sweeps name no mlxcel version or MLX commit: their entries are written but match no binary."""
    path, _ = written
    entries = read_entries(path)
    assert all(e["mlxcel_version"] == "" for e in entries)
    device_entry = next(e for e in entries if e["level"] == "device")
    found = lookup_tactic(
        entries, "fused_moe_max_dff", "cuda", device_entry["device"], device_entry["architecture"], "", ""
    )
    assert found == (None, "backend default")


def test_lookup_order_device_then_architecture_then_backend_default(written):
    path, defaults = written
    # the build facts set here (SYNTHETIC: the stored sweeps recorded none), as a run of a known build records them
    entries = [{**e, "mlxcel_version": "0.7.0", "mlx_commit": "81ba1c6a"} for e in read_entries(path)]
    device_entry = next(e for e in entries if e["level"] == "device")
    arch = device_entry["architecture"]
    build = (device_entry["mlxcel_version"], device_entry["mlx_commit"])
    found = lookup_tactic(entries, "fused_moe_max_dff", "cuda", device_entry["device"], arch, *build)
    assert found == (device_entry["tactic"]["params"][0], "device")
    arch_entry = next(e for e in entries if e["level"] == "architecture")
    assert lookup_tactic(entries, "fused_moe_max_dff", "cuda", "another GPU", arch, *build) == (
        arch_entry["tactic"]["params"][0],
        "architecture",
    )
    assert lookup_tactic(entries, "fused_moe_max_dff", "cuda", "another GPU", "cuda-sm90", *build) == (
        None,
        "backend default",
    )
    other_pin = (build[0], "a-different-mlx-commit")  # invalidation on mismatch, as TacticRecord::matches
    assert (
        lookup_tactic(entries, "fused_moe_max_dff", "cuda", device_entry["device"], arch, *other_pin)[1]
        == "backend default"
    )
    assert (
        lookup_tactic(entries, "fused_moe_max_dff", "metal", device_entry["device"], arch, *build)[1]
        == "backend default"
    )


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda e: e["tactic"].update(label="max_dff=16384", params=[16384]), "entry_sha256"),
        (lambda e: e.update(mlx_commit="0000000"), "entry_sha256"),
        (lambda e: e["evidence"]["samples_sha256"].update({"gb10-design-example.csv": "0" * 64}), "evidence.digest"),
        (lambda e: e.pop("remove_when"), "remove_when"),
        (lambda e: e.update(op="fused_moe_other"), "op"),
        (lambda e: e["tactic"].update(params=[0]), "tactic"),
    ],
)
def test_an_edited_entry_is_refused(written, tmp_path, edit, field):
    path, _ = written
    document = json.loads(path.read_text())
    edit(document["entries"][0])
    tampered = tmp_path / path.name
    tampered.write_text(json.dumps(document))
    with pytest.raises(InputError) as caught:
        read_entries(tampered)
    assert caught.value.field == f"entries[0].{field}"


def test_an_mlx_commit_recorded_short_matches_the_full_hash_only():
    from harness.output.defaults.autotune_entry import same_commit

    full = "81ba1c6a3f0e9d2b7c4a5e6f708192a3b4c5d6e7"  # an example hash, not a real MLX commit
    assert same_commit("81ba1c6a", full) and same_commit(full, full)
    assert not same_commit("81ba1c", full)  # too short to name a commit
    assert not same_commit("0fd2a1c", full) and not same_commit("", full) and not same_commit("", "")
