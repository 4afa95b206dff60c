// CPU kernels for convolution and pooling (to be filled in).
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
void register_cpu_nn_kernels() {}
}  // namespace soma::detail
