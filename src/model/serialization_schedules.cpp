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

// Built-in schedules by class name (== name()): read through a fresh schedule's field list, then
// rebuilt through its constructor (which checks the values). The prototypes' values are
// placeholders: every field they hold is required in a config.
using ScheduleFactory = std::function<optim::ScheduleRef(const internal::json&)>;

template <class S>
ScheduleFactory schedule_factory(const std::string& class_name, S (*prototype)(),
                                 optim::ScheduleRef (*remake)(const S&)) {
  return [=](const internal::json& c) {
    S p = prototype();
    internal::read_fields(p, c, "learning-rate schedule " + class_name);
    return remake(p);
  };
}

const std::map<std::string, ScheduleFactory>& builtin_schedules() {
  static const std::map<std::string, ScheduleFactory> table = {
      {"ExponentialDecay",
       schedule_factory<optim::ExponentialDecay>(
           "ExponentialDecay",
           [] { return optim::ExponentialDecay({.initial_learning_rate = 1, .decay_steps = 1, .decay_rate = 1}); },
           [](const optim::ExponentialDecay& p) { return optim::ScheduleRef(optim::ExponentialDecay(p.options())); })},
      {"PiecewiseConstantDecay",
       schedule_factory<optim::PiecewiseConstantDecay>(
           "PiecewiseConstantDecay", [] { return optim::PiecewiseConstantDecay({}, {1.0}); },
           [](const optim::PiecewiseConstantDecay& p) {
             return optim::ScheduleRef(optim::PiecewiseConstantDecay(p.boundaries(), p.values()));
           })},
      {"CosineDecay",
       schedule_factory<optim::CosineDecay>(
           "CosineDecay", [] { return optim::CosineDecay({.initial_learning_rate = 1, .decay_steps = 1, .warmup_target = std::nullopt}); },
           [](const optim::CosineDecay& p) { return optim::ScheduleRef(optim::CosineDecay(p.options())); })},
      {"StepDecay",
       schedule_factory<optim::StepDecay>(
           "StepDecay", [] { return optim::StepDecay({.initial_learning_rate = 1, .step_size = 1}); },
           [](const optim::StepDecay& p) { return optim::ScheduleRef(optim::StepDecay(p.options())); })},
  };
  return table;
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
  std::vector<std::string> out;
  for (auto& [n, _] : builtin_schedules()) out.push_back(n);
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
  } else if (builtin_schedules().count(n)) {
    c = fields_json(s);
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
  auto it = builtin_schedules().find(n);
  if (it == builtin_schedules().end())
    fail("load_model", "unknown learning-rate schedule '", n,
         "' (register it with serialization::register_schedule before loading)");
  return it->second(c);
}

}  // namespace internal
}  // namespace soma::serialization
