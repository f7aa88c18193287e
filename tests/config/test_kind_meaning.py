"""The workload-kind registry says what a kind means (harness.config.kind_meaning): a kind registered with its own
unit and library is reported in them, with no name check of "layer" or "command" in the way. The toy kind and its
runs are SYNTHETIC (tests/support/synthetic_sweeps.py), written to tmp_path only."""

from __future__ import annotations

from typing import Literal

import pytest

from harness.analysis.points.stats import FAMILY_FIELDS
from harness.config import schema
from harness.config.kind_meaning import KindMeaning
from harness.config.schema import KIND_BY_NAME, Strict, WorkloadKind, kind_meaning, kind_of_family
from harness.output.addendum.report_data import read_sidecar
from harness.output.report_files import write_report
from tests.support.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run


class ToySettings(Strict):
    """A toy kind's settings (never run: its runs below are synthetic)."""

    kind: Literal["toy"]


TOY = WorkloadKind(
    ToySettings,
    "tests.config.test_kind_meaning",
    meaning=KindMeaning(
        unit="toy steps/s",
        panel="one toy kernel (toy steps/s)",
        whole_model=False,
        libraries=("toylib",),
        description="one toy kernel call per step (toy steps/s)",
    ),
)


def test_every_registered_kind_states_its_unit_and_the_layer_kind_decides_the_cap():
    for kind in schema.KINDS:
        assert kind.meaning is not schema.UNKNOWN and kind.meaning.unit and kind.meaning.panel, kind.name
    assert [k.name for k in schema.KINDS if k.meaning.decides_cap] == ["layer"]
    assert [k.name for k in schema.KINDS if k.meaning.external] == ["command"]
    assert kind_meaning("no-such-kind") is schema.UNKNOWN and kind_meaning("decode").whole_model
    assert kind_of_family("layer d_model=2048 top_k=8 experts=64 q4g64 float32") == "layer"
    # the family fields the registry states are the ones the statistics group a layer family by
    assert kind_meaning("layer").family_fields == FAMILY_FIELDS and kind_meaning("decode").family_fields == (
        "workload",
    )


def test_a_toy_kind_is_reported_in_its_own_unit_under_its_own_library(tmp_path, monkeypatch):
    monkeypatch.setitem(KIND_BY_NAME, "toy", TOY)
    (tmp_path / "pyproject.toml").write_text("")
    samples = synthetic_samples(linear_curve([1024, 2048, 4096, 8192], 3000), workload="toy", seed=3)
    # what a sweep of it on the cpu backend records: the backend's pin (numba) and the packages installed
    meta = {**SYNTHETIC_META, "workload": "toy", "library_pin": "numba 0.60.0", "cap_env": "",
            "packages": {"numba": "0.60.0", "toylib": "1.2", "python": "3.11"}}  # fmt: skip
    run = write_run(tmp_path / "results" / "toy-run", samples, meta)
    md_path, png_path, _, _ = write_report(run, tmp_path / "reports")
    text = md_path.read_text(encoding="utf-8")
    assert "under toylib 1.2:" in text.splitlines()[0] and "numba" not in text
    assert "| fallback toy steps/s | fused toy steps/s |" in text and "tok/s" not in text
    assert "Harness: one toy kernel call per step (toy steps/s); driven by moecal" in text
    assert "packages that ran: toylib 1.2, python 3.11" in text
    record = read_sidecar(md_path)
    assert record["files"]["mlxcel_csv"] is None  # not a whole model: mlxcel's per-model layout cannot carry it
    assert not (md_path.parent / "toy-run-mlxcel.csv").exists() and png_path.is_file()


@pytest.mark.parametrize("kind", ["layer", "decode", "command"])
def test_the_built_in_kinds_keep_their_words(kind):
    units = {"layer": "layer steps/s", "decode": "tok/s", "command": "tok/s"}
    assert kind_meaning(kind).unit == units[kind]
    assert kind_meaning(kind).whole_model == (kind != "layer")
