#include "soma/nn/normalization.hpp"

#include "soma/autograd.hpp"
#include "soma/nn/config.hpp"

namespace soma::nn {

namespace {
Tensor to_dtype(const Tensor& x, DType t) { return x.dtype() == t ? x : cast(x, t); }
Axes to_axes(const std::vector<int>& v) { return Axes(v.begin(), v.end()); }
}  // namespace

// ---- BatchNormalization ---------------------------------------------------------------------

BatchNormalization::BatchNormalization(BatchNormOptions options) : opt_(std::move(options)) {
  if (!(opt_.momentum >= 0.0 && opt_.momentum <= 1.0))
    fail("BatchNormalization", "momentum must be in [0, 1], got ", opt_.momentum);
  if (!(opt_.epsilon > 0.0)) fail("BatchNormalization", "epsilon must be positive, got ", opt_.epsilon);
  if (!is_floating(opt_.dtype))
    fail("BatchNormalization", "dtype must be floating, got ", opt_.dtype);
}

void BatchNormalization::build(const Shape& s) {
  rank_ = std::int64_t(s.size());
  if (rank_ < 2)
    fail("BatchNormalization", "layer '", name(), "' needs inputs of rank >= 2, got ", shape_str(s));
  axis_ = normalize_axis(opt_.axis, rank_, "BatchNormalization");
  if (axis_ == 0)
    fail("BatchNormalization", "layer '", name(), "': axis ", opt_.axis,
         " is the batch axis; choose the feature axis (1 for NCHW, -1 for channels last)");
  std::int64_t c = s[std::size_t(axis_)];
  if (c <= 0)
    fail("BatchNormalization", "layer '", name(), "': the size of axis ", opt_.axis,
         " must be known, got input shape ", shape_str(s));
  Fans f{double(c), double(c)};
  if (opt_.scale) {
    gamma_ = add_weight("gamma", {c}, opt_.gamma_initializer, f, true, opt_.dtype);
    add_regularizer(gamma_, opt_.gamma_regularizer);
  }
  if (opt_.center) {
    beta_ = add_weight("beta", {c}, opt_.beta_initializer, f, true, opt_.dtype);
    add_regularizer(beta_, opt_.beta_regularizer);
  }
  moving_mean_ = add_weight("moving_mean", {c}, opt_.moving_mean_initializer, f, false, opt_.dtype);
  moving_variance_ =
      add_weight("moving_variance", {c}, opt_.moving_variance_initializer, f, false, opt_.dtype);
}

Tensor BatchNormalization::forward(const Tensor& input) {
  std::int64_t c = moving_mean_.shape()[0];
  if (input.rank() != rank_ || input.dim(axis_) != c)
    fail("BatchNormalization", "layer '", name(), "' was built for inputs of rank ", rank_,
         " with ", c, " features on axis ", axis_, ", got shape ", shape_str(input.shape()));
  Tensor x = to_dtype(input, opt_.dtype);
  Shape bshape(std::size_t(rank_), 1);
  bshape[std::size_t(axis_)] = c;
  Tensor mean, var;
  if (training() && trainable()) {  // a frozen layer runs in inference mode (Keras)
    Axes reduce;
    for (std::int64_t a = 0; a < rank_; ++a)
      if (a != axis_) reduce.push_back(a);
    mean = soma::mean(x, reduce, true);
    var = soma::mean(square(x - mean), reduce, true);  // biased, as Keras normalises
    NoGradScope no_grad;
    double m = opt_.momentum;
    moving_mean_.assign(moving_mean_.value() * m + reshape(mean, {c}) * (1.0 - m));
    moving_variance_.assign(moving_variance_.value() * m + reshape(var, {c}) * (1.0 - m));
  } else {
    mean = reshape(moving_mean_.value(), bshape);
    var = reshape(moving_variance_.value(), bshape);
  }
  Tensor y = (x - mean) * rsqrt(var + opt_.epsilon);
  if (opt_.scale) y = y * reshape(gamma_.value(), bshape);
  if (opt_.center) y = y + reshape(beta_.value(), bshape);
  return y;
}

// ---- LayerNormalization ---------------------------------------------------------------------

LayerNormalization::LayerNormalization(LayerNormOptions options) : opt_(std::move(options)) {
  if (opt_.axis.empty()) fail("LayerNormalization", "axis must name at least one axis");
  if (!(opt_.epsilon > 0.0)) fail("LayerNormalization", "epsilon must be positive, got ", opt_.epsilon);
  if (!is_floating(opt_.dtype))
    fail("LayerNormalization", "dtype must be floating, got ", opt_.dtype);
}

void LayerNormalization::build(const Shape& s) {
  rank_ = std::int64_t(s.size());
  if (rank_ < 2)
    fail("LayerNormalization", "layer '", name(), "' needs inputs of rank >= 2, got ", shape_str(s));
  axes_ = normalize_axes(opt_.axis, rank_, "LayerNormalization");
  Shape pshape;
  for (int a : axes_) {
    if (a == 0)
      fail("LayerNormalization", "layer '", name(), "': cannot normalise over the batch axis 0");
    if (s[std::size_t(a)] <= 0)
      fail("LayerNormalization", "layer '", name(), "': the size of axis ", a,
           " must be known, got input shape ", shape_str(s));
    pshape.push_back(s[std::size_t(a)]);
  }
  input_shape_ = s;
  Fans f = dense_fans(pshape);
  if (opt_.scale) {
    gamma_ = add_weight("gamma", pshape, opt_.gamma_initializer, f, true, opt_.dtype);
    add_regularizer(gamma_, opt_.gamma_regularizer);
  }
  if (opt_.center) {
    beta_ = add_weight("beta", pshape, opt_.beta_initializer, f, true, opt_.dtype);
    add_regularizer(beta_, opt_.beta_regularizer);
  }
}

Tensor LayerNormalization::forward(const Tensor& input) {
  bool ok = input.rank() == rank_;
  for (int a : axes_) ok = ok && input.dim(a) == input_shape_[std::size_t(a)];
  if (!ok)
    fail("LayerNormalization", "layer '", name(), "' was built for inputs of shape ",
         shape_str(input_shape_), " (normalising over axes ", shape_str(to_axes(axes_)),
         "), got ", shape_str(input.shape()));
  Tensor x = to_dtype(input, opt_.dtype);
  Axes axes = to_axes(axes_);
  Tensor centred = x - soma::mean(x, axes, true);  // once: forward and backward use it twice
  Tensor var = soma::mean(square(centred), axes, true);
  Tensor y = centred * rsqrt(var + opt_.epsilon);
  Shape bshape(std::size_t(rank_), 1);
  for (int a : axes_) bshape[std::size_t(a)] = input.dim(a);
  if (opt_.scale) y = y * reshape(gamma_.value(), bshape);
  if (opt_.center) y = y + reshape(beta_.value(), bshape);
  return y;
}

// ---- RMSNormalization -----------------------------------------------------------------------

RMSNormalization::RMSNormalization(RMSNormOptions options) : opt_(std::move(options)) {
  if (opt_.axis.empty()) fail("RMSNormalization", "axis must name at least one axis");
  if (!(opt_.epsilon > 0.0)) fail("RMSNormalization", "epsilon must be positive, got ", opt_.epsilon);
  if (!is_floating(opt_.dtype)) fail("RMSNormalization", "dtype must be floating, got ", opt_.dtype);
}

void RMSNormalization::visit_config(ConfigVisitor& v) {
  v.field("axis", opt_.axis);
  v.field("epsilon", opt_.epsilon);
  v.field("scale_initializer", opt_.scale_initializer);
  v.field("scale_regularizer", opt_.scale_regularizer);
  v.field("dtype", opt_.dtype);
}

void RMSNormalization::build(const Shape& s) {
  rank_ = std::int64_t(s.size());
  if (rank_ < 2)
    fail("RMSNormalization", "layer '", name(), "' needs inputs of rank >= 2, got ", shape_str(s));
  axes_ = normalize_axes(opt_.axis, rank_, "RMSNormalization");
  Shape pshape;
  for (int a : axes_) {
    if (a == 0) fail("RMSNormalization", "layer '", name(), "': cannot normalise over the batch axis 0");
    if (s[std::size_t(a)] <= 0)
      fail("RMSNormalization", "layer '", name(), "': the size of axis ", a,
           " must be known, got input shape ", shape_str(s));
    pshape.push_back(s[std::size_t(a)]);
  }
  input_shape_ = s;
  scale_ = add_weight("scale", pshape, opt_.scale_initializer, dense_fans(pshape), true, opt_.dtype);
  add_regularizer(scale_, opt_.scale_regularizer);
}

Tensor RMSNormalization::forward(const Tensor& input) {
  bool ok = input.rank() == rank_;
  for (int a : axes_) ok = ok && input.dim(a) == input_shape_[std::size_t(a)];
  if (!ok)
    fail("RMSNormalization", "layer '", name(), "' was built for inputs of shape ",
         shape_str(input_shape_), " (normalising over axes ", shape_str(to_axes(axes_)), "), got ",
         shape_str(input.shape()));
  Tensor x = to_dtype(input, opt_.dtype);
  Tensor y = x * rsqrt(soma::mean(square(x), to_axes(axes_), true) + opt_.epsilon);
  Shape bshape(std::size_t(rank_), 1);
  for (int a : axes_) bshape[std::size_t(a)] = input.dim(a);
  return y * reshape(scale_.value(), bshape);
}

}  // namespace soma::nn
