// ONNX export: every layer lowers itself to ops (Module::lower, soma/nn/lowering.hpp) and each
// op becomes ONNX nodes: by its one-to-one mapping (OpDef::onnx, op_table.hpp) or by the writer
// of op_writers() for the lowering ops (docs/onnx.md has the table). Shapes are tracked with the
// batch axis as -1 so that padding can be made explicit; the batch dimension of the graph is
// symbolic ("N").
#include "soma/onnx.hpp"

#include "soma/error.hpp"

#ifdef SOMA_HAS_ONNX
#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <sstream>

#include "internal/atomic_file.hpp"
#include "onnx/op_table.hpp"
#include "onnx/proto_util.hpp"
#include "soma/autograd.hpp"
#include "soma/nn/lowering.hpp"
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
using Names = std::vector<std::string>;
using Ints = std::vector<std::int64_t>;
constexpr const char* kWho = "onnx::export_model";

// A value of the graph: its name and shape (batch axis -1, other unknown extents -1).
struct Value {
  std::string name;
  Shape shape;
  ElemType type = TP::FLOAT;
};

class Exporter;
// An op whose ONNX form is not one node with renamed attributes (a lowering op of
// soma/nn/lowering.hpp, or an attribute that ONNX takes as an input): its own writer.
struct OpWriter {
  std::string op;
  int min_opset;
  Names (*write)(Exporter& e, const Names& in, const Attrs& a, int num_outputs);
};
const std::vector<OpWriter>& op_writers();
const OpWriter* find_writer(const std::string& op) {
  const auto& t = op_writers();
  auto it = std::find_if(t.begin(), t.end(), [&](const OpWriter& w) { return w.op == op; });
  return it == t.end() ? nullptr : &*it;
}

// Writes a model by lowering its layers (Module::lower) and their ops into ONNX nodes: an op
// with a one-to-one mapping (op_table.hpp) becomes one node, the others go through op_writers().
class Exporter final : public nn::Lowering {
 public:
  Exporter(::onnx::GraphProto& g, std::int64_t opset, ElemType ftype)
      : g_(g), opset_(opset), ftype_(ftype) {}

  std::int64_t opset() const { return opset_; }
  ElemType ftype() const { return ftype_; }
  const std::string& base() const { return base_; }

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

  ::onnx::NodeProto& node(const std::string& op, const Names& inputs, const Names& outputs) {
    auto& n = *g_.add_node();
    n.set_op_type(op);
    n.set_name(unique(base_ + "/" + op));
    for (auto& i : inputs) n.add_input(i);
    for (auto& o : outputs) n.add_output(o);
    return n;
  }
  // One node with one new output; returns the output's name.
  std::string op(const std::string& op, const Names& inputs, ::onnx::NodeProto** out = nullptr) {
    std::string y = unique(base_ + "/" + op + "_out");
    auto& n = node(op, inputs, {y});
    if (out) *out = &n;
    return y;
  }
  Names outputs(const std::string& op, int n) {
    Names outs;
    for (int i = 0; i < n; ++i) outs.push_back(unique(base_ + "/" + op + "_out"));
    return outs;
  }
  std::string where() const { return current_ ? nn::describe(*current_) : std::string("a layer"); }

