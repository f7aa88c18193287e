"""The analysis pipeline every command shares: loaded input → summary → per-family crossover → decision.

One place decides which settings apply (command-line option over the run's provenance over the default), so
`crossover`, `report`, `check` and `check-reports` cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import pandas as pd

from harness.analysis import dispatch_evidence
from harness.analysis.cap_target import CapTarget
from harness.analysis.decision import decide
from harness.analysis.decision_json import decision_json
from harness.analysis.decision_record import Decision, DecisionResult
from harness.analysis.inputs import LoadedInput, load_input, write_summary_csv
from harness.analysis.point_summary import PointSet, analyse_points, apply_excludes
from harness.analysis.policy import Interpolation, Policy
from harness.analysis.stats import CONFIDENCE, MARGIN
from harness.config import mlxcel_families
from harness.errors import InputError
from harness.runs.summary_columns import SummaryCol
from harness.thresholds import DEFAULT_GRID

NUMERIC_SUMMARY = (
    SummaryCol.ESTIMATE,
    SummaryCol.LN_ESTIMATE,
    SummaryCol.SE,
    SummaryCol.DF,
    SummaryCol.NULL_RATIO,
    SummaryCol.NULL_CI_LOW,
    SummaryCol.NULL_CI_HIGH,
    SummaryCol.P_VALUE,
)


@dataclass(frozen=True)
class Options:
    excludes: Mapping[str, str] = field(default_factory=dict)
    confidence: float = CONFIDENCE
    margin: float = MARGIN
    current_default: int | None = None  # None: take the run's provenance `current_default`, if any
    grid: int = DEFAULT_GRID
    interpolation: Interpolation = "linear"

    @cached_property
    def policy(self) -> Policy:
        """The decision policy of these options, built (and checked: InputError) once."""
        return Policy(self.confidence, self.margin, self.grid, self.interpolation)

    def settings(self) -> dict[str, object]:
        """The options as recorded next to a result, so it can be re-derived."""
        return {
            "excludes": dict(self.excludes),
            "confidence": self.confidence,
            "margin": self.margin,
            "grid": self.grid,
            "interpolation": self.interpolation,
        }


@dataclass
class Analysis:
    samples: pd.DataFrame | None
    summary: pd.DataFrame
    result: DecisionResult
    provenance: dict[str, object]
    options: Options
    current_default: int | None
    target: CapTarget  # what the cap is applied to (the variable that sets it)
    noise_scale: float | None  # φ from the A/A arm (None: a summary-only input, the runs are not at hand)
    aa_points: int
    aa_beyond_margin: tuple[str, ...]
    verification: dict[str, dict] | None = None  # the run's dispatch verification record (LoadedInput.verification)
    sweep_drift: float | None = None  # p of the two passes' agreement (analysis.sweep_drift); None: one pass

    @property
    def cap_env(self) -> str:
        """The variable that sets the cap ('' when none does): recorded with the exports (the mlxcel CSV)."""
        return self.target.env

    def as_json(self) -> dict[str, object]:
        return decision_json(
            self.summary,
            self.result,
            current_default=self.current_default,
            cap_env=self.cap_env,
            noise_scale=None if self.noise_scale is None else round(self.noise_scale, 4),
            aa_points=self.aa_points,
            aa_beyond_margin=list(self.aa_beyond_margin),
            **self.options.settings(),
        )


def parse_excludes(values: Sequence[str]) -> dict[str, str]:
    """`--exclude NAME` or `--exclude NAME=why` → {model: reason shown in the table and the report}."""
    out = {}
    for value in values:
        name, sep, why = value.partition("=")
        name = name.strip()
        if not name:
            raise InputError("--exclude", value, "expected NAME or NAME=reason")
        out[name] = f"excluded by the user: {why.strip()}" if sep and why.strip() else "excluded by the user"
    return out


def withheld_reason(aa_beyond_margin: tuple[str, ...], margin: float) -> str:
    """Why raise/lower are withheld ('' when they are not): the A/A comparison lies beyond the margin."""
    if not aa_beyond_margin:
        return ""
    return (
        f"the A/A comparison (fallback measured twice) lies beyond 1 ± {margin:.1%} at {', '.join(aa_beyond_margin)}: "
        "drift larger than the noise model; re-run on a quieter machine."
    )


def _current_default(options: Options, provenance: Mapping[str, object]) -> int | None:
    if options.current_default is not None:
        return options.current_default
    value = provenance.get("current_default")
    if value in (None, ""):
        return None
    try:
        return int(float(str(value)))
    except ValueError:
        raise InputError("provenance", "current_default", f"{value!r} is not an integer") from None


def _check_summary_settings(provenance: Mapping[str, object], options: Options) -> None:
    """A summary.csv carries intervals and verdicts at the level and margin it was written with; they cannot be
    re-derived without the samples."""
    settings = provenance.get("summary")
    for name, value in (("confidence", options.confidence), ("margin", options.margin)):
        stored = settings.get(name) if isinstance(settings, dict) else None
        if stored is not None and abs(float(stored) - value) > 1e-9:
            raise InputError(
                f"--{name}", str(value), f"this summary.csv was written with {name} {stored}; use the run's samples"
            )


def expected_null(provenance: Mapping[str, object]) -> dict[str, str]:
    """The run's `expect_null` provenance (written by `moecal sweep` from the config): model → predicted reason."""
    value = provenance.get("expect_null")
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _null_excludes(loaded: LoadedInput, options: Options) -> dict[str, str]:
    """The user's --exclude over the models the dispatch verification found declined and over those the run's
    config expected null: those stay null points in every analysis (measured with --measure-null or not), with
    the observation or the prediction as their reason."""
    frame = loaded.samples if loaded.samples is not None else loaded.summary
    present = set(map(str, frame["model"].unique())) if frame is not None else set()
    predicted = expected_null(loaded.provenance)
    overridden = loaded.provenance.get("dispatch_overrides") or {}  # the fused kernel ran after all: measured
    observed = {
        m: why for m, why in dispatch_evidence.null_reasons(loaded.verification, predicted).items() if m in present
    }
    # a prediction the probe confirmed says so ("expected null" is for a prediction nobody observed)
    expected = {
        m: f"{observed[m]} (predicted: {why})" if m in observed else f"expected null: {why}"
        for m, why in predicted.items()
        if m in present and m not in overridden
    }
    ignored = {m: str(why) for m, why in dict(loaded.provenance.get("cap_ignored") or {}).items() if m in present}
    # a non-affine point is already null for its quantization (the more specific reason); names settle the rest
    affine = (
        present
        if frame is None or "quant_mode" not in frame
        else set(map(str, frame.loc[frame["quant_mode"].astype(str).isin(["affine", "", "nan"]), "model"].unique()))
    )
    by_name = mlxcel_families.nulls_by_name(affine, loaded.provenance)
    return {**by_name, **ignored, **observed, **expected, **options.excludes}


