#pragma once
// Internal: Conv2D's forward as one op, act(conv2d(x, w) + b) with act linear or ReLU and the
// bias optional (src/ops/nn.cpp, op "conv2d_bias_act"; CPU kernel: one oneDNN primitive for f32).
// Gradients are those of the separate ops.
#include <cstdint>

#include "soma/nn_ops.hpp"
#include "soma/tensor.hpp"

namespace soma::detail {
// b: an undefined Tensor for no bias.
Tensor conv2d_bias_act(const Tensor& x, const Tensor& w, const Tensor& b, Size2 strides,
                       const Padding& padding, Size2 dilation, std::int64_t groups, bool relu);
}  // namespace soma::detail
