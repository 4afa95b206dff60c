#include "soma/nn/conv.hpp"

#include <limits>

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

// ---- 3-d convolution and pooling --------------------------------------------------------------

namespace {

// One value for all three axes, or three; each >= 1.
Size3 size3(const char* layer, const char* what, const Size3& v) {
  if (v.size() != 1 && v.size() != 3)
    fail(layer, what, " needs 1 or 3 values {depth, height, width}, got ", v.size());
  for (auto e : v)
    if (e < 1) fail(layer, what, " must be positive, got ", shape_str(Shape(v.begin(), v.end())));
  return v.size() == 3 ? v : Size3{v[0], v[0], v[0]};
}

void check_valid_or_same(const char* layer, const Padding& p) {
  if (p.mode() == Padding::Mode::explicit_)
    fail(layer, "padding must be \"valid\" or \"same\", got ", p.str());
}

void check_input_3d(const char* layer, const std::string& name, const Shape& s,
                    std::int64_t channels, DataFormat f) {
  if (s.size() != 5)
    fail(layer, "layer '", name, "' expects 5-d inputs ",
         last(f) ? "[batch, depth, height, width, channels] (channels_last)"
                 : "[batch, channels, depth, height, width]",
         ", got ", shape_str(s));
  if (channels >= 0 && s[last(f) ? 4 : 1] != channels)
    fail(layer, "layer '", name, "' was built for ", channels, " input channels, got input ",
         shape_str(s));
}

Shape ncdhw_shape(const Shape& s, DataFormat f) {
  return last(f) ? Shape{s[0], s[4], s[1], s[2], s[3]} : s;
}
Shape from_ncdhw_shape(const Shape& s, DataFormat f) {
  return last(f) ? Shape{s[0], s[2], s[3], s[4], s[1]} : s;
}
Tensor to_ncdhw(const Tensor& x, DataFormat f) {
  return last(f) ? contiguous(transpose(x, {0, 4, 1, 2, 3})) : x;
}
Tensor from_ncdhw(const Tensor& y, DataFormat f) {
  return last(f) ? contiguous(transpose(y, {0, 2, 3, 4, 1})) : y;
}

// The windows of one 3-d layer over an NCDHW shape: per axis the padding (TensorFlow's "same"
// rule, as resolve_padding gives conv2d) and the output extent; a window that does not fit the
// (padded) input is an error naming the layer, the input and the window.
struct Windows3 {
  std::array<std::int64_t, 6> pads{};  // {front, back, top, bottom, left, right}
  std::array<std::int64_t, 3> out{};
};
Windows3 windows3(const char* layer, const std::string& name, const Shape& given, const Shape& s,
                  const Size3& k, const Size3& st, const Size3& dil, const Padding& padding) {
  Windows3 r;
  const auto dh = resolve_padding(padding, s[2], s[3], Size2(k[0], k[1]), Size2(st[0], st[1]),
                                  Size2(dil[0], dil[1]));
  const auto hw = resolve_padding(padding, s[3], s[4], Size2(k[1], k[2]), Size2(st[1], st[2]),
                                  Size2(dil[1], dil[2]));
  r.pads = {dh[0], dh[1], hw[0], hw[1], hw[2], hw[3]};
  for (std::size_t a = 0; a < 3; ++a) {
    const std::int64_t in = s[a + 2], keff = (k[a] - 1) * dil[a] + 1;
    const std::int64_t span = in + r.pads[2 * a] + r.pads[2 * a + 1];
    if (in < 1 || keff > span)
      fail(layer, "layer '", name, "': the window ", shape_str(Shape(k.begin(), k.end())),
           " (dilation ", shape_str(Shape(dil.begin(), dil.end())), ") does not fit input ",
           shape_str(given), " with padding ", padding.str(), " (axis ", a + 2, " is ", in,
           ", the window spans ", keff, ")");
    r.out[a] = (span - keff) / st[a] + 1;
  }
  return r;
}

}  // namespace

