// Lowerings of the nn layers (soma/nn/lowering.hpp): each layer describes itself as ops, which a
// consumer (the ONNX exporter) turns into its own graph. Weights are read in eval mode.
#include "soma/nn/lowering.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "soma/nn/conv.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/module.hpp"
#include "soma/nn/normalization.hpp"
#include "soma/nn/preprocessing.hpp"
#include "soma/nn/recurrent.hpp"
#include "soma/nn_ops.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

namespace {

using Values = std::vector<LoweredValue>;
using Ints = std::vector<std::int64_t>;

std::string keras_shape(const Shape& shape) {  // "(None, 3)", as summary() writes shapes
  std::ostringstream os;
  os << "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) os << ", ";
    if (shape[i] < 0) os << "None";
    else os << shape[i];
  }
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

std::int64_t norm_axis(std::int64_t a, std::int64_t rank) { return a < 0 ? a + rank : a; }

const LoweredValue& one_input(Lowering& l, const Module& m, const Values& in) {
  if (in.size() != 1)
    l.fail(describe(m) + " takes one input in an ONNX export, got " + std::to_string(in.size()));
  return in[0];
}

void need_hw(Lowering& l, const Module& m, const Shape& s) {
  if (s.size() != 4 || s[2] < 0 || s[3] < 0)
    l.fail(describe(m) + ": needs an input [N, C, H, W] with known H and W, got " + keras_shape(s));
}

// channels_last layers: Transpose nodes around the NCHW node, as the forward does.
LoweredValue lowered_nchw(Lowering& l, const LoweredValue& x, DataFormat f) {
  if (f != DataFormat::channels_last || x.shape.size() != 4) return x;
  const Shape& s = x.shape;
  return {l.emit1("transpose", {x.name}, {{"perm", Ints{0, 3, 1, 2}}}), Shape{s[0], s[3], s[1], s[2]}};
}
std::string lowered_from_nchw(Lowering& l, const std::string& y, DataFormat f) {
  if (f != DataFormat::channels_last) return y;
  return l.emit1("transpose", {y}, {{"perm", Ints{0, 2, 3, 1}}});
}

// ---- activations ----------------------------------------------------------------------------

std::string gelu(Lowering& l, const std::string& x, const Attrs& a) {
  std::string inner;
  if (!a.b("approximate")) {  // 0.5 x (1 + erf(x / sqrt 2))
    inner = l.emit1("erf", {l.emit1("divide", {x, l.scalar(std::sqrt(2.0))})});
  } else {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    auto x3 = l.emit1("multiply", {l.emit1("multiply", {x, x}), x});
    auto s = l.emit1("add", {x, l.emit1("multiply", {x3, l.scalar(0.044715)})});
    const double k = std::sqrt(2.0 / std::numbers::pi);
    inner = l.emit1("tanh", {l.emit1("multiply", {s, l.scalar(k)})});
  }
  auto one_plus = l.emit1("add", {inner, l.scalar(1.0)});
  auto half_x = l.emit1("multiply", {x, l.scalar(0.5)});
  return l.emit1("multiply", {half_x, one_plus});
}
std::string swish(Lowering& l, const std::string& x, const Attrs&) {
  return l.emit1("multiply", {x, l.emit1("sigmoid", {x})});
}
std::string step(Lowering& l, const std::string& x, const Attrs&) {  // 1 where x >= 0
  return l.emit1("cast", {l.emit1("greater_equal", {x, l.scalar(0.0)})},
                 {{"dtype", l.float_dtype()}});
}
std::string identity(Lowering&, const std::string& x, const Attrs&) { return x; }

// An activation's attributes (those its function fixes) and, where soma has no op of its name,
// its composition. Any other activation lowers to the op of its name.
struct ActivationLowering {
  std::string name;
  Attrs attrs;
  std::string (*compose)(Lowering&, const std::string& x, const Attrs&) = nullptr;
};
const std::vector<ActivationLowering>& activation_lowerings() {
  static const std::vector<ActivationLowering> table = {
      {"linear", {}, identity},
      {"leaky_relu", {{"alpha", 0.2}}},  // the function's slope; the LeakyReLU layer has its own
      {"elu", {{"alpha", 1.0}}},
      {"softmax", {{"axis", std::int64_t(-1)}}},
      {"log_softmax", {{"axis", std::int64_t(-1)}}},
      {"gelu", {{"approximate", false}}, gelu},
      {"swish", {}, swish},
      {"step", {}, step},
  };
  return table;
}

}  // namespace

