"""The analysis pipeline every command shares: loaded input → summary → per-family crossover → decision.

One place decides which settings apply (command-line option over the run's provenance over the default), so
`crossover`, `report`, `check` and `check-reports` cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.config import DEFAULT_CAP_ENV
from harness.crossover import DEFAULT_GRID, INTERPOLATIONS, DecisionResult, decide, decision_json
from harness.errors import InputError
from harness.inputs import LoadedInput, load_input, write_summary_csv
from harness.stats import CONFIDENCE, N_RESAMPLES, SEED, analyse_points, apply_excludes, summary_frame


@dataclass(frozen=True)
class Options:
    excludes: Mapping[str, str] = field(default_factory=dict)
    confidence: float = CONFIDENCE
    seed: int = SEED
    n_resamples: int = N_RESAMPLES
    current_default: int | None = None  # None: take the run's provenance `current_default`, if any
    grid: int = DEFAULT_GRID
    interpolation: str = "linear"

    def settings(self) -> dict[str, object]:
        """The options as recorded next to a result, so it can be re-derived."""
        return {
            "excludes": dict(self.excludes),
            "confidence": self.confidence,
            "seed": self.seed,
            "n_resamples": self.n_resamples,
            "grid": self.grid,
            "interpolation": self.interpolation,
        }


@dataclass
class Analysis:
    samples: pd.DataFrame | None
    summary: pd.DataFrame
    replicates: list[np.ndarray] | None  # aligned with summary rows; None for a summary-only input
    result: DecisionResult
    provenance: dict[str, object]
    options: Options
    current_default: int | None
    cap_env: str

    def as_json(self) -> dict[str, object]:
        return decision_json(
            self.summary,
            self.result,
            current_default=self.current_default,
            cap_env=self.cap_env,
            **self.options.settings(),
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


def _check_summary_confidence(provenance: Mapping[str, object], confidence: float) -> None:
    """A summary.csv carries CIs at the level it was written with; they cannot be re-levelled without samples."""
    settings = provenance.get("summary")
    stored = settings.get("confidence") if isinstance(settings, dict) else None
    if stored is not None and abs(float(stored) - confidence) > 1e-9:
        raise InputError(
            "--confidence", str(confidence), f"this summary.csv holds {float(stored):.0%} CIs; use the run's samples"
        )


def analyse(loaded: LoadedInput, options: Options = Options()) -> Analysis:
    if options.interpolation not in INTERPOLATIONS:
        raise InputError("--interpolation", options.interpolation, f"must be one of {', '.join(INTERPOLATIONS)}")
    if options.grid <= 0:
        raise InputError("--grid", str(options.grid), "must be a positive integer")
    if loaded.samples is not None:
        points = analyse_points(loaded.samples, options.confidence, options.seed, options.n_resamples)
        summary, replicates = summary_frame(points), [p.replicates for p in points]
    else:
        _check_summary_confidence(loaded.provenance, options.confidence)
        summary, replicates = loaded.summary.reset_index(drop=True), None
    summary = apply_excludes(summary, options.excludes)
    current = _current_default(options, loaded.provenance)
    cap_env = str(loaded.provenance.get("cap_env") or DEFAULT_CAP_ENV)
    result = decide(summary, replicates, current, options.grid, options.interpolation, options.confidence, cap_env)
    return Analysis(loaded.samples, summary, replicates, result, loaded.provenance, options, current, cap_env)


def analyse_path(path: str | Path, options: Options = Options()) -> Analysis:
    return analyse(load_input(path), options)


def save_summary(analysis: Analysis, path: str | Path) -> Path:
    """summary.csv with the input's provenance and the settings that produced it."""
    settings = {f"summary.{k}": v for k, v in analysis.options.settings().items()}
    return write_summary_csv(analysis.summary, Path(path), {**analysis.provenance, **settings})


def write_summary(run_dir: str | Path, options: Options = Options()) -> Path:
    """`run_dir/summary.csv` from `run_dir/samples.csv`: what a sweep calls when it finishes."""
    return save_summary(analyse_path(run_dir, options), Path(run_dir) / "summary.csv")
