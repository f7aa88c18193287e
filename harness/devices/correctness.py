"""The correctness check behind `moecal verify` (and the CUDA tests): a backend's paths against the float64 reference.

Each (shape, path) gets a fresh random layer and token from `seed`, the backend poisons its outputs where it can,
and a path passes when ||out - ref|| / ||ref|| is within the dtype's tolerance (kernel_cases.TOLERANCE). A NaN
(an element no kernel wrote) or an exception in a path fails that row only, so one broken path never hides the
others.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from harness.config.shapes import MoeShape
from harness.devices.backends.base import Backend
from harness.devices.kernel_cases import TOLERANCE
from harness.devices.quant_layer import make_inputs, make_layer
from harness.devices.reference import moe_reference, rel_err

_NOT_FINITE = "output has NaN/inf (an element no kernel wrote stays NaN-poisoned)"


@dataclass(frozen=True)
class PathCheck:
    """One row of the verify report."""

    shape: str
    path: str
    rel_err: float | None  # None when the path raised
    ok: bool
    tolerance: float
    seed: int
    error: str = ""


def check_shape(backend: Backend, shape: MoeShape, seed: int, paths: Collection[str] | None = None) -> list[PathCheck]:
    """Every path of `backend` at `shape` (or only those named in `paths`) on one random layer and token, each
    against the float64 reference."""
    layer = make_layer(shape, seed)
    x, indices, scores = make_inputs(shape, seed)
    reference = moe_reference(layer, x, indices, scores)
    device_layer = backend.upload(layer)
    inputs = backend.upload_inputs(x, indices, scores, shape.dtype)
    tolerance = TOLERANCE[shape.dtype]
    rows = []
    for path, step in backend.paths().items():
        if paths is not None and path not in paths:
            continue
        try:
            out = step(*inputs, device_layer)
            backend.synchronize()
            error = rel_err(backend.to_numpy(out), reference)
        except Exception as exc:  # a crashing path is a failed row, not a crashed report
            rows.append(PathCheck(shape.label(), path, None, False, tolerance, seed, f"{type(exc).__name__}: {exc}"))
            continue
        if not math.isfinite(error):  # JSON has no NaN; say what it means instead
            rows.append(PathCheck(shape.label(), path, None, False, tolerance, seed, _NOT_FINITE))
            continue
        rows.append(PathCheck(shape.label(), path, error, error <= tolerance, tolerance, seed))
    return rows