std::string describe(const Module& m) { return "layer '" + m.name() + "' (" + m.type_name() + ")"; }

std::string lower_activation(Lowering& l, const Activation& a, const std::string& x,
                             const Attrs& attrs) {
  if (a.is_linear()) return x;
  const auto& table = activation_lowerings();
  auto it = std::find_if(table.begin(), table.end(), [&](auto& e) { return e.name == a.name; });
  Attrs all = it != table.end() ? it->attrs : Attrs{};
  for (auto& [k, v] : attrs.items()) all.set(k, v);
  if (it != table.end() && it->compose) return it->compose(l, x, all);
  if (!l.supports(a.name)) l.unsupported("activation '" + a.name + "'");
  return l.emit1(a.name, {x}, all);
}

std::vector<LoweredValue> Module::lower(Lowering& l, const std::vector<LoweredValue>&) {
  l.unsupported("");
  return {};
}

// ---- core layers ----------------------------------------------------------------------------

Values Dense::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  std::string k = l.weight("kernel", kernel().value());
  std::string y;
  if (x.shape.size() == 2) {
    std::vector<std::string> args{x.name, k};
    if (bias().defined()) args.push_back(l.weight("bias", bias().value()));
    y = l.emit1("dense", args);
  } else {
    y = l.emit1("matmul", {x.name, k});
    if (bias().defined()) y = l.emit1("add", {y, l.weight("bias", bias().value())});
  }
  return {{lower_activation(l, activation(), y), output_shape(x.shape)}};
}

Values Flatten::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  return {{l.emit1("flatten", {x.name}, {{"axis", std::int64_t(1)}}), output_shape(x.shape)}};
}

Values Reshape::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  const auto& t = target_shape();
  const bool has_minus = std::find(t.begin(), t.end(), -1) != t.end();
  Ints s{has_minus ? 0 : -1};  // 0 copies the batch extent
  for (auto e : t) s.push_back(e);
  return {{l.emit1("reshape", {x.name}, {{"shape", s}}), output_shape(x.shape)}};
}

Values Dropout::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  return {{l.emit1("dropout", {x.name}, {{"rate", rate()}}), x.shape}};
}

Values ActivationLayer::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  return {{lower_activation(l, activation(), x.name), x.shape}};
}
Values LeakyReLU::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  return {{lower_activation(l, activation(), x.name, {{"alpha", alpha()}}), x.shape}};
}
Values ELU::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  return {{lower_activation(l, activation(), x.name, {{"alpha", alpha()}}), x.shape}};
}
Values GELU::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  return {{lower_activation(l, activation(), x.name, {{"approximate", approximate()}}), x.shape}};
}
Values Softmax::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  return {{lower_activation(l, activation(), x.name, {{"axis", axis()}}), x.shape}};
}

Values Embedding::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  // Floating indices are truncated, as the layer does (a cast rounds toward zero).
  auto idx = l.emit1("cast", {x.name}, {{"dtype", DType::i64}});
  auto y = l.emit1("gather", {l.weight("embeddings", embeddings().value()), idx},
                   {{"axis", std::int64_t(0)}});
  return {{y, output_shape(x.shape)}};
}

// ---- convolution and pooling ----------------------------------------------------------------

Values Conv2D::lower(Lowering& l, const Values& in) {
  const auto& given = one_input(l, *this, in);
  const auto& o = options();
  const LoweredValue x = lowered_nchw(l, given, o.data_format);
  need_hw(l, *this, x.shape);
  auto ks = kernel_size();
  auto p = resolve_padding(o.padding, x.shape[2], x.shape[3], ks, o.strides, o.dilation_rate);
  std::vector<std::string> args{x.name, l.weight("kernel", kernel().value())};
  if (bias().defined()) args.push_back(l.weight("bias", bias().value()));
  auto y = l.emit1("conv2d", args,
                   {{"kernel_size", Ints{ks.h, ks.w}},
                    {"strides", Ints{o.strides.h, o.strides.w}},
                    {"dilation", Ints{o.dilation_rate.h, o.dilation_rate.w}},
                    {"pads", Ints{p[0], p[1], p[2], p[3]}},
                    {"groups", o.groups}});
  return {{lowered_from_nchw(l, lower_activation(l, o.activation, y), o.data_format),
           output_shape(given.shape)}};
}

