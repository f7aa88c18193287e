"""Bad inputs of `moecal sweep`: configs, resumes, hostile benchmarks, signals and writes that fail mid-run."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import InputError
from tests.bad_inputs.corpus import (
    DEEP,
    assert_case,
    assert_one_error_line,
    hostile_config,
    one_error_line,
    running,
    snapshot,
    strict_json,
)
from tests.support.helpers import REPO, cli, fake_config, wait_for
from tests.support.synth_sources import source_folder

SHORT_WRITE = """import resource, sys
from pathlib import Path
from harness.errors import InputError
from harness.runs.rundir import SampleWriter
resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))  # samples.csv reaches it part-way through a row
appended = 0
try:
    with SampleWriter(Path(sys.argv[1]), {"backend": "cpu", "device": "d"}) as writer:
        for index in range(1000):
            writer.append({"backend": "cpu", "device": "d", "model": "m", "dff": 1024, "arm": "fused",
                           "round": index, "tok_s": 5.0, "status": "ok", "error": "x" * (index % 7)})
            appended += 1
except InputError as exc:
    print(appended, exc)
"""


def _rows_agree(run: Path) -> tuple[int, int]:
    from harness.runs.formats import read_samples

    return len(read_samples(run)), json.loads((run / "meta.json").read_text())["segments"][-1]["rows"]


def _command_config(tmp_path: Path, script: str, models: list[dict], timeout_s: float = 60) -> Path:
    """A command-workload config running `script` (a SYNTHETIC stand-in for a benchmark) with {name} as argument."""
    (tmp_path / "bench.py").write_text(script)
    command = [sys.executable, str(tmp_path / "bench.py"), "{name}"]
    return fake_config(tmp_path, models=models, workload={"command": command, "timeout_s": timeout_s})


DAEMON = """import os, sys, time
if "--help" not in sys.argv:
    if os.fork() == 0:  # a daemon: fork, new session, fork again, output closed, parent gone at once
        os.setsid()
        if os.fork() == 0:
            fd = os.open(os.devnull, os.O_RDWR)
            for i in (0, 1, 2):
                os.dup2(fd, i)
            with open(os.path.join(os.path.dirname(sys.argv[0]), "daemons"), "a") as out:
                out.write(f"{os.getpid()}\\n")
            time.sleep(120)
        os._exit(0)
    time.sleep(0.5)  # the daemon has written its pid
print("Decode: 1.00 ms (100.00 tok/s)", flush=True)
"""


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting for whichever process adopted it (killed: it runs no more)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


# A SYNTHETIC benchmark: answers --help; from its second call on, hangs (after writing its pid) while a file `hang`
# lies beside it; fails every run of a model named `bad`; otherwise prints a metric line.
BENCH = """import os, sys, time
here = os.path.dirname(os.path.abspath(sys.argv[0]))
if "--help" in sys.argv:
    print("usage: bench.py NAME")
    sys.exit(0)
with open(os.path.join(here, "calls"), "a") as out:
    out.write(sys.argv[1] + "\\n")
if os.path.exists(os.path.join(here, "hang")) and len(open(os.path.join(here, "calls")).readlines()) > 1:
    with open(os.path.join(here, "hung"), "w") as out:
        out.write(str(os.getpid()))
    time.sleep(120)
if sys.argv[1] == "bad":
    sys.exit("bench: cannot load model bad")
print("Decode: 1.00 ms (100.00 tok/s)", flush=True)
"""


# A SYNTHETIC benchmark whose fused kernel (the fused arm: the cap above its Dff) logs a parity call with a NaN and an
# overflowing (1e999 → inf) error when the probe is on; every run prints a Decode line.
NAN_PARITY = """import os, sys
dff, cap = int(sys.argv[1]), int(os.environ.get("MLXCEL_FUSED_MOE_MAX_DFF", "0"))
if os.environ.get("MLXCEL_FUSED_MOE_PARITY_CHECK") == "1" and dff <= cap:
    print(f"[fused-moe-parity] call 1: fused-vs-ref=nan fused-vs-truth=1e999 ref-vs-truth=1.0e-03 ref_rms=1.0e+00 "
          f"truth_rms=1.0e+00 (act=0 k=8 din=2048 dff={dff})", file=sys.stderr)
