"""ROCm: a backend label for command workloads only. mlxcel runs on ROCm (gfx1151), and a calibration of its
`mlxcel-bench-decode` there is labelled `rocm`; moecal itself has no HIP kernels, so built-in workloads refuse it
with the reason (`moecal doctor` shows it)."""

from __future__ import annotations

from harness.devices.backends.base import Backend


class RocmBackend(Backend):
    """Never instantiated: `availability` says why (get_backend refuses before constructing one)."""

    name = "rocm"

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return False, "moecal has no ROCm kernels of its own: use `rocm` with a command workload (mlxcel-bench-decode)"


BACKEND = RocmBackend
