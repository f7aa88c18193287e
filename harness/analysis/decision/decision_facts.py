"""The facts a decision rests on, resolved in one place for every path to a decision (docs/design.md §7.10).

A decision compares measured points against the cap in force, so every path to one — the end of a sweep,
summarize, crossover, report of one run or several, an imported mlxcel sweep CSV or bench_decode.sh CSVs, check
and check-reports — needs the same three facts, and used to find each on its own:

- **the cap in force and where it comes from**, in this order: `--current-default`; the `--mlxcel-src` tree's
  constant (report); the run's record (the sweep config's `current_default`, an mlxcel CSV's `# current_default`
  header, `import-mlxcel --current-default`); else, for what was measured through mlxcel's cap variable
  (`MLXCEL_FUSED_MOE_MAX_DFF`) on a backend mlxcel builds for, the constant that build compiles in. None of these:
  the cap is unknown, the decision is `set`, and `CapFact.missing` says how to give it — never a guess;
- **the constant a backend reads** (src/models/switch_layers.rs: `fused_moe_max_dff_from` takes
  `FUSED_MOE_MAX_DFF_METAL` when Metal is available and `FUSED_MOE_MAX_DFF_CUDA` otherwise, so CUDA and ROCm
  builds both read the CUDA one; a ROCm-only move is a device-class arm, never a rewrite of the shared constant);
- **each point's class**: measured under the cap, measured by switch (`MLXCEL_FUSED_MOE=0`: the family ignores the
  cap), A/A (the family never runs the fused kernel, or both cap-forced arms ran the same code), declined (the
  kernel refuses the checkpoint), or excluded by the user. Only `measured` points enter the cap's decision; the
  others keep their ratio and interval and say why they are out. The classes come from the run's record (the
  config `init` wrote from config.json: `expect_null`, `cap_ignored`), the dispatch evidence, `import-mlxcel
  --models` (the same eligibility rules `init` uses), or, for an mlxcel sweep CSV with no model folders, the
  model's name (harness.config.mlxcel_families.NAME_PATTERNS).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypedDict

import numpy as np
import pandas as pd

from harness.analysis.evidence import dispatch_evidence
from harness.analysis.points.point_summary import analyse_points
from harness.config import mlxcel_families
from harness.config.backend_specs import MlxcelCap, mlxcel_caps
from harness.config.schema import DEFAULT_CAP_ENV
from harness.errors import InputError
from harness.runs.formats import point_keys
from harness.runs.provenance_keys import CAP_IGNORED, DISPATCH_OVERRIDES, EXPECT_NULL
from harness.runs.summary_columns import SummaryCol
from harness.thresholds import MAX_CAP

PointClass = Literal["switch", "aa", "declined", "excluded"]
SWITCH_LABEL = "fused path on vs off (the family ignores the cap)"
SAME_KERNEL = (
    "no difference shown: where the fallback arm did not set MLXCEL_FUSED_MOE=0 (bench_decode.sh CSVs do not "
    "record it), both arms ran the fused kernel"
)


# mlxcel's compiled-in caps per backend, and the constants a patch may rewrite: a backend that shares another's
# constant (ROCm, the CUDA one) has a default but no constant of its own — rewriting it would move the other too
MLXCEL_DEFAULT_CAPS = {backend: cap.default for backend, cap in mlxcel_caps().items()}
MLXCEL_CONSTANTS = {backend: cap.constant for backend, cap in mlxcel_caps().items() if not cap.shared_with}


@dataclass(frozen=True, kw_only=True)
class CapFact:
    """The cap in force (None: unknown), where it comes from, and — when unknown — which fact is missing and how
    to give it."""

    value: int | None
    source: str
    missing: str = ""


def backend_cap(backend: object) -> MlxcelCap | None:
    """mlxcel's compiled-in cap for a backend (ROCm's is the CUDA one it shares); None: mlxcel has no such build."""
    return mlxcel_caps().get(str(backend or ""))


def constant_of(backend: object) -> str | None:
    """The switch_layers.rs constant a backend's build reads (`FUSED_MOE_MAX_DFF_CUDA` for cuda and rocm)."""
    cap = backend_cap(backend)
    return cap.constant if cap is not None else None


