#pragma once
// Internal: the 3-d convolution ops (src/ops/conv3d.cpp). Attrs: "strides" {d, h, w}, "pads"
// {front, back, top, bottom, left, right}, "dilation" {d, h, w}, "groups".
//   conv3d(x, w)                  -> y   x [N, C, D, H, W], w [O, C/groups, KD, KH, KW]
//   conv3d_backprop_input(g, w)   -> dx  (attr "input_shape")
//   conv3d_backprop_filter(x, g)  -> dw  (attr "filter_shape")
// Each op's kernel on every device is the composite below (conv2d ops with the kernel's depth
// taps folded into the channels); the CPU kernel runs oneDNN's 3-d convolution for packed f32
// (src/backend/cpu/conv3d.cpp).
#include "soma/op.hpp"
#include "soma/tensor.hpp"

namespace soma::detail {

void register_conv3d_ops();          // from register_nn_ops
void register_cpu_conv3d_kernels();  // from register_cpu_nn_kernels

// The composites (no tape: called inside kernels), on the inputs' device.
Tensor conv3d_composite(const Tensor& x, const Tensor& w, const Attrs& a);
Tensor conv3d_backprop_input_composite(const Tensor& g, const Tensor& w, const Attrs& a);
Tensor conv3d_backprop_filter_composite(const Tensor& x, const Tensor& g, const Attrs& a);

}  // namespace soma::detail
