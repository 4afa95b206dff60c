// The CUDA-graph decision of a training step (step_graph.hpp).
#include "model/step_graph.hpp"

#include <cstring>

namespace soma::model::capture {

const char* step_action_name(StepAction a) {
  switch (a) {
    case StepAction::kEager: return "eager";
    case StepAction::kCapture: return "capture";
    case StepAction::kReplay: return "replay";
  }
  return "?";
}

StepGraphPolicy::StepGraphPolicy(std::string why_not, Options options)
    : why_not_(std::move(why_not)), options_(options) {
  if (options_.warmup_steps < 1) options_.warmup_steps = 1;  // slots are made by the first step
}

StepAction StepGraphPolicy::next(const StepSignature& sig) {
  if (!why_not_.empty() || disabled_) {
    ++stats_.eager_steps;
    stats_.reason = why_not_;
    return StepAction::kEager;
  }
  if (!have_last_ || !(sig == last_)) {
    if (has_graph_) {
      // Shapes, dtypes, device or the optimiser's values changed: the graph would replay the old
      // ones. Drop it and warm up again with the new signature.
      ++stats_.invalidations;
      has_graph_ = false;
      dropped_ = true;
    }
    last_ = sig;
    have_last_ = true;
    same_steps_ = 0;
  }
  if (has_graph_) {
    ++stats_.replays;
    stats_.reason.clear();
    return StepAction::kReplay;
  }
  if (same_steps_ >= options_.warmup_steps) {
    stats_.reason = "capturing";
    return StepAction::kCapture;
  }
  ++same_steps_;
  ++stats_.eager_steps;
  stats_.reason = "warm-up (" + std::to_string(same_steps_) + " of " +
                  std::to_string(options_.warmup_steps) + " steps with these shapes)";
  return StepAction::kEager;
}

void StepGraphPolicy::captured(bool ok, const std::string& why) {
  if (ok) {
    ++stats_.captures;
    has_graph_ = true;
    stats_.reason.clear();
    return;
  }
  // The capture step ran eagerly under the capture or failed before any work; no retry: a step
  // that cannot be captured once (a host read, an allocation the pool refused) will not be later.
  ++stats_.eager_steps;
  disabled_ = true;
  why_not_ = "capture failed: " + why;
  stats_.reason = why_not_;
}

std::uint64_t hash_values(const std::vector<double>& values) {
  std::uint64_t h = 1469598103934665603ull;
  for (double v : values) {
    unsigned char b[sizeof(double)];
    std::memcpy(b, &v, sizeof v);
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

}  // namespace soma::model::capture
