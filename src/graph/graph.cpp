// Graph building: symbolic tensors, placeholders, captures, op nodes (through the call_op hook),
// name scopes and symbolic gradients.
#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <unordered_set>

#include "graph/internal.hpp"
#include "soma/autograd.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace graph_detail {
thread_local constinit int t_build_depth = 0;

namespace {
thread_local std::vector<Graph> t_graphs;          // open GraphScopes, innermost last
thread_local std::vector<std::string> t_scopes;    // open name scopes
// Unknown dimensions are replaced by this probe value when an op's shape rule runs at build
// time; output dimensions at or above it are unknown again. (The real shapes are checked again
// when a session plans the graph for its feeds.)
constexpr std::int64_t kProbe = 1000003;

std::shared_ptr<Storage>& dummy_storage() {
  static std::shared_ptr<Storage> s = std::make_shared<Storage>();  // no data, version 0
  return s;
}
}  // namespace

const SymbolicImpl* symbolic_impl(const Tensor& t) {
  if (!t.defined() || !is_symbolic_id(t.id())) return nullptr;
  return static_cast<const SymbolicImpl*>(t.impl_ptr().get());
}

Tensor make_symbolic(const std::shared_ptr<Graph::Data>& g, int node, int index,
                     const TensorSpec& spec, Device device) {
  auto impl = std::make_shared<SymbolicImpl>();
  impl->storage = dummy_storage();
  impl->shape = spec.shape;
  Shape probe = spec.shape;
  for (auto& d : probe) d = d < 0 ? 1 : d;
  impl->strides = contiguous_strides(probe);
  impl->dtype = spec.dtype;
  impl->device = device;
  impl->id = next_tensor_id() | kSymbolicIdBit;
  impl->graph = g;
  impl->graph_raw = g.get();
  impl->node = node;
  impl->index = index;
  return Tensor(std::shared_ptr<TensorImpl>(std::move(impl)));
}

std::string unique_name(Graph::Data& g, const std::string& base) {
  std::string full;
  if (!g.forced_name.empty()) {
    full = g.forced_name;
    g.forced_name.clear();
  } else {
    for (const auto& s : t_scopes) full += s + "/";
    full += base;
  }
  if (!g.by_name.count(full)) return full;
  for (int i = 1;; ++i) {
    std::string n = full + "_" + std::to_string(i);
    if (!g.by_name.count(n)) return n;
  }
}

int add_node(const std::shared_ptr<Graph::Data>& g, GraphNode n) {
  n.id = int(g->nodes.size());
  if (n.kind == NodeKind::Constant || n.kind == NodeKind::Variable) {
    n.device = n.value.defined() ? n.value.device() : Device::cpu();
  } else if (n.kind == NodeKind::Op || n.kind == NodeKind::Gradients) {
    n.device = Device::cpu();  // as eager: a CPU scalar follows a device tensor
    for (const auto& e : n.inputs) {
      const Device d = g->nodes[std::size_t(e.node)].device;
      if (!d.is_cpu()) {
        n.device = d;
        break;
      }
    }
  }
  for (std::size_t i = 0; i < n.outputs.size(); ++i)
    n.symbolic.push_back(make_symbolic(g, n.id, int(i), n.outputs[i], n.device));
  g->by_name[n.name] = n.id;
  g->nodes.push_back(std::move(n));
  return int(g->nodes.size()) - 1;
}

namespace {
bool is_variable_tensor(const Tensor& t) { return t.is_trainable_variable() || !t.name().empty(); }

// A Variable handle over an existing variable tensor (Variable holds exactly one Tensor).
Variable variable_of(const Tensor& t) {
  static_assert(std::is_standard_layout_v<Variable> && sizeof(Variable) == sizeof(Tensor));
  Variable v;
  *reinterpret_cast<Tensor*>(&v) = t;
  return v;
}
}  // namespace

