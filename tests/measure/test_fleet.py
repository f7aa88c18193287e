"""Scale-out on Ray (harness.measure.ray_workers, harness.measure.fleet_run): a local Ray cluster on the CPU, custom
resources standing in for hardware classes, and the SYNTHETIC fake decode benchmark (tests/fixtures) as the workload.

One cluster serves the whole module (starting Ray costs seconds); every test writes under its own tmp_path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

import pandas as pd
import pytest
import yaml

from harness.cli import app as cli
from harness.errors import InputError
from harness.measure import sweep_loop as sweeps
from harness.measure import sweep_setup
from harness.runs.formats import read_samples
from harness.runs.rundir import RunDirectory
from tests.support.helpers import FAKE_BENCH_COMMAND, REPO, fake_config, wait_for

HARDWARE_CLASSES = {"hw_a": 1, "hw_b": 1}


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is the optional 'fleet' extra: pip install -e '.[fleet]'")
    ray.init(
        num_cpus=2,
        resources=HARDWARE_CLASSES,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},  # workers import this checkout's harness
    )
    yield ray
    ray.shutdown()


def _cli(monkeypatch, capsys, *args: object) -> tuple[int, str]:
    """The real `moecal` entry point in-process: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["moecal", *map(str, args)])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    return int(exit_info.value.code or 0), capsys.readouterr().err


def _sleeping_config(tmp_path, sleep: float, rounds: int, models: list[dict], name: str = "fake"):
    return fake_config(
        tmp_path,
        name=name,
        workload={"command": [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "--sleep", str(sleep)]},
        models=models,
        measure={"rounds": rounds, "warmup_runs": 0},
    )


def _one_ok_row_per_run(out, models: int, rounds: int) -> pd.DataFrame:
    ok = read_samples(out).query("status == 'ok'")
    counts = ok.groupby(["model", "arm", "round"]).size()
    assert len(counts) == models * 2 * rounds, "every (point, arm, round) has an ok row"
    assert set(counts) == {1}, "and exactly one"
    return ok


def _workers_log(out) -> pd.DataFrame:
    return pd.read_csv(out / "workers.csv", keep_default_na=False)


MODELS = [{"name": f"m{dff}", "dff": dff} for dff in (1024, 4096, 8192, 14336)]


