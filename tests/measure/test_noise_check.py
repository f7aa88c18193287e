"""The noise pre-check before a sweep (harness/measure/noise_check.py): one line when the machine is busy, none when
quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.measure import noise_check
from tests.support.helpers import cli, fake_config


def test_findings_from_load_gpu_processes_and_governor(tmp_path: Path) -> None:
    assert noise_check.load_finding(0.9, 2) is None
    assert noise_check.load_finding(8.3, 2) == "load average 8.3 on 2 CPUs"
    lines = ["4242, /usr/bin/python3", "77, /opt/other/trainer"]
    assert noise_check.gpu_process_finding(lines, own_pid=4242) == "1 other GPU process: trainer (pid 77)"
    assert noise_check.gpu_process_finding(["4242, python"], own_pid=4242) is None
    for cpu, governor in (("cpu0", "performance"), ("cpu1", "powersave")):
        (tmp_path / cpu / "cpufreq").mkdir(parents=True)
        (tmp_path / cpu / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    assert noise_check.governor_finding(noise_check._governors(tmp_path)) == "CPU frequency governor powersave"
    assert noise_check.governor_finding(["performance"]) is None


def test_advice_is_one_line_with_what_to_do() -> None:
    assert noise_check.advice([]) is None
    line = noise_check.advice(["load average 8.3 on 2 CPUs", "CPU frequency governor powersave"])
    assert "\n" not in line and line.startswith("noise check: machine busy (load average 8.3 on 2 CPUs;")
    assert "cpupower frequency-set -g performance" in line


def test_sweep_prints_it_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(noise_check, "findings", lambda: ["load average 9.0 on 2 CPUs"])
    done = cli("sweep", fake_config(tmp_path), "--out", tmp_path / "run", "--no-report", "--rounds", "3")
    assert done.returncode == 0, done.stderr
    assert "noise check: machine busy (load average 9.0 on 2 CPUs)" in done.stderr
