// Convolution and pooling op definitions (to be filled in).
#include "internal/registration.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma::detail {
void register_nn_ops() {}
}  // namespace soma::detail
