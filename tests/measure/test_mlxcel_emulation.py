"""moecal against mlxcel's real benchmark, as its public source describes it: the SYNTHETIC emulation
tests/fixtures/emulated_mlxcel_bench_decode.py (clap CLI, GenerationStats output, greedy EOS, the fused kernel's
decline rules and its parity probe). Everything runs in tmp dirs; no number here is a measurement.

Covers issue 17: commands the binary accepts (usage errors caught before any measurement), the dispatch verified by
an untimed verification pass, parity and token counts per point, `init` → `sweep` → `crossover` → `report` and
`make sweep` end to end.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.analysis.evidence import dispatch_evidence
from harness.config.schema import load_config
from harness.measure import dispatch
from harness.measure.bench_output import generated_tokens, parity_calls, probe_summaries, rejected_flag
from harness.measure.workloads.command import CommandRunner
from tests.support.fake_models import CONFIGS, EMULATED_BENCH, bench_command, emulated_build, write_models
from tests.support.helpers import FIXTURE_PYTHON, REPO, cli

VERIFIED = {"qwen3-30b-a3b-4bit", "phi-3.5-moe-4bit", "mixtral-8x7b-4bit"}
DECLINED = {"gpt-oss-20b-mxfp4", "llama-4-scout-17b-16e-4bit"}
# the kernel's own format strings (mlx_cxx_kernels.cpp), filled in by hand
KERNEL_LINES = (
    "[fused-moe-parity] call 7: fused-vs-ref=1.234e-03 fused-vs-truth=2.000e-03 ref-vs-truth=9.000e-04 "
    "ref_rms=5.000e-01 truth_rms=5.000e-01 (act=0 k=8 din=2048 dff=768)\n"
    "[fused-moe-parity] call 8: fused-vs-ref=6.000e-02 fused-vs-truth=7.500e-02 ref-vs-truth=1.000e-03 "
    "ref_rms=5.000e-01 truth_rms=5.000e-01 (act=1 k=8 din=2048 dff=768)\n"
    "[fused-moe-parity] 5000 calls: worst fused-vs-truth=7.500e-02 worst ref-vs-truth=1.000e-03, 1 over threshold "
    "5.0e-02, 0 non-deterministic\n"
)


@pytest.fixture
def on_path(tmp_path, monkeypatch) -> Path:
    """The emulation installed as `mlxcel-bench-decode` on PATH, as a user has the real one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "mlxcel-bench-decode"  # isolated Python: a fast start
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(FIXTURE_PYTHON)} "{EMULATED_BENCH}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def _init(tmp_path: Path, *extra: str, bench: str = "") -> Path:
    models = write_models(tmp_path)
    out = tmp_path / "mlxcel.yaml"
    bench = bench or bench_command()
    result = cli("init", "--models", models, "--bench", bench, "--backend", "cuda", "--out", out, *extra)
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load(out.read_text())
    data["measure"]["warmup_runs"] = 0  # fast: the emulation has nothing to warm
    header = "".join(line for line in out.read_text().splitlines(keepends=True) if line.startswith("#"))
    out.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return out


def _points(run: Path) -> dict[str, dict]:
    result = cli("crossover", run, "--json")
    assert result.returncode == 0, result.stderr
    decision = json.loads(result.stdout)
    assert decision["action"] in ("keep", "raise", "lower", "set")
    return {p["model"]: p for p in decision["points"]}


TODAY = ["--prompt-tokens", "512", "-n", "128", "--warmup-tokens", "20", "--ignore-eos"]
JULY = ["-n", "100", "--warmup-tokens", "20"]


@pytest.mark.parametrize(("build", "shape", "said"), [("today", TODAY, "today's bench_decode.sh shape"),
                                                      ("july", JULY, "the July protocol")])  # fmt: skip
