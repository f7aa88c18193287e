"""Per-point statistics: medians per arm, the fused/fallback ratio with a bootstrap CI, a rank test, spread, verdict.

Pure functions over the samples DataFrame (SAMPLE_COLUMNS); no I/O. Choices, and why:
- Point ratio = median(fused tok/s) / median(fallback tok/s): medians ignore the odd run hit by a background task.
- CI: percentile bootstrap of that ratio. When every ok run of one arm has a partner of the same round in the other
  arm, rounds are resampled as pairs (the rotation of arm order within a round then cancels slow drift). With any
  unpaired run (a failure, an import without rounds) each arm is resampled on its own, which is valid but wider.
  Resampling is vectorised: one (n_resamples × n) index matrix per arm, medians along axis 1.
- Spread: robust coefficient of variation, 1.4826·MAD/median (equals σ/µ for normal noise, but one outlier cannot
  inflate it). A point is `unstable` when either arm's spread exceeds 5%.
- Verdict: `fused` / `fallback` only when the CI excludes 1, else `tie`; `null` when the arms ran the same code
  (dispatch probe never matched, quantization not affine), when the user excluded the point, or when an arm has no
  ok run. Null points are reported and never used for the crossover.
- Noise floor: the `null` arm runs the fallback again (A/A); median(null)/median(fallback) shows how far from 1.0 a
  ratio drifts with no code difference at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from harness.errors import InputError
from harness.results import POINT_COLUMNS

CONFIDENCE = 0.95
N_RESAMPLES = 2000
SEED = 0
UNSTABLE_SPREAD = 0.05
MAD_TO_SIGMA = 1.4826  # scales the median absolute deviation to σ for normally distributed noise
SUMMARY_COLUMNS = [
    *POINT_COLUMNS,
    "n_fallback",
    "n_fused",
    "n_null",
    "n_failed",
    "n_skipped",
    "fallback_tok_s",
    "fused_tok_s",
    "ratio",
    "round_ratio",  # median of the per-round fused/fallback ratios (paired points only)
    "ci_low",
    "ci_high",
    "paired",
    "p_value",
    "fallback_spread",
    "fused_spread",
    "null_ratio",  # median(null arm)/median(fallback): the A/A noise floor
    "unstable",
    "verdict",
    "reason",
]
VERDICTS = ("fused", "fallback", "tie", "null")
# Points are listed shape family by shape family, by increasing Dff within a family.
POINT_ORDER = ["backend", "device", "workload", "d_model", "top_k", "n_experts", "bits", "group_size", "dtype", "dff"]


@dataclass
class PointStats:
    """One point's summary row plus the bootstrap replicates of its ratio (what the crossover CI resamples)."""

    row: dict[str, object]
    replicates: np.ndarray = field(repr=False)


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


