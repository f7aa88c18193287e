"""Bad inputs of `moecal import-mlxcel`: mlxcel CSVs and bench CSVs that would import a wrong run."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.errors import InputError
from harness.runs.formats import SAMPLE_COLUMNS
from tests.bad_inputs.corpus import assert_case, one_error_line
from tests.support.helpers import cli


def _bench_import(fallback: str) -> list[str]:
    """import-mlxcel of two bench CSVs: FALLBACK (the case's bad file) against the good fused one."""
    return [
        "import-mlxcel",
        "--fallback",
        f"{{ws}}/{fallback}",
        "--fused",
        "{ws}/bench-ok.csv",
        "--models",
        "{ws}/bench/models",
        "--out",
        "{out}/i",
    ]


# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("mlxcel-no-quant-mode", ["import-mlxcel", "{ws}/mlxcel-no-quant.csv", "--out", "{ws}/imp"], 2, "starts with"),
    ("import-into-a-run", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/good"], 2, "already holds"),
    ("import-into-stored", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/stored"], 2, "read-only"),
    ("import-default-huge", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--current-default", "10000000000000"], 2, "'--"),
    ("import-meta-link", ["import-mlxcel", "{ws}/mlxcel-ok.csv", "--out", "{ws}/import-link"], 2, "symbolic link"),
    ("import-model-is-a-path", ["import-mlxcel", "{ws}/mlxcel-path-name.csv", "--out", "{out}/i"], 2, "'../../x' is a"),
    (
        "import-bench-model-is-a-path",
        _bench_import("bench-abs-name.csv"),
        2,
        "bench-abs-name.csv: model: line 2: '/etc' is a path, not a name",
    ),
    # import-mlxcel refuses what no other command can read
    (
        "import-bench-inf",
        _bench_import("bench-inf.csv"),
        2,
        "bench-inf.csv: decode_tok_s: line 2: must be a finite number > 0, got 'inf'",
    ),
    (
        "import-bench-duplicate",
        _bench_import("bench-twice.csv"),
        2,
        "fallback run 1 appears twice",
    ),
    (
        "import-same-file-both-arms",
        _bench_import("bench-ok.csv"),
        2,
        "bench-ok.csv: --fused: is the same file as",
    ),
    (
        "import-fractional-tokens",
        _bench_import("bench-fraction.csv"),
        2,
        "generated_tokens: line 2: 60.5 is not a whole number of tokens",
    ),
    ("import-nothing-usable", ["import-mlxcel", "{ws}/mlxcel-all-na.csv", "--out", "{out}/i"], 2, "no measured run"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


def test_an_import_layout_that_lets_inf_or_a_repeated_run_through_is_still_refused(tmp_path):
    """harness.runs.import_checks holds for every CSV layout a reader adds, before anything is written."""
    from harness.runs.import_checks import check_imported

    row = {"model": "m", "dff": 1024, "quant_mode": "", "arm": "fused", "round": 0, "status": "ok", "tok_s": 5.0}
    frame = pd.DataFrame([row, {**row, "arm": "fallback", "tok_s": float("inf")}]).reindex(columns=SAMPLE_COLUMNS)
    with pytest.raises(InputError, match="inf must be finite"):
        check_imported(frame, "x.csv")
    with pytest.raises(InputError, match="fused run 1 appears twice"):
        check_imported(pd.DataFrame([row, row]).reindex(columns=SAMPLE_COLUMNS), "x.csv")


def test_generated_tokens_inf_in_a_bench_csv(tmp_path):
    from tests.runs.test_mlxcel_bench_csv import _args, _files
    from tests.support.fake_models import CONFIGS, write_models

    models = write_models(tmp_path, {"qwen3-30b-a3b-4bit": CONFIGS["qwen3-30b-a3b-4bit"]})
    fallback = _files(tmp_path, "fallback", {"qwen3-30b-a3b-4bit": 100.0}, runs=1)
    fused = _files(tmp_path, "fused", {"qwen3-30b-a3b-4bit": 107.0}, runs=1)
    lines = fused[0].read_text().splitlines()
    cells = lines[1].split(",")
    cells[3] = "inf"
    lines[1] = ",".join(cells)
    fused[0].write_text("\n".join(lines) + "\n")
    done = cli("import-mlxcel", *_args(fallback, fused), "--models", models, "--out", tmp_path / "run")
    one_error_line(done, "generated_tokens: line 2: must be a finite number > 0, got 'inf'")
