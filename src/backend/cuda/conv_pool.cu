// CUDA pooling kernels (max and average pooling, their gradients, max pooling's second-order
// gradient) and the elementwise kernels around cuDNN's convolutions (explicit padding and
// cropping, bias + ReLU). One thread per output element, grid-stride loops; the index logic is
// conv_pool_index.hpp's, tested on the CPU against the CPU kernels.
//
// Pooling is not cuDNN's: cuDNN's pooling takes only symmetric padding (soma's "same" padding is
// asymmetric whenever the total is odd), does not say which of tied maxima gets the gradient (soma
// sends it to the first, row-major), and its backward pass needs the forward output y, which
// soma's max_pool2d_grad(x, g) and avg_pool2d_grad(g) do not have. The gradients here gather per
// input element instead of scattering: deterministic, no atomics, and the CPU's summation order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/conv_pool_launch.hpp"

namespace soma::cuda_detail {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;

template <class T> struct compute { using type = T; };
template <> struct compute<__half> { using type = float; };
template <> struct compute<bf16> { using type = float; };
template <class T> using compute_t = typename compute<T>::type;

template <class T, class C>
__device__ __forceinline__ T store(C v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, bf16>) return __float2bfloat16_rn(v);
  else return v;
}

unsigned grid_for(std::int64_t n) {
  std::int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > (std::int64_t(1) << 20)) blocks = std::int64_t(1) << 20;  // grid-stride beyond
  return unsigned(blocks < 1 ? 1 : blocks);
}

#define SOMA_GRID_LOOP(i, n)                                                      \
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void pool_kernel(PoolKind kind, const T* a, const T* b, T* out, PoolDims p,
                            std::int64_t n) {
  using C = compute_t<T>;
  SOMA_GRID_LOOP(i, n) {
    C v;
    switch (kind) {
      case PoolKind::max: v = max_pool_at<C>(a, p, i); break;
      case PoolKind::max_grad: v = max_pool_grad_at<C>(a, b, p, i); break;
      case PoolKind::max_grad_grad: v = max_pool_grad_grad_at<C>(a, b, p, i); break;
      case PoolKind::avg: v = avg_pool_at<C>(a, p, i); break;
      default: v = avg_pool_grad_at<C>(a, p, i); break;
    }
    out[i] = store<T>(v);
  }
}

template <class T>
__global__ void pool_argmax_kernel(const T* x, std::int64_t* out, PoolDims p, std::int64_t n) {
  using C = compute_t<T>;
  SOMA_GRID_LOOP(i, n) { out[i] = max_pool_index_at<C>(x, p, i); }
}

template <class U>
__global__ void window_copy_kernel(const U* in, U* out, WindowCopy c, std::int64_t n) {
  SOMA_GRID_LOOP(i, n) { out[i] = window_copy_at(in, c, i); }
}

template <class T>
__global__ void bias_act_kernel(T* y, const T* b, std::int64_t n, std::int64_t channels,
                                std::int64_t hw, bool relu) {
  using C = compute_t<T>;
  SOMA_GRID_LOOP(i, n) { y[i] = store<T>(bias_act_at<C>(y, b, channels, hw, relu, i)); }
}

#undef SOMA_GRID_LOOP

template <class T> struct Tag { using type = T; };

template <class F>
cudaError_t dispatch_float(ElemType t, F&& f) {
  switch (t) {
    case ElemType::f32: return f(Tag<float>{});
    case ElemType::f64: return f(Tag<double>{});
    case ElemType::f16: return f(Tag<__half>{});
    case ElemType::bf16: return f(Tag<bf16>{});
    default: return cudaErrorInvalidValue;  // the host refuses other types first
  }
}

}  // namespace

cudaError_t launch_pool(PoolKind kind, const void* a, const void* b, void* out, ElemType type,
                        const PoolDims& p, cudaStream_t stream) {
  const bool to_input = kind == PoolKind::max_grad || kind == PoolKind::avg_grad;
  const std::int64_t n = to_input ? p.planes * p.h * p.w : p.planes * p.oh * p.ow;
  if (n == 0) return cudaSuccess;
  return dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    pool_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
        kind, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), p, n);
    return cudaGetLastError();
  });
}

cudaError_t launch_pool_argmax(const void* x, std::int64_t* out, ElemType type,
                               const PoolDims& p, cudaStream_t stream) {
  const std::int64_t n = p.planes * p.oh * p.ow;
  if (n == 0) return cudaSuccess;
  return dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    pool_argmax_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), out, p,
                                                                n);
    return cudaGetLastError();
  });
}

cudaError_t launch_window_copy(const void* in, void* out, int elem_bytes, const WindowCopy& c,
                               cudaStream_t stream) {
  const std::int64_t n = c.planes * c.out_h * c.out_w;
  if (n == 0) return cudaSuccess;
  auto go = [&](auto* typed) {
    using U = std::remove_pointer_t<decltype(typed)>;
    window_copy_kernel<U><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const U*>(in),
                                                                static_cast<U*>(out), c, n);
    return cudaGetLastError();
  };
  switch (elem_bytes) {
    case 2: return go(static_cast<std::uint16_t*>(nullptr));
    case 4: return go(static_cast<std::uint32_t*>(nullptr));
    case 8: return go(static_cast<std::uint64_t*>(nullptr));
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_bias_act(void* y, const void* b, ElemType type, std::int64_t numel,
                            std::int64_t channels, std::int64_t hw, bool relu,
                            cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  return dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_act_kernel<T><<<grid_for(numel), kThreads, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(b), numel, channels, hw, relu);
    return cudaGetLastError();
  });
}

}  // namespace soma::cuda_detail
