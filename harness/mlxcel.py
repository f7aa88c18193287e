"""mlxcel sweep CSVs ↔ our samples format.

mlxcel's own sweeps (DESIGN §6) are one row per model: `model,dff,quant_mode`, then `fallback_run1..N`,
`fallback_median`, `fused_run1..N`, `fused_median`, `fused_over_fallback`, under a `#` comment header. Import turns
each run into one sample row (round = run index − 1, so fallback run i and fused run i pair up like the rounds of
our own sweeps) and keeps the header as provenance; the medians and the ratio in the file are not trusted, they are
recomputed from the runs. `NA` marks a run that did not happen: it becomes a `skip` row with the reason, so the
summary counts it. Export writes a summary back in mlxcel's format (tok/s to 2 decimals, ratio to 4).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.config import DEFAULT_CAP_ENV
from harness.errors import InputError
from harness.results import (
    SAMPLE_COLUMNS,
    data_line,
    format_provenance,
    header_lines,
    point_key,
    point_keys,
    read_frame,
    write_text_atomic,
)
from harness.rundir import refuse_stored, write_meta

RUN_COLUMN = re.compile(r"^(fallback|fused)_run(\d+)$")
LEADING_COLUMNS = ["model", "dff", "quant_mode"]
ARMS = ("fallback", "fused")
NA_REASON = "NA in the mlxcel CSV: this run did not happen"


@dataclass
class MlxcelImport:
    samples: pd.DataFrame  # SAMPLE_COLUMNS
    provenance: dict[str, object]
    skipped: list[str]  # one line per NA run group, for the user


def is_mlxcel(columns: Sequence[str]) -> bool:
    """True for a header that starts like an mlxcel sweep CSV and has per-run columns."""
    return list(columns[:3]) == LEADING_COLUMNS and any(RUN_COLUMN.match(c) for c in columns)


def _header(path: Path) -> tuple[dict[str, object], list[str]]:
    """`# key: value` lines as provenance; other comment lines kept verbatim as notes."""
    provenance: dict[str, object] = {}
    notes = []
    for line in header_lines(path):
        text = line.strip()
        key, sep, value = text.partition(":")
        if sep and key.strip() and " " not in key.strip():
            provenance[key.strip()] = value.strip()
        elif text:
            notes.append(text)
    # `# expect_null.<model>: why` (what moecal's own export writes for null points) → the dict the analysis reads
    for group in ("expect_null", "round_positions"):
        values = {k.removeprefix(f"{group}."): v for k, v in provenance.items() if k.startswith(f"{group}.")}
        if values:
            provenance = {k: v for k, v in provenance.items() if not k.startswith(f"{group}.")}
            provenance[group] = values
    return provenance, notes


def _positions(provenance: dict[str, object], model: str, dff: int) -> dict[str, list[str]]:
    """`# round_positions.<model>@<dff>: fallback 0,1,0 fused 1,0,1` (written by moecal's export of an interleaved
    sweep): each run's position in its round, so the read-back pairs the arms by round as the sweep did. Anything
    else (mlxcel's own CSVs have no such line) leaves the positions empty: the runs were not interleaved."""
    groups = provenance.get("round_positions")
    text = groups.get(f"{model}@{dff}", "") if isinstance(groups, dict) else ""
    words = str(text).split()
    return {arm: values.split(",") for arm, values in zip(words[::2], words[1::2], strict=False) if arm in ARMS}


def _run_columns(path: Path, columns: Sequence[str]) -> dict[str, list[str]]:
    runs: dict[str, list[str]] = {arm: [] for arm in ARMS}
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
    path = Path(path)
    frame = read_frame(path)
    if list(frame.columns[:3]) != LEADING_COLUMNS:
        raise InputError(str(path), "columns", f"an mlxcel sweep CSV starts with {','.join(LEADING_COLUMNS)}")
    provenance, notes = _header(path)
    runs = _run_columns(path, list(frame.columns))
    first_line = data_line(path, 0)
    rows: list[dict[str, object]] = []
    skipped: list[str] = []
    run_id = str(provenance.get("run_id") or path.stem)
    for position, record in enumerate(frame.to_dict("records")):
        line = first_line + position
        model = str(record["model"])
        dff = _number(record["dff"], path, "dff", line)
        if dff is None or dff <= 0 or not float(dff).is_integer():
            raise InputError(str(path), "dff", f"line {line}: {record['dff']!r} is not a positive integer")
        quant_mode = "" if pd.isna(record["quant_mode"]) else str(record["quant_mode"])
        point = {"model": model, "dff": int(dff), "quant_mode": quant_mode}
        positions = _positions(provenance, model, int(dff))
        missing = []
        for arm, names in runs.items():
            for index, column in enumerate(names):
                arm_positions = positions.get(arm, [])
                position = arm_positions[index] if len(arm_positions) == len(names) else ""
                tok_s = _number(record[column], path, column, line)
                if tok_s is not None and not (np.isfinite(tok_s) and tok_s > 0):
                    raise InputError(
                        str(path), column, f"line {line}: throughput must be finite and > 0 (NA if it did not run)"
                    )
                if tok_s is None:
                    missing.append(column)
                status = "ok" if tok_s is not None else "skip"
                rows.append(
                    {
                        **point,
                        "arm": arm,
                        "round": index,
                        "tok_s": tok_s,
                        "status": status,
                        "position": position,
                        "error": "" if tok_s is not None else NA_REASON,
                    }
                )
        if missing:
            runs_text = "all runs" if len(missing) == sum(map(len, runs.values())) else ", ".join(missing)
            skipped.append(f"{model} (dff {int(dff)}): {runs_text} NA (did not run), skipped")
    samples = _as_samples(rows, run_id, provenance)
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
    return MlxcelImport(samples, provenance, skipped)


def _number(value: object, path: Path, column: str, line: int) -> float | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(str(path), column, f"line {line}: {value!r} is neither a number nor NA") from None


def _as_samples(rows: list[dict[str, object]], run_id: str, provenance: dict[str, object]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
    constant = {
        "run_id": run_id,
        "backend": str(provenance.get("backend", "unknown")),
        "device": str(provenance.get("device") or provenance.get("gpu") or ""),
        "workload": "command",
    }
    for column, value in constant.items():
        frame[column] = value
    text = ["position", "cap", "tokens", "seconds", "rel_rms", "tokens_agree", "dispatch_ok", "dtype", "timestamp"]
    frame[text] = frame[text].astype(object).fillna("")
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
    if (run_dir / "samples.csv").exists():
        refuse_stored(run_dir, "choose another --out")
        raise InputError(str(run_dir), "--out", "already holds a samples.csv; choose another directory")
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(str(run_dir), "--out", "exists and is not a directory")
    imported = (read or read_mlxcel)(csv_path)
    if extra:
        imported.provenance.update(extra)
        for column in ("backend", "device"):
            if column in extra:
                imported.samples[column] = extra[column]
    imported.provenance.setdefault("run_id", run_dir.name)
    text = format_provenance(imported.provenance) + imported.samples.to_csv(index=False)
    write_text_atomic(run_dir / "samples.csv", text)
    write_meta(run_dir, imported.provenance)
    return imported


def _format(value: float, digits: int) -> str:
    return "NA" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def round_positions(samples: pd.DataFrame, summary: pd.DataFrame) -> dict[str, str]:
    """`{<model>@<dff>: "fallback 0,1,0 fused 1,0,1"}`: each ok run's position in its round, per point, for the
    header of an exported CSV (so reading it back pairs the runs by round); points with a missing run are left out
    (their read-back is unpaired, as their analysis is)."""
    ok = samples[(samples["status"] == "ok") & samples["arm"].isin(ARMS)]
    ok_keys = list(point_keys(ok))
    out = {}
    for _, point in summary.iterrows():
        key = point_key(point.to_dict())
        mine = ok[[k == key for k in ok_keys]].sort_values("round")
        arms = {arm: pd.to_numeric(mine.loc[mine["arm"] == arm, "position"], errors="coerce") for arm in ARMS}
        rounds = {arm: mine.loc[mine["arm"] == arm, "round"].tolist() for arm in ARMS}
        if rounds["fallback"] == rounds["fused"] and len(arms["fused"]) and all(v.notna().all() for v in arms.values()):
            text = {arm: ",".join(str(int(p)) for p in arms[arm]) for arm in ARMS}
            out[f"{point['model']}@{int(point['dff'])}"] = " ".join(f"{arm} {text[arm]}" for arm in ARMS)
    return out


def to_mlxcel_csv(samples: pd.DataFrame, summary: pd.DataFrame, provenance: dict[str, object]) -> str:
    """A summary in mlxcel's sweep CSV format, with the per-run values from `samples` (NA where a run is missing)."""
    ok = samples[(samples["status"] == "ok") & samples["arm"].isin(ARMS)]
    ok_keys = list(point_keys(ok))
    n_runs = int(samples["round"].max()) + 1 if samples["round"].notna().any() else 0
    columns = list(LEADING_COLUMNS)
    for arm in ARMS:
        columns += [f"{arm}_run{i}" for i in range(1, n_runs + 1)] + [f"{arm}_median"]
    columns.append("fused_over_fallback")
    lines = [",".join(columns)]
    for _, point in summary.iterrows():
        key = point_key(point.to_dict())
        mine = ok[[k == key for k in ok_keys]]
        cells = [str(point["model"]), str(int(point["dff"])), str(point["quant_mode"] or "")]
        for arm in ARMS:
            by_round = dict(
                zip(mine.loc[mine["arm"] == arm, "round"], mine.loc[mine["arm"] == arm, "tok_s"], strict=True)
            )
            cells += [_format(by_round.get(r), 2) for r in range(n_runs)] + [_format(point[f"{arm}_tok_s"], 2)]
        cells.append(_format(point["ratio"], 4))
        lines.append(",".join(cells))
    return format_provenance(provenance) + "\n".join(lines) + "\n"
