"""The per-point summary table: from the samples DataFrame to one row per point (medians, the fused/fallback
interval, the A/A noise floor, verdict and reason), shape families pooled separately, excluded models null.

The DataFrame layer over `harness.analysis.points.stats`, whose array core does the statistics; every choice is stated
in that module's docstring (docs/design.md §7). Split from it so the core reads as arrays in, arrays out, and this
module as the one place that turns samples rows into points and points into summary rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from harness.analysis.points import sweep_drift
from harness.analysis.points.stats import (
    MIN_RUNS,
    Comparison,
    classify,
    estimate_family,
    family_labels,
    noise_scale,
    precision_floor,
    precision_step,
    ratio_interval,
    relative_spread,
    row_median,
)
from harness.runs.formats import COMPARED_ARMS, NULL, POINT_COLUMNS, cell_numbers
from harness.runs.summary_columns import PASS_COLUMNS, SUMMARY_COLUMNS, PassCol, SummaryCol
from harness.thresholds import CONFIDENCE, MARGIN

UNSTABLE_SPREAD = 0.05
# the drift bound's variance factor from which a point's method states it (`two passes: drift bound ×F`) and the
# decision's model of the sweep carries it (PassCol.DRIFT_BOUND; below it the bound adds under 5% to se²)
BOUND_SHOWN = 1.05
# Points are listed shape family by shape family, by increasing Dff within a family.
POINT_ORDER = ["backend", "device", "workload", "d_model", "top_k", "n_experts", "bits", "group_size", "dtype", "dff"]
SUMMARY_ARMS = (*COMPARED_ARMS, NULL)  # summary columns n_fallback, n_fused, n_null in this order
# the samples columns analyse_points reads (a point's key, then each run's facts)
ANALYSED_COLUMNS = {
    *POINT_COLUMNS,
    "arm",
    "status",
    "round",
    "tok_s",
    "position",
    "dispatch_ok",
    sweep_drift.PASS_COLUMN,
}


@dataclass(frozen=True, kw_only=True)
class _ArmRuns:
    """One arm's ok runs of every point, in round order: (points, width) arrays padded with NaN, and the counts.
    All points at once rather than one object per point: per-point numpy and pandas calls on arrays of 3–5 runs
    made a file of a million points (an mlxcel CSV of 1,000,000 models) take minutes."""

    values: np.ndarray  # tok/s
    rounds: np.ndarray  # the runs' rounds (float)
    counts: np.ndarray
    median: np.ndarray  # tok/s per point (NaN without runs)

    @classmethod
    def gather(cls, point: np.ndarray, rounds: np.ndarray, tok_s: np.ndarray, n_points: int) -> _ArmRuns:
        """From the arm's ok rows (their point, round and tok/s): ties of a round keep their row order."""
        order = np.lexsort((np.arange(len(point)), rounds, point))
        point, rounds, tok_s = point[order], rounds[order], tok_s[order]
        counts = np.bincount(point, minlength=n_points)
        slot = np.arange(len(point)) - np.repeat(np.cumsum(counts) - counts, counts)
        shape = (n_points, max(int(counts.max(initial=0)), 1))
        values, at = np.full(shape, np.nan), np.full(shape, np.nan)
        values[point, slot], at[point, slot] = tok_s, rounds
        return cls(values=values, rounds=at, counts=counts, median=row_median(values))

    def unique_rounds(self) -> np.ndarray:
        unique: np.ndarray = ~np.any(np.diff(self.rounds, axis=-1) == 0, axis=-1)  # sorted: a repeat is next to itself
        return unique

    def log_matrix(self, rows: np.ndarray, width: int) -> np.ndarray:
        """(rows, width) of ln tok/s: a paired point's runs sit at its rounds' columns, which, its rounds being the
        fallback's, are its runs in round order, as a Welch point's are."""
        out = np.full((len(rows), width), np.nan)
        columns = min(width, self.values.shape[1])
        out[:, :columns] = np.log(self.values[rows, :columns])
        return out


