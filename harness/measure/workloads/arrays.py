"""The array library each backend's non-MoE decode math runs in, behind one small interface.

The synthetic decoder (harness.measure.workloads.decoder) is written once against a numpy-like namespace `xp` (matmul,
exp, max, sum, mean, sqrt, take, argmax, argpartition, slice assignment — the intersection numpy, CuPy and MLX
share) plus the few operations where the libraries differ, collected here:

- cpu   → numpy, float32. The CPU paths are numba kernels that take numpy arrays, so numpy costs no conversion at
          the MoE boundary; MLX-on-CPU would add an MLX↔numpy copy around every MoE call (and MLX's CPU
          low-precision matmuls are inaccurate), distorting what the decode measures. The large matrix-vector
          products run in numba's thread pool (harness.measure.workloads.host_gemv), not OpenBLAS's, so one pool serves
          the whole token. float16/bfloat16 are emulated as the CPU backend does: float32 math, MoE inputs rounded
          to the dtype.
- cuda  → CuPy. CuPy has no bfloat16, so for bfloat16 the dense math runs in float16 (same bytes per weight,
          which is what decode time depends on) and the MoE input/output is converted to/from the backend's
          bfloat16 storage (uint16 bit patterns) with the generic bit operations of harness.devices.quant_layer.
- metal → MLX in the activation dtype itself; each token is handed to `mx.async_eval` as mlx-lm's generator
          does, so the graph of one token is evaluated while the next is built.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from harness.config.backend_specs import backend_spec
from harness.devices.quant_layer import bfloat16_bits_to_float32, float32_to_bfloat16_bits, round_to_dtype


class ArrayOps:
    """numpy on the CPU backend; the base of the CuPy and MLX variants (which change only what differs)."""

    def __init__(self, dtype: str):
        self.xp: Any = np
        self.dtype = dtype  # the MoE activation dtype
        self.compute: Any = np.float32  # dtype of the dense weights and the residual stream
        self.float32: Any = np.float32

    def device(self, host: np.ndarray) -> Any:
        """A host float array as a device array of the compute dtype."""
        return np.ascontiguousarray(host, dtype=self.compute)

    def matvec(self, w: Any, x: Any) -> Any:
        """w @ x for the dense projections and the LM head (the CPU's runs in numba's pool: host_gemv)."""
        from harness.measure.workloads.host_gemv import matvec

        return matvec(w, x)

    def moe_input(self, x: Any) -> Any:
        """The normed hidden state as the MoE paths take it (activation dtype, contiguous)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        return x if self.dtype == "float32" else round_to_dtype(x, self.dtype)

    def moe_indices(self, indices: Any) -> Any:
        return np.ascontiguousarray(indices, dtype=np.int32)

    def representable(self, values: Any) -> Any:
        """float32 values rounded to the activation dtype (router scores: as an engine whose router runs in that
        dtype hands them over, so both paths and the float64 reference see the same numbers)."""
        return values if self.dtype == "float32" else round_to_dtype(values, self.dtype)

    def from_moe(self, out: Any) -> Any:
        """A MoE path's output as a compute-dtype array."""
        return out.astype(self.compute)

    def token(self, value: int) -> Any:
        """A token id as a device scalar (the embedding lookup's index)."""
        return self.xp.asarray(np.int32(value))

    def keep(self, array: Any) -> Any:
        """A copy that survives the path reusing its output buffer."""
        return array.copy()

    def submitted(self, token: Any) -> None:
        """Called once per generated token (eager libraries have nothing to do)."""


class CupyOps(ArrayOps):
    def __init__(self, dtype: str):
        import cupy

        super().__init__(dtype)
        self.xp = cupy
        self.compute = cupy.float32 if dtype == "float32" else cupy.float16
        self.float32 = cupy.float32

    def device(self, host: np.ndarray) -> Any:
        return self.xp.asarray(np.asarray(host, dtype=self.compute))

    def matvec(self, w: Any, x: Any) -> Any:
        return w @ x

    def moe_input(self, x: Any) -> Any:
        if self.dtype == "bfloat16":
            return float32_to_bfloat16_bits(self.xp, x)
        return self.xp.ascontiguousarray(x, dtype=self.compute)

    def moe_indices(self, indices: Any) -> Any:
        return self.xp.ascontiguousarray(indices, dtype=self.xp.int32)

    def representable(self, values: Any) -> Any:
        if self.dtype == "bfloat16":
            return bfloat16_bits_to_float32(self.xp, float32_to_bfloat16_bits(self.xp, values))
        return values.astype(self.compute).astype(self.float32)

    def from_moe(self, out: Any) -> Any:
        if out.dtype == self.xp.uint16:
            return bfloat16_bits_to_float32(self.xp, out).astype(self.compute)
        return out.astype(self.compute)


class MlxOps(ArrayOps):
    def __init__(self, dtype: str):
        import mlx.core as mx

        from harness.devices.backends.mlx_paths import mx_dtype

        super().__init__(dtype)
        self.xp = mx
        self.compute = mx_dtype(dtype)
        self.float32 = mx.float32

    def device(self, host: np.ndarray) -> Any:
        array = self.xp.array(np.asarray(host, dtype=np.float32)).astype(self.compute)
        self.xp.eval(array)
        return array

    def matvec(self, w: Any, x: Any) -> Any:
        return w @ x

    def moe_input(self, x: Any) -> Any:
        return x.astype(self.compute)

    def moe_indices(self, indices: Any) -> Any:
        return indices.astype(self.xp.uint32)  # what gather_qmm's rhs_indices and mlx-lm's router use

    def representable(self, values: Any) -> Any:
        return values.astype(self.compute).astype(self.float32)

    def from_moe(self, out: Any) -> Any:
        return out.astype(self.compute)

    def token(self, value: int) -> Any:
        return self.xp.array(value, dtype=self.xp.int32)

    def keep(self, array: Any) -> Any:
        return array  # MLX arrays are immutable values

    def submitted(self, token: Any) -> None:
        self.xp.async_eval(token)


def array_ops(backend_name: str, dtype: str) -> ArrayOps:
    """The array library for a backend's non-MoE math (its registry entry's `array_ops`, module:class)."""
    module, name = backend_spec(backend_name).array_ops.split(":")
    return getattr(importlib.import_module(module), name)(dtype)
