// Shared pieces of the decode-MoE CUDA kernels: compile-time configuration, activation dtype traits and the
// warp dot product of packed affine-quantized rows with one input vector.
//
// No standard headers on purpose: NVRTC compiles this without include paths (CuPy's cache key covers only
// the source string, so harness/backends/cuda_source.py pastes this file into each translation unit).
// MOE_HOST_EMULATION is defined only by tests/cuda_emulation.py, which compiles these kernels with g++ to
// check them on a CPU: g++ cannot run PTX, so the three inline-PTX helpers have plain C++ twins there.
//
// Compile-time configuration (-D options, built by harness/backends/cuda_source.py):
//   MOE_BITS        4 or 8: bits per quantized weight
//   MOE_GROUP_SIZE  32, 64 or 128: consecutive weights of a row sharing one (scale, bias)
//   MOE_DTYPE       0 = float32, 1 = float16, 2 = bfloat16: activation dtype of x, scales, biases, outputs
//   MOE_SGY         warps per block (default 8)
//   MOE_ROWS        output rows per warp (default 1 = the reference design: one warp per output row); larger
//                   values let a warp reuse each input value it loaded for several rows
#ifndef MOE_COMMON_CUH
#define MOE_COMMON_CUH

#if !defined(MOE_BITS) || !defined(MOE_GROUP_SIZE) || !defined(MOE_DTYPE)
#error "define MOE_BITS, MOE_GROUP_SIZE and MOE_DTYPE (see harness/backends/cuda_source.py)"
#endif
#ifndef MOE_SGY
#define MOE_SGY 8
#endif
#ifndef MOE_ROWS
#define MOE_ROWS 1
#endif

constexpr int BITS = MOE_BITS;
constexpr int GROUP_SIZE = MOE_GROUP_SIZE;
constexpr int SGY = MOE_SGY;
constexpr int ROWS = MOE_ROWS;

// A lane reads one 16-byte chunk (uint4, four packed words) of a row per step.
constexpr int PER_WORD = 32 / BITS;             // quantized values per uint32 word
constexpr int VALS = 4 * PER_WORD;              // values per chunk: 32 (4-bit) or 16 (8-bit)
constexpr int HALF = PER_WORD / 2;              // values per 16-bit half word
constexpr int CHUNKS_PER_GROUP = GROUP_SIZE / VALS;
constexpr unsigned int MASK = (1u << BITS) - 1u;

static_assert(BITS == 4 || BITS == 8, "MOE_BITS must be 4 or 8");
static_assert(GROUP_SIZE == 32 || GROUP_SIZE == 64 || GROUP_SIZE == 128,
              "MOE_GROUP_SIZE must be 32, 64 or 128");
// Why 16-byte loads never need a narrower fallback: a group is GROUP_SIZE*BITS/32 >= 4 words, so every row
// (a whole number of groups) is a whole number of uint4 chunks, each inside one group, and every row starts
// 16-byte aligned in a 256-byte aligned allocation.
static_assert(GROUP_SIZE % VALS == 0, "a 16-byte chunk must not straddle two groups");
static_assert(SGY >= 1 && SGY * 32 <= 1024, "MOE_SGY warps must fit one block");
// dff and d_model are multiples of GROUP_SIZE >= 32, so ROWS dividing 32 means a warp's rows are all in range
// or all out of range: no per-row bounds checks.
static_assert(ROWS == 1 || ROWS == 2 || ROWS == 4, "MOE_ROWS must be 1, 2 or 4");

// ---- activation dtype ------------------------------------------------------------------------------------
// float16 and bfloat16 travel as raw 16-bit patterns (CuPy has no bfloat16 dtype) and are converted with
// PTX / integer code here, so no cuda_fp16.h / cuda_bf16.h include path is needed.
#if MOE_DTYPE == 0
typedef float act_t;
#elif MOE_DTYPE == 1 || MOE_DTYPE == 2
typedef unsigned short act_t;
#else
#error "MOE_DTYPE must be 0 (float32), 1 (float16) or 2 (bfloat16)"
#endif

