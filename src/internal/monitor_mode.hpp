#pragma once
// Internal: the "mode" option of the callbacks and schedules that watch a metric (EarlyStopping,
// ModelCheckpoint, ReduceLROnPlateau): whether a larger value is better. Each caller decides
// what "auto" means for its monitor.
#include <string>

#include "soma/error.hpp"

namespace soma::detail {

enum class MonitorMode { Auto, Min, Max };

// "auto", "min" or "max"; anything else is a soma::Error naming `who`.
inline MonitorMode parse_monitor_mode(const std::string& mode, const char* who) {
  struct Name {
    const char* name;
    MonitorMode mode;
  };
  static constexpr Name kNames[] = {
      {"auto", MonitorMode::Auto}, {"min", MonitorMode::Min}, {"max", MonitorMode::Max}};
  for (const auto& n : kNames)
    if (mode == n.name) return n.mode;
  fail(who, "mode must be \"auto\", \"min\" or \"max\", got \"", mode, "\"");
}

}  // namespace soma::detail
