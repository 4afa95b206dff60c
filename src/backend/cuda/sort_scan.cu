// CUDA kernels of the scan, sort and element-index ops (host side: sort_scan_ops.cpp). The
// per-element math is sort_scan_index.hpp's, shared with the CPU kernels:
//   cumsum/cumprod/cumprod_grad  one thread per line, a sequential scan in the compute type
//   sort/topk                    keys (float_key/int_key), a CUB stable segmented sort per line
//   scatter                      a stable CUB radix sort of the destinations, then one thread per
//                                destination applies its updates in their original order
//   triu/tril, roll/flip, take_along_axis: one thread per output element
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/device_dispatch.cuh"
#include "backend/cuda/sort_scan_launch.hpp"

namespace soma::cuda_detail {
namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;
using bf16 = __nv_bfloat16;
namespace ss = soma::sort_scan;

using namespace soma::cuda_detail::device;

// 16-bit floats compute in f32 (as on the CPU); bool as int; everything else in its own type.
template <class T> struct compute { using type = T; };
template <> struct compute<__half> { using type = float; };
template <> struct compute<bf16> { using type = float; };
template <> struct compute<bool> { using type = int; };
template <class T> using compute_t = typename compute<T>::type;


template <class T>
__device__ __forceinline__ u64 key_of(T v, bool desc) {
  if constexpr (std::is_same_v<T, bool>) return ss::int_key(v ? 1 : 0, desc);
  else if constexpr (std::is_integral_v<T>) return ss::int_key(i64(v), desc);
  else return ss::float_key(double(to<compute_t<T>>(v)), desc);
}

__device__ __forceinline__ i64 id_at(const ElementIds& ids, i64 j) {
  return ids.i64 ? static_cast<const std::int64_t*>(ids.data)[j]
                 : i64(static_cast<const std::int32_t*>(ids.data)[j]);
}

// ---- scans ----
template <class T>
__global__ void scan_kernel(ScanLaunch l) {
  using C = compute_t<T>;
  const T* in = static_cast<const T*>(l.in);
  T* out = static_cast<T*>(l.out);
  const ss::AxisGeom g = l.geom;
  SOMA_GRID_LOOP(line, g.lines()) {
    const i64 base = g.base(line);
    C run = C(l.prod ? 1 : 0);
    for (i64 s = 0; s < g.n; ++s) {
      const i64 off = base + ss::scan_pos(s, g.n, l.reverse) * g.inner;
      const C v = to<C>(in[off]);
      if (l.exclusive) out[off] = to<T>(run);
      run = l.prod ? C(run * v) : C(run + v);
      if (!l.exclusive) out[off] = to<T>(run);
    }
  }
}

// Few long lines: one block per line, 256 elements at a time by a block-wide scan carried from
// chunk to chunk (the sums associate differently from the CPU's sequential order: equal within
// rounding).
template <class C> struct ScanOp {
  bool prod;
  __device__ __forceinline__ C operator()(const C& a, const C& b) const {
    return prod ? C(a * b) : C(a + b);
  }
};
template <class T>
__global__ void scan_block_kernel(ScanLaunch l) {
  using C = compute_t<T>;
  using BlockScan = cub::BlockScan<C, kThreads>;
  __shared__ typename BlockScan::TempStorage temp;
  const T* in = static_cast<const T*>(l.in);
  T* out = static_cast<T*>(l.out);
  const ss::AxisGeom g = l.geom;
  const ScanOp<C> op{l.prod};
  const C identity = C(l.prod ? 1 : 0);
  for (i64 line = blockIdx.x; line < g.lines(); line += gridDim.x) {
    const i64 base = g.base(line);
    C carry = identity;
    for (i64 c = 0; c < g.n; c += kThreads) {
      const i64 s = c + threadIdx.x;
      const i64 off = base + ss::scan_pos(s < g.n ? s : 0, g.n, l.reverse) * g.inner;
      const C v = s < g.n ? to<C>(in[off]) : identity;
      C ex, total;
      BlockScan(temp).ExclusiveScan(v, ex, identity, op, total);
      const C before = op(carry, ex);
      if (s < g.n) out[off] = to<T>(l.exclusive ? before : op(before, v));
      carry = op(carry, total);
      __syncthreads();  // temp is reused by the next chunk
    }
  }
}

template <class T>
__global__ void cumprod_grad_kernel(CumprodGradLaunch l) {
  using C = compute_t<T>;
  const T* x = static_cast<const T*>(l.x);
  const T* gr = static_cast<const T*>(l.g);
  T* out = static_cast<T*>(l.out);
  C* s = static_cast<C*>(l.workspace);  // S of sort_scan_index.hpp, at each element's offset
  const ss::AxisGeom g = l.geom;
  SOMA_GRID_LOOP(line, g.lines()) {
    const i64 base = g.base(line);
    auto off = [&](i64 k) { return base + ss::scan_pos(k, g.n, l.reverse) * g.inner; };
    for (i64 k = g.n - 1; k >= 0; --k) {
      const bool last = k == g.n - 1;
      s[off(k)] = ss::cumprod_grad_step<C>(l.exclusive, last, to<C>(gr[off(k)]),
                                           last ? C(0) : to<C>(gr[off(k + 1)]),
                                           last ? C(0) : to<C>(x[off(k + 1)]),
                                           last ? C(0) : s[off(k + 1)]);
    }
    C p = C(1);
    for (i64 k = 0; k < g.n; ++k) {
      out[off(k)] = to<T>(C(p * s[off(k)]));
      p = C(p * to<C>(x[off(k)]));
    }
  }
}

// ---- sort / topk ----
template <class T>
__global__ void sort_keys_kernel(const T* in, ss::AxisGeom g, bool desc, u64* keys, i64* pos) {
  SOMA_GRID_LOOP(e, g.lines() * g.n) {
    const i64 line = e / g.n, s = e % g.n;
    keys[e] = key_of(in[g.base(line) + s * g.inner], desc);
    pos[e] = s;
  }
}
__global__ void offsets_kernel(i64* offsets, i64 lines, i64 n) {
  SOMA_GRID_LOOP(r, lines + 1) { offsets[r] = r * n; }
}
template <class U>
__global__ void sort_write_kernel(const U* in, ss::AxisGeom g, i64 k, const i64* pos, U* values,
                                  i64* indices) {
  SOMA_GRID_LOOP(e, g.lines() * k) {
    const i64 line = e / k, j = e % k;
    const i64 p = pos[line * g.n + j];
    const i64 o = ss::base_with_len(g, line, k) + j * g.inner;
    values[o] = in[g.base(line) + p * g.inner];
    indices[o] = p;
  }
}

// ---- triu / tril, roll / flip, take_along_axis ----
template <class U>
__global__ void tri_kernel(TriLaunch l) {
  const U* in = static_cast<const U*>(l.in);
  U* out = static_cast<U*>(l.out);
  SOMA_GRID_LOOP(i, l.numel) {
    out[i] = ss::tri_keep(i, l.rows, l.cols, l.k, l.upper) ? in[i] : U(0);
  }
}
template <class U>
__global__ void move_kernel(MoveLaunch l) {
  const U* in = static_cast<const U*>(l.in);
  U* out = static_cast<U*>(l.out);
  SOMA_GRID_LOOP(i, l.geom.numel) { out[i] = in[ss::move_source(l.geom, i)]; }
}
template <class U>
__global__ void take_kernel(TakeLaunch l) {
  const U* data = static_cast<const U*>(l.data);
  U* out = static_cast<U*>(l.out);
  SOMA_GRID_LOOP(i, l.geom.count) {
    const i64 id = ss::normalize_element_index(id_at(l.ids, i), l.geom.n);
    if (id < 0) {
      atomicMin(l.ids.bad, static_cast<unsigned long long>(i));
      continue;
    }
    out[i] = data[ss::element_offset(l.geom, i, id)];
  }
}

// ---- scatter ----
__global__ void scatter_keys_kernel(ss::ElementGeom g, ElementIds ids, u64* keys, i64* pos) {
  SOMA_GRID_LOOP(j, g.count) {
    const i64 id = ss::normalize_element_index(id_at(ids, j), g.n);
    if (id < 0) atomicMin(ids.bad, static_cast<unsigned long long>(j));
    keys[j] = id < 0 ? 0 : u64(ss::element_offset(g, j, id));
    pos[j] = j;
  }
}
template <class T>
__global__ void scatter_apply_kernel(i64 count, const T* updates, T* out, const u64* keys,
                                     const i64* pos, ss::ScatterReduce r) {
  using C = compute_t<T>;
  SOMA_GRID_LOOP(slot, count) {
    if (slot > 0 && keys[slot - 1] == keys[slot]) continue;  // not the first of its run
    const u64 dest = keys[slot];
    C acc = to<C>(out[dest]);
    for (i64 s = slot; s < count && keys[s] == dest; ++s)
      acc = ss::scatter_combine<C>(r, acc, to<C>(updates[pos[s]]));
    out[dest] = to<T>(acc);
  }
}

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int key_bits(i64 n) {
  int b = 1;
  while (b < 64 && (u64(1) << b) < u64(n)) ++b;
  return b;
}

cudaError_t segmented_sort(void* temp, std::size_t& bytes, const u64* keys_in, u64* keys_out,
                           const i64* pos_in, i64* pos_out, i64 items, i64 lines,
                           const i64* offsets, cudaStream_t stream) {
  return cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, keys_in, keys_out, pos_in,
                                                   pos_out, items, lines, offsets, offsets + 1,
                                                   stream);
}

