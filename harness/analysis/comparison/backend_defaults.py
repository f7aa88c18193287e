"""Per-backend defaults from several runs: one table, the mlxcel constants to set, a regression check of the
proposed caps, and a per-shape rule when one cap per backend cannot fit every measured model.

Each run is analysed on its own by the shared pipeline (harness.analysis.decision.pipeline) — runs of different devices
are never pooled. Rows: one per (backend, device); several runs of one device count as separate evidence and the device
takes the most conservative (smallest) of their caps. A backend's decision must hold for every device it was measured
on: it lowers when any device's evidence says lower (to the smallest such cap), raises only when every device's
evidence says raise (to the smallest raised cap), and otherwise keeps the current default.

Evidence standard, used by the regression check and the rule alike: a point's faster path is the per-point verdict
of the decision engine (harness.analysis.points.stats): `fused` / `fallback` only when the interval of fused/fallback
lies wholly beyond 1 ± margin (the same `--margin` the runs are analysed with); `equivalent`, `inconclusive`,
`insufficient` and `null` points have no faster path (a tie is never a loss, and a point estimate alone never decides).

Per-shape rule (recommended only when the single cap costs a measured model more than the margin): "fused when
feature ≤ t" for shape features in order of simplicity (Dff; bytes of one expert; expert bytes streamed per token;
Dff per top_k class). A feature fits when every decided point is on the right side of one threshold (per class).
Leave-one-family-out: fit on all families but one and count the held-out families the threshold sends down their
slower path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pandas as pd

from harness.analysis.decision.decision_facts import expected_null
from harness.analysis.decision.pipeline import Analysis, Options, analyse
from harness.analysis.decision.vocabulary import Action
from harness.analysis.evidence import dispatch_evidence
from harness.analysis.evidence.dispatch_evidence import VerificationRecord
from harness.analysis.evidence.parity import PointParity, parity_by_model
from harness.analysis.points.inputs import load_input
from harness.analysis.points.stats import Verdict
from harness.config.schema import kind_meaning
from harness.errors import InputError
from harness.runs.formats import FUSED, Row
from harness.runs.summary_columns import SummaryCol

DEFAULT_BITS = 4  # imported mlxcel CSVs carry no bits; every published point is 4-bit
UNKNOWN_DEVICE = "unknown device"  # how the tables name the device of a run that records none


@dataclass
class RunResult:
    """One input run: its analysis plus what the mlxcel checks add (parity, eligibility predictions)."""

    path: Path
    backend: str
    device: str  # the recorded name, else UNKNOWN_DEVICE
    analysis: Analysis
    parity: dict[str, PointParity]
    mispredicted: dict[str, str]
    # False: the run names no device, so no device class, class arm or device entry may be keyed by `device`
    device_recorded: bool = True


@dataclass(frozen=True, kw_only=True)
class DeviceRow:
    backend: str
    device: str
    runs: tuple[str, ...]
    current: int | None
    recommended: int | None
    action: Action
    evidence: str


@dataclass(frozen=True, kw_only=True)
class BackendRow:
    backend: str
    devices: tuple[str, ...]
    current: int | None
    recommended: int | None
    action: Action
    evidence: str


@dataclass(frozen=True, kw_only=True)
class PointCheck:
    """One measured point under the proposed cap of its backend."""

    backend: str
    device: str
    model: str
    dff: int
    d_model: float
    top_k: float
    bits: float
    fallback_tok_s: float
    fused_tok_s: float
    ratio: float
    ci_low: float
    ci_high: float
    verdict: Verdict
    faster: str | None  # fused | fallback | None (undecided, or null point)
    parity: str
    note: str
    selected: str = ""  # the path the proposed cap selects

    @property
    def loss(self) -> float:
        """Fraction of the other path's tok/s the selected path gives up (point estimate; 0 when it is faster)."""
        if self.selected == "fused" and self.ratio < 1:
            return 1 - self.ratio
        if self.selected == "fallback" and self.ratio > 1:
            return 1 - 1 / self.ratio
        return 0.0

    @property
    def regression(self) -> bool:
        return self.faster is not None and self.selected != "" and self.selected != self.faster


