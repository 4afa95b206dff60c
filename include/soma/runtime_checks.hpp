#pragma once
// Run-time safety checks for long or untrusted runs (docs/reliability.md):
//   - numeric checking: every op checks its floating-point outputs and throws soma::Error naming
//     the first op that produced an inf or nan (off by default; costs one pass over each output);
//   - an allocation bound: a tensor larger than the machine's memory is a soma::Error at
//     allocation time, not an abort or a kill by the kernel's OOM killer later;
//   - a memory budget: a CPU tensor that does not fit in what the process may still use (its
//     cgroup's limit less the cgroup's usage, MemAvailable in /proc/meminfo, and the limit set
//     with set_memory_limit or SOMA_MEMORY_LIMIT) is a soma::Error naming its shape and dtype.
#include <cstddef>
#include <string_view>

namespace soma {

// Turns numeric checking on or off for every thread.
void set_check_numerics(bool on);
bool check_numerics();

// The largest single tensor allocation soma attempts. 0 (the default) means the machine's
// physical memory plus swap; a fuzzer or a service can set a lower bound.
void set_max_allocation_bytes(std::size_t bytes);
// The bound in force (the machine's memory when none was set).
std::size_t max_allocation_bytes();

// A limit on the bytes held by soma's CPU tensors together. An allocation that would take them
// above it is a soma::Error ("allocate: cannot allocate 60.0 MiB for tensor [...] f32 on cpu:
// 39.9 MiB available (...)"). 0 means none of soma's own: only what the system can give (the
// cgroup and MemAvailable) bounds allocations. The initial value comes from SOMA_MEMORY_LIMIT in
// the environment (parse_memory_size's format); the soma command's --memory-limit sets it too.
void set_memory_limit(std::size_t bytes);
std::size_t memory_limit();
// Bytes held by soma's live CPU tensors now (freed tensors' memory kept for reuse excluded).
std::size_t memory_in_use();
// "1073741824", "512M", "2G", "1.5G", "64KiB", "2 GB" (K/M/G/T are powers of 1024); throws
// soma::Error naming the text otherwise.
std::size_t parse_memory_size(std::string_view text);

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