def test_init_writes_the_maintainers_protocol(tmp_path, build, shape, said):
    """The protocol comes from the binary's --help: today's offers bench_decode.sh's shape (a synthesized 512-token
    prompt, a fixed 128-token budget with --ignore-eos, a 20-token warm-up), July's does not (greedy to EOS on the
    short prompt, each arm's count recorded); the config's comment says which and why."""
    path = _init(tmp_path, bench=emulated_build(tmp_path / "bin", build))
    config = load_config(path)
    protocol = ["-m", "{model_path}", "-p", "Hello, how are you today?", *shape]
    assert config.workload.command[-len(protocol) :] == protocol and config.measure.rounds == 5
    assert said in " ".join(path.read_text().splitlines()[:3])
    assert (config.workload.fused_cap, config.workload.fallback_cap) == (20000, 1)
    assert config.workload.dispatch_check.enabled and config.workload.dispatch_probe is None
    off = tmp_path / "off.yaml"
    args = ["--models", tmp_path / "models", "--bench", bench_command(), "--out", off, "--no-dispatch-check"]
    assert cli("init", *args).returncode == 0
    assert load_config(off).workload.dispatch_check is None


def test_output_formats_are_parsed_as_mlxcel_prints_them():
    calls = parity_calls(KERNEL_LINES)
    assert [(c.call, c.fused_vs_ref, c.fused_vs_truth, c.dff, c.k) for c in calls] == [
        (7, 1.234e-3, 2e-3, 768, 8),
        (8, 6e-2, 7.5e-2, 768, 8),
    ]
    assert probe_summaries(KERNEL_LINES) == 5000
    assert generated_tokens("[Profile Results]\n  Prompt tokens:    23\n  Generated tokens: 48\n") == 48
    assert generated_tokens("Decode: 1.0 ms (1.0 tok/s)") is None
    assert rejected_flag("error: unexpected argument '--ignore-eos' found") == "--ignore-eos"


def test_timed_runs_never_carry_the_probe_variables(monkeypatch):
    """Not even when the user's shell exports them; the verification pass adds them explicitly."""
    config = load_config(REPO / "configs" / "mlxcel-command.yaml")
    monkeypatch.setenv("MLXCEL_FUSED_MOE_PARITY_CHECK", "1")
    monkeypatch.setenv("MLXCEL_FUSED_MOE_PARITY_THRESHOLD", "0")
    runner = CommandRunner(config.workload, ["true"])
    for path in ("fused", "fallback"):
        env = runner.environment(path)
        assert "MLXCEL_FUSED_MOE_PARITY_CHECK" not in env and "MLXCEL_FUSED_MOE_PARITY_THRESHOLD" not in env
    probed = runner.environment("fused", {"MLXCEL_FUSED_MOE_PARITY_CHECK": "1"})
    assert probed["MLXCEL_FUSED_MOE_PARITY_CHECK"] == "1" and probed["MLXCEL_FUSED_MOE_MAX_DFF"] == "20000"


FIGURES = {"over": 0, **{f"fused_vs_{w}_{s}": 1e-3 for w in ("ref", "truth") for s in ("worst", "median")}}


def _entry(dff: int, fused: dict, fallback: dict) -> dict:
    base = {"status": "ok", "calls": 0, "dffs": []}
    return {"dff": dff, "runs": [{**base, "path": "fused", **fused}, {**base, "path": "fallback", **fallback}]}


@pytest.mark.parametrize(
    ("fused", "fallback", "has_probe", "expected"),
    [
        ({"calls": 5, "dffs": [768]}, {}, True, ("verified", False)),
        ({}, {}, True, ("declined", True)),
        ({}, {}, False, ("predicted", False)),
        ({"calls": 5, "dffs": [512]}, {}, True, ("unverified", False)),  # the config's dff is not what ran
        ({"calls": 5, "dffs": [768]}, {"calls": 5, "dffs": [768]}, True, ("unverified", True)),  # cap did not force
        ({"status": "fail", "error": "exit code 1"}, {}, True, ("unverified", False)),
    ],
)
def test_dispatch_classes(fused, fallback, has_probe, expected):
    dispatch_value, note, null = dispatch_evidence.classify_dispatch(_entry(768, fused, fallback), has_probe)
    assert (dispatch_value, null) == expected and note


def test_observed_dispatch_that_contradicts_the_prediction_is_listed():
    record = {
        "eligible-but-declined": _entry(768, {}, {}),
        "null-but-fused": _entry(768, {"calls": 3, "dffs": [768], **FIGURES}, {}),
        "as-predicted": _entry(768, {"calls": 3, "dffs": [768], **FIGURES}, {}),
    }
    wrong = dispatch_evidence.contradictions(record, {"null-but-fused": "mxfp4 quantization"})
    assert set(wrong) == {"eligible-but-declined", "null-but-fused"} and "mxfp4" in wrong["null-but-fused"]


