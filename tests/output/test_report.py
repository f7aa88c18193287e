"""Addendum + plot, and `moecal check-reports`, on the docs/design.md §6 example and SYNTHETIC sweeps (all in
tmp_path)."""

from __future__ import annotations

import json

import matplotlib.image
import pandas as pd
import pytest

from harness.analysis.decision.decision_words import family_words
from harness.analysis.decision.pipeline import Options
from harness.output.addendum.addendum_markdown import render_markdown
from harness.output.addendum.report_build import build_report_data, read_report_input
from harness.output.addendum.report_data import read_sidecar, sidecar_path
from harness.output.report_files import write_report
from harness.runs.mlxcel_csv import import_run_dir
from tests.support.helpers import cli, run_cli
from tests.support.synthetic_sweeps import SYNTHETIC_META, design_example, linear_curve, synthetic_samples, write_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def project(tmp_path):
    """A project root (pyproject.toml marker) holding results/ and reports/, like the repository."""
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def test_report_on_an_imported_mlxcel_csv(project):
    run_dir = project / "results" / "gb10"
    import_run_dir(design_example(project), run_dir, {"host": "gb10", "backend": "cuda", "library_pin": "MLX 0.32.1"})
    md_path, png_path, decision, _ = write_report(run_dir, project / "reports", options=Options(current_default=8192))
    body = md_path.read_text()
    block = read_sidecar(md_path)
    assert block["raw_data"] == "results/gb10"
    # llama-4-scout's "break-even at 8192" is an A/A point (llama4 never runs the fused kernel): null, off the curve
    assert block["decision"]["crossover_dff"] == pytest.approx(11905, rel=0.01)
    heading = " addendum: gb10 cuda fused-MoE Dff crossover under MLX 0.32.1: keep 8192\n"
    assert body.startswith("### Undated addendum:") and heading in body  # the CSV names no date
    assert "{" not in body  # no JSON in the visible text: the record is the sidecar
    assert "| Dff | model | fallback tok/s | fused tok/s | fused/fallback | 95% CI | verdict | decision test |" in body
    # the figures of the console table (`moecal crossover`), formatted by the same functions from the same numbers
    assert "| 1792 | lfm2-8b-a1b-4bit | 140.68 | **160.63** | **1.1434** | [1.1126, 1.1752] | fused |  |" in body
    assert "| 8192 | llama-4-scout-17b-4bit | 21.64 | 21.32 | n/a | - | null |  |" in body
    assert "- llama-4-scout-17b-4bit (Dff 8192): A/A point: the name matches llama-4-\\* → family llama4" in body
    finding = (
        "- mlxcel models: fused wins beyond 1 + 1.0% at Dff 1792, 6400; fallback wins beyond 1 − 1.0% at Dff "
        "14336; null (not used) at Dff 8192."
    )
    assert finding in body
    assert "above 1.0 at Dff 1792, 6400 and not above it at Dff 14336; it crosses 1.0 at Dff ≈ 11905 (95% CI" in body
    assert decision.action == "keep" and "beyond 1 ± 1.0%" in body
    assert "**Decision: keep 8192** (`FUSED_MOE_MAX_DFF_CUDA`)" in body
    assert "Set this constant" not in body and "Line to change" not in body  # a keep changes no constant
    assert "Raw per-run data: [../results/gb10/samples.csv](../results/gb10/samples.csv)" in body
    assert png_path.read_bytes()[:8] == PNG_MAGIC
    assert matplotlib.image.imread(png_path).shape[2] in (3, 4)


def test_report_lists_null_points_noise_floor_and_the_previous_sweep(project):
    curve = linear_curve([1024, 2048, 4096, 6144, 8192], 5000)
    old = write_run(project / "results" / "old", synthetic_samples(curve, seed=1, with_null_arm=True))
    new_samples = synthetic_samples(curve, seed=2, with_null_arm=True)
    new_samples.loc[new_samples["dff"] == 1024, "quant_mode"] = "mxfp4"
    new = write_run(project / "results" / "new", new_samples, {**SYNTHETIC_META, "current_default": 4096})
    md_path, _, _, _ = write_report(new, project / "reports", previous=old)
    body = md_path.read_text()
    assert "### 2026-01-02 addendum: synthetic-host cpu fused-MoE Dff crossover under synthetic 1.0: " in body
    assert "- synthetic-layer (Dff 1024): quant_mode mxfp4 is not affine" in body
    assert "- A/A check (the fallback measured twice, " in body and body.count("A/A check") == 1
    assert "Previous sweep (2026-01-02, synthetic 1.0, `results/old`)" in body
    assert "Each side forced with fallback `unfused path`, fused `fused kernel`." in body
    assert "driven by moecal (`moecal sweep configs/synthetic.yaml --out results/x`)" in body
    assert "| fallback layer steps/s | fused layer steps/s |" in body and "tok/s" not in body


