// Fused decode-MoE step for one token, MLX affine format: two launches.
//   kernel A  moe_gate_up_swiglu  gate and up GEMVs of every selected expert + SwiGLU -> act (f32)
//   kernel B  moe_down_scale      down GEMV x score, then the sum over slots, rounded once -> out
// Configuration and helpers: moe_common.cuh. Names and loop structure follow kernels/metal/moe_fused.metal;
// the places where the dialects differ are marked "Metal:".
#include "moe_common.cuh"

// Kernel A. Grid (ceil(dff / (SGY*ROWS)), top_k, splits), block 32*SGY threads.
// Warp w of block (bx, k, s) computes rows f = (bx*SGY + w)*ROWS .. +ROWS-1 of expert e = indices[k]:
//   g = Wg[e,f] . x, u = Wu[e,f] . x (dequantized on the fly, f32 accumulation),
//   act[k,f] = silu(g) * u (f32, or the activation dtype with MOE_ACT_LOAD=1).
// Gate and up rows share every input value the warp loads (2*ROWS rows per load).
// Split-K (splits > 1, when the grid would have fewer blocks than the GPU has SMs): split s dots only its share
// of d_model's chunks and writes (g, u) partials to gate_up_partial (splits, top_k, dff, 2); the last of the
// splits of a (tile, slot) to arrive adds them in split order and writes act, as kernel B folds its slots.
// Also zeroes kernel B's fold counters (see moe_zero_counters). An expert index outside 0..n_experts-1 is
// reported in `error` and its act rows are NaN.
// Memory: reads ROWS rows (a 1/splits share of each) of gate_w and of up_w (+ their scales/biases) per warp, x
// (d_model values, L1/L2 resident); writes act (top_k, dff), with split-K also 2*splits*top_k*dff f32 partials.
extern "C" __global__ void moe_gate_up_swiglu(const act_t* __restrict__ x, const int* __restrict__ indices,
                                              const uint4* __restrict__ gate_w,
                                              const act_t* __restrict__ gate_scales,
                                              const act_t* __restrict__ gate_biases,
                                              const uint4* __restrict__ up_w,
                                              const act_t* __restrict__ up_scales,
                                              const act_t* __restrict__ up_biases, moe_act_t* __restrict__ act,
                                              float* __restrict__ gate_up_partial,
                                              unsigned int* __restrict__ split_arrivals,
                                              unsigned int* __restrict__ fold_arrivals, int fold_tiles,
                                              unsigned int* __restrict__ error, int d_model, int dff,
                                              int n_experts) {
  const int slot = blockIdx.y;
  const int split = blockIdx.z;
  const int splits = gridDim.z;
  moe_zero_counters(fold_arrivals, fold_tiles);
  const int row0 = (blockIdx.x * SGY + (threadIdx.x >> 5)) * ROWS;
  if (row0 < dff) {  // the whole warp (dff is a multiple of ROWS), so the shuffles see full warps
    float dot[2 * ROWS];
    if (moe_expert_ok(indices[slot], n_experts, error)) {
      RowSet<2 * ROWS> rows;
      moe_bind_rows(rows, 0, gate_w, gate_scales, gate_biases, indices[slot], dff, row0, d_model);
      moe_bind_rows(rows, ROWS, up_w, up_scales, up_biases, indices[slot], dff, row0, d_model);
      const int chunks = d_model / VALS;
      moe_rows_dot(rows, x, split * chunks / splits, (split + 1) * chunks / splits, dot);
    } else {
#pragma unroll
      for (int r = 0; r < 2 * ROWS; ++r) {
        dot[r] = moe_nan();
      }
    }
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const size_t f = static_cast<size_t>(slot) * dff + row0 + r;
        if (splits == 1) {
          act[f] = moe_store_act(moe_silu(dot[r]) * dot[ROWS + r]);
        } else {
          float2* p = reinterpret_cast<float2*>(gate_up_partial) + static_cast<size_t>(split) * gridDim.y * dff + f;
          *p = float2{dot[r], dot[ROWS + r]};
        }
      }
    }
  }
  if (splits == 1 || !moe_arrive_last(&split_arrivals[slot * gridDim.x + blockIdx.x], splits)) {
    return;  // splits == 1 is the same for the whole grid, so no block waits at a barrier alone
  }
  const int tile_rows = SGY * ROWS;  // <= blockDim.x, so one pass
  const int f = blockIdx.x * tile_rows + threadIdx.x;
  if (threadIdx.x < tile_rows && f < dff) {
    const float2* p = reinterpret_cast<const float2*>(gate_up_partial) + static_cast<size_t>(slot) * dff + f;
    float g = 0.0f, u = 0.0f;
    for (int s = 0; s < splits; ++s) {  // split order: the result does not depend on which split came last
      const float2 gu = __ldcg(p + static_cast<size_t>(s) * gridDim.y * dff);
      g += gu.x;
      u += gu.y;
    }
    act[static_cast<size_t>(slot) * dff + f] = moe_store_act(moe_silu(g) * u);
  }
}