@dataclass(frozen=True, kw_only=True)
class Rule:
    feature: str
    thresholds: dict[str, float]  # class label ('' for one class) → largest feature value that runs fused
    intervals: dict[str, tuple[float, float]]  # class → (largest fused-winning value, smallest fallback-winning)
    fits: bool
    lofo_misses: tuple[str, ...]  # held-out families the rule fitted without them sends down the slower path
    lofo_families: int
    violations: tuple[str, ...] = field(default=())

    @property
    def single_cap(self) -> bool:
        """The rule is the one global Dff cap (no shape feature, no classes)."""
        return self.feature == "Dff" and list(self.thresholds) in ([""], [])

    def describe(self) -> str:
        parts = []
        for name, threshold in self.thresholds.items():
            low, high = self.intervals[name]
            where = f"any threshold in [{_num(low)}, {_num(high)})" if low < high else "no threshold separates them"
            parts.append(f"{self.feature} ≤ {_num(threshold)}" + (f" for {name}" if name else "") + f" ({where})")
        return "fused when " + "; ".join(parts) if parts else "no decided point"


@dataclass
class Defaults:
    runs: list[RunResult]
    devices: list[DeviceRow]
    backends: list[BackendRow]
    points: list[PointCheck]
    rules: dict[str, Rule | None]  # backend → simplest fitting rule (None: no rule fits)
    margin: float

    @property
    def regressions(self) -> list[PointCheck]:
        return [p for p in self.points if p.regression]

    def recommend_rule(self, backend: str) -> bool:
        """A rule replaces the single cap only when the cap costs a measured model more than the margin."""
        rule = self.rules.get(backend)
        return rule is not None and not rule.single_cap and any(p.backend == backend for p in self.regressions)


def _num(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.4g}"


def _run_identity(analysis: Analysis) -> tuple[str, str]:
    """The run's backend and device as recorded ('' for a device the run does not name)."""
    summary = analysis.summary
    backend = str(summary["backend"].iloc[0]) if len(summary) else str(analysis.provenance.get("backend", ""))
    device = str(summary["device"].iloc[0]) if len(summary) and "device" in summary else ""
    device = device if device and device != "nan" else str(analysis.provenance.get("device") or "")
    return backend, device


def mispredictions(
    samples: pd.DataFrame | None,
    expected: Mapping[str, str],
    verification: VerificationRecord | None = None,
) -> dict[str, str]:
    """Where the dispatch probe or the verification pass (the ground truth, its record) contradicts the
    eligibility prediction, per model."""
    observed = dispatch_evidence.contradictions(verification, expected)
    if samples is None or "dispatch_ok" not in samples:
        return observed
    fused = samples[(samples["arm"] == FUSED) & (samples["status"] == "ok")]
    out = {}
    for model, rows in fused.groupby("model"):
        probe = pd.to_numeric(rows["dispatch_ok"], errors="coerce").dropna()
        if probe.empty:
            continue
        if str(model) in expected and (probe == 1).any():
            out[str(model)] = f"predicted null ({expected[str(model)]}), but the fused arm dispatched"
        elif str(model) not in expected and not (probe == 1).any():
            out[str(model)] = "predicted eligible, but the fused arm never matched the dispatch probe"
    return {**out, **observed}


def load_run(path: Path, options: Options) -> RunResult:
    """Analyse one run; models its config expected null stay null points (excluded with the prediction's reason)."""
    loaded = load_input(path)
    expected = expected_null(loaded.provenance)
    analysis = analyse(loaded, options)  # the expected-null models stay null there
    backend, device = _run_identity(analysis)
    samples = analysis.samples
    parity = parity_by_model(samples) if samples is not None else {}
    wrong = mispredictions(samples, expected, loaded.verification)
    return RunResult(Path(path), backend, device or UNKNOWN_DEVICE, analysis, parity, wrong, bool(device))


def faster_path(row: Row) -> str | None:
    """The evidence standard of the module docstring: the engine's verdict, when it names a path."""
    verdict = row[SummaryCol.VERDICT]
    return verdict if verdict in ("fused", "fallback") else None


