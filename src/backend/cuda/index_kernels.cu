// CUDA kernels of the index ops: concat, pad, gather, gather_grad (deterministic: a stable CUB
// radix sort of the indices, then one thread per destination element adds its gradients in
// their original order), one_hot, argmax/argmin, all/any, and the random ops (Philox, the
// CPU's generator: philox.hpp). The per-element index math is index_math.hpp's, tested on the
// CPU. Data movement is typed by element width only (one kernel per width, not per dtype).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/device_dispatch.cuh"
#include "backend/cuda/index_launch.hpp"
#include "backend/cuda/philox.hpp"

namespace soma::cuda_detail {
namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;
using bf16 = __nv_bfloat16;
using namespace soma::cuda_index;

using namespace soma::cuda_detail::device;

// 16-bit floats compute in f32 (as on the CPU); everything else in its own type.
template <class T> struct compute { using type = T; };
template <> struct compute<__half> { using type = float; };
template <> struct compute<bf16> { using type = float; };
template <class T> using compute_t = typename compute<T>::type;


// An index of a launch's index tensor, as i64.
__device__ __forceinline__ i64 index_at(const Indices& ids, i64 j) {
  return ids.i64 ? static_cast<const std::int64_t*>(ids.data)[j]
                 : i64(static_cast<const std::int32_t*>(ids.data)[j]);
}

// ---- concat / pad / one_hot / gather ----
template <class U>
__global__ void concat_kernel(ConcatLaunch l) {
  U* out = static_cast<U*>(l.out);
  const i64 n = l.geom.count();
  SOMA_GRID_LOOP(i, n) {
    const ConcatSource s = concat_source(l.geom, i);
    out[s.out] = static_cast<const U*>(l.src[s.part])[s.src];
  }
}

template <class U>
__global__ void pad_kernel(PadLaunch l) {
  const U* in = static_cast<const U*>(l.in);
  U* out = static_cast<U*>(l.out);
  const U value = static_cast<U>(l.value_bits);
  SOMA_GRID_LOOP(i, l.geom.numel) {
    i64 src;
    out[i] = pad_source(l.geom, i, &src) ? in[src] : value;
  }
}

template <class U>
__global__ void one_hot_kernel(OneHotLaunch l) {
  U* out = static_cast<U*>(l.out);
  const U on = static_cast<U>(l.on_bits), off = static_cast<U>(l.off_bits);
  SOMA_GRID_LOOP(i, l.rows * l.depth) {
    out[i] = one_hot_on(i, l.depth, index_at(l.ids, one_hot_row(i, l.depth))) ? on : off;
  }
}

template <class U>
__global__ void gather_kernel(GatherLaunch l) {
  const U* src = static_cast<const U*>(l.src);
  U* out = static_cast<U*>(l.out);
  SOMA_GRID_LOOP(i, l.geom.count()) {
    const i64 which = gather_which(l.geom, i);
    const i64 id = normalize_index(index_at(l.ids, which), l.geom.n);
    if (id < 0) {
      atomicMin(l.bad, static_cast<unsigned long long>(which));
      continue;
    }
    out[i] = src[gather_source(l.geom, i, id)];
  }
}

__global__ void check_indices_kernel(Indices ids, i64 k, i64 n, unsigned long long* bad) {
  SOMA_GRID_LOOP(j, k) {
    if (normalize_index(index_at(ids, j), n) < 0)
      atomicMin(bad, static_cast<unsigned long long>(j));
  }
}

// ---- gather_grad ----
// keys[j] = the normalised index j (0 for a bad one, which is recorded), pos[j] = j.
__global__ void gather_grad_keys_kernel(Indices ids, i64 k, i64 n, u64* keys, i64* pos,
                                        unsigned long long* bad) {
  SOMA_GRID_LOOP(j, k) {
    const i64 id = normalize_index(index_at(ids, j), n);
    if (id < 0) atomicMin(bad, static_cast<unsigned long long>(j));
    keys[j] = id < 0 ? 0 : u64(id);
    pos[j] = j;
  }
}

// One thread per (o, sorted slot, i); the first slot of each run adds the run's gradients in
// their original order, rounding to T after every add like the CPU kernel.
template <class T>
__global__ void gather_grad_sum_kernel(GatherGeom g, const T* grad, T* out, const u64* keys,
                                       const i64* pos) {
  using C = compute_t<T>;
  SOMA_GRID_LOOP(e, g.count()) {
    const i64 slot = (e / g.inner) % g.k;
    if (!gather_grad_run_start(keys, slot)) continue;
    const u64 id = keys[slot];
    T acc = to<T>(C(0));
    for (i64 s = slot; s < g.k && keys[s] == id; ++s)
      acc = to<T>(C(to<C>(acc) + to<C>(grad[gather_grad_src(g, e, pos[s])])));
    out[gather_grad_dest(g, e, id)] = acc;
  }
}

// ---- reductions over a ReduceSpace (as kernels.cu) ----
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

// argmax / argmin, one block per output element: each thread keeps its best (value, index), then
// a tree in shared memory; arg_better makes the answer independent of the combining order.
template <class T, bool Max>
__global__ void arg_block_kernel(const T* in, i64* out, ReduceSpace s) {
  using C = compute_t<T>;
  __shared__ C best_v[kThreads];
  __shared__ i64 best_i[kThreads];
  const int t = threadIdx.x;
  for (i64 row = blockIdx.x; row < s.kept_numel; row += gridDim.x) {
    i64 out_off;
    const i64 base = kept_offset(s, row, out_off);
    C bv = C(0);
    i64 bi = -1;  // none yet
    for (i64 k = t; k < s.red_numel; k += blockDim.x) {
      const C v = to<C>(in[base + red_offset(s, k)]);
      if (bi < 0 || arg_better<Max>(v, k, bv, bi)) {
        bv = v;
        bi = k;
      }
    }
    best_v[t] = bv;
    best_i[t] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if (t < w) {
        const i64 oi = best_i[t + w];
        if (oi >= 0 && (best_i[t] < 0 || arg_better<Max>(best_v[t + w], oi, best_v[t], best_i[t]))) {
          best_v[t] = best_v[t + w];
          best_i[t] = oi;
        }
      }
      __syncthreads();
    }
    if (t == 0) out[out_off] = best_i[0];
    __syncthreads();  // the arrays are reused by the next row
  }
}

