#pragma once
// Internal: bf16 autocast for the CPU kernels (src/backend/cpu/onednn_matmul.cpp). The matmul
// kernel (linalg.cpp) and the convolution kernels (onednn_conv.cpp) ask cpu_autocast_dtype()
// whether to compute in bf16; matmul then runs onednn_matmul_bf16.
#include <cstdint>

#include "soma/dtype.hpp"

namespace soma::detail {

// bf16 when this thread is inside an AutocastScope(bf16) and the CPU kernels can run bf16
// (oneDNN built in, AVX-512-BF16 or AMX present); f32 otherwise. When autocast asks for a dtype
// the CPU cannot run natively (f16 always; bf16 without oneDNN or the ISA) it prints a one-time
// note to stderr and answers f32.
DType cpu_autocast_dtype();

// One f32 product C[m, n] = A[m, k] @ B[k, n] with A, B of any element strides (rows, columns)
// and C packed, computed by oneDNN on bf16-rounded A and B with f32 accumulation. False when
// oneDNN is not built in or has no optimised bf16 kernel for the case: the caller runs f32.
struct MatmulGeometry {
  std::int64_t m, n, k;
  std::int64_t a_rs, a_cs, b_rs, b_cs;
};
bool onednn_matmul_bf16(const MatmulGeometry& g, const float* a, const float* b, float* c);

}  // namespace soma::detail