// ONNX Conv with a 1-d kernel (the weight stays [filters, in/groups, k]).
Values Conv1D::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  if (x.shape.size() != 3 || x.shape[2] < 0)
    l.fail(describe(*this) + ": needs an input [N, C, W] with known W, got " + keras_shape(x.shape));
  const auto& o = options();
  const Padding pad = o.padding.mode() == Padding::Mode::explicit_
                          ? Padding(0, 0, o.padding.pads()[2], o.padding.pads()[3])
                          : o.padding;
  auto p = resolve_padding(pad, 1, x.shape[2], Size2(1, kernel_size()), Size2(1, o.strides),
                           Size2(1, o.dilation_rate));
  std::vector<std::string> args{x.name, l.weight("kernel", kernel().value())};
  if (bias().defined()) args.push_back(l.weight("bias", bias().value()));
  auto y = l.emit1("conv2d", args,
                   {{"kernel_size", Ints{kernel_size()}},
                    {"strides", Ints{o.strides}},
                    {"dilation", Ints{o.dilation_rate}},
                    {"pads", Ints{p[2], p[3]}},
                    {"groups", o.groups}});
  return {{lower_activation(l, o.activation, y), output_shape(x.shape)}};
}

Values Conv2DTranspose::lower(Lowering& l, const Values& in) {
  const auto& given = one_input(l, *this, in);
  const auto& o = options();
  const LoweredValue x = lowered_nchw(l, given, o.data_format);
  need_hw(l, *this, x.shape);
  auto ks = kernel_size();
  const Shape given_out = output_shape(given.shape);
  const Shape out_shape = o.data_format == DataFormat::channels_last
                              ? Shape{given_out[0], given_out[3], given_out[1], given_out[2]}
                              : given_out;
  const std::int64_t ho = out_shape[2], wo = out_shape[3];
  // The layer pads the forward convolution (output -> input) that it transposes; the same
  // geometry as pads + output_padding: out = s (in - 1) + output_padding + k_eff - pads.
  auto p = resolve_padding(o.padding, ho, wo, ks, o.strides, o.dilation_rate);
  auto keff = [](std::int64_t k, std::int64_t d) { return (k - 1) * d + 1; };
  const std::int64_t oph =
      ho - ((x.shape[2] - 1) * o.strides.h + keff(ks.h, o.dilation_rate.h) - p[0] - p[1]);
  const std::int64_t opw =
      wo - ((x.shape[3] - 1) * o.strides.w + keff(ks.w, o.dilation_rate.w) - p[2] - p[3]);
  std::vector<std::string> args{x.name, l.weight("kernel", kernel().value())};
  if (bias().defined()) args.push_back(l.weight("bias", bias().value()));
  auto y = l.emit1("conv2d_transpose", args,
                   {{"kernel_size", Ints{ks.h, ks.w}},
                    {"strides", Ints{o.strides.h, o.strides.w}},
                    {"dilation", Ints{o.dilation_rate.h, o.dilation_rate.w}},
                    {"pads", Ints{p[0], p[1], p[2], p[3]}},
                    {"groups", o.groups},
                    {"output_padding", Ints{oph, opw}}});
  return {{lowered_from_nchw(l, lower_activation(l, o.activation, y), o.data_format), given_out}};
}

namespace {
Values lower_pool(Lowering& l, Module& m, const Values& in, const char* op, Size2 ps, Size2 st,
                  const Padding& pad, DataFormat f) {
  const auto& given = one_input(l, m, in);
  const LoweredValue x = lowered_nchw(l, given, f);
  need_hw(l, m, x.shape);
  auto p = resolve_padding(pad, x.shape[2], x.shape[3], ps, st);
  auto y = l.emit1(op, {x.name},
                   {{"pool", Ints{ps.h, ps.w}},
                    {"strides", Ints{st.h, st.w}},
                    {"pads", Ints{p[0], p[1], p[2], p[3]}}});
  return {{lowered_from_nchw(l, y, f), m.output_shape(given.shape)}};
}
}  // namespace

