"""The columns of the summary frame (one row per point, written as summary.csv), named once.

Every module that reads or builds a summary row uses these names instead of bare strings, so a column cannot be
misspelled in one of them and renaming one is one edit. SummaryCol's order is summary.csv's column order.
"""

from __future__ import annotations

from typing import Final

from harness.runs.formats import POINT_COLUMNS


class SummaryCol:
    """Column names of the summary frame after the point's own POINT_COLUMNS; the type each holds in a comment."""

    N_FALLBACK: Final = "n_fallback"  # int: ok runs of the fallback arm
    N_FUSED: Final = "n_fused"  # int: ok runs of the fused arm
    N_NULL: Final = "n_null"  # int: ok runs of the null (A/A) arm
    N_FAILED: Final = "n_failed"  # int: fail rows
    N_SKIPPED: Final = "n_skipped"  # int: skip rows
    FALLBACK_TOK_S: Final = "fallback_tok_s"  # float: median tok/s of the fallback arm
    FUSED_TOK_S: Final = "fused_tok_s"  # float: median tok/s of the fused arm
    RATIO: Final = "ratio"  # float: median fused / median fallback (the number mlxcel sweeps publish)
    ESTIMATE: Final = "estimate"  # float: exp(θ̂), the geometric-mean ratio the interval is about
    CI_LOW: Final = "ci_low"  # float: the interval of ESTIMATE
    CI_HIGH: Final = "ci_high"
    LN_ESTIMATE: Final = "ln_estimate"  # float: θ̂
    SE: Final = "se"  # float: standard error of θ̂ (after the A/A noise scale)
    DF: Final = "df"  # float: degrees of freedom of the t interval
    METHOD: Final = "method"  # str: paired | paired, pooled | welch
    PAIRED: Final = "paired"  # bool
    P_VALUE: Final = "p_value"  # float: t test of θ = 0
    FALLBACK_SPREAD: Final = "fallback_spread"  # float: relative spread of the fallback arm's runs
    FUSED_SPREAD: Final = "fused_spread"
    NULL_RATIO: Final = "null_ratio"  # float: exp(θ̂_AA), the A/A comparison (null arm vs fallback)
    NULL_CI_LOW: Final = "null_ci_low"
    NULL_CI_HIGH: Final = "null_ci_high"
    OUTLIERS: Final = "outliers"  # str: the runs left out as outliers
    UNSTABLE: Final = "unstable"  # bool: an arm's spread is beyond UNSTABLE_SPREAD
    VERDICT: Final = "verdict"  # str: one of harness.analysis.points.stats.VERDICTS
    REASON: Final = "reason"  # str: why that verdict, in words


# summary.csv's columns: the point, then SummaryCol's names in the order they are defined above
SUMMARY_COLUMNS = [*POINT_COLUMNS, *(value for name, value in vars(SummaryCol).items() if name.isupper())]


class PassCol:
    """Columns the summary frame carries in memory beside summary.csv's, for the decision's model of how each point
    was measured (the rounds hint's simulated sweeps, until-decided's looks: decide.stage_families). Not written:
    summary.csv's header is a file format (write_summary_csv drops them); a summary read back restores them from
    its method and outliers columns (point_summary.pass_columns), the words the same facts were always written in."""

    DRIFT_BOUND: Final = "drift_bound"  # float: the drift bound's variance factor in se² (1: none shown)
    TWO_PASSES: Final = "two_passes"  # bool: the point's method names passes (a bound, a pass of one round, file pairs)
    ONE_VISIT: Final = "one_visit"  # bool: each arm's runs measured back to back, once, unpaired (method `one visit`)
    ONE_ROUND_PASS: Final = "one_round_pass"  # bool: a half of the point's passes holds one round (its method says so)
    # tuple[float, ...]: each run the outlier screen dropped from the fused comparison, its deviation from its arm's
    # median (a fraction; the outliers column writes it as `fused r2 (-14.8%)`)
    DROPPED: Final = "dropped"


PASS_COLUMNS = [value for name, value in vars(PassCol).items() if name.isupper()]
