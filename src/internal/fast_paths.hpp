#pragma once
// Internal: a switch for the CPU kernels' specialised fast paths (2x2 pooling, contiguous
// `where`, ...). On by default; tests turn it off to check each fast path against the generic
// loop it replaces.
#include <atomic>

namespace soma::detail {

std::atomic<bool>& fast_paths_flag();
inline bool fast_paths_enabled() { return fast_paths_flag().load(std::memory_order_relaxed); }
inline void set_fast_paths_enabled(bool on) { fast_paths_flag().store(on); }

}  // namespace soma::detail