// One thread per output element: short reductions over many outputs (a scan in order).
template <class T, bool Max>
__global__ void arg_thread_kernel(const T* in, i64* out, ReduceSpace s) {
  using C = compute_t<T>;
  SOMA_GRID_LOOP(row, s.kept_numel) {
    i64 out_off;
    const i64 base = kept_offset(s, row, out_off);
    C bv = to<C>(in[base]);
    i64 bi = 0;
    for (i64 k = 1; k < s.red_numel; ++k) {
      const C v = to<C>(in[base + red_offset(s, k)]);
      if (arg_better<Max>(v, k, bv, bi)) {
        bv = v;
        bi = k;
      }
    }
    out[out_off] = bi;
  }
}

template <bool All>
__global__ void bool_block_kernel(const bool* in, bool* out, ReduceSpace s) {
  for (i64 row = blockIdx.x; row < s.kept_numel; row += gridDim.x) {
    i64 out_off;
    const i64 base = kept_offset(s, row, out_off);
    bool acc = All;
    for (i64 k = threadIdx.x; k < s.red_numel && acc == All; k += blockDim.x)
      acc = in[base + red_offset(s, k)];
    // Every thread of the block reaches these (the loop above ends for all of them).
    acc = All ? __syncthreads_and(acc) : __syncthreads_or(acc);
    if (threadIdx.x == 0) out[out_off] = acc;
  }
}

