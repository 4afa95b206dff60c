// CUDA kernels for elementwise ops (with broadcasting and arbitrary strides; the formulas are the
// elementwise table's functors), copies and casts, fills, reductions and softmax. The op is a run-time argument (uniform across the grid, so a
// warp never diverges on it): one kernel per dtype instead of one per op and dtype keeps nvcc's
// compile time small. 16-bit floats compute in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/cuda/device_dispatch.cuh"
#include "backend/cuda/launch.hpp"

namespace soma::cuda_detail {
namespace {

using i64 = std::int64_t;
using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;

template <class T> constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, bf16>;
template <class T> constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;

// The type arithmetic happens in.
template <class T> struct compute { using type = T; };
template <> struct compute<__half> { using type = float; };
template <> struct compute<bf16> { using type = float; };
template <class T> using compute_t = typename compute<T>::type;

template <class To, class From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (is_half_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, __half>) {
    if constexpr (std::is_same_v<From, float>) return __float2half_rn(v);
    else return __double2half(static_cast<double>(v));
  } else if constexpr (std::is_same_v<To, bf16>) {
    if constexpr (std::is_same_v<From, float>) return __float2bfloat16_rn(v);
    else return __double2bfloat16(static_cast<double>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // As the CPU's convert (src/internal/dispatch.hpp): NaN -> 0, values past the range -> the
    // integer's min or max, else truncation (spelled out rather than left to cvt's behaviour).
    constexpr From lo = From(std::numeric_limits<To>::min());
    constexpr From hi = From(2) * From(To(1) << (std::numeric_limits<To>::digits - 1));
    const From in_range = (v >= lo && v < hi) ? v : From(0);
    To r = static_cast<To>(in_range);
    r = v >= hi ? std::numeric_limits<To>::max() : r;
    r = v < lo ? std::numeric_limits<To>::min() : r;
    return r;
  } else {
    return static_cast<To>(v);
  }
}

unsigned grid_for(i64 n) {
  i64 blocks = (n + kThreads - 1) / kThreads;
  if (blocks > (i64(1) << 20)) blocks = i64(1) << 20;  // the rest by grid-stride loops
  return unsigned(blocks < 1 ? 1 : blocks);
}

// Element offsets of linear index i for N operands over a (coalesced) space.
template <int N>
__device__ __forceinline__ void offsets_of(const Space& s, const Operand* const* ops, i64 i,
                                           i64 (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const i64 n = s.shape[d];
    const i64 idx = i % n;
    i /= n;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * ops[k]->stride[d];
  }
}

// ---- elementwise: the table's functors (src/ops/elementwise_table.hpp) ----
// The op of a launch is a run-time value: one switch case per table op, each the op's functor
// on the compute type. Ops whose family does not take the type are refused by the host.
template <class C>
__device__ __forceinline__ C unary_apply(UnaryOp op, C x, double alpha, double beta) {
  switch (op) {
#define SOMA_CUDA_UNARY_CASE(NAME, ...)                                   \
  case UnaryOp::NAME:                                                     \
    if constexpr (ew::supports<ew::NAME##_fn::family, C>()) {            \
      ew::NAME##_fn f;                                                    \
      f.alpha = alpha;                                                    \
      f.beta = beta;                                                      \
      return C(f(x));                                                     \
    }                                                                     \
    break;
    SOMA_ELEMENTWISE_UNARY(SOMA_CUDA_UNARY_CASE)
#undef SOMA_CUDA_UNARY_CASE
  }
  return x;
}

template <class T>
__global__ void unary_kernel(UnaryOp op, Operand in, Operand out, Space s, double alpha,
                             double beta) {
  using C = compute_t<T>;
  const T* a = static_cast<const T*>(in.data);
  T* o = static_cast<T*>(out.data);
  const Operand* ops[2] = {&in, &out};
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < s.numel;
       i += i64(gridDim.x) * blockDim.x) {
    if (s.packed) {
      o[i] = convert<T>(unary_apply<C>(op, convert<C>(a[i]), alpha, beta));
    } else {
      i64 off[2];
      offsets_of<2>(s, ops, i, off);
      o[off[1]] = convert<T>(unary_apply<C>(op, convert<C>(a[off[0]]), alpha, beta));
    }
  }
}

// R: the result's compute type, bool for predicates (and the logical ops), else C. Only the ops
// whose family takes C and gives R have a case.
template <class C, class R>
__device__ __forceinline__ R binary_apply(BinaryOp op, C a, C b) {
  switch (op) {
#define SOMA_CUDA_BINARY_CASE(NAME, ...)                                            \
  case BinaryOp::NAME:                                                              \
    if constexpr (ew::supports<ew::NAME##_fn::family, C>() &&                       \
                  std::is_same_v<ew::result_t<ew::NAME##_fn::family, C>, R>)        \
      return ew::NAME##_fn{}(a, b);                                                 \
    break;
    SOMA_ELEMENTWISE_BINARY(SOMA_CUDA_BINARY_CASE)
#undef SOMA_CUDA_BINARY_CASE
  }
  return R(0);
}

template <class T, class R>
__global__ void binary_kernel(BinaryOp op, Operand a, Operand b, Operand out, Space s) {
  using C = compute_t<T>;
  using RC = std::conditional_t<std::is_same_v<R, bool>, bool, C>;
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  R* po = static_cast<R*>(out.data);
  const Operand* ops[3] = {&a, &b, &out};
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < s.numel;
       i += i64(gridDim.x) * blockDim.x) {
    i64 off[3] = {i, i, i};
    if (!s.packed) offsets_of<3>(s, ops, i, off);
    const C x = convert<C>(pa[off[0]]), y = convert<C>(pb[off[1]]);
    po[off[2]] = convert<R>(binary_apply<C, RC>(op, x, y));
  }
}

// ---- where ----
template <class T>
__global__ void where_kernel(Operand c, Operand a, Operand b, Operand out, Space s) {
  const bool* pc = static_cast<const bool*>(c.data);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  T* po = static_cast<T*>(out.data);
  const Operand* ops[4] = {&c, &a, &b, &out};
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < s.numel;
       i += i64(gridDim.x) * blockDim.x) {
    i64 off[4] = {i, i, i, i};
    if (!s.packed) offsets_of<4>(s, ops, i, off);
    po[off[3]] = pc[off[0]] ? pa[off[1]] : pb[off[2]];
  }
}