Values MaxPool2D::lower(Lowering& l, const Values& in) {
  return lower_pool(l, *this, in, "max_pool2d", pool_size(), strides(), padding(), data_format());
}
Values AvgPool2D::lower(Lowering& l, const Values& in) {
  return lower_pool(l, *this, in, "avg_pool2d", pool_size(), strides(), padding(), data_format());
}
Values GlobalAveragePooling2D::lower(Lowering& l, const Values& in) {
  const auto& given = one_input(l, *this, in);
  const LoweredValue x = lowered_nchw(l, given, data_format());
  auto y = l.emit1("global_avg_pool2d", {x.name});
  if (!keepdims()) y = l.emit1("squeeze", {y}, {{"axes", Ints{2, 3}}});
  else y = lowered_from_nchw(l, y, data_format());
  return {{y, output_shape(given.shape)}};
}

// ---- 3-d convolution and pooling, global pooling ------------------------------------------
// The 2-d lowering ops with three values per attribute: kernel_size / pool and strides
// {d, h, w}, pads {front, back, top, bottom, left, right} (per axis {begin, end}, as Conv1D's
// two): the consumer writes them as a Conv / MaxPool / AveragePool with 3 spatial axes.
// Global max pooling is the lowering op global_max_pool (x [N, C, spatial...] -> [N, C, 1...]);
// global_avg_pool2d takes any spatial rank too.
namespace {
LoweredValue lowered_ncdhw(Lowering& l, const Module& m, const LoweredValue& x, DataFormat f) {
  const Shape& s = x.shape;
  if (s.size() != 5 || s[2] < 0 || s[3] < 0 || s[4] < 0)
    l.fail(describe(m) + ": needs an input [N, C, D, H, W] with known D, H and W, got " +
           keras_shape(s));
  if (f != DataFormat::channels_last) return x;
  return {l.emit1("transpose", {x.name}, {{"perm", Ints{0, 4, 1, 2, 3}}}),
          Shape{s[0], s[4], s[1], s[2], s[3]}};
}
std::string lowered_from_ncdhw(Lowering& l, const std::string& y, DataFormat f) {
  if (f != DataFormat::channels_last) return y;
  return l.emit1("transpose", {y}, {{"perm", Ints{0, 2, 3, 4, 1}}});
}
}  // namespace

Values Conv3D::lower(Lowering& l, const Values& in) {
  const auto& given = one_input(l, *this, in);
  const auto& o = options();
  lowered_ncdhw(l, *this, given, DataFormat::channels_first);  // the shape check
  const auto p = pads(given.shape);
  const LoweredValue x = lowered_ncdhw(l, *this, given, o.data_format);
  std::vector<std::string> args{x.name, l.weight("kernel", kernel().value())};
  if (bias().defined()) args.push_back(l.weight("bias", bias().value()));
  auto y = l.emit1("conv2d", args,
                   {{"kernel_size", kernel_size()},
                    {"strides", o.strides},
                    {"dilation", o.dilation_rate},
                    {"pads", Ints(p.begin(), p.end())},
                    {"groups", o.groups}});
  return {{lowered_from_ncdhw(l, lower_activation(l, o.activation, y), o.data_format),
           output_shape(given.shape)}};
}

Values Pool3D::lower(Lowering& l, const Values& in) {
  const auto& given = one_input(l, *this, in);
  const LoweredValue x = lowered_ncdhw(l, *this, given, data_format());
  const Shape s = x.shape;
  // The pads of a 3-d window: the depth and height from one 2-d resolution, the width from another.
  const auto dh = resolve_padding(padding(), s[2], s[3], Size2(pool_size()[0], pool_size()[1]),
                                  Size2(strides()[0], strides()[1]));
  const auto hw = resolve_padding(padding(), s[3], s[4], Size2(pool_size()[1], pool_size()[2]),
                                  Size2(strides()[1], strides()[2]));
  auto y = l.emit1(is_max() ? "max_pool2d" : "avg_pool2d", {x.name},
                   {{"pool", pool_size()},
                    {"strides", strides()},
                    {"pads", Ints{dh[0], dh[1], hw[0], hw[1], hw[2], hw[3]}}});
  return {{lowered_from_ncdhw(l, y, data_format()), output_shape(given.shape)}};
}

