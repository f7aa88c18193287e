"""Which MoE path ran, observed without a trace line: what the untimed verification pass says per point.

mlxcel's `mlxcel-bench-decode` prints nothing that names the MoE path, but its fused kernel carries a parity probe
(MLXCEL_FUSED_MOE_PARITY_CHECK=1) that logs `[fused-moe-parity]` lines from inside the kernel, so a line exists
only when the fused kernel ran. Before the timed rounds, each model gets one fused-arm and one fallback-arm run
with the probe on (harness/measure/dispatch.py), recorded in `<run>/verification.json`. Per model, `dispatch` is then:

- `verified`: probe lines in the fused run, at the model's Dff, and none in the fallback run;
- `declined`: no line in either run although the binary has the probe: the kernel declined this checkpoint, both
  arms ran the fallback, and the point is null whatever its timing says;
- `predicted`: no line for ANY model that `moecal init` predicted eligible: this binary has no probe (built before
  2026-07-24), so the dispatch was not observed and the eligibility prediction stands; nothing becomes null for
  lack of a line;
- `unverified`: no verification pass (a config without `dispatch_check`, e.g. one with a `dispatch_probe.regex`,
  whose old semantics then apply), a verification run that failed, lines at another Dff than the config's, or lines
  in the fallback run too (then the point is null: the fallback cap did not force the fallback).

The same fused run gives the numerical parity per model: worst and median normalized RMS of the fused output
against mlxcel's gather_qmm reference (fused-vs-ref) and against an all-f32 truth (fused-vs-truth), and the calls
over the probe's default threshold (0.05, mlxcel's own line between rounding and a wrong result).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Required, TypedDict

import pandas as pd

from harness.config.schema import kind_meaning
from harness.errors import InputError
from harness.json_input import load_json_object
from harness.runs.formats import FALLBACK, FUSED, cell_numbers

RECORD = "verification.json"
DispatchClass = Literal["verified", "declined", "predicted", "unverified"]  # a point's `dispatch` (module docstring)
PARITY_LIMIT = 0.05  # mlxcel's default MLXCEL_FUSED_MOE_PARITY_THRESHOLD


class ParityFigures(TypedDict, total=False):
    """What the probe's lines in one verification run say (harness.measure.dispatch; none but calls and dffs when
    the run logged no call)."""

    calls: Required[int]  # fused-kernel calls the probe logged
    dffs: Required[list[int]]  # the Dffs those calls ran at
    over: int  # calls over PARITY_LIMIT
    fused_vs_ref_worst: float | str  # str: a non-finite figure as its text (recorded_figure)
    fused_vs_ref_median: float | str
    fused_vs_truth_worst: float | str
    fused_vs_truth_median: float | str


class VerificationRun(ParityFigures, total=False):
    """One verification run as verification.json holds it (harness.measure.dispatch.verification_run writes it):
    RUN_FIELDS are checked on reading; a failed run has an error and no timing, an older binary no summary line."""

    path: Required[str]  # the arm: fused or fallback
    status: Required[str]  # ok | fail
    env: dict[str, str]  # the probe's variables it ran with
    error: str  # why a failed run failed
    seconds: float
    tok_s: float | None
    tokens: float | None  # the generated count (a float where the benchmark's output gave one)
    summary_calls: int
    decode_path: str
    memory: list[str]


class VerificationEntry(TypedDict):
    """One model's verification record: its Dff and its fused and fallback run (checked by _check_entry)."""

    dff: int
    runs: list[VerificationRun]


VerificationRecord = Mapping[str, VerificationEntry]  # model → its entry: the `models` object of verification.json


class DispatchFacts(TypedDict):
    """What the verification pass says of one model's point (per_model): its dispatch, and its parity figures."""

    dispatch: DispatchClass
    dispatch_note: str
    null: bool  # the verification makes the point null
    parity_class: str
    parity_calls: int
    parity_calls_over: int
    fused_vs_ref_worst: object  # a float (NaN for a non-finite one), None when the run logged no call
    fused_vs_ref_median: object
    fused_vs_truth_worst: object
    fused_vs_truth_median: object


