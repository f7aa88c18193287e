"""A synthetic MoE decoder with random weights at a catalog model's shapes, written once for every array library.

Per token: embedding row → `layers` × (RMSNorm, single-token GQA attention over the KV cache, RMSNorm, softmax
top-k router, routed MoE through the path under test [+ shared expert]) → final RMSNorm → LM head → greedy argmax.

What is real and what is simplified (so nobody reads more into the numbers than is there):
- The routed MoE layers are real MLX-affine quantized layers (harness.devices.quant_layer) run by the backend's own
  paths; that is the part the fused/fallback comparison is about. Every layer holds its own device copy of one random
  host layer (see `routed_layer`), so each layer still streams its own weights from memory.
- The shared expert, when the model has one, is a one-expert quantized layer that always runs the *fallback* path
  (score 1, no gate): it is a dense MLP in real engines, outside what the Dff cap switches, so it is a constant cost
  in both arms.
- Attention, router, norms and the LM head are dense weights in the compute dtype (harness.measure.workloads.arrays),
  not 4-bit: their bytes are ~4x a 4-bit model's, so the MoE share of decode time — and with it the fused/fallback
  tok/s ratio — is diluted relative to a real quantized model. The `layer` workload isolates the kernels.
- No rotary embedding (elementwise, negligible in decode). The LM head is its own matrix: tied to random
  embeddings, the current token's own row would win every argmax and greedy decode would repeat one token.
  Its logits are O(1), a hard case for greedy agreement (the top two logits are close).
- The KV cache holds `context` random prefilled positions; new tokens are written after them and every step attends
  over all positions so far (a growing cache, as in real decode). Each run writes the same positions again from
  the same start token, so runs of one path are identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from harness.config.catalog import ModelShape
from harness.config.shapes import MoeShape
from harness.devices.backends.base import Backend
from harness.devices.quant_layer import make_layer
from harness.measure.workloads.arrays import ArrayOps

RMS_EPS = 1e-5
# Seed streams of the dense weights (make_layer owns its own streams for the quantized layers).
_DENSE_STREAM = 2
_EMBED_STREAM = 3
_HEAD_STREAM = 4
_SHARED_SEED_OFFSET = 1 << 20  # shared-expert layers draw from seeds far from the routed layers'


@dataclass(frozen=True)
class DecoderShapes:
    """Everything the decoder's size depends on."""

    model: ModelShape
    moe: MoeShape
    shared: MoeShape | None
    dense_bytes: int  # bytes per dense weight / KV element in the compute dtype
    context: int  # prefilled KV positions
    new_tokens: int  # positions written per run (warm-up + timed tokens)

    @property
    def kv_dim(self) -> int:
        return self.model.n_kv_heads * self.model.head_dim

    def attention_params(self) -> int:
        q_dim = self.model.n_heads * self.model.head_dim
        return self.model.d_model * (2 * q_dim + 2 * self.kv_dim)

    def layer_dense_params(self) -> int:
        return self.attention_params() + self.model.n_experts * self.model.d_model + 2 * self.model.d_model

    def shared_bytes(self) -> int:
        return self.shared.expert_bytes() if self.shared else 0

    def memory_bytes(self) -> int:
        """Device weights + KV cache + host staging (one quantized layer, one float32 vocab × d_model table)."""
        m = self.model
        per_layer = self.moe.expert_bytes() + self.shared_bytes() + self.layer_dense_params() * self.dense_bytes
        kv = m.layers * 2 * self.kv_dim * (self.context + self.new_tokens) * self.dense_bytes
        embedding_and_head = 2 * m.vocab * m.d_model * self.dense_bytes
        staging = self.moe.expert_bytes() + m.vocab * m.d_model * 4
        return m.layers * per_layer + kv + embedding_and_head + staging

    def bytes_per_token(self) -> int:
        """Bytes one decode step reads: routed experts, shared expert, dense weights, the KV cache, the LM head."""
        m = self.model
        kv_read = 2 * self.kv_dim * (self.context + self.new_tokens // 2) * self.dense_bytes
        per_layer = (
            self.moe.weight_bytes_per_step() + self.shared_bytes() + self.layer_dense_params() * self.dense_bytes
        )
        return m.layers * (per_layer + kv_read) + m.vocab * m.d_model * self.dense_bytes


@dataclass
class Capture:
    """The first MoE call of a decode (layer 0, first token): its inputs and the path's output."""

    x: Any
    indices: Any
    scores: Any
    out: Any


@dataclass
class _Layer:
    attn_norm: Any
    wq: Any
    wk: Any
    wv: Any
    wo: Any
    moe_norm: Any
    router: Any
    moe: Any
    shared: Any
    keys: Any  # (n_kv_heads, positions, head_dim)
    values: Any


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """Uniform weights with variance 1/fan_in, so a matvec keeps unit-size activations."""
    bound = np.float32(math.sqrt(3.0 / fan_in))
    return (rng.random(shape, dtype=np.float32) * np.float32(2) - np.float32(1)) * bound


def _rng(seed: int, stream: int, index: int = 0) -> np.random.Generator:
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence([seed, stream, index])))