Values GlobalPooling::lower(Lowering& l, const Values& in) {
  const auto& given = one_input(l, *this, in);
  const Shape out = output_shape(given.shape);
  const auto rank = std::int64_t(given.shape.size());
  std::string x = given.name;
  if (data_format() == DataFormat::channels_last) {  // channels to axis 1
    Ints perm{0, rank - 1};
    for (std::int64_t a = 1; a < rank - 1; ++a) perm.push_back(a);
    x = l.emit1("transpose", {x}, {{"perm", perm}});
  }
  auto y = l.emit1(is_max() ? "global_max_pool" : "global_avg_pool2d", {x});
  Ints spatial;
  for (std::int64_t a = 2; a < rank; ++a) spatial.push_back(a);
  if (!keepdims()) y = l.emit1("squeeze", {y}, {{"axes", spatial}});
  else if (data_format() == DataFormat::channels_last) {  // [N, C, 1...] -> [N, 1..., C]
    Ints shape(out.begin(), out.end());
    shape[0] = 0;  // the batch extent, copied
    y = l.emit1("reshape", {y}, {{"shape", shape}});
  }
  return {{y, out}};
}

// ---- normalisation --------------------------------------------------------------------------

Values BatchNormalization::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  const auto rank = std::int64_t(x.shape.size());
  const std::int64_t axis = norm_axis(options().axis, rank);
  Tensor mean = moving_mean().value(), var = moving_variance().value();
  const std::int64_t c = mean.shape()[0];
  Tensor g = gamma().defined() ? gamma().value() : ones({c}, mean.dtype());
  Tensor b = beta().defined() ? beta().value() : zeros({c}, mean.dtype());
  const double eps = options().epsilon;
  if (axis == 1) {
    auto y = l.emit1("batch_norm",
                     {x.name, l.weight("gamma", g), l.weight("beta", b),
                      l.weight("moving_mean", mean), l.weight("moving_variance", var)},
                     {{"epsilon", eps}});
    return {{y, x.shape}};
  }
  // Another feature axis: (x - mean) / sqrt(var + eps) * gamma + beta with broadcast shapes.
  Shape bs(std::size_t(rank), 1);
  bs[std::size_t(axis)] = c;
  auto d = l.emit1("subtract", {x.name, l.weight("moving_mean", reshape(mean, bs))});
  auto s = l.emit1("sqrt", {l.emit1("add", {l.weight("moving_variance", reshape(var, bs)),
                                            l.scalar(eps)})});
  auto y = l.emit1("divide", {d, s});
  y = l.emit1("multiply", {y, l.weight("gamma", reshape(g, bs))});
  y = l.emit1("add", {y, l.weight("beta", reshape(b, bs))});
  return {{y, x.shape}};
}

Values LayerNormalization::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  const auto rank = std::int64_t(x.shape.size());
  Ints axes;
  for (auto a : options().axis) axes.push_back(norm_axis(a, rank));
  std::sort(axes.begin(), axes.end());
  Shape norm_shape;
  for (auto a : axes) norm_shape.push_back(x.shape[std::size_t(a)]);
  for (auto e : norm_shape)
    if (e < 0) l.fail(describe(*this) + ": the normalised axes must have known extents");
  const DType dt = l.float_dtype();
  Tensor g = gamma().defined() ? gamma().value() : ones(norm_shape, dt);
  Tensor b = beta().defined() ? beta().value() : zeros(norm_shape, dt);
  const double eps = options().epsilon;
  bool trailing = true;
  for (std::size_t i = 0; i < axes.size(); ++i)
    trailing = trailing && axes[i] == rank - std::int64_t(axes.size()) + std::int64_t(i);
  if (trailing && l.supports("layer_norm")) {
    auto y = l.emit1("layer_norm",
                     {x.name, l.weight("gamma", reshape(g, norm_shape)),
                      l.weight("beta", reshape(b, norm_shape))},
                     {{"axis", axes.front()}, {"epsilon", eps}});
    return {{y, x.shape}};
  }
  Shape bs(std::size_t(rank), 1);
  for (auto a : axes) bs[std::size_t(a)] = x.shape[std::size_t(a)];
  auto mean = l.emit1("reduce_mean", {x.name}, {{"axes", axes}});
  auto d = l.emit1("subtract", {x.name, mean});
  auto var = l.emit1("reduce_mean", {l.emit1("multiply", {d, d})}, {{"axes", axes}});
  auto s = l.emit1("sqrt", {l.emit1("add", {var, l.scalar(eps)})});
  auto y = l.emit1("divide", {d, s});
  y = l.emit1("multiply", {y, l.weight("gamma", reshape(g, bs))});
  y = l.emit1("add", {y, l.weight("beta", reshape(b, bs))});
  return {{y, x.shape}};
}

