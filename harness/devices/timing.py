"""The one timing helper every workload uses: host wall clock around device work, synchronised on both sides."""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.devices.backends.base import Backend


def time_calls(backend: Backend, call: Callable[[], object], repeats: int) -> float:
    """Mean seconds per call of `repeats` back-to-back calls.

    The backend is synchronised before the clock starts (so earlier queued work is not charged to this batch)
    and after the last call (so asynchronous devices — MLX, CUDA streams — are charged for all the work they
    were given). Calls inside the batch are not synchronised one by one: a decode loop does not wait between
    layers either, and per-call syncs would add a host round trip that is not part of a step.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    backend.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    backend.synchronize()
    return (time.perf_counter() - start) / repeats
