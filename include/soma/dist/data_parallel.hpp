#pragma once
// Data parallelism: every rank holds the whole model, runs its share of each global batch and
// averages the gradients with all-reduce before the optimiser step, so that all ranks take the
// same step as one process on the whole batch would.
//
// GradientReducer groups the gradients into buckets of about `bucket_bytes`, in reverse order
// of the parameters (the order in which the backward pass finishes them), and starts a
// non-blocking all-reduce for a bucket as soon as the tape reports its last gradient final
// (GradientTape::set_gradient_ready_hook), so communication overlaps the rest of the backward
// pass. Buckets start in the same order on every rank, as collectives must.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "soma/dist/communicator.hpp"
#include "soma/tensor.hpp"
#include "soma/variable.hpp"

namespace soma::dist {

struct ReducerOptions {
  std::int64_t bucket_bytes = 1 << 20;  // 1 MiB; one bucket per parameter with 0
  // false: wait for the whole backward pass, then reduce the buckets with blocking all-reduces
  // (no overlap, but MPI's blocking collectives are faster than its non-blocking ones).
  bool overlap = true;
};

struct ReducerStats {
  std::int64_t buckets = 0;
  // Buckets of the last step whose all-reduce started before the backward pass ended.
  std::int64_t started_during_backward = 0;
  // Gradients of the last step not yet reported when its first bucket started: > 0 means that
  // communication overlapped the backward pass.
  std::int64_t gradients_pending_at_first_start = 0;
};

class GradientReducer {
 public:
  GradientReducer(CommunicatorRef comm, std::vector<Variable> params, ReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Starts a step. Each rank's gradients are scaled by `weight` before they are summed: with
  // weight = local samples / global samples, the sum is the gradient of the mean loss over the
  // global batch, also when the ranks' shares differ.
  void begin_step(double weight);
  // The gradient of parameter `index` (position in `params`) is final; undefined: none.
  void gradient_ready(std::size_t index, const Tensor& grad);
  // Waits for every bucket; returns the reduced gradients in parameter order (undefined where
  // this rank had none).
  std::vector<Tensor> finish_step();

  // For GradientTape::set_gradient_ready_hook.
  std::function<void(std::size_t, const Tensor&)> hook();

  const ReducerStats& stats() const { return stats_; }
  std::size_t num_buckets() const;

 private:
  struct Bucket;
  void launch_ready_buckets();

  CommunicatorRef comm_;
  std::vector<Variable> params_;
  ReducerOptions options_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::size_t> bucket_of_, slot_of_;  // per parameter
  std::vector<bool> has_grad_, reported_;
  std::size_t next_launch_ = 0, reported_count_ = 0;
  double weight_ = 1.0;
  bool in_step_ = false;
  ReducerStats stats_;
};

// Copies rank 0's values of every tensor into the other ranks' (initial weights).
void broadcast_parameters(Communicator& comm, const std::vector<Tensor>& tensors, int root = 0);

// The mean of each value over the ranks, each rank's values weighted by its `weight` (e.g. its
// number of samples); keys must be the same on every rank.
std::map<std::string, double> average_over_ranks(Communicator& comm,
                                                 const std::map<std::string, double>& values,
                                                 double weight);

// Rows [begin, end) of a global batch of n rows that rank `rank` of `size` takes: contiguous,
// sizes differing by at most one.
std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t n, int rank, int size);

}  // namespace soma::dist
