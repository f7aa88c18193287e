"""End-to-end sweeps of the command workload against the SYNTHETIC fake benchmark fixture (tests/fixtures)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.measure import sweep_setup
from harness.output.addendum.report_data import read_sidecar
from harness.runs import rundir
from harness.runs.formats import read_provenance, read_samples
from tests.support.helpers import FAKE_BENCH, FAKE_BENCH_COMMAND, REPO, cli, fake_config, wait_for


def _ok_rows(run_dir) -> pd.DataFrame:
    samples = read_samples(run_dir)
    return samples[samples["status"] == "ok"]


def test_sweep_writes_rotated_rounds_provenance_and_report(tmp_path):
    config = fake_config(tmp_path, measure={"rounds": 3, "warmup_runs": 1, "null_arm": True})
    out = tmp_path / "run"
    done = cli("sweep", config, "--out", out)
    assert done.returncode == 0, done.stderr
    samples = read_samples(out)
    assert len(samples) == 2 * 3 * 3  # points × arms (fused, fallback, null) × rounds; warm-ups not written
    assert set(samples["status"]) == {"ok"}
    # two passes over the grid: round 0 of every point, then rounds 1-2 of every point
    assert list(samples["pass"]) == ["1"] * 6 + ["2"] * 12 and list(samples["round"][:6]) == [0] * 6
    for (_, round_index), rows in samples.groupby(["model", "round"]):
        order = list(rows.sort_values("position")["arm"])
        arms = ["fused", "fallback", "null"]
        shift = round_index % 3
        assert order == arms[shift:] + arms[:shift]
    fused = samples[samples["arm"] == "fused"]
    assert set(fused["cap"]) == {20000} and set(samples[samples["arm"] != "fused"]["cap"]) == {1}
    # the fake's synthetic fused path is faster at small dff and slower at large dff
    medians = samples.groupby(["dff", "arm"])["tok_s"].median()
    assert medians[(1792, "fused")] > medians[(1792, "fallback")]
    assert medians[(14336, "fused")] < medians[(14336, "fallback")]
    header = read_provenance(out / "samples.csv")
    for key in ("date", "host", "os", "cpu", "harness_commit", "harness_dirty", "config_sha256", "command"):
        assert header.get(key), key
    assert header["config_path"] == str(config)
    assert (out / "meta.json").exists()
    assert (out / "summary.csv").exists()
    # the addendum and plot sit in the run directory, named with the run id
    assert sorted(p.name for p in out.glob("*-dff-crossover.*")) == ["run-dff-crossover.md", "run-dff-crossover.png"]
    assert "MLXCEL_FUSED_MOE_MAX_DFF=" in done.stderr  # the decision's line to apply


def test_rerun_resumes_without_redoing_work(tmp_path):
    config = fake_config(tmp_path)
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--no-report").returncode == 0
    first = read_samples(out)
    again = cli("sweep", config, "--resume", out, "--no-report")
    assert again.returncode == 0
    assert "(0 runs to do)" in again.stderr
    assert read_samples(out).equals(first)
    more = cli("sweep", config, "--resume", out, "--rounds", "4", "--no-report")
    assert more.returncode == 0 and "(4 runs to do)" in more.stderr
    assert len(read_samples(out)) == len(first) + 4


@pytest.mark.slow  # a real sweep process killed mid-run (a subprocess is the point here)
def test_sigkill_mid_sweep_then_resume_gives_one_ok_row_per_run(tmp_path):
    hold, counter = tmp_path / "hold", tmp_path / "count"
    config = fake_config(
        tmp_path,
        workload={
            "command": [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "--counter", str(counter), "--hold-after", "5"]
            + ["--hold-file", str(hold)],
            "timeout_s": 600,  # the held run waits for the kill, however slow this machine is
        },
        measure={"rounds": 4, "warmup_runs": 0},
    )
    out = tmp_path / "run"
    hold.touch()  # the 6th run waits while this file exists: the kill lands on a run in flight, after 5 rows
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "sweep", str(config), "--out", str(out), "--no-report"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(lambda: (tmp_path / "hold.held").exists(), "the 6th run to be held")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        hold.unlink()  # the orphaned run (its own session) goes on and ends; resumed runs are not held
    assert len(read_samples(out)) == 5, "the 5 runs before the held one, nothing of the killed run"
    assert (out / "samples.csv").read_bytes().endswith(b"\n")
    done = cli("sweep", config, "--resume", out, "--no-report")
    assert done.returncode == 0, done.stderr
    ok = _ok_rows(out)
    counts = ok.groupby(["model", "arm", "round"]).size()
    assert len(counts) == 2 * 2 * 4 and set(counts) == {1}


def test_a_torn_tail_is_no_row_and_is_cut_before_the_next_append(tmp_path):
    config = fake_config(tmp_path, measure={"rounds": 2})
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--no-report").returncode == 0
    path = out / "samples.csv"
    intact, rows = path.read_bytes(), read_samples(out)
    path.write_bytes(intact + b"fake,half,a,li")  # what a crash in the middle of a write would leave
    assert read_samples(out).equals(rows)
    assert cli("sweep", config, "--resume", out, "--no-report").returncode == 0
    assert path.read_bytes() == intact + b"fake,half,a,li"  # nothing to do: no file changes
    assert cli("sweep", config, "--resume", out, "--rounds", "3", "--no-report").returncode == 0
    grown = path.read_bytes()
    assert grown.startswith(intact) and b"half" not in grown and len(read_samples(out)) == len(rows) + 4


def test_a_hung_run_times_out_into_fail_rows_and_the_sweep_goes_on(tmp_path):
    """A run that never ends times out whatever the load, so the short timeout is safe only in a sweep of hung runs
    alone (a run that should succeed could take longer than 1 s on a busy machine): every run still gets its row,
    and the sweep then reports that none succeeded."""
    config = fake_config(
        tmp_path,
        workload={"command": [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "--hang"], "timeout_s": 1.0},
        models=[{"name": "hangs", "dff": 2048}],
        measure={"rounds": 2, "warmup_runs": 0},
    )
    out = tmp_path / "run"
    done = cli("sweep", config, "--out", out, "--no-report")
    assert done.returncode == 1 and "no run succeeded (4 failed, 0 skipped)" in done.stderr, done.stderr
    samples = read_samples(out)
    assert len(samples) == 2 * 2, "every run after the first timeout was still run"
    assert set(samples["status"]) == {"fail"} and samples["error"].str.contains("timed out after 1s").all()


def test_crashes_and_garbage_become_fail_rows_and_the_sweep_goes_on(tmp_path):
    counter = tmp_path / "count"
    config = fake_config(
        tmp_path,
        # the fake as an executable of its own (its #! line), as a user's benchmark is; elsewhere FAKE_BENCH_COMMAND
        workload={"command": [str(FAKE_BENCH), "--dff", "{dff}", "{extra}", "--counter", str(counter)]},
        models=[
            {"name": "crashes", "dff": 4096, "args": {"extra": "--crash-every=3"}},
            {"name": "garbage", "dff": 8192, "args": {"extra": "--garbage"}},
        ],
        measure={"rounds": 2, "warmup_runs": 0},
    )
    out = tmp_path / "run"
    done = cli("sweep", config, "--out", out, "--no-report")
    # the sweep goes on past every failure, then exits 1 naming the model that never ran (issue 28)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: {out / 'samples.csv'}: model 'garbage': all 4 runs")
    samples = read_samples(out)
    crashes = samples[samples["model"] == "crashes"]
    assert "fail" in set(crashes["status"]) and "ok" in set(crashes["status"])
    assert crashes[crashes["status"] == "fail"]["error"].str.contains("exit code 3.*out of memory").all()
    garbage = samples[samples["model"] == "garbage"]
    assert set(garbage["status"]) == {"fail"} and garbage["error"].str.contains("metric_regex did not match").all()


def test_missing_binary_fails_fast_before_any_run(tmp_path):
    config = fake_config(tmp_path, workload={"command": ["definitely-not-a-bench-binary", "{dff}"]})
    for args in (("sweep", config, "--out", tmp_path / "run"), ("sweep", config, "--dry-run")):
        done = cli(*args)
        assert done.returncode == 2
        assert "workload.command[0]: cannot run 'definitely-not-a-bench-binary'" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_dispatch_probe_records_when_the_fused_path_never_ran(tmp_path):
    config = fake_config(
        tmp_path,
        workload={"command": [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "{extra}"]},
        models=[
            {"name": "has-fused", "dff": 2048, "args": {"extra": "--noise=0.01"}},
            {"name": "no-fused-path", "dff": 4096, "args": {"extra": "--no-fused-path"}},
        ],
    )
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--no-report").returncode == 0
    fused = read_samples(out).query("arm == 'fused'")
    assert set(fused[fused["model"] == "has-fused"]["dispatch_ok"]) == {1}
    assert set(fused[fused["model"] == "no-fused-path"]["dispatch_ok"]) == {0}


def test_resume_refuses_a_different_config(tmp_path):
    config = fake_config(tmp_path, measure={"rounds": 1})
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--no-report").returncode == 0
    config.write_text(config.read_text().replace("rounds: 1", "rounds: 2"))
    done = cli("sweep", config, "--resume", out, "--no-report")
    assert done.returncode == 2 and "different config_sha256" in done.stderr


def test_plan_and_only(tmp_path):
    config = fake_config(tmp_path)
    done = cli("plan", config)
    assert done.returncode == 0 and "12 timed runs" in done.stdout
    out = tmp_path / "run"
    assert cli("sweep", config, "--out", out, "--only", "big", "--no-report").returncode == 0
    assert set(read_samples(out)["model"]) == {"big"}
    bad = cli("sweep", config, "--only", "nope", "--dry-run")
    assert bad.returncode == 2 and "--only 'nope'" in bad.stderr


def test_until_decided_spends_its_rounds_where_the_decision_can_change(tmp_path):
    # SYNTHETIC fake benchmark, seeded: fused wins ~4.5% at 1024 and 5120, ~2.5% at 6000 (the raise to 6000 turns on
    # it), loses ~2.5% at 10000; current default 4096
    config = fake_config(
        tmp_path,
        workload={
            "command": [
                *FAKE_BENCH_COMMAND,
                "--dff",
                "{dff}",
                "--noise",
                "0.008",
                "--seed",
                "0",
                "--counter",
                str(tmp_path / "n"),
            ]
        },
        models=[{"name": f"m{d}", "dff": d} for d in (1024, 5120, 6000, 10000)],
        measure={"rounds": 3, "until_decided": True, "max_rounds": 12},
    )
    out = tmp_path / "run"
    done = cli("sweep", config, "--out", out, "--no-report")
    assert done.returncode == 0, done.stderr
    samples = read_samples(out)
    rounds = samples.groupby("model")["round"].max() + 1
    # the first pass is two passes over the grid (round 0, then rounds 1-2); the looks' rounds are later visits
    assert (samples["pass"] == samples["round"].map(lambda r: "1" if r == 0 else "2")).all()
    assert list(samples["model"].iloc[:8:2]) == ["m1024", "m5120", "m6000", "m10000"]  # pass 1: the grid once
    assert 3 < rounds["m6000"] <= 12
    meta = json.loads((out / "meta.json").read_text())
    record = meta["until_decided"]
    # far from the cap: rounds only in a look's pass over the grid, which narrows the drift bound every interval
    # carries (decision_value.pass_flip prices it beside the points' own rounds); the points the raise turns on (5120,
    # 6000) get at least as many (the allocation prices rounds by wall time, and one clean CI run gave m6000 no more
    # than the pass's rounds: hence ≤, not <)
    assert rounds["m1024"] == rounds["m10000"] <= min(rounds["m5120"], rounds["m6000"]), (rounds, record["looks"])
    assert record["stop"] in ("decided", "flipped", "undecided", "max_rounds", "looks"), record
    assert record["reason"] in done.stderr
    # the allocation prices rounds by wall time, so the looks differ between runs: measured, the decision went
    # raise 5120 → keep 4096 → raise 5120 (→ raise 6000) in 3 of 3 runs; a flip is said with every look's decision
    history = " → ".join(record["looks_decisions"])
    assert record["flipped"] == (f"the decision flipped across looks ({history})" in record["reason"])
    assert (record["stop"] == "decided") or "; to settle it: " in record["reason"]
    # the run's policy: the config's (the defaults here) and the level the looks read the decision at
    level = meta["policy"]["look_confidence"]  # the look level's one key (harness.runs.run_meta)
    assert meta["policy"] == {"confidence": 0.95, "margin": 0.01, "look_confidence": level}
    assert "look_confidence" not in record
    assert record["rounds"]["m6000"] == rounds["m6000"] and record["extra_runs"] == 2 * (rounds.sum() - 12)
    # the recorded decision is the fixed analysis of every run at the look level (the run's default level since)
    fixed = json.loads(cli("crossover", out, "--json").stdout)
    assert fixed["confidence"] == level
    assert (record["action"], record["cap"]) == (fixed["action"], fixed["recommended_cap"])
    assert record["looks_decisions"][-1] == f"{record['action']} {record['cap']}"
    assert record["settled"] == (record["stop"] == "decided")
    refused = cli("sweep", config, "--out", tmp_path / "r2", "--budget", "soon")
    assert refused.returncode == 2 and "--budget" in refused.stderr


def test_an_until_decided_sweeps_end_and_a_later_crossover_read_the_same_look_level(tmp_path):
    """SYNTHETIC fake benchmark (seeded, as above): with 4 looks the look level (1 - 0.05/4) differs from the
    config's 0.95, so a reader that missed it would show. The sweep's end analyses the run and writes its report at
    the level it reads; a later `crossover` of the same run reads its meta.json through the same reader."""
    seeded = ["--noise", "0.008", "--seed", "0", "--counter", str(tmp_path / "n")]
    command = [*FAKE_BENCH_COMMAND, "--dff", "{dff}", *seeded]
    config = fake_config(
        tmp_path,
        workload={"command": command},
        models=[{"name": f"m{d}", "dff": d} for d in (1024, 6000, 10000)],
        measure={"rounds": 3, "until_decided": True, "max_rounds": 6, "looks": 4},
    )
    out = tmp_path / "run"
    done = cli("sweep", config, "--out", out, "--report-dir", tmp_path / "report", "--json")
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "meta.json").read_text())
    level = meta["policy"]["look_confidence"]
    assert level == pytest.approx(1 - 0.05 / 4) and "look_confidence" not in meta["until_decided"]
    printed = json.loads(done.stdout)
    assert printed["until_decided"]["look_confidence"] == level  # `sweep --json` still says the level it read at
    sidecar = read_sidecar(Path(printed["addendum"]))
    assert sidecar is not None
    assert sidecar["options"]["confidence"] == level, "the sweep's end read the decision at the look level"
    later = json.loads(cli("crossover", out, "--json").stdout)
    assert later["confidence"] == level
    assert (later["action"], later["recommended_cap"]) == (
        sidecar["decision"]["action"],
        sidecar["decision"]["recommended_cap"],
    )


def test_unusable_run_directories_and_backends_are_one_line_errors(tmp_path):
    config = fake_config(tmp_path)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "samples.csv").write_text("a,b\n1,2\n")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "meta.json").write_text("{")
    cases = [
        (("--resume", foreign), "samples.csv: columns: not a samples.csv: missing run_id, backend"),
        (("--resume", corrupt), "not a moecal meta.json"),
        (("--out", foreign), "already holds a run; continue it with --resume"),
        (("--out", config), "exists and is not a directory"),
        (("--backend", "tpu"), "unknown backend 'tpu'"),
    ]
    for args, message in cases:
        done = cli("sweep", config, *args, "--dry-run")
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "columns" in cli("summarize", foreign).stderr


def _git_repo_with_a_stored_run(tmp_path, config):
    """A checkout (git) whose results/ holds one committed run of `config`, like the repository's baselines."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert cli("sweep", config, "--out", tmp_path / "results" / "stored", "--no-report").returncode == 0
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "results"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "baseline"], check=True)
    return tmp_path / "results" / "stored"


