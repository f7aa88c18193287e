"""The addendum's heading and provenance (harness/output/addendum/addendum_heading.py, harness/runs/provenance.py), its
links (harness/output/report_links.py) and `report --append-to` (harness/output/addendum/design_doc.py).

Inputs: mlxcel's published 2026-07-03 GB10 sweep (tests/fixtures, real data), the design example and SYNTHETIC
runs (tests.support.synthetic_sweeps); everything is written under tmp_path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.analysis.decision.pipeline import Options
from harness.errors import InputError
from harness.output.addendum.addendum_markdown import render_markdown
from harness.output.addendum.design_doc import insert_addendum, markers
from harness.output.addendum.report_build import build_report_data, read_report_input
from harness.output.addendum.report_data import CONTEXT_KEYS, ReportContext, ReportData, read_sidecar
from harness.output.plots.addendum_plot import title_text
from harness.output.report_files import write_report
from harness.runs import provenance as prov
from harness.runs import provenance_keys as keys
from tests.support.helpers import REPO, cli
from tests.support.synthetic_sweeps import SYNTHETIC_META, design_example, linear_curve, synthetic_samples, write_run

GB10_0703 = REPO / "tests" / "fixtures" / "gb10-sweep-2026-07-03.csv"
# an absolute POSIX path anywhere in a text: `/` at a word start followed by a path character
RUN_META = {**SYNTHETIC_META, "run_id": "run"}
ABSOLUTE = re.compile(r"(?<![\w.~/-])/[\w.-]+/")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def _heading(md_path: Path) -> str:
    return md_path.read_text(encoding="utf-8").splitlines()[0]


def test_every_text_key_of_the_context_is_copied_from_the_provenance():
    """report_data lists the context's text keys twice, as the Literal the copy iterates and as the TypedDict's
    fields (mypy checks each listed key is a text field); this checks no text field is left out of the copy."""
    built_apart = {"device_note", "arms", "packages", "synthetic", "current_default_missing"}
    assert ReportContext.__annotations__.keys() - set(CONTEXT_KEYS) == built_apart


def test_published_csv_header_gives_date_host_hardware_backend_and_pin(tmp_path):
    md_path, _, _, _ = write_report(GB10_0703, tmp_path / "out", options=Options(current_default=8192))
    assert _heading(md_path) == (
        "### 2026-07-03 addendum: GB10 (DGX Spark) cuda fused-MoE Dff crossover under MLX pin e9463bb: keep 8192"
    )
    body = md_path.read_text(encoding="utf-8")
    assert "Hardware: GB10 (DGX Spark), sm_121, CUDA 13.0. Versions: library under test: MLX pin e9463bb." in body
    # every point was analysed unpaired (mlxcel's CSVs have no round order): the text says so, never "interleaved"
    assert "3 runs per side; the runs were not interleaved (unpaired Welch)." in body
    assert "interleaved rounds" not in body.split("\n\n")[1]
    assert "fallback `MLXCEL_FUSED_MOE_MAX_DFF=1 (gather_qmm), as the CSV's header states`" in body
    assert 'prompt "Hello, how are you today?", 100 decode tokens after a 20-token in-process warmup' in body
    record = read_sidecar(md_path)
    assert (record["date"], record["host"], record["backend"]) == ("2026-07-03", "GB10 (DGX Spark)", "cuda")


def test_header_prose_is_read_only_where_the_file_does_not_say_it_itself(tmp_path):
    lines = ["Host: Mac Studio M2 Ultra, Metal. MLX 0.31.0.", "host: studio", "date: 2026-05-01"]
    fields = {"Host": "Mac Studio M2 Ultra, Metal. MLX 0.31.0.", "host": "studio", "date": "2026-05-01"}
    out = prov.csv_header_provenance(fields, lines, tmp_path / "sweep.csv")
    assert (out["host"], out["backend"], out["library_pin"], out["date"]) == (
        "studio",
        "metal",
        "MLX 0.31.0",
        "2026-05-01",
    )
    assert out["hardware"] == "Mac Studio M2 Ultra, Metal"
    bare = prov.csv_header_provenance({}, ["a sweep"], tmp_path / "sweep.csv")
    assert bare == {}  # nothing guessed: no host, no date, no backend


def test_overrides_on_report_and_import(project):
    """A CSV that names no date (the design example) is "Undated", never today; --date and the others correct it,
    through `report` and through `import-mlxcel` alike, and a malformed date is one error line."""
    csv = design_example(project)
    done = cli("report", csv, "--out", project / "a", "--current-default", "8192")
    assert done.returncode == 0, done.stderr
    assert _heading(next((project / "a").glob("*-dff-crossover.md"))).startswith("### Undated addendum: ")
    args = ["--date", "2026-07-10", "--host", "spark", "--gpu", "GB10", "--library-pin", "MLX pin 57c66cac"]
    done = cli("report", csv, "--out", project / "b", "--current-default", "8192", *args)
    assert done.returncode == 0, done.stderr
    (md_path,) = (project / "b").glob("*-dff-crossover.md")
    assert _heading(md_path).startswith("### 2026-07-10 addendum: spark cuda fused-MoE Dff crossover under MLX pin")
    assert "Hardware: GPU GB10." in md_path.read_text(encoding="utf-8")
    assert cli("check-reports", project / "b").returncode == 0  # the overrides are recorded and re-applied

    done = cli("import-mlxcel", csv, "--out", project / "run", *args)
    assert done.returncode == 0, done.stderr
    meta = json.loads((project / "run" / "meta.json").read_text())
    assert (meta["date"], meta["host"], meta["gpu"], meta["library_pin"]) == (
        "2026-07-10",
        "spark",
        "GB10",
        "MLX pin 57c66cac",
    )
    done = cli("report", csv, "--out", project / "c", "--date", "10/07/2026")
    assert done.returncode == 2 and done.stderr.strip() == "error: --date: 10/07/2026: expected a date as YYYY-MM-DD"


def test_command_run_states_the_binary_version_commit_and_pin_and_a_missing_device(project):
    meta = {
        **RUN_META,
        "backend": "cuda",
        "workload": "command",
        "cpu": "AMD EPYC",
        keys.LIBRARY_VERSION: "mlxcel 0.4.2",
        keys.LIBRARY_COMMIT: "0123456789abcdef0123",
        keys.MLX_PIN: "57c66cac",
        keys.BACKEND_DEVICE_MISSING: "labelled cuda, but this machine has no cuda device",
    }
    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=3, workload="command", backend="cuda")
    run = write_run(project / "results" / "run", samples, meta)
    md_path, _, _, _ = write_report(run, project / "reports", options=Options(current_default=8192))
    heading = _heading(md_path)
    assert " under mlxcel 0.4.2 (commit 0123456789ab), MLX pin 57c66cac " in heading
    assert "(labelled cuda, measured without a cuda device)" in heading
    assert "; labelled cuda, measured without a cuda device." in md_path.read_text(encoding="utf-8")
    assert "(labelled cuda, measured without a cuda device) — decision: " in title_text(
        ReportData.from_json(read_sidecar(md_path))
    )
    # the sidecar's context keeps the build under the registry's own key names (report_data.ContextText lists them)
    context = read_sidecar(md_path)["context"]
    assert [context[k] for k in (keys.LIBRARY_VERSION, keys.LIBRARY_COMMIT, keys.MLX_PIN)] == [
        "mlxcel 0.4.2",
        "0123456789abcdef0123",
        "57c66cac",
    ]
    # the record without the flag: a cuda label with no NVIDIA GPU found tells the same; a GPU found clears it
    assert prov.backend_device_missing({"backend": "cuda", "os": "Linux", "cpu": "AMD EPYC"})
    assert prov.backend_device_missing({"backend": "rocm", keys.BACKEND_DEVICE_MISSING: ""}) is None
    assert prov.backend_device_missing({"backend": "cuda", "os": "Linux", "gpu": "NVIDIA H200"}) is None
    assert prov.backend_device_missing({"backend": "metal", "os": "Darwin 24.1"}) is None
    assert prov.backend_device_missing({"backend": "cuda", "source_format": "mlxcel sweep CSV"}) is None
    assert prov.backend_device_missing({"backend": "cpu", "os": "Linux"}) is None


def test_no_absolute_path_in_the_addendum_sidecar_or_plot_title_when_out_is_elsewhere(tmp_path):
    """A run whose record holds this machine's paths (config, command, benchmark, library pin), reported into a
    folder outside its project: the reader sees names and project-relative paths, never an absolute one."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text("")
    config = project / "configs" / "gb10.yaml"
    meta = {
        **RUN_META,
        "workload": "command",
        "config_path": str(config),
        "command": f"moecal sweep {config} --out {project}/results/run",
        "bench_command": f"/opt/mlxcel/bin/mlxcel-bench-decode -m {project}/models/phi -n 100",
        "library_pin": "mlxcel (/opt/mlxcel/bin/mlxcel-bench-decode)",
        "notes": f"copied from {tmp_path}/elsewhere/notes.txt",
    }
    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=4, workload="command")
    run = write_run(project / "results" / "run", samples, meta)
    out = tmp_path / "outside" / "reports"
    md_path, png_path, _, _ = write_report(run, out, options=Options(current_default=4096))
    text = md_path.read_text(encoding="utf-8")
    record = read_sidecar(md_path)
    human = {key: record[key] for key in ("host", "backend", "library_pin", "date", "files", "context")}
    for shown in (text, json.dumps(human, ensure_ascii=False), title_text(ReportData.from_json(record))):
        assert str(tmp_path) not in shown and not ABSOLUTE.search(shown), ABSOLUTE.search(shown)
    assert "(`moecal sweep configs/gb10.yaml --out results/run`, config `configs/gb10.yaml`)" in text
    assert "`mlxcel-bench-decode -m models/phi -n 100`" in text
    assert "under mlxcel (mlxcel-bench-decode):" in _heading(md_path)
    # the raw data lies in another project: named, not linked (a ../../proj/… link breaks once the text moves)
    assert "Raw per-run data: `run/samples.csv`, [run-mlxcel.csv](run-mlxcel.csv)" in text
    assert png_path.is_file()


