"""Workloads: what one timed run does. `command` drives an external benchmark; `layer` and `decode` run the
kernels in harness/backends directly. `build_workload` is the one place that maps a config to a workload."""

from __future__ import annotations

from harness.config import SweepConfig
from harness.measure import Workload


def build_workload(
    config: SweepConfig, config_path: str, backend_name: str, device: str, plan_only: bool = False
) -> Workload:
    """The workload for a validated config. Built-in workloads instantiate their backend here (it must be usable);
    `plan_only` (`moecal plan`) gives them the backend's device facts instead, where those come cheaper (the CPU's:
    harness.backends.device_facts), and such a workload can list its points but not run them."""
    kind = config.workload.kind
    if kind == "command":
        from harness.workloads.command import CommandWorkloadRunner

        return CommandWorkloadRunner(config, config_path, backend_name, device)
    from harness.backends import device_facts, get_backend

    backend = device_facts(backend_name) if plan_only else get_backend(backend_name)
    if kind == "layer":
        from harness.workloads.layer import LayerWorkloadRunner

        return LayerWorkloadRunner(config, config_path, backend)
    from harness.workloads.decode import DecodeWorkloadRunner

    return DecodeWorkloadRunner(config, config_path, backend)