@dataclass(frozen=True, kw_only=True)
class _Points:
    """Every point's runs by arm, whether it was measured in rounds, and why it is null ('' when it is not)."""

    runs: dict[str, _ArmRuns]
    interleaved: np.ndarray
    null: np.ndarray
    first_pass: np.ndarray  # runs of each point in the first of two passes over the grid (0: one pass; sweep_drift)
    # not interleaved, but every ok fallback run in a pass of its own (imported bench_decode.sh file pairs)
    by_pass: np.ndarray

    def paired(self, other: str) -> np.ndarray:
        """Every ok run of both arms has its partner of the same round, and the rows were measured in rounds, or
        (by_pass) in passes of one run per arm: run i of each arm comes from file pair i, so the pair's difference
        cancels what both files shared (the machine's state that day) and the passes' spread carries what they did
        not (sweep_drift)."""
        a, b = self.runs[other], self.runs["fallback"]
        width = min(a.rounds.shape[1], b.rounds.shape[1])  # beyond it, equal counts leave only NaN in both
        ra, rb = a.rounds[:, :width], b.rounds[:, :width]
        same = (a.counts == b.counts) & np.all((ra == rb) | (np.isnan(ra) & np.isnan(rb)), axis=-1)
        partnered: np.ndarray = (self.interleaved | self.by_pass) & a.unique_rounds() & b.unique_rounds() & same
        return partnered

    def one_visit(self) -> np.ndarray:
        """Points measured neither in rounds nor in passes: each arm's runs back to back, at one time (an imported
        mlxcel sweep CSV): a drift of one arm moved every run of the arm alike, and nothing in the data shows it."""
        once: np.ndarray = ~self.interleaved & (self.first_pass == 0)
        return once


@dataclass(frozen=True, kw_only=True)
class PointSet:
    """The summary table plus the run-level facts the report states."""

    summary: pd.DataFrame
    noise_scale: float  # φ ≥ 1 (1: the A/A arm showed no extra drift, or there is no A/A arm)
    aa_points: int  # points with an A/A estimate
    aa_beyond_margin: tuple[str, ...]  # points whose A/A interval lies beyond 1 ± δ
    sweep_drift: float | None = None  # p of the drift trend's residual test (sweep_drift); None: measured in one pass


def _gather(ordered: pd.DataFrame, point: np.ndarray, keys: pd.DataFrame, excludes: Mapping[str, str]) -> _Points:
    """The points' runs, rounds and null reasons from the sorted samples, each row's point index in `point`."""
    n_points = len(keys)
    arm, status = ordered["arm"].to_numpy(), ordered["status"].to_numpy()
    ok = status == "ok"
    runs: dict[str, _ArmRuns] = {}
    for name in SUMMARY_ARMS:
        mine = ok & (arm == name)
        rounds = ordered["round"].to_numpy()[mine].astype(float)
        runs[name] = _ArmRuns.gather(point[mine], rounds, ordered["tok_s"].to_numpy()[mine].astype(float), n_points)
    positioned = ~np.isnan(cell_numbers(ordered["position"]))
    interleaved = np.bincount(point[~positioned], minlength=n_points) == 0
    probe = cell_numbers(ordered["dispatch_ok"])
    fused = ok & (arm == "fused") & ~np.isnan(probe)
    probed = np.bincount(point[fused], minlength=n_points) > 0
    matched = np.bincount(point[fused & (probe == 1)], minlength=n_points) > 0
    null = [
        _null_reason(str(model), quant_mode, bool(unmatched), excludes)
        for model, quant_mode, unmatched in zip(
            keys["model"].tolist(), keys["quant_mode"].tolist(), probed & ~matched, strict=True
        )
    ]
    fallback = ok & (arm == "fallback")
    first_pass = sweep_drift.first_half_runs(ordered, fallback, point, n_points)
    by_pass = (
        ~interleaved
        & (first_pass > 0)
        & (sweep_drift.passes_of(ordered, fallback, point, n_points) == runs["fallback"].counts)
    )
    return _Points(
        runs=runs, interleaved=interleaved, null=np.array(null, dtype=object), first_pass=first_pass, by_pass=by_pass
    )