Conv3D::Conv3D(std::int64_t filters, Size3 kernel_size, Conv3DOptions options)
    : filters_(filters), opt_(std::move(options)) {
  if (filters <= 0) fail("Conv3D", "filters must be positive, got ", filters);
  kernel_size_ = size3("Conv3D", "kernel_size", kernel_size);
  opt_.strides = size3("Conv3D", "strides", opt_.strides);
  opt_.dilation_rate = size3("Conv3D", "dilation_rate", opt_.dilation_rate);
  check_valid_or_same("Conv3D", opt_.padding);
  if (opt_.groups < 1 || filters % opt_.groups != 0)
    fail("Conv3D", "groups=", opt_.groups, " must be >= 1 and divide filters=", filters);
  if (!is_floating(opt_.dtype)) fail("Conv3D", "dtype must be floating, got ", opt_.dtype);
}

std::array<std::int64_t, 6> Conv3D::pads(const Shape& given) const {
  check_input_3d("Conv3D", name(), given, -1, opt_.data_format);
  return windows3("Conv3D", name(), given, ncdhw_shape(given, opt_.data_format), kernel_size_,
                  opt_.strides, opt_.dilation_rate, opt_.padding)
      .pads;
}

Shape Conv3D::output_shape(const Shape& given) {
  check_input_3d("Conv3D", name(), given,
                 kernel_.defined() ? kernel_.shape()[1] * opt_.groups : -1, opt_.data_format);
  const Shape s = ncdhw_shape(given, opt_.data_format);
  if (s[1] % opt_.groups != 0)
    fail("Conv3D", "layer '", name(), "': groups=", opt_.groups, " does not divide the input's ",
         s[1], " channels (input ", shape_str(given), ")");
  const auto w = windows3("Conv3D", name(), given, s, kernel_size_, opt_.strides,
                          opt_.dilation_rate, opt_.padding);
  return from_ncdhw_shape({s[0], filters_, w.out[0], w.out[1], w.out[2]}, opt_.data_format);
}

void Conv3D::build(const Shape& given) {
  output_shape(given);  // every shape check before any weight is made
  const Shape s = ncdhw_shape(given, opt_.data_format);
  const Shape ks{filters_, s[1] / opt_.groups, kernel_size_[0], kernel_size_[1], kernel_size_[2]};
  kernel_ = add_weight("kernel", ks, opt_.kernel_initializer, conv_fans(ks), true, opt_.dtype);
  add_regularizer(kernel_, opt_.kernel_regularizer);
  if (opt_.use_bias) {
    bias_ = add_weight("bias", {filters_}, opt_.bias_initializer, conv_fans(ks), true, opt_.dtype);
    add_regularizer(bias_, opt_.bias_regularizer);
  }
}

Tensor Conv3D::forward(const Tensor& given) {
  output_shape(given.shape());  // the layer's own message for a window that does not fit
  const auto p = pads(given.shape());
  const Tensor x = to_ncdhw(given, opt_.data_format);
  const auto& st = opt_.strides;
  const auto& dil = opt_.dilation_rate;
  Tensor y = conv3d(to_layer_dtype(x, opt_.dtype), kernel_.value(), {st[0], st[1], st[2]}, p,
                    {dil[0], dil[1], dil[2]}, opt_.groups);
  if (opt_.use_bias) y = y + reshape(bias_.value(), {1, filters_, 1, 1, 1});
  return from_ncdhw(opt_.activation(y), opt_.data_format);
}

Pool3D::Pool3D(bool max, Size3 pool_size, std::optional<Size3> strides, Padding padding,
               DataFormat data_format)
    : max_(max), padding_(std::move(padding)), data_format_(data_format) {
  const char* layer = max ? "MaxPool3D" : "AvgPool3D";
  pool_ = size3(layer, "pool_size", pool_size);
  strides_ = size3(layer, "strides", strides.value_or(pool_));
  check_valid_or_same(layer, padding_);
}

Shape Pool3D::output_shape(const Shape& given) {
  const char* layer = max_ ? "MaxPool3D" : "AvgPool3D";
  check_input_3d(layer, name(), given, -1, data_format_);
  const Shape s = ncdhw_shape(given, data_format_);
  const auto w = windows3(layer, name(), given, s, pool_, strides_, {1, 1, 1}, padding_);
  return from_ncdhw_shape({s[0], s[1], w.out[0], w.out[1], w.out[2]}, data_format_);
}

