#pragma once
// Internal: the small hook through which call_op (src/ops/registry.cpp) hands ops to the graph
// builder. Eager calls pay one thread-local read and one bit test per input.
#include <cstdint>
#include <vector>

#include "soma/op.hpp"

namespace soma::graph_detail {

// Depth of open GraphScopes on this thread (0: eager).
extern thread_local constinit int t_build_depth;
// Symbolic tensors carry this bit in their id (eager ids come from a counter far below it).
inline constexpr std::uint64_t kSymbolicIdBit = std::uint64_t(1) << 63;
inline bool is_symbolic_id(std::uint64_t id) { return (id & kSymbolicIdBit) != 0; }

// Adds an op node to the current graph (or the graph of a symbolic input), records it on active
// tapes like an eager op, and returns its symbolic outputs.
std::vector<Tensor> add_op_node(const OpDef& def, const std::vector<Tensor>& inputs,
                                const Attrs& attrs);

}  // namespace soma::graph_detail
