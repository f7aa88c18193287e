"""The analysis pipeline every command shares: loaded input → summary → per-family crossover → decision.

One place decides which settings apply (command-line option over the run's provenance over the default), so
`crossover`, `report`, `check` and `check-reports` cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from harness.analysis.decision import decision_facts
from harness.analysis.decision.cap_target import CapTarget
from harness.analysis.decision.decide import decide
from harness.analysis.decision.decision_facts import CapFact, PointFacts, expected_null
from harness.analysis.decision.decision_json import DecisionJSON, OptionsJSON, SettingsJSON, decision_json
from harness.analysis.decision.decision_record import Decision, DecisionResult
from harness.analysis.evidence import dispatch_evidence
from harness.analysis.evidence.dispatch_evidence import VerificationRecord
from harness.analysis.points.inputs import LoadedInput, load_input, write_summary_csv
from harness.analysis.points.point_summary import PointSet, analyse_points, apply_excludes
from harness.errors import InputError
from harness.policy import Policy
from harness.runs.provenance_keys import Provenance
from harness.runs.summary_columns import SummaryCol

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


POLICY_SETTINGS = ("confidence", "margin", "grid", "interpolation")  # the policy's fields a result records


@dataclass(frozen=True, kw_only=True)
class Options:
    """What an analysis is asked for: the policy it reads (harness.policy.Policy, checked when it is built), the
    models kept out, and the cap in force when the input does not state it."""

    policy: Policy = Policy()
    excludes: Mapping[str, str] = field(default_factory=dict)
    current_default: int | None = None  # None: the cap in force the input states (decision_facts.cap_in_force)
    cap_source: str = "--current-default"  # what gave current_default (report: the --mlxcel-src tree's constant)

    def settings(self) -> OptionsJSON:
        """The options as recorded next to a result, so it can be re-derived."""
        return {
            "excludes": dict(self.excludes),
            "confidence": self.policy.confidence,
            "margin": self.policy.margin,
            "grid": self.policy.grid,
            "interpolation": self.policy.interpolation,
        }

    @classmethod
    def from_settings(cls, settings: object) -> Options:
        """Options from their record (settings() with the cap fields beside it, as a sidecar keeps them): a record
        that is not an object, or a key that is no option, is a TypeError (as `Options(**record)` raised), a policy
        value out of range an InputError."""
        if not isinstance(settings, Mapping):
            raise TypeError(f"the options are not an object: {settings!r}")
        policy = Policy(**{k: v for k, v in settings.items() if k in POLICY_SETTINGS})
        return cls(policy=policy, **{k: v for k, v in settings.items() if k not in POLICY_SETTINGS})


@dataclass(kw_only=True)
class Analysis:
    samples: pd.DataFrame | None
    summary: pd.DataFrame
    result: DecisionResult
    provenance: Provenance
    options: Options
    current_default: int | None
    target: CapTarget  # what the cap is applied to (the variable that sets it)
    noise_scale: float | None  # φ from the A/A arm (None: a summary-only input, the runs are not at hand)
    aa_points: int
    aa_beyond_margin: tuple[str, ...]
    verification: VerificationRecord | None = None  # the run's dispatch verification record (LoadedInput.verification)
    sweep_drift: float | None = None  # p of the two passes' agreement (analysis.sweep_drift); None: one pass
    cap: CapFact = CapFact(value=None, source="")  # the cap in force, its source, or what is missing (decision_facts)
    point_facts: PointFacts = PointFacts(classes={}, reasons={})  # the points kept out of the cap's decision, by class

    @property
    def cap_env(self) -> str:
        """The variable that sets the cap ('' when none does): recorded with the exports (the mlxcel CSV)."""
        return self.target.env

    def as_json(self) -> DecisionJSON:
        settings: SettingsJSON = {
            "current_default": self.current_default,
            "cap_env": self.cap_env,
            "noise_scale": None if self.noise_scale is None else round(self.noise_scale, 4),
            "aa_points": self.aa_points,
            "aa_beyond_margin": list(self.aa_beyond_margin),
            **self.options.settings(),
        }
        return decision_json(self.summary, self.result, settings)


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


def _check_summary_settings(provenance: Mapping[str, object], options: Options) -> None:
    """A summary.csv carries intervals and verdicts at the level and margin it was written with; they cannot be
    re-derived without the samples."""
    settings = provenance.get("summary")
    for name, value in (("confidence", options.policy.confidence), ("margin", options.policy.margin)):
        stored = settings.get(name) if isinstance(settings, dict) else None
        if stored is not None and abs(float(stored) - value) > 1e-9:
            raise InputError(
                f"--{name}", str(value), f"this summary.csv was written with {name} {stored}; use the run's samples"
            )


def _null_excludes(loaded: LoadedInput, options: Options) -> PointFacts:
    """Every point kept out of the cap's decision, with its class and reason
    (harness.analysis.decision.decision_facts)."""
    frame = loaded.samples if loaded.samples is not None else loaded.summary
    return decision_facts.point_facts(frame, loaded.provenance, loaded.verification, options.excludes)


def analyse(loaded: LoadedInput, options: Options = Options()) -> Analysis:
    policy = options.policy  # checked when the options were built, before anything is computed
    facts = _null_excludes(loaded, options)
    excludes = facts.reasons
    try:
        if loaded.samples is not None:
            points = analyse_points(loaded.samples, policy.confidence, policy.margin, excludes)
            summary = apply_excludes(points.summary, excludes)
        else:
            assert loaded.summary is not None  # an input without runs has its summary (load_input)
            _check_summary_settings(loaded.provenance, options)
            summary = apply_excludes(loaded.summary.reset_index(drop=True), excludes)
            for column in NUMERIC_SUMMARY:
                summary[column] = pd.to_numeric(summary[column], errors="coerce")
            points = PointSet(summary=summary, noise_scale=float("nan"), aa_points=0, aa_beyond_margin=())
    except ValueError as exc:  # the statistics are pure; only the excludes can be wrong once the options are checked
        name, _, problem = str(exc).partition(": ")
        raise InputError("--exclude", name, problem) from None
    summary = decision_facts.with_switch_ratios(summary, loaded.samples, facts, policy.confidence, policy.margin)
    summary = dispatch_evidence.annotate(summary, loaded.samples, loaded.verification, expected_null(loaded.provenance))
    cap = decision_facts.cap_in_force(loaded.provenance, options.current_default, options.cap_source)
    current = cap.value
    # the variable that sets the cap for what was measured: a command run's (the one its arms were forced with),
    # mlxcel's for its CSVs; a built-in workload records "" (no variable of any library sets its cap), so its
    # decision prints no line to apply
    target = CapTarget.of_run(loaded.provenance)
    withheld = withheld_reason(points.aa_beyond_margin, policy.margin)
    result = applied(decide(summary, current, policy, withheld, points.sweep_drift), target)
    phi = None if loaded.samples is None else points.noise_scale
    return Analysis(
        samples=loaded.samples,
        summary=summary,
        result=result,
        provenance=loaded.provenance,
        options=options,
        current_default=current,
        target=target,
        noise_scale=phi,
        aa_points=points.aa_points,
        aa_beyond_margin=points.aa_beyond_margin,
        verification=loaded.verification,
        sweep_drift=points.sweep_drift,
        cap=cap,
        point_facts=facts,
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
