// Learning-rate schedules in model files: {"class_name", "config"} with Keras' field names, so a
// reloaded optimiser follows the same schedule. The step count is the optimiser's "iterations",
// saved with its state.
#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/serialization_internal.hpp"
#include "soma/error.hpp"
#include "soma/model/serialization.hpp"

namespace soma::serialization {
using internal::int_of;

namespace {

struct ScheduleCodec {
  std::function<internal::json(const optim::LearningRateSchedule&)> to;
  std::function<optim::ScheduleRef(const internal::json&)> from;
};

std::mutex& schedule_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, ScheduleCodec>& custom_schedules() {
  static std::map<std::string, ScheduleCodec> r;
  return r;
}
std::optional<ScheduleCodec> custom_schedule(const std::string& name) {
  std::lock_guard lock(schedule_mutex());
  auto it = custom_schedules().find(name);
  if (it == custom_schedules().end()) return std::nullopt;
  return it->second;
}

template <class T>
const T* builtin(const optim::LearningRateSchedule& s, const char* name) {
  return s.name() == name ? dynamic_cast<const T*>(&s) : nullptr;
}

}  // namespace

void register_schedule(const std::string& class_name,
                       std::function<std::string(const optim::LearningRateSchedule&)> to_config,
                       std::function<optim::ScheduleRef(const std::string&)> from_config) {
  std::lock_guard lock(schedule_mutex());
  custom_schedules()[class_name] = {
      [to = std::move(to_config)](const optim::LearningRateSchedule& s) { return internal::json::parse(to(s)); },
      [from = std::move(from_config)](const internal::json& c) { return from(c.dump()); }};
}

std::vector<std::string> registered_schedules() {
  std::vector<std::string> out = {"CosineDecay", "ExponentialDecay", "PiecewiseConstantDecay", "StepDecay"};
  std::lock_guard lock(schedule_mutex());
  for (auto& [n, _] : custom_schedules())
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

namespace internal {

json schedule_json(const optim::LearningRateSchedule& s) {
  const std::string n = s.name();
  json c;
  if (auto codec = custom_schedule(n)) {
    c = codec->to(s);
  } else if (auto* p = builtin<optim::ExponentialDecay>(s, "ExponentialDecay")) {
    auto& o = p->options();
    c = {{"initial_learning_rate", o.initial_learning_rate},
         {"decay_steps", o.decay_steps},
         {"decay_rate", o.decay_rate},
         {"staircase", o.staircase}};
  } else if (auto* p = builtin<optim::PiecewiseConstantDecay>(s, "PiecewiseConstantDecay")) {
    c = {{"boundaries", p->boundaries()}, {"values", p->values()}};
  } else if (auto* p = builtin<optim::CosineDecay>(s, "CosineDecay")) {
    auto& o = p->options();
    c = {{"initial_learning_rate", o.initial_learning_rate},
         {"decay_steps", o.decay_steps},
         {"alpha", o.alpha},
         {"warmup_target", o.warmup_target ? json(*o.warmup_target) : json(nullptr)},
         {"warmup_steps", o.warmup_steps}};
  } else if (auto* p = builtin<optim::StepDecay>(s, "StepDecay")) {
    auto& o = p->options();
    c = {{"initial_learning_rate", o.initial_learning_rate}, {"step_size", o.step_size}, {"gamma", o.gamma}};
  } else {
    fail("save", "learning-rate schedule '", n,
         "' has no config (not a built-in schedule); register one with serialization::register_schedule");
  }
  return json{{"class_name", n}, {"config", c}};
}

optim::ScheduleRef schedule_from_json(const json& j) {
  const std::string n = j.at("class_name").get<std::string>();
  const json& c = j.at("config");
  if (auto codec = custom_schedule(n)) return codec->from(c);
  if (n == "ExponentialDecay")
    return optim::ExponentialDecay({.initial_learning_rate = c.at("initial_learning_rate").get<double>(),
                                    .decay_steps = int_of(c.at("decay_steps")),
                                    .decay_rate = c.at("decay_rate").get<double>(),
                                    .staircase = c.at("staircase").get<bool>()});
  if (n == "PiecewiseConstantDecay")
    return optim::PiecewiseConstantDecay(c.at("boundaries").get<std::vector<std::int64_t>>(),
                                         c.at("values").get<std::vector<double>>());
  if (n == "CosineDecay") {
    std::optional<double> target;
    if (c.contains("warmup_target") && !c.at("warmup_target").is_null()) target = c.at("warmup_target").get<double>();
    return optim::CosineDecay({.initial_learning_rate = c.at("initial_learning_rate").get<double>(),
                               .decay_steps = int_of(c.at("decay_steps")),
                               .alpha = c.at("alpha").get<double>(),
                               .warmup_target = target,
                               .warmup_steps = int_of(c.at("warmup_steps"))});
  }
  if (n == "StepDecay")
    return optim::StepDecay({.initial_learning_rate = c.at("initial_learning_rate").get<double>(),
                             .step_size = int_of(c.at("step_size")),
                             .gamma = c.at("gamma").get<double>()});
  fail("load_model", "unknown learning-rate schedule '", n,
       "' (register it with serialization::register_schedule before loading)");
}

}  // namespace internal
}  // namespace soma::serialization