def constant_words(backend: object) -> str:
    """`FUSED_MOE_MAX_DFF_CUDA` or, for a backend that shares it, `FUSED_MOE_MAX_DFF_CUDA (shared with cuda)`."""
    cap = backend_cap(backend)
    if cap is None:
        return ""
    return f"{cap.constant} (shared with {cap.shared_with})" if cap.shared_with else cap.constant


def tree_cap(caps: Mapping[str, object], backend: object) -> int | None:
    """The cap a read mlxcel tree (`--mlxcel-src`, its caps by backend) compiles in for `backend`: its own
    constant's value, or the value of the constant it shares (ROCm: CUDA's)."""
    cap = backend_cap(backend)
    value = caps.get(cap.shared_with or str(backend)) if cap is not None else None
    return None if value in (None, "") else int(str(value))


CONFIG_SOURCE = "the run's config (current_default)"


def _recorded_source(provenance: Mapping[str, object]) -> str:
    stated = str(provenance.get("current_default_source") or "")
    if stated:
        return stated
    if provenance.get("source_format"):
        return f"recorded with the {provenance['source_format']} (current_default)"
    return CONFIG_SOURCE


class CapWords(TypedDict, total=False):
    """What a document says of the cap in force beyond its value (cap_words); at most one of the two."""

    current_default_source: str
    current_default_missing: str


def cap_words(cap: CapFact) -> CapWords:
    """What a document says of the cap in force beyond its value: where it came from when neither the run's
    config nor the command line gave it (`current_default_source`), or what is missing (`current_default_missing`)."""
    if cap.value is None:
        return {"current_default_missing": cap.missing}
    if cap.source in (CONFIG_SOURCE, "--current-default"):
        return {}
    return {"current_default_source": cap.source}


def _integer(value: object, field: str) -> int:
    try:
        number = int(float(str(value)))
    except (ValueError, OverflowError):  # not a number, NaN, inf
        raise InputError("provenance", field, f"{value!r} is not an integer") from None
    if not 0 < number <= MAX_CAP:
        raise InputError("provenance", field, f"{value!r} is not a cap (1 … {MAX_CAP})")
    return number


def cap_in_force(
    provenance: Mapping[str, object], option: int | None = None, option_source: str = "--current-default"
) -> CapFact:
    """The cap in force for what `provenance` measured, from the first source that states it (module docstring).
    `option` is the command line's cap (`--current-default`, or the `--mlxcel-src` tree's constant, named by
    `option_source`)."""
    if option is not None:
        return CapFact(value=option, source=option_source)
    recorded = provenance.get("current_default")
    if recorded not in (None, ""):
        return CapFact(value=_integer(recorded, "current_default"), source=_recorded_source(provenance))
    backend = str(provenance.get("backend") or "")
    cap = backend_cap(backend)
    through_mlxcel = str(provenance.get("cap_env", DEFAULT_CAP_ENV) or "") == DEFAULT_CAP_ENV
    if cap is not None and through_mlxcel:
        shared = f", which {backend} builds share with {cap.shared_with}" if cap.shared_with else ""
        return CapFact(
            value=cap.default, source=f"mlxcel's compiled-in {cap.constant}{shared} (the input states no cap)"
        )
    if through_mlxcel:
        why = f"backend {backend!r} has no mlxcel build" if backend else "the input names no backend"
        how = "give --current-default DFF, or the backend (import-mlxcel --backend, report --backend)"
    else:
        why = "a built-in workload has no compiled-in cap"
        how = "give --current-default DFF, or current_default in the sweep config"
    return CapFact(value=None, source="", missing=f"the cap in force is unknown ({why}): {how}")


def expected_null(provenance: Mapping[str, object]) -> dict[str, str]:
    """The run's `expect_null` record (a sweep's config, or import-mlxcel --models): model → predicted reason."""
    return _by_model(provenance, EXPECT_NULL)


def cap_ignored(provenance: Mapping[str, object]) -> dict[str, str]:
    """The run's `cap_ignored` record: model → why its family ignores the cap (measured by switch)."""
    return _by_model(provenance, CAP_IGNORED)


def _by_model(provenance: Mapping[str, object], key: str) -> dict[str, str]:
    """A provenance record of model → why ({} when the run has none)."""
    value = provenance.get(key)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


@dataclass(frozen=True, kw_only=True)
class PointFacts:
    """Every point kept out of the cap's decision: model → (class, reason). A model not here is measured."""

    classes: dict[str, PointClass]
    reasons: dict[str, str]

    def of(self, model: str) -> PointClass | None:
        return self.classes.get(model)


