"""Run directories: one writer (flock), segments in meta.json, validated samples — SYNTHETIC rows, no timing."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from harness.errors import InputError
from harness.runs.formats import SAMPLE_COLUMNS, csv_line, read_samples
from harness.runs.rundir import (
    RunLock,
    SampleWriter,
    default_run_id,
    device_slug,
    mixed_settings,
    new_segment,
    segments,
)
from tests.support.helpers import REPO, cli, fake_config

HOLD_LOCK = """import sys, time
from harness.runs.rundir import RunLock
with RunLock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_run_ids_are_readable_and_carry_time_backend_device_and_config():
    when = dt.datetime(2026, 11, 30, 19, 5, tzinfo=dt.UTC)
    assert default_run_id("cpu-smoke", "cpu", "AMD EPYC (2 threads)", when) == "20261130T1905-cpu-amd-epyc-cpu-smoke"
    assert device_slug("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz") == "intel-xeon"
    assert device_slug("NVIDIA H200") == "nvidia-h200" and device_slug("") == "device"


def test_a_second_writer_is_refused_and_a_killed_writers_lock_does_not_block(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(InputError) as caught, RunLock(tmp_path):
            pass
        assert str(caught.value).startswith(f"{tmp_path}: in use by pid {holder.pid} since 20")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunLock(tmp_path):  # the kernel released the dead process's lock; its stale .lock file does not matter
        assert (tmp_path / ".lock").read_text().split()[0] == str(os.getpid())


def test_a_sweep_into_a_locked_run_exits_2_and_writes_nothing(tmp_path):
    config = fake_config(tmp_path, measure={"rounds": 1})
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--no-report").returncode == 0
    before = (out / "samples.csv").read_bytes()
    with RunLock(out):
        done = cli("sweep", config, "--resume", out, "--rounds", "2", "--no-report")
    assert (
        done.returncode == 2
        and done.stderr.splitlines()[-1]
        == f"error: {out}: in use by pid {os.getpid()} since "
        + ((out / ".lock").read_text().split()[1])
        + "; wait for it to finish or stop it"
    )
    assert (out / "samples.csv").read_bytes() == before


def test_segments_record_each_resume_and_a_no_op_resume_changes_nothing(tmp_path):
    config = fake_config(tmp_path, measure={"rounds": 1})
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--no-report").returncode == 0
    assert cli("sweep", config, "--resume", out, "--rounds", "2", "--no-report").returncode == 0
    meta = json.loads((out / "meta.json").read_text())
    first, second = meta["segments"]
    assert (first["rows"], second["rows"]) == (4, 4)
    assert first["start"] <= first["end"] <= second["start"] <= second["end"]
    assert first["kernel_source_hash"] == meta["kernel_source_hash"] and "--rounds 2" in second["command"]
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    again = cli("sweep", config, "--resume", out, "--rounds", "2")
    assert again.returncode == 0 and "no file changed" in again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files


def test_resume_refuses_other_kernels_or_launch_settings_unless_allowed(tmp_path, monkeypatch):
    config = fake_config(tmp_path, measure={"rounds": 1})
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--no-report").returncode == 0
    monkeypatch.setenv("MOECAL_CUDA_SGY", "4")
    refused = cli("sweep", config, "--resume", out, "--rounds", "2", "--no-report")
    assert refused.returncode == 2 and 'launch {} before, {"MOECAL_CUDA_SGY": "4"} now' in refused.stderr
    allowed = cli("sweep", config, "--resume", out, "--rounds", "2", "--allow-mixed", "--no-report")
    assert allowed.returncode == 0, allowed.stderr
    last = json.loads((out / "meta.json").read_text())["segments"][-1]
    assert last["launch"] == {"MOECAL_CUDA_SGY": "4"} and last["mixed"][0].startswith("launch")


def test_a_run_written_before_segments_counts_as_one():
    legacy = {"date": "2026-11-30T06:55:31Z", "kernel_source_hash": "abc", "harness_commit": "c0ffee"}
    assert segments(legacy) == [
        {"start": "2026-11-30T06:55:31Z", "kernel_source_hash": "abc", "harness_commit": "c0ffee"}
    ]
    assert mixed_settings(legacy, new_segment({"kernel_source_hash": "def"})) == [
        'kernel_source_hash "abc" before, "def" now'
    ]
    assert mixed_settings(legacy, new_segment({"kernel_source_hash": "abc"})) == []


def _row(**values):
    base = dict.fromkeys(SAMPLE_COLUMNS, "")
    base.update(backend="cpu", device="d", workload="layer", model="m", dff=1024, arm="fused", round=0, tok_s=10.0,
                status="ok")  # fmt: skip
    base.update(values)
    return base


@pytest.mark.parametrize(
    ("rows", "extra", "message"),
    [
        ([_row(tok_s="nan")], "", "tok_s: line 3: 'nan' is not a number"),
        ([_row(tok_s="inf")], "", "tok_s: line 3: inf must be finite and > 0"),
        ([_row(tok_s=-1)], "", "tok_s: line 3: -1 must be finite and > 0"),
        ([_row(), _row(tok_s=11)], "", "round: line 4: this (point, arm, round) is already an ok row"),
        ([_row(), _row(device="other", arm="fallback")], "", "device: line 4: 'other': a run holds one device"),
        ([_row(arm="both")], "", "arm: line 3: 'both' is not one of fused, fallback, null"),
        ([_row()], "cpu,d,short\n", "line 4: 3 fields, the header has 29"),
    ],
)
def test_samples_are_validated_completely(tmp_path, rows, extra, message):
    path = tmp_path / "samples.csv"
    path.write_text("# host: x\n" + csv_line(SAMPLE_COLUMNS) + "".join(csv_line(r.values()) for r in rows) + extra)
    with pytest.raises(InputError) as caught:
        read_samples(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_a_failed_row_then_an_ok_row_of_the_same_run_is_a_resume_not_a_duplicate(tmp_path):
    with SampleWriter(tmp_path, {"backend": "cpu"}) as writer:
        writer.append(_row(status="fail", tok_s="", error="timed out"))
        writer.append(_row())
    assert list(read_samples(tmp_path)["status"]) == ["fail", "ok"]


def test_a_full_disk_is_an_input_error_naming_the_file(tmp_path, monkeypatch):
    def no_space(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writer = SampleWriter(tmp_path, {"backend": "cpu"})
    writer.append(_row())
    monkeypatch.setattr(os, "write", no_space)  # SYNTHETIC: what a full disk answers
    with pytest.raises(InputError, match=r"samples.csv: cannot append a row: No space left on device"):
        writer.append(_row(round=1))
    monkeypatch.undo()
    writer.close()
    assert (
        len(read_samples(tmp_path)) == 1
        and json.loads((tmp_path / "meta.json").read_text())["segments"][0]["rows"] == 1
    )


def test_the_kernel_source_hash_follows_the_kernel_files(tmp_path, monkeypatch):
    from harness.runs import provenance

    monkeypatch.setattr(provenance.resources, "kernel_dir", lambda: tmp_path)
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "moe.cu").write_text("__global__ void k() {}\n")
    before = provenance.kernel_source_hash()
    assert provenance.kernel_source_hash() == before
    (tmp_path / "cuda" / "moe.cu").write_text("__global__ void k() { /* sgy 4 */ }\n")
    assert provenance.kernel_source_hash() != before


def test_a_run_written_before_the_knobs_column_reads_and_resumes_with_its_own_header(tmp_path):
    """A run from before the knobs and pass columns: both read as "" (one pass, no knob setting)."""
    old = [c for c in SAMPLE_COLUMNS if c not in ("knobs", "pass")]
    path = tmp_path / "samples.csv"
    path.write_text("# host: x\n" + csv_line(old) + csv_line(_row(round=0)[c] for c in old))
    with SampleWriter(tmp_path, {"backend": "cpu"}) as writer:
        writer.append(_row(round=1))
        with pytest.raises(InputError, match="knobs: this run's samples.csv has no such column"):
            writer.append(_row(round=2, knobs="MLXCEL_FUSED_MOE_SGY=4"))
    frame = read_samples(path)
    assert list(frame["round"]) == [0, 1] and list(frame["knobs"]) == ["", ""] and list(frame["pass"]) == ["", ""]