  // ---- nn::Lowering ----
  bool supports(const std::string& op) const override {
    if (auto* w = find_writer(op)) return opset_ >= w->min_opset;
    return mapped_in_opset(op);
  }
  bool mapped_in_opset(const std::string& op) const {
    const OnnxMapping* m = detail::onnx_mapping_of(op);
    return m && detail::in_opset(*m, opset_);
  }
  Names emit(const std::string& op, const Names& inputs, const Attrs& attrs,
             int num_outputs) override {
    if (auto* w = find_writer(op)) {
      if (opset_ < w->min_opset)
        soma::fail(kWho, where(), ": op '", op, "' needs opset ", w->min_opset, " or later, got ",
                   opset_);
      return w->write(*this, inputs, attrs, num_outputs);
    }
    return emit_mapped(op, inputs, attrs, num_outputs);
  }
  // An op by its one-to-one mapping (OpDef::onnx).
  Names emit_mapped(const std::string& op, const Names& inputs, const Attrs& attrs,
                    int num_outputs) {
    const OnnxMapping* m = detail::onnx_mapping_of(op);
    if (!m) soma::fail(kWho, where(), ": op '", op, "' has no ONNX mapping");
    Names outs = outputs(m->op_type, num_outputs);
    detail::write_node(node(m->op_type, inputs, outs), op, *m, attrs, opset_, kWho);
    return outs;
  }
  std::string weight(const std::string& name, const Tensor& t) override {
    return initializer(base_ + "." + name, t, ftype_);
  }
  std::string ints(const std::string& name, const Ints& v) override {
    return initializer(base_ + "." + name, constant(v, Shape{std::int64_t(v.size())}), TP::INT64);
  }
  // A float scalar constant, shared by every node that needs the same number.
  std::string scalar(double v) override {
    auto it = scalars_.find(v);
    if (it != scalars_.end()) return it->second;
    std::string n = initializer("const", soma::scalar(v, DType::f64), ftype_);
    scalars_[v] = n;
    return n;
  }
  DType float_dtype() const override { return ftype_ == TP::DOUBLE ? DType::f64 : DType::f32; }
  std::vector<nn::LoweredValue> lower(nn::Module& m, const std::vector<nn::LoweredValue>& ins,
                                      const std::vector<Shape>* out_shapes) override {
    nn::Module* saved = current_;
    std::string saved_base = base_;
    current_ = &m;
    base_ = m.name();
    auto outs = m.lower(*this, ins);
    current_ = saved;
    base_ = saved_base;
    if (out_shapes)
      for (std::size_t i = 0; i < outs.size() && i < out_shapes->size(); ++i)
        outs[i].shape = (*out_shapes)[i];
    return outs;
  }
  [[noreturn]] void fail(const std::string& message) const override { soma::fail(kWho, message); }
  [[noreturn]] void unsupported(const std::string& what) const override {
    soma::fail(kWho, where(), what.empty() ? "" : ": ", what, " has no ONNX mapping");
  }

  void set_base(std::string b) { base_ = std::move(b); }

 private:
  std::string initializer(const std::string& base, const Tensor& t, ElemType type) {
    std::string n = unique(base);
    to_proto(t, type, n, *g_.add_initializer());
    return n;
  }

  ::onnx::GraphProto& g_;
  std::int64_t opset_;
  ElemType ftype_;
  std::set<std::string> used_;
  std::map<double, std::string> scalars_;
  nn::Module* current_ = nullptr;
  std::string base_;
};

using detail::attr;

Names one(Exporter& e, const char* type, const Names& in) { return {e.op(type, in)}; }

// soma's pads are {begin, end} per spatial axis ({top, bottom, left, right} in 2-d; Conv3D
// {front, back, top, bottom, left, right}); ONNX's are every begin, then every end.
std::vector<std::int64_t> onnx_pads(const Ints& p) {
  std::vector<std::int64_t> r(p.size());
  const std::size_t axes = p.size() / 2;
  for (std::size_t a = 0; a < axes; ++a) {
    r[a] = p[2 * a];
    r[axes + a] = p[2 * a + 1];
  }
  return r;
}

Names conv(Exporter& e, const Names& in, const Attrs& a, const char* type) {
  ::onnx::NodeProto* n = nullptr;
  auto y = e.op(type, in, &n);
  attr(*n, "kernel_shape", a.ints("kernel_size"));
  attr(*n, "strides", a.ints("strides"));
  attr(*n, "dilations", a.ints("dilation"));
  attr(*n, "pads", onnx_pads(a.ints("pads")));
  attr(*n, "group", a.i("groups"));
  if (a.has("output_padding")) {
    const auto& op = a.ints("output_padding");
    if (std::any_of(op.begin(), op.end(), [](std::int64_t v) { return v != 0; }))
      attr(*n, "output_padding", op);
  }
  return {y};
}

Names pool(Exporter& e, const Names& in, const Attrs& a, const char* type) {
  ::onnx::NodeProto* n = nullptr;
  auto y = e.op(type, in, &n);
  attr(*n, "kernel_shape", a.ints("pool"));
  attr(*n, "strides", a.ints("strides"));
  attr(*n, "pads", onnx_pads(a.ints("pads")));
  // soma's average pooling divides by the real (unpadded) elements: ONNX's default.
  return {y};
}

// An attribute ONNX takes as an i64 input (Squeeze, Unsqueeze, Reshape from opset 13).
Names with_ints_input(Exporter& e, const Names& in, const Attrs& a, const char* type,
                      const char* key, const char* name) {
  return {e.op(type, {in.at(0), e.ints(name, a.ints(key))})};
}

