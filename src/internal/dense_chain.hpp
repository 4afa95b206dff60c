#pragma once
// Internal: Sequential's inference fast path through a run of layers [Flatten] Dense Dense ...
// (implemented in src/nn/layers.cpp, next to Dense's own fused path; used by
// src/model/sequential.cpp).
#include <cstddef>
#include <vector>

#include "soma/nn/module.hpp"

namespace soma::nn {

// Runs the longest run of layers starting at layers[i] that the fused Dense kernel can compute
// (an optional Flatten, then built Dense layers with a linear or the built-in ReLU activation,
// f32, at most 8 rows) when nothing can tell it from calling them one by one: eager, no tape
// recording, no autocast, no numerics check. The run's intermediate activations stay in
// per-thread scratch memory, and only its output becomes a tensor: it replaces h, bit-for-bit
// what the layers give one by one. Returns the number of layers run; 0 leaves h as it was (the
// caller calls the layer, which also reports any error).
std::size_t run_fused_dense_chain(const std::vector<ModuleRef>& layers, std::size_t i, Tensor& h);

}  // namespace soma::nn
