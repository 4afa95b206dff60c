// Checkpoints that resume training exactly: a model file whose header also holds the epoch and
// soma's global RNG state (include/soma/model/serialization.hpp, docs/reliability.md).
#include <nlohmann/json.hpp>

#include "model/checkpoint_internal.hpp"
#include "model/serialization_internal.hpp"
#include "soma/error.hpp"
#include "soma/model/serialization.hpp"

namespace soma {

namespace {
thread_local const TrainingState* t_pending = nullptr;
}  // namespace

namespace serialization::internal {
std::string pending_training_state_json() {
  if (!t_pending) return {};
  nlohmann::json j = {{"epoch", t_pending->epoch},
                      {"rng", {{"seed", t_pending->rng.seed}, {"calls", t_pending->rng.calls}}}};
  return j.dump();
}
}  // namespace serialization::internal

void save_checkpoint(const nn::Model& model, const std::string& path, const TrainingState& state) {
  // Model::save asks for the pending state while it builds the header; nothing else changes.
  struct Reset {
    ~Reset() { t_pending = nullptr; }
  } reset;
  t_pending = &state;
  model.save(path);
}

Checkpoint load_checkpoint(const std::string& path, bool restore_rng) {
  const char* who = "load_checkpoint";
  auto file = serialization::read_file(path);
  std::optional<TrainingState> state;
  limits::check_json_text(file.json, std::string(who) + ": '" + path + "': the header");
  try {
    auto doc = nlohmann::json::parse(file.json);
    if (doc.is_object() && doc.contains("training") && !doc.at("training").is_null()) {
      const auto& t = doc.at("training");
      TrainingState s;
      s.epoch = serialization::internal::int_of<int>(t.at("epoch"));
      s.rng.seed = serialization::internal::int_of<std::uint64_t>(t.at("rng").at("seed"));
      s.rng.calls = serialization::internal::int_of<std::uint64_t>(t.at("rng").at("calls"));
      if (s.epoch < 0) fail(who, "'", path, "': negative epoch ", s.epoch, " in the training state");
      state = s;
    }
  } catch (const nlohmann::json::exception& e) {
    fail(who, "'", path, "': malformed training state (", limits::excerpt(e.what(), limits::kMaxDetailChars), ")");
  }
  Checkpoint c{load_model(path), state};
  if (restore_rng && state) set_rng_state(state->rng);
  return c;
}

}  // namespace soma
