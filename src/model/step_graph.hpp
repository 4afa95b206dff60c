#pragma once
// Internal: when a training step may be replayed as a CUDA graph (FitOptions::cuda_graph,
// docs/cuda.md "CUDA graphs"). The decision alone, as plain data, so that it is tested on the
// CPU (tests/unit/test_step_graph.cpp); the capture itself is the device backend's
// (DeviceBackend::begin_capture ..., src/backend/cuda/runtime.cpp).
//
// A captured graph replays the kernels of one step with the addresses, shapes and op attributes
// they had when it was captured. So:
//   - warm-up: the first `warmup_steps` steps with one signature run eagerly (they build the
//     layers, the optimiser's slots and fill the caching allocator; a step that allocates new
//     state must not be captured);
//   - capture: the next step with the same signature is captured (and run by the capture);
//   - replay: later steps with that signature launch the graph;
//   - invalidation: a step with another signature (batch shapes or dtypes, the device, or the
//     optimiser's state: its learning rate, slot count, iterations-dependent scalars) drops the
//     graph and warms up again; a failed capture turns capture off for the rest of the fit.
#include <cstdint>
#include <string>
#include <vector>

#include "soma/model/model.hpp"
#include "soma/tensor.hpp"

namespace soma::model::capture {

// What a captured step is valid for.
struct StepSignature {
  std::vector<Shape> shapes;  // of every batch tensor (x, y, sample weights)
  std::vector<DType> dtypes;
  Device device = Device::cpu();
  // Anything the optimiser's update kernels take as a value (baked into the graph): a hash of
  // the learning rate, the per-step scalars and the slot layout. Equal keys: same update.
  std::uint64_t optimizer_key = 0;
  bool operator==(const StepSignature&) const = default;
};

enum class StepAction { kEager, kCapture, kReplay };
const char* step_action_name(StepAction a);

class StepGraphPolicy {
 public:
  struct Options {
    int warmup_steps = 3;
  };
  // `why_not`: empty when the backend can capture; else the reason every step runs eagerly.
  explicit StepGraphPolicy(std::string why_not, Options options);
  explicit StepGraphPolicy(std::string why_not) : StepGraphPolicy(std::move(why_not), Options{}) {}

  // The action for the next step with signature `sig` (counts it in the statistics).
  StepAction next(const StepSignature& sig);
  // After a kCapture step: whether a graph came out (false: `why`, and capture stays off).
  void captured(bool ok, const std::string& why = {});
  bool has_graph() const { return has_graph_; }
  // Set when the graph held so far is to be dropped (by next(), on a new signature).
  bool take_dropped() {
    const bool d = dropped_;
    dropped_ = false;
    return d;
  }
  const StepGraphStats& stats() const { return stats_; }

 private:
  std::string why_not_;
  Options options_;
  StepSignature last_;
  bool have_last_ = false;
  int same_steps_ = 0;  // eager steps in a row with `last_`
  bool has_graph_ = false;
  bool dropped_ = false;
  bool disabled_ = false;
  StepGraphStats stats_;
};

// optimizer_key's parts, hashed (FNV-1a over the bytes).
std::uint64_t hash_values(const std::vector<double>& values);

}  // namespace soma::model::capture
