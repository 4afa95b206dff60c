#pragma once
// Internal: the launchers of index_kernels.cu (concat, pad, gather, gather_grad, one_hot,
// argmax/argmin, all/any, the random ops), called by index_ops.cpp. Plain structs only, as
// launch.hpp: nvcc compiles no soma header. Every launcher queues work on `stream` and returns
// the launch status. Element types of pure data movement are given by their width in bytes.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/index_math.hpp"
#include "backend/cuda/launch.hpp"

namespace soma::cuda_detail {

// out (packed) = the window of a concat; src[p]: part p, packed.
struct ConcatLaunch {
  cuda_index::ConcatGeom geom;
  const void* src[cuda_index::kMaxConcatParts] = {};
  void* out = nullptr;
  int elem_bytes = 4;
};
cudaError_t launch_concat(const ConcatLaunch& l, cudaStream_t stream);

// out (packed) = pad(in) with `value_bits` (the value in the dtype, as its bytes) outside.
struct PadLaunch {
  cuda_index::PadGeom geom;
  const void* in = nullptr;
  void* out = nullptr;
  int elem_bytes = 4;
  std::uint64_t value_bits = 0;
};
cudaError_t launch_pad(const PadLaunch& l, cudaStream_t stream);

// Indices of gather, gather_grad and one_hot: k packed i32 or i64 values. An index outside
// [-n, n) makes the launch record the lowest such position in *bad (set it to ~0 before): the
// host reads it back and reports the index.
struct Indices {
  const void* data = nullptr;
  bool i64 = true;
};

// Only checks k indices against [-n, n) (for a launch with nothing to write).
cudaError_t launch_check_indices(const Indices& ids, std::int64_t k, std::int64_t n,
                                 unsigned long long* bad, cudaStream_t stream);

// out (packed) = gather(src, ids) over geom; src packed.
struct GatherLaunch {
  cuda_index::GatherGeom geom;
  const void* src = nullptr;
  void* out = nullptr;
  Indices ids;
  int elem_bytes = 4;
  unsigned long long* bad = nullptr;
};
cudaError_t launch_gather(const GatherLaunch& l, cudaStream_t stream);

// out (packed, zeroed by the launcher) = gather_grad(g, ids) over geom; g packed. Types f32,
// f64, f16, bf16, i32, i64, u8. Needs a device workspace of gather_grad_workspace_bytes(k).
struct GatherGradLaunch {
  cuda_index::GatherGeom geom;
  const void* grad = nullptr;
  void* out = nullptr;
  ElemType type = ElemType::f32;
  Indices ids;
  unsigned long long* bad = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
std::size_t gather_grad_workspace_bytes(std::int64_t k, std::int64_t n);
cudaError_t launch_gather_grad(const GatherGradLaunch& l, cudaStream_t stream);

// out (packed, rows * depth elements) = one_hot(ids) with on/off values as the dtype's bytes.
struct OneHotLaunch {
  Indices ids;
  std::int64_t rows = 0, depth = 0;
  void* out = nullptr;
  int elem_bytes = 4;
  std::uint64_t on_bits = 0, off_bits = 0;
};
cudaError_t launch_one_hot(const OneHotLaunch& l, cudaStream_t stream);

// argmax (max) / argmin over the single reduced dim of `space` (red_rank 1); out i64. Any type.
cudaError_t launch_arg_reduce(bool max, const void* in, ElemType type, std::int64_t* out,
                              const ReduceSpace& space, cudaStream_t stream);
// all (all) / any over the reduced dims of `space`; bool in and out.
cudaError_t launch_bool_reduce(bool all, const bool* in, bool* out, const ReduceSpace& space,
                               cudaStream_t stream);

// The random ops (philox.hpp): out packed, numel elements of `type`, from (seed, stream).
enum class RandomKind : int { uniform, normal, truncated_normal };
struct RandomLaunch {
  RandomKind kind = RandomKind::uniform;
  void* out = nullptr;
  ElemType type = ElemType::f32;
  std::int64_t numel = 0;
  std::uint64_t seed = 0, stream = 0;
  double a = 0.0, b = 1.0;  // uniform: minval, maxval; normal: mean, stddev
  double top = 0.0;         // uniform, floating: the largest value of the type below maxval
  std::uint64_t int_lo = 0, int_range = 0;  // uniform, i32/i64: [lo, lo + range), 0: all 2^64
};
cudaError_t launch_random(const RandomLaunch& l, cudaStream_t stream);

}  // namespace soma::cuda_detail
