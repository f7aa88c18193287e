"""Hardening v4 (items 4-6): no traceback, no hang, bounded resources and what a user meets first, through the real
CLI. Every input is SYNTHETIC, built in a tmp folder (tiny model folders, synthetic runs, small scripts standing in
for a benchmark); each refused case ends in one `error:` line with exit code 2 and no traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, cli, fake_config, run_cli, wait_for
from tests.synth_sources import source_folder
from tests.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run


def _one_error_line(done, expected: str, code: int = 2) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code, done.stderr + done.stdout
    assert lines and lines[-1].startswith("error: "), done.stderr
    assert sum(line.startswith("error: ") for line in lines) == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert expected in lines[-1], lines[-1]


LAYOUT_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "num_hidden_layers")
BAD_VALUES = {"missing": None, "zero": 0, "negative": -4, "fraction": 2.5, "text": "many"}


@pytest.mark.parametrize("key", LAYOUT_KEYS)
@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_synth_refuses_a_bad_layout_key(tmp_path, key, kind):
    if kind == "missing" and key in ("num_key_value_heads", "head_dim"):
        pytest.skip("optional keys: missing means the family's default")
    source = source_folder(tmp_path, "qwen3_moe")
    config = json.loads((source / "config.json").read_text())
    if BAD_VALUES[kind] is None:
        config.pop(key)
    else:
        config[key] = BAD_VALUES[kind]
    (source / "config.json").write_text(json.dumps(config))
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "out", "--dry-run")
    _one_error_line(done, key)


def _run(root: Path, name: str, dffs: list[int], seed: int = 1, **meta: object) -> Path:
    return write_run(root / name, synthetic_samples(linear_curve(dffs, 5000), seed=seed), {**SYNTHETIC_META, **meta})


@pytest.mark.parametrize("value", ["inf", "nan", "1e300"])
def test_synth_refuses_a_shard_size_that_is_no_size(tmp_path, value):
    source = source_folder(tmp_path, "mixtral")
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "out", "--shard-gb", value)
    _one_error_line(done, "--shard-gb")


def test_synth_refuses_ten_million_layers_in_the_plan(tmp_path):
    source = source_folder(tmp_path, "mixtral", num_hidden_layers=10**7)
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "out", "--dry-run")
    _one_error_line(done, "num_hidden_layers: 10000000 layers: at most")


def test_a_disk_that_fills_mid_write_is_one_line_naming_the_checkpoint(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk: the write fails part-way through the shards (MLX: RuntimeError)."""
    source = source_folder(tmp_path, "qwen3_moe")
    out = tmp_path / "out"
    limit = "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048)); "
    argv = ["synth", "--like", str(source), "--dff", "64", "--out", str(out), "--dtype", "float32"]
    code = limit + f"sys.argv = ['moecal', *{argv!r}]; runpy.run_module('harness', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    _one_error_line(done, f"{out / 'qwen3_moe-tiny-dff64'}: not written, nothing kept")
    assert ".partial-" not in done.stderr and os.listdir(out) == []


def test_a_killed_synths_partial_folder_is_removed_by_the_next(tmp_path):
    source = source_folder(tmp_path, "qwen3_moe")
    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = out / f".qwen3_moe-tiny-dff64.partial-{dead.stdout.strip()}"
    stale.mkdir(parents=True)
    (stale / "shard-00000.part.safetensors").write_bytes(b"half")
    live = out / f".qwen3_moe-tiny-dff64.partial-{os.getppid()}"  # a running process (in-process, getpid is ours)
    live.mkdir()
    dry = cli("synth", "--like", source, "--dff", "64", "--out", out, "--dry-run")
    assert dry.returncode == 0 and f"would remove {stale.name}" in dry.stdout and stale.exists()
    done = cli("synth", "--like", source, "--dff", "64", "--out", out, "--dtype", "float32")
    assert done.returncode == 0, done.stderr
    assert f"removed {stale.name}" in done.stdout and not stale.exists()
    assert f"kept {live.name}: its synth process is still running" in done.stdout and live.exists()


def test_compare_and_report_previous_with_one_shared_point(tmp_path):
    a, b = _run(tmp_path, "a", [1024, 4096], seed=1), _run(tmp_path, "b", [4096, 8192], seed=2)
    done = cli("compare", a, b)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "Dff   4096" in done.stdout and "in A only" in done.stdout and "in B only" in done.stdout
    report = cli("report", b, "--previous", a, "--out", tmp_path / "reports")
    assert report.returncode == 0, report.stderr


