#include <memory>

#include "internal/tensor_vector_pool.hpp"

namespace soma::detail {

[[gnu::tls_model("initial-exec")]] constinit thread_local TensorVectorPool* t_tensor_vector_pool =
    nullptr;
[[gnu::tls_model("initial-exec")]] constinit thread_local bool t_tensor_vector_pool_gone = false;

namespace {
struct PoolOwner {
  std::unique_ptr<TensorVectorPool> pool;
  ~PoolOwner() {
    t_tensor_vector_pool = nullptr;
    t_tensor_vector_pool_gone = true;
  }
};
thread_local PoolOwner t_owner;
}  // namespace

TensorVectorPool* make_tensor_vector_pool() {
  t_owner.pool = std::make_unique<TensorVectorPool>();
  return t_tensor_vector_pool = t_owner.pool.get();
}

}  // namespace soma::detail
