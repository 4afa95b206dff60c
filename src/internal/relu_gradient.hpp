#pragma once
// Internal: ReLU's gradient, 0 where x <= 0 and g elsewhere (NaN x included, as PyTorch's
// threshold_backward), one op on the CPU
// (src/ops/elementwise.cpp). Used by relu's own gradient and by fused ops that end in a ReLU,
// which pass their output as x (y > 0 exactly where the pre-activation is).
#include "soma/tensor.hpp"

namespace soma::detail {
Tensor relu_gradient(const Tensor& x, const Tensor& g);
}  // namespace soma::detail
