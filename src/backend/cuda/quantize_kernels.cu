// CUDA kernels of quantize_linear and dequantize_linear: the per-element formulas of
// src/ops/quantize_formulas.hpp (the CPU kernels' too) in one grid-stride pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "backend/cuda/quantize_launch.hpp"

namespace soma::cuda_detail {
namespace {

using i64 = std::int64_t;
using bf16 = __nv_bfloat16;
constexpr int kQuantThreads = 256;

template <class T> struct Tag { using type = T; };
template <class T> struct compute { using type = T; };
template <> struct compute<__half> { using type = float; };
template <> struct compute<bf16> { using type = float; };

template <class T> __device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, bf16>) return __float2bfloat16_rn(v);
  else return T(v);
}
template <class T> __device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return __bfloat162float(v);
}
// To the compute type; the 16-bit floats through float.
template <class T> __device__ __forceinline__ typename compute<T>::type up(T v) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, bf16>) return to_float(v);
  else return v;
}
template <class T> __device__ __forceinline__ T down(typename compute<T>::type v) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, bf16>) return from_float<T>(v);
  else return v;
}

template <class T, class Q>
__global__ void quantize_kernel(const T* __restrict__ x, const T* __restrict__ s,
                                const Q* __restrict__ z, Q* __restrict__ o,
                                quant::ChannelIndex ch, i64 n) {
  using C = typename compute<T>::type;
  const i64 step = i64(gridDim.x) * blockDim.x;
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const i64 c = ch(i);
    const C q = up(down<T>(up(x[i]) / up(s[c])));  // the quotient in x's own type, as on the CPU
    o[i] = quant::quantize_value<Q>(q, std::int32_t(z[c]));
  }
}

template <class I, class T>
__global__ void dequantize_kernel(const I* __restrict__ q, const T* __restrict__ s,
                                  const I* __restrict__ z, T* __restrict__ o,
                                  quant::ChannelIndex ch, i64 n) {
  using C = typename compute<T>::type;
  const i64 step = i64(gridDim.x) * blockDim.x;
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const i64 c = ch(i);
    o[i] = down<T>(quant::dequantize_value<C>(q[i], z[c], up(s[c])));
  }
}

unsigned blocks_for(i64 n) {
  i64 b = (n + kQuantThreads - 1) / kQuantThreads;
  if (b > (i64(1) << 16)) b = i64(1) << 16;  // the rest by the grid-stride loop
  return unsigned(b < 1 ? 1 : b);
}

template <class F>
cudaError_t by_float(ElemType t, F&& f) {
  switch (t) {
    case ElemType::f32: return f(Tag<float>{});
    case ElemType::f64: return f(Tag<double>{});
    case ElemType::f16: return f(Tag<__half>{});
    case ElemType::bf16: return f(Tag<bf16>{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_quantize(const void* x, const void* scale, const void* zero_point, void* out,
                            ElemType x_type, ElemType q_type, quant::ChannelIndex ch, i64 n,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return by_float(x_type, [&](auto tag_T) {
    using T = typename decltype(tag_T)::type;
    auto run = [&](auto tag_Q) {
      using Q = typename decltype(tag_Q)::type;
      quantize_kernel<T, Q><<<blocks_for(n), kQuantThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(scale),
          static_cast<const Q*>(zero_point), static_cast<Q*>(out), ch, n);
      return cudaGetLastError();
    };
    if (q_type == ElemType::u8) return run(Tag<std::uint8_t>{});
    if (q_type == ElemType::i8) return run(Tag<std::int8_t>{});
    return cudaErrorInvalidValue;
  });
}

cudaError_t launch_dequantize(const void* q, const void* scale, const void* zero_point, void* out,
                              ElemType q_type, ElemType f_type, quant::ChannelIndex ch, i64 n,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return by_float(f_type, [&](auto tag_T) {
    using T = typename decltype(tag_T)::type;
    auto run = [&](auto tag_I) {
      using I = typename decltype(tag_I)::type;
      dequantize_kernel<I, T><<<blocks_for(n), kQuantThreads, 0, stream>>>(
          static_cast<const I*>(q), static_cast<const T*>(scale),
          static_cast<const I*>(zero_point), static_cast<T*>(out), ch, n);
      return cudaGetLastError();
    };
    switch (q_type) {
      case ElemType::u8: return run(Tag<std::uint8_t>{});
      case ElemType::i8: return run(Tag<std::int8_t>{});
      case ElemType::i32: return run(Tag<std::int32_t>{});
      default: return cudaErrorInvalidValue;
    }
  });
}

}  // namespace soma::cuda_detail
