"""The run format: meta.json's `format` version, the v0 → v1 migration of the stored baseline, refusing newer ones."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from harness.errors import InputError
from harness.runs.formats import SAMPLE_COLUMNS, cell_numbers, read_samples
from harness.runs.run_meta import FORMAT_KEY, FORMAT_VERSION, MIGRATIONS, migrate_meta, migrate_v0_to_v1
from harness.runs.rundir import RunDirectory, SampleWriter
from tests.support.helpers import REPO, cli

STORED = REPO / "results" / "20261130-cpu-vm-cpu-smoke"  # format 0: written before meta.json named its version


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_the_stored_baseline_is_format_0_and_migrates_to_the_current_format():
    raw = json.loads((STORED / "meta.json").read_text())
    assert FORMAT_KEY not in raw, "the stored run predates format versions"
    assert MIGRATIONS[0] is migrate_v0_to_v1
    migrated = migrate_meta(raw, STORED / "meta.json")
    assert migrated[FORMAT_KEY] == FORMAT_VERSION == 1
    assert {k: v for k, v in migrated.items() if k != FORMAT_KEY} == raw


def test_the_stored_baseline_reads_identically_through_its_run_directory_and_stays_untouched():
    before = _digests(STORED)
    run = RunDirectory(STORED)
    assert run.read_meta() == json.loads((STORED / "meta.json").read_text())
    assert run.read_samples().equals(read_samples(STORED / "samples.csv"))
    assert len(run.done_runs()) > 0 and run.is_run()
    assert (run.samples, run.meta_path, run.summary) == (
        STORED / "samples.csv",
        STORED / "meta.json",
        STORED / "summary.csv",
    )
    assert _digests(STORED) == before, "reading a stored run migrates in memory, never on disk"


def test_a_newer_format_is_refused_in_one_line(tmp_path):
    run_dir = tmp_path / "future"
    shutil.copytree(STORED, run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    (run_dir / "meta.json").write_text(json.dumps({FORMAT_KEY: FORMAT_VERSION + 1, **meta}))
    with pytest.raises(InputError, match=f"run format {FORMAT_VERSION + 1} is not one this moecal reads"):
        RunDirectory(run_dir).read_meta()
    done = cli("summarize", run_dir, "--out", tmp_path / "summary.csv")
    assert done.returncode == 2 and not (tmp_path / "summary.csv").exists()
    error = done.stderr.strip()
    assert "\n" not in error and "run format" in error and "Traceback" not in error


@pytest.mark.parametrize("version", ["1", 1.0, -1, True, None])
def test_a_format_that_is_not_a_known_whole_number_is_refused(tmp_path, version):
    (tmp_path / "meta.json").write_text(json.dumps({FORMAT_KEY: version, "backend": "cpu"}))
    with pytest.raises(InputError, match="is not one this moecal reads"):
        RunDirectory(tmp_path).read_meta()


def _row():
    row = dict.fromkeys(SAMPLE_COLUMNS, "")
    row.update(backend="cpu", device="AMD EPYC (2 threads)", workload="layer", model="m", dff=1024, arm="fused")
    row.update(round=0, tok_s=10.0, status="ok")
    return row


def test_a_new_run_writes_the_current_format_first_and_keeps_it_out_of_provenance(tmp_path):
    with SampleWriter(tmp_path, {"backend": "cpu", "device": "AMD EPYC (2 threads)"}) as writer:
        writer.append(_row())
    on_disk = json.loads((tmp_path / "meta.json").read_text())
    assert next(iter(on_disk)) == FORMAT_KEY and on_disk[FORMAT_KEY] == FORMAT_VERSION
    assert FORMAT_KEY not in RunDirectory(tmp_path).read_meta(), "the format describes the files, not the run"
    assert f"# {FORMAT_KEY}:" not in (tmp_path / "samples.csv").read_text()


def test_continuing_a_format_0_run_upgrades_its_own_meta_json(tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(STORED, run_dir)
    before = json.loads((run_dir / "meta.json").read_text())
    with SampleWriter(run_dir, before) as writer:
        writer.append({**_row(), "model": "qwen3-30b-a3b", "dff": 99})
    after = json.loads((run_dir / "meta.json").read_text())
    assert after[FORMAT_KEY] == FORMAT_VERSION
    assert {k: v for k, v in after.items() if k not in (FORMAT_KEY, "segments")} == before
    assert [s["start"] for s in after["segments"]][0] == before["date"], "the pre-segment run stays its first segment"


def test_cell_numbers_reads_like_to_numeric_and_an_all_empty_column_is_nan():
    """cell_numbers' shortcut for an all-"" text column (the positions, probes and passes of an imported sweep) must
    give what pd.to_numeric(errors="coerce") gives, and so must every other column."""
    columns = [
        pd.Series(["", "", ""], dtype=object),
        pd.Series(["", "", ""], dtype="str"),
        pd.Series(["", "1", "x", "2.5"], dtype=object),
        pd.Series([1.0, np.nan, 3.0]),
        pd.Series([], dtype=object),
    ]
    for cells in columns:
        expected = pd.to_numeric(cells, errors="coerce").to_numpy(float)
        np.testing.assert_array_equal(cell_numbers(cells), expected)


def test_frame_csv_writes_what_pandas_to_csv_writes():
    """frame_csv builds the text column by column (a million-row summary through pandas' to_csv took 23 s); it must
    be byte for byte pandas' text of the same spreadsheet-safe cells: SYNTHETIC columns of every kind it takes a
    fast form for (floats with NaN, ±inf, -0.0 and exponents, ints, booleans, text needing quotes or a sheet_cell
    escape, missing text), constant and empty ones, a frame of constants only, one row, no rows, one column."""
    from harness.runs.formats import _pandas_csv, frame_csv

    rng = np.random.default_rng(3)
    n = 500
    words = ["a", "b,c", 'q"uote', "line\nbreak", "cr\rx", "=SUM(1)", "'x", "-1.5", " sp ", "", "ü€", "#h", "t\tx"]
    floats = np.where(rng.random(n) < 0.2, np.nan, rng.normal(0, 1, n) * 10.0 ** rng.integers(-20, 20, n))
    floats[:3] = [np.inf, -np.inf, -0.0]
    frame = pd.DataFrame(
        {
            "s": rng.choice(words, n).astype(object),
            "f": floats,
            "i": rng.integers(-5, 10**12, n),
            "b": rng.random(n) < 0.5,
            "c": "const",
            "a,b": np.nan,
            "ci": 0,
            "cf": 2.5e-7,
            "m": pd.Series(rng.choice(words, n)).where(rng.random(n) < 0.7, None).astype(object),
            "st": pd.Series(rng.choice(words, n), dtype="str"),
            "mixed": pd.Series([1.5, "x"] * (n // 2), dtype=object),
        }
    )
    fast = frame.drop(columns="mixed")
    for part in (frame, fast, fast.iloc[:0], fast.iloc[:1], fast[["c", "a,b", "ci"]], fast[["s"]], fast[["s", "m"]]):
        assert frame_csv(part) == _pandas_csv(part), list(part.columns)