def parity_words(calls: object, over: object) -> str:
    """The verification pass's parity in a word (every document says it alike): `ok (≤ 0.05)` when no fused call's
    NRMS exceeded mlxcel's threshold, `CHECK (k of n calls)` when some did, '' when no call was checked."""
    try:
        calls, over = int(float(str(calls))), int(float(str(over or 0)))
    except ValueError:
        return ""
    if calls <= 0:
        return ""
    return f"CHECK ({over} of {calls} calls)" if over else f"ok (≤ {PARITY_LIMIT:g})"


POINT_FIELDS = (
    "dispatch",
    "dispatch_note",
    "parity_class",
    "parity_calls",
    "parity_calls_over",
    "fused_vs_ref_worst",
    "fused_vs_ref_median",
    "fused_vs_truth_worst",
    "fused_vs_truth_median",
    "tokens_fallback",
    "tokens_fused",
    "tokens_differ",
)


def read_record(run_dir: Path) -> dict[str, VerificationEntry]:
    """The verification record of a run directory: model → its two runs ({} when the run has none)."""
    path = Path(run_dir) / RECORD
    if not path.exists():
        return {}
    try:
        record = load_json_object(path)
    except InputError as exc:
        raise InputError(str(path), "", f"not a moecal verification record: {exc.field}: {exc.problem}") from None
    models = record.get("models")
    if not isinstance(models, dict):
        raise InputError(str(path), "models", "expected an object of model → verification runs")
    checked: dict[str, VerificationEntry] = {}
    for model, entry in models.items():
        checked[model] = _check_entry(path, f"models.{model}", entry)
    return checked


# What classify_dispatch() and per_model() read of one verification run (harness.measure.dispatch writes more).
RUN_FIELDS = {"path": str, "status": str, "calls": int, "dffs": list}


def _check_entry(path: Path, where: str, entry: object) -> VerificationEntry:
    """One model's record holds its Dff and one fused and one fallback run with RUN_FIELDS; a record edited or
    written by something else is refused in one line instead of failing later on a missing key."""
    if not isinstance(entry, dict) or type(entry.get("dff")) is not int or not isinstance(entry.get("runs"), list):
        raise InputError(str(path), where, "expected {dff: N, runs: [fused run, fallback run]}")
    for index, run in enumerate(entry["runs"]):
        for key, kind in RUN_FIELDS.items():
            if not isinstance(run, dict) or type(run.get(key)) is not kind:
                raise InputError(str(path), f"{where}.runs[{index}].{key}", f"missing or not {kind.__name__}")
    if sorted(run["path"] for run in entry["runs"]) != [FALLBACK, FUSED]:
        raise InputError(str(path), f"{where}.runs", "expected one fused and one fallback run")
    return entry  # type: ignore[return-value]  # its shape checked above, which mypy cannot follow into a dict


def probe_present(record: VerificationRecord, expected_null: Mapping[str, str]) -> bool:
    """Whether this binary has the probe: some model's verification run logged a line. Judged over the models
    predicted eligible; a build without the probe logs nothing for any of them."""
    eligible = [m for m in record if m not in expected_null] or list(record)
    return any(run.get("calls", 0) or run.get("summary_calls", 0) for m in eligible for run in record[m]["runs"])


