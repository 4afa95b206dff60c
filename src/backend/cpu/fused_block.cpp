// Inline loops of fused f32 elementwise chains (see fused_block.hpp). Each is written exactly
// as the op's own CPU kernel computes it, so a fused chain is bit-identical to the unfused one.
#include "backend/cpu/fused_block.hpp"

#include <cmath>

namespace soma::detail {

namespace {
// dst[i] = f(a[i], b[i]) over one block, one loop per operand kind so that each vectorises.
template <class F>
inline void fused_binary(float* __restrict dst, const float* a, float av, const float* b, float bv,
                         std::int64_t n, F f) {
  if (a && b)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
  else if (a)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(a[i], bv);
  else if (b)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(av, b[i]);
  else
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(av, bv);
}

}  // namespace

void fused_block_op(FusedCode code, float* __restrict dst, const float* a, float av,
                    const float* b, float bv, std::int64_t n) {
  switch (code) {
    case FusedCode::Add: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x + y; }); break;
    case FusedCode::Sub: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x - y; }); break;
    case FusedCode::Mul: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x * y; }); break;
    case FusedCode::Div: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x / y; }); break;
    case FusedCode::Abs: for (std::int64_t i = 0; i < n; ++i) dst[i] = std::abs(a[i]); break;
    case FusedCode::Neg: for (std::int64_t i = 0; i < n; ++i) dst[i] = -a[i]; break;
    case FusedCode::Square: for (std::int64_t i = 0; i < n; ++i) dst[i] = a[i] * a[i]; break;
    case FusedCode::Sqrt: for (std::int64_t i = 0; i < n; ++i) dst[i] = std::sqrt(a[i]); break;
    case FusedCode::Relu: for (std::int64_t i = 0; i < n; ++i) dst[i] = a[i] > 0.0f ? a[i] : 0.0f; break;
    case FusedCode::Recip: for (std::int64_t i = 0; i < n; ++i) dst[i] = 1.0f / a[i]; break;
    case FusedCode::Kernel: break;
  }
}

}  // namespace soma::detail
