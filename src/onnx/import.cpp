// ONNX import: an nn::Model that interprets an ONNX graph with soma ops. Every op used is
// differentiable, so the tape sees the whole graph and the model can be trained; floating-point
// initialisers are the model's weights.
#include "soma/onnx.hpp"

#include "soma/error.hpp"

#ifdef SOMA_HAS_ONNX
#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "onnx/proto_util.hpp"
#include "soma/autograd.hpp"
#include "soma/nn_ops.hpp"
#include "soma/ops.hpp"
#endif

namespace soma::onnx {

#ifndef SOMA_HAS_ONNX

std::shared_ptr<nn::Model> load(const std::string&, const LoadOptions&) {
  fail("onnx::load",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}
std::shared_ptr<nn::Model> load_from_bytes(const std::string&, const LoadOptions&) {
  fail("onnx::load_from_bytes",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}

#else

namespace {

using namespace soma::onnx_detail;
using ::onnx::AttributeProto;
using ::onnx::NodeProto;
constexpr const char* kWho = "onnx::load";

// The operators the interpreter runs (docs/onnx.md).
const std::set<std::string>& supported_ops() {
  static const std::set<std::string> ops{
      "Abs", "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv",
      "ConvTranspose", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "Gather", "Gemm",
      "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GRU", "HardSigmoid", "HardSwish", "Identity",
      "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "LSTM",
      "MatMul", "Max", "MaxPool", "Mean", "Min", "Mul", "Neg", "Pad", "Pow", "Reciprocal", "ReduceMean", "ReduceSum",
      "Relu", "Reshape", "RNN", "Shape", "Sigmoid", "Slice", "Softmax", "Softplus", "Sqrt",
      "Squeeze", "Sub", "Sum", "Tanh", "Transpose", "Unsqueeze"};
  return ops;
}

std::string node_desc(const NodeProto& n, int index) {
  std::string s = "node ";
  s += n.name().empty() ? "#" + std::to_string(index) : "'" + n.name() + "'";
  return s + " (" + n.op_type() + ")";
}

const AttributeProto* find_attr(const NodeProto& n, const std::string& name) {
  for (auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
std::int64_t attr_i(const NodeProto& n, const std::string& name, std::int64_t def) {
  auto* a = find_attr(n, name);
  return a ? a->i() : def;
}
float attr_f(const NodeProto& n, const std::string& name, float def) {
  auto* a = find_attr(n, name);
  return a ? a->f() : def;
}
std::string attr_s(const NodeProto& n, const std::string& name, const std::string& def) {
  auto* a = find_attr(n, name);
  return a ? a->s() : def;
}
std::vector<std::int64_t> attr_ints(const NodeProto& n, const std::string& name,
                                    std::vector<std::int64_t> def = {}) {
  auto* a = find_attr(n, name);
  if (!a) return def;
  return {a->ints().begin(), a->ints().end()};
}

std::int64_t norm_axis(std::int64_t a, std::int64_t rank) { return a < 0 ? a + rank : a; }

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Tensor constant_value(const NodeProto& n, const std::string& what);

class OnnxModel : public nn::Model {
 public:
  OnnxModel(::onnx::ModelProto proto, const LoadOptions& options);
  std::string type_name() const override { return "OnnxModel"; }
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;

  // The graph with each weight's initialiser holding its current value.
  ::onnx::ModelProto with_current_weights() const {
    ::onnx::ModelProto m = proto_;
    std::unordered_map<std::string, Tensor> values;
    for (auto& [n, v] : named_parameters(false)) values[n] = v.value();
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
      const std::string name = t.name();  // to_proto clears t first
      auto it = values.find(name);
      if (it != values.end()) to_proto(it->second, ElemType(t.data_type()), name, t);
    }
    return m;
  }

  void summary(std::ostream& os) const override {
    os << "Model: \"" << name() << "\" (ONNX graph '" << graph().name() << "', opset " << opset_
       << ", " << graph().node_size() << " nodes)\n";
    for (auto& i : inputs_) os << "  input  " << i.name << " " << format_dims(i.shape) << "\n";
    for (auto& o : output_names_) os << "  output " << o << "\n";
    print_totals(os);
  }

 protected:
  Tensor forward(const Tensor& x) override { return call({x}).at(0); }

 private:
  struct Input {
    std::string name;
    Shape shape;  // -1 where symbolic or unknown
    DType dtype;
  };
  const ::onnx::GraphProto& graph() const { return proto_.graph(); }
  static std::string format_dims(const Shape& s) {
    std::string r = "[";
    for (std::size_t i = 0; i < s.size(); ++i)
      r += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
    return r + "]";
  }
  using Env = std::unordered_map<std::string, Tensor>;
  std::vector<Tensor> run_node(const NodeProto& n, int index, const std::vector<Tensor>& in) const;
  std::vector<Tensor> recurrent(const NodeProto& n, const std::string& what,
                                const std::vector<Tensor>& in) const;

  ::onnx::ModelProto proto_;
  std::int64_t opset_ = 0;
  std::vector<Input> inputs_;
  std::vector<std::string> output_names_;
  std::unordered_map<std::string, Tensor> constants_;  // integer initialisers, Constant nodes
};

OnnxModel::OnnxModel(::onnx::ModelProto proto, const LoadOptions& options)
    : proto_(std::move(proto)) {
  for (auto& os : proto_.opset_import())
    if (os.domain().empty() || os.domain() == "ai.onnx") opset_ = os.version();
  if (opset_ == 0) fail(kWho, "the model imports no opset of the default ONNX domain");
  const auto& g = graph();
  if (!g.name().empty()) {
    std::string n;
    for (char c : g.name()) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    set_name(n);
  }
  // Every operator is checked before anything runs, so an unsupported one fails at load.
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      fail(kWho, node_desc(n, i), ": operator '", n.op_type(), "' of domain '", n.domain(),
           "' is not supported (soma runs operators of the default ONNX domain)");
    if (!supported_ops().count(n.op_type())) {
      std::string list;
      for (auto& o : supported_ops()) list += (list.empty() ? "" : ", ") + o;
      fail(kWho, node_desc(n, i), ": operator '", n.op_type(), "' is not supported by soma (",
           "supported: ", list, ")");
    }
    for (auto& a : n.attribute())
      if (a.type() == AttributeProto::GRAPH || a.type() == AttributeProto::GRAPHS)
        fail(kWho, node_desc(n, i), ": sub-graphs are not supported");
  }
  // Constant nodes are evaluated once, here; they are constants, not weights.
  for (int i = 0; i < g.node_size(); ++i)
    if (g.node(i).op_type() == "Constant")
      constants_[g.node(i).output(0)] = constant_value(g.node(i), node_desc(g.node(i), i));
  // BatchNormalization statistics are weights that training leaves alone.
  std::set<std::string> statistics;
  for (auto& n : g.node())
    if (n.op_type() == "BatchNormalization")
      for (int k = 3; k < 5 && k < n.input_size(); ++k) statistics.insert(n.input(k));

  std::set<std::string> init_names;
  for (auto& t : g.initializer()) {
    if (t.name().empty()) fail(kWho, "an initializer has no name");
    init_names.insert(t.name());
    Tensor v = from_proto(t);
    if (is_floating(v.dtype())) {
      add_weight(t.name(), v, options.trainable && !statistics.count(t.name()));
    } else {
      constants_[t.name()] = v;
    }
  }
  for (auto& vi : g.input()) {
    if (init_names.count(vi.name())) continue;  // IR < 4 lists initialisers as inputs too
    if (!vi.type().has_tensor_type())
      fail(kWho, "graph input '", vi.name(), "' is not a tensor");
    const auto& tt = vi.type().tensor_type();
    Input in{vi.name(), {}, soma_dtype(tt.elem_type(), "graph input '" + vi.name() + "'")};
    if (tt.has_shape())
      for (auto& d : tt.shape().dim()) in.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    else
      in.shape = {};  // unknown rank
    inputs_.push_back(in);
  }
  for (auto& vo : g.output()) output_names_.push_back(vo.name());
  if (output_names_.empty()) fail(kWho, "the graph has no outputs");
}

std::vector<Tensor> OnnxModel::call(const std::vector<Tensor>& inputs) {
  if (inputs.size() != inputs_.size())
    fail(type_name(), "model '", name(), "' takes ", inputs_.size(), " input(s) (", [&] {
      std::string s;
      for (auto& i : inputs_) s += (s.empty() ? "" : ", ") + i.name;
      return s;
    }(), "), got ", inputs.size());
  Env env;
  for (auto& [n, t] : constants_) env[n] = t;
  for (auto& [n, v] : named_parameters(false)) env[n] = v.value();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Input& want = inputs_[i];
    Tensor x = inputs[i];
    if (!x.defined()) fail(type_name(), "input '", want.name, "' is undefined");
    bool ok = want.shape.empty() || x.rank() == std::int64_t(want.shape.size());
    for (std::size_t d = 0; ok && d < want.shape.size(); ++d)
      ok = want.shape[d] < 0 || want.shape[d] == x.shape()[d];
    if (!ok)
      fail(type_name(), "model '", name(), "': input '", want.name, "' expects shape ",
           format_dims(want.shape), ", got ", shape_str(x.shape()));
    if (x.dtype() != want.dtype) x = cast(x, want.dtype);
    env[want.name] = x;
  }
  const auto& g = graph();
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (n.op_type() == "Constant") continue;
    std::vector<Tensor> in;
    for (auto& name : n.input()) {
      if (name.empty()) {
        in.emplace_back();  // an omitted optional input
        continue;
      }
      auto it = env.find(name);
      if (it == env.end())
        fail(kWho, node_desc(n, i), ": input '", name, "' is not computed before the node "
             "(the graph is not topologically sorted, or the name is unknown)");
      in.push_back(it->second);
    }
    std::vector<Tensor> out;
    try {
      out = run_node(n, i, in);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind(kWho, 0) == 0) throw;
      fail(kWho, node_desc(n, i), ": ", msg);
    }
    for (int k = 0; k < n.output_size(); ++k) {
      if (n.output(k).empty()) continue;
      if (std::size_t(k) >= out.size() || !out[std::size_t(k)].defined())
        fail(kWho, node_desc(n, i), ": output ", k, " ('", n.output(k), "') is not supported");
      env[n.output(k)] = out[std::size_t(k)];
    }
  }
  std::vector<Tensor> outs;
  for (auto& o : output_names_) {
    auto it = env.find(o);
    if (it == env.end()) fail(kWho, "graph output '", o, "' is never computed");
    outs.push_back(it->second);
  }
  return outs;
}

// Reads an integer tensor's values (Reshape's shape, Slice's starts, ...).
std::vector<std::int64_t> ints_of(const Tensor& t) {
  if (!t.defined()) return {};
  return cast(t, DType::i64).to_vector<std::int64_t>();
}

Padding onnx_padding(const NodeProto& n, const std::string& what) {
  std::string ap = attr_s(n, "auto_pad", "NOTSET");
  if (ap == "VALID") return Padding("valid");
  if (ap == "SAME_UPPER") return Padding("same");  // TensorFlow's rule: the extra at the end
  if (ap != "NOTSET" && !ap.empty())
    fail(kWho, what, ": auto_pad ", ap, " is not supported");
  auto p = attr_ints(n, "pads", {0, 0, 0, 0});
  if (p.size() != 4) fail(kWho, what, ": only 2-D windows are supported (pads ", p.size(), ")");
  return Padding(p[0], p[2], p[1], p[3]);  // ONNX {t, l, b, r} -> soma {t, b, l, r}
}

Size2 size2(const std::vector<std::int64_t>& v, const std::string& attr, const std::string& what,
            std::int64_t def) {
  if (v.empty()) return Size2(def);
  if (v.size() != 2) fail(kWho, what, ": only 2-D ", attr, " are supported, got ", v.size(), " values");
  return Size2(v[0], v[1]);
}

Tensor activation_fn(const std::string& name, const Tensor& x, const std::string& what) {
  std::string n = lower(name);
  if (n == "sigmoid") return sigmoid(x);
  if (n == "tanh") return tanh(x);
  if (n == "relu") return relu(x);
  fail(kWho, what, ": recurrent activation '", name, "' is not supported (Sigmoid, Tanh, Relu)");
}

// LSTM, GRU and RNN (one direction, forward or reverse, layout 0 or 1).
std::vector<Tensor> OnnxModel::recurrent(const NodeProto& n, const std::string& what,
                                         const std::vector<Tensor>& in) const {
  const std::string type = n.op_type();
  const int k = type == "LSTM" ? 4 : type == "GRU" ? 3 : 1;
  const std::string dir = attr_s(n, "direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    fail(kWho, what, ": direction '", dir, "' is not supported");
  if (find_attr(n, "clip")) fail(kWho, what, ": clip is not supported");
  if (attr_i(n, "input_forget", 0)) fail(kWho, what, ": input_forget is not supported");
  if (in.size() > 4 && in[4].defined()) fail(kWho, what, ": sequence_lens is not supported");
  if (type == "LSTM" && in.size() > 7 && in[7].defined())
    fail(kWho, what, ": peephole weights (P) are not supported");
  const bool batch_first = attr_i(n, "layout", 0) == 1;
  const int dirs = dir == "bidirectional" ? 2 : 1;
  const std::size_t per_dir = k == 4 ? 3 : k == 3 ? 2 : 1;  // activations per direction
  std::vector<std::string> acts;
  if (auto* a = find_attr(n, "activations")) acts.assign(a->strings().begin(), a->strings().end());
  if (acts.empty()) {
    for (int d = 0; d < dirs; ++d) {
      if (k == 4) acts.insert(acts.end(), {"Sigmoid", "Tanh", "Tanh"});
      else if (k == 3) acts.insert(acts.end(), {"Sigmoid", "Tanh"});
      else acts.push_back("Tanh");
    }
  }
  if (acts.size() != per_dir * std::size_t(dirs))
    fail(kWho, what, ": expected ", per_dir * std::size_t(dirs), " activations, got ", acts.size());
  Tensor X = in.at(0), W = in.at(1), R = in.at(2);
  if (batch_first) X = transpose(X, {1, 0, 2});  // -> [time, batch, features]
  const std::int64_t U = R.dim(-1);
  const std::int64_t T = X.dim(0), N = X.dim(1);
  // Initial states [dirs, batch, U] (layout 1: [batch, dirs, U]).
  auto state = [&](std::size_t idx) -> Tensor {
    if (in.size() > idx && in[idx].defined())
      return batch_first ? transpose(in[idx], {1, 0, 2}) : in[idx];
    return Tensor();
  };
  const Tensor H0 = state(5), C0 = k == 4 ? state(6) : Tensor();
  const bool linear_before_reset = attr_i(n, "linear_before_reset", 0) != 0;
  auto chunk = [&](const Tensor& t, std::int64_t g) {
    return slice(t, {Slice{}, Slice{g * U, (g + 1) * U}});
  };
  std::vector<Tensor> Ys, Yhs, Ycs;
  for (int d = 0; d < dirs; ++d) {
    const bool reverse = dir == "reverse" || d == 1;
    const std::string* act = &acts[per_dir * std::size_t(d)];
    Tensor Wt = transpose(W[d]);  // [in, k*U]
    Tensor Rt = transpose(R[d]);  // [U, k*U]
    Tensor wb, rb;
    if (in.size() > 3 && in[3].defined()) {
      Tensor B = in[3][d];
      wb = slice(B, {Slice{0, k * U}});
      rb = slice(B, {Slice{k * U, 2 * k * U}});
    }
    // Input projections of every step in one matmul.
    Tensor XW = matmul(X, Wt);
    if (wb.defined()) XW = XW + wb;
    Tensor H = H0.defined() ? H0[d] : zeros({N, U}, XW.dtype());
    Tensor C = k == 4 ? (C0.defined() ? C0[d] : zeros({N, U}, XW.dtype())) : Tensor();
    std::vector<Tensor> steps(std::size_t(T > 0 ? T : 0));
    for (std::int64_t s = 0; s < T; ++s) {
      const std::int64_t t = reverse ? T - 1 - s : s;
      Tensor xw = XW[t];  // [batch, k*U]
      if (k == 4) {  // gates i, o, f, c
        Tensor gates = xw + matmul(H, Rt);
        if (rb.defined()) gates = gates + rb;
        Tensor i = activation_fn(act[0], chunk(gates, 0), what);
        Tensor o = activation_fn(act[0], chunk(gates, 1), what);
        Tensor f = activation_fn(act[0], chunk(gates, 2), what);
        Tensor c = activation_fn(act[1], chunk(gates, 3), what);
        C = f * C + i * c;
        H = o * activation_fn(act[2], C, what);
      } else if (k == 3) {  // gates z, r, h
        Tensor Rzr = slice(Rt, {Slice{}, Slice{0, 2 * U}});
        Tensor Rh = slice(Rt, {Slice{}, Slice{2 * U, 3 * U}});
        Tensor zr = slice(xw, {Slice{}, Slice{0, 2 * U}}) + matmul(H, Rzr);
        if (rb.defined()) zr = zr + slice(rb, {Slice{0, 2 * U}});
        Tensor z = activation_fn(act[0], chunk(zr, 0), what);
        Tensor r = activation_fn(act[0], chunk(zr, 1), what);
        Tensor rbh = rb.defined() ? slice(rb, {Slice{2 * U, 3 * U}}) : Tensor();
        Tensor hh;
        if (linear_before_reset) {
          Tensor hr = matmul(H, Rh);
          if (rbh.defined()) hr = hr + rbh;
          hh = chunk(xw, 2) + r * hr;
        } else {
          hh = chunk(xw, 2) + matmul(r * H, Rh);
          if (rbh.defined()) hh = hh + rbh;
        }
        hh = activation_fn(act[1], hh, what);
        H = z * H + (1.0 - z) * hh;
      } else {
        Tensor a = xw + matmul(H, Rt);
        if (rb.defined()) a = a + rb;
        H = activation_fn(act[0], a, what);
      }
      steps[std::size_t(t)] = H;  // Y is aligned with the input positions in both directions
    }
    Ys.push_back(stack(steps, 0));  // [time, batch, U]
    Yhs.push_back(H);
    if (k == 4) Ycs.push_back(C);
  }
  Tensor Y = stack(Ys, 1);  // [time, dirs, batch, U]
  Tensor Yh = stack(Yhs, 0);  // [dirs, batch, U]
  Tensor Yc = k == 4 ? stack(Ycs, 0) : Tensor();
  if (batch_first) {
    Y = transpose(Y, {2, 0, 1, 3});  // [batch, time, dirs, U]
    Yh = transpose(Yh, {1, 0, 2});
    if (Yc.defined()) Yc = transpose(Yc, {1, 0, 2});
  }
  return {Y, Yh, Yc};
}

std::vector<Tensor> OnnxModel::run_node(const NodeProto& n, int index,
                                        const std::vector<Tensor>& in) const {
  const std::string& op = n.op_type();
  const std::string what = node_desc(n, index);
  auto arg = [&](std::size_t i) -> const Tensor& {
    if (i >= in.size() || !in[i].defined())
      fail(kWho, what, ": input ", i, " is missing");
    return in[i];
  };
  auto has = [&](std::size_t i) { return i < in.size() && in[i].defined(); };
  const Tensor& x = arg(0);

  if (op == "Identity") return {x};
  if (op == "Dropout") {
    const double ratio =
        has(1) ? cast(in[1], DType::f64).item<double>() : double(attr_f(n, "ratio", 0.5f));
    bool train = has(2) ? cast(in[2], DType::f64).item<double>() != 0.0 : training();
    if (!train || ratio <= 0.0) return {x, ones_like(x).cast(DType::boolean)};
    Tensor keep = greater_equal(random_uniform(x.shape(), 0.0, 1.0, x.dtype()), scalar(ratio, x.dtype()));
    return {x * cast(keep, x.dtype()) / (1.0 - ratio), keep};
  }
  if (op == "Add") return {x + arg(1)};
  if (op == "Sub") return {x - arg(1)};
  if (op == "Mul") return {x * arg(1)};
  if (op == "Div") return {x / arg(1)};
  if (op == "Pow") return {pow(x, cast(arg(1), x.dtype()))};
  if (op == "Sum" || op == "Mean") {
    Tensor s = x;
    for (std::size_t i = 1; i < in.size(); ++i) s = s + arg(i);
    if (op == "Mean") s = s / double(in.size());
    return {s};
  }
  if (op == "Max" || op == "Min") {
    Tensor s = x;
    for (std::size_t i = 1; i < in.size(); ++i)
      s = op == "Max" ? maximum(s, arg(i)) : minimum(s, arg(i));
    return {s};
  }
  if (op == "Clip") {
    double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
    if (opset_ >= 11) {
      if (has(1)) lo = cast(in[1], DType::f64).item<double>();
      if (has(2)) hi = cast(in[2], DType::f64).item<double>();
    } else {
      lo = attr_f(n, "min", -std::numeric_limits<float>::max());
      hi = attr_f(n, "max", std::numeric_limits<float>::max());
    }
    return {clip(x, lo, hi)};
  }
  if (op == "HardSigmoid")
    return {clip(x * double(attr_f(n, "alpha", 0.2f)) + double(attr_f(n, "beta", 0.5f)), 0.0, 1.0)};
  if (op == "HardSwish") return {x * clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)};
  if (op == "Expand") {
    auto s = ints_of(arg(1));
    return {x + zeros(Shape(s.begin(), s.end()), x.dtype())};  // broadcasts both ways
  }
  if (op == "Equal") return {equal(x, arg(1))};
  if (op == "Greater") return {greater(x, arg(1))};
  if (op == "GreaterOrEqual") return {greater_equal(x, arg(1))};
  if (op == "Less") return {less(x, arg(1))};
  if (op == "LessOrEqual") return {less_equal(x, arg(1))};
  if (op == "Relu") return {relu(x)};
  if (op == "Sigmoid") return {sigmoid(x)};
  if (op == "Tanh") return {tanh(x)};
  if (op == "Erf") return {erf(x)};
  if (op == "Exp") return {exp(x)};
  if (op == "Log") return {log(x)};
  if (op == "Sqrt") return {sqrt(x)};
  if (op == "Abs") return {abs(x)};
  if (op == "Neg") return {negative(x)};
  if (op == "Reciprocal") return {reciprocal(x)};
  if (op == "Softplus") return {softplus(x)};
  if (op == "LeakyRelu") return {leaky_relu(x, attr_f(n, "alpha", 0.01f))};
  if (op == "Elu") return {elu(x, attr_f(n, "alpha", 1.0f))};
  if (op == "Softmax" || op == "LogSoftmax") {
    const bool log_ = op == "LogSoftmax";
    if (opset_ >= 13) {
      std::int64_t axis = attr_i(n, "axis", -1);
      return {log_ ? log_softmax(x, axis) : softmax(x, axis)};
    }
    // Before opset 13: over all axes from `axis` on (the input seen as 2-D).
    std::int64_t axis = norm_axis(attr_i(n, "axis", 1), x.rank());
    std::int64_t outer = 1;
    for (std::int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    Tensor f = reshape(x, {outer, -1});
    return {reshape(log_ ? log_softmax(f, -1) : softmax(f, -1), x.shape())};
  }
  if (op == "Cast") {
    return {cast(x, soma_dtype(int(attr_i(n, "to", 1)), what + " 'to'"))};
  }
  if (op == "MatMul") return {matmul(x, arg(1))};
  if (op == "Gemm") {
    Tensor a = attr_i(n, "transA", 0) ? transpose(x) : x;
    Tensor b = attr_i(n, "transB", 0) ? transpose(arg(1)) : arg(1);
    const double alpha = attr_f(n, "alpha", 1.0f), beta = attr_f(n, "beta", 1.0f);
    Tensor y = matmul(a, b);
    if (alpha != 1.0) y = y * alpha;
    if (has(2)) y = y + (beta != 1.0 ? in[2] * beta : in[2]);
    return {y};
  }
  if (op == "Conv" || op == "ConvTranspose") {
    if (x.rank() != 4) fail(kWho, what, ": only 2-D convolutions (inputs [N, C, H, W]) are supported");
    const Tensor& w = arg(1);
    Size2 strides = size2(attr_ints(n, "strides"), "strides", what, 1);
    Size2 dil = size2(attr_ints(n, "dilations"), "dilations", what, 1);
    const std::int64_t groups = attr_i(n, "group", 1);
    Tensor y;
    if (op == "Conv") {
      y = conv2d(x, w, strides, onnx_padding(n, what), dil, groups);
    } else {
      Padding pad = onnx_padding(n, what);
      if (pad.mode() != Padding::Mode::explicit_)
        fail(kWho, what, ": ConvTranspose needs explicit pads (auto_pad is not supported)");
      Size2 op_ = size2(attr_ints(n, "output_padding"), "output_padding", what, 0);
      auto os = attr_ints(n, "output_shape");
      const auto& p = pad.pads();
      if (!os.empty()) {  // the output size decides output_padding (the pads stay as given)
        auto keff = [](std::int64_t k, std::int64_t d) { return (k - 1) * d + 1; };
        const std::size_t o = os.size() - 2;
        op_ = Size2(os[o] - ((x.dim(2) - 1) * strides.h + keff(w.dim(2), dil.h) - p[0] - p[1]),
                    os[o + 1] - ((x.dim(3) - 1) * strides.w + keff(w.dim(3), dil.w) - p[2] - p[3]));
      }
      y = conv2d_transpose(x, w, strides, pad, op_, dil, groups);
    }
    if (has(2)) y = y + reshape(in[2], {1, -1, 1, 1});
    return {y};
  }
  if (op == "MaxPool" || op == "AveragePool") {
    if (x.rank() != 4) fail(kWho, what, ": only 2-D pooling (inputs [N, C, H, W]) is supported");
    if (n.output_size() > 1 && !n.output(1).empty())
      fail(kWho, what, ": the Indices output is not supported");
    Size2 ks = size2(attr_ints(n, "kernel_shape"), "kernel_shape", what, 1);
    Size2 st = size2(attr_ints(n, "strides"), "strides", what, 1);  // ONNX's default is 1
    for (auto d : attr_ints(n, "dilations"))
      if (d != 1) fail(kWho, what, ": dilated pooling is not supported");
    Padding pad = onnx_padding(n, what);
    Tensor xi = x;
    if (op == "AveragePool" && attr_i(n, "count_include_pad", 0) &&
        pad.mode() == Padding::Mode::explicit_) {
      // Zeros that count: pad explicitly, then pool without padding.
      const auto& p = pad.pads();
      xi = soma::pad(x, {{0, 0}, {0, 0}, {p[0], p[1]}, {p[2], p[3]}});
      pad = Padding("valid");
    }
    if (attr_i(n, "ceil_mode", 0)) {
      // Extra padding at the end gives the ceil sizes; max pooling ignores padding, so the
      // result is exact there. Average pooling with a partial window is refused.
      auto base = pool2d_output_shape(xi.shape(), ks, st, pad);
      Shape ext = xi.shape();
      std::array<std::int64_t, 4> p{0, 0, 0, 0};
      if (pad.mode() == Padding::Mode::explicit_) p = pad.pads();
      else if (pad.mode() == Padding::Mode::same)
        p = resolve_padding(pad, xi.dim(2), xi.dim(3), ks, st);
      auto ceil_len = [](std::int64_t len, std::int64_t k, std::int64_t s) {
        return (len - k + s - 1) / s + 1;
      };
      const std::int64_t ch = ceil_len(xi.dim(2) + p[0] + p[1], ks.h, st.h);
      const std::int64_t cw = ceil_len(xi.dim(3) + p[2] + p[3], ks.w, st.w);
      if (ch != base[2] || cw != base[3]) {
        if (op == "AveragePool")
          fail(kWho, what, ": ceil_mode with a partial last window is not supported for "
               "AveragePool");
        p[1] += (ch - 1) * st.h + ks.h - (xi.dim(2) + p[0] + p[1]);
        p[3] += (cw - 1) * st.w + ks.w - (xi.dim(3) + p[2] + p[3]);
        pad = Padding(p[0], p[1], p[2], p[3]);
      }
    }
    return {op == "MaxPool" ? max_pool2d(xi, ks, st, pad) : avg_pool2d(xi, ks, st, pad)};
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    Axes axes;
    for (std::int64_t d = 2; d < x.rank(); ++d) axes.push_back(d);
    return {op == "GlobalAveragePool" ? mean(x, axes, true) : max(x, axes, true)};
  }
  if (op == "BatchNormalization") {
    if (n.output_size() > 1)
      fail(kWho, what, ": training-mode outputs (running mean/var) are not supported");
    Shape b(std::size_t(x.rank()), 1);
    b[1] = x.dim(1);
    const double eps = attr_f(n, "epsilon", 1e-5f);
    // As nn::BatchNormalization in inference: (x - mean) * rsqrt(var + eps) * gamma + beta.
    Tensor y = (x - reshape(arg(3), b)) * rsqrt(reshape(arg(4), b) + eps);
    y = y * reshape(arg(1), b);
    return {y + reshape(arg(2), b)};
  }
  if (op == "LayerNormalization") {
    if (n.output_size() > 1) fail(kWho, what, ": the Mean/InvStdDev outputs are not supported");
    const std::int64_t axis = norm_axis(attr_i(n, "axis", -1), x.rank());
    Axes axes;
    for (std::int64_t d = axis; d < x.rank(); ++d) axes.push_back(d);
    const double eps = attr_f(n, "epsilon", 1e-5f);
    Tensor m = mean(x, axes, true);
    Tensor var = mean(square(x - m), axes, true);
    Tensor y = (x - m) * rsqrt(var + eps);
    y = y * arg(1);
    if (has(2)) y = y + in[2];
    return {y};
  }
  if (op == "ReduceMean" || op == "ReduceSum") {
    Axes axes;
    if (op == "ReduceSum" && opset_ >= 13) {
      if (has(1)) for (auto a : ints_of(in[1])) axes.push_back(a);
    } else {
      for (auto a : attr_ints(n, "axes")) axes.push_back(a);
    }
    const bool keep = attr_i(n, "keepdims", 1) != 0;
    if (axes.empty() && op == "ReduceSum" && attr_i(n, "noop_with_empty_axes", 0)) return {x};
    return {op == "ReduceMean" ? mean(x, axes, keep) : sum(x, axes, keep)};
  }
  if (op == "Flatten") {
    const std::int64_t axis = norm_axis(attr_i(n, "axis", 1), x.rank());
    std::int64_t outer = 1;
    for (std::int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    std::int64_t inner = 1;
    for (std::int64_t d = axis; d < x.rank(); ++d) inner *= x.dim(d);
    return {reshape(x, {outer, inner})};
  }
  if (op == "Reshape") {
    auto s = ints_of(arg(1));
    const bool allowzero = attr_i(n, "allowzero", 0) != 0;
    Shape shape;
    for (std::size_t d = 0; d < s.size(); ++d)
      shape.push_back(s[d] == 0 && !allowzero ? x.dim(std::int64_t(d)) : s[d]);
    return {reshape(x, shape)};
  }
  if (op == "Shape") {
    std::vector<std::int64_t> s(x.shape().begin(), x.shape().end());
    return {constant(s, Shape{std::int64_t(s.size())})};
  }
  if (op == "Transpose") {
    auto perm = attr_ints(n, "perm");
    return {transpose(x, perm)};
  }
  if (op == "Concat") {
    std::vector<Tensor> parts;
    for (std::size_t i = 0; i < in.size(); ++i) parts.push_back(arg(i));
    return {concat(parts, attr_i(n, "axis", 0))};
  }
  if (op == "Squeeze" || op == "Unsqueeze") {
    std::vector<std::int64_t> axes = opset_ >= 13 ? ints_of(has(1) ? in[1] : Tensor())
                                                   : attr_ints(n, "axes");
    if (op == "Squeeze") return {squeeze(x, axes)};
    const std::int64_t out_rank = x.rank() + std::int64_t(axes.size());
    for (auto& a : axes) a = norm_axis(a, out_rank);
    std::sort(axes.begin(), axes.end());
    Tensor y = x;
    for (auto a : axes) y = expand_dims(y, a);
    return {y};
  }
  if (op == "Gather") {
    const std::int64_t axis = norm_axis(attr_i(n, "axis", 0), x.rank());
    // Negative indices count from the end (indices carry no gradient: fix them on the host).
    Tensor idx = arg(1);
    auto iv = ints_of(idx);
    for (auto& v : iv)
      if (v < 0) v += x.dim(axis);
    idx = constant(iv, idx.shape());
    if (idx.rank() == 0) {  // a scalar index drops the axis
      return {squeeze(gather(x, reshape(cast(idx, DType::i64), {1}), axis), {axis})};
    }
    return {gather(x, cast(idx, DType::i64), axis)};
  }
  if (op == "Slice") {
    auto starts = ints_of(arg(1)), ends = ints_of(arg(2));
    std::vector<std::int64_t> axes = has(3) ? ints_of(in[3]) : std::vector<std::int64_t>{};
    std::vector<std::int64_t> steps = has(4) ? ints_of(in[4]) : std::vector<std::int64_t>{};
    if (axes.empty())
      for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(std::int64_t(i));
    std::vector<Slice> sl(std::size_t(x.rank()));
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const std::int64_t a = norm_axis(axes[i], x.rank());
      const std::int64_t dim = x.dim(a);
      const std::int64_t step = i < steps.size() ? steps[i] : 1;
      std::int64_t s = starts[i], e = ends[i];
      if (s < 0) s += dim;
      if (e < 0 && e > INT64_MIN / 2) e += dim;
      Slice z;
      z.step = step;
      if (step > 0) {
        z.start = std::clamp<std::int64_t>(s, 0, dim);
        z.stop = std::clamp<std::int64_t>(e, 0, dim);
      } else {
        z.start = std::clamp<std::int64_t>(s, 0, dim - 1);
        if (e < 0) z.stop = std::nullopt;  // runs to the first element
        else z.stop = std::min<std::int64_t>(e, dim - 1);
      }
      sl[std::size_t(a)] = z;
    }
    return {slice(x, sl)};
  }
  if (op == "Pad") {
    const std::string mode = attr_s(n, "mode", "constant");
    if (mode != "constant") fail(kWho, what, ": Pad mode '", mode, "' is not supported (constant)");
    auto p = opset_ >= 11 ? ints_of(arg(1)) : attr_ints(n, "pads");
    if (std::int64_t(p.size()) != 2 * x.rank())
      fail(kWho, what, ": pads has ", p.size(), " values for an input of rank ", x.rank());
    if (has(3)) fail(kWho, what, ": the axes input is not supported");
    const double value = opset_ >= 11 ? (has(2) ? cast(in[2], DType::f64).item<double>() : 0.0)
                                      : double(attr_f(n, "value", 0.0f));
    std::vector<std::pair<std::int64_t, std::int64_t>> pads;
    for (std::int64_t d = 0; d < x.rank(); ++d)
      pads.emplace_back(p[std::size_t(d)], p[std::size_t(d + x.rank())]);
    for (auto& [a, b] : pads)
      if (a < 0 || b < 0) fail(kWho, what, ": negative pads are not supported");
    return {soma::pad(x, pads, value)};
  }
  if (op == "ConstantOfShape") {
    auto s = ints_of(x);
    Shape shape(s.begin(), s.end());
    Tensor v = scalar(0.0, DType::f32);
    if (auto* a = find_attr(n, "value")) v = from_proto(a->t());
    return {fill(shape, cast(v, DType::f64).item<double>(), v.dtype())};
  }
  if (op == "Constant") fail(kWho, what, ": internal: Constant is evaluated at load");
  if (op == "LSTM" || op == "GRU" || op == "RNN") return recurrent(n, what, in);
  fail(kWho, what, ": operator '", op, "' is not supported by soma");
}

Tensor constant_value(const NodeProto& n, const std::string& what) {
  for (auto& a : n.attribute()) {
    if (a.name() == "value") return from_proto(a.t());
    if (a.name() == "value_float") return scalar(a.f(), DType::f32);
    if (a.name() == "value_int") return scalar(double(a.i()), DType::i64);
    if (a.name() == "value_floats")
      return constant(std::vector<float>(a.floats().begin(), a.floats().end()),
                      Shape{a.floats_size()});
    if (a.name() == "value_ints")
      return constant(std::vector<std::int64_t>(a.ints().begin(), a.ints().end()),
                      Shape{a.ints_size()});
  }
  fail(kWho, what, ": a Constant needs a value, value_float(s) or value_int(s) attribute");
}

std::shared_ptr<nn::Model> build(::onnx::ModelProto proto, const LoadOptions& options) {
  return std::make_shared<OnnxModel>(std::move(proto), options);
}

}  // namespace
}  // namespace soma::onnx

namespace soma::onnx_detail {
bool export_imported(const nn::Model& model, ::onnx::ModelProto& out) {
  auto* m = dynamic_cast<const soma::onnx::OnnxModel*>(&model);
  if (!m) return false;
  out = m->with_current_weights();
  return true;
}
}  // namespace soma::onnx_detail

namespace soma::onnx {

std::shared_ptr<nn::Model> load_from_bytes(const std::string& bytes, const LoadOptions& options) {
  ::onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) fail(kWho, "the data is not an ONNX model (protobuf parse failed)");
  return build(std::move(m), options);
}

std::shared_ptr<nn::Model> load(const std::string& path, const LoadOptions& options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(kWho, "cannot open '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  ::onnx::ModelProto m;
  if (!m.ParseFromString(ss.str()))
    fail(kWho, "'", path, "' is not an ONNX model (protobuf parse failed)");
  return build(std::move(m), options);
}

#endif  // SOMA_HAS_ONNX

}  // namespace soma::onnx