cudaError_t radix_sort(void* temp, std::size_t& bytes, const u64* keys_in, u64* keys_out,
                       const i64* pos_in, i64* pos_out, i64 k, int end_bit, cudaStream_t stream) {
  return cub::DeviceRadixSort::SortPairs(temp, bytes, keys_in, keys_out, pos_in, pos_out, int(k),
                                         0, end_bit, stream);
}

}  // namespace

cudaError_t launch_scan(const ScanLaunch& l, cudaStream_t stream) {
  if (l.geom.lines() * l.geom.n == 0) return cudaSuccess;
  return by_type(l.type, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      if (l.geom.lines() <= 2048 && l.geom.n >= 1024)
        scan_block_kernel<T><<<unsigned(l.geom.lines()), kThreads, 0, stream>>>(l);
      else
        scan_kernel<T><<<grid_for(l.geom.lines()), kThreads, 0, stream>>>(l);
      return cudaGetLastError();
    }
  });
}

cudaError_t launch_cumprod_grad(const CumprodGradLaunch& l, cudaStream_t stream) {
  if (l.geom.lines() * l.geom.n == 0) return cudaSuccess;
  return by_type(l.type, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      return cudaErrorInvalidValue;
    } else {
      cumprod_grad_kernel<T><<<grid_for(l.geom.lines()), kThreads, 0, stream>>>(l);
      return cudaGetLastError();
    }
  });
}