def analyse_points(
    samples: pd.DataFrame,
    confidence: float = CONFIDENCE,
    margin: float = MARGIN,
    excludes: Mapping[str, str] | None = None,
) -> PointSet:
    """Statistics of every point in `samples` (module docstring), in POINT_ORDER, families pooled separately;
    excluded models ({name: reason}) are null and stay out of every pooled estimate."""
    excludes = excludes or {}
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    # only the columns read below are sorted: a million-point file has ten million rows, and each column the
    # analysis never reads (the run's constants, the empty ones) was another copy in a new order. A key column that
    # holds one value (the backend of one run, the shape columns an import leaves empty) neither orders nor splits
    # anything: sorting and grouping by it hashed ten million cells each for the same result, so it is left out of
    # both and not reordered either (the points' keys read it from the samples as they are)
    varying = [c for c in POINT_COLUMNS if not _one_value(samples[c])]
    taken = [c for c in samples.columns if c in ANALYSED_COLUMNS and (c in varying or c not in POINT_COLUMNS)]
    ordered = samples[taken].reset_index(drop=True)  # its index: each row's position in the samples
    if ordered.empty:
        return PointSet(
            summary=pd.DataFrame([], columns=SUMMARY_COLUMNS + PASS_COLUMNS),
            noise_scale=1.0,
            aa_points=0,
            aa_beyond_margin=(),
        )
    ordered, point = _in_point_order(ordered, varying)
    first = np.unique(point, return_index=True)[1]
    rows = ordered.index.to_numpy()[first]
    cells = (ordered[c].to_numpy()[first] if c in varying else samples[c].to_numpy()[rows] for c in POINT_COLUMNS)
    keys = pd.DataFrame(list(zip(*cells, strict=True)), columns=POINT_COLUMNS)
    points = _gather(ordered, point, keys, excludes)
    summary = _describe(ordered, point, keys, points)
    labels = family_labels(keys).to_numpy()
    ok = samples["status"] == "ok"
    step = precision_step(pd.to_numeric(samples.loc[ok, "tok_s"], errors="coerce").to_numpy(float))
    main = _Estimates.empty(len(keys))
    aa_order: list[np.ndarray] = []  # A/A points family by family: φ averages them in this order
    pass_tests: list[float] = []
    aa = _Estimates.empty(len(keys))
    dff = pd.to_numeric(keys["dff"], errors="coerce").to_numpy(float)
    for family in dict.fromkeys(labels):
        members = np.flatnonzero(labels == family)
        _family(points, members, "fused", step, main, dff, pass_tests)
        aa_order.append(_family(points, members, "null", step, aa, dff))
    aa_points = np.concatenate(aa_order)
    phi = noise_scale(
        Comparison(theta=aa.theta[aa_points], se=aa.se[aa_points], df=aa.df[aa_points], pooled=np.zeros(0, bool))
    )
    se = main.se * phi
    estimate, low, high = ratio_interval(main.theta, se, main.df, confidence)
    with np.errstate(all="ignore"):
        t_ratio = main.theta / se
        p_values = np.where(np.isfinite(t_ratio), 2 * scipy_stats.t.sf(np.abs(t_ratio), main.df), np.nan)
    summary = summary.assign(
        **{
            SummaryCol.ESTIMATE: estimate,
            SummaryCol.CI_LOW: low,
            SummaryCol.CI_HIGH: high,
            SummaryCol.LN_ESTIMATE: main.theta,
            SummaryCol.SE: se,
            SummaryCol.DF: main.df,
            SummaryCol.METHOD: main.method,
            PassCol.DRIFT_BOUND: main.drift_bound,
            PassCol.TWO_PASSES: main.two_passes,
            PassCol.ONE_VISIT: main.one_visit,
            PassCol.ONE_ROUND_PASS: main.one_round_pass,
            PassCol.DROPPED: main.dropped,
        }
    )
    summary[SummaryCol.P_VALUE] = p_values
    summary[SummaryCol.OUTLIERS] = main.outliers
    aa_points = np.sort(aa_points)
    for column, values in zip(
        (SummaryCol.NULL_RATIO, SummaryCol.NULL_CI_LOW, SummaryCol.NULL_CI_HIGH),
        ratio_interval(aa.theta[aa_points], aa.se[aa_points] * phi, aa.df[aa_points], confidence),
        strict=True,
    ):
        summary.loc[aa_points, column] = values
    # judged at the model's own se: widening by φ, which this very deviation inflates, would hide it
    _, model_low, model_high = ratio_interval(aa.theta[aa_points], aa.se[aa_points], aa.df[aa_points], confidence)
    beyond = aa_points[np.isin(classify(model_low, model_high, margin), ("fused", "fallback"))]
    verdicts = _verdicts(summary, points.null, confidence, margin)
    summary[SummaryCol.VERDICT], summary[SummaryCol.REASON] = [v for v, _ in verdicts], [r for _, r in verdicts]
    dffs = summary["dff"].to_numpy()
    names = [f"{summary['model'].iat[i]} (Dff {int(dffs[i])})" for i in beyond]
    return PointSet(
        summary=summary[SUMMARY_COLUMNS + PASS_COLUMNS],
        noise_scale=phi,
        aa_points=len(aa_points),
        aa_beyond_margin=tuple(names),
        sweep_drift=sweep_drift.combined(pass_tests),
    )