class SyntheticDecoder:
    """The model on the device; `generate` runs greedy decode steps with a chosen MoE path."""

    def __init__(self, backend: Backend, ops: ArrayOps, shapes: DecoderShapes, seed: int):
        self.backend, self.ops, self.shapes, self.seed = backend, ops, shapes, seed
        m = shapes.model
        self.embedding = ops.device(_uniform(_rng(seed, _EMBED_STREAM), (m.vocab, m.d_model), 3))
        self.final_norm = ops.device(np.ones(m.d_model, dtype=np.float32))
        self.lm_head = ops.device(_uniform(_rng(seed, _HEAD_STREAM), (m.vocab, m.d_model), m.d_model))
        self.layers = [self._layer(index) for index in range(m.layers)]
        # the shared expert's fixed routing: its only expert with weight 1, in the backend's input format
        one = backend.upload_inputs(
            np.zeros(m.d_model, np.float32), np.zeros(1, np.int32), np.ones(1, np.float32), "float32"
        )
        self.shared_routing = one[1:]
        self.start_token = ops.token(seed % m.vocab)

    @cached_property
    def routed_layer(self):
        """The host (numpy) routed-expert layer every decoder layer uploads its own device copy of.

        One random layer serves all layers: distinct device memory is what makes each layer stream its weights,
        and each layer's own router still selects its own experts. Generating random packed words is slow on the
        host (~0.2-0.8 GB/s), and a model's worth of them would dominate a GPU sweep's wall time.
        """
        return make_layer(self.shapes.moe, self.seed)

    @cached_property
    def shared_layer(self):
        """The host shared-expert layer (one for all layers, like `routed_layer`), or None."""
        shared = self.shapes.shared
        return None if shared is None else make_layer(shared, self.seed + _SHARED_SEED_OFFSET)

    def _layer(self, index: int) -> _Layer:
        m, shapes, ops = self.shapes.model, self.shapes, self.ops
        rng = _rng(self.seed, _DENSE_STREAM, index)
        q_dim, kv_dim = m.n_heads * m.head_dim, shapes.kv_dim
        positions = shapes.context + shapes.new_tokens
        cache = rng.standard_normal((2, m.n_kv_heads, positions, m.head_dim), dtype=np.float32)
        shared = None if self.shared_layer is None else self.backend.upload(self.shared_layer)
        return _Layer(
            attn_norm=ops.device(np.ones(m.d_model, np.float32)),
            wq=ops.device(_uniform(rng, (q_dim, m.d_model), m.d_model)),
            wk=ops.device(_uniform(rng, (kv_dim, m.d_model), m.d_model)),
            wv=ops.device(_uniform(rng, (kv_dim, m.d_model), m.d_model)),
            wo=ops.device(_uniform(rng, (m.d_model, q_dim), q_dim)),
            moe_norm=ops.device(np.ones(m.d_model, np.float32)),
            router=ops.device(_uniform(rng, (m.n_experts, m.d_model), m.d_model)),
            moe=self.backend.upload(self.routed_layer),
            shared=shared,
            keys=ops.device(cache[0]),
            values=ops.device(cache[1]),
        )

    # ---- math (xp-generic) ----------------------------------------------------------------------------------------
    def _rms_norm(self, h: Any, weight: Any) -> Any:
        xp, f32 = self.ops.xp, self.ops.float32
        hf = h.astype(f32)
        return (hf / xp.sqrt(xp.mean(hf * hf) + RMS_EPS)).astype(self.ops.compute) * weight

    def _softmax(self, logits: Any) -> Any:
        xp = self.ops.xp
        e = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)

    def _attention(self, layer: _Layer, x: Any, position: int) -> Any:
        m, ops = self.shapes.model, self.ops
        group = m.n_heads // m.n_kv_heads
        q = ops.matvec(layer.wq, x).reshape(m.n_kv_heads, group, m.head_dim)
        layer.keys[:, position, :] = ops.matvec(layer.wk, x).reshape(m.n_kv_heads, m.head_dim)
        layer.values[:, position, :] = ops.matvec(layer.wv, x).reshape(m.n_kv_heads, m.head_dim)
        keys = layer.keys[:, : position + 1, :]
        values = layer.values[:, : position + 1, :]
        scores = (q @ keys.transpose(0, 2, 1)).astype(ops.float32) * (1.0 / math.sqrt(m.head_dim))
        weights = self._softmax(scores).astype(ops.compute)
        return ops.matvec(layer.wo, (weights @ values).reshape(-1))

    def _route(self, layer: _Layer, x: Any) -> tuple[Any, Any]:
        """Softmax over the top-k router logits (Mixtral / Qwen3 norm_topk_prob style): (indices, f32 scores)."""
        xp, ops = self.ops.xp, self.ops
        k, n = self.shapes.moe.top_k, self.shapes.moe.n_experts
        logits = ops.matvec(layer.router, x).astype(ops.float32)
        top = xp.argpartition(logits, n - k)[n - k :]
        return ops.moe_indices(top), ops.representable(self._softmax(xp.take(logits, top)))

    def _moe(self, layer: _Layer, x: Any, path: str, capture: list[Capture] | None) -> Any:
        """Routed experts via `path` (+ the shared expert via the fallback path), as a compute-dtype array."""
        ops, paths = self.ops, self.backend.paths()
        moe_x = ops.moe_input(x)
        indices, scores = self._route(layer, x)
        out = paths[path](moe_x, indices, scores, layer.moe)
        if capture is not None and not capture:
            capture.append(Capture(ops.keep(moe_x), ops.keep(indices), ops.keep(scores), ops.keep(out)))
        # consumed before the shared call: a path may reuse its output buffer on the next call
        routed = ops.from_moe(out)
        if layer.shared is None:
            return routed
        return routed + ops.from_moe(paths["fallback"](moe_x, *self.shared_routing, layer.shared))

    def generate(self, path: str, token: Any, offset: int, count: int, capture: list[Capture] | None) -> list[Any]:
        """`count` greedy tokens after `token`, writing KV positions context+offset onward. `capture` (a list),
        when empty, receives the first MoE call's inputs and output. Returns device scalars (not synchronised)."""
        xp, ops = self.ops.xp, self.ops
        out = []
        for step in range(count):
            position = self.shapes.context + offset + step
            h = xp.take(self.embedding, token, axis=0).reshape(-1)
            for layer in self.layers:
                h = h + self._attention(layer, self._rms_norm(h, layer.attn_norm), position)
                h = h + self._moe(layer, self._rms_norm(h, layer.moe_norm), path, capture)
            logits = ops.matvec(self.lm_head, self._rms_norm(h, self.final_norm))
            token = xp.argmax(logits.astype(ops.float32))
            ops.submitted(token)
            out.append(token)
        return out

    def host_tokens(self, tokens: list[Any]) -> list[int]:
        """Device token scalars -> Python ints (one transfer)."""
        if not tokens:
            return []
        return [int(t) for t in self.backend.to_numpy(self.ops.xp.stack(tokens))]