def analyse(loaded: LoadedInput, options: Options = Options()) -> Analysis:
    policy = options.policy  # checked here, before anything is computed
    excludes = _null_excludes(loaded, options)
    try:
        if loaded.samples is not None:
            points = analyse_points(loaded.samples, options.confidence, options.margin, excludes)
            summary = apply_excludes(points.summary, excludes)
        else:
            _check_summary_settings(loaded.provenance, options)
            summary = apply_excludes(loaded.summary.reset_index(drop=True), excludes)
            for column in NUMERIC_SUMMARY:
                summary[column] = pd.to_numeric(summary[column], errors="coerce")
            points = PointSet(summary, float("nan"), 0, ())
    except ValueError as exc:  # the statistics are pure; only the excludes can be wrong once the options are checked
        name, _, problem = str(exc).partition(": ")
        raise InputError("--exclude", name, problem) from None
    summary = dispatch_evidence.annotate(summary, loaded.samples, loaded.verification, expected_null(loaded.provenance))
    current = _current_default(options, loaded.provenance)
    # the variable that sets the cap for what was measured: a command run's (the one its arms were forced with),
    # mlxcel's for its CSVs; a built-in workload records "" (no variable of any library sets its cap), so its
    # decision prints no line to apply
    target = CapTarget.of_run(loaded.provenance)
    withheld = withheld_reason(points.aa_beyond_margin, options.margin)
    result = applied(decide(summary, current, policy, withheld, points.sweep_drift), target)
    phi = None if loaded.samples is None else points.noise_scale
    return Analysis(
        loaded.samples,
        summary,
        result,
        loaded.provenance,
        options,
        current,
        target,
        phi,
        points.aa_points,
        points.aa_beyond_margin,
        loaded.verification,
        points.sweep_drift,
    )


def applied(result: DecisionResult, target: CapTarget) -> DecisionResult:
    """The result with each decision's line to apply its cap (the engine decides numbers, the target names them)."""

    def one(decision: Decision) -> Decision:
        return replace(decision, apply=target.setting(decision.recommended_cap))

    families = tuple(replace(f, decision=one(f.decision)) for f in result.families)
    return replace(result, families=families, decision=one(result.decision))


def analyse_path(path: str | Path, options: Options = Options()) -> Analysis:
    return analyse(load_input(path), options)


def save_summary(analysis: Analysis, path: str | Path) -> Path:
    """summary.csv with the input's provenance and the settings that produced it."""
    settings = {f"summary.{k}": v for k, v in analysis.options.settings().items()}
    # the verification record stays in its own file (verification.json); its outcome is in the summary's columns
    return write_summary_csv(analysis.summary, Path(path), {**analysis.provenance, **settings})
