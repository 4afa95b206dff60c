#pragma once
// Internal: the launchers of sort_scan.cu (cumsum, cumprod, cumprod_grad, sort/topk, triu/tril,
// roll/flip, take_along_axis, scatter), called by sort_scan_ops.cpp. Plain structs only: nvcc
// compiles no soma header. The per-element math is sort_scan_index.hpp's, which the CPU kernels
// run too. Inputs and outputs are packed unless a struct says otherwise.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/launch.hpp"
#include "backend/cuda/sort_scan_index.hpp"

namespace soma::cuda_detail {

// cumsum / cumprod: one thread per line (a sequential scan, as the CPU).
struct ScanLaunch {
  sort_scan::AxisGeom geom;
  const void* in = nullptr;
  void* out = nullptr;
  ElemType type = ElemType::f32;
  bool prod = false, exclusive = false, reverse = false;
};
cudaError_t launch_scan(const ScanLaunch& l, cudaStream_t stream);

// cumprod_grad(x, g): one thread per line; a workspace of 8 bytes per element.
struct CumprodGradLaunch {
  sort_scan::AxisGeom geom;
  const void* x = nullptr;
  const void* g = nullptr;
  void* out = nullptr;
  void* workspace = nullptr;
  ElemType type = ElemType::f32;
  bool exclusive = false, reverse = false;
};
cudaError_t launch_cumprod_grad(const CumprodGradLaunch& l, cudaStream_t stream);

// sort / topk: the first k of each line in key order (a CUB stable segmented sort of
// sort_scan::*_key), values in `type` and i64 positions along the axis.
struct SortLaunch {
  sort_scan::AxisGeom geom;
  std::int64_t k = 0;
  const void* in = nullptr;
  void* values = nullptr;
  std::int64_t* indices = nullptr;
  ElemType type = ElemType::f32;
  bool descending = false;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
std::size_t sort_workspace_bytes(std::int64_t lines, std::int64_t n);
cudaError_t launch_sort(const SortLaunch& l, cudaStream_t stream);

// triu (upper) / tril over the last two axes.
struct TriLaunch {
  const void* in = nullptr;
  void* out = nullptr;
  std::int64_t numel = 0, rows = 0, cols = 0, k = 0;
  bool upper = true;
  int elem_bytes = 4;
};
cudaError_t launch_tri(const TriLaunch& l, cudaStream_t stream);

// roll / flip: out (packed) from `in` read through geom's strides (in: the first element).
struct MoveLaunch {
  sort_scan::MoveGeom geom;
  const void* in = nullptr;
  void* out = nullptr;
  int elem_bytes = 4;
};
cudaError_t launch_move(const MoveLaunch& l, cudaStream_t stream);

// Indices (i32 or i64, packed); a bad one records its lowest position in *bad (~0: none).
struct ElementIds {
  const void* data = nullptr;
  bool i64 = true;
  unsigned long long* bad = nullptr;
};
// take_along_axis: out[i] = data[element_offset(i, ids[i])].
struct TakeLaunch {
  sort_scan::ElementGeom geom;
  const void* data = nullptr;
  void* out = nullptr;
  ElementIds ids;
  int elem_bytes = 4;
};
cudaError_t launch_take_along_axis(const TakeLaunch& l, cudaStream_t stream);

// scatter: out (already holding the data) combined with the updates in their row-major order
// per destination (a stable CUB radix sort of the destinations), as the CPU.
struct ScatterLaunch {
  sort_scan::ElementGeom geom;
  std::int64_t data_numel = 0;
  const void* updates = nullptr;
  void* out = nullptr;
  ElementIds ids;
  ElemType type = ElemType::f32;
  sort_scan::ScatterReduce reduce = sort_scan::ScatterReduce::none;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
std::size_t scatter_workspace_bytes(std::int64_t count, std::int64_t data_numel);
cudaError_t launch_scatter(const ScatterLaunch& l, cudaStream_t stream);

}  // namespace soma::cuda_detail
