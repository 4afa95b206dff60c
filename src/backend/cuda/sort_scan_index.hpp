#pragma once
// Per-element index math of the sort, scan and element-index ops (cumsum, cumprod, sort, topk,
// triu/tril, roll/flip, take_along_axis, scatter): host/device functions over plain geometry
// structs. The CPU kernels (src/backend/cpu/sort_scan.cpp) and the CUDA kernels
// (sort_scan.cu) both call them, and tests/unit/test_sort_scan_ops.cpp runs them over whole
// index spaces on the CPU, so the GPU adds only the launch.
//
// Compiled by nvcc (C++17) and g++/clang (C++20): it includes no soma header.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SOMA_HD __host__ __device__
#else
#define SOMA_HD
#endif

namespace soma::sort_scan {

using i64 = std::int64_t;
using u64 = std::uint64_t;

inline constexpr int kMaxDims = 8;

// ---- lines along one axis: a packed tensor seen as [outer, n, inner] ----
// Line l (0 <= l < outer * inner) holds the n elements base(l) + s * inner, s = 0 .. n-1.
struct AxisGeom {
  i64 outer = 1, n = 0, inner = 1;
  SOMA_HD i64 lines() const { return outer * inner; }
  SOMA_HD i64 base(i64 line) const { return (line / inner) * n * inner + line % inner; }
};
// The same line in a tensor whose axis has length m instead of n (topk's output: m = k).
SOMA_HD inline i64 base_with_len(const AxisGeom& g, i64 line, i64 m) {
  return (line / g.inner) * m * g.inner + line % g.inner;
}
// Step s of a scan visits position pos(s): forwards, or from the end for `reverse`.
SOMA_HD inline i64 scan_pos(i64 s, i64 n, bool reverse) { return reverse ? n - 1 - s : s; }

// ---- sort keys: one unsigned order for every dtype ----
// Ascending order of the key is ascending order of the value, NaN after +inf (NumPy; PyTorch
// treats NaN as the largest value too), -0 equal to +0. Descending: the complement, so NaN comes
// first. A stable sort of the keys is then the op's order on every device.
SOMA_HD inline u64 float_key(double v, bool descending) {
  u64 bits;
  if (v != v) {
    bits = 0x7ff8000000000000ull;  // one NaN for all
  } else {
    if (v == 0.0) v = 0.0;  // -0 -> +0
#if defined(__CUDA_ARCH__)
    bits = static_cast<u64>(__double_as_longlong(v));
#else
    std::memcpy(&bits, &v, sizeof bits);
#endif
  }
  const u64 key = (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
  return descending ? ~key : key;
}
SOMA_HD inline u64 int_key(i64 v, bool descending) {
  const u64 key = static_cast<u64>(v) ^ 0x8000000000000000ull;
  return descending ? ~key : key;
}

// ---- triu / tril over the last two axes (rows x cols) of a packed tensor ----
SOMA_HD inline bool tri_keep(i64 i, i64 rows, i64 cols, i64 k, bool upper) {
  const i64 c = i % cols, r = (i / cols) % rows;
  return upper ? c - r >= k : c - r <= k;
}

// ---- roll / flip: out[c] = in[source(c)] ----
// Per axis: flip reverses it, then shift moves element j to (j + shift) mod n.
struct MoveGeom {
  int rank = 0;
  i64 numel = 0;
  i64 shape[kMaxDims] = {};
  i64 in_stride[kMaxDims] = {};  // the input's strides (it may be strided)
  i64 shift[kMaxDims] = {};      // in [0, n)
  bool flip[kMaxDims] = {};
};
// The input offset of packed output element i.
SOMA_HD inline i64 move_source(const MoveGeom& g, i64 i) {
  i64 off = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const i64 n = g.shape[d];
    const i64 c = i % n;
    i /= n;
    i64 s = c - g.shift[d];
    if (s < 0) s += n;
    if (g.flip[d]) s = n - 1 - s;
    off += s * g.in_stride[d];
  }
  return off;
}

// ---- take_along_axis / scatter: index tensor `ids` (packed, rank r) addresses a packed data
// tensor of the same rank, replacing the axis coordinate by ids[i] ----
struct ElementGeom {
  int rank = 0;
  int axis = 0;
  i64 count = 0;                  // elements of ids (and of the updates / output)
  i64 n = 0;                      // the data's length along the axis
  i64 ids_shape[kMaxDims] = {};
  i64 data_stride[kMaxDims] = {};  // packed strides of the data tensor
};
// An index in [-n, n) counted from the end when negative; -1 for one out of range.
SOMA_HD inline i64 normalize_element_index(i64 j, i64 n) {
  if (j < -n || j >= n) return -1;
  return j < 0 ? j + n : j;
}
// The data offset that ids element i addresses, with its (normalised) index `id`.
SOMA_HD inline i64 element_offset(const ElementGeom& g, i64 i, i64 id) {
  i64 off = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const i64 c = i % g.ids_shape[d];
    i /= g.ids_shape[d];
    off += (d == g.axis ? id : c) * g.data_stride[d];
  }
  return off;
}

// ---- scatter reductions: how an update combines with the value there ----
enum class ScatterReduce : int { none, add, mul, max, min };
template <class C>
SOMA_HD inline C scatter_combine(ScatterReduce r, C old, C u) {
  switch (r) {
    case ScatterReduce::none: return u;
    case ScatterReduce::add: return old + u;
    case ScatterReduce::mul: return old * u;
    // NaN wins, as in max/min elsewhere in soma
    case ScatterReduce::max: return (u != u || u > old) ? u : old;
    case ScatterReduce::min: return (u != u || u < old) ? u : old;
  }
  return u;
}

// ---- cumprod's gradient along one line, without division (exact with zeros) ----
// y_i = prod_{j<=i} x_j (inclusive) or prod_{j<i} x_j (exclusive), indices in scan order. Then
//   dx_k = P_k * S_k,  P_k = prod_{j<k} x_j,
//   inclusive: S_k = g_k + x_{k+1} S_{k+1}      (S_{n-1} = g_{n-1}),
//   exclusive: S_k = g_{k+1} + x_{k+1} S_{k+1}  (S_{n-1} = 0).
// Kernels run S backwards (this step), then P forwards: two passes, O(n), no division.
template <class C>
SOMA_HD inline C cumprod_grad_step(bool exclusive, bool last, C g_k, C g_next, C x_next,
                                   C s_next) {
  if (last) return exclusive ? C(0) : g_k;
  return (exclusive ? g_next : g_k) + x_next * s_next;
}

}  // namespace soma::sort_scan
