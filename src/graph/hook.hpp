#pragma once
// Internal: graph mode's side of op dispatch. call_op (src/ops/registry.cpp) hands ops to the
// graph builder through the intercept hook of ops/dispatch_hooks.hpp, which src/graph/graph.cpp
// registers; the registry never includes this header. Eager calls pay one thread-local read and
// one bit test per input.
#include <cstdint>
#include <vector>

#include "ops/dispatch_hooks.hpp"
#include "soma/op.hpp"

namespace soma::graph_detail {

// Depth of open GraphScopes on this thread (0: eager). Change it with set_build_depth only, so
// that dispatch's kGraphBuild bit follows it.
extern thread_local constinit int t_build_depth;
inline void set_build_depth(int depth) {
  t_build_depth = depth;
  dispatch::set_active(dispatch::kGraphBuild, depth > 0);
}
// Symbolic tensors carry this bit in their id (eager ids come from a counter far below it).
using dispatch::is_symbolic_id;
using dispatch::kSymbolicIdBit;

// Adds an op node to the current graph (or the graph of a symbolic input), records it on active
// tapes like an eager op, and returns its symbolic outputs.
std::vector<Tensor> add_op_node(const OpDef& def, const std::vector<Tensor>& inputs,
                                const Attrs& attrs);

}  // namespace soma::graph_detail