// x / sqrt(mean(x * x) + eps) * scale, in ops every opset has (ONNX's RMSNormalization is opset
// 23 only).
Values RMSNormalization::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  if (!built()) l.fail(describe(*this) + " is not built");
  const auto rank = std::int64_t(x.shape.size());
  Ints axes;
  for (auto a : options().axis) axes.push_back(norm_axis(a, rank));
  std::sort(axes.begin(), axes.end());
  Shape bs(std::size_t(rank), 1);
  for (auto a : axes) bs[std::size_t(a)] = x.shape[std::size_t(a)];
  auto ms = l.emit1("reduce_mean", {l.emit1("multiply", {x.name, x.name})}, {{"axes", axes}});
  auto s = l.emit1("sqrt", {l.emit1("add", {ms, l.scalar(options().epsilon)})});
  auto y = l.emit1("divide", {x.name, s});
  y = l.emit1("multiply", {y, l.weight("scale", reshape(scale().value(), bs))});
  return {{y, x.shape}};
}

// (x - mean) / sd, or x * sd + mean inverted, with sd = max(sqrt(variance), 1e-7) folded into a
// constant.
Values Normalization::lower(Lowering& l, const Values& in) {
  const auto& x = one_input(l, *this, in);
  if (!has_statistics()) l.fail(describe(*this) + ": the layer has no statistics (call adapt())");
  const DType dt = l.float_dtype();
  Shape b = broadcast_shape(std::int64_t(x.shape.size()));
  Tensor m = reshape(mean(), b).cast(dt);
  Tensor sd = maximum(sqrt(reshape(variance(), b)), soma::scalar(kEpsilon, variance().dtype()));
  auto mn = l.weight("mean", m);
  auto s = l.weight("sd", sd.cast(dt));
  auto y = options().invert ? l.emit1("add", {l.emit1("multiply", {x.name, s}), mn})
                            : l.emit1("divide", {l.emit1("subtract", {x.name, mn}), s});
  return {{y, x.shape}};
}

// ---- recurrent layers -----------------------------------------------------------------------

