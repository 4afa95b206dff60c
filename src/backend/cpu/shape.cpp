// CPU kernels for shape ops (to be filled in).
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
void register_cpu_shape_kernels() {}
}  // namespace soma::detail
