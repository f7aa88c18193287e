// Fused decode-MoE step for one token, MLX affine format: two launches through `mx.fast.metal_kernel`.
//   kernel A  moe_gate_up_swiglu  gate and up GEMVs of every selected expert + SwiGLU -> act (f32)
//   kernel B  moe_down_scale      down GEMV x score -> partial (f32); the sum over slots follows as an MLX op
// A line-by-line translation of kernels/cuda/moe_fused.cu + moe_common.cuh (same names, same loops); the
// places where the dialects differ are marked "CUDA:".
//
// Not a standalone .metal file: MLX generates each kernel's signature from its input/output names and the
// dtypes of the arrays, and prepends the header. harness/backends/metal.py splits this file at the
// `// ==== ... ====` markers; the `// inputs:` / `// outputs:` lines under a kernel marker name its
// parameters in order. Template arguments (metal_kernel's `template=`; CUDA: -D options):
//   T           activation dtype of x, scales, biases: float, float16_t or bfloat16_t
//   BITS        4 or 8: bits per quantized weight
//   GROUP_SIZE  32, 64 or 128: consecutive weights of a row sharing one (scale, bias)
//   ROWS        output rows per simdgroup (1 = the reference design: one simdgroup per output row)
// SGY (simdgroups per threadgroup) is only the launch's threadgroup shape here (CUDA: compile-time SGY).
// Small inputs (indices, scores when top_k < 8) are bound in the `constant` address space by MLX, so the
// bodies read them directly and never pass them to a helper that expects `device` pointers.

// ==== header ====
#include <metal_stdlib>

// Per-format constants (CUDA: namespace-scope constexprs from the -D options). A lane reads one 16-byte chunk
// (uint4, four packed words) of a row per step.
template <int BITS, int GROUP_SIZE>
struct MoeFormat {
  static constant constexpr const int PER_WORD = 32 / BITS;  // quantized values per uint32 word
  static constant constexpr const int VALS = 4 * PER_WORD;  // values per chunk: 32 (4-bit) or 16 (8-bit)
  static constant constexpr const int HALF = PER_WORD / 2;  // values per 16-bit half word
  static constant constexpr const int CHUNKS_PER_GROUP = GROUP_SIZE / VALS;
  static constant constexpr const uint MASK = (1u << BITS) - 1u;
  // A group is GROUP_SIZE*BITS/32 >= 4 words, so every row is a whole number of uint4 chunks, each inside one
  // group, and every row starts 16-byte aligned (MLX buffers are page aligned).
  static_assert(BITS == 4 || BITS == 8, "BITS must be 4 or 8");
  static_assert(GROUP_SIZE % VALS == 0, "a 16-byte chunk must not straddle two groups");
};

// SiLU with the precise exp (CUDA: expf without fast-math; metal::exp may be the fast variant).
inline float moe_silu(float g) { return g / (1.0f + metal::precise::exp(-g)); }

// ---- loading inputs ------------------------------------------------------------------------------------
// VALS consecutive inputs starting at p as f32. Kernel B reads the f32 activations with 16-byte loads.
// CUDA: 16-bit inputs travel as raw uint4 pairs converted by hand (CuPy has no bfloat16); Metal has the
// types, so the generic overload does typed loads of consecutive elements, which the compiler merges.
template <int VALS>
inline void moe_load_vals(const device float* p, thread float* v) {
  const device float4* p4 = reinterpret_cast<const device float4*>(p);
  for (int i = 0; i < VALS / 4; ++i) {  // CUDA: #pragma unroll (constant trip counts unroll here too)
    const float4 t = p4[i];
    v[4 * i + 0] = t.x;
    v[4 * i + 1] = t.y;
    v[4 * i + 2] = t.z;
    v[4 * i + 3] = t.w;
  }
}

template <int VALS, typename X>
inline void moe_load_vals(const device X* p, thread float* v) {
  for (int i = 0; i < VALS; ++i) {
    v[i] = static_cast<float>(p[i]);
  }
}

// ---- dequantized dot products --------------------------------------------------------------------------
// Dequantization without int->float conversions (CUDA: I2F runs at a quarter of the FMA rate there; the same
// trick keeps the two sources identical): a value masked *in place* inside a 16-bit half word is
// q * 2^(BITS*j); OR-ing it into the mantissa of 2^23 and subtracting 2^23 gives that number exactly. The
// input it multiplies was prescaled by 2^-(BITS*j) once per chunk and reused for every row of the
// simdgroup, so the product equals q * x bit for bit.
constant constexpr const uint MAGIC_BITS = 0x4b000000u;  // 2^23 as f32
constant constexpr const float MAGIC = 8388608.0f;