def classify_dispatch(entry: VerificationEntry, has_probe: bool) -> tuple[DispatchClass, str, bool]:
    """(dispatch, note, null) for one model's verification entry."""
    runs = {run["path"]: run for run in entry["runs"]}
    fused, fallback = runs[FUSED], runs[FALLBACK]
    failed = [run for run in (fused, fallback) if run["status"] != "ok"]
    if failed:
        return "unverified", f"the {failed[0]['path']} verification run failed: {failed[0]['error']}", False
    seen_fused = fused["calls"] or fused.get("summary_calls", 0)
    if fallback["calls"] or fallback.get("summary_calls", 0):
        note = "the fallback verification run logged fused-kernel calls: the fallback cap did not force the fallback"
        return "unverified", note, True
    if seen_fused:
        if entry["dff"] not in fused["dffs"]:
            dffs = ", ".join(map(str, fused["dffs"])) or "none logged"
            return "unverified", f"the fused kernel ran at Dff {dffs}, not the config's {entry['dff']}", False
        return "verified", f"{fused['calls']} fused-kernel calls logged in the fused run, none in the fallback", False
    if has_probe:
        return "declined", "no [fused-moe-parity] line in either verification run: the kernel declined it", True
    return "predicted", "not observed: this binary prints no [fused-moe-parity] line for any model", False


NON_FINITE = ("nan", "inf", "-inf")  # how verification.json spells a non-finite parity figure (JSON has no such number)
FIGURES = ("fused_vs_ref_worst", "fused_vs_ref_median", "fused_vs_truth_worst", "fused_vs_truth_median")


def recorded_figure(value: float) -> float | str:
    """A parity figure as verification.json holds it: a non-finite one as its text ("nan", "inf"). A kernel that
    produces NaN is exactly when the probe matters, and a NaN number would make the file unreadable to moecal's own
    strict JSON reader, so the run could not be analysed at all."""
    return value if math.isfinite(value) else str(value)


def read_figure(value: object) -> object:
    """recorded_figure's inverse: "nan" / "inf" / "-inf" back to the float; anything else unchanged."""
    return float(value) if isinstance(value, str) and value in NON_FINITE else value


def within_limit(*errors: object) -> bool:
    """Every parity error is a number in [0, PARITY_LIMIT]. NaN compares false with everything, so `error >
    PARITY_LIMIT` would call a NaN (or a negative, which no RMS can be) within the limit: both are over."""
    return all(isinstance(e, int | float) and 0 <= e <= PARITY_LIMIT for e in errors)


def parity_class(run: Mapping[str, object]) -> str:
    """The numerical parity of one model in one phrase (the addendum's parity column)."""
    if not run.get("calls"):
        return "no parity data"
    worst = f"worst fused-vs-truth {run['fused_vs_truth_worst']:.2e}"
    if any(isinstance(figure := run.get(k), float) and not math.isfinite(figure) for k in FIGURES):
        return f"non-finite parity error in {run['calls']} calls ({worst}) — CHECK: non-finite"
    if run["over"] or not within_limit(run["fused_vs_ref_worst"], run["fused_vs_truth_worst"]):
        return f"{run['over']} of {run['calls']} calls over {PARITY_LIMIT:g} ({worst}) — CHECK"
    return f"within {PARITY_LIMIT:g} in {run['calls']} calls ({worst})"


def per_model(record: VerificationRecord, expected_null: Mapping[str, str]) -> dict[str, DispatchFacts]:
    """Model → the point fields the verification gives (dispatch, note, null, parity figures)."""
    record = {m: e for m, e in record.items() if isinstance(e, Mapping) and isinstance(e.get("runs"), list)}
    has_probe = probe_present(record, expected_null)
    out: dict[str, DispatchFacts] = {}
    for model, entry in record.items():
        dispatch, note, null = classify_dispatch(entry, has_probe)
        run = next(run for run in entry["runs"] if run["path"] == FUSED)
        fused = {**run, **{k: read_figure(v) for k, v in run.items() if k in FIGURES}}
        out[model] = {
            "dispatch": dispatch,
            "dispatch_note": note,
            "null": null,
            "parity_class": parity_class(fused),
            "parity_calls": run.get("calls", 0),
            "parity_calls_over": run.get("over", 0),
            "fused_vs_ref_worst": fused.get("fused_vs_ref_worst"),
            "fused_vs_ref_median": fused.get("fused_vs_ref_median"),
            "fused_vs_truth_worst": fused.get("fused_vs_truth_worst"),
            "fused_vs_truth_median": fused.get("fused_vs_truth_median"),
        }
    return out