def test_the_verification_record_is_a_field_of_the_loaded_input_not_a_provenance_key(tmp_path):
    """verification.json reaches the analysis as LoadedInput.verification; the provenance (what CSV headers and
    reports restate) stays the run's flat facts, so summary.csv's header carries no `verification.*` line."""
    from harness.analysis.decision.pipeline import analyse, save_summary
    from harness.analysis.points.inputs import load_input

    run = tmp_path / "run"
    shutil.copytree(REPO / "results" / "20261130-cpu-vm-cpu-smoke", run)
    record = {"models": {"m": _entry(768, {"calls": 3, "dffs": [768], **FIGURES}, {})}}
    (run / dispatch_evidence.RECORD).write_text(json.dumps(record))
    loaded = load_input(run)
    assert loaded.verification == record["models"] and "verification" not in loaded.provenance
    analysis = analyse(loaded)
    assert analysis.verification == record["models"]
    save_summary(analysis, run / "summary.csv")  # the stored run's own summary.csv is of an earlier engine
    assert load_input(run / "summary.csv").verification == record["models"]  # beside its run's record
    header = [line for line in (run / "summary.csv").read_text().splitlines() if line.startswith("#")]
    assert "# backend: cpu" in header and not any("verification" in line for line in header)


def test_verification_is_not_repeated_for_models_already_recorded(tmp_path):
    """Resume: a model in verification.json is not run again (open_point would fail the test)."""
    settings = load_config(REPO / "configs" / "mlxcel-command.yaml").workload
    record = {"models": {"m": _entry(768, {"calls": 3, "dffs": [768]}, {})}}
    (tmp_path / dispatch_evidence.RECORD).write_text(json.dumps(record))

    class _Point:
        key = {"model": "m", "dff": 768}

    def refuse(point):
        raise AssertionError("verification repeated")

    assert dispatch.verify([_Point()], refuse, settings, tmp_path) == record["models"]


def test_shipped_config_runs_against_the_emulation_and_a_bad_flag_stops_it_before_measuring(
    tmp_path, on_path, monkeypatch
):
    models = write_models(tmp_path)
    data = yaml.safe_load((REPO / "configs" / "mlxcel-command.yaml").read_text())
    data["models"] = [{**m, "model_path": str(models / m["name"])} for m in data["models"]]
    data["measure"].update(rounds=3, warmup_runs=0)  # fast; the protocol is otherwise the shipped one
    config = tmp_path / "shipped.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli("sweep", config, "--dry-run", "--out", tmp_path / "dry").returncode == 0
    run = tmp_path / "run"
    result = cli("sweep", config, "--out", run)
    assert result.returncode == 0, result.stderr
    samples = pd.read_csv(run / "samples.csv", comment="#")
    assert set(samples["status"]) == {"ok"} and samples["tokens"].notna().all()
    points = _points(run)
    assert {p["dispatch"] for p in points.values()} == {"verified"}

    data["workload"]["command"].append("--ignore-eos")  # a July binary has no such flag: clap rejects it
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("EMULATED_MLXCEL_BUILD", "july")
    for args in (["--dry-run"], []):
        refused = cli("sweep", config, "--out", tmp_path / "refused", *args)
        assert refused.returncode == 2 and not (tmp_path / "refused").exists()
        line = refused.stderr.strip()
        assert "\n" not in line and "mlxcel-bench-decode has no flag '--ignore-eos'" in line, line


