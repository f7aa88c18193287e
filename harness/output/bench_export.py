"""One run's decision in the formats CI dashboards and mlxcel's own tools read (`moecal export`).

Three formats, each derived from its documentation or source, never from a guess:

- `github-action-benchmark`: the `customBiggerIsBetter` tool's input, a JSON array of objects with `name`, `unit`,
  `value` (a number; required) and the optional `range` and `extra` (strings shown in the chart's tooltip)
  (benchmark-action/github-action-benchmark README, "Custom benchmarks"). Bigger is better for both quantities:
  a fused/fallback ratio above 1 is the fused kernel winning, and a larger crossover Dff is fused winning over more
  models; a drop in either is the regression the action alerts on.
- `bencher`: Bencher Metric Format (bencher.dev/docs/reference/bencher-metric-format): an object of benchmarks,
  each an object of measures, each `{value, lower_value?, upper_value?}` (numbers; `value` required).
- `compare-bench-csv`: the CSV layout mlxcel's `scripts/compare_bench_csv.py` joins (bench_decode.sh's columns,
  harness.runs.mlxcel_bench_csv), one file per arm, so `compare_bench_csv.py --before <fallback> --after <fused>`
  prints each model's fused/fallback ratio of medians. That script reads `model`, `decode_tok_s`, `prompt_tokens`
  (a row whose value is not a number is dropped; 0 skips its prompt-length check), `prefill_tok_s`,
  `mlxcel_commit` and `date`, and takes the runtime and host from the file name's first two `_` fields
  (`<runtime>_<host>_...`); a name containing `_vlm_` is a VLM harness, which these never are.

What goes in: the decision's crossover with its interval (open ends have no number: Bencher omits the bound,
github-action-benchmark says `open` in the range text) and every point with an estimate: its geometric-mean ratio
with the interval's bounds. Null points (the fused kernel never ran) and points without an estimate carry no ratio
and are left out, as they are left out of the crossover.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from harness.analysis.decision.decision_json import DecisionJSON, PointJSON
from harness.analysis.number_format import json_exact
from harness.runs.formats import FALLBACK, FUSED, write_text_atomic
from harness.runs.mlxcel_bench_csv import COLUMNS as BENCH_COLUMNS
from harness.runs.mlxcel_bench_csv import OPTIONAL as BENCH_OPTIONAL
from harness.runs.provenance import iso_date
from harness.runs.provenance_keys import LIBRARY_COMMIT, LIBRARY_VERSION, MLX_PIN
from harness.runs.rundir import refuse_stored
from harness.thresholds import CONFIDENCE

FORMATS = ("github-action-benchmark", "bencher", "compare-bench-csv")
RATIO_MEASURE = "fused-over-fallback"  # a Bencher measure slug (≤ 64 characters)
CROSSOVER_MEASURE = "crossover-dff"
PROMPT_TOKENS_UNKNOWN = "0"  # compare_bench_csv.py drops a row without a number; 0 skips its prompt check


@dataclass(frozen=True)
class RunLabel:
    """What names a run's benchmarks: its backend, device and host (a dashboard's series must not mix them), and
    the build it measured."""

    backend: str
    device: str
    host: str
    date: str
    mlxcel_version: str
    mlxcel_commit: str
    mlx_commit: str

    @property
    def prefix(self) -> str:
        return f"moecal/{self.backend}/{self.device}"


CARGO_VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?(?![\w.])")


def run_label(provenance: Mapping[str, object], backend: str, device: str) -> RunLabel:
    """The label of a run from its provenance: the build under bench_decode.sh's column names when an import
    recorded them, else what the binary's --version said (runs.provenance). The version is the x.y.z in it (what
    mlxcel's autotune store compares: CARGO_PKG_VERSION); a --version line without one gives ''."""

    def first(*keys: str) -> str:
        return next((str(provenance[k]) for k in keys if provenance.get(k)), "")

    version = CARGO_VERSION.search(first("mlxcel_version", LIBRARY_VERSION))
    return RunLabel(
        backend=backend,
        device=device,
        host=first("host") or "unknown-host",
        date=iso_date(first("date")) or "",
        mlxcel_version=version.group(0) if version else "",
        mlxcel_commit=first("mlxcel_commit", LIBRARY_COMMIT),
        mlx_commit=first("mlx_commit", MLX_PIN),
    )


def ratio_points(decision: DecisionJSON) -> list[tuple[PointJSON, float]]:
    """The points that carry a ratio (a finite estimate, and not null), each with that estimate."""
    return [
        (p, estimate)
        for p in decision["points"]
        if p["verdict"] != "null" and (estimate := json_exact(p["estimate"])) is not None
    ]


def bench_point_name(point: PointJSON) -> str:
    return f"{point['model']}@{point['dff']}"


def _interval_text(low: float | None, high: float | None, level: float) -> str:
    ends = ("open" if low is None else f"{low:.6g}", "open" if high is None else f"{high:.6g}")
    return f"{level:.0%} CI [{ends[0]}, {ends[1]}]"


class BenchmarkEntry(TypedDict):
    """One entry of github-action-benchmark's customBiggerIsBetter format."""

    name: str
    unit: str
    value: float
    range: str
    extra: str