// ---- copy / cast / fill ----
template <class S, class D>
__global__ void copy_kernel(Operand in, Operand out, Space s) {
  const S* ps = static_cast<const S*>(in.data);
  D* pd = static_cast<D*>(out.data);
  const Operand* ops[2] = {&in, &out};
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < s.numel;
       i += i64(gridDim.x) * blockDim.x) {
    i64 off[2] = {i, i};
    if (!s.packed) offsets_of<2>(s, ops, i, off);
    pd[off[1]] = convert<D>(ps[off[0]]);
  }
}

template <class D>
__global__ void fill_kernel(Operand out, Space s, D value) {
  D* pd = static_cast<D*>(out.data);
  const Operand* ops[1] = {&out};
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < s.numel;
       i += i64(gridDim.x) * blockDim.x) {
    i64 off[1] = {i};
    if (!s.packed) offsets_of<1>(s, ops, i, off);
    pd[off[0]] = value;
  }
}

// Tag<T> and the element-type switch are device_dispatch.cuh's, shared with the other kernel files.
using device::Tag;
template <class F>
cudaError_t dispatch(ElemType t, F&& f) { return device::by_type(t, std::forward<F>(f)); }

// Same-size copies move bits: exact for every type (i64 never goes through a double).
template <int Bytes> struct bits;
template <> struct bits<1> { using type = std::uint8_t; };
template <> struct bits<2> { using type = std::uint16_t; };
template <> struct bits<4> { using type = std::uint32_t; };
template <> struct bits<8> { using type = std::uint64_t; };
int elem_size(ElemType t) {
  switch (t) {
    case ElemType::f64: case ElemType::i64: return 8;
    case ElemType::f32: case ElemType::i32: return 4;
    case ElemType::f16: case ElemType::bf16: return 2;
    default: return 1;
  }
}

