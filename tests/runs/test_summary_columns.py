"""summary.csv's columns are named once (harness.runs.summary_columns); its header is a file format and stays put."""

from __future__ import annotations

from harness.analysis.decision.pipeline import analyse_path, save_summary
from harness.runs.formats import header_lines
from harness.runs.summary_columns import SUMMARY_COLUMNS, SummaryCol
from tests.support.helpers import REPO

STORED = REPO / "results" / "20261130-cpu-vm-cpu-smoke"
# summary.csv's header as this format has always written it: renaming or reordering a SummaryCol must fail here
HEADER = (
    "backend,device,workload,model,quant_mode,d_model,dff,n_experts,top_k,bits,group_size,dtype,n_fallback,n_fused,"
    "n_null,n_failed,n_skipped,fallback_tok_s,fused_tok_s,ratio,estimate,ci_low,ci_high,ln_estimate,se,df,method,"
    "paired,p_value,fallback_spread,fused_spread,null_ratio,null_ci_low,null_ci_high,outliers,unstable,verdict,reason"
)


def test_summary_csv_is_written_with_the_columns_of_summary_col_in_their_fixed_order(tmp_path):
    path = save_summary(analyse_path(STORED), tmp_path / "summary.csv")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[len(header_lines(path))] == HEADER
    assert ",".join(SUMMARY_COLUMNS) == HEADER


def test_every_summary_col_name_is_its_column_in_lower_case_and_unique():
    names = {name: value for name, value in vars(SummaryCol).items() if name.isupper()}
    assert all(value == name.lower() for name, value in names.items())
    assert len(set(SUMMARY_COLUMNS)) == len(SUMMARY_COLUMNS)