Endpoint endpoint_in(const std::shared_ptr<Graph::Data>& g, const Tensor& t) {
  if (auto* s = symbolic_impl(t)) {
    if (s->graph_raw != g.get())
      fail("graph", "a symbolic tensor of another graph was used here (shape ",
           shape_str(t.shape()), "); build each graph inside its own GraphScope");
    return {s->node, s->index};
  }
  auto it = g->captures.find(t.impl_ptr().get());
  if (it != g->captures.end()) return {it->second, 0};
  std::string ckey;
  if (g->cse && g->fold && !is_variable_tensor(t)) {
    ckey = constant_key(t);
    auto c = ckey.empty() ? g->cse_table.end() : g->cse_table.find(ckey);
    if (c != g->cse_table.end()) {
      ++g->merged;
      return {c->second, 0};
    }
  }
  GraphNode n;
  n.kind = is_variable_tensor(t) ? NodeKind::Variable : NodeKind::Constant;
  n.value = t;
  if (n.kind == NodeKind::Variable) n.variable = variable_of(t);
  n.outputs = {{t.shape(), t.dtype()}};
  // In a session's plan every new capture is a temporary made while building gradients.
  n.foldable = n.kind == NodeKind::Constant && g->fold;
  n.fold_decided = g->fold;  // in a user graph, the session decides when it plans
  n.name = unique_name(*g, n.kind == NodeKind::Variable
                               ? (t.name().empty() ? std::string("variable") : t.name())
                               : std::string("const"));
  int id = add_node(g, std::move(n));
  g->captures[t.impl_ptr().get()] = id;
  if (!ckey.empty()) g->cse_table.emplace(ckey, id);
  return {id, 0};
}

std::string constant_key(const Tensor& t) {
  // A device tensor's bytes are not readable from the host (nor worth a copy to compare).
  if (t.numel() > 16 || !t.device().is_cpu()) return "";
  std::string k = std::string("const|") + dtype_name(t.dtype()) + shape_str(t.shape()) + "|";
  Tensor c;
  {
    EagerScope eager;
    c = t.contiguous();
  }
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  k.append(reinterpret_cast<const char*>(p), std::size_t(c.numel()) * dtype_size(c.dtype()));
  return k;
}

std::string attr_str(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::int64_t>) return "i:" + std::to_string(x);
        else if constexpr (std::is_same_v<T, double>) {
          char buf[40];
          std::snprintf(buf, sizeof buf, "f:%.17g", x);
          return buf;
        } else if constexpr (std::is_same_v<T, bool>) return x ? "b:1" : "b:0";
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          std::string s = "l:";
          for (std::size_t i = 0; i < x.size(); ++i) s += (i ? "," : "") + std::to_string(x[i]);
          return s;
        } else if constexpr (std::is_same_v<T, DType>) return std::string("d:") + dtype_name(x);
        else return "s:" + x;
      },
      v);
}

