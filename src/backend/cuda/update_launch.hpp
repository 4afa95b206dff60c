#pragma once
// Internal: the interface between the host side of the optimiser update ops on CUDA
// (optim_ops.cpp) and their kernels (update_kernels.cu). No soma header (nvcc compiles it).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/update_formulas.hpp"

namespace soma::cuda_detail {

// rule(p[i], g[i], s0[i], s1[i], s2[i]) for i < n, in place, one pass; a null slot pointer is a
// slot the rule does not use. Packed operands of one type T (float or double; instantiated for
// the rules of update_formulas.hpp). `steps`, when not null, is the device buffer of the step
// scalars (rule.set_step reads it in the kernel). Returns the launch status.
template <class Rule, class T>
cudaError_t launch_update(const Rule& rule, const double* steps, T* p, const T* g, T* s0, T* s1,
                          T* s2, std::int64_t n, cudaStream_t stream);

}  // namespace soma::cuda_detail
