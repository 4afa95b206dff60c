#pragma once
// Internal: how the layers above ops/ take part in op dispatch (call_op, src/ops/registry.cpp)
// without the registry knowing them. Graph mode (src/graph) takes ops instead of running them;
// the gradient tape (src/autograd) sees the ops that ran. Each registers its function here at its
// own static initialisation and sets its bit of `t_active` on this thread while it wants ops.
// The eager fast path (no graph, no tape) pays one thread-local load and one branch for both,
// plus one bit test per input for symbolic (graph) tensors.
#include <cstdint>
#include <vector>

#include "soma/op.hpp"

namespace soma::dispatch {

// Bits of t_active.
inline constexpr std::uint32_t kGraphBuild = 1;  // a GraphScope is open on this thread
inline constexpr std::uint32_t kTapeRecord = 2;  // a tape is active and recording is not disabled

// Which hooks want this thread's ops (0: plain eager). Written only by the layers that own the
// bits, through set_active.
[[gnu::tls_model("initial-exec")]] extern thread_local constinit std::uint32_t t_active;
inline void set_active(std::uint32_t bit, bool on) {
  t_active = on ? (t_active | bit) : (t_active & ~bit);
}

// Symbolic (graph) tensors carry this bit in their id (eager ids come from a counter far below
// it). An op with a symbolic input goes to the intercept hook even outside a GraphScope.
inline constexpr std::uint64_t kSymbolicIdBit = std::uint64_t(1) << 63;
inline bool is_symbolic_id(std::uint64_t id) { return (id & kSymbolicIdBit) != 0; }

// Takes an op instead of running it (graph mode): called while kGraphBuild is set or when an
// input is symbolic; fills `outputs` (empty on entry).
using InterceptFn = void (*)(const OpDef& def, const std::vector<Tensor>& inputs,
                             const Attrs& attrs, std::vector<Tensor>& outputs);
// Sees an op with a gradient after its kernel ran (the tape): called while kTapeRecord is set.
using ObserveFn = void (*)(const OpDef& def, const std::vector<Tensor>& inputs,
                           const std::vector<Tensor>& outputs, const Attrs& attrs);

// One slot each; registering again replaces the function.
void set_intercept(InterceptFn fn);
void set_observe(ObserveFn fn);

}  // namespace soma::dispatch
