"""CPU backend: the fused two-kernel decode-MoE step and its unfused fallback, compiled with numba.

fused    = kernel A (gate and up GEMVs + SwiGLU -> f32 act) + kernel B (down GEMV × score, summed over the
           top-k slots in f32): two parallel passes
fallback = GEMV(gate) + GEMV(up) + SwiGLU + GEMV(down) + weighted sum: five passes, f32 intermediates in memory
library  = `mx.gather_qmm` on MLX's CPU device in float32 (offered only when mlx imports; never the default
           fallback: it runs single-threaded, ~20x slower, so a crossover against it would say nothing)

Every pass of both paths spends its time in the same row-pair dot product (`_row_pair`) over the same memory
streams (rows r and r + n/2 of one matrix, one matrix at a time), so a fused/fallback ratio measures fusion —
two parallel passes instead of four plus a serial sum, no gate/up/down intermediates written and re-read —
not two GEMVs of different quality.

How the dot product vectorises (numba 0.68, AVX2; measured, see kernels/README.md):
- The input is prepared once per pass (`_prepare`): reordered so that for each group the 8-wide SIMD lanes map
  to consecutive packed words (lane l of field n holds the input that word l's n-th field multiplies), plus the
  group sums Σv. Then Σ(q·s+b)·v = s·Σq·v + b·Σv per group and the inner loop is: load words, mask one field,
  convert, FMA, with no shuffles.
- Field n of a word is masked in place (not shifted down): `w & (mask << bits·n)` is q·2^(bits·n) exactly, and
  the prepared input is pre-scaled by 2^-(bits·n) (exact: a power of two), saving a shift per value. The top
  field is shifted instead, because masking it in place would set the sign bit of the int32 conversion.
- The inner loop is explicit LLVM vector IR (`_scaled_dots_vector`, a numba @intrinsic) for every variant with
  >= 8 packed words per group: two partial sums per row, the group scale folded into a vector accumulator with one
  FMA, one horizontal sum per row per call (not per group), and a software prefetch of both weight rows 1 KiB ahead.
  It ran the q4 GEMV ~40% faster than the loop-vectorised form it replaced (kernels/README.md).
- q4g32 (4 words per group) keeps the loop-vectorised form: numba promotes uint32 shifts and masks to 64 bits,
  which AVX2 cannot convert to float; `_field` is a tiny LLVM intrinsic that keeps them 32-bit. bits and
  group_size reach the inner loop as compile-time literals (`numba.literally`), so its loops are fully unrolled;
  `_row_pair` picks the literal variant per call. LLVM's SLP vectoriser (off in numba unless
  NUMBA_SLP_VECTORIZE=1, and not part of numba's cache key) plays no part. tests/devices/test_cpu_backend.py checks the
  compiled variants really convert 8 fields at a time.

Accumulation is f32 throughout. float16/bfloat16 shapes are emulated: their numbers (x, scales, biases) are
already representable in the dtype and stored as float32, and each path's output is rounded once to the dtype
at the end. The CPU therefore reads 4-byte scales where a GPU reads 2-byte ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import literally, njit, prange
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

from harness.devices.backends.base import Backend
from harness.devices.backends.base import Path as StepPath
from harness.devices.backends.cpu_host import CpuHost
from harness.devices.quant_layer import QuantLayer, round_to_dtype

# 'reassoc' lets LLVM vectorise the f32 reductions; no 'nnan'/'ninf', so NaN (poison) and inf still propagate.
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
_PREFETCH_WORDS = 256  # software prefetch of each weight row 1 KiB ahead: +10% q4 from memory, 1 and 2 threads
_ROW_BLOCK = 32  # row pairs per kernel-B task: 16-64 tasks at d_model 2048-4096, plenty to balance the threads


# ---- the dot-product core --------------------------------------------------------------------------------------
@intrinsic
def _field(typingctx, word, shift, mask):  # noqa: ARG001 - numba's intrinsic signature
    """float32(int32((word >> shift) & mask)) in 32-bit integer ops (vpsrld/vpand/vcvtdq2ps on AVX2)."""
    sig = types.float32(types.uint32, types.uint32, types.uint32)

    def codegen(context, builder, signature, args):
        value = builder.and_(builder.lshr(args[0], args[1]), args[2])
        return builder.sitofp(value, context.get_value_type(types.float32))

    return sig, codegen


def _scaled_dots_vector(bits: int, group_size: int):
    """Codegen of `_scaled_dots` for words = group_size·bits/32 >= 8: explicit <8 x i32>/<8 x float> LLVM vectors.

    Per group and 8 words: one vector load per row, then per field one AND (the top field: a shift), one convert
    and one FMA per row against one shared input load, into two partial sums per row (even/odd fields: halves
    the FMA dependency chain). The group's partial sums are scaled into a vector accumulator per row with one
    FMA, and each row is reduced horizontally once per call, not once per group. Each group also prefetches
    both rows `_PREFETCH_WORDS` ahead (the hardware prefetcher alone left q4 short of its compute rate).
    """
    per_word = 32 // bits
    words = group_size // per_word
    chunks = words // 8
    low = (1 << bits) - 1

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vi, vf = ir.VectorType(i32, 8), ir.VectorType(ir.FloatType(), 8)
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip(signature.args[:5], args[:5], strict=True)]
        wa, wb, xr, sa, sb = (array.data for array in arrays)
        n_groups = builder.extract_value(arrays[3].shape, 0)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vf, [vf, vf, vf]), "llvm.fma.v8f32")
        i8p = ir.IntType(8).as_pointer()
        prefetch_type = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        prefetch = cgutils.get_or_insert_function(builder.module, prefetch_type, "llvm.prefetch.p0i8")
        zero = ir.Constant(vf, [0.0] * 8)
        acc = [cgutils.alloca_once_value(builder, zero), cgutils.alloca_once_value(builder, zero)]

        def load(pointer, offset, vector_type):
            address = builder.bitcast(builder.gep(pointer, [offset]), vector_type.as_pointer())
            return builder.load(address, align=4)

        def broadcast(pointer, index):
            value = builder.insert_element(
                ir.Constant(vf, ir.Undefined), builder.load(builder.gep(pointer, [index])), ir.Constant(i32, 0)
            )
            return builder.shuffle_vector(value, ir.Constant(vf, ir.Undefined), ir.Constant(vi, [0] * 8))

        with cgutils.for_range(builder, n_groups) as loop:
            g = loop.index
            partial = [[zero, zero], [zero, zero]]  # [row][even/odd field]
            ahead = builder.add(builder.mul(g, ir.Constant(i64, words)), ir.Constant(i64, _PREFETCH_WORDS))
            for row_start in (wa, wb):  # a hint, so reading past a row's end is harmless
                address = builder.bitcast(builder.gep(row_start, [ahead]), i8p)
                builder.call(prefetch, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            for chunk in range(chunks):
                w_at = builder.add(builder.mul(g, ir.Constant(i64, words)), ir.Constant(i64, chunk * 8))
                row_words = (load(wa, w_at, vi), load(wb, w_at, vi))
                for n in range(per_word):
                    x_at = builder.add(
                        builder.mul(g, ir.Constant(i64, per_word * words)), ir.Constant(i64, n * words + chunk * 8)
                    )
                    x = load(xr, x_at, vf)
                    for row, word in enumerate(row_words):
                        if n < per_word - 1:
                            q = builder.and_(word, ir.Constant(vi, [low << (bits * n)] * 8))
                        else:
                            q = builder.lshr(word, ir.Constant(vi, [bits * n] * 8))
                        partial[row][n % 2] = builder.call(fma, [builder.sitofp(q, vf), x, partial[row][n % 2]])
            for row, scales in enumerate((sa, sb)):
                group_sum = builder.fadd(partial[row][0], partial[row][1], flags=("fast",))
                builder.store(builder.call(fma, [broadcast(scales, g), group_sum, builder.load(acc[row])]), acc[row])

        totals = []
        for row in range(2):
            vector = builder.load(acc[row])
            total = builder.extract_element(vector, ir.Constant(i32, 0))
            for lane in range(1, 8):
                total = builder.fadd(total, builder.extract_element(vector, ir.Constant(i32, lane)), flags=("fast",))
            totals.append(total)
        return context.make_tuple(builder, signature.return_type, totals)

    return codegen


@intrinsic
def _scaled_dots_intrinsic(typingctx, wa, wb, xr, sa, sb, bits, group_size):  # noqa: ARG001
    """(Σ_g sa[g]·Σ qa·v, Σ_g sb[g]·Σ qb·v) over the groups of two packed rows; bits/group_size literals."""
    if not isinstance(bits, types.IntegerLiteral) or not isinstance(group_size, types.IntegerLiteral):
        return None
    sig = types.UniTuple(types.float32, 2)(wa, wb, xr, sa, sb, bits, group_size)
    return sig, _scaled_dots_vector(bits.literal_value, group_size.literal_value)


def _scaled_dots(wa, wb, xr, sa, sb, bits, group_size):
    """Typing stub: (Σ_g sa[g]·(Σ of group g's fields · v), same for row b), without the bias terms."""
    raise NotImplementedError("compiled code only")


@overload(_scaled_dots, prefer_literal=True, jit_options={"fastmath": _FASTMATH})
def _scaled_dots_impl(wa, wb, xr, sa, sb, bits, group_size):
    if not isinstance(bits, types.IntegerLiteral) or not isinstance(group_size, types.IntegerLiteral):
        return None
    per_word = 32 // bits.literal_value
    words = group_size.literal_value // per_word
    if words >= 8:
        return lambda wa, wb, xr, sa, sb, bits, group_size: _scaled_dots_intrinsic(wa, wb, xr, sa, sb, bits, group_size)
    low = np.uint32((1 << bits.literal_value) - 1)
    top_shift = np.uint32(bits.literal_value * (per_word - 1))

    def narrow(wa, wb, xr, sa, sb, bits, group_size):
        # fewer than 8 words per group (q4g32): LLVM's loop vectoriser over the group's words, one sum per group
        acc_a = np.float32(0.0)
        acc_b = np.float32(0.0)
        for g in range(sa.shape[0]):
            qa = np.float32(0.0)
            qb = np.float32(0.0)
            for lane in range(words):
                word_a = wa[np.uint64(g * words + lane)]
                word_b = wb[np.uint64(g * words + lane)]
                for n in range(per_word):
                    v = xr[np.uint64((g * per_word + n) * words + lane)]
                    if n < per_word - 1:
                        shift, mask = np.uint32(0), np.uint32(low << np.uint32(bits * n))
                    else:
                        shift, mask = top_shift, low
                    qa += _field(word_a, shift, mask) * v
                    qb += _field(word_b, shift, mask) * v
            acc_a += sa[g] * qa
            acc_b += sb[g] * qb
        return acc_a, acc_b

    return narrow


@njit(cache=True, fastmath=_FASTMATH, inline="never")
def _row_pair_const(wa, sa, ba, wb, sb, bb, xr, xsum, bits, group_size):
    """(row a · v, row b · v) for two packed rows against one prepared input; bits/group_size are literals.

    Two rows per call give two independent accumulation chains sharing every input load. Callers pass rows r
    and r + n_out/2 of one matrix: two long sequential streams per thread kept more loads in flight than one
    stream of adjacent rows. The bias terms Σ_g b[g]·Σv are a separate short loop.
    """
    literally(bits)
    literally(group_size)
    dot_a, dot_b = _scaled_dots(wa, wb, xr, sa, sb, bits, group_size)
    bias_a = np.float32(0.0)
    bias_b = np.float32(0.0)
    for g in range(sa.shape[0]):
        bias_a += ba[g] * xsum[g]
        bias_b += bb[g] * xsum[g]
    return dot_a + bias_a, dot_b + bias_b


@njit(cache=True, fastmath=_FASTMATH)
def _row_pair(w, s, b, e, ra, rb, xr, xsum, bits, group_size):
    """Rows ra and rb of expert e of a stacked matrix (w, s, b) dotted with a prepared input, by the literal
    (bits, group_size) variant of `_row_pair_const` (a branch per row pair costs nothing measurable)."""
    wa, sa, ba, wb, sb, bb = w[e, ra], s[e, ra], b[e, ra], w[e, rb], s[e, rb], b[e, rb]
    if bits == 4:
        if group_size == 32:
            return _row_pair_const(wa, sa, ba, wb, sb, bb, xr, xsum, 4, 32)
        if group_size == 64:
            return _row_pair_const(wa, sa, ba, wb, sb, bb, xr, xsum, 4, 64)
        return _row_pair_const(wa, sa, ba, wb, sb, bb, xr, xsum, 4, 128)
    if group_size == 32:
        return _row_pair_const(wa, sa, ba, wb, sb, bb, xr, xsum, 8, 32)
    if group_size == 64:
        return _row_pair_const(wa, sa, ba, wb, sb, bb, xr, xsum, 8, 64)
    return _row_pair_const(wa, sa, ba, wb, sb, bb, xr, xsum, 8, 128)


@njit(cache=True)
def _prepare(v, xr, xsum, bits, group_size):
    """Lay out each row of v (rows, n) for `_row_pair_const`: xr[(g·per_word + n)·words + lane] holds the value
    that field n of word `lane` in group g multiplies, pre-scaled by 2^-(bits·n) except for the top field;
    xsum[row, g] = Σ of the group's values (unscaled)."""
    per_word = 32 // bits
    words = group_size // per_word
    for row in range(v.shape[0]):
        for g in range(v.shape[1] // group_size):
            total = np.float32(0.0)
            for lane in range(words):
                for n in range(per_word):
                    value = v[row, g * group_size + lane * per_word + n]
                    total += value
                    scale = np.float32(1.0) if n == per_word - 1 else np.float32(1.0) / np.float32(1 << (bits * n))
                    xr[row, (g * per_word + n) * words + lane] = value * scale
            xsum[row, g] = total


# ---- passes -------------------------------------------------------------------------------------------------------
@njit(cache=True, parallel=True, fastmath=_FASTMATH)
def _gate_up_swiglu(gate_w, gate_s, gate_b, up_w, up_s, up_b, indices, xr, xsum, act, bits, group_size):
    """Kernel A: act[k, f] = silu(Wg[e_k, f]·x) · (Wu[e_k, f]·x).

    A task owns a block of row pairs (f, f + dff/2) of one slot: it dots the block's gate rows first, parking
    the results in `act`, then the up rows, finishing act in place. Each phase streams one matrix like the
    fallback's GEMV does (interleaving gate and up row by row measured ~20% slower on 8-bit weights).
    """
    top_k, dff = act.shape
    half = dff // 2
    blocks = (half + _ROW_BLOCK - 1) // _ROW_BLOCK
    for task in prange(top_k * blocks):
        slot = task // blocks
        start = (task - slot * blocks) * _ROW_BLOCK
        stop = min(half, start + _ROW_BLOCK)
        e = indices[slot]
        for f in range(start, stop):
            act[slot, f], act[slot, f + half] = _row_pair(
                gate_w, gate_s, gate_b, e, f, f + half, xr[0], xsum[0], bits, group_size
            )
        for f in range(start, stop):
            u0, u1 = _row_pair(up_w, up_s, up_b, e, f, f + half, xr[0], xsum[0], bits, group_size)
            g0, g1 = act[slot, f], act[slot, f + half]
            act[slot, f] = g0 / (np.float32(1.0) + np.exp(-g0)) * u0
            act[slot, f + half] = g1 / (np.float32(1.0) + np.exp(-g1)) * u1


@njit(cache=True, parallel=True, fastmath=_FASTMATH)
def _down_scale_sum(w, s, b, indices, scores, xr, xsum, out, bits, group_size):
    """Kernel B: out[h] = Σ_k score_k · (Wd[e_k, h]·act_k), summed over slots in f32 in slot order.

    A task owns a block of row pairs (h, h + d_model/2) and runs the slots one after the other over the whole
    block, so one slot's input stays hot in L1/L2 while the block's rows stream past it (looping over the slots
    inside each row would alternate between top_k inputs, which at large Dff do not fit in L1 together).
    """
    half = out.shape[0] // 2
    for block in prange((half + _ROW_BLOCK - 1) // _ROW_BLOCK):
        stop = min(half, (block + 1) * _ROW_BLOCK)
        for slot in range(indices.shape[0]):
            e = indices[slot]
            score = scores[slot]
            for h in range(block * _ROW_BLOCK, stop):
                da, db = _row_pair(w, s, b, e, h, h + half, xr[slot], xsum[slot], bits, group_size)
                if slot == 0:
                    out[h] = score * da
                    out[h + half] = score * db
                else:
                    out[h] += score * da
                    out[h + half] += score * db


@njit(cache=True, parallel=True, fastmath=_FASTMATH)
def _gathered_gemv(w, s, b, indices, xr, xsum, out, bits, group_size):
    """Fallback GEMV: out[k, r] = (W[e_k] · v_k)[r] with v_k = row k of the prepared input, or row 0 when all
    slots share one input (gate, up); rows r and r + n_out/2 per task."""
    top_k, n_out = out.shape
    half = n_out // 2
    for task in prange(top_k * half):
        slot = task // half
        r = task - slot * half
        e = indices[slot]
        v = 0 if xr.shape[0] == 1 else slot
        out[slot, r], out[slot, r + half] = _row_pair(w, s, b, e, r, r + half, xr[v], xsum[v], bits, group_size)


@njit(cache=True, parallel=True, fastmath=_FASTMATH)
def _swiglu(gate, up, act):
    """Fallback activation pass: act = silu(gate) · up, elementwise over (top_k, dff)."""
    flat_gate, flat_up, flat_act = gate.reshape(-1), up.reshape(-1), act.reshape(-1)
    for i in prange(flat_act.shape[0]):
        g = flat_gate[i]
        flat_act[i] = g / (np.float32(1.0) + np.exp(-g)) * flat_up[i]


@njit(cache=True, fastmath=_FASTMATH)
def _weighted_sum(y, scores, out):
    """Fallback reduction: out[h] = Σ_k score_k · y[k, h] (d_model × top_k values: a serial loop is fastest)."""
    for h in range(out.shape[0]):
        acc = np.float32(0.0)
        for slot in range(y.shape[0]):
            acc += scores[slot] * y[slot, h]
        out[h] = acc


@njit(cache=True, parallel=True)
def _copy(src, dst):
    for i in prange(src.shape[0]):
        dst[i] = src[i]


# ---- the backend --------------------------------------------------------------------------------------------------
@dataclass
class CpuLayer:
    """A layer as the CPU paths use it: the host arrays themselves (C-contiguous), plus an MLX copy made on the
    first `library` call (so layers that never run `library` never pay for it)."""

    host: QuantLayer
    mlx: Any = field(default=None, repr=False)


@cache
def _mlx_importable() -> bool:
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return False
    return True


def _contiguous(layer: QuantLayer) -> QuantLayer:
    for matrix in (layer.gate, layer.up, layer.down):
        matrix.w = np.ascontiguousarray(matrix.w, dtype=np.uint32)
        matrix.scales = np.ascontiguousarray(matrix.scales, dtype=np.float32)
        matrix.biases = np.ascontiguousarray(matrix.biases, dtype=np.float32)
    return layer


class CpuBackend(CpuHost, Backend):
    """The host CPU through numba (all cores via numba's threading layer; NUMBA_NUM_THREADS limits them).

    `poison=True` (verify, tests) fills every buffer a path writes with NaN before the path runs. Buffers are
    allocated once per (path, shape) and reused, so the returned array is overwritten by the next call of the
    same path at the same shape (copy it, e.g. with to_numpy, to keep it) and allocation stays out of timings.
    """

    name = "cpu"

    def __init__(self, poison: bool = False):
        super().__init__()
        self.poison = poison
        self._buffers: dict[tuple, np.ndarray] = {}

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return True, f"numba {numba.__version__}, {numba.get_num_threads()} threads"

    def threads(self) -> int:
        return numba.get_num_threads()

    # ---- data ---------------------------------------------------------------------------------------------------
    def upload(self, layer: QuantLayer) -> CpuLayer:
        return CpuLayer(host=_contiguous(layer))

    def upload_inputs(self, x: np.ndarray, indices: np.ndarray, scores: np.ndarray, dtype: str) -> tuple:
        if np.shape(indices) != np.shape(scores):
            raise ValueError(f"indices {np.shape(indices)} and scores {np.shape(scores)} must have one entry per slot")
        return (
            round_to_dtype(np.ravel(x), dtype),
            np.ascontiguousarray(np.ravel(indices), dtype=np.int32),
            np.ascontiguousarray(np.ravel(scores), dtype=np.float32),
        )

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.array(array, dtype=np.float64)

    def _buffer(self, path: str, name: str, dims: tuple[int, ...]) -> np.ndarray:
        """The reused f32 buffer `name` of `path`; NaN-filled first when poisoning."""
        key = (path, name, dims)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = np.empty(dims, dtype=np.float32)
        if self.poison:
            buffer.fill(np.nan)
        return buffer

    @staticmethod
    def _check_inputs(x: np.ndarray, indices: np.ndarray, scores: np.ndarray, layer: CpuLayer) -> None:
        """The kernels index memory with these, unchecked: a bad expert index must stop here, not read garbage."""
        shape = layer.host.shape
        if x.dtype != np.float32 or x.shape != (shape.d_model,):
            raise ValueError(f"x must be ({shape.d_model},) float32 (upload_inputs makes it), got {x.shape} {x.dtype}")
        if indices.dtype != np.int32 or scores.dtype != np.float32 or indices.shape != scores.shape:
            raise ValueError("indices must be int32 and scores float32, one of each per slot (use upload_inputs)")
        if indices.size and (indices.min() < 0 or indices.max() >= shape.n_experts):
            raise ValueError(f"expert indices {indices.tolist()} out of range 0..{shape.n_experts - 1}")

    def _prepared(self, path: str, name: str, v: np.ndarray, bits: int, group_size: int) -> tuple:
        xr = self._buffer(path, name, v.shape)
        xsum = self._buffer(path, name + "_sums", (v.shape[0], v.shape[1] // group_size))
        _prepare(v, xr, xsum, bits, group_size)
        return xr, xsum

    # ---- paths --------------------------------------------------------------------------------------------------
    def paths(self) -> dict[str, StepPath]:
        paths = {"fused": self.fused, "fallback": self.fallback}
        if _mlx_importable():
            paths["library"] = self.library
        return paths

    def fused(self, x: np.ndarray, indices: np.ndarray, scores: np.ndarray, layer: CpuLayer) -> np.ndarray:
        """Kernel A (gate+up, SwiGLU -> f32 act) then kernel B (down × score, f32 sum over slots) -> out."""
        self._check_inputs(x, indices, scores, layer)
        q, shape = layer.host, layer.host.shape
        bits, group_size = shape.bits, shape.group_size
        act = self._buffer("fused", "act", (indices.size, shape.dff))
        out = self._buffer("fused", "out", (shape.d_model,))
        xr, xsum = self._prepared("fused", "x", x.reshape(1, -1), bits, group_size)
        g, u, d = q.gate, q.up, q.down
        _gate_up_swiglu(g.w, g.scales, g.biases, u.w, u.scales, u.biases, indices, xr, xsum, act, bits, group_size)
        act_r, act_sum = self._prepared("fused", "act_in", act, bits, group_size)
        _down_scale_sum(d.w, d.scales, d.biases, indices, scores, act_r, act_sum, out, bits, group_size)
        return self._rounded(out, shape.dtype)

    def fallback(self, x: np.ndarray, indices: np.ndarray, scores: np.ndarray, layer: CpuLayer) -> np.ndarray:
        """GEMV(gate), GEMV(up), SwiGLU, GEMV(down), weighted sum: the unfused sequence, same GEMV core."""
        self._check_inputs(x, indices, scores, layer)
        q, shape, top_k = layer.host, layer.host.shape, indices.size
        bits, group_size = shape.bits, shape.group_size
        gate = self._buffer("fallback", "gate", (top_k, shape.dff))
        up = self._buffer("fallback", "up", (top_k, shape.dff))
        act = self._buffer("fallback", "act", (top_k, shape.dff))
        down = self._buffer("fallback", "down", (top_k, shape.d_model))
        out = self._buffer("fallback", "out", (shape.d_model,))
        xr, xsum = self._prepared("fallback", "x", x.reshape(1, -1), bits, group_size)
        _gathered_gemv(q.gate.w, q.gate.scales, q.gate.biases, indices, xr, xsum, gate, bits, group_size)
        _gathered_gemv(q.up.w, q.up.scales, q.up.biases, indices, xr, xsum, up, bits, group_size)
        _swiglu(gate, up, act)
        act_r, act_sum = self._prepared("fallback", "act_in", act, bits, group_size)
        _gathered_gemv(q.down.w, q.down.scales, q.down.biases, indices, act_r, act_sum, down, bits, group_size)
        _weighted_sum(down, scores, out)
        return self._rounded(out, shape.dtype)

    def library(self, x: np.ndarray, indices: np.ndarray, scores: np.ndarray, layer: CpuLayer) -> np.ndarray:
        """`mx.gather_qmm` (the mlx-lm call sequence) on MLX's CPU device, in float32 whatever the shape's dtype:
        MLX's CPU float16/bfloat16 quantized matmul is inaccurate. Evaluated before returning (no async CPU)."""
        import mlx.core as mx

        from harness.devices.backends.mlx_paths import gather_qmm_step, upload_mlx, upload_mlx_inputs

        self._check_inputs(x, indices, scores, layer)
        with mx.stream(mx.cpu):
            if layer.mlx is None:
                layer.mlx = upload_mlx(layer.host, dtype="float32")
            result = gather_qmm_step(*upload_mlx_inputs(x, indices, scores, "float32"), layer.mlx)
            mx.eval(result)
        return self._rounded(np.array(result, dtype=np.float32), layer.host.shape.dtype)

    @staticmethod
    def _rounded(out: np.ndarray, dtype: str) -> np.ndarray:
        """The one rounding of a path's f32 result to the activation dtype (a no-op for float32)."""
        return out if dtype == "float32" else round_to_dtype(out, dtype)

    # ---- timing support -----------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Nothing to wait for: every CPU path returns after its work is done."""

    def copy_bandwidth(self, nbytes: int = 1 << 30) -> float:
        """Best of 5 parallel numba copies of `nbytes` (after a warm-up that faults the pages in): 2·nbytes / s."""
        src = np.ones(nbytes // 4, dtype=np.float32)
        dst = np.empty_like(src)
        _copy(src, dst)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            _copy(src, dst)
            best = min(best, time.perf_counter() - start)
        return 2 * src.nbytes / best


BACKEND = CpuBackend
