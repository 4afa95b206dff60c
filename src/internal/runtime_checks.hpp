#pragma once
// Internal hooks of soma/runtime_checks.hpp, kept cheap for call_op and Storage::allocate.
#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "soma/device.hpp"

namespace soma {
class Tensor;
struct OpDef;
}  // namespace soma

namespace soma::detail {

extern std::atomic<bool> g_check_numerics;
inline bool check_numerics_on() { return g_check_numerics.load(std::memory_order_relaxed); }
// Throws soma::Error when an output of the op named `op` holds an inf or nan.
void check_op_numerics(std::string_view op, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& outputs);
// The same for an op definition (defined in src/ops/registry.cpp: core does not read OpDef).
void check_op_numerics(const OpDef& def, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& outputs);
// Throws soma::Error when nbytes exceeds max_allocation_bytes(), the memory limit less the bytes
// in use, or the memory the system can still give (read fresh for allocations of
// kFreshReadBytes and more, and whenever soma's tensors grew by half of the last reading; else
// the last reading holds). `what` describes the tensor ("tensor [2, 3] f32"), or is null.
void check_allocation(std::size_t nbytes, Device device, const std::string* what = nullptr);
// A failed allocation (malloc returned null): a soma::Error in the same words.
[[noreturn]] void allocation_failed(std::size_t nbytes, Device device, const std::string* what);
// Bookkeeping of memory_in_use(): CPU storages call these on allocation and release.
extern std::atomic<std::size_t> g_cpu_bytes_in_use;
inline constexpr std::size_t kFreshReadBytes = std::size_t(64) << 20;

// What the system lets this process still allocate: the least over its cgroup (v2: memory.max
// less memory.current, v1: memory.limit_in_bytes less memory.usage_in_bytes, the process's cgroup
// and its ancestors) and MemAvailable plus SwapFree in /proc/meminfo. `root` prefixes every path
// (tests point it at a fake tree). `why` names the binding source, e.g. "MemAvailable in
// /proc/meminfo" or "cgroup /a: memory.max 256.0 MiB, 200.0 MiB in use".
struct SystemMemory {
  std::size_t available = 0;
  std::string why;
};
SystemMemory read_system_memory(const std::string& root = "");
std::string memory_size_str(std::size_t n);  // "5.1 GiB"

}  // namespace soma::detail