template <bool All>
__global__ void bool_thread_kernel(const bool* in, bool* out, ReduceSpace s) {
  SOMA_GRID_LOOP(row, s.kept_numel) {
    i64 out_off;
    const i64 base = kept_offset(s, row, out_off);
    bool acc = All;
    for (i64 k = 0; k < s.red_numel && acc == All; ++k) acc = in[base + red_offset(s, k)];
    out[out_off] = acc;
  }
}

// ---- random: one thread per Philox block, the CPU's lanes per block (random.cpp) ----
template <class T>
__global__ void uniform_float_kernel(RandomLaunch l) {
  T* out = static_cast<T*>(l.out);
  const double width = l.b - l.a;
  const i64 blocks = (l.numel + 3) / 4;
  const double hi = double(to<float>(to<T>(l.b)));  // maxval in T (exact in double)
  const T top = to<T>(l.top);
  SOMA_GRID_LOOP(b, blocks) {
    const philox::Block w = philox::bits(l.seed, l.stream, u64(b));
    for (int k = 0; k < 4 && b * 4 + k < l.numel; ++k) {
      const T v = to<T>(philox::uniform24(l.a, width, w[k]));
      out[b * 4 + k] = double(to<float>(v)) < hi ? v : top;
    }
  }
}

__global__ void uniform_f64_kernel(RandomLaunch l) {
  double* out = static_cast<double*>(l.out);
  const double width = l.b - l.a;
  const i64 blocks = (l.numel + 1) / 2;
  SOMA_GRID_LOOP(b, blocks) {
    const philox::Block w = philox::bits(l.seed, l.stream, u64(b));
    for (int k = 0; k < 2 && b * 2 + k < l.numel; ++k) {
      const double v = philox::uniform53(l.a, width, w[2 * k], w[2 * k + 1]);
      out[b * 2 + k] = v < l.b ? v : l.top;
    }
  }
}

template <class T>
__global__ void uniform_int_kernel(RandomLaunch l) {
  T* out = static_cast<T*>(l.out);
  const i64 blocks = (l.numel + 1) / 2;
  SOMA_GRID_LOOP(b, blocks) {
    const philox::Block w = philox::bits(l.seed, l.stream, u64(b));
    for (int k = 0; k < 2 && b * 2 + k < l.numel; ++k)
      out[b * 2 + k] = T(philox::uniform_int(l.int_lo, l.int_range, w[2 * k], w[2 * k + 1]));
  }
}

template <class T>
__global__ void normal_float_kernel(RandomLaunch l, bool truncate) {
  T* out = static_cast<T*>(l.out);
  const float m = float(l.a), sd = float(l.b);
  const i64 blocks = (l.numel + 3) / 4;
  SOMA_GRID_LOOP(b, blocks) {
    float z[4];
    philox::normals_f(philox::bits(l.seed, l.stream, u64(b)), z);
    for (int k = 0; k < 4 && b * 4 + k < l.numel; ++k) {
      const float v = truncate ? philox::truncate_f(l.seed, l.stream, u64(b), k, z[k]) : z[k];
      out[b * 4 + k] = to<T>(philox::add_rn(m, philox::mul_rn(sd, v)));
    }
  }
}

__global__ void normal_f64_kernel(RandomLaunch l, bool truncate) {
  double* out = static_cast<double*>(l.out);
  const i64 blocks = (l.numel + 1) / 2;
  SOMA_GRID_LOOP(b, blocks) {
    double z[2];
    philox::normals_d(philox::bits(l.seed, l.stream, u64(b)), z);
    for (int k = 0; k < 2 && b * 2 + k < l.numel; ++k) {
      const double v = truncate ? philox::truncate_d(l.seed, l.stream, u64(b), k, z[k]) : z[k];
      out[b * 2 + k] = philox::add_rn(l.a, philox::mul_rn(l.b, v));
    }
  }
}

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

cudaError_t radix_sort(void* temp, std::size_t& temp_bytes, const u64* keys_in, u64* keys_out,
                       const i64* vals_in, i64* vals_out, i64 k, int end_bit,
                       cudaStream_t stream) {
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in, vals_out,
                                         int(k), 0, end_bit, stream);
}

