#pragma once
// Internal hooks of soma/runtime_checks.hpp, kept cheap for call_op and Storage::allocate.
#include <atomic>
#include <cstddef>
#include <vector>

#include "soma/device.hpp"

namespace soma {
class Tensor;
struct OpDef;
}  // namespace soma

namespace soma::detail {

extern std::atomic<bool> g_check_numerics;
inline bool check_numerics_on() { return g_check_numerics.load(std::memory_order_relaxed); }
// Throws soma::Error when an output of `def` holds an inf or nan.
void check_op_numerics(const OpDef& def, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& outputs);
// Throws soma::Error when nbytes exceeds max_allocation_bytes().
void check_allocation(std::size_t nbytes, Device device);

}  // namespace soma::detail