def test_check_reports_passes_fresh_and_fails_on_edited_numbers(project):
    run_dir = write_run(
        project / "results" / "run",
        synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=3, workload="command"),
    )
    reports = project / "reports"
    md_path, _, _, _ = write_report(run_dir, reports, options=Options(current_default=4096))
    done = run_cli("check-reports", reports, cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1/1 addenda re-derive" in done.stdout

    sidecar = sidecar_path(md_path)
    original = sidecar.read_text()
    cap = read_sidecar(md_path)["decision"]["recommended_cap"]
    sidecar.write_text(original.replace(f'"recommended_cap": {cap}', f'"recommended_cap": {cap + 256}', 1))
    done = cli("check-reports", reports, cwd=project)
    assert done.returncode == 1 and "decision.recommended_cap: stored" in done.stdout

    sidecar.write_text(original)
    body = md_path.read_text()
    edited = body.replace("| 4096 | synthetic-layer | ", "| 4097 | synthetic-layer | ", 1)
    assert edited != body
    md_path.write_text(edited)
    done = cli("check-reports", reports, cwd=project)
    assert done.returncode == 1 and "the text differs from what its sidecar renders to" in done.stdout

    md_path.write_text(body)
    (csv,) = reports.glob("*-mlxcel.csv")
    csv.write_text(csv.read_text().replace(",", ";", 1))
    done = cli("check-reports", reports, cwd=project)
    assert done.returncode == 1 and "differs from the runs it exports" in done.stdout


def test_check_reports_with_nothing_to_check(tmp_path):
    (tmp_path / "notes.md").write_text("# not an addendum\n")
    done = cli("check-reports", tmp_path)
    assert done.returncode == 0 and "nothing to check" in done.stdout


def test_findings_follow_the_verdicts_and_name_every_family(project):
    """Inconclusive points are called inconclusive, never "fused wins at every Dff"."""
    samples = synthetic_samples({1024: 1.2, 2048: 1.012, 4096: 1.01}, rounds=4, noise=0.01, seed=4, d_model=2048)
    other = synthetic_samples({1024: 0.9, 2048: 0.8}, rounds=4, noise=0.01, seed=5, d_model=4096)
    run_dir = write_run(project / "results" / "run", pd.concat([samples, other], ignore_index=True))
    md_path, png_path, _, _ = write_report(run_dir, project / "reports", options=Options(current_default=4096))
    body = md_path.read_text()
    block = read_sidecar(md_path)
    verdicts = {(p["family"], p["dff"]): p["verdict"] for p in block["decision"]["points"]}
    for family in {f for f, _ in verdicts}:
        line = next(line for line in body.splitlines() if line.startswith(f"- {family_words(family)}: "))
        for (f, dff), verdict in verdicts.items():
            if f == family and verdict == "inconclusive":
                assert "inconclusive at Dff" in line and str(dff) in line.split("inconclusive at Dff")[1]
    # "above 1.0 at every measured Dff" only where it is true (the property test checks every such claim)
    for family in {f for f, _ in verdicts}:
        estimates = [p["estimate"] for p in block["decision"]["points"] if p["family"] == family]
        claims = "above 1.0 at every measured Dff" in _family_reason(block["decision"], family)
        assert claims == all(e > 1 for e in estimates), family
    assert png_path.read_bytes()[:8] == PNG_MAGIC


def _family_reason(decision: dict, family: str) -> str:
    return next(
        f["reason"] for f in decision.get("families", [{**decision, "family": family}]) if f["family"] == family
    )


def test_dispatch_parity_and_token_columns_appear_only_when_the_points_carry_them(project):
    """The verification pass (another module) adds per-point `dispatch`, `parity` and `tokens`: the table shows them
    when present and is unchanged without them (SYNTHETIC run, fields injected into the record)."""
    run_dir = write_run(project / "results" / "run", synthetic_samples(linear_curve([1024, 4096], 5000), seed=8))
    data = build_report_data(read_report_input(run_dir), project, md_dir=project / "reports")
    plain = render_markdown(data)
    assert "| dispatch |" not in plain and "| parity |" not in plain
    first, second = data.decision["points"]
    first.update(dispatch="verified", parity_class="faithful", parity_calls=40, parity_calls_over=0)
    first.update(tokens_fallback=100, tokens_fused=87, tokens_differ=True)
    second.update(dispatch="predicted", parity_class="", tokens_fallback=100, tokens_fused=100, tokens_differ=False)
    text = render_markdown(data)
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0].endswith("| verdict | dispatch | parity | tokens fallback/fused |")
    assert table[1].endswith("| verified | ok (≤ 0.05) | **100/87 differ** |")  # the figures stay in the sidecar
    assert table[2].endswith("| predicted | - | 100/100 |")
    assert "the dispatch was not observed" in text and "different token counts at synthetic-layer (Dff 1024)" in text