def github_action_benchmark(decision: DecisionJSON, label: RunLabel) -> list[BenchmarkEntry]:
    """customBiggerIsBetter entries: the crossover (when there is one) and each point's ratio."""
    level = float(decision.get("confidence", CONFIDENCE))  # a record without it was analysed at the default
    build = ", ".join(
        x for x in (label.mlxcel_version, label.mlxcel_commit, label.mlx_commit and f"MLX {label.mlx_commit}") if x
    )
    entries: list[BenchmarkEntry] = []
    crossover = json_exact(decision["crossover_dff"])
    if crossover is not None:
        entries.append(
            {
                "name": f"{label.prefix}/crossover",
                "unit": "Dff",
                "value": crossover,
                "range": _interval_text(json_exact(decision["ci_low"]), json_exact(decision["ci_high"]), level),
                "extra": f"decision: {decision['action']} {decision['recommended_cap']}; {decision['outcome']}"
                + (f"; build {build}" if build else ""),
            }
        )
    for p, estimate in ratio_points(decision):
        entries.append(
            {
                "name": f"{label.prefix}/{bench_point_name(p)}",
                "unit": "fused/fallback",
                "value": estimate,
                "range": _interval_text(json_exact(p["ci_low"]), json_exact(p["ci_high"]), level),
                "extra": f"verdict {p['verdict']}; {p['method']}; runs {p['n_fallback']}/{p['n_fused']}",
            }
        )
    return entries


def _metric(value: float, low: float | None, high: float | None) -> dict[str, float]:
    metric = {"value": value}
    if low is not None:
        metric["lower_value"] = low
    if high is not None:
        metric["upper_value"] = high
    return metric


def bencher(decision: DecisionJSON, label: RunLabel) -> dict[str, dict[str, dict[str, float]]]:
    """BMF: one benchmark per point (measure fused-over-fallback) and one for the crossover (measure crossover-dff)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    crossover = json_exact(decision["crossover_dff"])
    if crossover is not None:
        metric = _metric(crossover, json_exact(decision["ci_low"]), json_exact(decision["ci_high"]))
        out[f"{label.prefix}/crossover"] = {CROSSOVER_MEASURE: metric}
    for p, estimate in ratio_points(decision):
        metric = _metric(estimate, json_exact(p["ci_low"]), json_exact(p["ci_high"]))
        out[f"{label.prefix}/{bench_point_name(p)}"] = {RATIO_MEASURE: metric}
    return out


BENCH_CSV_COLUMNS = (*BENCH_COLUMNS, *BENCH_OPTIONAL[:3])  # through mlxcel_commit, mlx_commit: no ROCm overlay


def _file_part(text: str) -> str:
    """A file-name field without `_` (compare_bench_csv.py splits the name on it)."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "unknown"


def bench_csv_names(label: RunLabel) -> dict[str, str]:
    """arm → file name `<backend>_<host>_moecal-<arm>_<date>.csv` (runtime and host where the script looks)."""
    stem = f"{_file_part(label.backend)}_{_file_part(label.host)}"
    return {arm: f"{stem}_moecal-{arm}_{label.date or 'undated'}.csv" for arm in (FALLBACK, FUSED)}


def compare_bench_csv(decision: DecisionJSON, label: RunLabel) -> dict[str, str]:
    """arm → the CSV text: one row per measured point, `decode_tok_s` the arm's median tok/s."""
    out = {}
    for arm, name in bench_csv_names(label).items():
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(BENCH_CSV_COLUMNS)
        for p in decision["points"]:
            tok_s = json_exact(p[f"{arm}_tok_s"])  # type: ignore[literal-required]
            if tok_s is None or p["verdict"] == "null":
                continue
            tokens = json_exact(p.get(f"tokens_{arm}"))
            row = {
                "model": bench_point_name(p),
                "prompt_tokens": PROMPT_TOKENS_UNKNOWN,
                "generated_tokens": "" if tokens is None else f"{tokens:g}",
                "decode_tok_s": repr(tok_s),
                "date": label.date,
                "hardware": label.device,
                "mlxcel_version": label.mlxcel_version,
                "mlxcel_commit": label.mlxcel_commit,
                "mlx_commit": label.mlx_commit,
            }
            writer.writerow([row.get(column, "") for column in BENCH_CSV_COLUMNS])
        out[name] = buffer.getvalue()
    return out


def export_files(fmt: str, decision: DecisionJSON, label: RunLabel) -> Sequence[tuple[str, str]]:
    """(file name, text) per file of `fmt`; the JSON formats are one file named after the format."""
    if fmt == "github-action-benchmark":
        return [("github-action-benchmark.json", json.dumps(github_action_benchmark(decision, label), indent=1))]
    if fmt == "bencher":
        return [("bencher.json", json.dumps(bencher(decision, label), indent=1))]
    return list(compare_bench_csv(decision, label).items())


def write_export(files: Sequence[tuple[str, str]], out: Path | None, single_name: bool) -> list[Path]:
    """Write the files: a JSON format to `out` (a file), the CSV pair into `out` (a folder). Atomic writes."""
    paths = [Path(out)] if single_name and out is not None else [Path(out or ".") / name for name, _ in files]
    for path, (_, text) in zip(paths, files, strict=True):
        refuse_stored(path, "export somewhere else (--out)")
        write_text_atomic(path, text if text.endswith("\n") else text + "\n")
    return paths
