"""mlxcel sweep CSVs ↔ our samples format.

mlxcel's own sweeps (docs/design.md §6) are one row per model: `model,dff,quant_mode`, then `fallback_run1..N`,
`fallback_median`, `fused_run1..N`, `fused_median`, `fused_over_fallback`, under a `#` comment header. Import turns
each run into one sample row (round = run index − 1, so fallback run i and fused run i pair up like the rounds of
our own sweeps) and keeps the header as provenance; the medians and the ratio in the file are not trusted, they are
recomputed from the runs. `NA` marks a run that did not happen: it becomes a `skip` row with the reason, so the
summary counts it. Export writes a summary back in mlxcel's format (tok/s to 2 decimals, ratio to 4).

The build a sweep measured is named by the provenance columns of today's bench_decode.sh CSVs (BUILD_COLUMNS:
`mlxcel_version,mlxcel_commit,mlx_commit`, and on ROCm `mlx_rocm_overlay_commit,hip_version`); export writes them
as trailing columns of every row when the run recorded its build (empty cells for what it did not record; the ROCm
two only when recorded), import reads them back into the
provenance, and a file whose rows name two builds is refused (its points were not measured under one build).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from harness.config.schema import DEFAULT_CAP_ENV
from harness.errors import InputError
from harness.runs.formats import (
    COMPARED_ARMS,
    SAMPLE_COLUMNS,
    check_field_counts,
    csv_line,
    data_line,
    format_provenance,
    frame_csv,
    header_lines,
    point_key,
    point_keys,
    read_csv_text,
    read_frame,
    write_text_atomic,
)
from harness.runs.import_checks import check_imported
from harness.runs.provenance import csv_header_provenance
from harness.runs.provenance_keys import CAP_IGNORED, EXPECT_NULL, Provenance
from harness.runs.run_meta import RunMeta
from harness.runs.rundir import RunDirectory, refuse_links, refuse_stored
from harness.runs.summary_columns import SummaryCol

RUN_COLUMN = re.compile(r"^(fallback|fused)_run(\d+)$")
LEADING_COLUMNS = ["model", "dff", "quant_mode"]
NA_REASON = "NA in the mlxcel CSV: this run did not happen"
BUILD_COLUMNS = ("mlxcel_version", "mlxcel_commit", "mlx_commit", "mlx_rocm_overlay_commit", "hip_version")
ROCM_COLUMNS = BUILD_COLUMNS[3:]  # written only when the run recorded one of them, as bench_decode.sh does


def build_pin(build: Mapping[str, object]) -> str:
    """`mlxcel 0.7.0 (2fcdbe5f) / MLX 81ba1c6a / ROCm overlay 75915908 / HIP 7.15.26333` from BUILD_COLUMNS values,
    as far as they are known: the library line of the addendum."""
    version, commit = (str(build.get(c) or "") for c in BUILD_COLUMNS[:2])
    parts = [f"mlxcel {version}".strip() + (f" ({commit})" if commit else "")]
    for label, column in (("MLX", "mlx_commit"), ("ROCm overlay", "mlx_rocm_overlay_commit"), ("HIP", "hip_version")):
        if build.get(column):
            parts.append(f"{label} {build[column]}")
    return " / ".join(parts)


def _build_columns(path: Path, frame: pd.DataFrame, first_line: int) -> dict[str, str]:
    """The BUILD_COLUMNS a file carries, each with its one value (empty cells aside); two values are refused."""
    out = {}
    for column in (c for c in BUILD_COLUMNS if c in frame.columns):
        values = frame[column].dropna().astype(str)
        distinct = list(dict.fromkeys(values))
        if len(distinct) > 1:
            line = first_line + int(np.flatnonzero((frame[column].astype(str) == distinct[1]).to_numpy())[0])
            problem = f"line {line}: {distinct[1]!r}, another row has {distinct[0]!r}: one file holds one build"
            raise InputError(str(path), column, problem)
        if distinct:
            out[column] = distinct[0]
    return out


@dataclass
class MlxcelImport:
    samples: pd.DataFrame  # SAMPLE_COLUMNS
    provenance: Provenance
    # one line per NA run group, for the user; or what makes them when asked: only import-mlxcel prints them, and a
    # million-row sweep with NA runs has hundreds of thousands of lines that summarize and crossover never read
    skipped_lines: list[str] | Callable[[], list[str]]

    @property
    def skipped(self) -> list[str]:
        if callable(self.skipped_lines):
            self.skipped_lines = self.skipped_lines()
        return self.skipped_lines


def is_mlxcel(columns: Sequence[str]) -> bool:
    """True for a header that starts like an mlxcel sweep CSV and has per-run columns."""
    return list(columns[:3]) == LEADING_COLUMNS and any(RUN_COLUMN.match(c) for c in columns)


def _header(path: Path) -> tuple[dict[str, object], list[str]]:
    """`# key: value` lines as provenance; other comment lines kept verbatim as notes."""
    provenance: Provenance = {}
    notes = []
    for line in header_lines(path):
        text = line.strip()
        key, sep, value = text.partition(":")
        if sep and key.strip() and " " not in key.strip():
            provenance[key.strip()] = value.strip()
        elif text:
            notes.append(text)
    # `# expect_null.<model>: why`, `# cap_ignored.<model>: why` (what moecal's own export writes for the points
    # kept out of the cap's decision) → the dicts the analysis reads
    for group in (EXPECT_NULL, CAP_IGNORED, "round_positions", "round_passes"):
        values = {k.removeprefix(f"{group}."): v for k, v in provenance.items() if k.startswith(f"{group}.")}
        if values:
            provenance = {k: v for k, v in provenance.items() if not k.startswith(f"{group}.")}
            provenance[group] = values
    return provenance, notes


def _positions(provenance: Provenance, model: str, dff: int) -> dict[str, list[str]]:
    """`# round_positions.<model>@<dff>: fallback 0,1,0 fused 1,0,1` (written by moecal's export of an interleaved
    sweep): each run's position in its round, so the read-back pairs the arms by round as the sweep did. Anything
    else (mlxcel's own CSVs have no such line) leaves the positions empty: the runs were not interleaved."""
    groups = provenance.get("round_positions")
    text = groups.get(f"{model}@{dff}", "") if isinstance(groups, dict) else ""
    words = str(text).split()
    pairs = zip(words[::2], words[1::2], strict=False)
    return {arm: values.split(",") for arm, values in pairs if arm in COMPARED_ARMS}


def _position_column(
    provenance: Provenance, point: pd.DataFrame, arm: str, index: int, n_runs: int
) -> np.ndarray | str:
    """Run `index` of `arm`'s position in its round for every row (`_positions`), or "" for a file without
    round positions (mlxcel's own CSVs): one look-up per row only when the header has them."""
    if not provenance.get("round_positions"):
        return ""
    cells = []
    for model, dff in zip(point["model"], point["dff"], strict=True):
        arm_positions = _positions(provenance, str(model), int(dff)).get(arm, [])
        cells.append(arm_positions[index] if len(arm_positions) == n_runs else "")
    return np.array(cells, dtype=object)


def _pass_column(provenance: Provenance, point: pd.DataFrame, index: int, n_runs: int) -> np.ndarray | str:
    """Run `index`'s pass for every row: `# round_passes.<model>@<dff>: 1,1,2` (moecal's export of a sweep measured
    in passes, or of imported bench_decode.sh file pairs), so the read-back tests the passes as the run did; ""
    without the line (mlxcel's own CSVs: each arm's runs measured back to back, one visit per point)."""
    groups = provenance.get("round_passes")
    if not isinstance(groups, dict):
        return ""
    cells = []
    for model, dff in zip(point["model"], point["dff"], strict=True):
        passes = str(groups.get(f"{model}@{dff}", "")).split(",")
        cells.append(passes[index] if len(passes) == n_runs else "")
    return np.array(cells, dtype=object)


def _run_columns(path: Path, columns: Sequence[str]) -> dict[str, list[str]]:
    runs: dict[str, list[str]] = {arm: [] for arm in COMPARED_ARMS}
    for column in columns:
        match = RUN_COLUMN.match(column)
        if match:
            runs[match.group(1)].append(column)
    for arm, names in runs.items():
        expected = [f"{arm}_run{i}" for i in range(1, len(names) + 1)]
        if not names or names != expected:
            raise InputError(str(path), f"{arm}_run*", f"expected columns {arm}_run1..N in order, got {names}")
    return runs


def read_mlxcel(path: str | Path) -> MlxcelImport:
    """An mlxcel sweep CSV as sample rows (module docstring), checked column by column: the work is a fixed number
    of passes over the columns, so a million-row file reads in seconds. A (model, dff) given twice is refused, as
    samples.csv refuses a run recorded twice: which of the two rows would be the measurement?"""
    path = Path(path)
    text = read_csv_text(path)
    frame = read_frame(path, text)
    if list(frame.columns[:3]) != LEADING_COLUMNS:
        raise InputError(str(path), "columns", f"an mlxcel sweep CSV starts with {','.join(LEADING_COLUMNS)}")
    check_field_counts(path, text, len(frame.columns))  # a torn last row would read as NA runs
    provenance, notes = _header(path)
    provenance = csv_header_provenance(provenance, header_lines(path), path)  # before the rows take its backend
    runs = _run_columns(path, list(frame.columns))
    first_line = data_line(path, 0)
    run_id = str(provenance.get("run_id") or path.stem)
    dff, _ = _numbers(frame, path, "dff", first_line)
    bad = ~(np.isfinite(dff) & (dff > 0)) | (dff != np.floor(dff))
    if bad.any():
        first = int(np.argmax(bad))
        cell = frame["dff"].iloc[first]
        raise InputError(str(path), "dff", f"line {first_line + first}: {_plain(cell)!r} is not a positive integer")
    point = pd.DataFrame(
        {
            "model": frame["model"].astype(str),
            "dff": dff.astype(np.int64),
            "quant_mode": _text(frame["quant_mode"]),
        }
    )
    repeated = point.duplicated(["model", "dff"]).to_numpy()
    if repeated.any():
        first = int(np.argmax(repeated))
        model, value = point["model"].iloc[first], int(point["dff"].iloc[first])
        raise InputError(
            str(path), "model", f"line {first_line + first}: {model!r} at dff {value} already has a row above"
        )
    columns = [(arm, index, column) for arm, names in runs.items() for index, column in enumerate(names)]
    tok_s = np.empty((len(point), len(columns)))  # row by row, fallback runs then fused runs: the file's order
    measured = np.empty(tok_s.shape, dtype=bool)
    for block, (_, _, column) in enumerate(columns):
        tok_s[:, block], missing = _numbers(frame, path, column, first_line)
        measured[:, block] = ~missing
        bad = measured[:, block] & ~(np.isfinite(tok_s[:, block]) & (tok_s[:, block] > 0))
        if bad.any():
            line = first_line + int(np.argmax(bad))
            raise InputError(
                str(path), column, f"line {line}: throughput must be finite and > 0 (NA if it did not run)"
            )
    samples = samples_frame(_run_rows(provenance, point, runs, columns, tok_s, measured), run_id, provenance)
    runs_made = samples[["arm", "round", "status"]]  # as read (import_run_dir may set other columns later)
    skipped = partial(_skipped, point, runs_made, len(columns))
    provenance = {**provenance, **_build_columns(path, frame, first_line)}
    provenance = {
        "workload": "command",
        "cap_env": DEFAULT_CAP_ENV,
        # what every mlxcel sweep does; the CSV itself does not record it, so the addendum says so
        "arms": {
            "fused": f"{DEFAULT_CAP_ENV}=20000 (the mlxcel sweep convention; not recorded in the CSV)",
            "fallback": f"{DEFAULT_CAP_ENV}=1 (the mlxcel sweep convention; not recorded in the CSV)",
        },
        **provenance,
        "source_format": "mlxcel sweep CSV",
        "source": str(path),
        **({"notes": " | ".join(notes)} if notes else {}),
    }
    return MlxcelImport(samples, provenance, skipped)  # the cap in force: harness.analysis.decision.decision_facts


def _run_rows(
    provenance: Provenance,
    point: pd.DataFrame,
    runs: dict[str, list[str]],
    columns: list[tuple[str, int, str]],
    tok_s: np.ndarray,
    measured: np.ndarray,
) -> pd.DataFrame:
    """One row per run, built column by column in the file's order (each CSV row's runs together, `columns` in
    turn): a million-row file has ten million runs, and a frame per run column concatenated and sorted back into
    this order held several copies of all of them at once."""
    per_row = len(columns)
    rows = point.iloc[np.repeat(np.arange(len(point)), per_row)].reset_index(drop=True)

    def run_cells(cells: Callable[[str, int, int], np.ndarray | str]) -> np.ndarray | str:
        # "" for every run of a file without the header lines (mlxcel's own CSVs): no per-row look-up at all
        blocks = [cells(arm, index, len(runs[arm])) for arm, index, _ in columns]
        if all(isinstance(b, str) for b in blocks):
            return ""
        return np.column_stack([np.full(len(point), b, dtype=object) if isinstance(b, str) else b for b in blocks])

    position = run_cells(lambda arm, index, n: _position_column(provenance, point, arm, index, n))
    passes = run_cells(lambda _arm, index, n: _pass_column(provenance, point, index, n))
    block = np.tile(np.arange(per_row), len(point))
    skip = (~measured.ravel()).astype(np.intp)
    return rows.assign(
        arm=_repeated_text([arm for arm, _, _ in columns], block),
        round=np.array([index for _, index, _ in columns], dtype=np.int64)[block],
        position=position if isinstance(position, str) else position.ravel(),
        **{"pass": passes if isinstance(passes, str) else passes.ravel()},
        tok_s=tok_s.ravel(),
        status=_repeated_text(["ok", "skip"], skip),
        error=_repeated_text(["", NA_REASON], skip),
    )


def _repeated_text(values: list[str], codes: np.ndarray) -> pd.Series:
    """values[codes] as a text column, taken from the few distinct values: each of ten million cells converted to
    text on its own took seconds, and the column is the same (pandas' text dtype, its cells the same strings)."""
    return pd.Series(values, dtype="str").take(codes).reset_index(drop=True)


def _text(cells: pd.Series) -> pd.Series:
    """Cells as text, "" where missing: a column read as text needs only its gaps filled (no step per cell)."""
    if isinstance(cells.dtype, pd.StringDtype):
        return cells.fillna("")
    return cells.map(lambda v: "" if pd.isna(v) else str(v))


def _plain(value: object) -> object:
    return value.item() if hasattr(value, "item") else value  # numpy scalar → plain number for a message


def _numbers(frame: pd.DataFrame, path: Path, column: str, first_line: int) -> tuple[np.ndarray, np.ndarray]:
    """A column as floats and where it is NA or empty (a cell reading `NaN` is a number, not NA: the checks
    refuse it); a cell that is neither a number nor NA is an InputError naming its line. A column pandas already
    read as numbers needs no per-cell look."""
    cells = frame[column]
    missing = cells.isna().to_numpy()
    if pd.api.types.is_numeric_dtype(cells):
        return cells.to_numpy(float), missing
    values = np.full(len(cells), np.nan)
    for position in np.flatnonzero(~missing):
        cell = cells.iloc[position]
        try:
            values[position] = float(cell)
        except (TypeError, ValueError):
            problem = f"line {first_line + position}: {cell!r} is neither a number nor NA"
            raise InputError(str(path), column, problem) from None
    return values, missing


def _skipped(point: pd.DataFrame, rows: pd.DataFrame, runs_per_row: int) -> list[str]:
    """One line per row with NA runs: which runs did not happen (or all of them). `rows` is in file order,
    `runs_per_row` rows per CSV row."""
    missing = rows[rows["status"] == "skip"]
    if missing.empty:
        return []
    positions = (missing.index // runs_per_row).to_numpy()
    names = [f"{arm}_run{r + 1}" for arm, r in zip(missing["arm"].tolist(), missing["round"].tolist(), strict=True)]
    models, dffs = point["model"].tolist(), point["dff"].tolist()
    out = []
    # one pass over the NA runs, row by row (a groupby with a Python step per group took seconds per 10,000 rows)
    starts = np.flatnonzero(np.diff(positions, prepend=-1)).tolist()
    for start, end in zip(starts, [*starts[1:], len(positions)], strict=True):
        position = int(positions[start])
        runs_text = "all runs" if end - start == runs_per_row else ", ".join(names[start:end])
        out.append(f"{models[position]} (dff {int(dffs[position])}): {runs_text} NA (did not run), skipped")
    return out


def samples_frame(rows: pd.DataFrame, run_id: str, provenance: Provenance) -> pd.DataFrame:
    """Imported run rows as samples.csv rows: the run's constants filled in, the columns an import cannot know left
    empty. Shared by both mlxcel readers (the sweep CSV here, bench_decode.sh CSVs in harness.runs.mlxcel_bench_csv)."""
    frame = rows.reindex(columns=SAMPLE_COLUMNS)
    constant = {
        "run_id": run_id,
        "backend": str(provenance.get("backend", "unknown")),
        "device": str(provenance.get("device") or provenance.get("gpu") or ""),
        "workload": "command",
    }
    for column, value in constant.items():
        frame[column] = value
    text = [
        "position",
        "cap",
        "tokens",
        "seconds",
        "rel_rms",
        "tokens_agree",
        "dispatch_ok",
        "dtype",
        "timestamp",
        "knobs",
        "pass",
    ]
    for column in text:  # a column the rows do not have is all empty: made so at once, not converted cell by cell
        empty = column not in rows.columns
        frame[column] = pd.Series("", frame.index, dtype=object) if empty else frame[column].astype(object).fillna("")
    for column in ("d_model", "n_experts", "top_k", "bits", "group_size"):
        frame[column] = np.nan
    frame["tok_s"] = frame["tok_s"].astype(float)
    return frame


def import_run_dir(
    csv_path: str | Path,
    run_dir: str | Path,
    extra: dict[str, str] | None = None,
    read: Callable[[str | Path], MlxcelImport] | None = None,
) -> MlxcelImport:
    """Write an mlxcel CSV as a run directory (samples.csv + meta.json); refuses to overwrite an existing run.
    `read` turns `csv_path` into samples (default: the sweep CSV reader)."""
    run_dir = Path(run_dir)
    run = RunDirectory(run_dir)
    if run.samples.exists():
        refuse_stored(run_dir, "choose another --out")
        raise InputError(str(run_dir), "--out", "already holds a samples.csv; choose another directory")
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(str(run_dir), "--out", "exists and is not a directory")
    refuse_links(run_dir)
    imported = (read or read_mlxcel)(csv_path)
    check_imported(imported.samples, csv_path)  # before anything is written (harness.runs.import_checks)
    if extra:
        imported.provenance.update(extra)
        for column in ("backend", "device"):
            if column in extra:
                imported.samples[column] = extra[column]
    imported.provenance.setdefault("run_id", run_dir.name)
    text = format_provenance(imported.provenance) + frame_csv(imported.samples)
    write_text_atomic(run.samples, text)
    run.write_record(RunMeta(provenance=imported.provenance))  # an import records no policy: it measured none
    return imported


def _format(value: float | None, digits: int) -> str:
    return "NA" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def round_positions(samples: pd.DataFrame, summary: pd.DataFrame) -> dict[str, str]:
    """`{<model>@<dff>: "fallback 0,1,0 fused 1,0,1"}`: each ok run's position in its round, per point, for the
    header of an exported CSV (so reading it back pairs the runs by round); points with a missing run are left out
    (their read-back is unpaired, as their analysis is)."""
    ok = samples[(samples["status"] == "ok") & samples["arm"].isin(COMPARED_ARMS)]
    ok_keys = list(point_keys(ok))
    out = {}
    for _, point in summary.iterrows():
        key = point_key(point.to_dict())
        mine = ok[[k == key for k in ok_keys]].sort_values("round")
        arms = {arm: pd.to_numeric(mine.loc[mine["arm"] == arm, "position"], errors="coerce") for arm in COMPARED_ARMS}
        rounds = {arm: mine.loc[mine["arm"] == arm, "round"].tolist() for arm in COMPARED_ARMS}
        if rounds["fallback"] == rounds["fused"] and len(arms["fused"]) and all(v.notna().all() for v in arms.values()):
            text = {arm: ",".join(str(int(p)) for p in arms[arm]) for arm in COMPARED_ARMS}
            out[f"{point['model']}@{int(point['dff'])}"] = " ".join(f"{arm} {text[arm]}" for arm in COMPARED_ARMS)
    return out


def round_passes(samples: pd.DataFrame, summary: pd.DataFrame) -> dict[str, str]:
    """`{<model>@<dff>: "1,1,2"}`: each round's pass (sweep_drift), per point whose every ok run of both arms carries
    one and whose arms ran the same rounds, for the header of an exported CSV (round_positions' twin)."""
    ok = samples[(samples["status"] == "ok") & samples["arm"].isin(COMPARED_ARMS)]
    ok_keys = list(point_keys(ok))
    out = {}
    for _, point in summary.iterrows():
        mine = ok[[k == point_key(point.to_dict()) for k in ok_keys]].sort_values("round")
        arms = {arm: mine[mine["arm"] == arm] for arm in COMPARED_ARMS}
        passes = {arm: pd.to_numeric(rows["pass"], errors="coerce") for arm, rows in arms.items()}
        same = arms["fallback"]["round"].tolist() == arms["fused"]["round"].tolist()
        if same and len(arms["fused"]) and all(v.notna().all() for v in passes.values()):
            out[f"{point['model']}@{int(point['dff'])}"] = ",".join(str(int(v)) for v in passes["fallback"])
    return out


def to_mlxcel_csv(samples: pd.DataFrame, summary: pd.DataFrame, provenance: Provenance) -> str:
    """A summary in mlxcel's sweep CSV format, with the per-run values from `samples` (NA where a run is missing)."""
    ok = samples[(samples["status"] == "ok") & samples["arm"].isin(COMPARED_ARMS)]
    ok_keys = list(point_keys(ok))
    n_runs = int(samples["round"].max()) + 1 if samples["round"].notna().any() else 0
    columns = list(LEADING_COLUMNS)
    for arm in COMPARED_ARMS:
        columns += [f"{arm}_run{i}" for i in range(1, n_runs + 1)] + [f"{arm}_median"]
    columns.append("fused_over_fallback")
    recorded = any(provenance.get(c) for c in BUILD_COLUMNS)  # a run that names no build (built-in kernels) adds none
    build = [c for c in BUILD_COLUMNS if recorded and (c not in ROCM_COLUMNS or provenance.get(c))]
    build_cells = [str(provenance.get(c) or "") for c in build]
    columns += build
    lines = [csv_line(columns)]
    for _, point in summary.iterrows():
        key = point_key(point.to_dict())
        mine = ok[[k == key for k in ok_keys]]
        cells = [str(point["model"]), str(int(point["dff"])), str(point["quant_mode"] or "")]
        for arm in COMPARED_ARMS:
            by_round = dict(
                zip(mine.loc[mine["arm"] == arm, "round"], mine.loc[mine["arm"] == arm, "tok_s"], strict=True)
            )
            cells += [_format(by_round.get(r), 2) for r in range(n_runs)] + [_format(point[f"{arm}_tok_s"], 2)]
        cells.append(_format(point[SummaryCol.RATIO], 4))
        lines.append(csv_line([*cells, *build_cells]))  # quoted: a comma or newline in a model name stays in its cell
    return format_provenance(provenance) + "".join(lines)