// Squeeze/Unsqueeze (opset 13) and ReduceMean (18) take their axes as an input from `from` on,
// as an attribute before.
Names axes_input_from(Exporter& e, std::int64_t from, const Names& in, const Attrs& a,
                      const char* type) {
  if (e.opset() >= from) return {e.op(type, {in.at(0), e.ints("axes", a.ints("axes"))})};
  ::onnx::NodeProto* n = nullptr;
  auto y = e.op(type, {in.at(0)}, &n);
  attr(*n, "axes", a.ints("axes"));
  return {y};
}

// Softmax/LogSoftmax: one axis from opset 13; before, the input is flattened to 2-D at `axis`,
// which is the same only for the last axis.
Names softmax(Exporter& e, const Names& in, const Attrs& a, int k, const char* op) {
  if (e.mapped_in_opset(op)) return e.emit_mapped(op, in, a, k);
  if (a.i("axis") != -1)
    soma::fail(kWho, e.where(), ": ", op, " over axis ", a.i("axis"),
               " needs opset 13 or later (before it, ONNX's Softmax flattens from the axis)");
  ::onnx::NodeProto* n = nullptr;
  auto y = e.op(op == std::string("softmax") ? "Softmax" : "LogSoftmax", {in.at(0)}, &n);
  attr(*n, "axis", std::int64_t(-1));
  return {y};
}

// The standard RNN ops: the lowering gives the weights in ONNX's layout (lowering.hpp).
Names recurrent(Exporter& e, const Names& in, const Attrs& a, int num_outputs, const char* type,
                const char* default_activations) {
  // The activations ONNX's RNN ops take that soma's importer reads back.
  static const std::vector<std::string> kActivations = {"sigmoid", "tanh", "relu"};
  Names acts;
  std::string joined;
  std::stringstream ss(a.s("activations"));
  for (std::string name; std::getline(ss, name, ',');) {
    const OnnxMapping* m = detail::onnx_mapping_of(name);
    if (std::find(kActivations.begin(), kActivations.end(), name) == kActivations.end() || !m)
      soma::fail(kWho, e.where(), ": activation '", name,
                 "' has no ONNX recurrent-activation mapping (sigmoid, tanh, relu)");
    acts.push_back(m->op_type);
    joined += (joined.empty() ? "" : ",") + m->op_type;
  }
  Names outs;
  for (int i = 0; i < num_outputs; ++i)
    outs.push_back(e.unique(e.base() + (i == 0 ? "/Y" : i == 1 ? "/Y_h" : "/Y_c")));
  auto& n = e.node(type, in, outs);
  attr(n, "hidden_size", a.i("hidden_size"));
  if (joined != default_activations) attr(n, "activations", acts);
  if (a.has("linear_before_reset") && a.b("linear_before_reset"))
    attr(n, "linear_before_reset", std::int64_t(1));
  return outs;
}

// scaled_dot_product_attention (q [B, H, T, d], k [B, H, S, d], v [B, H, S, dv] [, mask]) as
// softmax(where(allowed, q k^T * scale, -1e30)) v: Transpose, MatMul, Mul, Where, Softmax,
// MatMul. The causal mask (query i sees keys j <= i) is made from the scores' shape: Shape,
// Slice, Expand of a 1, Trilu (opset 14), Cast to bool; a boolean mask input (true: attend) is
// combined with it by And. Only the output is written (not the op's lse).
Names attention(Exporter& e, const Names& in, const Attrs& a, int num_outputs) {
  if (in.size() < 3 || in.size() > 4 || num_outputs != 1)
    soma::fail(kWho, e.where(), ": scaled_dot_product_attention takes q, k, v [, mask] and ",
               "gives one output here, got ", in.size(), " inputs and ", num_outputs, " outputs");
  const double scale = a.has("scale") ? a.f("scale") : 0.0;
  if (!(scale > 0.0))
    soma::fail(kWho, e.where(), ": scaled_dot_product_attention needs an explicit scale to be "
               "written (the head size is not known here)");
  ::onnx::NodeProto* n = nullptr;
  const std::string kt = e.op("Transpose", {in[1]}, &n);
  attr(*n, "perm", Ints{0, 1, 3, 2});
  const std::string s = e.op("Mul", {e.op("MatMul", {in[0], kt}), e.scalar(scale)});
  std::string allowed = in.size() > 3 && !in[3].empty() ? in[3] : "";
  if (a.has("causal") && a.b("causal")) {
    if (e.opset() < 14)
      soma::fail(kWho, e.where(), ": a causal scaled_dot_product_attention needs opset 14 or "
                 "later (Trilu), got ", e.opset());
    const std::string ts = e.op("Slice", {e.op("Shape", {s}), e.ints("attn_starts", {2}),
                                          e.ints("attn_ends", {4})});
    ::onnx::NodeProto* tri = nullptr;
    const std::string lower = e.op("Trilu", {e.op("Expand", {e.scalar(1.0), ts})}, &tri);
    attr(*tri, "upper", std::int64_t(0));
    ::onnx::NodeProto* c = nullptr;
    const std::string causal = e.op("Cast", {lower}, &c);
    attr(*c, "to", std::int64_t(TP::BOOL));
    allowed = allowed.empty() ? causal : e.op("And", {allowed, causal});
  }
  std::string logits = s;
  if (!allowed.empty()) logits = e.op("Where", {allowed, s, e.scalar(-1e30)});
  ::onnx::NodeProto* sm = nullptr;
  const std::string p = e.op("Softmax", {logits}, &sm);
  attr(*sm, "axis", std::int64_t(-1));
  return {e.op("MatMul", {p, in[2]})};
}

