"""Every path to a decision gives the sweep path's decision on the same measurements (issue 35, docs/design.md §7.10).

The measurements are SYNTHETIC (generated here from a known truth and seeded noise; nothing was measured): mlxcel
model folders (config.json only), and per point R runs per arm of decode tok/s under a truth that is flat, curved,
steep or a step, with 1–4 model families measured under the cap, A/A points (llama4, deepseek_v2, nemotron_h: the
family never runs the fused kernel) and points measured by switch (gemma4, qwen3_next: the family ignores the cap),
on cuda, metal and rocm. They enter through

1. the run directory a sweep of `moecal init`'s config leaves (its meta: the cap init writes, `expect_null` and
   `cap_ignored` as the sweep records them from init's config entries);
2. the run's exported mlxcel CSV, read directly and re-imported with `import-mlxcel`;
3. per-arm, per-run bench_decode.sh CSVs (both layouts: before and since 2026-09) imported with `--models`, which
   states no cap (the backend's compiled-in constant is the cap in force) and no class (the family knowledge of the
   model folders gives it);
4. a multi-run `report RUN RUN`, whose device row for the run must be the run's own decision;
5. the run's summary.csv (the stored rows, no samples);

and each must give the same action, cap, crossover and interval. What the paths legitimately differ in, and why
they still agree here: a bench_decode.sh CSV has no round positions, so its runs pair by file pair, each pair a pass
(issue 36); the run directory of the main property is therefore recorded so too (positions not kept, pass r + 1 for
round r; the export keeps the passes in `# round_passes`), and its
tok/s are at the CSVs' two decimals, so every path sees the same numbers. A paired sweep is compared with its own
exported CSV only (the export keeps each run's position in its round; bench_decode.sh CSVs cannot), and there
the decision and the interval must agree exactly as well. `check BASE BASE` must pass for every baseline kind the
tool writes (the run directory, its -mlxcel.csv, its summary.csv, each also against the run).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis.comparison.backend_defaults import build_defaults
from harness.analysis.comparison.regression import check_runs
from harness.analysis.decision.decision_facts import MLXCEL_DEFAULT_CAPS, is_switch_point
from harness.analysis.decision.pipeline import Analysis, Options, analyse_path, save_summary
from harness.config.discover import DiscoveredModel, read_model
from harness.config.eligibility import model_entry
from harness.output.addendum.report_build import build_report_data, read_report_input
from harness.output.report_files import mlxcel_csv
from harness.runs.formats import SAMPLE_COLUMNS
from harness.runs.mlxcel_bench_csv import read_bench_pair
from harness.runs.mlxcel_csv import MlxcelImport, import_run_dir
from harness.runs.summary_columns import SummaryCol
from tests.support.fake_models import AFFINE_4BIT, CONFIGS, write_models
from tests.support.synthetic_sweeps import write_run

ROUNDS = 5
NOISE = 0.01


def _moe(model_type: str, dff: int, experts_key: str = "num_experts", d_model: int = 2048) -> dict:
    """A config.json of a MoE checkpoint (the keys harness.config.discover reads for its family)."""
    return {
        "model_type": model_type,
        "hidden_size": d_model,
        "intermediate_size": dff,  # the expert's size in the families without dense layers
        "moe_intermediate_size": dff,  # and in those with them (harness.config.discover.FAMILIES)
        experts_key: 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "quantization": AFFINE_4BIT,
    }


# families measured under the cap: (checkpoint name, config.json); 1–4 of them enter a scenario
CAP_FAMILIES: dict[str, list[tuple[str, dict]]] = {
    "qwen3_moe": [("qwen3-30b-a3b-4bit", _moe("qwen3_moe", 768)), ("qwen3-235b-a22b-4bit", _moe("qwen3_moe", 1536))],
    "mixtral": [
        ("mixtral-8x7b-4bit", _moe("mixtral", 14336, "num_local_experts", 4096)),
        ("mixtral-8x22b-4bit", _moe("mixtral", 16384, "num_local_experts", 6144)),
    ],
    "lfm2_moe": [("lfm2-8b-a1b-4bit", _moe("lfm2_moe", 1792))],
    "phimoe": [("phi-3.5-moe-4bit", _moe("phimoe", 6400, "num_local_experts", 4096))],
    "olmoe": [("olmoe-1b-7b-4bit", _moe("olmoe", 1024)), ("olmoe-big-4bit", _moe("olmoe", 4096))],
    "qwen2_moe": [("qwen2-moe-a14b-4bit", _moe("qwen2_moe", 2560)), ("qwen2-moe-big-4bit", _moe("qwen2_moe", 9472))],
}
# points kept out of the cap's decision: A/A (never runs the kernel) and measured by switch (ignores the cap)
AA = {
    "llama-4-scout-17b-16e-4bit": CONFIGS["llama-4-scout-17b-16e-4bit"],
    "deepseek-v2-lite-4bit": {**_moe("deepseek_v2", 1408, "n_routed_experts"), "n_shared_experts": 2},
}
SWITCH = {
    "gemma-4-26b-a4b-4bit": {**_moe("gemma4", 704), "top_k_experts": 8},
    "qwen3-next-80b-a3b-4bit": {**_moe("qwen3_next", 512), "shared_expert_intermediate_size": 512},
}
TRUTHS = ("flat", "curved", "steep", "step")
BACKENDS = ("cuda", "metal", "rocm")


def truth_ratio(kind: str, dff: float, crossover: float, flat: float) -> float:
    """The true fused/fallback ratio at `dff` of a truth crossing 1 at `crossover` (fused wins below)."""
    x = math.log2(crossover / dff)
    if kind == "flat":
        return flat
    if kind == "curved":
        return 1.0 + 0.05 * x - 0.01 * x * x * (x < 0)
    if kind == "steep":
        return float(np.clip(1.0 + 0.3 * x, 0.6, 1.6))
    return 1.12 if dff <= crossover else 0.9


@dataclass(frozen=True)
class Scenario:
    backend: str
    truth: str
    families: tuple[str, ...]
    crossover: float
    flat: float
    seed: int

    @property
    def label(self) -> str:
        return f"{self.backend}-{self.truth}-{len(self.families)}fam-seed{self.seed}"


def scenarios() -> list[Scenario]:
    """Every backend × truth once, families 1–4 and the crossover drawn from one seeded generator."""
    rng = np.random.default_rng(35)
    out = []
    for seed, (backend, truth) in enumerate((b, t) for b in BACKENDS for t in TRUTHS):
        k = int(rng.integers(1, 5))
        families = tuple(sorted(str(f) for f in rng.choice(sorted(CAP_FAMILIES), size=k, replace=False)))
        crossover = float(np.exp(rng.uniform(np.log(900), np.log(15000))))
        out.append(Scenario(backend, truth, families, crossover, float(rng.choice([1.09, 0.93])), seed))
    return out


def _models(scenario: Scenario, root: Path) -> dict[str, DiscoveredModel]:
    configs = {name: config for family in scenario.families for name, config in CAP_FAMILIES[family]}
    configs |= AA | SWITCH
    folder = write_models(root, configs)
    return {name: read_model(folder / name) for name in configs}


def _runs(scenario: Scenario, models: dict[str, DiscoveredModel]) -> dict[str, dict[str, list[float]]]:
    """Per model, ROUNDS decode tok/s per arm at two decimals (bench_decode.sh's precision)."""
    rng = np.random.default_rng(scenario.seed)
    out = {}
    for name, model in models.items():
        if name in AA:
            ratio = 1.0
        elif name in SWITCH:
            ratio = 1.6  # fused path on vs off: the family ignores the cap
        else:
            ratio = truth_ratio(scenario.truth, model.dff, scenario.crossover, scenario.flat)
        base = 4e5 / model.dff**0.8
        drift = rng.normal(0.0, NOISE, size=ROUNDS)
        out[name] = {
            arm: [round(base * scale * math.exp(drift[r] + rng.normal(0.0, NOISE)), 2) for r in range(ROUNDS)]
            for arm, scale in (("fallback", 1.0), ("fused", ratio))
        }
    return out


def _sweep_meta(scenario: Scenario, models: dict[str, DiscoveredModel]) -> dict[str, object]:
    """The provenance a sweep of `moecal init --models`'s config records (init's entries, the sweep's words)."""
    entries = [model_entry(m) for m in models.values()]
    meta: dict[str, object] = {
        "run_id": f"sweep-{scenario.label}",
        "backend": scenario.backend,
        "device": f"synthetic_{scenario.backend}_device",
        "host": "synthetic-host",
        "date": "2026-10-01",
        "workload": "command",
        "cap_env": "MLXCEL_FUSED_MOE_MAX_DFF",
        "current_default": MLXCEL_DEFAULT_CAPS[scenario.backend],  # what init writes
        "mlxcel_version": "0.7.0",
    }
    expected = {e["name"]: e["expect_null"] for e in entries if e.get("expect_null")}
    ignored = {e["name"]: f"kept out of the cap's crossover: {e['eligibility']}" for e in entries if e.get("forced_by")}
    return {**meta, "expect_null": expected, "cap_ignored": ignored}


def _samples(scenario: Scenario, models: dict[str, DiscoveredModel], runs: dict, paired: bool) -> pd.DataFrame:
    rows = []
    for name, model in models.items():
        for r in range(ROUNDS):
            for position, arm in enumerate(("fallback", "fused") if r % 2 == 0 else ("fused", "fallback")):
                rows.append(
                    dict.fromkeys(SAMPLE_COLUMNS, "")
                    | {
                        "run_id": f"sweep-{scenario.label}",
                        "backend": scenario.backend,
                        "device": f"synthetic_{scenario.backend}_device",
                        "workload": "command",
                        "model": name,
                        "quant_mode": model.quant.mode,
                        "d_model": model.d_model,
                        "dff": model.dff,
                        "n_experts": model.n_experts,
                        "top_k": model.top_k,
                        "arm": arm,
                        "round": r,
                        "position": position if paired else "",
                        # unpaired, the run is what the bench_decode.sh file pairs record: pair r is pass r + 1
                        "pass": "" if paired else r + 1,
                        "tokens": 100,
                        "seconds": 1.0,
                        "tok_s": runs[name][arm][r],
                        "status": "ok",
                    }
                )
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


BENCH_OLD = (
    "model,model_path,prompt_tokens,generated_tokens,prefill_ms,prefill_tok_s,decode_ms,decode_tok_s,date,hardware,"
    "mlx_version,build_type,max_tokens,prompt,prompt_target_len"
)
BENCH_NEW = BENCH_OLD.replace("mlx_version", "mlxcel_version") + ",mlxcel_commit,mlx_commit"


def write_bench_files(
    runs: dict[str, dict[str, list[float]]], root: Path, backend: str, hardware: str, new_layout: bool
) -> dict[str, list[Path]]:
    """bench_decode.sh CSVs of `runs` (model → arm → tok/s per run), one file per arm and run, in the layout of
    mlxcel's benchmarks/ before or since 2026-09 (`<backend>_…` file names: the import reads the backend there)."""
    out: dict[str, list[Path]] = {"fallback": [], "fused": []}
    build = ",2fcdbe5f,81ba1c6a" if new_layout else ""  # mlxcel_commit, mlx_commit after prompt_target_len
    for arm in out:
        for r in range(len(next(iter(runs.values()))[arm])):
            lines = [BENCH_NEW if new_layout else BENCH_OLD]
            for name, arms in runs.items():
                tok_s = arms[arm][r]
                lines.append(
                    f"{name},./models/{name},36,100,9.77,3685.82,{100_000 / tok_s:.3f},{tok_s:.2f},2026-10-01,"
                    f'{hardware},0.7.0,release,100,"Hello, how are you?",{build}'
                )
            path = root / f"{backend}_synthetic_2026-10-01_{arm}{r}.csv"
            path.write_text("\n".join(lines) + "\n")
            out[arm].append(path)
    return out


def _facts(analysis: Analysis) -> tuple[object, ...]:
    """What every path must agree on: action, cap, the cap in force, crossover and interval, which points stayed
    out of the cap's decision (each with its class), and the fused-on-vs-off ratio of the points measured by
    switch."""
    d = analysis.result.decision
    c = analysis.result.crossover
    rounded = tuple(None if v is None or not math.isfinite(v) else round(v, 6) for v in (c.dff, c.ci_low, c.ci_high))
    summary = analysis.summary
    switch = summary[[is_switch_point(r) for r in summary[SummaryCol.REASON]]]
    ratios = {str(m): round(float(e), 6) for m, e in zip(switch["model"], switch[SummaryCol.ESTIMATE], strict=True)}
    classes = dict(analysis.point_facts.classes)
    return (d.action, d.recommended_cap, analysis.current_default, *rounded, classes, ratios)


def _export(run: Path, out: Path) -> Path:
    report_input = read_report_input(run, Options())
    data = build_report_data(report_input, run.parent, md_dir=run.parent)
    out.write_text(mlxcel_csv(report_input.analysis, data), encoding="utf-8")
    return out


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: s.label)
def test_every_path_gives_the_sweep_paths_decision(scenario: Scenario, tmp_path: Path) -> None:
    models = _models(scenario, tmp_path)
    runs = _runs(scenario, models)
    run = write_run(tmp_path / "sweep", _samples(scenario, models, runs, paired=False), _sweep_meta(scenario, models))
    sweep = analyse_path(run)
    expected = _facts(sweep)
    assert sweep.current_default == MLXCEL_DEFAULT_CAPS[scenario.backend]
    classes = sweep.point_facts.classes
    assert {m: classes.get(m) for m in [*AA, *SWITCH]} == {**dict.fromkeys(AA, "aa"), **dict.fromkeys(SWITCH, "switch")}
    assert set(expected[-1]) == set(SWITCH) and all(1.5 < r < 1.7 for r in expected[-1].values())  # truth: 1.6

    exported = _export(run, tmp_path / "sweep-mlxcel.csv")
    from_csv = analyse_path(exported)
    assert _facts(from_csv) == expected, "the exported mlxcel CSV, read directly"
    reimported = tmp_path / "reimported"
    import_run_dir(exported, reimported)
    assert _facts(analyse_path(reimported)) == expected, "the exported mlxcel CSV, imported"

    new_layout = scenario.seed % 2 == 1  # the two bench_decode.sh layouts take turns (each backend gets both)
    files = write_bench_files(runs, tmp_path, scenario.backend, f"synthetic_{scenario.backend}_device", new_layout)
    bench = tmp_path / "bench"

    def read(_: object) -> MlxcelImport:
        return read_bench_pair(files["fallback"], files["fused"], tmp_path / "models")

    import_run_dir(files["fused"][0], bench, {"backend": scenario.backend}, read)  # import-mlxcel --backend
    imported = analyse_path(bench)
    assert imported.cap.source.startswith("mlxcel's compiled-in FUSED_MOE_MAX_DFF_")
    assert _facts(imported) == expected, f"bench_decode.sh CSVs ({'new' if new_layout else 'old'} layout)"

    defaults = build_defaults([run, reimported])
    (device,) = defaults.devices
    d = sweep.result.decision
    assert (device.action, device.recommended) == (d.action, d.recommended_cap or device.current)
    (backend,) = defaults.backends
    if backend.action != device.action:  # only a move the document's own regression check refutes is withheld
        assert backend.action == "keep" and "withheld" in backend.evidence

    # the summary.csv a sweep writes: the same decision from its stored rows
    summary_csv = analyse_path(save_summary(sweep, run / "summary.csv"))
    assert _facts(summary_csv) == expected, "the run's summary.csv"

    # `check BASE BASE` for each baseline kind the tool writes, and the exported CSV against its own run
    same = [(a, a) for a in (sweep, from_csv, summary_csv)]
    for baseline, current in [*same, (from_csv, sweep), (imported, sweep), (summary_csv, sweep)]:
        result = check_runs(baseline, current)
        assert result.exit_code == 0, result.as_json()


def test_a_paired_sweep_and_its_exported_csv_agree(tmp_path: Path) -> None:
    """With round positions kept (a paired analysis), the export carries them and the read-back pairs alike."""
    scenario = Scenario("cuda", "curved", ("mixtral", "qwen3_moe", "lfm2_moe"), 7000.0, 1.0, 99)
    models = _models(scenario, tmp_path)
    runs = _runs(scenario, models)
    run = write_run(tmp_path / "sweep", _samples(scenario, models, runs, paired=True), _sweep_meta(scenario, models))
    exported = _export(run, tmp_path / "sweep-mlxcel.csv")
    assert _facts(analyse_path(exported)) == _facts(analyse_path(run))
    assert json.loads(json.dumps(str(exported.read_text()))).count("round_positions.") == len(models)