def test_link_base_makes_links_resolve_from_the_design_docs_folder(project):
    run = write_run(
        project / "results" / "run", synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=5), RUN_META
    )
    docs = project / "docs"
    docs.mkdir()
    md_path, _, _, _ = write_report(run, project / "reports", options=Options(current_default=4096), link_base=docs)
    text = md_path.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)]+)\)", text)
    assert "../results/run/samples.csv" in targets and "../reports/run-dff-crossover.png" in targets
    for target in targets:  # every link resolves from docs/, where the addendum will be read
        assert (docs / target).resolve().is_file(), target
    assert read_sidecar(md_path)["link_base"] == "../docs"
    done = cli("check-reports", project / "reports")
    assert done.returncode == 0, done.stdout  # re-derived with the recorded link base


def test_insert_addendum_appends_then_replaces_and_leaves_every_other_byte(tmp_path):
    other = "<!-- moecal:addendum other -->\r\nother run\r\n<!-- /moecal:addendum other -->"
    doc = f"# Design\r\n\r\nSome text.\r\n{other}\r\ntail"
    first, replaced = insert_addendum(doc, "### A\n\nbody one\n", "run-1")
    assert not replaced and first.startswith(doc) and first.endswith("<!-- /moecal:addendum run-1 -->\r\n")
    assert "\r\n### A\r\n\r\nbody one\r\n" in first  # the doc's line endings, the addendum's lines
    second, replaced = insert_addendum(first, "### A\n\nbody two\n", "run-1")
    assert replaced and second == first.replace("body one", "body two")
    again, _ = insert_addendum(second, "### A\n\nbody two\n", "run-1")
    assert again == second  # idempotent
    start, end = markers("run-1")
    broken = second.replace(end, "")
    with pytest.raises(InputError, match="not one opening and one closing comment"):
        insert_addendum(broken, "x", "run-1")
    assert start in second


