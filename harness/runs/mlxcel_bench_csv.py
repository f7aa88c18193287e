"""mlxcel's benchmark CSVs (`scripts/bench_decode.sh`) as the two arms of one run.

bench_decode.sh writes one row per model and a trailing `SKIP:*` / `FAIL:*` token on a row that has no numbers.
It runs whatever the environment selects, so a calibration is two files, one per arm (the user ran it once with
MLXCEL_FUSED_MOE_MAX_DFF=1 and once with 20000), or several files per arm for several runs. Two layouts exist
(lablup/mlxcel `scripts/bench_decode.sh` and the CSVs under its `benchmarks/`):

- up to 2026-08: `model,model_path,prompt_tokens,generated_tokens,prefill_ms,prefill_tok_s,decode_ms,decode_tok_s,
  date,hardware,mlx_version,build_type,max_tokens,prompt[,prompt_target_len]` — `mlx_version` holds mlxcel's Cargo
  version (the script's own comment says so), and no commit;
- since 2026-09: the same with `mlxcel_version` in place of `mlx_version`, then `mlxcel_commit,mlx_commit` after
  `prompt_target_len`, and on ROCm `mlx_rocm_overlay_commit,hip_version` after those (e.g.
  `benchmarks/rocm_strixhalo-gfx1151_2026-09-30.csv`).

Such files can only be compared when they measured the same thing: the same mlxcel build (its version and, where
recorded, the mlxcel and MLX commits, ROCm overlay and HIP), the same prompt and token budget, the same day and
hardware. Like mlxcel's own CSV comparison, import refuses files that differ in any of these (a file with commits
and one without are different builds as far as anyone can tell). The CSV has no Dff, so each model's shape comes
from its folder under `--models` (harness.config.discover). Each row becomes one sample row: tok/s = `decode_tok_s`
(the binary's decode throughput), `tokens` = `generated_tokens`. The build columns go into the run's provenance
under the names of the new layout (BUILD_COLUMNS), which the mlxcel CSV moecal writes carries again.

File pairs are passes: with k ≥ 2 files per arm, the i-th `--fallback` and `--fused` files form pass i (samples.csv
`pass`), measured at their own time; each point's runs are then paired by pass and the two-pass drift bound and
pass test apply (harness.analysis.points.sweep_drift). A single pair, or a sweep CSV whose runs of an arm were measured
back to back, is one visit per point: its raise or lower is withheld (drift of one arm not excluded).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config.backend_specs import BACKEND_NAMES
from harness.config.discover import DiscoveredModel, read_model
from harness.config.eligibility import cap_not_read, predict_null
from harness.config.schema import DEFAULT_CAP_ENV
from harness.errors import InputError
from harness.runs.formats import FALLBACK, FUSED, read_csv_text
from harness.runs.import_checks import check_model_name, whole_tokens
from harness.runs.mlxcel_csv import BUILD_COLUMNS, MlxcelImport, build_pin, samples_frame
from harness.runs.provenance_keys import CAP_IGNORED, EXPECT_NULL, Provenance

VERSION_COLUMNS = ("mlx_version", "mlxcel_version")  # the old layout's name for mlxcel's version, the new one's
COLUMNS = (
    "model",
    "model_path",
    "prompt_tokens",
    "generated_tokens",
    "prefill_ms",
    "prefill_tok_s",
    "decode_ms",
    "decode_tok_s",
    "date",
    "hardware",
    "mlxcel_version",  # `mlx_version` in the old layout (VERSION_COLUMNS)
    "build_type",
    "max_tokens",
    "prompt",
)
OPTIONAL = ("prompt_target_len", *BUILD_COLUMNS[1:])  # after COLUMNS, in this order, as far as a file has them
MUST_MATCH = ("mlxcel_version", "prompt", "date", "hardware", "build_type", "max_tokens", *OPTIONAL)


def _layout(columns: Sequence[str]) -> tuple[str, ...] | None:
    """The file's columns under the new layout's names, or None when it is not a bench_decode.sh CSV."""
    names = list(columns)
    version = COLUMNS.index("mlxcel_version")
    if len(names) > version and names[version] in VERSION_COLUMNS:
        names[version] = "mlxcel_version"
    rest = names[len(COLUMNS) :]
    if tuple(names[: len(COLUMNS)]) != COLUMNS or tuple(rest) != OPTIONAL[: len(rest)]:
        return None
    return tuple(names)


def _rows(path: Path) -> list[dict[str, str]]:
    """The rows as dicts, with `status` (the trailing SKIP:/FAIL: token, else ok)."""
    try:
        records = list(csv.reader(io.StringIO(read_csv_text(path))))
    except csv.Error as exc:
        raise InputError(str(path), "(file)", f"not a CSV: {exc}") from None
    header = _layout(records[0]) if records else None
    if header is None:
        expected = ",".join(COLUMNS).replace("mlxcel_version", "mlxcel_version (or mlx_version)")
        raise InputError(
            str(path), "columns", f"a bench_decode.sh CSV has the columns {expected}[,{','.join(OPTIONAL)}]"
        )
    out = []
    for line, cells in enumerate(records[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        extra = cells[len(header) :]
        status = next((c for c in extra if c.startswith(("SKIP:", "FAIL:"))), "")
        if len(cells) < len(header) or (len(extra) and not status):
            raise InputError(str(path), "(row)", f"line {line}: {len(cells)} fields, the header has {len(header)}")
        row = dict(zip(header, cells, strict=False))
        row.update(status=status, line=str(line), version_column=records[0][COLUMNS.index("mlxcel_version")])
        out.append(row)
    return out


def _check_same(files: dict[Path, list[dict[str, str]]]) -> dict[str, str]:
    """The values every row of every file shares (MUST_MATCH); a difference is refused."""
    first: dict[str, tuple[str, Path]] = {}
    for path, rows in files.items():
        for row in rows:
            for key in MUST_MATCH:
                value = row.get(key, "")
                if key not in first:
                    first[key] = (value, path)
                elif value != first[key][0]:
                    raise InputError(
                        str(path),
                        row["version_column"] if key == "mlxcel_version" else key,  # as the file names it
                        f"line {row['line']}: {value!r} here, {first[key][0]!r} in {first[key][1]}: the arms must "
                        "come from one mlxcel build (version and commits), prompt, token budget, day and machine "
                        "to be compared",
                    )
    return {key: value for key, (value, _) in first.items()}


def _number(row: dict[str, str], column: str, path: Path) -> float:
    try:
        value = float(row[column])
    except ValueError:
        raise InputError(str(path), column, f"line {row['line']}: {row[column]!r} is not a number") from None
    if not 0 < value < math.inf:  # inf would end in int(inf) (generated_tokens) or an infinite ratio
        raise InputError(str(path), column, f"line {row['line']}: must be a finite number > 0, got {row[column]!r}")
    return value


def _shapes(names: set[str], models_dir: Path | None) -> tuple[dict[str, DiscoveredModel], list[str]]:
    shapes, skipped = {}, []
    for name in sorted(names):
        folder = models_dir / name if models_dir else None
        if folder is None or not (folder / "config.json").is_file():
            skipped.append(f"{name}: no {name}/config.json under --models, so no Dff: skipped")
            continue
        found = read_model(folder)
        if isinstance(found, DiscoveredModel):
            shapes[name] = found
        else:
            skipped.append(f"{name}: {found.reason}: skipped")
    return shapes, skipped


def _family_knowledge(shapes: dict[str, DiscoveredModel]) -> dict[str, dict[str, str]]:
    """What `moecal init` would have written for these models (harness.config.eligibility, the same rules and
    family table): `expect_null` for a checkpoint the fused kernel declines or a family that never runs it (an A/A
    point), `cap_ignored` for a family that ignores the cap (or is unknown): such points stay out of the cap's
    decision, as they do in a sweep of the same models."""
    declined = {name: why for name, model in shapes.items() if (why := predict_null(model))}
    # the words a sweep records (harness.measure.workloads.command.record_arm_forcing), without how the arms were
    # forced: the CSVs do not say whether the fallback arm set MLXCEL_FUSED_MOE=0
    not_read = {name: cap_not_read(model) for name, model in shapes.items()}
    ignored = {name: f"kept out of the cap's crossover: {reason}" for name, reason in not_read.items() if reason}
    return {key: value for key, value in ((EXPECT_NULL, declined), (CAP_IGNORED, ignored)) if value}


def read_bench_pair(fallback: Sequence[Path], fused: Sequence[Path], models_dir: Path | None) -> MlxcelImport:
    """The files of both arms as one run's samples; run i of an arm is its i-th file."""
    files = {Path(p): _rows(Path(p)) for p in (*fallback, *fused)}
    shared = _check_same(files)
    for path, rows in files.items():  # before `--models DIR / name` is read: a name is never a path
        for row in rows:
            check_model_name(row["model"], path, f"line {row['line']}")
    names = {row["model"] for rows in files.values() for row in rows}
    shapes, skipped = _shapes(names, models_dir)
    if not shapes:
        raise InputError(str(models_dir or "--models"), "--models", "no model of the CSVs has a MoE config.json there")
    samples: list[dict[str, Any]] = []  # one per run: text and numbers as the files give them
    # each file pair (the i-th --fallback and --fused file) is a pass over the models, measured at its own time:
    # the passes' agreement is what shows a drift of one arm (harness.analysis.points.sweep_drift; issue 36)
    passes = len(fallback) == len(fused) >= 2
    for arm, paths in ((FALLBACK, fallback), (FUSED, fused)):
        for index, path in enumerate(map(Path, paths)):
            for row in files[path]:
                model = shapes.get(row["model"])
                if model is None:
                    continue
                sample = {
                    "model": model.name,
                    "dff": model.dff,
                    "quant_mode": model.quant.mode,
                    "d_model": model.d_model,
                    "n_experts": model.n_experts,
                    "top_k": model.top_k,
                    "arm": arm,
                    "round": index,
                    "status": "ok",
                    "pass": index + 1 if passes else "",
                }
                if row["status"]:
                    kind = "fail" if row["status"].startswith("FAIL:") else "skip"
                    samples.append({**sample, "status": kind, "error": f"{row['status']} in {path.name}"})
                    continue
                sample.update(
                    tok_s=_number(row, "decode_tok_s", path),
                    tokens=whole_tokens(_number(row, "generated_tokens", path), path, f"line {row['line']}"),
                )
                sample["seconds"] = _number(row, "decode_ms", path) / 1000.0
                samples.append(sample)
    first = Path(fused[0])
    backend = first.name.split("_", 1)[0]
    provenance: Provenance = {
        "workload": "command",
        "cap_env": DEFAULT_CAP_ENV,
        "arms": {
            "fallback": f"as run for {', '.join(map(str, fallback))} (--fallback; the CSV does not record the cap)",
            "fused": f"as run for {', '.join(map(str, fused))} (--fused; the CSV does not record the cap)",
        },
        "date": shared.get("date", ""),
        "device": shared.get("hardware", ""),
        "library_pin": build_pin(shared),
        **{column: shared[column] for column in BUILD_COLUMNS if shared.get(column)},
        "prompt": shared.get("prompt", ""),
        "max_tokens": shared.get("max_tokens", ""),
        **_family_knowledge(shapes),
        "source_format": "mlxcel bench_decode.sh CSVs, one per arm and run",
        "source": ", ".join(map(str, files)),
        **({"backend": backend} if backend in BACKEND_NAMES else {}),  # the file name's first word, if a backend
    }
    frame = samples_frame(pd.DataFrame(samples), str(first.stem), provenance)
    for column in ("d_model", "n_experts", "top_k"):
        frame[column] = [s.get(column) for s in samples]
    for column in ("tokens", "seconds", "error", "pass"):
        frame[column] = [s.get(column, "") for s in samples]
    return MlxcelImport(frame, provenance, skipped)