def _driver(sweep) -> tuple[threading.Thread, list[BaseException]]:
    """The sweep on two workers in a started thread, and the list that collects what it raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sweeps.execute(sweep, lambda _: None, "2")
        except BaseException as exc:
            errors.append(exc)

    driver = threading.Thread(target=run)
    driver.start()
    return driver, errors


def test_without_ray_workers_and_fleet_name_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when the extra is not installed
    config = fake_config(tmp_path)
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"entries": [{"config": str(config), "where": {"hw_a": 1}}]}))
    for args in (("sweep", config, "--workers", "2", "--out", tmp_path / "run"), ("fleet", fleet_file)):
        code, err = _cli(monkeypatch, capsys, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("error: ") and "(the 'fleet' extra): pip install -e '.[fleet]'" in err
    assert not (tmp_path / "run").exists()
    code, err = _cli(monkeypatch, capsys, "sweep", config, "--workers", "0", "--dry-run")
    assert code == 2 and err.strip() == "error: --workers: expected a positive number or 'auto', got '0'"


def test_fleet_file_problems_are_one_line_errors(tmp_path, monkeypatch, capsys):
    config = fake_config(tmp_path)
    cases = [
        ("entries: [", "invalid YAML"),
        ("[1, 2]", "(top level): expected a mapping"),
        ("entries: []", "entries: List should have at least 1 item"),
        ({"entries": [{"config": str(config)}]}, "entries[0].where: required field is missing"),
        ({"entries": [{"config": str(config), "where": {"GPU": 1}}]}, "'GPU' is one of Ray's own resources"),
        ({"entries": [{"config": str(config), "where": {"hw_a": 0}}]}, "amount must be > 0"),
        ({"entries": [{"config": str(config), "where": {"hw_a": 1}, "wokers": 2}]}, "entries[0].wokers: unknown key"),
        ({"entries": [{"config": "missing.yaml", "where": {"hw_a": 1}}]}, "entries[0].config: no such file"),
        (
            {"entries": [{"config": str(config), "where": {"hw_a": 1}}, {"config": str(config), "where": {"hw_a": 1}}]},
            "entries[1].name: 'fake-hw_a' is used twice",
        ),
    ]
    for index, (content, message) in enumerate(cases):
        path = tmp_path / f"fleet{index}.yaml"
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        code, err = _cli(monkeypatch, capsys, "fleet", path, "--dry-run")
        assert code == 2, (content, err)
        assert err.strip().splitlines() == [f"error: {path}: {message}"] or (
            len(err.strip().splitlines()) == 1 and message in err
        ), (content, err)
    # a bad config named by the fleet file is reported with the config's own file and field
    config.write_text(config.read_text().replace("rounds: 3", "rounds: 0"))
    path = tmp_path / "fleet-ok.yaml"
    path.write_text(yaml.safe_dump({"entries": [{"config": str(config), "where": {"hw_a": 1}}]}))
    code, err = _cli(monkeypatch, capsys, "fleet", path, "--dry-run")
    assert code == 2 and err.startswith(f"error: {config}: measure.rounds:"), err


@pytest.mark.fleet
def test_two_workers_finish_a_sweep_with_one_ok_row_per_run(tmp_path, ray_cluster):
    config = _sleeping_config(tmp_path, 0.05, 3, MODELS)
    sweep = sweep_setup.prepare(config, out=tmp_path / "run")
    written = sweeps.execute(sweep, lambda _: None, "2")
    assert written == 4 * 2 * 3
    ok = _one_ok_row_per_run(tmp_path / "run", models=4, rounds=3)
    for (_, round_index), rows in ok.groupby(["model", "round"]):  # the usual rotation
        assert (
            list(rows.sort_values("position")["arm"]) == [["fused", "fallback"], ["fallback", "fused"]][round_index % 2]
        )
    log = _workers_log(tmp_path / "run")
    assert len(log) == len(ok) and log["worker_pid"].nunique() == 2, "both workers measured"
    assert (log.groupby("model")["worker_pid"].nunique() == 1).all(), "all runs of a point on one worker"
    assert set(log["dff"][:2]) <= {14336, 8192}, "largest points first"
    assert set(ok["device"]) == {RunDirectory(tmp_path / "run").read_meta()["device"]}, "one device per run directory"
    assert sweep_setup.pending(sweep) == 0 and sweeps.execute(sweep, lambda _: None, "2") == 0
    with pytest.raises(InputError, match="3 workers need 3 CPU cores; this node has 2 for Ray"):
        sweeps.execute(sweep, lambda _: None, "3")


@pytest.mark.fleet
def test_a_killed_worker_loses_only_its_run_in_flight(tmp_path, ray_cluster):
    hold = tmp_path / "hold"
    command = [*FAKE_BENCH_COMMAND, "--dff", "{dff}", "--counter", str(tmp_path / "count"), "--hold-after", "3"]
    config = fake_config(
        tmp_path,
        workload={"command": [*command, "--hold-file", str(hold)], "timeout_s": 600},  # held runs wait for the test
        models=MODELS[:2],
        measure={"rounds": 4, "warmup_runs": 0},
    )
    out = tmp_path / "run"
    sweep = sweep_setup.prepare(config, out=out)
    hold.touch()  # runs after the 3rd wait while it exists: each worker ends up with one run in flight, held
    try:
        driver, errors = _driver(sweep)
        held = tmp_path / "hold.held"
        wait_for(lambda: held.exists() and len(held.read_text().split()) == 2, "a held run on each worker")
        at_kill = _workers_log(out)  # nothing is written while both runs are held
        victim = int(at_kill["worker_pid"].iloc[-1])
        os.kill(victim, signal.SIGKILL)  # the worker process dies mid-point, as on a crash or a lost machine
    finally:
        hold.unlink()  # the other worker's run goes on; so does the dead worker's orphaned benchmark, unread
    driver.join(300)
    assert not driver.is_alive() and not errors, errors
    log = _workers_log(out)
    # the dead worker's point went back to the queue: every row after the kill comes from another worker
    assert victim not in set(log["worker_pid"][len(at_kill) :]), "a dead worker wrote no more rows"
    assert len(log) == 2 * 2 * 4, "the killed run was never logged, and no finished run was measured again"
    _one_ok_row_per_run(out, models=2, rounds=4)
    # a re-run finds nothing missing and changes nothing
    before = (out / "samples.csv").read_bytes()
    assert sweep_setup.pending(sweep) == 0 and sweeps.execute(sweep, lambda _: None, "2") == 0
    assert (out / "samples.csv").read_bytes() == before


@pytest.mark.fleet
def test_a_fleet_of_two_classes_gives_two_run_directories_and_one_report(tmp_path, ray_cluster, monkeypatch, capsys):
    configs = []
    for name in ("class-a", "class-b"):
        folder = tmp_path / name
        folder.mkdir()
        configs.append(_sleeping_config(folder, 0.02, 3, MODELS[1:], name=name))
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(
        yaml.safe_dump(
            {
                "entries": [
                    {"config": str(configs[0]), "where": {"hw_a": 1}, "name": "a"},
                    {"config": str(configs[1]), "where": {"hw_b": 1}, "name": "b"},
                ]
            }
        )
    )
    out = tmp_path / "fleet"
    code, err = _cli(monkeypatch, capsys, "fleet", fleet_file, "--out", out)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["a", "b"]
    for name, config in (("a", configs[0]), ("b", configs[1])):
        _one_ok_row_per_run(out / name, models=3, rounds=3)
        meta = RunDirectory(out / name).read_meta()
        assert meta["run_id"] == name and meta["config_path"] == str(config) and meta["host"]
        assert meta["fleet_where"] == f"hw_{name}: 1"
        assert len(list((out / name).glob("*.md"))) == 1, "the entry's addendum lives in its run directory"
    report = (out / "fleet-report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| a |") or line.startswith("| b |")]
    assert len(rows) == 2 and "hw_a: 1" in rows[0] and "hw_b: 1" in rows[1]
    assert all(" | 18 | 0 | 0 | " in row for row in rows)
    # re-running resumes every entry: nothing left to measure, no row added
    before = {n: (out / n / "samples.csv").read_bytes() for n in ("a", "b")}
    code, err = _cli(monkeypatch, capsys, "fleet", fleet_file, "--out", out, "--no-report")
    assert code == 0, err
    assert {n: (out / n / "samples.csv").read_bytes() for n in ("a", "b")} == before


@pytest.mark.fleet
def test_a_fleet_entry_that_cannot_run_on_its_machine_is_one_error_line(tmp_path, ray_cluster, monkeypatch, capsys):
    config = fake_config(tmp_path, workload={"command": ["not-installed-on-that-machine", "{dff}"]})
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"entries": [{"config": str(config), "where": {"hw_a": 1}}]}))
    code, err = _cli(monkeypatch, capsys, "fleet", fleet_file, "--out", tmp_path / "fleet")
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith(f"error: {fleet_file}: fake-hw_a: {config} (on "), err
    assert "cannot run 'not-installed-on-that-machine'" in last
    assert not (tmp_path / "fleet" / "fake-hw_a" / "samples.csv").exists()


@pytest.mark.fleet
def test_workers_killed_again_and_again_still_finish_the_sweep(tmp_path, ray_cluster):
    """Four kills in one sweep (each as soon as the log has grown since the last): every killed worker's point is
    requeued, Ray restarts the worker, and the sweep ends with one ok row per run."""
    config = _sleeping_config(tmp_path, 0.1, 3, MODELS)
    out = tmp_path / "run"
    sweep = sweep_setup.prepare(config, out=out)
    driver, errors = _driver(sweep)
    kills, seen, deadline = [], 0, time.time() + 180
    while driver.is_alive() and len(kills) < 4 and time.time() < deadline:
        log = _workers_log(out) if (out / "workers.csv").exists() else pd.DataFrame()
        if len(log) >= seen + 2:
            seen = len(log)
            victim = int(log["worker_pid"].iloc[-1])
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
                kills.append(victim)
        time.sleep(0.05)
    driver.join(240)
    assert not driver.is_alive() and not errors, errors
    assert len(kills) >= 3, f"the sweep ended before the workers were killed often enough ({kills})"
    _one_ok_row_per_run(out, models=4, rounds=3)