const std::vector<OpWriter>& op_writers() {
  using A = const Attrs&;
  static const std::vector<OpWriter> table = {
      {"dense", 11, [](Exporter& e, const Names& in, A, int) { return one(e, "Gemm", in); }},
      {"conv2d", 11, [](Exporter& e, const Names& in, A a, int) { return conv(e, in, a, "Conv"); }},
      {"conv2d_transpose", 11,
       [](Exporter& e, const Names& in, A a, int) { return conv(e, in, a, "ConvTranspose"); }},
      {"max_pool2d", 11,
       [](Exporter& e, const Names& in, A a, int) { return pool(e, in, a, "MaxPool"); }},
      {"avg_pool2d", 11,
       [](Exporter& e, const Names& in, A a, int) { return pool(e, in, a, "AveragePool"); }},
      {"global_avg_pool2d", 11,
       [](Exporter& e, const Names& in, A, int) { return one(e, "GlobalAveragePool", in); }},
      {"global_max_pool", 11,
       [](Exporter& e, const Names& in, A, int) { return one(e, "GlobalMaxPool", in); }},
      {"flatten", 11,
       [](Exporter& e, const Names& in, A a, int) -> Names {
         ::onnx::NodeProto* n = nullptr;
         auto y = e.op("Flatten", in, &n);
         attr(*n, "axis", a.i("axis"));
         return {y};
       }},
      {"reshape", 11,
       [](Exporter& e, const Names& in, A a, int) {
         return with_ints_input(e, in, a, "Reshape", "shape", "shape");
       }},
      {"squeeze", 11,
       [](Exporter& e, const Names& in, A a, int) {
         return axes_input_from(e, 13, in, a, "Squeeze");
       }},
      {"expand_dims", 11,
       [](Exporter& e, const Names& in, A a, int) {
         return axes_input_from(e, 13, in, a, "Unsqueeze");
       }},
      {"reverse", 11,
       [](Exporter& e, const Names& in, A a, int) -> Names {
         return one(e, "Slice",
                    {in.at(0), e.ints("rev_starts", {-1}), e.ints("rev_ends", {INT64_MIN}),
                     e.ints("rev_axes", {a.i("axis")}), e.ints("rev_steps", {-1})});
       }},
      {"reduce_mean", 11,
       [](Exporter& e, const Names& in, A a, int) {
         return axes_input_from(e, 18, in, a, "ReduceMean");
       }},
      {"dropout", 11,  // an inference graph: ONNX's Dropout is the identity without training_mode
       [](Exporter& e, const Names& in, A a, int) -> Names {
         if (e.opset() >= 12) return {e.op("Dropout", {in.at(0), e.scalar(a.f("rate"))})};
         ::onnx::NodeProto* n = nullptr;  // opset 11: the ratio is an attribute
         auto y = e.op("Dropout", {in.at(0)}, &n);
         attr(*n, "ratio", a.f("rate"));
         return {y};
       }},
      {"softmax", 11,
       [](Exporter& e, const Names& in, A a, int k) { return softmax(e, in, a, k, "softmax"); }},
      {"log_softmax", 11,
       [](Exporter& e, const Names& in, A a, int k) {
         return softmax(e, in, a, k, "log_softmax");
       }},
      {"greater_equal", 11,  // GreaterOrEqual arrives in opset 12: Not(Less) before
       [](Exporter& e, const Names& in, A a, int k) -> Names {
         if (e.mapped_in_opset("greater_equal")) return e.emit_mapped("greater_equal", in, a, k);
         return {e.op("Not", {e.op("Less", in)})};
       }},
      {"batch_norm", 11,
       [](Exporter& e, const Names& in, A a, int) -> Names {
         ::onnx::NodeProto* n = nullptr;
         auto y = e.op("BatchNormalization", in, &n);
         attr(*n, "epsilon", a.f("epsilon"));
         return {y};
       }},
      {"layer_norm", 17,
       [](Exporter& e, const Names& in, A a, int) -> Names {
         ::onnx::NodeProto* n = nullptr;
         auto y = e.op("LayerNormalization", in, &n);
         attr(*n, "axis", a.i("axis"));
         attr(*n, "epsilon", a.f("epsilon"));
         return {y};
       }},
      {"scaled_dot_product_attention", 13,
       [](Exporter& e, const Names& in, A a, int k) { return attention(e, in, a, k); }},
      {"add_n", 11, [](Exporter& e, const Names& in, A, int) { return one(e, "Sum", in); }},
      {"mean_n", 11, [](Exporter& e, const Names& in, A, int) { return one(e, "Mean", in); }},
      {"lstm", 11,
       [](Exporter& e, const Names& in, A a, int k) {
         return recurrent(e, in, a, k, "LSTM", "Sigmoid,Tanh,Tanh");
       }},
      {"gru", 11,
       [](Exporter& e, const Names& in, A a, int k) {
         return recurrent(e, in, a, k, "GRU", "Sigmoid,Tanh");
       }},
      {"rnn", 11,
       [](Exporter& e, const Names& in, A a, int k) {
         return recurrent(e, in, a, k, "RNN", "Tanh");
       }},
  };
  return table;
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
  if (opt.opset < 11 || opt.opset > 21)
    fail(kWho, "opset ", opt.opset, " is not supported; soma writes opsets 11 to 21");
  // The graph's float type: f64 when the weights are f64, else f32.
  ElemType ftype = TP::FLOAT;
  for (auto& p : model.parameters())
    if (p.dtype() == DType::f64) ftype = TP::DOUBLE;

  ::onnx::ModelProto m;
  // The IR version that came with the opset (onnx/helper.py's VERSION_TABLE): a runtime may
  // refuse a model whose IR version is older than its opset needs.
  m.set_ir_version(opt.opset <= 12 ? (opt.opset == 11 ? 6 : 7)
                   : opt.opset <= 14 ? 7
                   : opt.opset <= 18 ? 8
                   : opt.opset <= 20 ? 9
                                     : 10);
  m.set_producer_name(opt.producer_name);
  m.set_producer_version("0.1.0");
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(opt.opset);
  auto& g = *m.mutable_graph();
  g.set_name(opt.graph_name.empty() ? model.name() : opt.graph_name);

  Exporter ex(g, opt.opset, ftype);
  NoGradScope no_grad;
  std::vector<nn::LoweredValue> inputs;
  std::map<std::string, ElemType> input_types;
  const auto specs = model.lowered_inputs(ex);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string n = i < opt.input_names.size()
                        ? opt.input_names[i]
                        : (specs.size() == 1 ? "input" : "input_" + std::to_string(i + 1));
    ex.reserve(n);
    const ElemType t = is_floating(specs[i].dtype) ? ftype : elem_type_of(specs[i].dtype);
    input_types[n] = t;
    inputs.push_back({n, specs[i].shape});
    set_value_info(*g.add_input(), {n, specs[i].shape, t});
  }
  const bool was_training = model.training();
  model.eval();
  std::vector<nn::LoweredValue> outs;
  try {
    outs = ex.lower(model, inputs, nullptr);
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  ex.set_base("output");
  for (std::size_t i = 0; i < outs.size(); ++i) {
    std::string n = i < opt.output_names.size()
                        ? opt.output_names[i]
                        : (outs.size() == 1 ? "output" : "output_" + std::to_string(i + 1));
    // An Identity names the graph output, whatever node produced it (or a graph input).
    ex.reserve(n);
    ex.node("Identity", {outs[i].name}, {n});
    auto it = input_types.find(outs[i].name);
    const ElemType t = it == input_types.end() ? ftype : it->second;
    set_value_info(*g.add_output(), {n, outs[i].shape, t});
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