def null_reasons(record: VerificationRecord | None, expected_null: Mapping[str, str]) -> dict[str, str]:
    """Models the verification pass (`record`, None without one) makes null points (declined, or the fallback arm
    ran the fused kernel)."""
    if not record:
        return {}
    facts = per_model(record, expected_null)
    return {m: f"dispatch {f['dispatch']}: {f['dispatch_note']}" for m, f in facts.items() if f["null"]}


def contradictions(record: VerificationRecord | None, expected_null: Mapping[str, str]) -> dict[str, str]:
    """Models whose observed dispatch in the verification `record` (None without one) contradicts `moecal init`'s
    eligibility prediction (the addendum lists them: a wrong prediction means harness.config.eligibility no longer
    restates mlxcel's rules)."""
    if not record:
        return {}
    out = {}
    for model, fact in per_model(record, expected_null).items():
        if fact["dispatch"] == "verified" and model in expected_null:
            out[model] = f"predicted null ({expected_null[model]}), but the verification run logged fused-kernel calls"
        elif fact["dispatch"] == "declined" and model not in expected_null:
            out[model] = "predicted eligible, but the kernel declined it (no [fused-moe-parity] line)"
    return out


def _median_tokens(samples: pd.DataFrame) -> dict[tuple[str, str], float]:
    """{(model, arm): median generated tokens of its ok runs}, in one grouping pass (a per-model filter of the
    frame would make the annotation quadratic in the number of points)."""
    if "tokens" not in samples:
        return {}
    # the three columns read, not the whole frame: an import of a million-row CSV has ten million rows and no token
    # counts at all, which is known before any grouping
    ok = samples.loc[samples["status"] == "ok", ["model", "arm", "tokens"]]
    tokens = pd.Series(cell_numbers(ok["tokens"]), index=ok.index)
    if tokens.isna().all():
        return {}
    medians = tokens.groupby([ok["model"].astype(str), ok["arm"]]).median().dropna()
    return {(str(model), str(arm)): float(value) for (model, arm), value in zip(medians.index, medians, strict=True)}


def annotate(
    summary: pd.DataFrame,
    samples: pd.DataFrame | None,
    record: VerificationRecord | None,
    expected_null: Mapping[str, str],
) -> pd.DataFrame:
    """The summary of a command-workload run with POINT_FIELDS per point: dispatch and parity from the
    verification pass, the median generated tokens per arm from the timed runs, and `tokens_differ` when the arms
    generated different counts (greedy decoding stopped at EOS at different places: the arms did different work)."""
    # a stored summary.csv keeps what it was written with; built-in workloads have no dispatch to verify (only an
    # external program's, the command kind's, is probed)
    if samples is None or not any(kind_meaning(w).external for w in samples["workload"].unique()):
        return summary
    out = summary.copy()
    facts = per_model(record, expected_null) if record else {}
    tokens = _median_tokens(samples)
    models = [str(m) for m in out["model"]]
    unverified = {"dispatch": "unverified", "dispatch_note": "no verification pass in this run"}
    known = [facts.get(model, unverified) for model in models] if facts else None
    for column in POINT_FIELDS[: POINT_FIELDS.index("tokens_fallback")]:  # without a record: one value for all
        if known:
            cells: list[Any] = [fact.get(column) for fact in known]  # of any type: pandas infers the column's
            out[column] = cells
        else:
            out[column] = unverified.get(column)
    fallback = [tokens.get((model, FALLBACK)) for model in models]
    fused = [tokens.get((model, FUSED)) for model in models]
    out["tokens_fallback"], out["tokens_fused"] = fallback, fused
    out["tokens_differ"] = [a is not None and b is not None and a != b for a, b in zip(fallback, fused, strict=True)]
    return out