__device__ __forceinline__ float moe_to_float(act_t v) {
#if MOE_DTYPE == 0
  return v;
#elif MOE_DTYPE == 1 && defined(MOE_HOST_EMULATION)
  _Float16 h;
  __builtin_memcpy(&h, &v, sizeof h);
  return static_cast<float>(h);
#elif MOE_DTYPE == 1
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
#else
  return __uint_as_float(static_cast<unsigned int>(v) << 16);  // bf16 is the top half of an f32
#endif
}

// Round an f32 to the activation dtype: the one rounding each output gets.
__device__ __forceinline__ act_t moe_from_float(float f) {
#if MOE_DTYPE == 0
  return f;
#elif MOE_DTYPE == 1 && defined(MOE_HOST_EMULATION)
  const _Float16 rounded = static_cast<_Float16>(f);  // IEEE round to nearest even, as cvt.rn
  unsigned short h;
  __builtin_memcpy(&h, &rounded, sizeof h);
  return h;
#elif MOE_DTYPE == 1
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<unsigned short>((u >> 16) | 0x0040u);  // NaN stays a (quiet) NaN, never rounds to inf
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<unsigned short>(u >> 16);
#endif
}

// SiLU with the precise expf (the kernels are compiled without fast-math).
__device__ __forceinline__ float moe_silu(float g) { return g / (1.0f + expf(-g)); }

// ---- loading inputs --------------------------------------------------------------------------------------
// VALS consecutive inputs starting at p (16-byte aligned: chunks start at multiples of VALS >= 16 values),
// as f32, with 16-byte loads. Kernel B reads the f32 activations, everything else the activation dtype.
__device__ __forceinline__ void moe_load_vals(const float* __restrict__ p, float (&v)[VALS]) {
  const float4* p4 = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int i = 0; i < VALS / 4; ++i) {
    const float4 t = __ldg(p4 + i);
    v[4 * i + 0] = t.x;
    v[4 * i + 1] = t.y;
    v[4 * i + 2] = t.z;
    v[4 * i + 3] = t.w;
  }
}

#if MOE_DTYPE != 0
__device__ __forceinline__ void moe_load_vals(const act_t* __restrict__ p, float (&v)[VALS]) {
  const uint4* p4 = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < VALS / 8; ++i) {
    const uint4 t = __ldg(p4 + i);
    const unsigned int pairs[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[8 * i + 2 * j + 0] = moe_to_float(static_cast<act_t>(pairs[j] & 0xffffu));  // lower address first
      v[8 * i + 2 * j + 1] = moe_to_float(static_cast<act_t>(pairs[j] >> 16));
    }
  }
}
#endif

// ---- dequantized dot products --------------------------------------------------------------------------
// Dequantization without int->float conversions (I2F runs at a quarter of the FMA rate and would cap a
// 4-bit GEMV near half the memory bandwidth): a value masked *in place* inside a 16-bit half word is
// q * 2^(BITS*j); OR-ing it into the mantissa of 2^23 and subtracting 2^23 gives that number exactly
// (one LOP3 + one FADD). The input it multiplies was prescaled by 2^-(BITS*j) once per chunk and reused for
// every row of the warp, so the product equals q * x bit for bit.
constexpr unsigned int MAGIC_BITS = 0x4b000000u;  // 2^23 as f32
constexpr float MAGIC = 8388608.0f;

// Factor for the input matching value i of a word: 2^-(BITS * (i mod HALF)), a power of two (exact).
__device__ __forceinline__ constexpr float moe_prescale(int i) {
  return 1.0f / static_cast<float>(1u << (BITS * (i % HALF)));
}

// (a & mask) | magic in one LOP3. Written as PTX because the compiler otherwise emits two LOP3s, one per
// 32-bit immediate, doubling the integer work per weight.
__device__ __forceinline__ unsigned int moe_and_or(unsigned int a, unsigned int mask, unsigned int magic) {
#ifdef MOE_HOST_EMULATION
  return (a & mask) | magic;
#else
  unsigned int d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));  // 0xEA: (a & b) | c
  return d;
