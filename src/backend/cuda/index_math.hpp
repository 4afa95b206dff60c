#pragma once
// Per-element index math of the CUDA index ops (index_kernels.cu): for one output element, where
// its value comes from. Host/device functions over plain geometry structs, so that the CPU tests
// (tests/unit/test_cuda_index_math.cpp) run them over every output index and compare with the
// CPU kernels; the GPU then only adds the launch. Outputs are packed (row-major); sources are
// packed unless a geometry carries strides.
//
// Compiled by nvcc (C++17) and g++/clang (C++20): it includes no soma header.
#include <cstdint>

#if defined(__CUDACC__)
#define SOMA_HD __host__ __device__
#else
#define SOMA_HD
#endif

namespace soma::cuda_index {

using i64 = std::int64_t;

inline constexpr int kMaxDims = 8;
// Inputs of one concat launch; a concat of more inputs takes several launches.
inline constexpr int kMaxConcatParts = 16;

// ---- concat: the output seen as [outer, total, inner] (total: the concat axis) ----
// One launch writes the axis window [axis_begin, axis_end) from `parts` packed inputs; part p
// covers [begin[p], begin[p + 1]) of the axis (begin[0] == axis_begin, begin[parts] == axis_end).
struct ConcatGeom {
  i64 outer = 1, total = 0, inner = 1;
  i64 axis_begin = 0, axis_end = 0;
  int parts = 0;
  i64 begin[kMaxConcatParts + 1] = {};
  // Elements this launch writes.
  SOMA_HD i64 count() const { return outer * (axis_end - axis_begin) * inner; }
};
// Element i of the launch: its offset in the output, its part and its offset in that part.
struct ConcatSource {
  i64 out = 0;
  int part = 0;
  i64 src = 0;
};
SOMA_HD inline ConcatSource concat_source(const ConcatGeom& g, i64 i) {
  const i64 span = g.axis_end - g.axis_begin;
  const i64 in_idx = i % g.inner;
  const i64 t = i / g.inner;
  const i64 a = g.axis_begin + t % span;
  const i64 o = t / span;
  int p = 0;
  while (p + 1 < g.parts && a >= g.begin[p + 1]) ++p;  // few parts: a scan beats a search
  const i64 len = g.begin[p + 1] - g.begin[p];
  ConcatSource s;
  s.out = (o * g.total + a) * g.inner + in_idx;
  s.part = p;
  s.src = (o * len + (a - g.begin[p])) * g.inner + in_idx;
  return s;
}

// ---- pad (constant): out[c] = in[c - before] inside the input, else the value ----
struct PadGeom {
  int rank = 0;
  i64 out_shape[kMaxDims] = {};
  i64 in_shape[kMaxDims] = {};
  i64 in_stride[kMaxDims] = {};  // the input may be any view
  i64 before[kMaxDims] = {};
  i64 numel = 0;  // of the output
};
// True when output element i lies inside the input; *src is then its element offset there.
SOMA_HD inline bool pad_source(const PadGeom& g, i64 i, i64* src) {
  i64 off = 0;
  bool inside = true;
  for (int d = g.rank - 1; d >= 0; --d) {
    const i64 c = i % g.out_shape[d] - g.before[d];
    i /= g.out_shape[d];
    inside = inside && c >= 0 && c < g.in_shape[d];
    off += c * g.in_stride[d];
  }
  *src = off;
  return inside;
}

// ---- indices: negative ones count from the end (Python); out of range is an error ----
// The index in [0, n), or -1 when j is outside [-n, n).
SOMA_HD inline i64 normalize_index(i64 j, i64 n) {
  if (j < -n || j >= n) return -1;
  return j < 0 ? j + n : j;
}

// ---- gather: out[o, k, i] = t[o, ids[k], i] over t seen as [outer, n, inner] ----
struct GatherGeom {
  i64 outer = 1, n = 0, k = 0, inner = 1;
  SOMA_HD i64 count() const { return outer * k * inner; }
};
// Output element i reads index number `which` ...
SOMA_HD inline i64 gather_which(const GatherGeom& g, i64 i) { return (i / g.inner) % g.k; }
// ... and, with that index normalised to id, this source element.
SOMA_HD inline i64 gather_source(const GatherGeom& g, i64 i, i64 id) {
  const i64 o = i / (g.k * g.inner);
  return (o * g.n + id) * g.inner + i % g.inner;
}

// ---- gather_grad: out = zeros [outer, n, inner]; out[o, ids[j], i] += g[o, j, i] ----
// Deterministic: the k indices are sorted stably with their positions (CUB radix sort), so the
// positions of each distinct index form a run in their original order; one thread per
// (o, run start, i) adds the run's gradients in that order, in the dtype's precision like the CPU
// kernel (which walks j in order), so the sums match it bit for bit. `sorted_ids` and `pos` are
// the sorted keys and positions; element e of the launch space [outer, k, inner] is a run start
// when its sorted slot is the first of its run.
SOMA_HD inline bool gather_grad_run_start(const std::uint64_t* sorted_ids, i64 slot) {
  return slot == 0 || sorted_ids[slot] != sorted_ids[slot - 1];
}
// The destination of the run starting at `slot` for launch element e, and the source offset of
// the gradient at sorted slot s (same o and i).
SOMA_HD inline i64 gather_grad_dest(const GatherGeom& g, i64 e, std::uint64_t id) {
  const i64 o = e / (g.k * g.inner);
  return (o * g.n + i64(id)) * g.inner + e % g.inner;
}
SOMA_HD inline i64 gather_grad_src(const GatherGeom& g, i64 e, i64 position) {
  const i64 o = e / (g.k * g.inner);
  return (o * g.k + position) * g.inner + e % g.inner;
}

// ---- one_hot: out[r, j] = (ids[r] == j) ? on : off over [rows, depth] ----
// Indices outside [0, depth) give a row of off values (TensorFlow's rule).
SOMA_HD inline bool one_hot_on(i64 i, i64 depth, i64 id) { return id >= 0 && id < depth && i % depth == id; }
SOMA_HD inline i64 one_hot_row(i64 i, i64 depth) { return i / depth; }

// ---- argmax / argmin: the first extreme element wins; a NaN counts as the extreme ----
// Whether candidate (v, i) beats the current best (b, bi) for a reduction that combines partial
// results in any order (the CPU scans in order, where "earlier" is implicit): ties and two NaNs
// go to the lower index, so any tree of combines gives the CPU's answer.
template <bool Max, class C>
SOMA_HD inline bool arg_better(C v, i64 i, C b, i64 bi) {
  const bool v_nan = v != v, b_nan = b != b;
  if (v_nan || b_nan) return v_nan && (!b_nan || i < bi);
  if (Max ? v > b : v < b) return true;
  return v == b && i < bi;
}

}  // namespace soma::cuda_index
