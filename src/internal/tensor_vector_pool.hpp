#pragma once
// Internal: a per-thread pool of std::vector<Tensor>. Op calls take their braced-list inputs and
// call_op1's outputs from it (src/ops/registry.cpp), the one-tensor call paths of Module and
// Model::predict_on_batch their vectors (src/nn/module.cpp, src/model/model.cpp), and tape nodes
// their input/output copies (src/autograd/tape.cpp). After the first calls none of these allocate
// (issue 5: a tiny op made several such vectors, a batch-1 MLP prediction ten, a taped op two).
// The functions are inline and the variables initial-exec TLS (a plain %fs-relative access):
// this is the per-op hot path.
#include <cstddef>
#include <vector>

#include "soma/tensor.hpp"

namespace soma::detail {

struct TensorVectorPool {
  std::vector<std::vector<Tensor>> free;
};
// This thread's pool: null until the first vector comes back, and again once the thread's storage
// is torn down (then `gone` is set and vectors are simply freed). Both are trivially destructible
// and constinit, so other files reach them without a TLS wrapper call (per-op hot path).
[[gnu::tls_model("initial-exec")]] extern constinit thread_local TensorVectorPool* t_tensor_vector_pool;
[[gnu::tls_model("initial-exec")]] extern constinit thread_local bool t_tensor_vector_pool_gone;
// Creates this thread's pool (owned by a thread_local that clears the pointer at thread exit).
TensorVectorPool* make_tensor_vector_pool();

// Bounds: a tape keeps two vectors per recorded op, so thousands can come back at once; small
// vectors only (a pooled vector keeps its capacity).
inline constexpr std::size_t kMaxPooledTensorVectors = 4096;
inline constexpr std::size_t kMaxPooledTensorVectorCapacity = 64;

// An empty vector: one given back earlier on this thread (keeping its capacity), else a new one.
inline std::vector<Tensor> take_tensor_vector() {
  TensorVectorPool* p = t_tensor_vector_pool;
  if (!p || p->free.empty()) return {};
  std::vector<Tensor> v = std::move(p->free.back());
  p->free.pop_back();
  return v;
}

// Releases v's tensors now and keeps the emptied vector for the next take_tensor_vector().
inline void give_back_tensor_vector(std::vector<Tensor>&& v) {
  v.clear();
  if (v.capacity() == 0 || v.capacity() > kMaxPooledTensorVectorCapacity) return;
  TensorVectorPool* p = t_tensor_vector_pool;
  if (!p) {
    if (t_tensor_vector_pool_gone) return;
    p = make_tensor_vector_pool();
  }
  if (p->free.size() < kMaxPooledTensorVectors) p->free.push_back(std::move(v));
}

}  // namespace soma::detail
