// Fused decode-MoE step for one token, MLX affine format, as bodies for `mx.fast.metal_kernel`.
//
// Not a standalone .metal file: MLX generates each kernel's signature from its input/output names and
// prepends the header. harness/backends/metal.py splits this file at the `// ==== ... ====` markers; the
// `// inputs:` / `// outputs:` line under each kernel marker lists its parameter names in order.
// Template constants (from metal_kernel's `template=`): T = activation dtype (float, float16_t,
// bfloat16_t), BITS = 4 or 8, GROUP_SIZE = 32, 64 or 128. Accumulation is always f32.
//
// This is a line-by-line translation of kernels/cuda/moe_fused.cu; the places where the dialects differ
// are marked "CUDA:".

// ==== header ====
#include <metal_stdlib>

// One lane's share of a dequantized dot product: the packed word `word` holds PACK = 32/BITS consecutive
// weights of one group (scale s, bias b), LSB first; `xs` points at the PACK matching inputs. Uses
//   sum_j (q_j*s + b) * x_j = s * sum_j q_j*x_j + b * sum_j x_j
// so the inner loop is one multiply-add per value (as MLX's own qmv does).
template <int BITS, typename X>
inline float moe_word_dot(uint32_t word, float s, float b, const device X* xs) {
  constexpr int PACK = 32 / BITS;
  constexpr uint32_t MASK = (1u << BITS) - 1u;
  float qx = 0.0f;
  float xsum = 0.0f;
  for (int j = 0; j < PACK; ++j) {  // CUDA: #pragma unroll; the Metal compiler unrolls constant trip counts
    const float xj = static_cast<float>(xs[j]);
    const float q = static_cast<float>((word >> (j * BITS)) & MASK);
    qx = metal::fma(q, xj, qx);
    xsum += xj;
  }
  return metal::fma(s, qx, b * xsum);
}

// Lane `lane`'s partial dot product of quantized row `w` (words_per_row packed words; one scale and bias
// of type S per group) with `xs`. Lanes take words lane, lane+32, ... so a simdgroup reads 128 contiguous
// bytes per step; the caller reduces the 32 partial sums.
template <int BITS, int GROUP_SIZE, typename S, typename X>
inline float moe_row_dot_lane(
    const device uint32_t* w,
    const device S* scales,
    const device S* biases,
    const device X* xs,
    int words_per_row,
    int lane) {
  constexpr int PACK = 32 / BITS;
  constexpr int WORDS_PER_GROUP = GROUP_SIZE / PACK;
  float acc = 0.0f;
  for (int word = lane; word < words_per_row; word += 32) {
    const int group = word / WORDS_PER_GROUP;
    acc += moe_word_dot<BITS>(
        w[word], static_cast<float>(scales[group]), static_cast<float>(biases[group]), xs + word * PACK);
  }
  return acc;
}

// ==== kernel moe_gate_up_swiglu ====
// inputs: x, indices, gate_w, gate_scales, gate_biases, up_w, up_scales, up_biases
// outputs: act
// Kernel A. Grid (32, dff, top_k) threads, threadgroup (32, SGY, 1): one simdgroup per (slot k, row f),
// SGY rows per threadgroup. Each simdgroup streams row f of expert e = indices[k] from gate and up
// (x is re-read from cache by every row), then writes act[k, f] = silu(g) * u in f32.
// CUDA: blockIdx/threadIdx arithmetic; here MLX dispatches exactly the grid (non-uniform edge threadgroups),
// and d_model / dff come from the `*_shape` buffers MLX binds instead of kernel arguments.
const int lane = int(thread_index_in_simdgroup);
const int row = int(thread_position_in_grid.y);
const int slot = int(thread_position_in_grid.z);
const int d_model = x_shape[0];
const int dff = gate_w_shape[1];
if (row >= dff) {
  return;  // whole simdgroup leaves together, so simd_sum below never sees a partial simdgroup
}
const int words_per_row = d_model * BITS / 32;
const int groups_per_row = d_model / GROUP_SIZE;
const size_t expert = size_t(indices[slot]);
const size_t w_row = (expert * size_t(dff) + size_t(row)) * size_t(words_per_row);
const size_t g_row = (expert * size_t(dff) + size_t(row)) * size_t(groups_per_row);

float g = moe_row_dot_lane<BITS, GROUP_SIZE>(
    gate_w + w_row, gate_scales + g_row, gate_biases + g_row, x, words_per_row, lane);
float u = moe_row_dot_lane<BITS, GROUP_SIZE>(
    up_w + w_row, up_scales + g_row, up_biases + g_row, x, words_per_row, lane);
g = metal::simd_sum(g);  // CUDA: __shfl_down_sync butterfly; the full sum lands in lane 0
u = metal::simd_sum(u);
if (lane == 0) {
  // CUDA: expf (precise with default flags); here metal::precise::exp, immune to fast-math
  const float silu = g / (1.0f + metal::precise::exp(-g));
  act[size_t(slot) * size_t(dff) + size_t(row)] = silu * u;
}

// ==== kernel moe_down_scale ====
// inputs: act, indices, scores, down_w, down_scales, down_biases
// outputs: partial
// Kernel B. Grid (32, d_model, top_k) threads, threadgroup (32, SGY, 1): one simdgroup per (slot k, row h).
// Streams row h of expert e = indices[k] from down against act[k, :] (f32, from kernel A) and writes
// partial[k, h] = scores[k] * d in f32. The host sums partial over k in f32 and rounds once to T.
// CUDA: as in kernel A (grid arithmetic, explicit size arguments).
const int lane = int(thread_index_in_simdgroup);
const int row = int(thread_position_in_grid.y);
const int slot = int(thread_position_in_grid.z);
const int dff = act_shape[1];
const int d_model = down_w_shape[1];
if (row >= d_model) {
  return;
}
const int words_per_row = dff * BITS / 32;
const int groups_per_row = dff / GROUP_SIZE;
const size_t expert = size_t(indices[slot]);
const size_t w_row = (expert * size_t(d_model) + size_t(row)) * size_t(words_per_row);
const size_t g_row = (expert * size_t(d_model) + size_t(row)) * size_t(groups_per_row);

float d = moe_row_dot_lane<BITS, GROUP_SIZE>(
    down_w + w_row, down_scales + g_row, down_biases + g_row, act + size_t(slot) * size_t(dff),
    words_per_row, lane);
d = metal::simd_sum(d);
if (lane == 0) {
  partial[size_t(slot) * size_t(d_model) + size_t(row)] = scores[slot] * d;
}
