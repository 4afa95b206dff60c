// CPU kernels for linalg ops (to be filled in).
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
void register_cpu_linalg_kernels() {}
}  // namespace soma::detail
