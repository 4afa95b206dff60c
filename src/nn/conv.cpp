#include "soma/nn/conv.hpp"

#include "internal/conv_bias_act.hpp"
#include "internal/fused_inference.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

namespace {

Tensor to_layer_dtype(const Tensor& x, DType t) { return x.dtype() == t ? x : cast(x, t); }

void check_positive(const char* layer, const char* what, Size2 v) {
  if (v.h < 1 || v.w < 1)
    fail(layer, what, " must be positive, got [", v.h, ", ", v.w, "]");
}

bool last(DataFormat f) { return f == DataFormat::channels_last; }

// Layers take NCHW batches (NHWC with channels_last); the message says which layer and what it
// was built for.
void check_input(const char* layer, const std::string& name, const Shape& s,
                 std::int64_t channels, DataFormat f = DataFormat::channels_first) {
  if (s.size() != 4)
    fail(layer, "layer '", name, "' expects 4-d inputs ",
         last(f) ? "[batch, height, width, channels] (channels_last)"
                 : "[batch, channels, height, width]",
         ", got ", shape_str(s));
  if (channels >= 0 && s[last(f) ? 3 : 1] != channels)
    fail(layer, "layer '", name, "' was built for ", channels, " input channels, got input ",
         shape_str(s));
}

// channels_last runs the NCHW ops between two transposes: correct first, and the gradients are
// the transposes' (a native NHWC oneDNN path would save the two copies).
Shape nchw_shape(const Shape& s, DataFormat f) {
  return last(f) ? Shape{s[0], s[3], s[1], s[2]} : s;
}
Shape from_nchw_shape(const Shape& s, DataFormat f) {
  return last(f) ? Shape{s[0], s[2], s[3], s[1]} : s;
}
Tensor to_nchw(const Tensor& x, DataFormat f) {
  return last(f) ? contiguous(transpose(x, {0, 3, 1, 2})) : x;
}
Tensor from_nchw(const Tensor& y, DataFormat f) {
  return last(f) ? contiguous(transpose(y, {0, 2, 3, 1})) : y;
}

// [filters] bias broadcast over [N, filters, H, W].
Tensor add_bias(const Tensor& y, const Variable& b) {
  return y + reshape(b.value(), {1, b.shape()[0], 1, 1});
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

Shape Conv2D::output_shape(const Shape& given) {
  check_input("Conv2D", name(), given,
              kernel_.defined() ? kernel_.shape()[1] * opt_.groups : -1, opt_.data_format);
  const Shape s = nchw_shape(given, opt_.data_format);
  if (s[1] % opt_.groups != 0)
    fail("Conv2D", "layer '", name(), "': groups=", opt_.groups, " does not divide the input's ",
         s[1], " channels (input ", shape_str(s), ")");
  Shape batch1 = s;
  batch1[0] = 1;
  Shape out = conv2d_output_shape(batch1, {filters_, s[1] / opt_.groups, kernel_size_.h,
                                           kernel_size_.w},
                                  opt_.strides, opt_.padding, opt_.dilation_rate, opt_.groups);
  out[0] = s[0];
  return from_nchw_shape(out, opt_.data_format);
}

void Conv2D::build(const Shape& given) {
  check_input("Conv2D", name(), given, -1, opt_.data_format);
  output_shape(given);  // every shape check before any weight is made
  const Shape s = nchw_shape(given, opt_.data_format);
  const Shape ks{filters_, s[1] / opt_.groups, kernel_size_.h, kernel_size_.w};
  kernel_ = add_weight("kernel", ks, opt_.kernel_initializer, conv_fans(ks), true, opt_.dtype);
  add_regularizer(kernel_, opt_.kernel_regularizer);
  if (opt_.use_bias) {
    bias_ = add_weight("bias", {filters_}, opt_.bias_initializer, conv_fans(ks), true, opt_.dtype);
    add_regularizer(bias_, opt_.bias_regularizer);
  }
}

Tensor Conv2D::forward(const Tensor& given) {
  check_input("Conv2D", name(), given.shape(), kernel_.shape()[1] * opt_.groups, opt_.data_format);
  const Tensor x = to_nchw(given, opt_.data_format);
  // Eager on the CPU: the convolution op with the bias and a linear or built-in ReLU activation
  // inside, conv2d_bias_act (one oneDNN primitive for f32; its gradient is the separate ops',
  // issue 5; its kernel follows bf16 autocast as conv2d's does).
  bool relu_act = false;
  if (fusion::fused_op_state_ok() && fusion::fused_inference_activation(opt_.activation, &relu_act) &&
      x.device().is_cpu() && kernel_.value().device().is_cpu() && x.dtype() == opt_.dtype)
    return from_nchw(
        detail::conv2d_bias_act(x, kernel_.value(), opt_.use_bias ? bias_.value() : Tensor(),
                                opt_.strides, opt_.padding, opt_.dilation_rate, opt_.groups,
                                relu_act),
        opt_.data_format);
  Tensor y = conv2d(to_layer_dtype(x, opt_.dtype), kernel_.value(), opt_.strides, opt_.padding,
                    opt_.dilation_rate, opt_.groups);
  if (opt_.use_bias) y = add_bias(y, bias_);
  return from_nchw(opt_.activation(y), opt_.data_format);
}

// ---- Conv1D ----------------------------------------------------------------------------------

Conv1D::Conv1D(std::int64_t filters, std::int64_t kernel_size, Conv1DOptions options)
    : filters_(filters), kernel_size_(kernel_size), opt_(std::move(options)) {
  if (filters <= 0) fail("Conv1D", "filters must be positive, got ", filters);
  check_positive("Conv1D", "kernel_size", Size2(1, kernel_size));
  check_positive("Conv1D", "strides", Size2(1, opt_.strides));
  check_positive("Conv1D", "dilation_rate", Size2(1, opt_.dilation_rate));
  if (opt_.groups < 1 || filters % opt_.groups != 0)
    fail("Conv1D", "groups=", opt_.groups, " must be >= 1 and divide filters=", filters);
  if (!is_floating(opt_.dtype)) fail("Conv1D", "dtype must be floating, got ", opt_.dtype);
}

namespace {
void check_input_1d(const std::string& name, const Shape& s, std::int64_t channels) {
  if (s.size() != 3)
    fail("Conv1D", "layer '", name, "' expects 3-d inputs [batch, channels, width], got ",
         shape_str(s));
  if (channels >= 0 && s[1] != channels)
    fail("Conv1D", "layer '", name, "' was built for ", channels, " input channels, got input ",
         shape_str(s));
}
}  // namespace

Shape Conv1D::output_shape(const Shape& s) {
  check_input_1d(name(), s, kernel_.defined() ? kernel_.shape()[1] * opt_.groups : -1);
  if (s[1] % opt_.groups != 0)
    fail("Conv1D", "layer '", name(), "': groups=", opt_.groups, " does not divide the input's ",
         s[1], " channels (input ", shape_str(s), ")");
  // conv1d is conv2d over a height-1 image: its shape rule, with the height dropped.
  const Padding p = opt_.padding.mode() == Padding::Mode::explicit_
                        ? Padding(0, 0, opt_.padding.pads()[2], opt_.padding.pads()[3])
                        : opt_.padding;
  Shape out = conv2d_output_shape({1, s[1], 1, s[2]},
                                  {filters_, s[1] / opt_.groups, 1, kernel_size_},
                                  Size2(1, opt_.strides), p, Size2(1, opt_.dilation_rate),
                                  opt_.groups);
  return {s[0], out[1], out[3]};
}

void Conv1D::build(const Shape& s) {
  check_input_1d(name(), s, -1);
  output_shape(s);  // every shape check before any weight is made
  const Shape ks{filters_, s[1] / opt_.groups, kernel_size_};
  kernel_ = add_weight("kernel", ks, opt_.kernel_initializer, conv_fans(ks), true, opt_.dtype);
  add_regularizer(kernel_, opt_.kernel_regularizer);
  if (opt_.use_bias) {
    bias_ = add_weight("bias", {filters_}, opt_.bias_initializer, conv_fans(ks), true, opt_.dtype);
    add_regularizer(bias_, opt_.bias_regularizer);
  }
}

Tensor Conv1D::forward(const Tensor& x) {
  check_input_1d(name(), x.shape(), kernel_.shape()[1] * opt_.groups);
  Tensor y = conv1d(to_layer_dtype(x, opt_.dtype), kernel_.value(), opt_.strides, opt_.padding,
                    opt_.dilation_rate, opt_.groups);
  if (opt_.use_bias) y = y + reshape(bias_.value(), {1, filters_, 1});
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

Shape Conv2DTranspose::output_shape(const Shape& given) {
  check_input("Conv2DTranspose", name(), given, kernel_.defined() ? kernel_.shape()[0] : -1,
              opt_.data_format);
  const Shape s = nchw_shape(given, opt_.data_format);
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
  return from_nchw_shape(out, opt_.data_format);
}

void Conv2DTranspose::build(const Shape& given) {
  output_shape(given);
  const Shape s = nchw_shape(given, opt_.data_format);
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

Tensor Conv2DTranspose::forward(const Tensor& given) {
  check_input("Conv2DTranspose", name(), given.shape(), kernel_.shape()[0], opt_.data_format);
  const Tensor x = to_nchw(given, opt_.data_format);
  Tensor y = conv2d_transpose(to_layer_dtype(x, opt_.dtype), kernel_.value(), opt_.strides,
                              opt_.padding, opt_.output_padding, opt_.dilation_rate, opt_.groups);
  if (opt_.use_bias) y = add_bias(y, bias_);
  return from_nchw(opt_.activation(y), opt_.data_format);
}

// ---- pooling --------------------------------------------------------------------------------

namespace {
Shape pooled_shape(const char* layer, const std::string& name, const Shape& given, Size2 pool,
                   Size2 strides, const Padding& padding, DataFormat f) {
  check_input(layer, name, given, -1, f);
  Shape batch1 = nchw_shape(given, f);
  batch1[0] = 1;
  Shape out = pool2d_output_shape(batch1, pool, strides, padding);
  out[0] = given[0];
  return from_nchw_shape(out, f);
}
}  // namespace

MaxPool2D::MaxPool2D(Size2 pool_size, std::optional<Size2> strides, Padding padding,
                     DataFormat data_format)
    : pool_(pool_size), strides_(strides.value_or(pool_size)), padding_(std::move(padding)),
      data_format_(data_format) {
  check_positive("MaxPool2D", "pool_size", pool_);
  check_positive("MaxPool2D", "strides", strides_);
}

Shape MaxPool2D::output_shape(const Shape& s) {
  return pooled_shape("MaxPool2D", name(), s, pool_, strides_, padding_, data_format_);
}

Tensor MaxPool2D::forward(const Tensor& x) {
  check_input("MaxPool2D", name(), x.shape(), -1, data_format_);
  return from_nchw(max_pool2d(to_nchw(x, data_format_), pool_, strides_, padding_), data_format_);
}

AvgPool2D::AvgPool2D(Size2 pool_size, std::optional<Size2> strides, Padding padding,
                     DataFormat data_format)
    : pool_(pool_size), strides_(strides.value_or(pool_size)), padding_(std::move(padding)),
      data_format_(data_format) {
  check_positive("AvgPool2D", "pool_size", pool_);
  check_positive("AvgPool2D", "strides", strides_);
}

Shape AvgPool2D::output_shape(const Shape& s) {
  return pooled_shape("AvgPool2D", name(), s, pool_, strides_, padding_, data_format_);
}

Tensor AvgPool2D::forward(const Tensor& x) {
  check_input("AvgPool2D", name(), x.shape(), -1, data_format_);
  return from_nchw(avg_pool2d(to_nchw(x, data_format_), pool_, strides_, padding_), data_format_);
}

Shape GlobalAveragePooling2D::output_shape(const Shape& s) {
  check_input("GlobalAveragePooling2D", name(), s, -1, data_format_);
  if (last(data_format_)) return keepdims_ ? Shape{s[0], 1, 1, s[3]} : Shape{s[0], s[3]};
  return keepdims_ ? Shape{s[0], s[1], 1, 1} : Shape{s[0], s[1]};
}

Tensor GlobalAveragePooling2D::forward(const Tensor& x) {
  check_input("GlobalAveragePooling2D", name(), x.shape(), -1, data_format_);
  // The spatial axes are reduced in place: no transpose needed.
  return last(data_format_) ? mean(x, {1, 2}, keepdims_) : mean(x, {2, 3}, keepdims_);
}

}  // namespace soma::nn