namespace {

// The standard RNN ops take [time, batch, features], weights [1, gates*units, in] in their own
// gate order and a bias [1, 2*gates*units] (input bias, then recurrent bias).
struct RecurrentLowering {
  const char* op;
  std::vector<int> order;  // standard gate g comes from soma gate order[g]
  std::vector<const Activation*> activations;
  Tensor input_bias, recurrent_bias;  // soma gate order, [gates*units]
  bool linear_before_reset = false;
};

Values lower_recurrent(Lowering& l, RecurrentBase& layer, const Values& ins,
                       const RecurrentLowering& r, const Tensor& kernel, const Tensor& rkernel) {
  if (ins.empty()) l.fail(describe(layer) + " takes an input");
  const std::int64_t U = layer.units();
  const auto k = std::int64_t(r.order.size());
  if (!kernel.defined() || !rkernel.defined()) l.fail(describe(layer) + ": the layer is not built");
  const LoweredValue& x = ins[0];
  // [in, k*U] (soma order) -> [1, k*U, in] (standard order)
  auto reorder_cols = [&](const Tensor& w) {
    std::vector<Tensor> parts;
    for (int g : r.order) parts.push_back(slice(w, {Slice{}, Slice{g * U, (g + 1) * U}}));
    return concat(parts, 1);
  };
  auto reorder_vec = [&](const Tensor& b) {
    std::vector<Tensor> parts;
    for (int g : r.order) parts.push_back(slice(b, {Slice{g * U, (g + 1) * U}}));
    return concat(parts, 0);
  };
  std::string W = l.weight("W", expand_dims(transpose(reorder_cols(kernel)), 0));
  std::string R = l.weight("R", expand_dims(transpose(reorder_cols(rkernel)), 0));
  std::string B;
  if (r.input_bias.defined()) {
    Tensor rb = r.recurrent_bias.defined() ? reorder_vec(r.recurrent_bias)
                                           : zeros({k * U}, r.input_bias.dtype());
    B = l.weight("B", expand_dims(concat({reorder_vec(r.input_bias), rb}, 0), 0));
  }
  // [batch, time, f] -> [time, batch, f]; go_backwards reads the sequence last step first.
  std::string xt = l.emit1("transpose", {x.name}, {{"perm", Ints{1, 0, 2}}});
  if (layer.go_backwards()) xt = l.emit1("reverse", {xt}, {{"axis", std::int64_t(0)}});
  std::vector<std::string> inputs{xt, W, R, B, ""};
  if (ins.size() > 1) {
    if (int(ins.size()) != 1 + layer.num_states())
      l.fail(describe(layer) + ": expected " + std::to_string(layer.num_states()) +
             " initial states, got " + std::to_string(ins.size() - 1));
    for (std::size_t i = 1; i < ins.size(); ++i)
      inputs.push_back(l.emit1("expand_dims", {ins[i].name}, {{"axes", Ints{0}}}));
  }
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  std::string acts;
  for (auto* a : r.activations) acts += (acts.empty() ? "" : ",") + a->name;
  Attrs attrs{{"hidden_size", U}, {"activations", acts}};
  if (r.linear_before_reset) attrs.set("linear_before_reset", true);
  auto outs = l.emit(r.op, inputs, attrs, k == 4 ? 3 : 2);

  Values result;
  const Shape state_shape{-1, U};
  if (layer.return_sequences()) {
    // Y [time, 1, batch, U] -> [batch, time, U]
    auto y = l.emit1("squeeze", {outs[0]}, {{"axes", Ints{1}}});
    y = l.emit1("transpose", {y}, {{"perm", Ints{1, 0, 2}}});
    result.push_back({y, {-1, x.shape.size() > 1 ? x.shape[1] : -1, U}});
  } else {
    result.push_back({l.emit1("squeeze", {outs[1]}, {{"axes", Ints{0}}}), state_shape});
  }
  if (layer.return_state())
    for (std::size_t s = 1; s < outs.size(); ++s)
      result.push_back({l.emit1("squeeze", {outs[s]}, {{"axes", Ints{0}}}), state_shape});
  return result;
}

}  // namespace

Values LSTM::lower(Lowering& l, const Values& in) {
  auto w = weights();
  RecurrentLowering r{"lstm", {0, 3, 1, 2},  // soma i, f, c, o -> i, o, f, c
                      {&options().recurrent_activation, &options().activation,
                       &options().activation},
                      w.bias, Tensor(), false};
  return lower_recurrent(l, *this, in, r, w.kernel, w.recurrent_kernel);
}

Values GRU::lower(Lowering& l, const Values& in) {
  auto w = weights();
  RecurrentLowering r{"gru", {0, 1, 2},  // z, r, h in both
                      {&options().recurrent_activation, &options().activation},
                      Tensor(), Tensor(), options().reset_after};
  if (w.bias.defined()) {
    if (w.bias.rank() == 2) {
      r.input_bias = w.bias[0];
      r.recurrent_bias = w.bias[1];
    } else {
      r.input_bias = w.bias;
    }
  }
  return lower_recurrent(l, *this, in, r, w.kernel, w.recurrent_kernel);
}

Values SimpleRNN::lower(Lowering& l, const Values& in) {
  auto w = weights();
  RecurrentLowering r{"rnn", {0}, {&options().activation}, w.bias, Tensor(), false};
  return lower_recurrent(l, *this, in, r, w.kernel, w.recurrent_kernel);
}

}  // namespace soma::nn
