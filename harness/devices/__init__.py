"""The device kernels: each backend's fused and fallback MoE paths, the quantized layer, its reference, timing."""
