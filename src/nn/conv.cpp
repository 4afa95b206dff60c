#include "soma/nn/conv.hpp"

#include "backend/cpu/onednn_conv.hpp"
#include "internal/conv_bias_act.hpp"
#include "internal/fused_inference.hpp"
#include "internal/tensor_alloc.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

namespace {

Tensor to_layer_dtype(const Tensor& x, DType t) { return x.dtype() == t ? x : cast(x, t); }

void check_positive(const char* layer, const char* what, Size2 v) {
  if (v.h < 1 || v.w < 1)
    fail(layer, what, " must be positive, got [", v.h, ", ", v.w, "]");
}

// Layers take NCHW batches; the message says which layer and what it was built for.
void check_input(const char* layer, const std::string& name, const Shape& s,
                 std::int64_t channels) {
  if (s.size() != 4)
    fail(layer, "layer '", name, "' expects 4-d inputs [batch, channels, height, width], got ",
         shape_str(s));
  if (channels >= 0 && s[1] != channels)
    fail(layer, "layer '", name, "' was built for ", channels, " input channels, got input ",
         shape_str(s));
}

// [filters] bias broadcast over [N, filters, H, W].
Tensor add_bias(const Tensor& y, const Variable& b) {
  return y + reshape(b.value(), {1, b.shape()[0], 1, 1});
}

using fusion::fused_inference_activation;
using fusion::fused_inference_state_ok;
using fusion::is_cpu_f32_packed;

// y = act(conv2d(x, w) + b) as one oneDNN primitive (bias argument, ReLU post-op, weights kept
// in its layout between calls; backend/cpu/onednn_conv.hpp) when nothing can tell it from the
// separate ops: no tape records, no graph is being built, no autocast, no numerics check, f32
// CPU operands, a linear or the built-in ReLU activation (the rule Dense's fused path follows).
// Undefined Tensor otherwise, and when oneDNN is not built in or declines.
Tensor fused_conv_inference(const Tensor& x, const Tensor& w, const Tensor* b,
                            const Conv2DOptions& opt) {
  bool relu_act = false;
  if (!fused_inference_state_ok() || !fused_inference_activation(opt.activation, &relu_act))
    return {};
  if (!is_cpu_f32_packed(x) || !is_cpu_f32_packed(w) || (b && !is_cpu_f32_packed(*b))) return {};
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const std::int64_t kh = ws[2], kw = ws[3];
  const Size2 st = opt.strides, dil = opt.dilation_rate;
  const auto pads = resolve_padding(opt.padding, xs[2], xs[3], {kh, kw}, st, dil);
  const std::int64_t oh = (xs[2] + pads[0] + pads[1] - dil.h * (kh - 1) - 1) / st.h + 1;
  const std::int64_t ow = (xs[3] + pads[2] + pads[3] - dil.w * (kw - 1) - 1) / st.w + 1;
  // Empty or degenerate cases go to the op, which owns their messages and edge rules.
  if (x.numel() == 0 || w.numel() == 0 || oh <= 0 || ow <= 0) return {};
  const detail::ConvGeometry g{.n = xs[0], .c = xs[1], .h = xs[2], .w = xs[3],
                               .o = ws[0], .kh = kh, .kw = kw, .oh = oh, .ow = ow,
                               .sh = st.h, .sw = st.w,
                               .pt = pads[0], .pb = pads[1], .pl = pads[2], .pr = pads[3],
                               .dh = dil.h, .dw = dil.w, .groups = opt.groups};
  Tensor y = detail::empty_tensor(Shape{xs[0], ws[0], oh, ow}, DType::f32, Device::cpu());
  if (!detail::onednn_conv_forward_fused(g, x.data<float>(), w.data<float>(), w.storage(),
                                         b ? b->data<float>() : nullptr, relu_act,
                                         y.data<float>()))
    return {};
  return y;
}

}  // namespace

// ---- Conv2D ---------------------------------------------------------------------------------

