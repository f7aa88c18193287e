"""`measure.margin: from-null` (issue 37): ADR 0007's rule — the widest null-arm per-round decode tok/s delta,
rounded up to the next 0.5 percent — on SYNTHETIC rows with known deltas, and end to end on the emulated benchmark
(tests/fixtures: no number here is a measurement)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from harness.analysis.points.null_margin import from_null, round_up
from harness.cli.analysis_options import build_options
from harness.config.schema import parse_config
from harness.runs.formats import POINT_COLUMNS, read_samples
from tests.support.fake_models import bench_command, write_models
from tests.support.helpers import cli


def _rows(deltas_pct: dict[str, list[float]]) -> pd.DataFrame:
    """Fallback at 100 tok/s every round, the null arm at 100·(1 + delta); a fused arm that must not count."""
    rows = []
    for model, deltas in deltas_pct.items():
        for r, d in enumerate(deltas):
            key = {c: "" for c in POINT_COLUMNS} | {"model": model, "dff": 768}
            for arm, tok_s in (("fallback", 100.0), ("null", 100.0 * (1 + d / 100)), ("fused", 150.0)):
                rows.append({**key, "arm": arm, "round": r, "tok_s": tok_s, "status": "ok", "knobs": ""})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("pct", "up"), [(0.92, 1.0), (1.0, 1.0), (1.01, 1.5), (0.0, 0.0), (2.3, 2.5)])
def test_round_up_to_the_next_half_percent(pct, up):
    assert round_up(pct) == pytest.approx(up)


def test_the_widest_null_delta_over_every_point_and_round():
    """ADR 0007's GB10 figure: a widest delta of 0.92% gives 1.0%."""
    found = from_null(_rows({"a": [0.3, -0.92, 0.1], "b": [0.5, 0.2, -0.4]}))
    assert found is not None and found.margin == pytest.approx(0.010)
    assert found.widest_pct == pytest.approx(0.92) and (found.points, found.rounds) == (2, 6)
    assert "unresolved" in found.sentence()
    rows = _rows({"a": [0.3]})
    assert from_null(rows[rows["arm"] != "null"]) is None  # no A/A arm: nothing to derive


def test_a_round_the_analysis_drops_as_an_outlier_is_not_the_noise_floor():
    """One background hiccup (−15% in one null run) would make the widest delta 15%: it is left out, as the analysis
    leaves it out of every point's interval (6 robust σ)."""
    deltas = {"a": [0.3, -0.4, 0.2, 0.1, -15.0], "b": [0.5, 0.2, -0.45, 0.1, -0.3]}
    rows = _rows(deltas)
    wobble = [1.001, 0.999, 1.002, 0.998, 1.0] * 2  # the fallback's own run-to-run spread (0.1-0.2%)
    fallback = rows["arm"] == "fallback"
    rows.loc[fallback, "tok_s"] = rows.loc[fallback, "tok_s"].to_numpy() * wobble
    found = from_null(rows)
    assert found is not None and found.widest_pct < 1.0 and found.rounds == 9


def test_from_null_needs_the_null_arm():
    base = {"name": "x", "workload": {"kind": "command", "command": ["b", "{model_path}"]},
            "models": [{"name": "m", "dff": 768, "model_path": "/m"}]}  # fmt: skip
    with pytest.raises(Exception, match="null_arm"):
        parse_config({**base, "measure": {"margin": "from-null"}}, "c.yaml")
    assert parse_config({**base, "measure": {"margin": "from-null", "null_arm": True}}, "c.yaml")


def test_a_from_null_sweep_is_analysed_and_reported_at_its_derived_margin(tmp_path):
    models = write_models(tmp_path)
    config = tmp_path / "c.yaml"
    assert (
        cli("init", "--models", models, "--bench", bench_command(), "--backend", "cuda", "--out", config).returncode
        == 0
    )
    data = yaml.safe_load(config.read_text())
    data["measure"].update(warmup_runs=0, rounds=3, null_arm=True, margin="from-null")
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tmp_path / "run"
    done = cli("sweep", config, "--out", run, "--only", "qwen3-30b-a3b-4bit", "--no-report")
    assert done.returncode == 0, done.stderr
    derived = from_null(read_samples(run / "samples.csv"))  # (pandas alone would read the arm `null` as NaN)
    assert derived is not None and build_options(None, inputs=[run]).policy.margin == pytest.approx(derived.margin)
    assert build_options(None, margin=0.02, inputs=[run]).policy.margin == 0.02  # an explicit --margin wins
    reports = tmp_path / "reports"
    report = cli("report", run, "--out", reports)
    assert report.returncode == 0, report.stderr
    text = "".join(p.read_text() for p in reports.rglob("*.md"))
    assert f"margin {derived.margin:.1%} from the null arm" in text and "Guard: " in text