def _in_point_order(rows: pd.DataFrame, varying: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows sorted (stably) by POINT_ORDER, then model and quant_mode, and each row's point: points numbered in
    that order. The points' keys are sorted, not the rows: a million-point file has ten million rows, and sorting
    them by three columns, two of them text, then grouping them again cost seconds for the same order (every
    varying key column is a sort column, so two points never tie and a point's rows stay in their file order)."""
    if not varying:
        return rows, np.zeros(len(rows), dtype=np.int64)
    found = rows.groupby(varying, dropna=False, sort=False).ngroup().to_numpy()  # by first appearance
    firsts = np.unique(found, return_index=True)[1]  # point i's first row
    order_by = [c for c in [*POINT_ORDER, "model", "quant_mode"] if c in varying]
    keys = rows[order_by].take(firsts).reset_index(drop=True)
    rank = np.empty(len(firsts), dtype=np.int64)
    rank[keys.sort_values(order_by, kind="stable").index.to_numpy()] = np.arange(len(firsts))
    point = rank[found]
    order = np.argsort(point, kind="stable")
    return rows.take(order), point[order]


def _one_value(cells: pd.Series) -> bool:
    """True when every cell holds the same value, or every cell is missing (and for no cells at all)."""
    missing = cells.isna().to_numpy()
    if missing.all() or missing.any():
        return bool(missing.all())
    values = cells.to_numpy()
    return bool((values == values[0]).all())


def _describe(ordered: pd.DataFrame, point: np.ndarray, keys: pd.DataFrame, points: _Points) -> pd.DataFrame:
    """The descriptive columns (counts, medians, spreads); the inferential ones are filled in later."""
    runs, n_points = points.runs, len(keys)
    status = ordered["status"].to_numpy()
    fallback, fused = runs["fallback"].median, runs["fused"].median
    spreads = {arm: relative_spread(runs[arm].values) for arm in ("fallback", "fused")}
    nan = np.full(n_points, np.nan)
    summary = keys.assign(
        **{f"n_{arm}": runs[arm].counts for arm in SUMMARY_ARMS},
        **{
            SummaryCol.N_FAILED: np.bincount(point[status == "fail"], minlength=n_points),
            SummaryCol.N_SKIPPED: np.bincount(point[status == "skip"], minlength=n_points),
            SummaryCol.FALLBACK_TOK_S: fallback,
            SummaryCol.FUSED_TOK_S: fused,
            SummaryCol.RATIO: fused / fallback,  # NaN when an arm has no run
            SummaryCol.PAIRED: points.paired("fused"),
            SummaryCol.FALLBACK_SPREAD: spreads["fallback"],
            SummaryCol.FUSED_SPREAD: spreads["fused"],
            SummaryCol.NULL_RATIO: nan,
            SummaryCol.NULL_CI_LOW: nan,
            SummaryCol.NULL_CI_HIGH: nan,
        },
    )
    summary[SummaryCol.UNSTABLE] = (
        np.max(np.nan_to_num([spreads["fallback"], spreads["fused"]]), axis=0) > UNSTABLE_SPREAD
    )
    return summary


@dataclass(frozen=True, kw_only=True)
class _Estimates:
    """θ̂, se, df, method of every point of one comparison (NaN / '' where it has none), and the fused comparison's
    dropped runs (`outliers`); _family fills in one family's points."""

    theta: np.ndarray
    se: np.ndarray
    df: np.ndarray
    method: np.ndarray
    outliers: np.ndarray
    drift_bound: np.ndarray  # PassCol.DRIFT_BOUND
    two_passes: np.ndarray  # PassCol.TWO_PASSES
    one_visit: np.ndarray  # PassCol.ONE_VISIT
    one_round_pass: np.ndarray  # PassCol.ONE_ROUND_PASS
    dropped: np.ndarray  # PassCol.DROPPED

    @classmethod
    def empty(cls, n_points: int) -> _Estimates:
        nan = np.full(n_points, np.nan)
        blank = np.full(n_points, "", object)
        return cls(
            theta=nan.copy(),
            se=nan.copy(),
            df=nan.copy(),
            method=blank,
            outliers=blank.copy(),
            drift_bound=np.ones(n_points),
            two_passes=np.zeros(n_points, bool),
            one_visit=np.zeros(n_points, bool),
            one_round_pass=np.zeros(n_points, bool),
            dropped=_none_dropped(n_points),
        )


def _none_dropped(n_points: int) -> np.ndarray:
    """An empty PassCol.DROPPED per point (an object array of tuples: numpy would read a list of them as a matrix)."""
    out = np.empty(n_points, object)
    out.fill(())
    return out


def _family(
    points: _Points,
    members: np.ndarray,
    arm: str,
    step: float,
    out: _Estimates,
    dff: np.ndarray,
    pass_tests: list[float] | None = None,
) -> np.ndarray:
    """θ̂, se, df, method of `arm` vs fallback for the family's points that can have one (outliers screened), into
    `out`; returns those points. `step` is the input's precision (precision_step), which floors each arm's per-run
    variance; `dff`, every point's, orders a family's visits in time (sweep_drift.estimate_in_passes)."""
    runs, fallback = points.runs[arm], points.runs["fallback"]
    enough = np.minimum(runs.counts[members], fallback.counts[members]) >= MIN_RUNS
    usable: np.ndarray = members[enough & (points.null[members] == "")]
    if not len(usable):
        return usable
    paired = points.paired(arm)[usable]
    rounds = np.where(paired, fallback.counts[usable], 0)  # a paired point's columns are the fallback's rounds
    a = runs.log_matrix(usable, max(int(rounds.max()), int(runs.counts[usable].max()), 1))
    b = fallback.log_matrix(usable, max(int(rounds.max()), int(fallback.counts[usable].max()), 1))
    floor_a, floor_b = (precision_floor(step, np.exp(row_median(y))) for y in (a, b))
    first = points.first_pass[usable]
    result, flagged, drift_p = sweep_drift.estimate_in_passes(
        estimate_family, a, b, paired, (floor_a, floor_b), first, dff[usable]
    )
    if drift_p is not None and pass_tests is not None:
        pass_tests.append(float(drift_p))
    if arm == "fused":
        for j in np.flatnonzero(flagged.any(axis=(0, -1))):
            dropped = _dropped_runs(points, usable[j], flagged[:, j])
            out.outliers[usable[j]] = "; ".join(
                f"{side} r{label} ({deviation:+.1%})" for side, label, deviation in dropped
            )
            out.dropped[usable[j]] = tuple(deviation for _, _, deviation in dropped)
    inflation = np.broadcast_to(result.drift, result.se.shape)
    found = np.broadcast_to(result.drift_found, result.se.shape)
    bound = np.broadcast_to(result.pass_bound, result.se.shape)
    out.theta[usable], out.se[usable], out.df[usable] = result.theta, result.se, result.df
    by_pass, one_visit = points.by_pass[usable], points.one_visit()[usable]
    one_round = paired & (first > 0) & (first < sweep_drift.MIN_PASS_ROUNDS)
    shown = bound >= BOUND_SHOWN
    out.drift_bound[usable] = np.where(shown, bound, 1.0)
    out.two_passes[usable] = shown | one_round | (paired & by_pass)
    out.one_visit[usable], out.one_round_pass[usable] = one_visit & ~paired, one_round
    out.method[usable] = [
        ("welch" if not is_paired else "paired" + (" by file pair" if passes else "") + (", pooled" if pooled else ""))
        + (f", {sweep_drift.ONE_VISIT}" if lone else "")
        # a half of one round: the passes cannot bound a drift of one arm (decide() withholds raise and lower)
        + (f", {sweep_drift.ONE_ROUND_PASS}" if short else "")
        + (f", drift: variance ×{float(ratio):.1f}" if drift else "")
        # why a two-pass point's interval is wider than its runs' spread: the drift its passes cannot exclude
        + (f", two passes: drift bound ×{float(factor):.1f}" if factor >= BOUND_SHOWN else "")
        for is_paired, pooled, ratio, drift, factor, passes, lone, short in zip(
            paired, result.pooled, inflation, found, bound, by_pass, out.one_visit[usable], one_round, strict=True
        )
    ]
    return usable


def _dropped_runs(points: _Points, i: int, flagged: np.ndarray) -> list[tuple[str, int, float]]:
    """(arm, round, deviation from its arm's median) per dropped run of point i: the outliers column's words
    (`fused r2 (-14.8%)`) and the PassCol.DROPPED field both."""
    out = []
    for arm_index, arm in enumerate(("fused", "fallback")):
        runs = points.runs[arm]
        n = runs.counts[i]
        values, labels, median = runs.values[i, :n], runs.rounds[i, :n], runs.median[i]
        for column in np.flatnonzero(flagged[arm_index][:n]):
            out.append((arm, int(labels[column]), float(values[column] / median - 1.0)))
    return out


def _null_reason(model: str, quant_mode: object, probe_unmatched: bool, excludes: Mapping[str, str]) -> str:
    """Why the point is `null` (both arms ran the same code, or excluded), '' when it is not."""
    if model in excludes:
        return excludes[model]
    if isinstance(quant_mode, str) and quant_mode and quant_mode != "affine":
        return f"quant_mode {quant_mode} is not affine: the fused kernel declines it, both arms ran the fallback"
    if probe_unmatched:
        return "dispatch probe never matched in the fused arm: both arms ran the same code"
    return ""


TOO_FEW_AGREE = "too few runs agree after dropping outliers (fewer than 2 rounds, or most runs slowed)"


def _verdicts(summary: pd.DataFrame, null: np.ndarray, confidence: float, margin: float) -> list[tuple[str, str]]:
    """Every point's verdict and its reason."""
    low, high = summary[SummaryCol.CI_LOW].to_numpy(float), summary[SummaryCol.CI_HIGH].to_numpy(float)
    decided = classify(low, high, margin)
    columns = (
        SummaryCol.N_FALLBACK,
        SummaryCol.N_FUSED,
        SummaryCol.N_FAILED,
        SummaryCol.N_SKIPPED,
        SummaryCol.CI_LOW,
        SummaryCol.CI_HIGH,
        SummaryCol.METHOD,
    )
    band = f"1 ± {margin:.1%}"
    where = {
        "fused": f"above {band}",
        "fallback": f"below {band}",
        "equivalent": f"inside {band}",
        "inconclusive": f"overlaps the edge of {band}",
    }
    out = []
    for reason, verdict, (n_fallback, n_fused, failed, skipped, low, high, method) in zip(
        null, decided, zip(*(summary[c].tolist() for c in columns), strict=True), strict=True
    ):
        if reason:
            out.append(("null", reason))
            continue
        short = next(((arm, n) for arm, n in (("fallback", n_fallback), ("fused", n_fused)) if n < MIN_RUNS), None)
        if short:
            out.append(
                (
                    "insufficient",
                    f"{short[1]} ok {short[0]} runs ({failed} failed, {skipped} skipped); "
                    f"an interval needs {MIN_RUNS} per arm",
                )
            )
        elif not (np.isfinite(low) and np.isfinite(high)):
            out.append(("insufficient", TOO_FEW_AGREE))
        else:
            out.append((verdict, f"{confidence:.0%} CI [{low:.4f}, {high:.4f}] {where[verdict]} ({method})"))
    return out


def check_excludes(summary: pd.DataFrame, excludes: Mapping[str, str]) -> None:
    """Unknown excluded names are an error (a typo must not silently keep a point)."""
    unknown = sorted(set(excludes) - set(summary["model"].astype(str)))
    if unknown:
        models = ", ".join(sorted(set(summary["model"].astype(str))))
        raise ValueError(f"{unknown[0]}: no point has this model name (models: {models})")


_BOUND_WORDS = re.compile(r"two passes: drift bound ×([0-9.]+)")
_DROPPED_WORDS = re.compile(r"\(([+-][0-9.]+)%\)")  # a dropped run's deviation in the outliers column


def pass_columns(summary: pd.DataFrame) -> pd.DataFrame:
    """A summary read back from summary.csv with its PassCol columns, restored from the method and outliers
    columns' words (the one record of them a stored summary has: _family writes them there and drops the columns
    with the file), so a stored summary's decision models its sweep as the fresh analysis did, to the words' one
    decimal of F and of each dropped run's percentage."""
    methods = summary[SummaryCol.METHOD].fillna("").astype(str)
    found = methods.str.extract(_BOUND_WORDS, expand=False)
    bound = pd.to_numeric(found, errors="coerce").fillna(1.0).to_numpy(float)
    one_round = methods.str.contains(sweep_drift.ONE_ROUND_PASS, regex=False).to_numpy()
    named = one_round | methods.str.contains("by file pair").to_numpy()
    dropped = _none_dropped(len(summary))
    for i, text in enumerate(summary[SummaryCol.OUTLIERS].tolist()):
        dropped[i] = tuple(float(x) / 100.0 for x in _DROPPED_WORDS.findall(text if isinstance(text, str) else ""))
    return summary.assign(
        **{
            PassCol.DRIFT_BOUND: bound,
            PassCol.TWO_PASSES: (bound > 1.0) | named,
            PassCol.ONE_VISIT: methods.str.contains(sweep_drift.ONE_VISIT, regex=False).to_numpy(),
            PassCol.ONE_ROUND_PASS: one_round,
            PassCol.DROPPED: dropped,
        }
    )


def apply_excludes(summary: pd.DataFrame, excludes: Mapping[str, str]) -> pd.DataFrame:
    """Mark excluded points of a stored summary null (samples inputs exclude before pooling, in analyse_points)."""
    check_excludes(summary, excludes)
    out = summary.copy()
    for name, reason in excludes.items():
        mask = out["model"].astype(str) == name
        out.loc[mask, SummaryCol.VERDICT] = "null"
        out.loc[mask, SummaryCol.REASON] = reason
    return out


def summarize(
    samples: pd.DataFrame,
    excludes: Mapping[str, str] | None = None,
    confidence: float = CONFIDENCE,
    margin: float = MARGIN,
) -> pd.DataFrame:
    """One summary row per point (see the module docstring for every choice)."""
    result = analyse_points(samples, confidence, margin, excludes or {})
    check_excludes(result.summary, excludes or {})
    return result.summary
