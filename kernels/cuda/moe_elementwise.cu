// The fallback's elementwise steps between its GEMVs, as separate launches (what an unfused graph runs).
// Each computes in f32 and rounds once to the activation dtype; intermediates stay in the activation dtype,
// as MLX keeps them.
#include "moe_common.cuh"

// Grid ceil(count / 256), block 256 threads; thread i computes act[i] = silu(gate[i]) * up[i] for the
// (top_k, dff) gate and up GEMV outputs. Memory: reads gate and up, writes act (count values each).
extern "C" __global__ void moe_swiglu(const act_t* __restrict__ gate, const act_t* __restrict__ up,
                                      act_t* __restrict__ act, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) {
    act[i] = moe_from_float(moe_silu(moe_to_float(gate[i])) * moe_to_float(up[i]));
  }
}

// Grid ceil(d_model / 256), block 256 threads; thread h computes out[h] = sum_k scores[k] * y[k,h] over the
// top_k down GEMV outputs, in slot order, f32. Memory: reads y (top_k, d_model) and scores, writes out.
extern "C" __global__ void moe_weighted_sum(const act_t* __restrict__ y, const float* __restrict__ scores,
                                            act_t* __restrict__ out, int d_model, int top_k) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h < d_model) {
    float sum = 0.0f;
    for (int k = 0; k < top_k; ++k) {
      sum = fmaf(scores[k], moe_to_float(y[static_cast<size_t>(k) * d_model + h]), sum);
    }
    out[h] = moe_from_float(sum);
  }
}
