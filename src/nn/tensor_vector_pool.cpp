#include "internal/tensor_vector_pool.hpp"

namespace soma::detail {

namespace {

// Nested calls (a Sequential inside a Sequential, layers calling layers) take further vectors;
// the pool stays small and never holds large vectors.
constexpr std::size_t kMaxPooled = 32;
constexpr std::size_t kMaxCapacity = 64;

struct TensorVectorPool {
  std::vector<std::vector<Tensor>> free;
  ~TensorVectorPool();
};
// Initial-exec TLS as in src/ops/registry.cpp: a plain %fs-relative access on the hot path. The
// flag is trivially destructible, so it can still be read after the pool died at thread exit.
[[gnu::tls_model("initial-exec")]] thread_local bool t_pool_gone = false;
[[gnu::tls_model("initial-exec")]] thread_local TensorVectorPool t_pool;
TensorVectorPool::~TensorVectorPool() { t_pool_gone = true; }

}  // namespace

std::vector<Tensor> take_tensor_vector() {
  if (t_pool_gone || t_pool.free.empty()) return {};
  std::vector<Tensor> v = std::move(t_pool.free.back());
  t_pool.free.pop_back();
  return v;
}

void give_back_tensor_vector(std::vector<Tensor>&& v) {
  v.clear();
  if (t_pool_gone || v.capacity() == 0 || v.capacity() > kMaxCapacity ||
      t_pool.free.size() >= kMaxPooled)
    return;
  t_pool.free.push_back(std::move(v));
}

}  // namespace soma::detail
