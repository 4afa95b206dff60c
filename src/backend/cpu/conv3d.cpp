// CPU kernels of the 3-d convolution ops (src/ops/conv3d.cpp): oneDNN's 3-d convolution
// primitives (forward, backward-data, backward-weights) for packed f32; anything else (f64,
// f16/bf16, strided views, soma built without oneDNN or SOMA_CONV_IMPL=im2col) runs the ops'
// composite, conv2d with the kernel's depth taps folded into the channels.
#include "internal/conv3d_op.hpp"
#include "internal/copy.hpp"
#include "onednn_conv.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

using Ints = std::vector<std::int64_t>;

// x [N, C, D, H, W], w [O, C/groups, KD, KH, KW], y [N, O, D', H', W'] (shapes checked by the op's
// shape rule).
Conv3dGeometry geometry(const Shape& x, const Shape& w, const Shape& y, const Attrs& a) {
  const Ints &st = a.ints("strides"), &p = a.ints("pads"), &dil = a.ints("dilation");
  return {x[0],  x[1],  x[2],  x[3],   x[4], w[0], w[2],   w[3],   w[4],
          y[2],  y[3],  y[4],  st[0],  st[1], st[2], p[0], p[1], p[2], p[3], p[4], p[5],
          dil[0], dil[1], dil[2], a.i("groups")};
}

// f32 operands and a packed f32 output with something to compute: oneDNN's case (strided
// inputs, e.g. the broadcast gradient of a sum, are packed first).
bool onednn_case(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out})
    if (t->dtype() != DType::f32 || t->numel() == 0) return false;
  return out.is_contiguous();
}
Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor p = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy_into(t, p);
  return p;
}

void conv3d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &y = out[0];
  if (y.numel() == 0) return;
  if (onednn_case(in[0], in[1], y)) {
    const Tensor x = packed(in[0]), w = packed(in[1]);
    if (onednn_conv3d_forward(geometry(x.shape(), w.shape(), y.shape(), a), x.data<float>(),
                              w.data<float>(), y.data<float>()))
      return;
  }
  copy_into(conv3d_composite(in[0], in[1], a), y);
}

void backprop_input_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& a) {
  const Tensor &dx = out[0];
  if (dx.numel() == 0) return;
  if (onednn_case(in[0], in[1], dx)) {
    const Tensor g = packed(in[0]), w = packed(in[1]);
    if (onednn_conv3d_backward_data(geometry(dx.shape(), w.shape(), g.shape(), a),
                                    g.data<float>(), w.data<float>(), dx.data<float>()))
      return;
  }
  copy_into(conv3d_backprop_input_composite(in[0], in[1], a), dx);
}

void backprop_filter_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  const Tensor &dw = out[0];
  if (dw.numel() == 0) return;
  if (onednn_case(in[0], in[1], dw)) {
    const Tensor x = packed(in[0]), g = packed(in[1]);
    if (onednn_conv3d_backward_weights(geometry(x.shape(), dw.shape(), g.shape(), a),
                                       x.data<float>(), g.data<float>(), dw.data<float>()))
      return;
  }
  copy_into(conv3d_backprop_filter_composite(in[0], in[1], a), dw);
}

}  // namespace

void register_cpu_conv3d_kernels() {
  register_kernel("conv3d", DeviceKind::CPU, conv3d_kernel);
  register_kernel("conv3d_backprop_input", DeviceKind::CPU, backprop_input_kernel);
  register_kernel("conv3d_backprop_filter", DeviceKind::CPU, backprop_filter_kernel);
}

}  // namespace soma::detail