int key_bits(i64 n) {
  int b = 1;
  while (b < 64 && (u64(1) << b) < u64(n)) ++b;
  return b;
}

}  // namespace

cudaError_t launch_concat(const ConcatLaunch& l, cudaStream_t stream) {
  const i64 n = l.geom.count();
  if (n == 0) return cudaSuccess;
  return by_width(l.elem_bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    concat_kernel<U><<<grid_for(n), kThreads, 0, stream>>>(l);
    return cudaGetLastError();
  });
}

cudaError_t launch_pad(const PadLaunch& l, cudaStream_t stream) {
  if (l.geom.numel == 0) return cudaSuccess;
  return by_width(l.elem_bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    pad_kernel<U><<<grid_for(l.geom.numel), kThreads, 0, stream>>>(l);
    return cudaGetLastError();
  });
}

cudaError_t launch_one_hot(const OneHotLaunch& l, cudaStream_t stream) {
  const i64 n = l.rows * l.depth;
  if (n == 0) return cudaSuccess;
  return by_width(l.elem_bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    one_hot_kernel<U><<<grid_for(n), kThreads, 0, stream>>>(l);
    return cudaGetLastError();
  });
}

cudaError_t launch_gather(const GatherLaunch& l, cudaStream_t stream) {
  const i64 n = l.geom.count();
  if (n == 0) return cudaSuccess;
  return by_width(l.elem_bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    gather_kernel<U><<<grid_for(n), kThreads, 0, stream>>>(l);
    return cudaGetLastError();
  });
}

cudaError_t launch_check_indices(const Indices& ids, std::int64_t k, std::int64_t n,
                                 unsigned long long* bad, cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  check_indices_kernel<<<grid_for(k), kThreads, 0, stream>>>(ids, k, n, bad);
  return cudaGetLastError();
}

std::size_t gather_grad_workspace_bytes(std::int64_t k, std::int64_t n) {
  std::size_t temp = 0;
  if (k > 0 &&
      radix_sort(nullptr, temp, nullptr, nullptr, nullptr, nullptr, k, key_bits(n), nullptr) !=
          cudaSuccess)
    return 0;
  const std::size_t kb = aligned(std::size_t(k) * 8);
  return 4 * kb + aligned(temp);
}

cudaError_t launch_gather_grad(const GatherGradLaunch& l, cudaStream_t stream) {
  const GatherGeom& g = l.geom;
  const std::size_t out_numel = std::size_t(g.outer * g.n * g.inner);
  return by_type(l.type, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      cudaError_t st = cudaMemsetAsync(l.out, 0, out_numel * sizeof(T), stream);
      if (st != cudaSuccess || g.k == 0) return st;
      char* ws = static_cast<char*>(l.workspace);
      const std::size_t kb = aligned(std::size_t(g.k) * 8);
      u64* keys_in = reinterpret_cast<u64*>(ws);
      u64* keys_out = reinterpret_cast<u64*>(ws + kb);
      i64* pos_in = reinterpret_cast<i64*>(ws + 2 * kb);
      i64* pos_out = reinterpret_cast<i64*>(ws + 3 * kb);
      std::size_t temp_bytes = l.workspace_bytes - 4 * kb;
      gather_grad_keys_kernel<<<grid_for(g.k), kThreads, 0, stream>>>(l.ids, g.k, g.n, keys_in,
                                                                      pos_in, l.bad);
      if ((st = cudaGetLastError()) != cudaSuccess) return st;
      st = radix_sort(ws + 4 * kb, temp_bytes, keys_in, keys_out, pos_in, pos_out, g.k,
                      key_bits(g.n), stream);
      if (st != cudaSuccess || g.count() == 0) return st;
      gather_grad_sum_kernel<T><<<grid_for(g.count()), kThreads, 0, stream>>>(
          g, static_cast<const T*>(l.grad), static_cast<T*>(l.out), keys_out, pos_out);
      return cudaGetLastError();
    }
  });
}