// ---- reductions ----
template <class A>
__device__ __forceinline__ A reduce_identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::prod: return A(1);
    case ReduceOp::max:
      if constexpr (std::is_floating_point_v<A>) return -INFINITY;
      else return A(std::is_same_v<A, std::int32_t> ? INT32_MIN : INT64_MIN);
    case ReduceOp::min:
      if constexpr (std::is_floating_point_v<A>) return INFINITY;
      else return A(std::is_same_v<A, std::int32_t> ? INT32_MAX : INT64_MAX);
    default: return A(0);
  }
}

template <class A>
__device__ __forceinline__ A reduce_combine(ReduceOp op, A acc, A v) {
  switch (op) {
    case ReduceOp::prod: return A(acc * v);
    case ReduceOp::max: return (acc != acc) ? acc : ((v > acc || v != v) ? v : acc);
    case ReduceOp::min: return (acc != acc) ? acc : ((v < acc || v != v) ? v : acc);
    default: return A(acc + v);
  }
}

__device__ __forceinline__ i64 kept_offset(const ReduceSpace& s, i64 row, i64& out_off) {
  i64 in_off = 0;
  out_off = 0;
  for (int d = s.kept_rank - 1; d >= 0; --d) {
    const i64 idx = row % s.kept_shape[d];
    row /= s.kept_shape[d];
    in_off += idx * s.in_kept_stride[d];
    out_off += idx * s.out_stride[d];
  }
  return in_off;
}

__device__ __forceinline__ i64 red_offset(const ReduceSpace& s, i64 k) {
  i64 off = 0;
  for (int d = s.red_rank - 1; d >= 0; --d) {
    off += (k % s.red_shape[d]) * s.in_red_stride[d];
    k /= s.red_shape[d];
  }
  return off;
}

template <class A>
__device__ __forceinline__ A warp_reduce(ReduceOp op, A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = reduce_combine(op, v, A(__shfl_down_sync(0xffffffffu, v, o)));
  return v;
}