std::size_t sort_workspace_bytes(std::int64_t lines, std::int64_t n) {
  const i64 items = lines * n;
  std::size_t temp = 0;
  if (items > 0 && segmented_sort(nullptr, temp, nullptr, nullptr, nullptr, nullptr, items, lines,
                                  nullptr, nullptr) != cudaSuccess)
    return 0;
  const std::size_t kb = aligned(std::size_t(items) * 8);
  return 4 * kb + aligned(std::size_t(lines + 1) * 8) + aligned(temp);
}

cudaError_t launch_sort(const SortLaunch& l, cudaStream_t stream) {
  const ss::AxisGeom g = l.geom;
  const i64 items = g.lines() * g.n;
  if (g.lines() * l.k == 0) return cudaSuccess;
  char* ws = static_cast<char*>(l.workspace);
  const std::size_t kb = aligned(std::size_t(items) * 8);
  u64* keys_in = reinterpret_cast<u64*>(ws);
  u64* keys_out = reinterpret_cast<u64*>(ws + kb);
  i64* pos_in = reinterpret_cast<i64*>(ws + 2 * kb);
  i64* pos_out = reinterpret_cast<i64*>(ws + 3 * kb);
  i64* offsets = reinterpret_cast<i64*>(ws + 4 * kb);
  const std::size_t used = 4 * kb + aligned(std::size_t(g.lines() + 1) * 8);
  std::size_t temp_bytes = l.workspace_bytes - used;
  cudaError_t st = by_type(l.type, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    sort_keys_kernel<T><<<grid_for(items), kThreads, 0, stream>>>(static_cast<const T*>(l.in), g,
                                                                  l.descending, keys_in, pos_in);
    return cudaGetLastError();
  });
  if (st != cudaSuccess) return st;
  offsets_kernel<<<grid_for(g.lines() + 1), kThreads, 0, stream>>>(offsets, g.lines(), g.n);
  if ((st = cudaGetLastError()) != cudaSuccess) return st;
  st = segmented_sort(ws + used, temp_bytes, keys_in, keys_out, pos_in, pos_out, items, g.lines(),
                      offsets, stream);
  if (st != cudaSuccess) return st;
  int bytes = 4;
  switch (l.type) {
    case ElemType::f64: case ElemType::i64: bytes = 8; break;
    case ElemType::f16: case ElemType::bf16: bytes = 2; break;
    case ElemType::u8: case ElemType::boolean: bytes = 1; break;
    default: break;
  }
  return by_width(bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    sort_write_kernel<U><<<grid_for(g.lines() * l.k), kThreads, 0, stream>>>(
        static_cast<const U*>(l.in), g, l.k, pos_out, static_cast<U*>(l.values), l.indices);
    return cudaGetLastError();
  });
}