def test_the_addendum_says_where_the_dispatch_pass_proved_the_family_table_wrong(project):
    """SYNTHETIC command run with a verification record: the model predicted null logged fused-kernel calls, the
    model predicted to run the kernel logged none. The addendum names both as places the family table was wrong;
    the same run without the record says nothing of the table."""
    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=11, workload="command")
    samples["model"] = samples["dff"].map({1024: "ran-model", 4096: "ok-model", 8192: "declined-model"})
    ran, declined = "ran-model", "declined-model"
    nrms = {f"fused_vs_{r}_{s}": 1e-3 for r in ("ref", "truth") for s in ("worst", "median")}
    fused = {"path": "fused", "status": "ok", "calls": 10, "dffs": [1024], "over": 0, "tokens": 9, **nrms}
    silent = {"path": "fused", "status": "ok", "calls": 0, "dffs": [], "over": 0, "tokens": 9}
    fallback = {"path": "fallback", "status": "ok", "calls": 0, "dffs": [], "tokens": 9}
    ok = {**fused, "dffs": [4096]}
    record = {
        ran: {"dff": 1024, "runs": [fused, fallback]},
        "ok-model": {"dff": 4096, "runs": [ok, fallback]},  # the binary has the probe: silence means declined
        declined: {"dff": 8192, "runs": [silent, fallback]},
    }
    meta = {**SYNTHETIC_META, "current_default": 4096, "expect_null": {ran: "family x never runs the fused kernel"}}
    plain = write_run(project / "results" / "plain", samples, meta)
    assert "family table" not in write_report(plain, project / "plain")[0].read_text()
    run = write_run(project / "results" / "run", samples, meta)
    (run / "verification.json").write_text(json.dumps({"format": 1, "models": record}))
    body = write_report(run, project / "reports")[0].read_text()
    assert "moecal's family table was wrong here" in body
    assert f"- {ran}: predicted null (family x never runs the fused kernel), but the verification run logged" in body
    assert f"- {declined}: predicted eligible, but the kernel declined it" in body
    assert cli("check-reports", project / "reports", cwd=project).returncode == 0


def test_a_sidecar_of_the_first_format_3_still_reads(project):
    """Sidecars written before `overrides`, `link_base` and `files.raw_name` were recorded: the record reads (it is
    not called malformed) and check-reports names exactly the keys missing against a fresh record."""
    from harness.output.report_check import verify_report

    run_dir = write_run(project / "results" / "run", synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=3))
    md_path, _, _, _ = write_report(run_dir, project / "reports")
    old = read_sidecar(md_path)
    for key in ("overrides", "link_base"):
        del old[key]
    del old["files"]["raw_name"]
    sidecar_path(md_path).write_text(json.dumps(old, indent=1, ensure_ascii=False) + "\n")
    missing = [".link_base: missing in one of them", ".overrides: missing in one of them"]
    assert verify_report(md_path) == [*missing, ".files.raw_name: missing in one of them"]
