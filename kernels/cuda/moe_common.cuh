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
//                   values let a warp reuse each input value it loaded (and converted) for several rows
//   MOE_ACT_LOAD    how kernel B reads act: 0 = f32 from global memory (default), 1 = act stored by kernel A in
//                   the activation dtype (bf16 on a bf16 model: half the bytes), 2 = f32 staged in shared memory
//                   by the block, STAGE_VALS values per pass
// Split-K of kernel A is chosen per launch (gridDim.z splits), not compiled in.
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
#ifndef MOE_ACT_LOAD
#define MOE_ACT_LOAD 0
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
static_assert(MOE_ACT_LOAD == 0 || MOE_ACT_LOAD == 1 || MOE_ACT_LOAD == 2, "MOE_ACT_LOAD must be 0, 1 or 2");

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

// What kernel A writes and kernel B reads as act: f32, or the activation dtype with MOE_ACT_LOAD=1.
#if MOE_ACT_LOAD == 1
typedef act_t moe_act_t;
__device__ __forceinline__ moe_act_t moe_store_act(float v) { return moe_from_float(v); }
#else
typedef float moe_act_t;
__device__ __forceinline__ moe_act_t moe_store_act(float v) { return v; }
#endif

__device__ __forceinline__ float moe_nan() { return __uint_as_float(0x7fc00000u); }

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

// Input sources of the row-dot core: load(c, v) gives the VALS inputs of chunk c as f32.
template <typename X>
struct GlobalInput {  // straight from global memory through L1 (__ldg), 16-byte loads
  const X* __restrict__ x;
  __device__ __forceinline__ void load(int c, float (&v)[VALS]) const {
    moe_load_vals(x + static_cast<size_t>(c) * VALS, v);
  }
};

// MOE_ACT_LOAD=2: kernel B stages act[k] in shared memory, STAGE_VALS f32 values (16 KiB) per pass.
// Lane l reads its chunk as F4_PER_CHUNK float4s, so its i-th is float4 l*F4_PER_CHUNK + i (+ a multiple of 32
// chunks): stored naively, the 8 lanes of one 128-byte shared-memory phase would hit the same 4 banks
// (8-way conflict). The store swizzles the low 3 bits of the float4 index with bits above them, so those 8 lanes
// land on 8 different bank quads, and the staging stores (consecutive threads, consecutive float4s) stay
// conflict-free as well.
constexpr int STAGE_VALS = 4096;
constexpr int F4_PER_CHUNK = VALS / 4;  // 8 (4-bit) or 4 (8-bit)
static_assert(STAGE_VALS % 128 == 0, "a staging pass must hold whole groups");
__device__ __forceinline__ int moe_stage_slot(int i) { return i ^ ((i >> 3) & (F4_PER_CHUNK - 1)); }

struct StagedInput {  // chunks [c0, c0 + STAGE_VALS/VALS) of the input, in the swizzled shared layout
  const float4* stage;
  int c0;
  __device__ __forceinline__ void load(int c, float (&v)[VALS]) const {
#pragma unroll
    for (int i = 0; i < F4_PER_CHUNK; ++i) {
      const float4 t = stage[moe_stage_slot((c - c0) * F4_PER_CHUNK + i)];
      v[4 * i + 0] = t.x;
      v[4 * i + 1] = t.y;
      v[4 * i + 2] = t.z;
      v[4 * i + 3] = t.w;
    }
  }
};

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

// Adds to acc[r] each lane's share of row r . input over chunks [c_begin, c_end) (a chunk = VALS inputs). Lane l
// takes chunks c_begin+l, c_begin+l+32, ... so the warp reads 512 contiguous bytes of a row per step. Per chunk
// it loads the VALS inputs once (for all NR rows) and uses, per group,
//   sum_i (q_i*s + b) * x_i = s * sum_i q_i*x_i + b * sum_i x_i
// so the inner loop is one LOP3, one FADD and one FMA per weight. Accumulation is f32 throughout.
// Metal: lanes stride single words (4-byte loads); the arithmetic is the same identity.
template <int NR, typename Input>
__device__ __forceinline__ void moe_rows_accumulate(const RowSet<NR>& rows, const Input& input, int c_begin,
                                                    int c_end, float (&acc)[NR]) {
#pragma unroll 2
  for (int c = c_begin + (threadIdx.x & 31); c < c_end; c += 32) {
    float xs[VALS];
    input.load(c, xs);
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
}

// Dot products of the NR rows with the input x over chunks [c_begin, c_end), computed by one warp; out[r] is
// valid in lane 0. The whole warp must call it (the reduction shuffles).
template <int NR, typename X>
__device__ __forceinline__ void moe_rows_dot(const RowSet<NR>& rows, const X* __restrict__ x, int c_begin,
                                             int c_end, float (&out)[NR]) {
  float acc[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    acc[r] = 0.0f;
  }
  moe_rows_accumulate(rows, GlobalInput<X>{x}, c_begin, c_end, acc);
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    out[r] = moe_warp_sum(acc[r]);
  }
}

// ---- launch bookkeeping ----------------------------------------------------------------------------------
// Whether `expert` is one of the layer's n_experts. If not, the first offender is reported in error[0..2] (flag,
// index, n_experts) for the host, which raises at its next synchronize (as the CPU path raises), and the caller
// writes NaN instead of reading outside the weights.
__device__ __forceinline__ bool moe_expert_ok(int expert, int n_experts, unsigned int* error) {
  if (expert >= 0 && expert < n_experts) {
    return true;
  }
  if (atomicCAS(error, 0u, 1u) == 0u) {
    error[1] = static_cast<unsigned int>(expert);
    error[2] = static_cast<unsigned int>(n_experts);
  }
  return false;
}

// The fold's arrival, called by every thread of the block after it wrote its partial results: counts the block
// in *counter and returns, in every thread, whether it is the last of `expected` blocks to arrive; the others'
// partial results are then visible to it. The fence/barrier/atomic sequence is the one cooperative groups' grid
// sync uses. Metal: no fold (the sum over slots is an MLX op).
__device__ __forceinline__ bool moe_arrive_last(unsigned int* counter, unsigned int expected) {
  __shared__ bool last_block;
  __syncthreads();  // this block's partial results are written ...
  if (threadIdx.x == 0) {
    __threadfence();  // ... and visible device-wide before it counts itself
    last_block = atomicAdd(counter, 1u) == expected - 1u;
    if (last_block) {
      __threadfence();  // the other blocks' partial results are visible before this one reads them
    }
  }
  __syncthreads();
  return last_block;
}

// Zeroes `count` arrival counters of the *other* fused kernel, with every thread of the grid. Kernel A zeroes
// kernel B's and kernel B zeroes kernel A's, so each fold starts from zero in every step, whatever an earlier
// launch left behind (an aborted launch stops mid-count); the kernel boundary orders the stores before the
// counters' next use.
__device__ __forceinline__ void moe_zero_counters(unsigned int* counters, int count) {
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int threads = gridDim.x * gridDim.y * gridDim.z * blockDim.x;
  for (int i = block * blockDim.x + threadIdx.x; i < count; i += threads) {
    counters[i] = 0u;
  }
}

#endif  // MOE_COMMON_CUH
