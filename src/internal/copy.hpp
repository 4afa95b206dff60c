#pragma once
#include "soma/tensor.hpp"

namespace soma::detail {
// Writes `src`, broadcast to dst's shape and converted to dst's dtype, into dst's memory (dst may
// be a strided view). No tape involvement: a raw kernel for assign, copy, cast and views.
void copy_into(const Tensor& src, const Tensor& dst);
// Fills every element of dst (any strides) with `value` converted to dst's dtype.
void fill_value(const Tensor& dst, double value);
}  // namespace soma::detail