def _device_evidence(run: RunResult) -> str:
    """One device run's decision as the backend row quotes it: `GB10 (run-a): keep 8192 (crossover 9500 …)`."""
    d = run.analysis.result.decision
    current = run.analysis.current_default
    move = f"{current} → {d.recommended_cap}" if d.action in ("raise", "lower") else str(d.recommended_cap or "-")
    unknown = f"; {run.analysis.cap.missing}" if current is None else ""
    return f"{run.device} ({run.path.name}): {d.action} {move}{unknown}"


def device_rows(runs: Sequence[RunResult]) -> list[DeviceRow]:
    """One row per (backend, device). Its cap in force is the one its runs' analyses resolved (decision_facts:
    never a backend default filled in here); several runs of one device take the smallest decided cap."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for run in runs:
        groups.setdefault((run.backend, run.device), []).append(run)
    rows = []
    for (backend, device), members in groups.items():
        decisions = [m.analysis.result.decision for m in members]
        current = next((m.analysis.current_default for m in members if m.analysis.current_default), None)
        binding = min(decisions, key=lambda d: math.inf if d.recommended_cap is None else d.recommended_cap)
        evidence = " | ".join(
            f"{m.path.name}: {d.action} — {d.reason}" for m, d in zip(members, decisions, strict=True)
        )
        recommended = binding.recommended_cap if binding.recommended_cap is not None else current
        action = binding.action if binding.action != "set" or current is None else _action(recommended, current)
        rows.append(
            DeviceRow(
                backend=backend,
                device=device,
                runs=tuple(m.path.name for m in members),
                current=current,
                recommended=recommended,
                action=action,
                evidence=evidence,
            )
        )
    return rows


def _action(recommended: int | None, current: int | None) -> Action:
    if recommended is None or current is None:
        return "keep" if recommended is None else "set"
    return "keep" if recommended == current else ("raise" if recommended > current else "lower")


def backend_rows(devices: Sequence[DeviceRow], runs: Sequence[RunResult] = ()) -> list[BackendRow]:
    """The backend's action combines its devices' decisions: a lower when any device with a known cap in force
    lowers, a raise when every device raises, else keep. A device whose cap in force is unknown (`set`) moves
    nothing — a `set N` is no evidence that N is below or above a cap nobody stated — and is named as such.
    The reason quotes each device's own decision."""
    out = []
    for backend in dict.fromkeys(d.backend for d in devices):
        rows = [d for d in devices if d.backend == backend]
        current = next((d.current for d in rows if d.current is not None), None)
        lowers = [d.recommended for d in rows if d.action == "lower" and d.recommended is not None]
        raises = [d.recommended for d in rows if d.action == "raise" and d.recommended is not None]
        unknown = [d for d in rows if d.action == "set"]
        recommended: int | None
        if lowers:
            recommended = min(lowers)
            why = f"{len(lowers)} of {len(rows)} device(s) show fallback winning at or below the current default"
        elif raises and len(raises) == len(rows):
            recommended = min(raises)
            why = f"every device ({len(rows)}) shows fused winning above the current default; the smallest cap holds"
        elif unknown and current is None:
            recommended = min((d.recommended for d in unknown if d.recommended is not None), default=None)
            why = "the cap in force is unknown on every device: a cap is set, no move is claimed"
        else:
            recommended = current
            why = "no device has evidence to move the default" if not raises else "not every device supports a raise"
        if unknown and current is not None:
            why += f"; {len(unknown)} device(s) with no known cap in force count for no move"
        quoted = [_device_evidence(r) for r in runs if r.backend == backend]
        evidence = f"{why} ({'; '.join(quoted)})" if quoted else why
        action = _action(recommended, current)
        names = tuple(d.device for d in rows)
        out.append(
            BackendRow(
                backend=backend,
                devices=names,
                current=current,
                recommended=recommended,
                action=action,
                evidence=evidence,
            )
        )
    return out


