#pragma once
// Internal: the fused f32 Dense kernel (src/backend/cpu/fast_paths.cpp) behind dense_bias_act's
// CPU kernel for small products (src/backend/cpu/dense.cpp) and Sequential's Dense chain
// (src/nn/layers.cpp). One pass computes y = act(x W + b) on the calling thread.
#include <cstdint>

namespace soma::detail {

// Products up to this many multiply-adds (batch-1 and small-batch inference) take the fused
// kernel: their time is mostly the op dispatches and temporaries it skips.
inline constexpr std::int64_t kFusedDenseMaxWork = std::int64_t(1) << 20;
inline constexpr std::int64_t kFusedDenseMaxRows = 8;
inline bool fused_dense_fits(std::int64_t m, std::int64_t k, std::int64_t n) {
  return k > 0 && m > 0 && m <= kFusedDenseMaxRows && m * k * n <= kFusedDenseMaxWork;
}

// x [m, k], w [k, n], bias [n] (nullptr: none), y [m, n], all row-major and packed; relu: apply
// soma's relu (0 where v <= 0, v elsewhere: NaN stays NaN). Meant for small products (batch-1
// inference): it streams W once per row and keeps up to 128 outputs of a row in registers.
void fused_dense_f32(const float* x, const float* w, const float* bias, float* y, std::int64_t m,
                     std::int64_t k, std::int64_t n, bool relu);

}  // namespace soma::detail
