#pragma once
// Internal: the fused f32 Dense kernel behind Dense's inference fast path (src/nn/layers.cpp,
// src/backend/cpu/fast_paths.cpp). One pass computes y = act(x W + b) on the calling thread.
#include <cstdint>

namespace soma::detail {

// x [m, k], w [k, n], bias [n] (nullptr: none), y [m, n], all row-major and packed; relu: apply
// soma's relu (0 where v <= 0, v elsewhere: NaN stays NaN). Meant for small products (batch-1
// inference): it streams W once per row and keeps up to 128 outputs of a row in registers.
void fused_dense_f32(const float* x, const float* w, const float* bias, float* y, std::int64_t m,
                     std::int64_t k, std::int64_t n, bool relu);

}  // namespace soma::detail
