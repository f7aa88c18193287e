"""Workloads: what one timed run does. `command` drives an external benchmark; `layer` and `decode` run the kernels
in harness/devices/backends directly. The kinds are registered in harness.config.schema (`KINDS`, beside their
settings models); `build_workload` is the one place that maps a config to a workload, and the sweep asks the
workload (harness.measure.protocol.Workload), never its kind's name."""

from __future__ import annotations

import importlib

from harness.config.schema import KIND_BY_NAME, SweepConfig, WorkloadKind
from harness.measure.protocol import Workload


def workload_kind(config: SweepConfig) -> WorkloadKind:
    """The registry entry of a validated config's workload (the config's union admits only registered kinds)."""
    return KIND_BY_NAME[config.workload.kind]


def build_workload(config: SweepConfig, config_path: str, backend_name: str, plan_only: bool = False) -> Workload:
    """The workload for a validated config. Built-in workloads instantiate their backend here (it must be usable);
    `plan_only` (`moecal plan`) gives them the backend's device facts instead, where those come cheaper (the CPU's:
    harness.devices.backends.device_facts), and such a workload can list its points but not run them."""
    module = importlib.import_module(workload_kind(config).module)
    return module.WORKLOAD.build(config, config_path, backend_name, plan_only)