def test_init_sweep_crossover_report_end_to_end(tmp_path, monkeypatch):
    """Wired families verified and measured, mxfp4 and llama4 declined nulls, parity and token counts per point,
    a decision and an addendum. The probe's variables exported in the shell must not reach the timed runs (the
    emulation slows the fused path 2.5x under the probe: a timed run carrying it would show a ratio near 0.4)."""
    config = _init(tmp_path, "--rounds", "3")
    monkeypatch.setenv("MLXCEL_FUSED_MOE_PARITY_CHECK", "1")
    monkeypatch.setenv("COLUMNS", "200")  # the console table at full width
    run = tmp_path / "run"
    result = cli("sweep", config, "--out", run, "--measure-null")
    assert result.returncode == 0, result.stderr
    samples = pd.read_csv(run / "samples.csv", comment="#")
    assert not (samples["status"] == "fail").any()
    # two passes over the grid: round 0 of every model, then rounds 1-2 of every model (analysis.sweep_drift)
    timed = samples[samples["status"] == "ok"]
    assert (timed["pass"] == timed["round"].map(lambda r: 1 if r == 0 else 2)).all()
    assert timed["pass"].is_monotonic_increasing
    record = json.loads((run / dispatch_evidence.RECORD).read_text())["models"]
    assert set(record) == VERIFIED | DECLINED  # untimed runs, kept apart from samples.csv
    points = _points(run)
    for name in VERIFIED:
        assert points[name]["dispatch"] == "verified" and points[name]["verdict"] != "null", points[name]
        assert points[name]["parity_calls"] > 0 and points[name]["fused_vs_truth_median"] < 0.05
    for name in DECLINED:
        assert points[name]["dispatch"] == "declined" and points[name]["verdict"] == "null", points[name]
    assert points["qwen3-30b-a3b-4bit"]["ratio_of_medians"] > 1.03  # synthetic truth 1.07; 0.43 if the probe leaked
    assert points["phi-3.5-moe-4bit"]["parity_calls_over"] > 0 and "CHECK" in points["phi-3.5-moe-4bit"]["parity_class"]
    assert points["mixtral-8x7b-4bit"]["parity_calls_over"] == 0
    # today's binary has --ignore-eos: both arms generate the fixed budget (the emulation's greedy EOS would stop
    # qwen3's fused path 4 tokens later than its fallback path, 59 vs 63, under the July protocol)
    assert (points["qwen3-30b-a3b-4bit"]["tokens_fallback"], points["qwen3-30b-a3b-4bit"]["tokens_fused"]) == (128, 128)
    assert not points["qwen3-30b-a3b-4bit"]["tokens_differ"] and "tokens differ" not in result.stdout
    meta = json.loads((run / "meta.json").read_text())
    assert meta["bench_protocol"].startswith("synthesized context") and meta["bench_commit"] == "77afbb1d"
    assert set(samples.loc[samples["status"] == "ok", "decode_path"]) == {"engine"}  # keyed per run
    assert meta["bench_mlx_pin"] == "81ba1c6a" and meta["bench_version"].startswith("mlxcel-bench-decode 0.6.0")
    assert list(run.glob("*-dff-crossover.md"))
    report = cli("report", run, "--out", tmp_path / "reports")
    assert report.returncode == 0, report.stderr


def test_a_binary_without_the_probe_leaves_the_prediction_standing(tmp_path, monkeypatch):
    """Built before the probe existed: no line for any eligible model → `predicted`, nothing null for lack of it."""
    config = _init(tmp_path, "--rounds", "3")
    monkeypatch.setenv("EMULATED_MLXCEL_NO_PROBE", "1")
    run = tmp_path / "run"
    only = ["--only", "qwen3-30b-a3b-4bit", "--only", "gpt-oss-20b-mxfp4"]
    result = cli("sweep", config, "--out", run, *only)
    assert result.returncode == 0, result.stderr
    points = _points(run)
    assert points["qwen3-30b-a3b-4bit"]["dispatch"] == "predicted" and points["qwen3-30b-a3b-4bit"]["verdict"] != "null"
    assert points["gpt-oss-20b-mxfp4"]["verdict"] == "null"  # init's prediction (mxfp4) decides


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "moecal").exists(), reason="needs the checkout's .venv (make setup)")
def test_make_sweep_with_the_binary_on_path(tmp_path, on_path):
    models = write_models(tmp_path, {n: CONFIGS[n] for n in (*DECLINED, "qwen3-30b-a3b-4bit", "mixtral-8x7b-4bit")})
    run = tmp_path / "run"
    done = subprocess.run(
        ["make", "-o", ".venv/.installed", "sweep", f"MODELS={models}", f"OUT={run}",
         f"MLXCEL_CONFIG={tmp_path / 'mlxcel.yaml'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "calibrating mlxcel" in done.stdout and "decision:" in done.stdout + done.stderr
    points = _points(run)
    assert {points[n]["dispatch"] for n in ("qwen3-30b-a3b-4bit", "mixtral-8x7b-4bit")} == {"verified"}
    assert {points[n]["dispatch"] for n in DECLINED} == {"declined"}
    assert all(points[n]["verdict"] == "null" for n in DECLINED)