print("Decode: 1.00 ms (100.00 tok/s)")
"""


class _Interrupted(Exception):
    pass


# (id, argv with {ws}, {config} and {out} placeholders, exit code, text the one error line must contain)
CASES = [
    ("config-unknown-key", ["sweep", "{ws}/unknown-key.yaml", "--dry-run"], 2, "unknown-key.yaml: colour"),
    ("rounds-not-a-number", ["sweep", "{config}", "--rounds", "many"], 2, "Invalid value for '--rounds'"),
    ("unknown-option", ["sweep", "{config}", "--bogus"], 2, "moecal sweep: No such option: --bogus"),
    ("unknown-backend", ["sweep", "{config}", "--backend", "tpu", "--dry-run"], 2, "unknown backend 'tpu'"),
    ("only-unknown-model", ["sweep", "{config}", "--only", "nope", "--dry-run"], 2, "--only 'nope'"),
    ("out-is-a-file", ["sweep", "{config}", "--out", "{config}", "--dry-run"], 2, "exists and is not a directory"),
    ("out-holds-a-run", ["sweep", "{config}", "--out", "{ws}/good", "--dry-run"], 2, "already holds a run"),
    ("out-unwritable", ["sweep", "{config}", "--out", "/proc/moecal-run", "--no-report"], 2, "/proc/moecal-run"),
    ("resume-missing-dir", ["sweep", "{config}", "--resume", "{ws}/nope", "--dry-run"], 2, "not a moecal run"),
    ("resume-foreign", ["sweep", "{config}", "--resume", "{ws}/foreign", "--dry-run"], 2, "not a samples.csv"),
    ("resume-meta-broken", ["sweep", "{config}", "--resume", "{ws}/meta-broken", "--dry-run"], 2, "not a moecal meta"),
    ("resume-other-config", ["sweep", "{config}", "--resume", "{ws}/good", "--dry-run"], 2, "different config_sha256"),
    ("resume-stored", ["sweep", "{config}", "--resume", "{ws}/stored", "--dry-run"], 2, "marks it read-only"),
    ("resume-and-out", ["sweep", "{config}", "--resume", "{ws}/good", "--out", "{ws}/x"], 2, "--out: "),
    ("resume-nothing", ["sweep", "{config}", "--resume", "--dry-run"], 2, "no unfinished run of this config"),
    # hardening v3 (issue 20): configs that could unforce an arm or reach a process
    ("cap-env-empty", ["sweep", "{ws}/cap-env-empty.yaml", "--dry-run"], 2, "cap_env: '' is not an environment"),
    ("cap-env-equals", ["sweep", "{ws}/cap-env-equals.yaml", "--dry-run"], 2, "cap_env: 'A=B' is not an env"),
    ("env-key-equals", ["sweep", "{ws}/env-key-equals.yaml", "--dry-run"], 2, "workload.env: 'X=Y' is not"),
    ("nul-in-model-name", ["sweep", "{ws}/nul-model-name.yaml", "--dry-run"], 2, "models[0].name: contains a NUL"),
    ("nul-in-env-value", ["sweep", "{ws}/nul-env-value.yaml", "--dry-run"], 2, "workload.env.X: contains a NUL"),
    ("dff-boolean", ["sweep", "{ws}/dff-boolean.yaml", "--dry-run"], 2, "models[0].dff: expected an integer, got a"),
    # run directories: no writes through symbolic links
    ("resume-samples-link", ["sweep", "{config}", "--resume", "{ws}/link-samples"], 2, "samples.csv: is a symbolic"),
    ("resume-meta-link", ["sweep", "{config}", "--resume", "{ws}/link-meta"], 2, "meta.json: is a symbolic link"),
    ("out-lock-link", ["sweep", "{config}", "--out", "{ws}/link-lock", "--no-report"], 2, ".lock: is a symbolic link"),
    # no silent wrong result; nothing deleted that moecal did not create
    ("check-env-is-cap", ["sweep", "{ws}/check-env-cap.yaml", "--dry-run"], 2, "check_env: 'MLXCEL_FUSED_MOE_MAX_DFF"),
    ("probe-env-same", ["sweep", "{ws}/probe-env-same.yaml", "--dry-run"], 2, "dispatch_check: check_env and thr"),
    ("threshold-env-bad", ["sweep", "{ws}/threshold-env-bad.yaml", "--dry-run"], 2, "threshold_env: 'A=B' is not"),
    ("parity-output-exists", ["sweep", "{ws}/parity-existing.yaml", "--dry-run"], 2, "output_file: '"),
    # benchmarks whose descendants outlive them: the deadline holds and nothing is left running
    ("bench-leaves-a-child", ["sweep", "{ws}/leaves-a-child.yaml", "--out", "{out}/r"], 1, "metric_regex did not"),
    ("bench-never-exits", ["sweep", "{ws}/never-exits.yaml", "--out", "{out}/r"], 2, "did not answer `--help`"),
]


@pytest.mark.parametrize(("argv", "code", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(ws, outside, tmp_path, argv, code, expected):
    """`{out}` is the case's own output folder (a fresh tmp folder): everything else must stay as it was."""
    assert_case(ws, outside, tmp_path, argv, code, expected)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_ends_the_sweep_like_ctrl_c(ws, outside, tmp_path, signum, code):
    """A real `moecal sweep` whose second run hangs (its benchmark with a child in its own session) gets SIGTERM or
    SIGHUP: the benchmark and its child end, the segment is closed (end, rows), the lock released, one line."""
    hung = tmp_path / "hung.pid"
    config = hostile_config(tmp_path, "hangs", "hangs-after-first.py", 60, str(tmp_path / "count"), str(hung))
    for name in ("hangs-after-first.py", "sleeper.py"):
        (tmp_path / name).write_text((ws / name).read_text())
    before = snapshot(ws, outside)
    run = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "harness", "sweep", str(config), "--out", str(run), "--no-report"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not hung.exists() and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.05)
        assert hung.exists(), "the second run never started"
        time.sleep(0.3)  # the sweep is inside the run now (its tree sampled)
        sweep.send_signal(signum)
        stdout, stderr = sweep.communicate(timeout=30)
    finally:
        sweep.kill()
    assert_one_error_line(stderr, stdout, code, sweep.returncode, f"terminated by {signal.Signals(signum).name}")
    segment = json.loads((run / "meta.json").read_text())["segments"][-1]
    assert segment["rows"] == 1 and segment["end"], segment
    assert not running(tmp_path), "the benchmark or its child is still running"
    with open(run / ".lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: no BlockingIOError
    assert snapshot(ws, outside) == before


@pytest.mark.parametrize("value", [float("nan"), -0.01, 0.2])
def test_a_nan_negative_or_large_parity_error_is_never_within(value):
    """The verification pass's figures (harness.measure.dispatch) and the addendum's phrase: `x > limit` is False for
    NaN, so NaN (and a negative RMS, which cannot be) must count as over, never "within"."""
    from harness.analysis.evidence.dispatch_evidence import parity_class
    from harness.measure.bench_output import ParityCall
    from harness.measure.dispatch import _figures

    calls = [ParityCall(1, 0.001, 0.001, 0.001, 1024, 2048, 8), ParityCall(2, value, 0.001, 0.001, 1024, 2048, 8)]
    figures = _figures(calls)
    assert figures["over"] == 1
    assert "CHECK" in parity_class(figures) and "within" not in parity_class(figures)


def test_a_file_size_limit_mid_row_leaves_meta_rows_exact(tmp_path):
    """A real short write (RLIMIT_FSIZE in a child process): the torn row is cut back, the error names the file,
    and samples.csv holds exactly the rows meta.json counts."""
    done = subprocess.run(
        [sys.executable, "-c", SHORT_WRITE, str(tmp_path / "run")], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    appended, message = done.stdout.split(" ", 1)
    assert done.returncode == 0 and "samples.csv: cannot append a row" in message, done.stdout + done.stderr
    assert _rows_agree(tmp_path / "run") == (int(appended), int(appended))


def test_a_meta_json_that_cannot_be_written_takes_its_row_back(tmp_path, monkeypatch):
    """Disk full between a row and meta.json (a fake writer: meta.json cannot be written from row 3 on): the row
    is taken back, so the counts still agree."""
    from harness.runs import rundir

    real, calls = rundir.RunDirectory.write_record, []

    def flaky(self, record):
        calls.append(1)
        if len(calls) >= 4:  # the start, rows 1 and 2; from row 3 on the disk stays full
            raise InputError(str(self.meta_path), "", "cannot write: No space left on device")
        return real(self, record)

    monkeypatch.setattr(rundir.RunDirectory, "write_record", flaky)
    row = {"backend": "cpu", "device": "d", "model": "m", "dff": 1024, "arm": "fused", "tok_s": 5.0, "status": "ok"}
    with pytest.raises(InputError, match="No space left"), rundir.SampleWriter(tmp_path / "run", {}) as writer:
        for index in range(5):
            writer.append({**row, "round": index})
    assert _rows_agree(tmp_path / "run") == (2, 2)


def test_a_benchmark_that_never_answers_help_costs_seconds_and_is_unusable(tmp_path):
    config = _command_config(
        tmp_path, "import time\ntime.sleep(120)\n", [{"name": "a", "dff": 1024}, {"name": "b", "dff": 4096}]
    )
    started = time.monotonic()
    done = cli("sweep", config, "--out", tmp_path / "run")
    one_error_line(done, "did not answer `--help` within 5 s")
    assert time.monotonic() - started < 30, "the --help check waited a run's timeout"


def test_ask_help_is_bounded_and_says_why(tmp_path):
    from harness.measure.proc import ask_help

    (tmp_path / "sleeps.py").write_text("import time\ntime.sleep(120)\n")
    started = time.monotonic()
    answer = ask_help([sys.executable, str(tmp_path / "sleeps.py")], os.environ, timeout_s=1)
    assert time.monotonic() - started < 10 and not answer.answered
    assert "did not answer `--help` within 1 s" in answer.unusable()
    missing = ask_help([str(tmp_path / "no-such-program")], os.environ)
    assert not missing.answered and missing.unusable().startswith("cannot be started")
    fine = ask_help([sys.executable], os.environ)
    assert fine.answered and fine.finished.returncode == 0 and fine.unusable() == ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="descendants are swept through /proc")
def test_a_double_forked_daemon_of_the_benchmark_ends_with_the_run(tmp_path):
    config = _command_config(tmp_path, DAEMON, [{"name": "a", "dff": 1024}])
    done = cli("sweep", config, "--out", tmp_path / "run", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    pids = [int(line) for line in (tmp_path / "daemons").read_text().split()]
    assert len(pids) >= 2  # one per arm
    time.sleep(0.2)
    alive = [pid for pid in pids if not _ended(pid)]
    for pid in alive:
        os.kill(pid, 9)
    assert not alive, "a daemon of the benchmark outlived the run"


def test_ctrl_c_prints_interrupted_and_the_exact_resume_command(tmp_path):
    """The real entry point, interrupted while a run hangs; then `sweep --resume DIR` without CONFIG continues with
    the run's own config (the one the printed command names), never this machine's preset."""
    config = _command_config(tmp_path, BENCH, [{"name": "a", "dff": 1024}])
    (tmp_path / "hang").write_text("")
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "harness", "sweep", str(config), "--out", str(run), "--rounds", "1"]
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wait_for(lambda: (tmp_path / "hung").exists() or proc.poll() is not None, "the benchmark to hang")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    last = stderr.strip().splitlines()[-1]
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    expected = f"moecal sweep {config} --rounds 1 --resume {run}"
    assert last == f"error: interrupted; resume with: {expected}", repr(stderr)
    (tmp_path / "hang").unlink()
    resumed = cli(*expected.split()[1:])
    assert resumed.returncode == 0, resumed.stderr
    again = cli("sweep", "--resume", run, "--rounds", "2", "--no-report")
    assert again.returncode == 0, again.stderr
    assert f"config: {config} (recorded in {run / 'meta.json'})" in again.stderr


def test_resume_without_config_when_the_recorded_config_is_gone(tmp_path):
    config = _command_config(tmp_path, BENCH, [{"name": "a", "dff": 1024}])
    run = tmp_path / "run"
    assert cli("sweep", config, "--out", run, "--rounds", "1", "--no-report").returncode == 0
    config.unlink()
    one_error_line(cli("sweep", "--resume", run), "config_path: ")
    one_error_line(cli("sweep", "--resume", tmp_path), "not a run directory")


@pytest.mark.parametrize("problem", ["missing", "no-config", "broken-config", "deep-config"])
def test_every_model_folder_is_checked_before_any_timed_run(tmp_path, problem):
    good = source_folder(tmp_path / "models", "mixtral")
    bad = tmp_path / "models" / "bad"
    if problem != "missing":
        bad.mkdir()
    if problem == "broken-config":
        (bad / "config.json").write_text("{")
    if problem == "deep-config":
        (bad / "config.json").write_text(DEEP)
    models = [
        {"name": "good", "dff": 1024, "model_path": str(good)},
        {"name": "b", "dff": 4096, "model_path": str(bad)},
    ]
    config = _command_config(tmp_path, BENCH, models)
    expected = {
        "missing": "does not exist",
        "no-config": "no config.json in",
        "broken-config": "invalid JSON",
        "deep-config": "nested 100000 levels deep",
    }[problem]
    done = cli("sweep", config, "--out", tmp_path / "run")
    one_error_line(done, "config.yaml: models[1].model_path: ")
    assert expected in done.stderr and "(model 'b')" in done.stderr
    assert not (tmp_path / "calls").exists(), "a benchmark run started before the folders were checked"


def test_a_model_whose_every_run_failed_makes_the_sweep_exit_1(tmp_path):
    config = _command_config(tmp_path, BENCH, [{"name": "good", "dff": 1024}, {"name": "bad", "dff": 4096}])
    done = cli("sweep", config, "--out", tmp_path / "run", "--rounds", "2", "--no-report")
    one_error_line(done, "model 'bad': all 4 runs failed; first error:", code=1)
    assert "cannot load model bad" in done.stderr.strip().splitlines()[-1]


def test_a_nan_parity_figure_is_recorded_readably_and_reported(tmp_path):
    import json

    (tmp_path / "bench.py").write_text(NAN_PARITY)
    workload = {
        "command": [sys.executable, str(tmp_path / "bench.py"), "{dff}"],
        "dispatch_check": {},
        "dispatch_probe": None,
    }
    config = fake_config(tmp_path, models=[{"name": "a", "dff": 1024}, {"name": "b", "dff": 2048}], workload=workload)
    run = tmp_path / "run"
    done = cli("sweep", config, "--out", run, "--rounds", "2")
    assert done.returncode in (0, 1), done.stderr
    record = json.loads((run / "verification.json").read_text())  # strict: no NaN token in the file
    fused = next(r for r in record["models"]["a"]["runs"] if r["path"] == "fused")
    assert fused["fused_vs_ref_worst"] == "nan" and fused["fused_vs_truth_worst"] == "inf"
    summary = cli("summarize", run, "--json")
    assert summary.returncode == 0, summary.stderr
    points = {p["model"]: p for p in json.loads(summary.stdout)["points"]}
    assert "CHECK: non-finite" in points["a"]["parity_class"]
    assert points["a"]["fused_vs_ref_worst"] is None  # JSON output: null, never NaN


def test_an_interrupted_until_decided_sweep_resumes_at_the_next_look(tmp_path, monkeypatch):
    """SYNTHETIC fake benchmark (seeded): the sweep is interrupted right after its first look was saved. meta.json
    then holds the look count and the look level (a later analysis reads the run at it), and `--resume
    --until-decided` goes on with look 2: the alpha spent by the first look is not spent again."""
    from harness.measure import allocation
    from tests.support.helpers import FAKE_BENCH_COMMAND

    seeded = ["--noise", "0.008", "--seed", "0", "--counter", str(tmp_path / "n")]
    command = [*FAKE_BENCH_COMMAND, "--dff", "{dff}", *seeded]
    config = fake_config(
        tmp_path,
        workload={"command": command},
        models=[{"name": f"m{d}", "dff": d} for d in (1024, 5120, 6000, 10000)],
        measure={"rounds": 3, "until_decided": True, "max_rounds": 12, "looks": 4},
    )
    saved = allocation.record_into

    def save_then_stop(meta, record):
        saved(meta, record)
        raise _Interrupted

    monkeypatch.setattr(allocation, "record_into", save_then_stop)
    out = tmp_path / "run"
    with pytest.raises(_Interrupted):
        from harness.cli.app import main

        main(["sweep", str(config), "--out", str(out), "--no-report"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["until_decided"]["looks"] == 1
    level = meta["policy"]["look_confidence"]  # written once, in the policy (harness.runs.run_meta)
    assert level == pytest.approx(1 - 0.05 / 4) and "look_confidence" not in meta["until_decided"]
    assert json.loads(cli("crossover", out, "--json").stdout)["confidence"] == pytest.approx(level)
    monkeypatch.setattr(allocation, "record_into", saved)
    resumed = cli("sweep", config, f"--resume={out}", "--until-decided", "--no-report")
    assert resumed.returncode == 0, resumed.stderr
    looks = [line for line in (resumed.stdout + resumed.stderr).splitlines() if line.lstrip().startswith("look ")]
    assert looks and looks[0].lstrip().startswith("look 2/4"), looks
    assert json.loads((out / "meta.json").read_text())["until_decided"]["looks"] == 1 + len(looks)


@pytest.mark.parametrize(
    ("measure", "flags", "expected"),
    [
        ({"max_rounds": 100000}, [], "measure.max_rounds: 100000: at most"),
        ({"max_rounds": 10**12}, [], "measure.max_rounds: 1000000000000: at most"),
        ({}, ["--max-rounds", "100000"], "--max-rounds: 100000: at most"),
    ],
)
def test_max_rounds_beyond_what_a_look_can_analyse_is_one_line(tmp_path, measure, flags, expected):
    config = fake_config(tmp_path, measure={"rounds": 3, "until_decided": True, **measure})
    started = time.monotonic()
    one_error_line(cli("sweep", config, "--out", tmp_path / "run", *flags), expected)
    assert not (tmp_path / "run").exists()
    if not flags:
        one_error_line(cli("plan", config), expected)
    assert time.monotonic() - started < 30


def test_sweep_dry_run_json_prints_the_plan_as_json(tmp_path):
    done = cli("sweep", fake_config(tmp_path), "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    plan = strict_json(done.stdout)
    assert plan["dry_run"] is True and plan["points"] and not (tmp_path / "results").exists()


def test_sweep_json_answers_with_an_object_when_every_run_fails(tmp_path):
    (tmp_path / "bench.py").write_text("import sys\nif '--help' in sys.argv:\n    sys.exit(0)\nsys.exit('broken')\n")
    workload = {"command": [sys.executable, str(tmp_path / "bench.py"), "{dff}"], "dispatch_probe": None}
    config = fake_config(tmp_path, models=[{"name": "a", "dff": 1024}], workload=workload)
    done = cli("sweep", config, "--out", tmp_path / "run", "--rounds", "1", "--json")
    assert done.returncode == 1
    answer = strict_json(done.stdout)
    assert "no run succeeded" in answer["error"] and answer["run_dir"] == str(tmp_path / "run")
