// CPU kernels for reduction ops (to be filled in).
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
void register_cpu_reduction_kernels() {}
}  // namespace soma::detail