// Kernel B. Grid (ceil(d_model / (SGY*ROWS)), top_k), block 32*SGY threads.
// Warp w of block (bx, k) computes rows h = (bx*SGY + w)*ROWS .. +ROWS-1 of expert e = indices[k]:
//   partial[k,h] = scores[k] * (Wd[e,h] . act[k]) (f32).
// Then the sum over slots, folded in deterministically: the top_k blocks of one row tile (same bx) each
// count themselves in fold_arrivals[bx] (moe_arrive_last); the last to arrive adds partial[0..top_k-1, h] in
// slot order in f32 and rounds once to the activation dtype into out[h]. The result does not depend on which
// block arrives last. Kernel A zeroed the counters; this kernel zeroes kernel A's split counters in turn.
// Launches sharing the counters must not run concurrently (one stream).
// act[k] comes from global memory (MOE_ACT_LOAD 0: f32, 1: activation dtype) or is staged in shared memory
// by the whole block, STAGE_VALS values per pass (MOE_ACT_LOAD 2).
// Metal: the fold is a separate sum over slots (MLX op) after kernel B.
// Memory: reads ROWS rows of down_w (+ scales/biases) per warp and act[k] (dff values, L1/L2 resident); writes
// partial (top_k, d_model) f32 and out (d_model) in the activation dtype.
extern "C" __global__ void moe_down_scale(const moe_act_t* __restrict__ act, const int* __restrict__ indices,
                                          const float* __restrict__ scores, const uint4* __restrict__ down_w,
                                          const act_t* __restrict__ down_scales,
                                          const act_t* __restrict__ down_biases, float* __restrict__ partial,
                                          unsigned int* __restrict__ fold_arrivals, act_t* __restrict__ out,
                                          unsigned int* __restrict__ split_arrivals, int split_counters,
                                          unsigned int* __restrict__ error, int d_model, int dff, int top_k,
                                          int n_experts) {
  const int slot = blockIdx.y;
  moe_zero_counters(split_arrivals, split_counters);
  const int row0 = (blockIdx.x * SGY + (threadIdx.x >> 5)) * ROWS;
  const bool rows_ok = row0 < d_model && moe_expert_ok(indices[slot], n_experts, error);  // whole warp
  RowSet<ROWS> rows;
  if (rows_ok) {
    moe_bind_rows(rows, 0, down_w, down_scales, down_biases, indices[slot], d_model, row0, dff);
  }
  const moe_act_t* act_k = act + static_cast<size_t>(slot) * dff;
  float dot[ROWS];
#if MOE_ACT_LOAD == 2
  __shared__ float4 stage[STAGE_VALS / 4];
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    acc[r] = 0.0f;
  }
  for (int v0 = 0; v0 < dff; v0 += STAGE_VALS) {  // every warp stages and meets the barriers, in range or not
    const int count = dff - v0 < STAGE_VALS ? dff - v0 : STAGE_VALS;  // a multiple of GROUP_SIZE
    __syncthreads();  // the previous pass is consumed
    const float4* source = reinterpret_cast<const float4*>(act_k + v0);
    for (int i = threadIdx.x; i < count / 4; i += blockDim.x) {
      stage[moe_stage_slot(i)] = __ldg(source + i);
    }
    __syncthreads();
    if (rows_ok) {
      moe_rows_accumulate(rows, StagedInput{stage, v0 / VALS}, v0 / VALS, (v0 + count) / VALS, acc);
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    dot[r] = moe_warp_sum(acc[r]);
  }
#else
  if (rows_ok) {
    moe_rows_dot(rows, act_k, 0, dff / VALS, dot);
  }
#endif
  if (row0 < d_model && (threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      partial[static_cast<size_t>(slot) * d_model + row0 + r] = rows_ok ? scores[slot] * dot[r] : moe_nan();
    }
  }
  if (!moe_arrive_last(&fold_arrivals[blockIdx.x], top_k)) {
    return;
  }
  const int tile_rows = SGY * ROWS;  // <= blockDim.x, so one pass
  const int h = blockIdx.x * tile_rows + threadIdx.x;
  if (threadIdx.x < tile_rows && h < d_model) {
    // Slot order, eight loads in flight at a time (this tail is on the kernel's critical path); __ldcg reads
    // L2, never a stale L1 line. Padding with +0.0f leaves the sum unchanged.
    float sum = 0.0f;
#pragma unroll 1
    for (int k0 = 0; k0 < top_k; k0 += 8) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        v[j] = k0 + j < top_k ? __ldcg(partial + static_cast<size_t>(k0 + j) * d_model + h) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        sum += v[j];
      }
    }
    out[h] = moe_from_float(sum);
  }
}
