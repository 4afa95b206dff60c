#pragma once
// Internal: the inline loops of fused f32 elementwise chains (src/graph/session.cpp runs a
// chain block by block; each op is one of these loops over an L1-sized block). Compiled with
// the CPU kernels' flags (-fno-math-errno: std::sqrt vectorises).
#include <cstdint>

namespace soma::detail {

// The ops done inline: exact IEEE arithmetic written exactly as the CPU kernels write it (so the
// fused result is bit-identical); every other op runs its own kernel on the block.
enum class FusedCode : std::uint8_t {
  Kernel, Add, Sub, Mul, Div, Abs, Neg, Square, Sqrt, Relu, Recip
};

// dst[i] = op(a[i], b[i]) for i < n; a null pointer means the scalar (av or bv) instead. Unary
// ops read a only.
void fused_block_op(FusedCode code, float* __restrict dst, const float* a, float av,
                    const float* b, float bv, std::int64_t n);

}  // namespace soma::detail