def _snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and ".git" not in p.parts}


def test_new_sweeps_get_fresh_run_ids_and_never_write_into_a_stored_run(tmp_path, monkeypatch):
    config = fake_config(tmp_path, measure={"rounds": 1})
    stored = _git_repo_with_a_stored_run(tmp_path, config)
    before = _snapshot(tmp_path / "results")
    # a stored run with runs still to do (more rounds asked) is still never resumed or written
    for args in (("--resume", stored), ("--resume", stored, "--rounds", "3"), ("--out", stored)):
        done = cli("sweep", config, *args, "--no-report", cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith(f"error: {stored}: ") and len(done.stderr.splitlines()) == 1
    assert "tracked by git" in done.stderr
    bare = cli("sweep", config, "--rounds", "3", "--resume", "--no-report", cwd=tmp_path)
    assert bare.returncode == 2 and "no unfinished run of this config" in bare.stderr
    new_file = cli("summarize", stored, "--out", stored / "again.csv")
    assert new_file.returncode == 2 and "is a stored run (tracked by git): read-only" in new_file.stderr
    assert cli("summarize", stored).returncode == 0  # reading a stored run is fine; its summary stays as committed
    assert _snapshot(tmp_path / "results") == before
    # without --out: a new run directory results/<yyyymmddThhmm>-<backend>-<device>-<config>, twice in one minute
    minute = dt.datetime(2026, 11, 30, 19, 5, tzinfo=dt.UTC)  # fixed, so the test cannot straddle a minute
    monkeypatch.setattr(sweep_setup, "default_run_id", lambda *args: rundir.default_run_id(*args, now=minute))
    first = cli("sweep", config, "--no-report", cwd=tmp_path)
    second = cli("sweep", config, "--no-report", cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    new = sorted(set((tmp_path / "results").iterdir()) - {stored})
    assert len(new) == 2 and re.fullmatch(r"20261130T1905-cpu-[a-z0-9-]+-fake", new[0].name), new
    assert new[1].name == new[0].name + "-2"
    assert _snapshot(stored) == {p: b for p, b in before.items() if stored in p.parents}


def test_bare_resume_continues_the_newest_unfinished_run(tmp_path):
    config = fake_config(tmp_path, measure={"rounds": 1})
    results = tmp_path / "results"
    for name in ("20260101T0000-cpu-x-fake", "20260101T0001-cpu-x-fake"):
        assert cli("sweep", config, "--out", results / name, "--no-report").returncode == 0
    (results / "20260101T0001-cpu-x-fake" / "samples.csv").write_text(
        "".join((results / "20260101T0001-cpu-x-fake" / "samples.csv").read_text().splitlines(True)[:-2])
    )  # the newer run lost its last two runs, as if it had been killed
    done = cli("sweep", config, "--resume", "--no-report", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "20260101T0001-cpu-x-fake  (2 runs to do)" in done.stderr
    nothing = cli("sweep", config, "--resume", "--no-report", cwd=tmp_path)
    assert nothing.returncode == 2 and "no unfinished run" in nothing.stderr


def test_a_stored_or_foreign_addendum_is_never_overwritten(tmp_path):
    config = fake_config(tmp_path, measure={"rounds": 3})
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "run-dff-crossover.md").write_text("### an addendum of another run\n")
    (reports / "run.json").write_text('{"moecal_report": 3, "raw_data": "elsewhere"}')  # its sidecar
    before = _snapshot(reports)
    done = cli("sweep", config, "--out", tmp_path / "run", "--report-dir", reports)
    assert done.returncode == 2 and "holds the addendum of elsewhere" in done.stderr
    assert _snapshot(reports) == before


def test_non_finite_or_non_positive_throughput_is_a_failed_run_and_no_result_exits_1(tmp_path):
    printed = ["nan", "inf", "0", "-3"]
    config = fake_config(
        tmp_path,
        workload={
            "command": [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "--tok-s", "{extra}"],
            "metric_regex": r"\((\S+) tok/s",
        },
        models=[{"name": f"m{i}", "dff": 1024 * (i + 1), "args": {"extra": text}} for i, text in enumerate(printed)],
        measure={"rounds": 1},
    )
    out = tmp_path / "run"
    done = cli("sweep", config, "--out", out)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {out / 'samples.csv'}: no run succeeded (8 failed, 0 skipped)"), last
    samples = read_samples(out)
    assert set(samples["status"]) == {"fail"}
    for text in printed:
        errors = samples[samples["model"] == f"m{printed.index(text)}"]["error"]
        assert errors.str.contains(f"reported {float(text)!r} tok/s; a throughput must be finite and > 0").all()
    assert not (out / "summary.csv").exists() and not list(out.glob("*-dff-crossover.*"))


def test_a_timeout_kills_the_benchmarks_whole_process_group(tmp_path):
    child_pid = tmp_path / "child.pid"
    config = fake_config(
        tmp_path,
        workload={
            "command": [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "--hang", "--child-pid", str(child_pid)],
            "timeout_s": 1.0,
        },  # fmt: skip
        models=[{"name": "hangs", "dff": 1024}],
        measure={"rounds": 1},
    )
    done = cli("sweep", config, "--out", tmp_path / "run", "--no-report")
    assert done.returncode == 1 and "timed out after 1s" in done.stderr
    pid = int(child_pid.read_text())
    deadline = time.time() + 5
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the benchmark's child outlived the timeout"


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie — killed, not yet reaped by its parent — counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_contended_run_adds_a_run_to_the_progress_total(tmp_path):
    """The fake benchmark exits 75 (a GPU guard found contention) on its 5th invocation: that slot is run again, so
    the sweep writes 13 rows for its 12 planned runs and the progress line's total grows with it (it read 13/12)."""
    command = [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "--counter", str(tmp_path / "n"), "--contended-at", "5"]
    done = cli("sweep", fake_config(tmp_path, workload={"command": command}), "--out", tmp_path / "run", "--no-report")
    assert done.returncode == 0, done.stderr
    assert "(12 runs to do)" in done.stderr
    rows = read_samples(tmp_path / "run")
    assert len(rows) == 13 and rows["error"].str.startswith("contended: exit 75").sum() == 1
    assert re.findall(r"\b(\d+)/(\d+)\b", done.stderr)[-1] == ("13", "13")