def _point_checks(runs: Sequence[RunResult], backends: Sequence[BackendRow]) -> list[PointCheck]:
    caps = {b.backend: b.recommended for b in backends}
    out = []
    for run in runs:
        for row in run.analysis.summary.to_dict("records"):
            model = str(row["model"])
            parity = run.parity.get(model) if kind_meaning(row["workload"]).whole_model else None
            check = PointCheck(
                backend=run.backend,
                device=run.device,
                model=model,
                dff=int(row["dff"]),
                d_model=_float(row.get("d_model")),
                top_k=_float(row.get("top_k")),
                bits=_float(row.get("bits")),
                fallback_tok_s=_float(row[SummaryCol.FALLBACK_TOK_S]),
                fused_tok_s=_float(row[SummaryCol.FUSED_TOK_S]),
                ratio=_float(
                    row[SummaryCol.ESTIMATE]
                ),  # the estimate its interval belongs to (not the ratio of medians)
                ci_low=_float(row[SummaryCol.CI_LOW]),
                ci_high=_float(row[SummaryCol.CI_HIGH]),
                verdict=cast(Verdict, str(row[SummaryCol.VERDICT])),  # the summary's verdicts are Verdicts
                faster=faster_path(row),
                parity=_parity(parity, row),
                note="; ".join(x for x in (run.mispredicted.get(model, ""), _null_reason(row)) if x),
            )
            cap = caps.get(run.backend)
            if cap is not None and check.verdict != "null":
                check = replace(check, selected="fused" if check.dff <= cap else "fallback")
            out.append(check)
    return out


def _parity(tokens: PointParity | None, row: Row) -> str:
    """The point's parity as its single-run addendum states it: the token comparison where one was made, else the
    verification pass's NRMS check (`ok (≤ 0.05)`), else no parity data."""
    if tokens is not None and tokens.comparisons:
        return tokens.label
    nrms = dispatch_evidence.parity_words(row.get("parity_calls"), row.get("parity_calls_over"))
    return nrms or (tokens.label if tokens is not None else "no parity data")


def _null_reason(row: Row) -> str:
    return str(row[SummaryCol.REASON]) if row[SummaryCol.VERDICT] == "null" else ""


def _float(value: Any) -> float:  # anything a summary cell holds
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def losing_under(runs: Sequence[RunResult], backend: str, cap: int | None) -> list[PointCheck]:
    """The points of `runs` on `backend` that `cap` would send down the path the other beats beyond the margin."""
    row = BackendRow(backend=backend, devices=(), current=cap, recommended=cap, action="keep", evidence="")
    return [p for p in _point_checks(runs, [row]) if p.regression and p.backend == backend]


def _withhold_regressions(backends: list[BackendRow], runs: Sequence[RunResult], margin: float) -> list[BackendRow]:
    """A move the document's own regression check refutes is not proposed: where a measured point would take a
    path the other beats beyond the margin under the moved cap (and not under the current one), the backend keeps
    its cap and says which points refute the move (no patch, no constant to set follows from it)."""
    out = []
    for row in backends:
        if row.action not in ("raise", "lower") or row.current is None:
            out.append(row)
            continue
        already = {(p.device, p.model, p.dff) for p in losing_under(runs, row.backend, row.current)}
        moved = losing_under(runs, row.backend, row.recommended)
        losing = [p for p in moved if (p.device, p.model, p.dff) not in already]
        if not losing:
            out.append(row)
            continue
        names = ", ".join(f"{p.model} (Dff {p.dff}, {p.device}) {p.loss:.1%}" for p in losing)
        why = (
            f"{row.action} {row.current} → {row.recommended} withheld: under it {names} would take the "
            f"{losing[0].selected} path, slower beyond the {margin:.0%} margin; {row.evidence}"
        )
        out.append(replace(row, recommended=row.current, action="keep", evidence=why))
    return out


# --- per-shape rule ---------------------------------------------------------------------------------------------


def _expert_bytes(p: PointCheck) -> float:
    bits = p.bits if not math.isnan(p.bits) else DEFAULT_BITS
    return 3 * p.d_model * p.dff * bits / 8


FEATURES: list[tuple[str, Callable[[PointCheck], float], Callable[[PointCheck], str]]] = [
    ("Dff", lambda p: float(p.dff), lambda p: ""),
    ("expert bytes (3·d_model·Dff·bits/8)", _expert_bytes, lambda p: ""),
    ("expert bytes per token (top_k·expert bytes)", lambda p: p.top_k * _expert_bytes(p), lambda p: ""),
    ("Dff", lambda p: float(p.dff), lambda p: f"top_k={p.top_k:.0f}"),
]