// A whole-block reduction; the result is valid in thread 0.
template <class A>
__device__ A block_reduce(ReduceOp op, A v) {
  __shared__ A partial[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(op, v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) / 32;
  v = threadIdx.x < nwarps ? partial[threadIdx.x] : reduce_identity<A>(op);
  if (warp == 0) v = warp_reduce(op, v);
  __syncthreads();  // partial is reused by the next row
  return v;
}

template <class A, class T>
__device__ __forceinline__ T reduce_finish(ReduceOp op, A acc, i64 count) {
  if (op == ReduceOp::mean) {
    if constexpr (std::is_floating_point_v<A>) return convert<T>(acc / A(count));
  }
  return convert<T>(acc);
}

// One block per output element: long reductions.
template <class T>
__global__ void reduce_block_kernel(ReduceOp op, const T* in, T* out, ReduceSpace s) {
  using A = compute_t<T>;
  for (i64 row = blockIdx.x; row < s.kept_numel; row += gridDim.x) {
    i64 out_off;
    const i64 base = kept_offset(s, row, out_off);
    A acc = reduce_identity<A>(op);
    for (i64 k = threadIdx.x; k < s.red_numel; k += blockDim.x)
      acc = reduce_combine(op, acc, convert<A>(in[base + red_offset(s, k)]));
    acc = block_reduce(op, acc);
    if (threadIdx.x == 0) out[out_off] = reduce_finish<A, T>(op, acc, s.red_numel);
  }
}

// One thread per output element: short reductions over many outputs.
template <class T>
__global__ void reduce_thread_kernel(ReduceOp op, const T* in, T* out, ReduceSpace s) {
  using A = compute_t<T>;
  for (i64 row = i64(blockIdx.x) * blockDim.x + threadIdx.x; row < s.kept_numel;
       row += i64(gridDim.x) * blockDim.x) {
    i64 out_off;
    const i64 base = kept_offset(s, row, out_off);
    A acc = reduce_identity<A>(op);
    for (i64 k = 0; k < s.red_numel; ++k)
      acc = reduce_combine(op, acc, convert<A>(in[base + red_offset(s, k)]));
    out[out_off] = reduce_finish<A, T>(op, acc, s.red_numel);
  }
}

// ---- softmax: one warp per row (three passes: max, sum of exponentials, write) ----
template <class T, bool Log>
__global__ void softmax_kernel(const T* in, T* out, ReduceSpace s, i64 out_red_stride) {
  using A = compute_t<T>;
  const int lane = threadIdx.x % 32;
  const i64 warps_per_grid = i64(gridDim.x) * (blockDim.x / 32);
  const i64 K = s.red_numel, in_step = s.in_red_stride[0];
  for (i64 row = i64(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; row < s.kept_numel;
       row += warps_per_grid) {
    i64 out_off;
    const T* x = in + kept_offset(s, row, out_off);
    T* o = out + out_off;
    A mx = -INFINITY;
    for (i64 k = lane; k < K; k += 32) mx = reduce_combine(ReduceOp::max, mx, convert<A>(x[k * in_step]));
    mx = warp_reduce(ReduceOp::max, mx);
    mx = __shfl_sync(0xffffffffu, mx, 0);
    const A shift = isinf(mx) ? A(0) : mx;  // an all -inf row gives nan like the CPU, not a trap
    A sum = 0;
    for (i64 k = lane; k < K; k += 32) sum += exp(convert<A>(x[k * in_step]) - shift);
    sum = warp_reduce(ReduceOp::sum, sum);
    sum = __shfl_sync(0xffffffffu, sum, 0);
    if constexpr (Log) {
      const A lse = log(sum);
      for (i64 k = lane; k < K; k += 32)
        o[k * out_red_stride] = convert<T>((convert<A>(x[k * in_step]) - shift) - lse);
    } else {
      const A inv = A(1) / sum;
      for (i64 k = lane; k < K; k += 32)
        o[k * out_red_stride] = convert<T>(exp(convert<A>(x[k * in_step]) - shift) * inv);
    }
  }
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, const Operand& in, const Operand& out, const Space& space,
                         double alpha, double beta, cudaStream_t stream) {
  if (space.numel == 0) return cudaSuccess;
  return dispatch(in.type, [&](auto tag_T) {
    using T = typename decltype(tag_T)::type;
    unary_kernel<T><<<grid_for(space.numel), kThreads, 0, stream>>>(op, in, out, space, alpha,
                                                                     beta);
    return cudaGetLastError();
  });
}

cudaError_t launch_binary(BinaryOp op, const Operand& a, const Operand& b, const Operand& out,
                          const Space& space, cudaStream_t stream) {
  if (space.numel == 0) return cudaSuccess;
  const bool pred = is_predicate(op);
  return dispatch(a.type, [&](auto tag_T) {
    using T = typename decltype(tag_T)::type;
    if (pred)
      binary_kernel<T, bool><<<grid_for(space.numel), kThreads, 0, stream>>>(op, a, b, out, space);
    else
      binary_kernel<T, T><<<grid_for(space.numel), kThreads, 0, stream>>>(op, a, b, out, space);
    return cudaGetLastError();
  });
}

cudaError_t launch_where(const Operand& cond, const Operand& a, const Operand& b,
                         const Operand& out, const Space& space, cudaStream_t stream) {
  if (space.numel == 0) return cudaSuccess;
  auto run = [&](auto tag_E) {
    using E = typename decltype(tag_E)::type;
    where_kernel<E><<<grid_for(space.numel), kThreads, 0, stream>>>(cond, a, b, out, space);
    return cudaGetLastError();
  };
  switch (elem_size(a.type)) {  // selecting moves bits: the element size is all that matters
    case 8: return run(Tag<std::uint64_t>{});
    case 4: return run(Tag<std::uint32_t>{});
    case 2: return run(Tag<std::uint16_t>{});
    default: return run(Tag<std::uint8_t>{});
  }
}

cudaError_t launch_copy(const Operand& in, const Operand& out, const Space& space,
                        cudaStream_t stream) {
  if (space.numel == 0) return cudaSuccess;
  if (in.type == out.type) {
    auto run = [&](auto tag_E) {
    using E = typename decltype(tag_E)::type;
      copy_kernel<E, E><<<grid_for(space.numel), kThreads, 0, stream>>>(in, out, space);
      return cudaGetLastError();
    };
    switch (elem_size(in.type)) {
      case 8: return run(Tag<bits<8>::type>{});
      case 4: return run(Tag<bits<4>::type>{});
      case 2: return run(Tag<bits<2>::type>{});
      default: return run(Tag<bits<1>::type>{});
    }
  }
  return dispatch(in.type, [&](auto tag_S) {
    using S = typename decltype(tag_S)::type;
    return dispatch(out.type, [&](auto tag_D) {
    using D = typename decltype(tag_D)::type;
      copy_kernel<S, D><<<grid_for(space.numel), kThreads, 0, stream>>>(in, out, space);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_fill(const Operand& out, const Space& space, double value,
                        cudaStream_t stream) {
  if (space.numel == 0) return cudaSuccess;
  return dispatch(out.type, [&](auto tag_D) {
    using D = typename decltype(tag_D)::type;
    D v;
    if constexpr (std::is_same_v<D, __half>) v = __double2half(value);
    else if constexpr (std::is_same_v<D, bf16>) v = __double2bfloat16(value);
    else if constexpr (std::is_same_v<D, bool>) v = value != 0.0;
    else v = static_cast<D>(value);
    fill_kernel<D><<<grid_for(space.numel), kThreads, 0, stream>>>(out, space, v);
    return cudaGetLastError();
  });
}

cudaError_t launch_reduce(ReduceOp op, const void* in, void* out, ElemType type,
                          const ReduceSpace& space, cudaStream_t stream) {
  if (space.kept_numel == 0) return cudaSuccess;
  auto run = [&](auto tag_T) {
    using T = typename decltype(tag_T)::type;
    const T* pi = static_cast<const T*>(in);
    T* po = static_cast<T*>(out);
    if (space.red_numel >= 64 || space.kept_numel < 1024) {
      const i64 blocks = space.kept_numel < 65535 ? space.kept_numel : 65535;
      reduce_block_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(op, pi, po, space);
    } else {
      reduce_thread_kernel<T><<<grid_for(space.kept_numel), kThreads, 0, stream>>>(op, pi, po, space);
    }
    return cudaGetLastError();
  };
  switch (type) {
    case ElemType::f32: return run(Tag<float>{});
    case ElemType::f64: return run(Tag<double>{});
    case ElemType::f16: return run(Tag<__half>{});
    case ElemType::bf16: return run(Tag<bf16>{});
    case ElemType::i32: return run(Tag<std::int32_t>{});
    case ElemType::i64: return run(Tag<std::int64_t>{});
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_softmax(bool log, const void* in, void* out, ElemType type,
                           const ReduceSpace& space, std::int64_t out_red_stride,
                           cudaStream_t stream) {
  if (space.kept_numel == 0 || space.red_numel == 0) return cudaSuccess;
  constexpr int kWarps = kThreads / 32;
  i64 blocks = (space.kept_numel + kWarps - 1) / kWarps;
  if (blocks > 65535) blocks = 65535;
  auto run = [&](auto tag_T) {
    using T = typename decltype(tag_T)::type;
    const T* pi = static_cast<const T*>(in);
    T* po = static_cast<T*>(out);
    if (log)
      softmax_kernel<T, true><<<unsigned(blocks), kThreads, 0, stream>>>(pi, po, space, out_red_stride);
    else
      softmax_kernel<T, false><<<unsigned(blocks), kThreads, 0, stream>>>(pi, po, space, out_red_stride);
    return cudaGetLastError();
  };
  switch (type) {
    case ElemType::f32: return run(Tag<float>{});
    case ElemType::f64: return run(Tag<double>{});
    case ElemType::f16: return run(Tag<__half>{});
    case ElemType::bf16: return run(Tag<bf16>{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace soma::cuda_detail
