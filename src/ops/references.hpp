#pragma once
// Reference implementations for the op test table (OpDef::test.reference, read by
// tests/ops/test_op_registry.cpp): each computes an op's outputs in f64 with naive loops over
// row-major indices, independently of the kernels. Slow by design; they run on tiny shapes.
// Each one checks what the op's shape rule checks and throws soma::Error where the op must
// refuse (an empty max, a slice window outside the input), so the suite can compare refusals.
#include <vector>

#include "soma/op.hpp"

namespace soma::ref {

using Outputs = std::vector<Tensor>;
using Inputs = std::vector<Tensor>;

// Reductions (attrs "axes" explicit and sorted, "keepdims"), arg-reductions ("axis",
// "keepdims"), softmax/log_softmax ("axis").
Outputs sum(const Inputs&, const Attrs&);
Outputs mean(const Inputs&, const Attrs&);
Outputs prod(const Inputs&, const Attrs&);
Outputs max(const Inputs&, const Attrs&);
Outputs min(const Inputs&, const Attrs&);
Outputs all(const Inputs&, const Attrs&);
Outputs any(const Inputs&, const Attrs&);
Outputs argmax(const Inputs&, const Attrs&);
Outputs argmin(const Inputs&, const Attrs&);
Outputs softmax(const Inputs&, const Attrs&);
Outputs log_softmax(const Inputs&, const Attrs&);

// Shape ops.
Outputs concat(const Inputs&, const Attrs&);
Outputs split(const Inputs&, const Attrs&);
Outputs unstack(const Inputs&, const Attrs&);
Outputs pad(const Inputs&, const Attrs&);
Outputs gather(const Inputs&, const Attrs&);
Outputs gather_grad(const Inputs&, const Attrs&);
Outputs one_hot(const Inputs&, const Attrs&);

// Views and copies.
Outputs reshape(const Inputs&, const Attrs&);
Outputs transpose(const Inputs&, const Attrs&);
Outputs broadcast_to(const Inputs&, const Attrs&);
Outputs slice(const Inputs&, const Attrs&);
Outputs slice_grad(const Inputs&, const Attrs&);
Outputs identity(const Inputs&, const Attrs&);  // copy, stop_gradient
Outputs cast(const Inputs&, const Attrs&);

// Linear algebra.
Outputs matmul(const Inputs&, const Attrs&);
Outputs diagonal(const Inputs&, const Attrs&);

// Convolution and pooling (NCHW; attrs as in src/ops/nn.cpp).
Outputs conv2d(const Inputs&, const Attrs&);
Outputs conv2d_bias_act(const Inputs&, const Attrs&);
Outputs conv2d_backprop_input(const Inputs&, const Attrs&);
Outputs conv2d_backprop_filter(const Inputs&, const Attrs&);
Outputs max_pool2d(const Inputs&, const Attrs&);
Outputs max_pool2d_grad(const Inputs&, const Attrs&);
Outputs max_pool2d_grad_grad(const Inputs&, const Attrs&);
Outputs avg_pool2d(const Inputs&, const Attrs&);
Outputs max_pool2d_with_indices(const Inputs&, const Attrs&);
Outputs max_unpool2d(const Inputs&, const Attrs&);
Outputs avg_pool2d_grad(const Inputs&, const Attrs&);

// Attention (attrs "causal", "scale"; the grad op also "mask_grad"; src/ops/attention.cpp).
Outputs scaled_dot_product_attention(const Inputs&, const Attrs&);
Outputs scaled_dot_product_attention_grad(const Inputs&, const Attrs&);

}  // namespace soma::ref
