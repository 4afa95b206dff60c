// ONNX export: walks a Sequential or functional model and writes each layer as standard ONNX
// operators (docs/onnx.md has the table). Shapes are tracked with the batch axis as -1 so that
// padding can be made explicit; the batch dimension of the graph is symbolic ("N").
#include "soma/onnx.hpp"

#include "soma/error.hpp"

#ifdef SOMA_HAS_ONNX
#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <numbers>
#include <set>
#include <unordered_map>

#include "internal/atomic_file.hpp"
#include "onnx/proto_util.hpp"
#include "soma/autograd.hpp"
#include "soma/model/merge.hpp"
#include "soma/model/sequential.hpp"
#include "soma/nn/conv.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/normalization.hpp"
#include "soma/nn/preprocessing.hpp"
#include "soma/nn/recurrent.hpp"
#include "soma/ops.hpp"
#endif

namespace soma::onnx {

#ifndef SOMA_HAS_ONNX

bool available() { return false; }
void export_model(nn::Model&, const std::string&, const ExportOptions&) {
  fail("onnx::export_model",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}
std::string export_to_bytes(nn::Model&, const ExportOptions&) {
  fail("onnx::export_to_bytes",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}

#else

bool available() { return true; }

namespace {

using namespace soma::onnx_detail;
using TP = ::onnx::TensorProto;
constexpr const char* kWho = "onnx::export_model";

// A value of the graph: its name and shape (batch axis -1, other unknown extents -1).
struct Value {
  std::string name;
  Shape shape;
  ElemType type = TP::FLOAT;
};

std::string where(const nn::Module& m) { return "layer '" + m.name() + "' (" + m.type_name() + ")"; }

std::int64_t norm_axis(std::int64_t a, std::int64_t rank) { return a < 0 ? a + rank : a; }

class Exporter {
 public:
  Exporter(::onnx::GraphProto& g, std::int64_t opset, ElemType ftype)
      : g_(g), opset_(opset), ftype_(ftype) {}

  std::int64_t opset() const { return opset_; }
  ElemType ftype() const { return ftype_; }

  std::string unique(std::string base) {
    for (char& c : base)
      if (c == ' ') c = '_';
    if (base.empty()) base = "v";
    std::string n = base;
    for (int i = 1; used_.count(n); ++i) n = base + "_" + std::to_string(i);
    used_.insert(n);
    return n;
  }
  void reserve(const std::string& n) { used_.insert(n); }

  // A floating initialiser (converted to the graph's float type).
  std::string weight(const std::string& base, const Tensor& t) {
    std::string n = unique(base);
    to_proto(t, ftype_, n, *g_.add_initializer());
    return n;
  }
  std::string ints(const std::string& base, const std::vector<std::int64_t>& v) {
    std::string n = unique(base);
    to_proto(constant(v, Shape{std::int64_t(v.size())}), TP::INT64, n, *g_.add_initializer());
    return n;
  }
  // A float scalar constant, shared by every node that needs the same number.
  std::string scalar(double v) {
    auto it = scalars_.find(v);
    if (it != scalars_.end()) return it->second;
    std::string n = weight("const", soma::scalar(v, DType::f64));
    scalars_[v] = n;
    return n;
  }

  ::onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const std::string& base) {
    auto& n = *g_.add_node();
    n.set_op_type(op);
    n.set_name(unique(base + "/" + op));
    for (auto& i : inputs) n.add_input(i);
    for (auto& o : outputs) n.add_output(o);
    return n;
  }
  // One node with one new output; returns the output's name.
  std::string op(const std::string& op, const std::vector<std::string>& inputs,
                 const std::string& base, ::onnx::NodeProto** out = nullptr) {
    std::string y = unique(base + "/" + op + "_out");
    auto& n = node(op, inputs, {y}, base);
    if (out) *out = &n;
    return y;
  }

  static void attr(::onnx::NodeProto& n, const std::string& name, std::int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr(::onnx::NodeProto& n, const std::string& name, double v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(float(v));
  }
  static void attr(::onnx::NodeProto& n, const std::string& name,
                   const std::vector<std::int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (auto e : v) a->add_ints(e);
  }
  static void attr(::onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attr(::onnx::NodeProto& n, const std::string& name,
                   const std::vector<std::string>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::STRINGS);
    for (auto& e : v) a->add_strings(e);
  }

  // ---- layers ----
  std::vector<Value> emit(nn::Module& layer, const std::vector<Value>& ins,
                          const std::vector<Shape>* out_shapes);

 private:
  Value emit_one(nn::Module& layer, const Value& x);
  std::string activation(const nn::Activation& a, const nn::Module* owner, const std::string& x,
                         const std::string& base);
  std::vector<Value> recurrent(nn::RecurrentBase& layer, const std::vector<Value>& ins);
  Value batch_norm(nn::BatchNormalization& bn, const Value& x);
  Value layer_norm(nn::LayerNormalization& ln, const Value& x);
  Value normalization(nn::Normalization& n, const Value& x);
  std::vector<Value> functional(nn::Model& model, const std::vector<Value>& ins);
  std::vector<Value> sequential(nn::Sequential& seq, const Value& x);

  ::onnx::GraphProto& g_;
  std::int64_t opset_;
  ElemType ftype_;
  std::set<std::string> used_;
  std::map<double, std::string> scalars_;
};

// ---- activations ----------------------------------------------------------------------------

std::string Exporter::activation(const nn::Activation& a, const nn::Module* owner,
                                 const std::string& x, const std::string& base) {
  const std::string& n = a.name;
  if (a.is_linear() || n == "linear") return x;
  ::onnx::NodeProto* nd = nullptr;
  if (n == "relu") return op("Relu", {x}, base);
  if (n == "sigmoid") return op("Sigmoid", {x}, base);
  if (n == "tanh") return op("Tanh", {x}, base);
  if (n == "softplus") return op("Softplus", {x}, base);
  if (n == "softmax" || n == "log_softmax") {
    std::int64_t axis = -1;
    if (auto* s = dynamic_cast<const nn::Softmax*>(owner)) axis = s->axis();
    auto y = op(n == "softmax" ? "Softmax" : "LogSoftmax", {x}, base, &nd);
    attr(*nd, "axis", axis);
    return y;
  }
  if (n == "leaky_relu") {
    double alpha = 0.2;  // the leaky_relu function's slope; the LeakyReLU layer carries its own
    if (auto* l = dynamic_cast<const nn::LeakyReLU*>(owner)) alpha = l->alpha();
    auto y = op("LeakyRelu", {x}, base, &nd);
    attr(*nd, "alpha", alpha);
    return y;
  }
  if (n == "elu") {
    double alpha = 1.0;
    if (auto* l = dynamic_cast<const nn::ELU*>(owner)) alpha = l->alpha();
    auto y = op("Elu", {x}, base, &nd);
    attr(*nd, "alpha", alpha);
    return y;
  }
  if (n == "swish") return op("Mul", {x, op("Sigmoid", {x}, base)}, base);
  if (n == "step") {  // Heaviside: 1 where x >= 0
    auto ge = op("GreaterOrEqual", {x, scalar(0.0)}, base);
    auto y = op("Cast", {ge}, base, &nd);
    attr(*nd, "to", std::int64_t(ftype_));
    return y;
  }
  if (n == "gelu") {
    // ONNX has Gelu only from opset 20: compose it.
    bool approximate = false;
    if (auto* l = dynamic_cast<const nn::GELU*>(owner)) approximate = l->approximate();
    std::string inner;
    if (!approximate) {  // 0.5 x (1 + erf(x / sqrt 2))
      inner = op("Erf", {op("Div", {x, scalar(std::sqrt(2.0))}, base)}, base);
    } else {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      auto x3 = op("Mul", {op("Mul", {x, x}, base), x}, base);
      auto s = op("Add", {x, op("Mul", {x3, scalar(0.044715)}, base)}, base);
      inner = op("Tanh", {op("Mul", {s, scalar(std::sqrt(2.0 / std::numbers::pi))}, base)}, base);
    }
    auto one_plus = op("Add", {inner, scalar(1.0)}, base);
    return op("Mul", {op("Mul", {x, scalar(0.5)}, base), one_plus}, base);
  }
  fail(kWho, owner ? where(*owner) : std::string("a layer"), ": activation '", n,
       "' has no ONNX mapping");
}

// ---- recurrent layers -----------------------------------------------------------------------

// ONNX's RNN ops take [time, batch, features] (layout 0), weights [dirs, gates*units, in] with
// their own gate order, and a bias [dirs, 2*gates*units] (input bias, then recurrent bias).
std::vector<Value> Exporter::recurrent(nn::RecurrentBase& layer, const std::vector<Value>& ins) {
  const std::string base = layer.name();
  const std::int64_t U = layer.units();
  Tensor kernel, rkernel, bias;
  for (auto& [n, v] : layer.named_parameters(false)) {
    if (n == "kernel") kernel = v.value();
    else if (n == "recurrent_kernel") rkernel = v.value();
    else if (n == "bias") bias = v.value();
  }
  if (!kernel.defined() || !rkernel.defined()) fail(kWho, where(layer), ": the layer is not built");
  NoGradScope no_grad;
  const Value& x = ins[0];
  std::string op_type;
  int k = 1;
  std::vector<int> order;  // ONNX gate g comes from soma gate order[g]
  std::vector<std::string> acts;
  std::string default_acts;
  auto act_name = [&](const nn::Activation& a) -> std::string {
    if (a.name == "sigmoid") return "Sigmoid";
    if (a.name == "tanh") return "Tanh";
    if (a.name == "relu") return "Relu";
    fail(kWho, where(layer), ": activation '", a.name,
         "' has no ONNX recurrent-activation mapping (sigmoid, tanh, relu)");
  };
  bool linear_before_reset = false;
  Tensor wb, rb;  // input and recurrent biases, soma gate order, [k*U]
  if (auto* l = dynamic_cast<nn::LSTM*>(&layer)) {
    op_type = "LSTM";
    k = 4;
    order = {0, 3, 1, 2};  // Keras i, f, c, o -> ONNX i, o, f, c
    acts = {act_name(l->options().recurrent_activation), act_name(l->options().activation),
            act_name(l->options().activation)};
    default_acts = "Sigmoid,Tanh,Tanh";
    if (bias.defined()) wb = bias;
  } else if (auto* l = dynamic_cast<nn::GRU*>(&layer)) {
    op_type = "GRU";
    k = 3;
    order = {0, 1, 2};  // z, r, h in both
    acts = {act_name(l->options().recurrent_activation), act_name(l->options().activation)};
    default_acts = "Sigmoid,Tanh";
    linear_before_reset = l->options().reset_after;
    if (bias.defined()) {
      if (bias.rank() == 2) {
        wb = bias[0];
        rb = bias[1];
      } else {
        wb = bias;
      }
    }
  } else if (auto* l = dynamic_cast<nn::SimpleRNN*>(&layer)) {
    op_type = "RNN";
    order = {0};
    acts = {act_name(l->options().activation)};
    default_acts = "Tanh";
    if (bias.defined()) wb = bias;
  } else {
    fail(kWho, where(layer), ": unknown recurrent layer");
  }
  // [in, k*U] (soma order) -> [1, k*U, in] (ONNX order)
  auto reorder_cols = [&](const Tensor& w) {
    std::vector<Tensor> parts;
    for (int g : order) parts.push_back(slice(w, {Slice{}, Slice{g * U, (g + 1) * U}}));
    return concat(parts, 1);
  };
  auto reorder_vec = [&](const Tensor& b) {
    std::vector<Tensor> parts;
    for (int g : order) parts.push_back(slice(b, {Slice{g * U, (g + 1) * U}}));
    return concat(parts, 0);
  };
  std::string W = weight(base + ".W", expand_dims(transpose(reorder_cols(kernel)), 0));
  std::string R = weight(base + ".R", expand_dims(transpose(reorder_cols(rkernel)), 0));
  std::string B;
  if (wb.defined()) {
    Tensor r = rb.defined() ? reorder_vec(rb) : zeros({k * U}, wb.dtype());
    B = weight(base + ".B", expand_dims(concat({reorder_vec(wb), r}, 0), 0));
  }
  // [batch, time, f] -> [time, batch, f]; go_backwards reads the sequence last step first.
  ::onnx::NodeProto* nd = nullptr;
  std::string xt = op("Transpose", {x.name}, base, &nd);
  attr(*nd, "perm", std::vector<std::int64_t>{1, 0, 2});
  if (layer.go_backwards())
    xt = op("Slice", {xt, ints(base + ".rev_starts", {-1}), ints(base + ".rev_ends", {INT64_MIN}),
                      ints(base + ".rev_axes", {0}), ints(base + ".rev_steps", {-1})},
            base);
  std::vector<std::string> inputs{xt, W, R, B, ""};
  if (ins.size() > 1) {
    if (int(ins.size()) != 1 + layer.num_states())
      fail(kWho, where(layer), ": expected ", layer.num_states(), " initial states, got ",
           ins.size() - 1);
    auto axes0 = ints(base + ".axes0", {0});
    for (std::size_t i = 1; i < ins.size(); ++i)
      inputs.push_back(op("Unsqueeze", {ins[i].name, axes0}, base));
  }
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  std::vector<std::string> outs{unique(base + "/Y"), unique(base + "/Y_h")};
  if (k == 4) outs.push_back(unique(base + "/Y_c"));
  auto& rn = node(op_type, inputs, outs, base);
  attr(rn, "hidden_size", U);
  std::string joined;
  for (auto& a : acts) joined += (joined.empty() ? "" : ",") + a;
  if (joined != default_acts) attr(rn, "activations", acts);
  if (linear_before_reset) attr(rn, "linear_before_reset", std::int64_t(1));

  std::vector<Value> result;
  const Shape state_shape{-1, U};
  if (layer.return_sequences()) {
    // Y [time, 1, batch, U] -> [batch, time, U]
    auto y = op("Squeeze", {outs[0], ints(base + ".axes1", {1})}, base);
    y = op("Transpose", {y}, base, &nd);
    attr(*nd, "perm", std::vector<std::int64_t>{1, 0, 2});
    result.push_back({y, {-1, x.shape.size() > 1 ? x.shape[1] : -1, U}, ftype_});
  } else {
    result.push_back({op("Squeeze", {outs[1], ints(base + ".axes0", {0})}, base), state_shape, ftype_});
  }
  if (layer.return_state()) {
    for (std::size_t s = 1; s < outs.size(); ++s)
      result.push_back({op("Squeeze", {outs[s], ints(base + ".axes0", {0})}, base), state_shape, ftype_});
  }
  return result;
}

// ---- normalisation --------------------------------------------------------------------------

Value Exporter::batch_norm(nn::BatchNormalization& bn, const Value& x) {
  const std::string base = bn.name();
  const auto rank = std::int64_t(x.shape.size());
  const std::int64_t axis = norm_axis(bn.options().axis, rank);
  NoGradScope no_grad;
  Tensor mean = bn.moving_mean().value(), var = bn.moving_variance().value();
  const std::int64_t c = mean.shape()[0];
  Tensor gamma = bn.gamma().defined() ? bn.gamma().value() : ones({c}, mean.dtype());
  Tensor beta = bn.beta().defined() ? bn.beta().value() : zeros({c}, mean.dtype());
  if (axis == 1) {
    ::onnx::NodeProto* nd = nullptr;
    auto y = op("BatchNormalization",
                {x.name, weight(base + ".gamma", gamma), weight(base + ".beta", beta),
                 weight(base + ".moving_mean", mean), weight(base + ".moving_variance", var)},
                base, &nd);
    attr(*nd, "epsilon", bn.options().epsilon);
    return {y, x.shape, ftype_};
  }
  // Another feature axis: (x - mean) / sqrt(var + eps) * gamma + beta with broadcast shapes.
  Shape b(std::size_t(rank), 1);
  b[std::size_t(axis)] = c;
  auto d = op("Sub", {x.name, weight(base + ".moving_mean", reshape(mean, b))}, base);
  auto s = op("Sqrt", {op("Add", {weight(base + ".moving_variance", reshape(var, b)),
                                  scalar(bn.options().epsilon)}, base)}, base);
  auto y = op("Div", {d, s}, base);
  y = op("Mul", {y, weight(base + ".gamma", reshape(gamma, b))}, base);
  y = op("Add", {y, weight(base + ".beta", reshape(beta, b))}, base);
  return {y, x.shape, ftype_};
}

// The preprocessing layer: (x - mean) / sd, or x * sd + mean inverted, with
// sd = max(sqrt(variance), 1e-7) folded into an initialiser.
Value Exporter::normalization(nn::Normalization& n, const Value& x) {
  const std::string base = n.name();
  if (!n.has_statistics()) fail(kWho, where(n), ": the layer has no statistics (call adapt())");
  NoGradScope no_grad;
  const DType dt = ftype_ == TP::DOUBLE ? DType::f64 : DType::f32;
  Shape b = n.broadcast_shape(std::int64_t(x.shape.size()));
  Tensor mean = reshape(n.mean(), b).cast(dt);
  Tensor sd = maximum(sqrt(reshape(n.variance(), b)), soma::scalar(nn::Normalization::kEpsilon,
                                                                      n.variance().dtype()));
  auto m = weight(base + ".mean", mean);
  auto s = weight(base + ".sd", sd.cast(dt));
  auto y = n.options().invert ? op("Add", {op("Mul", {x.name, s}, base), m}, base)
                              : op("Div", {op("Sub", {x.name, m}, base), s}, base);
  return {y, x.shape, ftype_};
}

Value Exporter::layer_norm(nn::LayerNormalization& ln, const Value& x) {
  const std::string base = ln.name();
  const auto rank = std::int64_t(x.shape.size());
  std::vector<std::int64_t> axes;
  for (auto a : ln.options().axis) axes.push_back(norm_axis(a, rank));
  std::sort(axes.begin(), axes.end());
  NoGradScope no_grad;
  Shape norm_shape;
  for (auto a : axes) norm_shape.push_back(x.shape[std::size_t(a)]);
  for (auto e : norm_shape)
    if (e < 0) fail(kWho, where(ln), ": the normalised axes must have known extents");
  const DType dt = ftype_ == TP::DOUBLE ? DType::f64 : DType::f32;
  Tensor gamma = ln.gamma().defined() ? ln.gamma().value() : ones(norm_shape, dt);
  Tensor beta = ln.beta().defined() ? ln.beta().value() : zeros(norm_shape, dt);
  bool trailing = true;
  for (std::size_t i = 0; i < axes.size(); ++i)
    trailing = trailing && axes[i] == rank - std::int64_t(axes.size()) + std::int64_t(i);
  if (trailing && opset_ >= 17) {
    ::onnx::NodeProto* nd = nullptr;
    auto y = op("LayerNormalization",
                {x.name, weight(base + ".gamma", reshape(gamma, norm_shape)),
                 weight(base + ".beta", reshape(beta, norm_shape))},
                base, &nd);
    attr(*nd, "axis", axes.front());
    attr(*nd, "epsilon", ln.options().epsilon);
    return {y, x.shape, ftype_};
  }
  Shape b(std::size_t(rank), 1);
  for (auto a : axes) b[std::size_t(a)] = x.shape[std::size_t(a)];
  ::onnx::NodeProto* nd = nullptr;
  auto mean = op("ReduceMean", {x.name}, base, &nd);
  attr(*nd, "axes", axes);
  auto d = op("Sub", {x.name, mean}, base);
  auto var = op("ReduceMean", {op("Mul", {d, d}, base)}, base, &nd);
  attr(*nd, "axes", axes);
  auto s = op("Sqrt", {op("Add", {var, scalar(ln.options().epsilon)}, base)}, base);
  auto y = op("Div", {d, s}, base);
  y = op("Mul", {y, weight(base + ".gamma", reshape(gamma, b))}, base);
  y = op("Add", {y, weight(base + ".beta", reshape(beta, b))}, base);
  return {y, x.shape, ftype_};
}

// ---- one-input layers -----------------------------------------------------------------------

std::vector<std::int64_t> onnx_pads(const std::array<std::int64_t, 4>& p) {
  return {p[0], p[2], p[1], p[3]};  // soma {top, bottom, left, right} -> ONNX {t, l, b, r}
}

Value Exporter::emit_one(nn::Module& layer, const Value& x) {
  const std::string base = layer.name();
  const auto rank = std::int64_t(x.shape.size());
  ::onnx::NodeProto* nd = nullptr;
  NoGradScope no_grad;
  auto need_hw = [&]() {
    if (rank != 4 || x.shape[2] < 0 || x.shape[3] < 0)
      fail(kWho, where(layer), ": needs an input [N, C, H, W] with known H and W, got ",
           nn::format_shape(x.shape));
  };
  Shape out_shape = layer.output_shape(x.shape);

  if (auto* d = dynamic_cast<nn::Dense*>(&layer)) {
    std::string k = weight(base + ".kernel", d->kernel().value());
    std::string y;
    if (rank == 2) {
      std::vector<std::string> in{x.name, k};
      if (d->bias().defined()) in.push_back(weight(base + ".bias", d->bias().value()));
      y = op("Gemm", in, base);
    } else {
      y = op("MatMul", {x.name, k}, base);
      if (d->bias().defined()) y = op("Add", {y, weight(base + ".bias", d->bias().value())}, base);
    }
    return {activation(d->activation(), d, y, base), out_shape, ftype_};
  }
  if (auto* c = dynamic_cast<nn::Conv2D*>(&layer)) {
    need_hw();
    const auto& o = c->options();
    auto ks = c->kernel_size();
    auto pads = resolve_padding(o.padding, x.shape[2], x.shape[3], ks, o.strides, o.dilation_rate);
    std::vector<std::string> in{x.name, weight(base + ".kernel", c->kernel().value())};
    if (c->bias().defined()) in.push_back(weight(base + ".bias", c->bias().value()));
    auto y = op("Conv", in, base, &nd);
    attr(*nd, "kernel_shape", std::vector<std::int64_t>{ks.h, ks.w});
    attr(*nd, "strides", std::vector<std::int64_t>{o.strides.h, o.strides.w});
    attr(*nd, "dilations", std::vector<std::int64_t>{o.dilation_rate.h, o.dilation_rate.w});
    attr(*nd, "pads", onnx_pads(pads));
    attr(*nd, "group", o.groups);
    return {activation(o.activation, c, y, base), out_shape, ftype_};
  }
  if (auto* c = dynamic_cast<nn::Conv2DTranspose*>(&layer)) {
    need_hw();
    const auto& o = c->options();
    auto ks = c->kernel_size();
    const std::int64_t ho = out_shape[2], wo = out_shape[3];
    // soma pads the forward convolution (output -> input) this transposes; ONNX's pads and
    // output_padding describe the same geometry: out = s (in - 1) + op + k_eff - pads.
    auto pads = resolve_padding(o.padding, ho, wo, ks, o.strides, o.dilation_rate);
    auto keff = [](std::int64_t k, std::int64_t d) { return (k - 1) * d + 1; };
    const std::int64_t oph = ho - ((x.shape[2] - 1) * o.strides.h + keff(ks.h, o.dilation_rate.h) -
                                   pads[0] - pads[1]);
    const std::int64_t opw = wo - ((x.shape[3] - 1) * o.strides.w + keff(ks.w, o.dilation_rate.w) -
                                   pads[2] - pads[3]);
    std::vector<std::string> in{x.name, weight(base + ".kernel", c->kernel().value())};
    if (c->bias().defined()) in.push_back(weight(base + ".bias", c->bias().value()));
    auto y = op("ConvTranspose", in, base, &nd);
    attr(*nd, "kernel_shape", std::vector<std::int64_t>{ks.h, ks.w});
    attr(*nd, "strides", std::vector<std::int64_t>{o.strides.h, o.strides.w});
    attr(*nd, "dilations", std::vector<std::int64_t>{o.dilation_rate.h, o.dilation_rate.w});
    attr(*nd, "pads", onnx_pads(pads));
    attr(*nd, "group", o.groups);
    if (oph || opw) attr(*nd, "output_padding", std::vector<std::int64_t>{oph, opw});
    return {activation(o.activation, c, y, base), out_shape, ftype_};
  }
  auto pool = [&](const char* type, Size2 ps, Size2 st, const Padding& pad) {
    need_hw();
    auto pads = resolve_padding(pad, x.shape[2], x.shape[3], ps, st);
    auto y = op(type, {x.name}, base, &nd);
    attr(*nd, "kernel_shape", std::vector<std::int64_t>{ps.h, ps.w});
    attr(*nd, "strides", std::vector<std::int64_t>{st.h, st.w});
    attr(*nd, "pads", onnx_pads(pads));
    // soma's average pooling divides by the real (unpadded) elements: ONNX's default.
    return Value{y, out_shape, ftype_};
  };
  if (auto* p = dynamic_cast<nn::MaxPool2D*>(&layer))
    return pool("MaxPool", p->pool_size(), p->strides(), p->padding());
  if (auto* p = dynamic_cast<nn::AvgPool2D*>(&layer))
    return pool("AveragePool", p->pool_size(), p->strides(), p->padding());
  if (auto* p = dynamic_cast<nn::GlobalAveragePooling2D*>(&layer)) {
    auto y = op("GlobalAveragePool", {x.name}, base);
    if (!p->keepdims()) y = op("Squeeze", {y, ints(base + ".axes", {2, 3})}, base);
    return {y, out_shape, ftype_};
  }
  if (dynamic_cast<nn::Flatten*>(&layer)) {
    auto y = op("Flatten", {x.name}, base, &nd);
    attr(*nd, "axis", std::int64_t(1));
    return {y, out_shape, ftype_};
  }
  if (auto* r = dynamic_cast<nn::Reshape*>(&layer)) {
    const auto& t = r->target_shape();
    bool has_minus = std::find(t.begin(), t.end(), -1) != t.end();
    std::vector<std::int64_t> s{has_minus ? 0 : -1};  // 0 copies the batch extent
    for (auto e : t) s.push_back(e);
    return {op("Reshape", {x.name, ints(base + ".shape", s)}, base), out_shape, ftype_};
  }
  if (auto* d = dynamic_cast<nn::Dropout*>(&layer)) {
    // An inference graph: ONNX's Dropout is the identity unless training_mode is set.
    return {op("Dropout", {x.name, scalar(d->rate())}, base), out_shape, ftype_};
  }
  if (auto* a = dynamic_cast<nn::ActivationLayer*>(&layer))
    return {activation(a->activation(), a, x.name, base), out_shape, ftype_};
  if (auto* bn = dynamic_cast<nn::BatchNormalization*>(&layer)) return batch_norm(*bn, x);
  if (auto* ln = dynamic_cast<nn::LayerNormalization*>(&layer)) return layer_norm(*ln, x);
  if (auto* nz = dynamic_cast<nn::Normalization*>(&layer)) return normalization(*nz, x);
  if (auto* e = dynamic_cast<nn::Embedding*>(&layer)) {
    // Floating indices are truncated, as soma's Embedding does (Cast rounds toward zero).
    auto idx = op("Cast", {x.name}, base, &nd);
    attr(*nd, "to", std::int64_t(TP::INT64));
    auto y = op("Gather", {weight(base + ".embeddings", e->embeddings().value()), idx}, base, &nd);
    attr(*nd, "axis", std::int64_t(0));
    return {y, out_shape, ftype_};
  }
  fail(kWho, where(layer), " has no ONNX mapping");
}

// ---- containers -----------------------------------------------------------------------------

std::vector<Value> Exporter::sequential(nn::Sequential& seq, const Value& x) {
  Value h = x;
  const auto& shapes = seq.layer_output_shapes();
  for (std::size_t i = 0; i < seq.layers().size(); ++i) {
    std::vector<Shape> s;
    if (i < shapes.size()) s.push_back(shapes[i]);
    auto outs = emit(*seq.layers()[i], {h}, s.empty() ? nullptr : &s);
    h = outs.at(0);
  }
  return {h};
}

std::vector<Value> Exporter::functional(nn::Model& model, const std::vector<Value>& ins) {
  if (ins.size() != model.inputs().size())
    fail(kWho, "model '", model.name(), "' takes ", model.inputs().size(), " inputs, got ",
         ins.size());
  std::unordered_map<const nn::detail::SymbolicNode*, std::vector<Value>> done;
  for (std::size_t i = 0; i < ins.size(); ++i) done[model.inputs()[i].node().get()] = {ins[i]};
  // Depth-first from the outputs: every node is emitted after its inputs, once (shared
  // sub-graphs and shared layers called twice become two nodes over the same initialisers).
  std::function<Value(const nn::SymbolicTensor&)> get = [&](const nn::SymbolicTensor& t) -> Value {
    const auto* n = t.node().get();
    auto it = done.find(n);
    if (it == done.end()) {
      if (!n->layer) fail(kWho, "model '", model.name(), "': input '", n->name, "' is not one of its inputs");
      std::vector<Value> in;
      for (auto& s : n->inputs) in.push_back(get(s));
      it = done.emplace(n, emit(*n->layer, in, &n->shapes)).first;
    }
    return it->second.at(std::size_t(t.index()));
  };
  std::vector<Value> outs;
  for (auto& o : model.outputs()) outs.push_back(get(o));
  return outs;
}

std::vector<Value> Exporter::emit(nn::Module& layer, const std::vector<Value>& ins,
                                  const std::vector<Shape>* out_shapes) {
  std::vector<Value> outs;
  if (auto* seq = dynamic_cast<nn::Sequential*>(&layer)) {
    if (ins.size() != 1) fail(kWho, where(layer), " takes one input");
    outs = sequential(*seq, ins[0]);
  } else if (auto* m = dynamic_cast<nn::Model*>(&layer); m && !m->inputs().empty()) {
    outs = functional(*m, ins);
  } else if (auto* r = dynamic_cast<nn::RecurrentBase*>(&layer)) {
    outs = recurrent(*r, ins);
  } else if (dynamic_cast<nn::Add*>(&layer) || dynamic_cast<nn::Multiply*>(&layer) ||
             dynamic_cast<nn::Average*>(&layer) || dynamic_cast<nn::Concatenate*>(&layer)) {
    std::vector<std::string> names;
    for (auto& v : ins) names.push_back(v.name);
    const std::string base = layer.name();
    Shape shape = out_shapes && !out_shapes->empty() ? out_shapes->front() : ins[0].shape;
    if (dynamic_cast<nn::Add*>(&layer)) {
      outs.push_back({op("Sum", names, base), shape, ftype_});
    } else if (dynamic_cast<nn::Average*>(&layer)) {
      outs.push_back({op("Mean", names, base), shape, ftype_});
    } else if (dynamic_cast<nn::Multiply*>(&layer)) {
      std::string y = names[0];
      for (std::size_t i = 1; i < names.size(); ++i) y = op("Mul", {y, names[i]}, base);
      outs.push_back({y, shape, ftype_});
    } else {
      auto& cat = dynamic_cast<nn::Concatenate&>(layer);
      const std::int64_t axis = norm_axis(cat.axis(), std::int64_t(ins[0].shape.size()));
      ::onnx::NodeProto* nd = nullptr;
      auto y = op("Concat", names, base, &nd);
      attr(*nd, "axis", axis);
      outs.push_back({y, shape, ftype_});
    }
  } else {
    if (ins.size() != 1)
      fail(kWho, where(layer), " takes one input in an ONNX export, got ", ins.size());
    outs.push_back(emit_one(layer, ins[0]));
  }
  if (out_shapes)
    for (std::size_t i = 0; i < outs.size() && i < out_shapes->size(); ++i)
      outs[i].shape = (*out_shapes)[i];
  return outs;
}

void set_value_info(::onnx::ValueInfoProto& vi, const Value& v) {
  vi.set_name(v.name);
  auto* tt = vi.mutable_type()->mutable_tensor_type();
  tt->set_elem_type(v.type);
  auto* sh = tt->mutable_shape();
  for (std::size_t d = 0; d < v.shape.size(); ++d) {
    auto* dim = sh->add_dim();
    if (d == 0) dim->set_dim_param("N");  // the dynamic batch dimension
    else if (v.shape[d] >= 0) dim->set_dim_value(v.shape[d]);
  }
}

::onnx::ModelProto build_model(nn::Model& model, const ExportOptions& opt) {
  ::onnx::ModelProto imported;
  if (export_imported(model, imported)) return imported;  // its own graph, current weights
  if (opt.opset < 13 || opt.opset > 17)
    fail(kWho, "opset ", opt.opset, " is not supported; soma writes opsets 13 to 17");
  // The graph's float type: f64 when the weights are f64, else f32.
  ElemType ftype = TP::FLOAT;
  for (auto& p : model.parameters())
    if (p.dtype() == DType::f64) ftype = TP::DOUBLE;

  std::vector<Value> inputs;
  if (auto* seq = dynamic_cast<nn::Sequential*>(&model)) {
    if (!seq->input_shape())
      fail(kWho, "model '", model.name(), "' is not built: give it an nn::Input, call it once or "
           "use build_for(shape) before exporting");
    ElemType t = ftype;
    if (!seq->layers().empty() && dynamic_cast<nn::Embedding*>(seq->layers()[0].get()))
      t = TP::INT64;
    inputs.push_back({"", *seq->input_shape(), t});
  } else if (!model.inputs().empty()) {
    for (auto& in : model.inputs()) {
      ElemType t = is_floating(in.dtype()) ? ftype : elem_type_of(in.dtype());
      inputs.push_back({"", in.shape(), t});
    }
  } else {
    fail(kWho, "model '", model.name(), "' (", model.type_name(),
         ") is a subclassed model; only Sequential and functional models can be exported");
  }

  ::onnx::ModelProto m;
  m.set_ir_version(8);  // the IR version of opset 17 (ONNX 1.12)
  m.set_producer_name(opt.producer_name);
  m.set_producer_version("0.1.0");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opt.opset);
  auto& g = *m.mutable_graph();
  g.set_name(opt.graph_name.empty() ? model.name() : opt.graph_name);

  Exporter ex(g, opt.opset, ftype);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::string n = i < opt.input_names.size()
                        ? opt.input_names[i]
                        : (inputs.size() == 1 ? "input" : "input_" + std::to_string(i + 1));
    ex.reserve(n);
    inputs[i].name = n;
    set_value_info(*g.add_input(), inputs[i]);
  }
  const bool was_training = model.training();
  model.eval();
  std::vector<Value> outs;
  try {
    outs = ex.emit(model, inputs, nullptr);
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    std::string n = i < opt.output_names.size()
                        ? opt.output_names[i]
                        : (outs.size() == 1 ? "output" : "output_" + std::to_string(i + 1));
    // An Identity names the graph output, whatever node produced it (or a graph input).
    ex.reserve(n);
    ex.node("Identity", {outs[i].name}, {n}, "output");
    Value v = outs[i];
    v.name = n;
    set_value_info(*g.add_output(), v);
  }
  return m;
}

}  // namespace

std::string export_to_bytes(nn::Model& model, const ExportOptions& options) {
  ::onnx::ModelProto m = build_model(model, options);
  std::string bytes;
  if (!m.SerializeToString(&bytes)) fail(kWho, "could not serialise the ONNX model");
  return bytes;
}

void export_model(nn::Model& model, const std::string& path, const ExportOptions& options) {
  // Atomic, durable replace (internal/atomic_file.hpp): a full disk or a kill keeps the old file.
  soma::internal::write_file_atomically(path, export_to_bytes(model, options), kWho);
}

#endif  // SOMA_HAS_ONNX

}  // namespace soma::onnx
