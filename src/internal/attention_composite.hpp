#pragma once
// Internal (ops layer): scaled_dot_product_attention's composite kernels (src/ops/attention.cpp),
// made of ops and so runnable on any device. Every device but the CPU registers them; the CUDA
// backend's fused kernel (src/backend/cuda/attention_cudnn.cpp) falls back to them for what
// cuDNN's fused attention does not take.
#include <vector>

#include "soma/op.hpp"

namespace soma::detail {
// (q, k, v [, mask]) -> (out, lse); attrs causal, scale.
void sdpa_composite_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& a);
// (q, k, v, out, lse, dout, dlse [, mask]) -> (dq, dk, dv [, dlogits]).
void sdpa_grad_composite_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                const Attrs& a);
}  // namespace soma::detail