@pytest.mark.parametrize("pin", ["$\\undefinedcmd$", "$^$", "a $ b", "50% _x_ {y} \\n"])
def test_a_library_pin_with_tex_is_plotted_as_text(tmp_path, pin):
    runs = [_run(tmp_path, "a", [1024, 4096, 8192], library_pin=pin), _run(tmp_path, "b", [1024, 4096, 8192])]
    done = cli("history", *runs, "--out", tmp_path / "history.png")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "history.png").stat().st_size > 0


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        ("meta.json", DEEP, "meta.json: not a moecal meta.json: (file): nested 100000 levels deep"),
        ("meta.json", '{"format": 1e400}', "meta.json: not a moecal meta.json: (file): invalid JSON"),
        ("verification.json", DEEP, "verification.json: not a moecal verification record: (file): nested"),
        ("verification.json", '{"models": {"synthetic-layer": {}}}', "models.synthetic-layer: expected {dff: N"),
        (
            "verification.json",
            '{"models": {"synthetic-layer": {"dff": 1024, "runs": [{"path": "fused"}]}}}',
            "models.synthetic-layer.runs[0].status: missing or not str",
        ),
        (
            "verification.json",
            '{"models": {"m": {"dff": 1024, "runs": []}}}',
            "models.m.runs: expected one fused and one fallback run",
        ),
    ],
    ids=["meta-deep", "meta-1e400", "verification-deep", "verification-no-keys", "run-no-keys", "runs-empty"],
)
def test_a_run_record_nested_too_deep_or_missing_keys(tmp_path, file, text, expected):
    run = _run(tmp_path, "run", [1024, 4096, 8192])
    (run / file).write_text(text)
    _one_error_line(cli("summarize", run, "--out", tmp_path / "summary.csv"), expected)


def test_a_sidecar_nested_too_deep(tmp_path):
    """The addendum's record (check-reports) and a synthetic checkpoint's record (init reads it as real)."""
    run = _run(tmp_path, "run", [1024, 4096, 8192])
    reports = tmp_path / "reports"
    assert cli("report", run, "--out", reports).returncode == 0
    (sidecar,) = [p for p in reports.glob("*.json")]
    sidecar.write_text(DEEP)
    done = cli("check-reports", reports)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    said = done.stdout + done.stderr
    assert "unreadable sidecar" in said and "nested 100000 levels deep" in said
    models = tmp_path / "models"
    source = source_folder(models, "mixtral")
    (source / "moecal-synth.json").write_text(DEEP)
    init = cli("init", "--models", models, "--out", tmp_path / "init.yaml", "--bench", sys.executable)
    assert "Traceback" not in init.stderr + init.stdout, init.stderr


def _mlxcel_tree(root: Path, metal: str) -> Path:
    (root / "src" / "models").mkdir(parents=True)
    text = f"const FUSED_MOE_MAX_DFF_METAL: i32 = {metal};\nconst FUSED_MOE_MAX_DFF_CUDA: i32 = 8192;\n"
    (root / "src" / "models" / "switch_layers.rs").write_text(text)
    return root


def test_switch_layers_with_a_5000_digit_cap_or_a_fifo(tmp_path):
    run = _run(tmp_path, "run", [1024, 4096, 8192])
    huge = _mlxcel_tree(tmp_path / "huge", "9" * 5000)
    _one_error_line(cli("report", run, "--out", tmp_path / "r1", "--mlxcel-src", huge), "(5000 digits) is not a cap")
    fifo = tmp_path / "fifo"
    (fifo / "src" / "models").mkdir(parents=True)
    os.mkfifo(fifo / "src" / "models" / "switch_layers.rs")
    started = time.monotonic()
    _one_error_line(cli("report", run, "--out", tmp_path / "r2", "--mlxcel-src", fifo), "not a regular file")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{config: c.yaml, where: {hw_a: .inf}}", "amount must be > 0 and at most 1e+06, got inf"),
        ("{config: c.yaml, where: {hw_a: .nan}}", "got nan"),
        ("{config: c.yaml, where: {hw_a: 1}, workers: 1000000000}", "workers: Input should be less than or equal"),
    ],
    ids=["where-inf", "where-nan", "workers-1e9"],
)
def test_a_fleet_entry_out_of_bounds(tmp_path, entry, expected):
    fake_config(tmp_path).rename(tmp_path / "c.yaml")
    (tmp_path / "fleet.yaml").write_text(f"entries:\n  - {entry}\n")
    _one_error_line(cli("fleet", tmp_path / "fleet.yaml", "--dry-run", "--out", tmp_path / "fleet"), expected)


def test_generated_tokens_inf_in_a_bench_csv(tmp_path):
    from tests.fake_models import CONFIGS, write_models
    from tests.test_mlxcel_bench_csv import _args, _files

    models = write_models(tmp_path, {"qwen3-30b-a3b-4bit": CONFIGS["qwen3-30b-a3b-4bit"]})
    fallback = _files(tmp_path, "fallback", {"qwen3-30b-a3b-4bit": 100.0}, runs=1)
    fused = _files(tmp_path, "fused", {"qwen3-30b-a3b-4bit": 107.0}, runs=1)
    lines = fused[0].read_text().splitlines()
    cells = lines[1].split(",")
    cells[3] = "inf"
    lines[1] = ",".join(cells)
    fused[0].write_text("\n".join(lines) + "\n")
    done = cli("import-mlxcel", *_args(fallback, fused), "--models", models, "--out", tmp_path / "run")
    _one_error_line(done, "generated_tokens: line 2: must be a finite number > 0, got 'inf'")