def point_facts(
    frame: pd.DataFrame | None,
    provenance: Mapping[str, object],
    verification: dispatch_evidence.VerificationRecord | None,
    excludes: Mapping[str, str],
) -> PointFacts:
    """The class of every model of `frame` that is not measured under the cap, with its reason; later sources
    win: the model's name (an mlxcel sweep CSV alone), the family ignoring the cap, the dispatch observation,
    the prediction (a prediction the probe confirmed says so), the user's --exclude."""
    present = set(map(str, frame["model"].unique())) if frame is not None else set()
    predicted = expected_null(provenance)
    overridden = _by_model(provenance, DISPATCH_OVERRIDES)  # the fused kernel ran after all: measured
    observed = {m: why for m, why in dispatch_evidence.null_reasons(verification, predicted).items() if m in present}
    expected = {
        m: f"{observed[m]} (predicted: {why})" if m in observed else f"expected null: {why}"
        for m, why in predicted.items()
        if m in present and m not in overridden
    }
    ignored = {m: why for m, why in cap_ignored(provenance).items() if m in present}
    # a non-affine point is already null for its quantization (the more specific reason); names settle the rest
    affine = (
        present
        if frame is None or "quant_mode" not in frame
        else set(map(str, frame.loc[frame["quant_mode"].astype(str).isin(["affine", "", "nan"]), "model"].unique()))
    )
    by_name = mlxcel_families.nulls_by_name(affine, provenance)
    classes: dict[str, PointClass] = {}
    sources: tuple[tuple[Mapping[str, str], PointClass], ...] = (
        (by_name, "aa"),
        (ignored, "switch"),
        (observed, "declined"),
        (expected, "declined"),
        (excludes, "excluded"),
    )
    for source, kind in sources:
        classes.update(dict.fromkeys(source, kind))
    for model, why in predicted.items():  # a family that never runs the kernel: its point is A/A, not declined
        if model in expected and mlxcel_families.NEVER_RUNS in why:
            classes[model] = "aa"
    reasons = {**by_name, **ignored, **observed, **expected, **excludes}
    return PointFacts(classes=classes, reasons=reasons)


def is_switch_point(reason: object) -> bool:
    """Whether a summary row is a point measured by switch (with_switch_ratios wrote its reason): the documents
    show its ratio and interval under SWITCH_LABEL and draw it with a marker of its own."""
    return str(reason or "").startswith(SWITCH_LABEL)


def with_switch_ratios(
    summary: pd.DataFrame, samples: pd.DataFrame | None, facts: PointFacts, confidence: float, margin: float
) -> pd.DataFrame:
    """The summary with each point measured by switch given its own fused-on-vs-off ratio and interval (its runs
    analysed apart, as any point, so nothing of it reaches the points of the cap's decision: not φ, not the drift
    test), its verdict left null (it stays out of the cap's decision) and its reason saying what the ratio is."""
    switch = {m for m, kind in facts.classes.items() if kind == "switch"}
    rows: np.ndarray | list[bool] = summary["model"].astype(str).isin(switch).to_numpy() if len(summary) else []
    if not switch or not any(rows):
        return summary
    out = summary.copy()
    measured: dict[object, str] = {}
    if samples is not None:
        own = analyse_points(samples[samples["model"].astype(str).isin(switch)], confidence, margin, {}).summary
        position = {key: i for i, key in enumerate(point_keys(own))}
        copied = [c for c in own.columns if c in out.columns and c not in (SummaryCol.VERDICT, SummaryCol.REASON)]
        out[copied] = out[copied].astype(object)
        for index, key in point_keys(out[rows]).items():
            if key in position:
                row = own.iloc[position[key]]
                out.loc[index, copied] = row[copied].to_numpy(dtype=object)
                measured[index] = f": {row[SummaryCol.REASON]}" if row[SummaryCol.REASON] else ""
                if row[SummaryCol.CI_LOW] <= 1.0 <= row[SummaryCol.CI_HIGH]:  # what 1 may mean (forcing unrecorded)
                    measured[index] += f" ({SAME_KERNEL})"
    for index in out.index[rows]:
        model = str(out.at[index, "model"])
        out.at[index, SummaryCol.REASON] = f"{SWITCH_LABEL}{measured.get(index, '')}; {facts.reasons[model]}"
    return out.infer_objects()
