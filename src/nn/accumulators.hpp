#pragma once
// Internal: in-place device sums for FitOptions::cuda_graph (docs/cuda.md, "CUDA graphs").
// Without it, the loss trackers (model.cpp) and the metrics (metrics.cpp) keep their device sums
// as new tensors each step (sum = sum + part); a captured graph would then add, at every replay,
// into the tensors that existed when it was captured. While a PersistentAccumulatorScope is open
// on the thread, those sums (and the metrics' sample counts) live in tensors that persist: each
// step adds into them in place, reading them zeroes them in place, and resetting zeroes them
// (never drops them), so a replay adds into the tensors the logs are read from. The values are
// those of the new-tensor sums (0 + a + b ... = a + b ...).
#include "soma/tensor.hpp"

namespace soma::detail {

bool persistent_accumulators();

class PersistentAccumulatorScope {
 public:
  explicit PersistentAccumulatorScope(bool on);
  ~PersistentAccumulatorScope();
  PersistentAccumulatorScope(const PersistentAccumulatorScope&) = delete;
  PersistentAccumulatorScope& operator=(const PersistentAccumulatorScope&) = delete;

 private:
  bool was_;
};

// acc += v in place (acc: f64, v's shape, on v's device; made as zeros when undefined).
void add_in_place(Tensor& acc, const Tensor& v);
// Reads a device sum and zeroes it in place (persistent) or drops it; 0-d or 1-d.
std::vector<double> take_device_sum(Tensor& acc);

}  // namespace soma::detail
