#pragma once
// Internal: the intra-op thread pool (OpenMP) and strided iteration helpers for CPU kernels.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "soma/shape.hpp"

namespace soma::detail {

// ---- How many threads an op gets: the one grain rule -------------------------------------------
// An op gets one thread per `grain` units of its work, at most get_num_threads(): every thread
// has at least a grain to do, so below two grains only the calling thread runs. Every CPU loop
// (parallel_for) and every library call that threads itself (OpenBLAS/oneDNN GEMMs, through
// BlasThreads) takes its thread count from threads_for. Grains, in units of work:
// - kParallelGrain: elements of a light loop (an add ~0.1 ns each, an Adam update ~0.3 ns).
// - kGemmGrain: multiply-adds of one GEMM (a BLAS/oneDNN call, or a batch of small products).
// Measured in the workload, not per op (issue 27; docs/performance.md, "Threads per op"): on
// the 2-core AMD EPYC (AVX-512) build machine, run as SCHED_FIFO so that the second core is
// free, MLP 784-128-128-10 training at 2 threads ran at 0.82x of 1 thread with grains of 32768
// elements / 1M multiply-adds (its 3.2M-MAC GEMMs and the 100k-element Adam update threaded;
// each is 1.6-1.8x faster alone, min over reps, but slower inside the step: the second thread
// works on data that is hot in the first one's cache, and wakes up for a region every ~100 us),
// 0.93x with only the GEMMs serial, 0.97-1.00x with both serial. At batch 128 the 12.8M-MAC
// GEMMs on 2 threads gave 1.13-1.16x, the 2.1M-MAC ones lost. So a thread is worth it from
// about 70 us of work of its own: 4M multiply-adds, 256k light elements.
inline constexpr std::int64_t kParallelGrain = std::int64_t(1) << 18;
inline constexpr std::int64_t kGemmGrain = std::int64_t(1) << 22;

// Threads for `work` units at `grain` units per thread: 1 below two grains, inside a parallel
// region, or at set_num_threads(1).
inline int threads_for(std::int64_t work, std::int64_t grain) {
  grain = std::max<std::int64_t>(grain, 1);
  if (work / 2 < grain) return 1;
  const int max_threads = omp_get_max_threads();
  if (max_threads == 1 || omp_in_parallel()) return 1;
  return int(std::min<std::int64_t>(max_threads, work / grain));
}

// Splits [0, n) into one contiguous chunk per thread and calls f(begin, end) for each; the
// thread count is threads_for(n, grain) (grain: items per thread).
template <class F>
void parallel_for(std::int64_t n, std::int64_t grain, F&& f) {
  if (n <= 0) return;
  const int nt = threads_for(n, grain);
  if (nt == 1) {
    f(std::int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    std::int64_t t = omp_get_thread_num();
    std::int64_t chunk = (n + nt - 1) / nt;
    std::int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  }
}

// The thread count a library that threads itself (OpenBLAS's OpenMP build, oneDNN: both read
// omp_get_max_threads() of the calling thread) uses for the calls inside this scope: lowered to
// `threads` (per thread: other threads are unaffected), never raised.
class BlasThreads {
 public:
  explicit BlasThreads(int threads) : saved_(omp_get_max_threads()) {
    if (threads < saved_) omp_set_num_threads(std::max(threads, 1));
    else saved_ = 0;
  }
  ~BlasThreads() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int saved_;
};

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
