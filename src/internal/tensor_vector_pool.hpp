#pragma once
// Internal: a per-thread pool of std::vector<Tensor> for the one-tensor call paths
// (Module::operator(), Module::call, Model::predict_on_batch). Passing one tensor through a
// layer as a vector then allocates nothing after the first calls: a batch-1 MLP prediction made
// ten such vectors per call (issue 5, workload 4).
#include <vector>

#include "soma/tensor.hpp"

namespace soma::detail {

// An empty vector: one given back earlier on this thread (keeping its capacity), else a new one.
std::vector<Tensor> take_tensor_vector();
// Releases v's tensors and keeps the emptied vector for the next take_tensor_vector().
void give_back_tensor_vector(std::vector<Tensor>&& v);

}  // namespace soma::detail