std::vector<Tensor> add_op_in(const std::shared_ptr<Graph::Data>& g, const OpDef& def,
                              const std::vector<Tensor>& inputs, const Attrs& attrs) {
  if (def.num_inputs >= 0 && std::size_t(def.num_inputs) != inputs.size())
    fail(def.name, "expected ", def.num_inputs, " inputs, got ", inputs.size());
  if (!def.infer) fail(def.name, "has no shape rule, so it cannot be a graph node");
  std::vector<Endpoint> eps;
  std::vector<TensorSpec> specs;
  // A random op (src/ops/random.cpp) draws anew at every run: never folded nor merged.
  const bool random = attrs.has("rng");
  bool all_foldable = g->fold && !random;
  bool unknown = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail(def.name, "input ", i, " is an undefined (empty) Tensor");
    Endpoint e = endpoint_in(g, inputs[i]);
    eps.push_back(e);
    const GraphNode& n = g->nodes[std::size_t(e.node)];
    specs.push_back(n.outputs[std::size_t(e.index)]);
    if (!(n.kind == NodeKind::Constant && n.foldable)) all_foldable = false;
    for (auto d : specs.back().shape) unknown |= d < 0;
  }

  // Common-subexpression elimination (plan graphs): same op, inputs and attributes.
  std::string key;
  if (g->cse && !random) {
    key = def.name;
    for (auto& e : eps) key += "|" + std::to_string(e.node) + ":" + std::to_string(e.index);
    for (auto& [k, v] : attrs.items()) key += "|" + k + "=" + attr_str(v);
    auto it = g->cse_table.find(key);
    if (it != g->cse_table.end()) {
      ++g->merged;
      g->forced_name.clear();
      return g->nodes[std::size_t(it->second)].symbolic;
    }
  }

  std::string name = unique_name(*g, def.name);
  std::vector<TensorSpec> out;
  try {
    if (!unknown) {
      out = def.infer(specs, attrs);
    } else {
      std::vector<TensorSpec> probe = specs;
      for (auto& s : probe)
        for (auto& d : s.shape) d = d < 0 ? kProbe : d;
      out = def.infer(probe, attrs);
      for (auto& s : out)
        for (auto& d : s.shape) d = d >= kProbe ? -1 : d;
    }
  } catch (const Error& e) {
    std::string msg = e.what();  // show unknown dimensions as -1, not as the probe value
    const std::string probe = std::to_string(kProbe);
    for (auto p = msg.find(probe); p != std::string::npos; p = msg.find(probe, p))
      msg.replace(p, probe.size(), "-1");
    fail("graph node '" + name + "'", msg);
  }

  // Constant folding (plan graphs): every input is a constant nobody else can change.
  if (all_foldable && !inputs.empty()) {
    std::vector<Tensor> vals;
    for (auto& e : eps) vals.push_back(g->nodes[std::size_t(e.node)].value);
    std::vector<Tensor> res;
    {
      EagerScope eager;
      NoGradScope no_grad;
      res = call_op(def, vals, attrs);
    }
    std::vector<Tensor> sym;
    for (std::size_t i = 0; i < res.size(); ++i) {
      GraphNode n;
      n.kind = NodeKind::Constant;
      n.value = res[i];
      n.foldable = n.fold_decided = true;
      n.outputs = {{res[i].shape(), res[i].dtype()}};
      n.name = i == 0 ? name : unique_name(*g, name);
      int id = add_node(g, std::move(n));
      sym.push_back(g->nodes[std::size_t(id)].symbolic[0]);
    }
    ++g->folded;
    return sym;
  }

  GraphNode n;
  n.kind = NodeKind::Op;
  n.op = &def;
  n.attrs = attrs;
  n.inputs = std::move(eps);
  n.outputs = std::move(out);
  n.name = std::move(name);
  int id = add_node(g, std::move(n));
  if (g->cse && !random) g->cse_table.emplace(std::move(key), id);
  return g->nodes[std::size_t(id)].symbolic;
}

std::vector<Tensor> add_op_node(const OpDef& def, const std::vector<Tensor>& inputs,
                                const Attrs& attrs) {
  std::shared_ptr<Graph::Data> g;
  bool live = false;  // a symbolic or variable input: the op must run each time
  for (const auto& t : inputs) {
    if (!t.defined()) continue;
    if (auto* s = symbolic_impl(t)) {
      live = true;
      if (!g && t_build_depth == 0) {
        g = s->graph.lock();
        if (!g) fail(def.name, "the graph of a symbolic input no longer exists");
      }
    } else if (is_variable_tensor(t)) {
      live = true;
    }
  }
  if (t_build_depth > 0) {
    // Nothing symbolic and no variable involved: a constant computation (an initial value, a
    // scalar), which runs eagerly now.
    if (!live) {
      ++t_graphs.back().data()->folded;
      EagerScope eager;
      return call_op(def, inputs, attrs);
    }
    g = t_graphs.back().data();
  }
  std::vector<Tensor> outs = add_op_in(g, def, inputs, attrs);
  if (def.grad && !grad_recording_disabled())
    for (GradientTape* tape : active_tapes()) tape->record(def, inputs, outs, attrs);
  return outs;
}

