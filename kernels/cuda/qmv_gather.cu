// The fallback's one GEMV: a gathered quantized matrix-vector product, launched three times per MoE step
// (gate, up, down) like MLX's gather_qmm decode path (mlx/backend/cuda/quantized/qmm/qmv.cu, gather_qmv).
// It is built from the same row-dot core as the fused kernels (moe_common.cuh: 16-byte loads, conversion-
// free dequantization, several rows per block, warp-shuffle reduction), so the fused/fallback comparison
// measures fusion, not a difference in GEMV quality.
#include "moe_common.cuh"

// Grid (ceil(out_dim / (SGY*ROWS)), top_k), block 32*SGY threads.
// Warp w of block (bx, k) computes rows o = (bx*SGY + w)*ROWS .. +ROWS-1 of expert e = indices[k]:
//   y[k,o] = W[e,o] . x_k, with x_k = x + k*x_slot_stride (0: every slot reads the same x), f32 accumulation,
//   rounded once to the activation dtype (MLX's gather_qmm returns the activation dtype too). An expert index
//   outside 0..n_experts-1 is reported in `error` and its rows are NaN.
// Memory: reads ROWS rows of w (+ scales/biases) per warp and x_k (in_dim values, L1/L2 resident); writes
// y (top_k, out_dim) in the activation dtype.
extern "C" __global__ void qmv_gather(const act_t* __restrict__ x, int x_slot_stride,
                                      const int* __restrict__ indices, const uint4* __restrict__ w,
                                      const act_t* __restrict__ scales, const act_t* __restrict__ biases,
                                      act_t* __restrict__ y, unsigned int* __restrict__ error, int out_dim,
                                      int in_dim, int n_experts) {
  const int slot = blockIdx.y;
  const int row0 = (blockIdx.x * SGY + (threadIdx.x >> 5)) * ROWS;
  if (row0 >= out_dim) {
    return;  // whole warp (out_dim is a multiple of ROWS)
  }
  float dot[ROWS];
  if (moe_expert_ok(indices[slot], n_experts, error)) {
    RowSet<ROWS> rows;
    moe_bind_rows(rows, 0, w, scales, biases, indices[slot], out_dim, row0, in_dim);
    moe_rows_dot(rows, x + static_cast<size_t>(slot) * x_slot_stride, 0, in_dim / VALS, dot);
  } else {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      dot[r] = moe_nan();
    }
  }
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      y[static_cast<size_t>(slot) * out_dim + row0 + r] = moe_from_float(dot[r]);
    }
  }
}