@dataclass(frozen=True, kw_only=True)
class _Fit:
    thresholds: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    violations: list[str]


def _fit(
    points: Sequence[PointCheck], value: Callable[[PointCheck], float], label: Callable[[PointCheck], str]
) -> _Fit:
    """Per class, the threshold between the largest fused-winning and the smallest fallback-winning value (their
    geometric mean; the largest fused value when no fallback point bounds it); plus the points it misplaces."""
    classes: dict[str, list[PointCheck]] = {}
    for p in points:
        classes.setdefault(label(p), []).append(p)
    thresholds, intervals, violations = {}, {}, []
    for name, members in sorted(classes.items()):
        fused = [value(p) for p in members if p.faster == "fused"]
        slower = [value(p) for p in members if p.faster == "fallback"]
        low, high = max(fused, default=0.0), min(slower, default=math.inf)
        thresholds[name] = math.sqrt(low * high) if fused and slower and low < high else low
        intervals[name] = (low, high)
        violations += [f"{p.model} ({p.device})" for p in members if _misplaced(p, value(p), thresholds[name])]
    return _Fit(thresholds=thresholds, intervals=intervals, violations=violations)


def _misplaced(p: PointCheck, value: float, threshold: float) -> bool:
    return (p.faster == "fused" and value > threshold) or (p.faster == "fallback" and value <= threshold)


def fit_rules(points: Sequence[PointCheck]) -> list[Rule]:
    """Every candidate rule for one backend's decided points, simplest first."""
    decided = [p for p in points if p.faster is not None and not (math.isnan(p.d_model) or math.isnan(p.top_k))]
    decided = decided or [p for p in points if p.faster is not None]
    families = sorted({p.model for p in decided})
    rules = []
    for name, value, label in FEATURES:
        if any(math.isnan(value(p)) for p in decided):
            continue
        fit = _fit(decided, value, label)
        misses = []
        for family in families:
            held_out = [p for p in decided if p.model == family]
            others = _fit([p for p in decided if p.model != family], value, label).thresholds
            if any(_misplaced(p, value(p), others.get(label(p), 0.0)) for p in held_out):
                misses.append(family)
        bad = tuple(fit.violations)
        rules.append(
            Rule(
                feature=name,
                thresholds=fit.thresholds,
                intervals=fit.intervals,
                fits=not bad,
                lofo_misses=tuple(misses),
                lofo_families=len(families),
                violations=bad,
            )
        )
    return rules


def simplest_rule(points: Sequence[PointCheck]) -> Rule | None:
    return next((r for r in fit_rules(points) if r.fits), None)


# --- assembling ---------------------------------------------------------------------------------------------------


def build_defaults(paths: Sequence[Path], options: Options = Options()) -> Defaults:
    runs = [load_run(Path(p), options) for p in paths]
    if options.current_default is not None and len({r.backend for r in runs}) > 1:
        raise InputError(
            "--current-default", str(options.current_default), "one cap for several backends; leave it to each run"
        )
    devices = device_rows(runs)
    backends = _withhold_regressions(backend_rows(devices, runs), runs, options.policy.margin)
    points = _point_checks(runs, backends)
    rules = {b.backend: simplest_rule([p for p in points if p.backend == b.backend]) for b in backends}
    return Defaults(runs, devices, backends, points, rules, options.policy.margin)


def run_checks(path: Path) -> list[str]:
    """Parity class and eligibility mispredictions of one run, per model (what a single-run report adds)."""
    loaded = load_input(path)
    if loaded.samples is None:
        return []
    wrong = mispredictions(loaded.samples, expected_null(loaded.provenance), loaded.verification)
    lines = []
    for model, parity in parity_by_model(loaded.samples).items():
        if parity.comparisons or model in wrong:
            lines.append(f"{model}: parity {parity.label}" + (f"; {wrong[model]}" if model in wrong else ""))
    return lines