namespace {
// Graph mode's hook into op dispatch (ops/dispatch_hooks.hpp), registered when libsoma loads.
void intercept_op(const OpDef& def, const std::vector<Tensor>& inputs, const Attrs& attrs,
                  std::vector<Tensor>& outputs) {
  outputs = add_op_node(def, inputs, attrs);
}
[[maybe_unused]] const bool g_hook_registered = (dispatch::set_intercept(&intercept_op), true);
}  // namespace

DataScope::DataScope(std::shared_ptr<Graph::Data> g) {
  t_graphs.emplace_back(std::move(g));
  set_build_depth(int(t_graphs.size()));
}
DataScope::~DataScope() {
  t_graphs.pop_back();
  set_build_depth(int(t_graphs.size()));
}

EagerScope::EagerScope() : saved_(t_build_depth) { set_build_depth(0); }
EagerScope::~EagerScope() { set_build_depth(saved_); }

namespace {
std::uint64_t key_of(Endpoint e) { return (std::uint64_t(e.node) << 16) | std::uint64_t(e.index); }
}  // namespace

std::vector<Tensor> build_gradients(const std::shared_ptr<Graph::Data>& g,
                                    const std::vector<Tensor>& ys, const std::vector<Tensor>& xs) {
  DataScope scope(g);
  NoGradScope no_grad;
  std::unordered_set<std::uint64_t> relevant;
  for (const auto& x : xs) relevant.insert(key_of(endpoint_in(g, x)));
  int maxid = -1;
  for (const auto& y : ys) maxid = std::max(maxid, endpoint_in(g, y).node);
  std::vector<char> node_rel(g->nodes.size(), 0);
  for (int id = 0; id <= maxid; ++id) {
    const GraphNode& n = g->nodes[std::size_t(id)];
    if (n.kind != NodeKind::Op || !n.op->grad) continue;
    bool any = false;
    for (auto& e : n.inputs) any |= relevant.count(key_of(e)) != 0;
    if (!any) continue;
    node_rel[std::size_t(id)] = 1;
    for (std::size_t i = 0; i < n.outputs.size(); ++i)
      if (is_floating(n.outputs[i].dtype)) relevant.insert(key_of({id, int(i)}));
  }
  std::unordered_map<std::uint64_t, Tensor> grads;
  auto accumulate = [&](std::uint64_t k, const Tensor& gr) {
    auto it = grads.find(k);
    if (it == grads.end()) grads.emplace(k, gr);
    else it->second = add(it->second, gr);
  };
  for (const auto& y : ys) {
    if (!is_floating(y.dtype()))
      fail("gradients", "a target has dtype ", dtype_name(y.dtype()),
           "; gradients need a floating target");
    accumulate(key_of(endpoint_in(g, y)), ones_like(y));
  }
  for (int id = maxid; id >= 0; --id) {
    if (!node_rel[std::size_t(id)]) continue;
    // Copies: the gradient functions add nodes, which may move g->nodes.
    const OpDef* def = g->nodes[std::size_t(id)].op;
    Attrs attrs = g->nodes[std::size_t(id)].attrs;
    std::vector<Endpoint> in_eps = g->nodes[std::size_t(id)].inputs;
    std::vector<Tensor> outs = g->nodes[std::size_t(id)].symbolic;
    std::vector<Tensor> ins;
    for (auto& e : in_eps) ins.push_back(g->nodes[std::size_t(e.node)].symbolic[std::size_t(e.index)]);
    std::vector<Tensor> gouts(outs.size());
    bool any = false;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      auto it = grads.find(key_of({id, int(i)}));
      if (it != grads.end()) {
        gouts[i] = it->second;
        any = true;
      }
    }
    if (!any) continue;
    for (std::size_t i = 0; i < outs.size(); ++i)
      if (!gouts[i].defined()) gouts[i] = zeros_like(outs[i]);
    std::vector<Tensor> gins;
    try {
      std::uint64_t needs = 0;  // skip gradients of inputs no x depends on
      for (std::size_t i = 0; i < ins.size() && i < 64; ++i)
        if (is_floating(ins[i].dtype()) && relevant.count(key_of(in_eps[i])))
          needs |= std::uint64_t(1) << i;
      gins = def->grad(GradContext{ins, outs, gouts, attrs, needs});
    } catch (const Error& e) {
      fail("gradient of graph node '" + g->nodes[std::size_t(id)].name + "'", e.what());
    }
    for (std::size_t i = 0; i < ins.size() && i < gins.size(); ++i) {
      if (!gins[i].defined() || !is_floating(ins[i].dtype())) continue;
      std::uint64_t k = key_of(in_eps[i]);
      if (!relevant.count(k)) continue;
      accumulate(k, gins[i]);
    }
  }
  std::vector<Tensor> out;
  for (const auto& x : xs) {
    auto it = grads.find(key_of(endpoint_in(g, x)));
    out.push_back(it == grads.end() ? Tensor() : it->second);
  }
  return out;
}
}  // namespace graph_detail