def test_report_append_to_a_design_doc(project):
    run = write_run(
        project / "results" / "run", synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=6), RUN_META
    )
    docs = project / "docs"
    docs.mkdir()
    design = docs / "design.md"
    before = "# Fused MoE\n\n## Results\n\nHand-written text stays.\n"
    design.write_text(before)
    args = ["report", run, "--out", project / "reports", "--current-default", "4096", "--append-to", design]
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert f"appended to {design}" in done.stdout
    once = design.read_text()
    assert once.startswith(before) and once.count("<!-- moecal:addendum run -->") == 1
    assert "![fused/fallback ratio vs Dff](../reports/run-dff-crossover.png)" in once  # links from docs/
    (md_path,) = (project / "reports").glob("*-dff-crossover.md")
    assert md_path.read_text() in once
    done = cli(*args)
    assert done.returncode == 0 and f"replaced in {design}" in done.stdout
    assert design.read_text() == once  # the same run again: the block is replaced, nothing else moves

    (docs / "link.md").symlink_to(design)
    missing = cli("report", run, "--out", project / "r2", "--append-to", docs / "nope.md")
    linked = cli("report", run, "--out", project / "r3", "--append-to", docs / "link.md")
    for done, problem in ((missing, "no such file"), (linked, "is a symbolic link")):
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and problem in done.stderr
    assert not (project / "r2").exists() and not (project / "r3").exists()  # refused before writing anything


def test_rendering_is_the_sidecar_alone(project):
    """check-reports re-renders from the sidecar: the heading and provenance read nothing else."""
    data = build_report_data(read_report_input(GB10_0703), project, md_dir=project / "reports")
    assert render_markdown(ReportData.from_json(json.loads(json.dumps(data.to_json())))) == render_markdown(data)
