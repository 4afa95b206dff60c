// Launch and dtype-dispatch helpers shared by the index and sort/scan kernels (nvcc only):
// a grid size for grid-stride loops, the loop itself, and switches from an element width or an
// ElemType to a C++ type, called as f(Tag<T>{}). Each .cu file brings them in with
// `using namespace soma::cuda_detail::device;`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/launch.hpp"

namespace soma::cuda_detail::device {

constexpr int kThreads = 256;

inline unsigned grid_for(std::int64_t n) {
  std::int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > (std::int64_t(1) << 20)) blocks = std::int64_t(1) << 20;  // the rest by grid-stride loops
  return unsigned(blocks < 1 ? 1 : blocks);
}

template <class T> struct Tag { using type = T; };

// Runs f(Tag<U>) with U an unsigned integer of `bytes` bytes.
template <class F>
cudaError_t by_width(int bytes, F&& f) {
  switch (bytes) {
    case 1: return f(Tag<std::uint8_t>{});
    case 2: return f(Tag<std::uint16_t>{});
    case 4: return f(Tag<std::uint32_t>{});
    case 8: return f(Tag<std::uint64_t>{});
  }
  return cudaErrorInvalidValue;
}

// Runs f(Tag<T>) with T the element type `t` stores.
template <class F>
cudaError_t by_type(ElemType t, F&& f) {
  switch (t) {
    case ElemType::f32: return f(Tag<float>{});
    case ElemType::f64: return f(Tag<double>{});
    case ElemType::f16: return f(Tag<__half>{});
    case ElemType::bf16: return f(Tag<__nv_bfloat16>{});
    case ElemType::i32: return f(Tag<std::int32_t>{});
    case ElemType::i64: return f(Tag<std::int64_t>{});
    case ElemType::u8: return f(Tag<std::uint8_t>{});
    case ElemType::boolean: return f(Tag<bool>{});
    case ElemType::i8: return f(Tag<std::int8_t>{});
  }
  return cudaErrorInvalidValue;
}

// Converts between element types on the device; 16-bit floats go through float (or from double
// directly), as the CPU's conversions do.
template <class To, class From>
__device__ __forceinline__ To to(From v) {
  if constexpr (std::is_same_v<From, __half> || std::is_same_v<From, __nv_bfloat16>) {
    return to<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    if constexpr (std::is_same_v<From, double>) return __double2half(v);
    else return __float2half_rn(float(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    if constexpr (std::is_same_v<From, double>) return __double2bfloat16(v);
    else return __float2bfloat16_rn(float(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace soma::cuda_detail::device

#define SOMA_GRID_LOOP(i, n)                                                   \
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += std::int64_t(gridDim.x) * blockDim.x)
