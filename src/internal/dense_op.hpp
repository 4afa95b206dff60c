#pragma once
// Internal: the dense_bias_act op (src/ops/dense.cpp; CPU kernel src/backend/cpu/dense.cpp),
// Dense's forward as one op: act(x @ kernel + bias), act linear or ReLU.
#include "soma/op.hpp"

namespace soma::detail {

// The op's attribute "activation": true for "relu", false for "linear"; throws for others.
bool dense_relu(const Attrs& attrs);
// The op's attributes for a linear or ReLU activation (built once: calls allocate nothing).
const Attrs& dense_attrs(bool relu);
// The op as a composite of ops (matmul + add + relu): any device and dtype; the CUDA kernel's
// fallback for what cuBLASLt does not take.
void dense_composite_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a);

void register_optim_update_ops();  // src/ops/optim_updates.cpp
void register_cpu_dense_kernel();  // src/backend/cpu/dense.cpp

}  // namespace soma::detail
