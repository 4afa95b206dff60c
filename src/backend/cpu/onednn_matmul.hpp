#pragma once
// Internal: bf16 autocast for the CPU kernels (src/backend/cpu/onednn_matmul.cpp). The matmul
// kernel (linalg.cpp) and the convolution kernels (onednn_conv.cpp) ask cpu_autocast_dtype()
// whether to compute in bf16; matmul then runs onednn_matmul_bf16. Also the f32 GEMM route:
// OpenBLAS or oneDNN's sgemm by size and thread count (gemm_uses_onednn).
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

// Which library computes the f32 GEMMs that would go to cblas_sgemm (docs/performance.md,
// workload 6). Products small enough for the plain loop or the batch-threaded loop never ask.
enum class GemmImpl {
  automatic,  // per size and thread count, the library measured faster (onednn_faster)
  blas,       // always OpenBLAS: the path before oneDNN served f32
  onednn,     // oneDNN's sgemm whenever it is built in (tests force each path with it)
};
// Starts as SOMA_GEMM_IMPL from the environment ("blas", "onednn" or "auto"; unset means auto).
GemmImpl gemm_impl();
void set_gemm_impl(GemmImpl impl);
GemmImpl parse_gemm_impl(const char* value);  // null or unknown: automatic

// True when soma was built with oneDNN.
bool onednn_sgemm_built();

// oneDNN keeps every primitive it created in a process-wide cache (1024 by default), JIT code
// included: a program going through many shapes kept ~30 KB per shape. soma caches the primitives
// it uses itself (onednn_conv.cpp, onednn_matmul.cpp), so oneDNN's cache is limited to
// kOnednnPrimitiveCacheCapacity unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set. Called when the
// engine is created; a no-op without oneDNN.
inline constexpr int kOnednnPrimitiveCacheCapacity = 64;
void limit_onednn_primitive_cache();

// Whether an f32 product C[m, n] = A[m, k] @ B[k, n] that BLAS would compute with `threads`
// threads goes to onednn_sgemm instead, under gemm_impl() (linalg.cpp asks; GEMVs and the
// batch-threaded small products never do).
bool gemm_uses_onednn(std::int64_t m, std::int64_t n, std::int64_t k, int threads);

// How many products onednn_sgemm has computed in this process (tests check the route).
std::int64_t onednn_sgemm_calls();

// C[m, n] = op(A) @ op(B) with row-major operands, exactly as cblas_sgemm(CblasRowMajor, ...)
// with alpha 1 and beta 0; threaded by omp_get_max_threads() of the calling thread. False
// (nothing written) when oneDNN is not built in or rejects the call.
bool onednn_sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                  std::int64_t ldc);

}  // namespace soma::detail
