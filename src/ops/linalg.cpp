// linalg op definitions (to be filled in).
#include "internal/registration.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {
namespace detail {
void register_linalg_ops() {}
}  // namespace detail
}  // namespace soma
