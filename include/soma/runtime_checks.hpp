#pragma once
// Run-time safety checks for long or untrusted runs (docs/reliability.md):
//   - numeric checking: every op checks its floating-point outputs and throws soma::Error naming
//     the first op that produced an inf or nan (off by default; costs one pass over each output);
//   - an allocation bound: a tensor larger than the machine's memory is a soma::Error at
//     allocation time, not an abort or a kill by the kernel's OOM killer later.
#include <cstddef>

namespace soma {

// Turns numeric checking on or off for every thread.
void set_check_numerics(bool on);
bool check_numerics();

// The largest single tensor allocation soma attempts. 0 (the default) means the machine's
// physical memory plus swap; a fuzzer or a service can set a lower bound.
void set_max_allocation_bytes(std::size_t bytes);
// The bound in force (the machine's memory when none was set).
std::size_t max_allocation_bytes();

// RAII: numeric checking on (or off) for a scope, restored afterwards.
class CheckNumericsScope {
 public:
  explicit CheckNumericsScope(bool on = true) : previous_(check_numerics()) { set_check_numerics(on); }
  ~CheckNumericsScope() { set_check_numerics(previous_); }
  CheckNumericsScope(const CheckNumericsScope&) = delete;
  CheckNumericsScope& operator=(const CheckNumericsScope&) = delete;

 private:
  bool previous_;
};

}  // namespace soma
