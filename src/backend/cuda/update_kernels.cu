// CUDA kernels of the optimiser update ops: one fused pass per parameter, the per-element rule of
// src/ops/update_formulas.hpp (the CPU fused loops' formula), the variable and its slots read and
// written once each.
#include <cuda_runtime.h>

#include "backend/cuda/update_launch.hpp"

namespace soma::cuda_detail {
namespace {

using i64 = std::int64_t;
constexpr int kUpdateThreads = 256;

// The slot pointers are uniform across the grid: the null tests never diverge within a warp.
template <class Rule, class T>
__global__ void update_kernel(Rule rule, const double* __restrict__ steps, T* __restrict__ p,
                              const T* __restrict__ g, T* __restrict__ s0, T* __restrict__ s1,
                              T* __restrict__ s2, i64 n) {
  if (steps) rule.set_step(steps);  // read at run time: a captured graph's replays see new values
  const i64 step = i64(gridDim.x) * blockDim.x;
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    T x = p[i];
    T a = s0 ? s0[i] : T(0), b = s1 ? s1[i] : T(0), c = s2 ? s2[i] : T(0);
    rule(x, g[i], a, b, c);
    p[i] = x;
    if (s0) s0[i] = a;
    if (s1) s1[i] = b;
    if (s2) s2[i] = c;
  }
}

}  // namespace

template <class Rule, class T>
cudaError_t launch_update(const Rule& rule, const double* steps, T* p, const T* g, T* s0, T* s1,
                          T* s2, i64 n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  i64 blocks = (n + kUpdateThreads - 1) / kUpdateThreads;
  if (blocks > (i64(1) << 16)) blocks = i64(1) << 16;  // the rest by the grid-stride loop
  update_kernel<Rule, T><<<unsigned(blocks), kUpdateThreads, 0, stream>>>(rule, steps, p, g, s0,
                                                                         s1, s2, n);
  return cudaGetLastError();
}

#define SOMA_UPDATE_INSTANTIATE(RULE, T)                                                   \
  template cudaError_t launch_update<upd::RULE<T>, T>(const upd::RULE<T>&, const double*, T*, \
                                                      const T*, T*, T*, T*, i64, cudaStream_t);
#define SOMA_UPDATE_INSTANTIATE_BOTH(RULE) \
  SOMA_UPDATE_INSTANTIATE(RULE, float)     \
  SOMA_UPDATE_INSTANTIATE(RULE, double)
SOMA_UPDATE_INSTANTIATE_BOTH(Sgd)
SOMA_UPDATE_INSTANTIATE_BOTH(Adam)
SOMA_UPDATE_INSTANTIATE_BOTH(Nadam)
SOMA_UPDATE_INSTANTIATE_BOTH(Rmsprop)
SOMA_UPDATE_INSTANTIATE_BOTH(Adagrad)
#undef SOMA_UPDATE_INSTANTIATE_BOTH
#undef SOMA_UPDATE_INSTANTIATE

}  // namespace soma::cuda_detail
