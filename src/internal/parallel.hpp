#pragma once
// Internal: the intra-op thread pool (OpenMP) and strided iteration helpers for CPU kernels.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "soma/shape.hpp"

namespace soma::detail {

// Elements below which a loop stays on one thread (thread start-up costs more than it saves).
inline constexpr std::int64_t kParallelGrain = 32768;

// Splits [0, n) into one contiguous chunk per thread and calls f(begin, end) for each.
template <class F>
void parallel_for(std::int64_t n, std::int64_t grain, F&& f) {
  if (n <= 0) return;
  int max_threads = omp_get_max_threads();
  if (n <= grain || max_threads == 1 || omp_in_parallel()) {
    f(std::int64_t(0), n);
    return;
  }
  int nt = int(std::min<std::int64_t>(max_threads, (n + grain - 1) / grain));
#pragma omp parallel num_threads(nt)
  {
    std::int64_t t = omp_get_thread_num();
    std::int64_t chunk = (n + nt - 1) / nt;
    std::int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  }
}

// Strides of a tensor of shape `in` broadcast up to `out` (0 along stretched/missing dims).
inline Strides broadcast_strides(const Shape& in, const Strides& in_strides, const Shape& out) {
  Strides s(out.size(), 0);
  std::size_t lead = out.size() - in.size();
  for (std::size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : in_strides[i];
  return s;
}

// Visits every element of `shape` in row-major order, one innermost row at a time:
// row(offsets, n, inner) with offsets[k] the element offset of operand k at the row's start and
// inner[k] its stride along the last axis. Rows are split across threads.
template <std::size_t N, class Row>
void for_each_row(const Shape& shape, const std::array<const Strides*, N>& strides,
                  const std::array<std::int64_t, N>& base, Row&& row) {
  const std::size_t rank = shape.size();
  std::int64_t total = numel(shape);
  if (total == 0) return;
  if (rank == 0) {
    std::array<std::int64_t, N> inner{};
    row(base, std::int64_t(1), inner);
    return;
  }
  const std::int64_t inner_n = shape[rank - 1];
  std::array<std::int64_t, N> inner;
  for (std::size_t k = 0; k < N; ++k) inner[k] = (*strides[k])[rank - 1];
  const std::int64_t rows = total / inner_n;
  std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(inner_n, 1));
  parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    // Multi-index of row r0 over the leading dims, then an odometer.
    std::array<std::int64_t, 16> idx_small{};
    std::vector<std::int64_t> idx_big;
    std::int64_t* idx = idx_small.data();
    if (rank > 16) {
      idx_big.assign(rank, 0);
      idx = idx_big.data();
    }
    std::array<std::int64_t, N> off = base;
    std::int64_t r = r0;
    for (std::size_t d = rank - 1; d-- > 0;) {
      idx[d] = r % shape[d];
      r /= shape[d];
      for (std::size_t k = 0; k < N; ++k) off[k] += idx[d] * (*strides[k])[d];
    }
    for (std::int64_t rr = r0; rr < r1; ++rr) {
      row(off, inner_n, inner);
      for (std::size_t d = rank - 1; d-- > 0;) {
        if (++idx[d] < shape[d]) {
          for (std::size_t k = 0; k < N; ++k) off[k] += (*strides[k])[d];
          break;
        }
        for (std::size_t k = 0; k < N; ++k) off[k] -= (shape[d] - 1) * (*strides[k])[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace soma::detail