Conv2D::Conv2D(std::int64_t filters, Size2 kernel_size, Conv2DOptions options)
    : filters_(filters), kernel_size_(kernel_size), opt_(std::move(options)) {
  if (filters <= 0) fail("Conv2D", "filters must be positive, got ", filters);
  check_positive("Conv2D", "kernel_size", kernel_size);
  check_positive("Conv2D", "strides", opt_.strides);
  check_positive("Conv2D", "dilation_rate", opt_.dilation_rate);
  if (opt_.groups < 1 || filters % opt_.groups != 0)
    fail("Conv2D", "groups=", opt_.groups, " must be >= 1 and divide filters=", filters);
  if (!is_floating(opt_.dtype)) fail("Conv2D", "dtype must be floating, got ", opt_.dtype);
}

Shape Conv2D::output_shape(const Shape& s) {
  check_input("Conv2D", name(), s, kernel_.defined() ? kernel_.shape()[1] * opt_.groups : -1);
  if (s[1] % opt_.groups != 0)
    fail("Conv2D", "layer '", name(), "': groups=", opt_.groups, " does not divide the input's ",
         s[1], " channels (input ", shape_str(s), ")");
  Shape batch1 = s;
  batch1[0] = 1;
  Shape out = conv2d_output_shape(batch1, {filters_, s[1] / opt_.groups, kernel_size_.h,
                                           kernel_size_.w},
                                  opt_.strides, opt_.padding, opt_.dilation_rate, opt_.groups);
  out[0] = s[0];
  return out;
}

void Conv2D::build(const Shape& s) {
  check_input("Conv2D", name(), s, -1);
  output_shape(s);  // every shape check before any weight is made
  const Shape ks{filters_, s[1] / opt_.groups, kernel_size_.h, kernel_size_.w};
  kernel_ = add_weight("kernel", ks, opt_.kernel_initializer, conv_fans(ks), true, opt_.dtype);
  add_regularizer(kernel_, opt_.kernel_regularizer);
  if (opt_.use_bias) {
    bias_ = add_weight("bias", {filters_}, opt_.bias_initializer, conv_fans(ks), true, opt_.dtype);
    add_regularizer(bias_, opt_.bias_regularizer);
  }
}

Tensor Conv2D::forward(const Tensor& x) {
  check_input("Conv2D", name(), x.shape(), kernel_.shape()[1] * opt_.groups);
  const Tensor* bias = opt_.use_bias ? &bias_.value() : nullptr;
  if (Tensor y = fused_conv_inference(x, kernel_.value(), bias, opt_); y.defined()) return y;
  // Eager training (or any other eager call on the CPU): bias and a linear or built-in ReLU
  // activation inside the convolution op, whose gradient is the separate ops' (issue 5). Its
  // kernel follows bf16 autocast as conv2d's does.
  bool relu_act = false;
  if (bias && fusion::fused_op_state_ok() &&
      fusion::fused_inference_activation(opt_.activation, &relu_act) && x.device().is_cpu() &&
      kernel_.value().device().is_cpu() && x.dtype() == opt_.dtype)
    return detail::conv2d_bias_act(x, kernel_.value(), *bias, opt_.strides, opt_.padding,
                                   opt_.dilation_rate, opt_.groups, relu_act);
  Tensor y = conv2d(to_layer_dtype(x, opt_.dtype), kernel_.value(), opt_.strides, opt_.padding,
                    opt_.dilation_rate, opt_.groups);
  if (opt_.use_bias) y = add_bias(y, bias_);
  return opt_.activation(y);
}

// ---- Conv2DTranspose ------------------------------------------------------------------------

Conv2DTranspose::Conv2DTranspose(std::int64_t filters, Size2 kernel_size,
                                 Conv2DTransposeOptions options)
    : filters_(filters), kernel_size_(kernel_size), opt_(std::move(options)) {
  const char* L = "Conv2DTranspose";
  if (filters <= 0) fail(L, "filters must be positive, got ", filters);
  check_positive(L, "kernel_size", kernel_size);
  check_positive(L, "strides", opt_.strides);
  check_positive(L, "dilation_rate", opt_.dilation_rate);
  if (opt_.groups < 1 || filters % opt_.groups != 0)
    fail(L, "groups=", opt_.groups, " must be >= 1 and divide filters=", filters);
  if (!is_floating(opt_.dtype)) fail(L, "dtype must be floating, got ", opt_.dtype);
}