// Factor for the input matching value i of a word: 2^-(BITS * (i mod HALF)), a power of two (exact).
template <int BITS, int GROUP_SIZE>
inline constexpr float moe_prescale(int i) {
  return 1.0f / static_cast<float>(1u << (BITS * (i % MoeFormat<BITS, GROUP_SIZE>::HALF)));
}

// (a & mask) | magic. CUDA: inline PTX to force a single LOP3; Metal has no inline assembly, the compiler
// chooses the instructions.
inline uint moe_and_or(uint a, uint mask, uint magic) { return (a & mask) | magic; }

// sum_i q_i * x_i over one chunk (4 words = VALS values, LSB first) with prescaled inputs; four independent
// partial sums, one per word, keep the FMA chains short.
template <int BITS, int GROUP_SIZE>
inline float moe_chunk_qdot(uint4 wq, const thread float* xs) {
  using F = MoeFormat<BITS, GROUP_SIZE>;
  const uint words[4] = {wq.x, wq.y, wq.z, wq.w};
  float part[4];
  for (int k = 0; k < 4; ++k) {
    const uint halves[2] = {words[k], words[k] >> 16};
    float acc = 0.0f;
    for (int i = 0; i < F::PER_WORD; ++i) {
      const uint biased = moe_and_or(halves[i / F::HALF], F::MASK << (BITS * (i % F::HALF)), MAGIC_BITS);
      acc = metal::fma(metal::as_type<float>(biased) - MAGIC, xs[k * F::PER_WORD + i], acc);  // CUDA: __uint_as_float
    }
    part[k] = acc;
  }
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// Sum of a simdgroup's 32 lane values. CUDA: a __shfl_down_sync tree, the sum lands in lane 0; simd_sum
// gives it to every lane.
inline float moe_warp_sum(float v) { return metal::simd_sum(v); }

// NR rows of stacked expert matrices that one simdgroup dots with the same input vector: for each, its
// in_dim*BITS/128 chunks (uint4) and its in_dim/GROUP_SIZE scales and biases (type S = T).
template <int NR, typename S>
struct RowSet {
  const device uint4* w[NR];
  const device S* scales[NR];
  const device S* biases[NR];
};

// Point slots [at, at + ROWS) of `rows` at rows row0 .. row0+ROWS-1 of expert `expert` of a stacked matrix
// (E, n_rows, in_dim); offsets in 64-bit arithmetic (E * n_rows * in_dim can exceed 2^31).
template <int BITS, int GROUP_SIZE, int ROWS, int NR, typename S>
inline void moe_bind_rows(thread RowSet<NR, S>& rows, int at, const device uint4* w, const device S* scales,
                          const device S* biases, int expert, int n_rows, int row0, int in_dim) {
  using F = MoeFormat<BITS, GROUP_SIZE>;
  const size_t chunks = static_cast<size_t>(in_dim / F::VALS);
  const size_t groups = static_cast<size_t>(in_dim / GROUP_SIZE);
  for (int r = 0; r < ROWS; ++r) {
    const size_t row =
        static_cast<size_t>(expert) * static_cast<size_t>(n_rows) + static_cast<size_t>(row0 + r);
    rows.w[at + r] = w + row * chunks;
    rows.scales[at + r] = scales + row * groups;
    rows.biases[at + r] = biases + row * groups;
  }
}

// Dot products of the NR rows with one input vector x of in_dim values, computed by one simdgroup; out[r]
// is valid in every lane. Lane l takes chunks l, l+32, ... so the simdgroup reads 512 contiguous bytes of a
// row per step. Per chunk it loads the VALS inputs once (for all NR rows) and uses, per group,
//   sum_i (q_i*s + b) * x_i = s * sum_i q_i*x_i + b * sum_i x_i
// Accumulation is f32 throughout. CUDA: the lane comes from threadIdx.x; Metal passes the attribute in.
template <int BITS, int GROUP_SIZE, int NR, typename S, typename X>
inline void moe_rows_dot(thread const RowSet<NR, S>& rows, const device X* x, int in_dim, thread float* out,
                         int lane) {
  using F = MoeFormat<BITS, GROUP_SIZE>;
  const int chunks = in_dim / F::VALS;
  float acc[NR];
  for (int r = 0; r < NR; ++r) {
    acc[r] = 0.0f;
  }
  for (int c = lane; c < chunks; c += 32) {  // CUDA: #pragma unroll 2
    float xs[F::VALS];
    moe_load_vals<F::VALS>(x + static_cast<size_t>(c) * F::VALS, xs);
    float xsum = 0.0f;
    for (int i = 0; i < F::VALS; ++i) {
      xsum += xs[i];
      xs[i] *= moe_prescale<BITS, GROUP_SIZE>(i % F::PER_WORD);
    }
    const int group = c / F::CHUNKS_PER_GROUP;
    for (int r = 0; r < NR; ++r) {
      const float qx = moe_chunk_qdot<BITS, GROUP_SIZE>(rows.w[r][c], xs);
      const float s = static_cast<float>(rows.scales[r][group]);  // CUDA: moe_to_float(__ldg(...))
      const float b = static_cast<float>(rows.biases[r][group]);
      acc[r] = metal::fma(s, qx, metal::fma(b, xsum, acc[r]));
    }
  }
  for (int r = 0; r < NR; ++r) {
    out[r] = moe_warp_sum(acc[r]);
  }
}

// ==== kernel moe_gate_up_swiglu ====
// inputs: x, indices, gate_w, gate_scales, gate_biases, up_w, up_scales, up_biases
// outputs: act
// Kernel A. Grid (32, dff / ROWS, top_k) threads, threadgroup (32, SGY, 1).
// Simdgroup (y, k) computes rows f = y*ROWS .. +ROWS-1 of expert e = indices[k]:
//   g = Wg[e,f] . x, u = Wu[e,f] . x (dequantized on the fly, f32 accumulation),
//   act[k,f] = silu(g) * u (f32).
// Gate and up rows share every input value the simdgroup loads (2*ROWS rows per load).
// Memory: reads ROWS rows of gate_w and of up_w (+ their scales/biases) per simdgroup, x (d_model values,
// cache resident); writes act (top_k, dff) f32.
// CUDA: the row comes from blockIdx/threadIdx and d_model, dff are kernel arguments; MLX dispatches exactly
// the grid (edge threadgroups may be partial) and binds the `*_shape` buffers the body names.
const int lane = static_cast<int>(thread_index_in_simdgroup);
const int slot = static_cast<int>(thread_position_in_grid.z);
const int row0 = static_cast<int>(thread_position_in_grid.y) * ROWS;
const int d_model = x_shape[0];
const int dff = gate_w_shape[1];
if (row0 >= dff) {
  return;  // the whole simdgroup leaves (dff is a multiple of ROWS), so simd_sum below sees full simdgroups
}
const int expert = static_cast<int>(indices[slot]);
RowSet<2 * ROWS, T> rows;
moe_bind_rows<BITS, GROUP_SIZE, ROWS>(rows, 0, reinterpret_cast<const device uint4*>(gate_w), gate_scales,
                                      gate_biases, expert, dff, row0, d_model);
moe_bind_rows<BITS, GROUP_SIZE, ROWS>(rows, ROWS, reinterpret_cast<const device uint4*>(up_w), up_scales,
                                      up_biases, expert, dff, row0, d_model);
float dot[2 * ROWS];
moe_rows_dot<BITS, GROUP_SIZE>(rows, x, d_model, dot, lane);
if (lane == 0) {
  for (int r = 0; r < ROWS; ++r) {
    act[static_cast<size_t>(slot) * dff + row0 + r] = moe_silu(dot[r]) * dot[ROWS + r];
  }
}

// ==== kernel moe_down_scale ====
// inputs: act, indices, scores, down_w, down_scales, down_biases
// outputs: partial
// Kernel B. Grid (32, d_model / ROWS, top_k) threads, threadgroup (32, SGY, 1).
// Simdgroup (y, k) computes rows h = y*ROWS .. +ROWS-1 of expert e = indices[k]:
//   partial[k,h] = scores[k] * (Wd[e,h] . act[k]) (f32).
// Memory: reads ROWS rows of down_w (+ scales/biases) per simdgroup and act[k] (dff f32, cache resident);
// writes partial (top_k, d_model) f32.
// CUDA: the last block of each row tile also folds the sum over slots (atomics + fences) into the output;
// here that sum is a separate MLX op (partial.sum(0) in f32, rounded once to T), so an early return is safe.
const int lane = static_cast<int>(thread_index_in_simdgroup);
const int slot = static_cast<int>(thread_position_in_grid.z);
const int row0 = static_cast<int>(thread_position_in_grid.y) * ROWS;
const int dff = act_shape[1];
const int d_model = down_w_shape[1];
if (row0 >= d_model) {
  return;
}
RowSet<ROWS, T> rows;
moe_bind_rows<BITS, GROUP_SIZE, ROWS>(rows, 0, reinterpret_cast<const device uint4*>(down_w), down_scales,
                                      down_biases, static_cast<int>(indices[slot]), d_model, row0, dff);
float dot[ROWS];
moe_rows_dot<BITS, GROUP_SIZE>(rows, act + static_cast<size_t>(slot) * dff, dff, dot, lane);
if (lane == 0) {
  for (int r = 0; r < ROWS; ++r) {
    partial[static_cast<size_t>(slot) * d_model + row0 + r] = scores[slot] * dot[r];
  }
}