cudaError_t launch_arg_reduce(bool max, const void* in, ElemType type, std::int64_t* out,
                              const ReduceSpace& space, cudaStream_t stream) {
  if (space.kept_numel == 0) return cudaSuccess;
  const bool per_block = space.red_numel >= 64 || space.kept_numel < 1024;
  const unsigned blocks =
      per_block ? unsigned(space.kept_numel < 65535 ? space.kept_numel : 65535)
                : grid_for(space.kept_numel);
  return by_type(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(in);
    if (per_block) {
      if (max) arg_block_kernel<T, true><<<blocks, kThreads, 0, stream>>>(p, out, space);
      else arg_block_kernel<T, false><<<blocks, kThreads, 0, stream>>>(p, out, space);
    } else {
      if (max) arg_thread_kernel<T, true><<<blocks, kThreads, 0, stream>>>(p, out, space);
      else arg_thread_kernel<T, false><<<blocks, kThreads, 0, stream>>>(p, out, space);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_bool_reduce(bool all, const bool* in, bool* out, const ReduceSpace& space,
                               cudaStream_t stream) {
  if (space.kept_numel == 0) return cudaSuccess;
  if (space.red_numel >= 64 || space.kept_numel < 1024) {
    const unsigned blocks = unsigned(space.kept_numel < 65535 ? space.kept_numel : 65535);
    if (all) bool_block_kernel<true><<<blocks, kThreads, 0, stream>>>(in, out, space);
    else bool_block_kernel<false><<<blocks, kThreads, 0, stream>>>(in, out, space);
  } else {
    const unsigned blocks = grid_for(space.kept_numel);
    if (all) bool_thread_kernel<true><<<blocks, kThreads, 0, stream>>>(in, out, space);
    else bool_thread_kernel<false><<<blocks, kThreads, 0, stream>>>(in, out, space);
  }
  return cudaGetLastError();
}

cudaError_t launch_random(const RandomLaunch& l, cudaStream_t stream) {
  if (l.numel == 0) return cudaSuccess;
  const bool f64 = l.type == ElemType::f64;
  const i64 blocks = (l.numel + (f64 || l.type == ElemType::i32 || l.type == ElemType::i64 ? 1 : 3)) /
                     (f64 || l.type == ElemType::i32 || l.type == ElemType::i64 ? 2 : 4);
  const unsigned grid = grid_for(blocks);
  if (l.kind == RandomKind::uniform) {
    switch (l.type) {
      case ElemType::f32: uniform_float_kernel<float><<<grid, kThreads, 0, stream>>>(l); break;
      case ElemType::f16: uniform_float_kernel<__half><<<grid, kThreads, 0, stream>>>(l); break;
      case ElemType::bf16: uniform_float_kernel<bf16><<<grid, kThreads, 0, stream>>>(l); break;
      case ElemType::f64: uniform_f64_kernel<<<grid, kThreads, 0, stream>>>(l); break;
      case ElemType::i32: uniform_int_kernel<std::int32_t><<<grid, kThreads, 0, stream>>>(l); break;
      case ElemType::i64: uniform_int_kernel<std::int64_t><<<grid, kThreads, 0, stream>>>(l); break;
      default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
  }
  const bool truncate = l.kind == RandomKind::truncated_normal;
  switch (l.type) {
    case ElemType::f32: normal_float_kernel<float><<<grid, kThreads, 0, stream>>>(l, truncate); break;
    case ElemType::f16: normal_float_kernel<__half><<<grid, kThreads, 0, stream>>>(l, truncate); break;
    case ElemType::bf16: normal_float_kernel<bf16><<<grid, kThreads, 0, stream>>>(l, truncate); break;
    case ElemType::f64: normal_f64_kernel<<<grid, kThreads, 0, stream>>>(l, truncate); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace soma::cuda_detail
