"""Workloads: what one timed run does, and the registry of workload kinds (`KINDS`). `command` drives an external
benchmark; `layer` and `decode` run the kernels in harness/measure/backends directly. `build_workload` is the one place
that maps a config to a workload: adding a kind = its module (settings model aside, see harness.config.schema) + one
`WorkloadKind` line here; the sweep asks the workload (harness.measure.protocol.Workload), never its kind's name."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from harness.config.schema import SweepConfig
from harness.measure.protocol import Workload


@dataclass(frozen=True)
class WorkloadKind:
    """One kind of workload. Its module defines WORKLOAD, a class whose `build(config, config_path, backend_name,
    plan_only)` returns the Workload (imported only when a config of this kind is built)."""

    name: str
    module: str
    # an external program that picks its own device: `auto` names this machine's platform (Detection.platform)
    # and no backend of ours is instantiated; built-in kinds run on the first usable backend instead
    picks_own_device: bool = False


KINDS = (
    WorkloadKind("command", "harness.measure.workloads.command", picks_own_device=True),
    WorkloadKind("layer", "harness.measure.workloads.layer"),
    WorkloadKind("decode", "harness.measure.workloads.decode"),
)
_BY_NAME = {kind.name: kind for kind in KINDS}


def workload_kind(config: SweepConfig) -> WorkloadKind:
    """The registry entry of a validated config's workload (the config's union admits only registered kinds)."""
    return _BY_NAME[config.workload.kind]


def build_workload(config: SweepConfig, config_path: str, backend_name: str, plan_only: bool = False) -> Workload:
    """The workload for a validated config. Built-in workloads instantiate their backend here (it must be usable);
    `plan_only` (`moecal plan`) gives them the backend's device facts instead, where those come cheaper (the CPU's:
    harness.measure.backends.device_facts), and such a workload can list its points but not run them."""
    module = importlib.import_module(workload_kind(config).module)
    return module.WORKLOAD.build(config, config_path, backend_name, plan_only)
