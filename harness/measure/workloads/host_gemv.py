"""The CPU decode's dense matrix-vector product, compiled with numba so it shares the MoE kernels' thread pool.

numpy's `@` runs on OpenBLAS's own threads. Interleaved with the numba MoE kernels (OpenMP threads), the two pools
spin-wait against each other: on a 2-core machine a 16-token synthetic decode measured 1.0-4.3 s per run with
OpenBLAS threaded and a steady 0.46-0.54 s with OpenBLAS limited to one thread. A real CPU engine runs one pool, so
the projections and the LM head run here, in numba's pool, like the MoE kernels do.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

import harness.devices.backends.cpu  # noqa: F401  (sets numba.config.SLP_VECTORIZE, read at each compile)

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}  # reassociation lets LLVM vectorise the f32 dot products


@njit(cache=True, parallel=True, fastmath=_FASTMATH)
def _matvec_into(w, x, out):
    for row in prange(w.shape[0]):
        acc = np.float32(0.0)
        for col in range(w.shape[1]):
            acc += w[row, col] * x[col]
        out[row] = acc


def matvec(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """w (rows, cols) float32 C-contiguous · x (cols,) -> (rows,) float32, f32 accumulation."""
    out = np.empty(w.shape[0], dtype=np.float32)
    _matvec_into(w, np.ascontiguousarray(x, dtype=np.float32), out)
    return out