#endif
}

// sum_i q_i * x_i over one chunk (4 words = VALS values, LSB first) with prescaled inputs; four independent
// partial sums, one per word, keep the FMA chains short.
__device__ __forceinline__ float moe_chunk_qdot(uint4 wq, const float (&xs)[VALS]) {
  const unsigned int words[4] = {wq.x, wq.y, wq.z, wq.w};
  float part[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const unsigned int halves[2] = {words[k], words[k] >> 16};
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_WORD; ++i) {
      const unsigned int biased = moe_and_or(halves[i / HALF], MASK << (BITS * (i % HALF)), MAGIC_BITS);
      acc = fmaf(__uint_as_float(biased) - MAGIC, xs[k * PER_WORD + i], acc);
    }
    part[k] = acc;
  }
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// Sum of a warp's 32 lane values; the full sum lands in lane 0.
__device__ __forceinline__ float moe_warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// NR rows of stacked expert matrices that one warp dots with the same input vector: for each, its
// in_dim*BITS/128 chunks (uint4) and its in_dim/GROUP_SIZE scales and biases.
template <int NR>
struct RowSet {
  const uint4* w[NR];
  const act_t* scales[NR];
  const act_t* biases[NR];
};

// Point slots [at, at + ROWS) of `rows` at rows row0 .. row0+ROWS-1 of expert `expert` of a stacked matrix
// (E, n_rows, in_dim); offsets in 64-bit arithmetic (E * n_rows * in_dim can exceed 2^31).
template <int NR>
__device__ __forceinline__ void moe_bind_rows(RowSet<NR>& rows, int at, const uint4* __restrict__ w,
                                              const act_t* __restrict__ scales,
                                              const act_t* __restrict__ biases, int expert, int n_rows,
                                              int row0, int in_dim) {
  const size_t chunks = static_cast<size_t>(in_dim / VALS);
  const size_t groups = static_cast<size_t>(in_dim / GROUP_SIZE);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const size_t row = static_cast<size_t>(expert) * n_rows + static_cast<size_t>(row0 + r);
    rows.w[at + r] = w + row * chunks;
    rows.scales[at + r] = scales + row * groups;
    rows.biases[at + r] = biases + row * groups;
  }
}

// Dot products of the NR rows with one input vector x of in_dim values, computed by one warp; out[r] is
// valid in lane 0. Lane l takes chunks l, l+32, ... so the warp reads 512 contiguous bytes of a row per
// step. Per chunk it loads the VALS inputs once (for all NR rows) and uses, per group,
//   sum_i (q_i*s + b) * x_i = s * sum_i q_i*x_i + b * sum_i x_i
// so the inner loop is one LOP3, one FADD and one FMA per weight. Accumulation is f32 throughout.
// Metal: lanes stride single words (4-byte loads); the arithmetic is the same identity.
template <int NR, typename X>
__device__ __forceinline__ void moe_rows_dot(const RowSet<NR>& rows, const X* __restrict__ x, int in_dim,
                                             float (&out)[NR]) {
  const int lane = threadIdx.x & 31;
  const int chunks = in_dim / VALS;
  float acc[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    acc[r] = 0.0f;
  }
#pragma unroll 2
  for (int c = lane; c < chunks; c += 32) {
    float xs[VALS];
    moe_load_vals(x + static_cast<size_t>(c) * VALS, xs);
    float xsum = 0.0f;
#pragma unroll
    for (int i = 0; i < VALS; ++i) {
      xsum += xs[i];
      xs[i] *= moe_prescale(i % PER_WORD);
    }
    const int group = c / CHUNKS_PER_GROUP;
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const float qx = moe_chunk_qdot(__ldg(rows.w[r] + c), xs);
      const float s = moe_to_float(__ldg(rows.scales[r] + group));
      const float b = moe_to_float(__ldg(rows.biases[r] + group));
      acc[r] = fmaf(s, qx, fmaf(b, xsum, acc[r]));
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    out[r] = moe_warp_sum(acc[r]);
  }
}

#endif  // MOE_COMMON_CUH
