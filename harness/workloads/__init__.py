"""Workloads: what one timed run does. `command` drives an external benchmark; `layer` and `decode` run the
kernels in harness/backends directly. `build_workload` is the one place that maps a config to a workload."""

from __future__ import annotations

from harness.config import SweepConfig
from harness.measure import Workload


def build_workload(config: SweepConfig, config_path: str, backend_name: str, device: str) -> Workload:
    """The workload for a validated config. Built-in workloads instantiate their backend here (it must be usable)."""
    kind = config.workload.kind
    if kind == "command":
        from harness.workloads.command import CommandWorkloadRunner

        return CommandWorkloadRunner(config, config_path, backend_name, device)
    from harness.backends import get_backend

    backend = get_backend(backend_name)
    if kind == "layer":
        from harness.workloads.layer import LayerWorkloadRunner

        return LayerWorkloadRunner(config, config_path, backend)
    from harness.workloads.decode import DecodeWorkloadRunner

    return DecodeWorkloadRunner(config, config_path, backend)