using namespace graph_detail;

// ---- public API ----------------------------------------------------------------------------
const char* node_kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::Placeholder: return "placeholder";
    case NodeKind::Constant: return "constant";
    case NodeKind::Variable: return "variable";
    case NodeKind::Op: return "op";
    case NodeKind::Gradients: return "gradients";
    case NodeKind::Update: return "update";
  }
  return "?";
}

const Tensor& GraphNode::output(int i) const {
  if (i < 0 || std::size_t(i) >= symbolic.size())
    fail("GraphNode.output", "node '", name, "' has ", symbolic.size(), " outputs, asked for ", i);
  return symbolic[std::size_t(i)];
}

const std::string& GraphNode::op_name() const {
  static const std::string kinds[] = {"placeholder", "constant", "variable", "op", "gradients",
                                      "update"};
  return op ? op->name : kinds[int(kind)];
}

Graph::Graph() : d_(std::make_shared<Data>()) {}

Tensor Graph::placeholder(DType dtype, const Shape& shape, const std::string& name,
                          Device device) {
  for (auto d : shape)
    if (d < -1) fail("placeholder", "dimension ", d, " in ", shape_str(shape), " (use -1 for unknown)");
  GraphNode n;
  n.kind = NodeKind::Placeholder;
  n.outputs = {{shape, dtype}};
  n.device = device;
  n.name = unique_name(*d_, name);
  return d_->nodes[std::size_t(add_node(d_, std::move(n)))].symbolic[0];
}

Tensor Graph::variable(const Tensor& initial, const std::string& name, bool trainable) {
  if (is_symbolic(initial))
    fail("Graph.variable", "the initial value of '", name, "' must be a concrete tensor");
  std::string full = unique_name(*d_, name);
  Variable v;
  {
    EagerScope eager;
    v = Variable(initial, full, trainable);
  }
  GraphNode n;
  n.kind = NodeKind::Variable;
  n.value = v.value();
  n.variable = v;
  n.outputs = {{v.shape(), v.dtype()}};
  n.name = full;
  int id = add_node(d_, std::move(n));
  d_->captures[v.value().impl_ptr().get()] = id;
  return d_->nodes[std::size_t(id)].symbolic[0];
}

Tensor Graph::variable(const Variable& v) {
  if (!v.defined()) fail("Graph.variable", "the variable is undefined");
  Endpoint e = endpoint_in(d_, v.value());
  return d_->nodes[std::size_t(e.node)].symbolic[0];
}

