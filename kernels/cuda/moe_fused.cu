// Fused decode-MoE step for one token, MLX affine format: two launches.
//   kernel A  moe_gate_up_swiglu  gate and up GEMVs of every selected expert + SwiGLU -> act (f32)
//   kernel B  moe_down_scale      down GEMV x score, then the sum over slots, rounded once -> out
// Configuration and helpers: moe_common.cuh. Names and loop structure follow kernels/metal/moe_fused.metal;
// the places where the dialects differ are marked "Metal:".
#include "moe_common.cuh"

// Kernel A. Grid (ceil(dff / (SGY*ROWS)), top_k), block 32*SGY threads.
// Warp w of block (bx, k) computes rows f = (bx*SGY + w)*ROWS .. +ROWS-1 of expert e = indices[k]:
//   g = Wg[e,f] . x, u = Wu[e,f] . x (dequantized on the fly, f32 accumulation),
//   act[k,f] = silu(g) * u (f32).
// Gate and up rows share every input value the warp loads (2*ROWS rows per load).
// Memory: reads ROWS rows of gate_w and of up_w (+ their scales/biases) per warp, x (d_model values, L1/L2
// resident); writes act (top_k, dff) f32.
extern "C" __global__ void moe_gate_up_swiglu(const act_t* __restrict__ x, const int* __restrict__ indices,
                                              const uint4* __restrict__ gate_w,
                                              const act_t* __restrict__ gate_scales,
                                              const act_t* __restrict__ gate_biases,
                                              const uint4* __restrict__ up_w,
                                              const act_t* __restrict__ up_scales,
                                              const act_t* __restrict__ up_biases, float* __restrict__ act,
                                              int d_model, int dff) {
  const int slot = blockIdx.y;
  const int row0 = (blockIdx.x * SGY + (threadIdx.x >> 5)) * ROWS;
  if (row0 >= dff) {
    return;  // the whole warp leaves (dff is a multiple of ROWS), so the shuffles below see full warps
  }
  const int expert = indices[slot];
  RowSet<2 * ROWS> rows;
  moe_bind_rows(rows, 0, gate_w, gate_scales, gate_biases, expert, dff, row0, d_model);
  moe_bind_rows(rows, ROWS, up_w, up_scales, up_biases, expert, dff, row0, d_model);
  float dot[2 * ROWS];
  moe_rows_dot(rows, x, d_model, dot);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      act[static_cast<size_t>(slot) * dff + row0 + r] = moe_silu(dot[r]) * dot[ROWS + r];
    }
  }
}

// Kernel B. Grid (ceil(d_model / (SGY*ROWS)), top_k), block 32*SGY threads.
// Warp w of block (bx, k) computes rows h = (bx*SGY + w)*ROWS .. +ROWS-1 of expert e = indices[k]:
//   partial[k,h] = scores[k] * (Wd[e,h] . act[k]) (f32).
// Then the sum over slots, folded in deterministically: the top_k blocks of one row tile (same bx) each
// count themselves in tile_arrivals[bx]; the last to arrive adds partial[0..top_k-1, h] in slot order in
// f32, rounds once to the activation dtype into out[h], and resets the counter to 0 for the next launch.
// The result does not depend on which block arrives last. The fence/barrier/atomic sequence is the one
// cooperative groups' grid sync uses. tile_arrivals must be zero before the first launch and must not be
// shared by launches running concurrently (one stream).
// Metal: the fold is a separate sum over slots (MLX op) after kernel B.
// Memory: reads ROWS rows of down_w (+ scales/biases) per warp and act[k] (dff f32, L1/L2 resident); writes
// partial (top_k, d_model) f32 and out (d_model) in the activation dtype.
extern "C" __global__ void moe_down_scale(const float* __restrict__ act, const int* __restrict__ indices,
                                          const float* __restrict__ scores, const uint4* __restrict__ down_w,
                                          const act_t* __restrict__ down_scales,
                                          const act_t* __restrict__ down_biases, float* __restrict__ partial,
                                          unsigned int* __restrict__ tile_arrivals, act_t* __restrict__ out,
                                          int d_model, int dff, int top_k) {
  const int slot = blockIdx.y;
  const int row0 = (blockIdx.x * SGY + (threadIdx.x >> 5)) * ROWS;
  if (row0 < d_model) {  // no early return: every thread must reach the barriers of the fold
    RowSet<ROWS> rows;
    moe_bind_rows(rows, 0, down_w, down_scales, down_biases, indices[slot], d_model, row0, dff);
    float dot[ROWS];
    moe_rows_dot(rows, act + static_cast<size_t>(slot) * dff, dff, dot);
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        partial[static_cast<size_t>(slot) * d_model + row0 + r] = scores[slot] * dot[r];
      }
    }
  }

  __shared__ bool last_block;
  __syncthreads();  // this block's partial rows are written ...
  if (threadIdx.x == 0) {
    __threadfence();  // ... and visible device-wide before it counts itself
    last_block = atomicAdd(&tile_arrivals[blockIdx.x], 1u) == static_cast<unsigned int>(top_k - 1);
    if (last_block) {
      __threadfence();  // the other blocks' partial rows are visible before this one reads them
    }
  }
  __syncthreads();
  if (!last_block) {
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
  if (threadIdx.x == 0) {
    tile_arrivals[blockIdx.x] = 0u;
  }
}