Shape Conv2DTranspose::output_shape(const Shape& s) {
  check_input("Conv2DTranspose", name(), s, kernel_.defined() ? kernel_.shape()[0] : -1);
  if (s[1] % opt_.groups != 0)
    fail("Conv2DTranspose", "layer '", name(), "': groups=", opt_.groups,
         " does not divide the input's ", s[1], " channels (input ", shape_str(s), ")");
  // The op's shape rule, run on empty-batch placeholders (no arithmetic).
  Tensor x = zeros({0, s[1], s[2], s[3]}, opt_.dtype);
  Tensor w = zeros({s[1], filters_ / opt_.groups, kernel_size_.h, kernel_size_.w}, opt_.dtype);
  Shape out = conv2d_transpose(x, w, opt_.strides, opt_.padding, opt_.output_padding,
                               opt_.dilation_rate, opt_.groups)
                  .shape();
  out[0] = s[0];
  return out;
}

void Conv2DTranspose::build(const Shape& s) {
  output_shape(s);
  const Shape ks{s[1], filters_ / opt_.groups, kernel_size_.h, kernel_size_.w};
  // Keras computes the fans of a transposed kernel as a conv kernel's; here in and out swap
  // places in the layout, so fan_in = filters/groups*kh*kw, fan_out = in*kh*kw.
  kernel_ = add_weight("kernel", ks, opt_.kernel_initializer, conv_fans(ks), true, opt_.dtype);
  add_regularizer(kernel_, opt_.kernel_regularizer);
  if (opt_.use_bias) {
    bias_ = add_weight("bias", {filters_}, opt_.bias_initializer, conv_fans(ks), true, opt_.dtype);
    add_regularizer(bias_, opt_.bias_regularizer);
  }
}

Tensor Conv2DTranspose::forward(const Tensor& x) {
  check_input("Conv2DTranspose", name(), x.shape(), kernel_.shape()[0]);
  Tensor y = conv2d_transpose(to_layer_dtype(x, opt_.dtype), kernel_.value(), opt_.strides,
                              opt_.padding, opt_.output_padding, opt_.dilation_rate, opt_.groups);
  if (opt_.use_bias) y = add_bias(y, bias_);
  return opt_.activation(y);
}

// ---- pooling --------------------------------------------------------------------------------

namespace {
Shape pooled_shape(const char* layer, const std::string& name, const Shape& s, Size2 pool,
                   Size2 strides, const Padding& padding) {
  check_input(layer, name, s, -1);
  Shape batch1 = s;
  batch1[0] = 1;
  Shape out = pool2d_output_shape(batch1, pool, strides, padding);
  out[0] = s[0];
  return out;
}
}  // namespace

MaxPool2D::MaxPool2D(Size2 pool_size, std::optional<Size2> strides, Padding padding)
    : pool_(pool_size), strides_(strides.value_or(pool_size)), padding_(std::move(padding)) {
  check_positive("MaxPool2D", "pool_size", pool_);
  check_positive("MaxPool2D", "strides", strides_);
}

Shape MaxPool2D::output_shape(const Shape& s) {
  return pooled_shape("MaxPool2D", name(), s, pool_, strides_, padding_);
}

Tensor MaxPool2D::forward(const Tensor& x) {
  check_input("MaxPool2D", name(), x.shape(), -1);
  return max_pool2d(x, pool_, strides_, padding_);
}

AvgPool2D::AvgPool2D(Size2 pool_size, std::optional<Size2> strides, Padding padding)
    : pool_(pool_size), strides_(strides.value_or(pool_size)), padding_(std::move(padding)) {
  check_positive("AvgPool2D", "pool_size", pool_);
  check_positive("AvgPool2D", "strides", strides_);
}

Shape AvgPool2D::output_shape(const Shape& s) {
  return pooled_shape("AvgPool2D", name(), s, pool_, strides_, padding_);
}

Tensor AvgPool2D::forward(const Tensor& x) {
  check_input("AvgPool2D", name(), x.shape(), -1);
  return avg_pool2d(x, pool_, strides_, padding_);
}

Shape GlobalAveragePooling2D::output_shape(const Shape& s) {
  check_input("GlobalAveragePooling2D", name(), s, -1);
  return keepdims_ ? Shape{s[0], s[1], 1, 1} : Shape{s[0], s[1]};
}

Tensor GlobalAveragePooling2D::forward(const Tensor& x) {
  check_input("GlobalAveragePooling2D", name(), x.shape(), -1);
  return mean(x, {2, 3}, keepdims_);
}

}  // namespace soma::nn