Tensor Graph::constant(const Tensor& value, const std::string& name) {
  if (is_symbolic(value)) fail("Graph.constant", "'", name, "' must be a concrete tensor");
  GraphNode n;
  n.kind = NodeKind::Constant;
  {
    EagerScope eager;
    n.value = value.clone();
  }
  n.outputs = {{value.shape(), value.dtype()}};
  n.name = unique_name(*d_, name);
  int id = add_node(d_, std::move(n));
  d_->captures[d_->nodes[std::size_t(id)].value.impl_ptr().get()] = id;
  return d_->nodes[std::size_t(id)].symbolic[0];
}

std::size_t Graph::size() const { return d_->nodes.size(); }
const std::vector<GraphNode>& Graph::nodes() const { return d_->nodes; }

const GraphNode& Graph::node(int id) const {
  if (id < 0 || std::size_t(id) >= d_->nodes.size())
    fail("Graph.node", "no node with id ", id, " (the graph has ", d_->nodes.size(), ")");
  return d_->nodes[std::size_t(id)];
}

const GraphNode* Graph::find(const std::string& name) const {
  auto it = d_->by_name.find(name);
  return it == d_->by_name.end() ? nullptr : &d_->nodes[std::size_t(it->second)];
}

const GraphNode& Graph::node(const std::string& name) const {
  if (auto* n = find(name)) return *n;
  // Suggest names sharing the last component or the scope.
  std::string leaf = name.substr(name.find_last_of('/') + 1), some;
  int shown = 0;
  for (const auto& n : d_->nodes)
    if (shown < 8 && (n.name.find(leaf) != std::string::npos)) {
      some += (shown++ ? ", " : "") + n.name;
    }
  fail("Graph.node", "no node named '", name, "'",
       some.empty() ? std::string() : "; similar names: " + some);
}

const GraphNode& Graph::node_of(const Tensor& t) const { return node(endpoint_of(t).node); }

Endpoint Graph::endpoint_of(const Tensor& t) const {
  auto* s = symbolic_impl(t);
  if (!s) fail("Graph", "the tensor is not symbolic (not a node's output)");
  if (s->graph_raw != d_.get()) fail("Graph", "the tensor belongs to another graph");
  return {s->node, s->index};
}

bool Graph::owns(const Tensor& t) const {
  auto* s = symbolic_impl(t);
  return s && s->graph_raw == d_.get();
}

std::vector<Variable> Graph::trainable_variables() const {
  std::vector<Variable> out;
  for (const auto& n : d_->nodes)
    if (n.kind == NodeKind::Variable && n.value.is_trainable_variable()) out.push_back(n.variable);
  return out;
}

GraphScope::GraphScope(Graph& g) {
  t_graphs.push_back(g);
  set_build_depth(int(t_graphs.size()));
}
GraphScope::~GraphScope() {
  t_graphs.pop_back();
  set_build_depth(int(t_graphs.size()));
}

Graph* current_graph() { return t_build_depth > 0 ? &t_graphs.back() : nullptr; }

NameScope::NameScope(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos)
    fail("name_scope", "a scope name must be non-empty and contain no '/', got '", name, "'");
  t_scopes.push_back(name);
}
NameScope::~NameScope() { t_scopes.pop_back(); }

bool is_symbolic(const Tensor& t) { return symbolic_impl(t) != nullptr; }

namespace {
std::shared_ptr<Graph::Data> graph_of(const std::vector<Tensor>& ts, const char* who) {
  std::shared_ptr<Graph::Data> g;
  for (const auto& t : ts)
    if (auto* s = symbolic_impl(t)) {
      auto gi = s->graph.lock();
      if (g && gi != g) fail(who, "the tensors belong to different graphs");
      g = gi;
    }
  if (!g) fail(who, "needs symbolic tensors (outputs of graph nodes)");
  return g;
}
}  // namespace

