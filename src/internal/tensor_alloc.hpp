#pragma once
// Internal: Tensor::empty taking its shape by value, so that call_op can move an inferred shape
// into the new tensor instead of copying it (one heap allocation fewer per op).
#include "soma/tensor.hpp"

namespace soma::detail {

Tensor empty_tensor(Shape&& shape, DType dtype, Device device);

}  // namespace soma::detail