def bootstrap_ratio(
    numerator: np.ndarray, denominator: np.ndarray, paired: bool, n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Bootstrap replicates of median(numerator)/median(denominator); paired resamples keep index i together."""
    if paired:
        idx = rng.integers(0, len(numerator), size=(n_resamples, len(numerator)))
        return np.median(numerator[idx], axis=1) / np.median(denominator[idx], axis=1)
    idx_num = rng.integers(0, len(numerator), size=(n_resamples, len(numerator)))
    idx_den = rng.integers(0, len(denominator), size=(n_resamples, len(denominator)))
    return np.median(numerator[idx_num], axis=1) / np.median(denominator[idx_den], axis=1)


def percentile_ci(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """Equal-tailed percentile interval; order statistics (no interpolation) so ±inf replicates are allowed."""
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(replicates, [tail, 1.0 - tail], method="inverted_cdf")
    return float(low), float(high)


def relative_spread(values: np.ndarray) -> float:
    """1.4826·MAD/median: a robust coefficient of variation (NaN for fewer than two values)."""
    if len(values) < 2:
        return float("nan")
    median = np.median(values)
    return float(MAD_TO_SIGMA * np.median(np.abs(values - median)) / median)


def rank_test(fused: np.ndarray, fallback: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value (NaN when an arm is empty)."""
    if len(fused) == 0 or len(fallback) == 0:
        return float("nan")
    return float(scipy_stats.mannwhitneyu(fused, fallback, alternative="two-sided").pvalue)


def analyse_points(
    samples: pd.DataFrame,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
) -> list[PointStats]:
    """Statistics of every point in `samples`, in POINT_ORDER; each point gets its own seeded random stream."""
    if not 0.5 <= confidence < 1.0:
        raise InputError("--confidence", str(confidence), "must be in [0.5, 1)")
    if n_resamples < 2000:
        raise InputError("n_resamples", str(n_resamples), "use at least 2000 bootstrap resamples")
    out = []
    ordered = samples.sort_values([*POINT_ORDER, "model", "quant_mode"], kind="stable")
    groups = ordered.groupby(POINT_COLUMNS, dropna=False, sort=False)
    for index, (key, rows) in enumerate(groups):
        rng = np.random.default_rng([seed, index])
        out.append(_point_stats(dict(zip(POINT_COLUMNS, key, strict=True)), rows, confidence, n_resamples, rng))
    return out


def _arm_runs(rows: pd.DataFrame, arm: str) -> pd.Series:
    """ok tok/s of one arm indexed by round (round order), the unit the bootstrap resamples."""
    ok = rows[(rows["arm"] == arm) & (rows["status"] == "ok")].sort_values("round")
    return pd.Series(ok["tok_s"].to_numpy(float), index=ok["round"].to_numpy())


def _point_stats(
    key: dict[str, object], rows: pd.DataFrame, confidence: float, n_resamples: int, rng: np.random.Generator
) -> PointStats:
    fallback, fused, null = (_arm_runs(rows, arm) for arm in ("fallback", "fused", "null"))
    paired = (
        len(fused) >= 2
        and fused.index.is_unique
        and fallback.index.is_unique
        and set(fused.index) == set(fallback.index)
    )
    row: dict[str, object] = {
        **key,
        "n_fallback": len(fallback),
        "n_fused": len(fused),
        "n_null": len(null),
        "n_failed": int((rows["status"] == "fail").sum()),
        "n_skipped": int((rows["status"] == "skip").sum()),
        "fallback_tok_s": _median(fallback),
        "fused_tok_s": _median(fused),
        "paired": paired,
        "p_value": rank_test(fused.to_numpy(), fallback.to_numpy()),
        "fallback_spread": relative_spread(fallback.to_numpy()),
        "fused_spread": relative_spread(fused.to_numpy()),
        "null_ratio": _median(null) / _median(fallback) if len(null) and len(fallback) else float("nan"),
    }
    row["ratio"] = row["fused_tok_s"] / row["fallback_tok_s"] if len(fused) and len(fallback) else float("nan")
    row["round_ratio"] = float(np.median(fused / fallback.loc[fused.index])) if paired else float("nan")
    replicates = np.full(n_resamples, row["ratio"])
    row["ci_low"] = row["ci_high"] = float("nan")
    if len(fused) >= 2 and len(fallback) >= 2:
        fallback_values = fallback.loc[fused.index].to_numpy() if paired else fallback.to_numpy()
        replicates = bootstrap_ratio(fused.to_numpy(), fallback_values, paired, n_resamples, rng)
        row["ci_low"], row["ci_high"] = percentile_ci(replicates, confidence)
    row["unstable"] = bool(max(np.nan_to_num([row["fallback_spread"], row["fused_spread"]])) > UNSTABLE_SPREAD)
    row["verdict"], row["reason"] = _verdict(row, rows, confidence)
    return PointStats(row, replicates)


def _median(values: pd.Series) -> float:
    return float(np.median(values.to_numpy())) if len(values) else float("nan")


def _verdict(row: Mapping[str, object], rows: pd.DataFrame, confidence: float) -> tuple[str, str]:
    quant_mode = row.get("quant_mode")
    if isinstance(quant_mode, str) and quant_mode and quant_mode != "affine":
        return (
            "null",
            f"quant_mode {quant_mode} is not affine: the fused kernel declines it, both arms ran the fallback",
        )
    probe = rows.loc[(rows["arm"] == "fused") & (rows["status"] == "ok"), "dispatch_ok"]
    probe = pd.to_numeric(probe, errors="coerce").dropna()
    if len(probe) and not (probe == 1).any():
        return "null", "dispatch probe never matched in the fused arm: both arms ran the same code"
    for arm in ("fallback", "fused"):
        if row[f"n_{arm}"] == 0:
            return "null", f"no ok {arm} run ({row['n_failed']} failed, {row['n_skipped']} skipped)"
    low, high = row["ci_low"], row["ci_high"]
    if np.isnan(low):
        return "tie", "too few runs for a confidence interval (need 2 per arm)"
    level = f"{confidence:.0%} CI [{low:.4f}, {high:.4f}]"
    if low > 1.0:
        return "fused", f"{level} above 1"
    if high < 1.0:
        return "fallback", f"{level} below 1"
    return "tie", f"{level} includes 1"


def apply_excludes(summary: pd.DataFrame, excludes: Mapping[str, str]) -> pd.DataFrame:
    """Mark the points of the excluded models null, with the user's reason; unknown names are an input error."""
    unknown = sorted(set(excludes) - set(summary["model"].astype(str)))
    if unknown:
        models = ", ".join(sorted(set(summary["model"].astype(str))))
        raise InputError("--exclude", unknown[0], f"no point has this model name (models: {models})")
    out = summary.copy()
    for name, reason in excludes.items():
        mask = out["model"].astype(str) == name
        out.loc[mask, "verdict"] = "null"
        out.loc[mask, "reason"] = reason
    return out


def point_keys(frame: pd.DataFrame) -> pd.Series:
    """POINT_COLUMNS of each row as one hashable tuple of strings (NaN → "", 2048.0 → "2048")."""

    def text(value: object) -> str:
        if isinstance(value, float):
            return "" if value != value else (str(int(value)) if value.is_integer() else str(value))
        return str(value)

    return frame[POINT_COLUMNS].apply(lambda row: tuple(text(v) for v in row), axis=1)


def summary_frame(points: Sequence[PointStats]) -> pd.DataFrame:
    """The summary table (SUMMARY_COLUMNS), one row per point, in the order of `points`."""
    return pd.DataFrame([p.row for p in points], columns=SUMMARY_COLUMNS)


def summarize(
    samples: pd.DataFrame,
    excludes: Mapping[str, str] | None = None,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    n_resamples: int = N_RESAMPLES,
) -> pd.DataFrame:
    """One summary row per point (see the module docstring for every choice)."""
    summary = summary_frame(analyse_points(samples, confidence, seed, n_resamples))
    return apply_excludes(summary, excludes or {})