# --- item 5: no hang, bounded resources -------------------------------------------------------------------------------


def _command_config(tmp_path: Path, script: str, models: list[dict], timeout_s: float = 60) -> Path:
    """A command-workload config running `script` (a SYNTHETIC stand-in for a benchmark) with {name} as argument."""
    (tmp_path / "bench.py").write_text(script)
    command = [sys.executable, str(tmp_path / "bench.py"), "{name}"]
    return fake_config(tmp_path, models=models, workload={"command": command, "timeout_s": timeout_s})


def test_a_benchmark_that_never_answers_help_costs_seconds_and_is_unusable(tmp_path):
    config = _command_config(
        tmp_path, "import time\ntime.sleep(120)\n", [{"name": "a", "dff": 1024}, {"name": "b", "dff": 4096}]
    )
    started = time.monotonic()
    done = cli("sweep", config, "--out", tmp_path / "run")
    _one_error_line(done, "did not answer `--help` within 5 s")
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


@pytest.mark.parametrize("spec", ["{dff:>999999999}", "{dff:.999999999}", "{dff:{dff}}", "{name:d}"])
def test_a_format_spec_that_is_no_flag_is_refused(tmp_path, spec):
    config = fake_config(tmp_path, workload={"command": [sys.executable, "bench.py", "--dff", spec]})
    _one_error_line(cli("plan", config), "models[0]")


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


# --- item 6: what a user meets first ---------------------------------------------------------------------------------

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
    _one_error_line(cli("sweep", "--resume", run), "config_path: ")
    _one_error_line(cli("sweep", "--resume", tmp_path), "not a run directory")


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
    _one_error_line(done, "config.yaml: models[1].model_path: ")
    assert expected in done.stderr and "(model 'b')" in done.stderr
    assert not (tmp_path / "calls").exists(), "a benchmark run started before the folders were checked"


def test_a_model_whose_every_run_failed_makes_the_sweep_exit_1(tmp_path):
    config = _command_config(tmp_path, BENCH, [{"name": "good", "dff": 1024}, {"name": "bad", "dff": 4096}])
    done = cli("sweep", config, "--out", tmp_path / "run", "--rounds", "2", "--no-report")
    _one_error_line(done, "model 'bad': all 4 runs failed; first error:", code=1)
    assert "cannot load model bad" in done.stderr.strip().splitlines()[-1]


def test_init_checks_that_the_benchmark_runs(tmp_path):
    models = tmp_path / "models"
    source_folder(models, "mixtral")
    missing = cli("init", "--models", models, "--out", tmp_path / "a.yaml", "--bench", str(tmp_path / "no-bench"))
    _one_error_line(missing, "cannot be started")
    (tmp_path / "sleeps.py").write_text("import time\ntime.sleep(120)\n")
    started = time.monotonic()
    hangs = cli(
        "init", "--models", models, "--out", tmp_path / "b.yaml", "--bench", f"{sys.executable} {tmp_path}/sleeps.py"
    )
    _one_error_line(hangs, "did not answer `--help` within 5 s")
    assert time.monotonic() - started < 30 and not (tmp_path / "a.yaml").exists()


def test_json_text_is_the_same_value_one_point_per_line():
    from harness.json_output import json_text

    value = {"points": [{"model": 'a,\n"b"', "ratio": 1.5, "nested": {"x": [1, None]}}, {"model": "c"}], "empty": []}
    value |= {"margin": 0.02, "text": "é"}
    text = json_text(value)
    assert json.loads(text) == value
    assert len(text.splitlines()) == 9  # {, 4 fields, the two points and the closing ] on lines of their own, }
    assert json.loads(json_text([1, 2])) == [1, 2] and json.loads(json_text({})) == {}


def test_a_large_mlxcel_csv_summarises_to_one_json_object(tmp_path):
    """Correctness on 2,000 SYNTHETIC rows (the 10^6-row timing is scripts/bench_mlxcel_read.py's job)."""
    spec = importlib.util.spec_from_file_location("bench_mlxcel_read", REPO / "scripts" / "bench_mlxcel_read.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    path = tmp_path / "sweep.csv"
    bench.synthetic_csv(2000, path)
    done = run_cli("summarize", path, "--json")
    assert done.returncode == 0, done.stderr
    points = json.loads(done.stdout)["points"]
    assert len(points) == 2000 and {p["model"] for p in points} == {f"m{i}" for i in range(2000)}
    crossover = json.loads(cli("crossover", path, "--json").stdout)
    assert [p["model"] for p in crossover["points"]] == [p["model"] for p in points]


def test_analysis_commands_load_blas_with_one_thread():
    code = (
        "import os, sys; sys.argv = ['moecal', 'summarize', '--help']; from harness.cli import app\n"
        "try:\n    app.main()\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), file=sys.stderr)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=env, check=False)
    assert done.stderr.strip().splitlines()[-1] == "1", done.stderr