cudaError_t launch_tri(const TriLaunch& l, cudaStream_t stream) {
  if (l.numel == 0) return cudaSuccess;
  return by_width(l.elem_bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    tri_kernel<U><<<grid_for(l.numel), kThreads, 0, stream>>>(l);
    return cudaGetLastError();
  });
}

cudaError_t launch_move(const MoveLaunch& l, cudaStream_t stream) {
  if (l.geom.numel == 0) return cudaSuccess;
  return by_width(l.elem_bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    move_kernel<U><<<grid_for(l.geom.numel), kThreads, 0, stream>>>(l);
    return cudaGetLastError();
  });
}

cudaError_t launch_take_along_axis(const TakeLaunch& l, cudaStream_t stream) {
  if (l.geom.count == 0) return cudaSuccess;
  return by_width(l.elem_bytes, [&](auto tag) {
    using U = typename decltype(tag)::type;
    take_kernel<U><<<grid_for(l.geom.count), kThreads, 0, stream>>>(l);
    return cudaGetLastError();
  });
}

std::size_t scatter_workspace_bytes(std::int64_t count, std::int64_t data_numel) {
  std::size_t temp = 0;
  if (count > 0 && radix_sort(nullptr, temp, nullptr, nullptr, nullptr, nullptr, count,
                              key_bits(data_numel), nullptr) != cudaSuccess)
    return 0;
  return 4 * aligned(std::size_t(count) * 8) + aligned(temp);
}

cudaError_t launch_scatter(const ScatterLaunch& l, cudaStream_t stream) {
  const i64 k = l.geom.count;
  if (k == 0) return cudaSuccess;
  char* ws = static_cast<char*>(l.workspace);
  const std::size_t kb = aligned(std::size_t(k) * 8);
  u64* keys_in = reinterpret_cast<u64*>(ws);
  u64* keys_out = reinterpret_cast<u64*>(ws + kb);
  i64* pos_in = reinterpret_cast<i64*>(ws + 2 * kb);
  i64* pos_out = reinterpret_cast<i64*>(ws + 3 * kb);
  std::size_t temp_bytes = l.workspace_bytes - 4 * kb;
  scatter_keys_kernel<<<grid_for(k), kThreads, 0, stream>>>(l.geom, l.ids, keys_in, pos_in);
  cudaError_t st = cudaGetLastError();
  if (st != cudaSuccess) return st;
  st = radix_sort(ws + 4 * kb, temp_bytes, keys_in, keys_out, pos_in, pos_out, k,
                  key_bits(l.data_numel), stream);
  if (st != cudaSuccess) return st;
  return by_type(l.type, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    scatter_apply_kernel<T><<<grid_for(k), kThreads, 0, stream>>>(
        k, static_cast<const T*>(l.updates), static_cast<T*>(l.out), keys_out, pos_out, l.reduce);
    return cudaGetLastError();
  });
}

}  // namespace soma::cuda_detail