std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs) {
  if (ys.empty() || xs.empty()) fail("gradients", "needs at least one target and one source");
  auto g = graph_of(ys, "gradients");
  GraphNode n;
  n.kind = NodeKind::Gradients;
  n.num_ys = int(ys.size());
  for (const auto& y : ys) {
    if (!is_floating(y.dtype()))
      fail("gradients", "a target has dtype ", dtype_name(y.dtype()),
           "; gradients need a floating target");
    n.inputs.push_back(endpoint_in(g, y));
  }
  for (const auto& x : xs) {
    n.inputs.push_back(endpoint_in(g, x));
    n.outputs.push_back({x.shape(), x.dtype()});
  }
  n.name = unique_name(*g, "gradients");
  return g->nodes[std::size_t(add_node(g, std::move(n)))].symbolic;
}

namespace {
Tensor add_update(const std::shared_ptr<Graph::Data>& g, optim::OptimizerRef opt,
                  std::vector<Endpoint> inputs, std::vector<Variable> vars, bool from_loss,
                  const char* who) {
  if (!opt) fail(who, "the optimizer is empty");
  GraphNode n;
  n.kind = NodeKind::Update;
  n.optimizer = std::move(opt);
  n.update_vars = std::move(vars);
  n.inputs = std::move(inputs);
  n.attrs.set("from_loss", from_loss);
  n.outputs = {{Shape{}, DType::i64}};
  n.name = unique_name(*g, from_loss ? "minimize" : "apply_gradients");
  return g->nodes[std::size_t(add_node(g, std::move(n)))].symbolic[0];
}

std::vector<Variable> variables_for(const std::shared_ptr<Graph::Data>& g,
                                    const std::vector<Tensor>& vars, const char* who) {
  std::vector<Variable> out;
  if (vars.empty()) {
    for (const auto& n : g->nodes)
      if (n.kind == NodeKind::Variable && n.value.is_trainable_variable())
        out.push_back(n.variable);
    if (out.empty()) fail(who, "the graph has no trainable variable");
    return out;
  }
  for (const auto& v : vars) {
    Endpoint e = endpoint_in(g, v);
    const GraphNode& n = g->nodes[std::size_t(e.node)];
    if (n.kind != NodeKind::Variable)
      fail(who, "'", n.name, "' is a ", node_kind_name(n.kind), ", not a variable");
    out.push_back(n.variable);
  }
  return out;
}
}  // namespace

Tensor minimize(optim::OptimizerRef optimizer, const Tensor& loss, const std::vector<Tensor>& vars) {
  auto g = graph_of({loss}, "minimize");
  if (!is_floating(loss.dtype()))
    fail("minimize", "the loss has dtype ", dtype_name(loss.dtype()), "; it must be floating");
  std::vector<Variable> vs = variables_for(g, vars, "minimize");
  std::vector<Endpoint> inputs{endpoint_in(g, loss)};
  for (const auto& v : vs) inputs.push_back(endpoint_in(g, v.value()));
  return add_update(g, std::move(optimizer), std::move(inputs), std::move(vs), true, "minimize");
}

Tensor minimize(optim::OptimizerRef optimizer, const Tensor& loss, const std::vector<Variable>& vars) {
  std::vector<Tensor> ts;
  for (const auto& v : vars) {
    if (!v.defined()) fail("minimize", "a variable is undefined");
    ts.push_back(v.value());
  }
  if (ts.empty()) fail("minimize", "no variables given");
  return minimize(std::move(optimizer), loss, ts);
}

Tensor apply_gradients(optim::OptimizerRef optimizer, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& vars) {
  if (grads.size() != vars.size() || grads.empty())
    fail("apply_gradients", "needs one gradient per variable, got ", grads.size(), " and ",
         vars.size());
  auto g = graph_of(grads, "apply_gradients");
  std::vector<Variable> vs = variables_for(g, vars, "apply_gradients");
  std::vector<Endpoint> inputs;
  for (const auto& t : grads) inputs.push_back(endpoint_in(g, t));
  return add_update(g, std::move(optimizer), std::move(inputs), std::move(vs), false,
                    "apply_gradients");
}

}  // namespace soma
