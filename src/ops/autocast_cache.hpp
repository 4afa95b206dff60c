#pragma once
// Internal: autocast's cache of low-precision weight copies on a device (call_op's run_autocast,
// src/ops/registry.cpp; docs/cuda.md "Autocast"). An f32 input of a kAutocastLow op on a device
// is cast to the scope's dtype for that op. For the values of trainable Variables the cast is
// kept, keyed by the storage and its version (every in-place write bumps it: the optimiser ops,
// Variable::assign), so that a weight read by several ops of one step (the forward matmul and the
// backward's dx = g W^T, which reads it through a transposed view of the same storage) is cast
// once per optimiser step; the whole storage is cast, and each view of the f32 storage reads the
// same view of the copy. Per thread.
//
// A captured CUDA graph must cast inside itself (a copy made outside would be read, unchanged,
// by every replay), and a replay changes weights without bumping versions: fit calls
// new_generation() before a capture, after it and before every launch, which makes every kept copy
// stale (FitOptions::cuda_graph).
#include <cstdint>

namespace soma::detail {

struct AutocastCacheStats {
  std::int64_t hits = 0, misses = 0;  // this thread's lookups of trainable storages
};
AutocastCacheStats& autocast_cache_stats();
// On by default; off: every op casts its inputs (the tests compare the two).
void set_autocast_weight_cache(bool on);
bool autocast_weight_cache();
void autocast_cache_new_generation();

}  // namespace soma::detail