// H and W through the 2-d pooling op on [N, C*D, H, W]; then D as a max (or sum) of kd strided
// depth slices. Average: the 2-d op divides by the real elements of each H x W window, the depth
// step by the real planes of each depth window, which is the 3-d window's real count.
Tensor Pool3D::forward(const Tensor& given) {
  const char* layer = max_ ? "MaxPool3D" : "AvgPool3D";
  check_input_3d(layer, name(), given.shape(), -1, data_format_);
  const Shape s = ncdhw_shape(given.shape(), data_format_);
  const auto w = windows3(layer, name(), given.shape(), s, pool_, strides_, {1, 1, 1}, padding_);
  const auto& p = w.pads;
  const Tensor x = to_ncdhw(given, data_format_);
  const Tensor x2 = reshape(x, {s[0], s[1] * s[2], s[3], s[4]});
  const Padding hw(p[2], p[3], p[4], p[5]);
  const Size2 k2(pool_[1], pool_[2]), s2(strides_[1], strides_[2]);
  const Tensor y2 = max_ ? max_pool2d(x2, k2, s2, hw) : avg_pool2d(x2, k2, s2, hw);
  Tensor y = reshape(y2, {s[0], s[1], s[2], w.out[1], w.out[2]});
  if (p[0] || p[1])
    y = pad(y, {{0, 0}, {0, 0}, {p[0], p[1]}, {0, 0}, {0, 0}},
            max_ ? -std::numeric_limits<double>::infinity() : 0.0);
  const std::int64_t od = w.out[0], sd = strides_[0];
  Tensor acc;
  for (std::int64_t k = 0; k < pool_[0]; ++k) {
    const Tensor t = slice(y, {Slice{}, Slice{}, Slice{k, k + (od - 1) * sd + 1, sd}});
    acc = !acc.defined() ? t : max_ ? maximum(acc, t) : acc + t;
  }
  if (!max_) {
    std::vector<double> count(static_cast<std::size_t>(od), 0.0);
    for (std::int64_t o = 0; o < od; ++o)
      for (std::int64_t k = 0; k < pool_[0]; ++k) {
        const std::int64_t q = o * sd + k - p[0];
        if (q >= 0 && q < s[2]) count[std::size_t(o)] += 1.0;
      }
    acc = acc / cast(constant(count, Shape{1, 1, od, 1, 1}), acc.dtype()).to(acc.device());
  }
  return from_ncdhw(acc, data_format_);
}

namespace {
const char* global_name(bool max, std::int64_t spatial) {
  if (!max) return spatial == 3 ? "GlobalAveragePooling3D" : "GlobalAveragePooling";
  return spatial == 2 ? "GlobalMaxPooling2D" : spatial == 1 ? "GlobalMaxPooling1D" : "GlobalMaxPooling";
}
}  // namespace

Shape GlobalPooling::output_shape(const Shape& s) {
  const char* layer = global_name(max_, spatial_);
  if (std::int64_t(s.size()) != spatial_ + 2)
    fail(layer, "layer '", name(), "' expects ", spatial_ + 2, "-d inputs ",
         last(data_format_) ? "[batch, spatial..., channels] (channels_last)"
                            : "[batch, channels, spatial...]",
         ", got ", shape_str(s));
  const std::int64_t c = last(data_format_) ? s.back() : s[1];
  if (!keepdims_) return {s[0], c};
  Shape out(s.size(), 1);
  out[0] = s[0];
  out[last(data_format_) ? s.size() - 1 : 1] = c;
  return out;
}

Tensor GlobalPooling::forward(const Tensor& x) {
  output_shape(x.shape());
  Axes axes;
  for (std::int64_t a = 0; a < spatial_; ++a) axes.push_back(last(data_format_) ? 1 + a : 2 + a);
  return max_ ? max(x, axes, keepdims_) : mean(x, axes, keepdims_);
}

}  // namespace soma::nn
