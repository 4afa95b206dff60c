#pragma once
// Graph mode: define a graph once, run it many times with new feeds.
//
//   soma::Graph g;
//   soma::Tensor x, w, loss, train;
//   {
//     soma::GraphScope scope(g);                       // ops called here add graph nodes
//     x = g.placeholder(soma::DType::f32, {-1, 1}, "x");  // -1: unknown until fed
//     w = g.variable(soma::zeros({1, 1}), "w");
//     loss = soma::mean(soma::square(soma::matmul(x, w) - 3.0 * x));
//     train = soma::minimize(soma::optim::SGD({.learning_rate = 0.1}), loss);
//   }
//   soma::Session sess(g);
//   auto out = sess.run({loss, train}, {{x, batch}});
//
// The graph's op nodes use the same op definitions (soma/op.hpp) as eager mode: call_op hands
// an op to the graph builder while a GraphScope is open or when an input is a symbolic tensor.
// A symbolic tensor is an ordinary soma::Tensor handle that has a shape (possibly with -1 for an
// unknown dimension) and a dtype but no data. See docs/graph.md.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "soma/op.hpp"
#include "soma/optim/optimizer.hpp"
#include "soma/tensor.hpp"
#include "soma/variable.hpp"

namespace soma {

enum class NodeKind : std::uint8_t {
  Placeholder,  // fed at run time
  Constant,     // a captured tensor (read at run time, so in-place changes show through)
  Variable,     // a soma::Variable (read live; written by Update nodes)
  Op,           // a registered op: def + attrs + inputs
  Gradients,    // d(sum of ys)/dxs; expanded into op nodes when a Session plans the graph
  Update,       // applies an optimiser to variables with gradient inputs (minimize)
};
const char* node_kind_name(NodeKind k);

// Output `index` of node `node`.
struct Endpoint {
  int node = -1;
  int index = 0;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct GraphNode {
  int id = -1;
  NodeKind kind = NodeKind::Op;
  std::string name;
  const OpDef* op = nullptr;  // Op nodes
  Attrs attrs;
  std::vector<Endpoint> inputs;
  std::vector<TensorSpec> outputs;  // static specs: a dimension may be -1 (unknown)
  Tensor value;                     // Constant / Variable: the captured tensor
  Variable variable;                // Variable nodes
  optim::OptimizerRef optimizer;    // Update nodes
  std::vector<Variable> update_vars;
  int num_ys = 0;           // Gradients nodes: inputs are ys then xs
  bool foldable = false;    // Constant: nobody else can change it (constant folding may use it)
  bool fold_decided = false;
  int fused_group = -1;     // set by the fusion pass in a session's plan
  // Where the outputs live: a placeholder's fed device, a captured tensor's device, an op's
  // first non-CPU input's device (else the CPU). Symbolic outputs report it as their device().
  Device device = Device::cpu();
  std::vector<Tensor> symbolic;  // the symbolic tensor of each output

  const Tensor& output(int i = 0) const;
  const std::string& op_name() const;  // the op's name, or the kind's name
};

// A Graph is a handle: copies share the same nodes. References to nodes (node(), nodes()) stay
// valid until the next node is added. Neither a Graph nor a Session is safe to use from several
// threads at once.
class Graph {
 public:
  Graph();

  // A value fed at run time. A dimension of -1 is unknown until fed (e.g. the batch). `device`
  // is where its symbolic tensor says it lives while the graph is built (soma::function passes
  // the traced input's device, so layers make their constants there); any device may be fed.
  Tensor placeholder(DType dtype, const Shape& shape, const std::string& name = "placeholder",
                     Device device = Device::cpu());
  // A new soma::Variable with this initial value, named within the current name scope.
  Tensor variable(const Tensor& initial, const std::string& name = "variable",
                  bool trainable = true);
  // An existing soma::Variable, read live.
  Tensor variable(const Variable& v);
  Tensor constant(const Tensor& value, const std::string& name = "const");

  std::size_t size() const;
  const GraphNode& node(int id) const;
  // By full name ("dense_1/matmul"); throws listing similar names when missing.
  const GraphNode& node(const std::string& name) const;
  const GraphNode* find(const std::string& name) const;
  const std::vector<GraphNode>& nodes() const;
  // The node that produced a symbolic tensor of this graph.
  const GraphNode& node_of(const Tensor& t) const;
  Endpoint endpoint_of(const Tensor& t) const;
  bool owns(const Tensor& t) const;
  std::vector<Variable> trainable_variables() const;

  // Graphviz: one box per node with its op and output shapes; fused elementwise chains (as a
  // session would run them) are drawn as clusters.
  std::string to_dot() const;
  // The file format is described in docs/graph.md. Update nodes (optimiser state) cannot be
  // saved; variables are saved with their current values and become new Variables on load.
  void save(const std::string& path) const;
  static Graph load(const std::string& path);
  std::string serialize() const;
  static Graph deserialize(const std::string& text);

  struct Data;
  const std::shared_ptr<Data>& data() const { return d_; }
  explicit Graph(std::shared_ptr<Data> d) : d_(std::move(d)) {}
  friend bool operator==(const Graph& a, const Graph& b) { return a.d_ == b.d_; }

 private:
  std::shared_ptr<Data> d_;
};

// While alive, ops called on this thread add nodes to `g` instead of running (nests).
class GraphScope {
 public:
  explicit GraphScope(Graph& g);
  ~GraphScope();
  GraphScope(const GraphScope&) = delete;
  GraphScope& operator=(const GraphScope&) = delete;
};
// The graph of the innermost open GraphScope, or nullptr.
Graph* current_graph();

// While alive, node and variable names get "name/" prefixed (scopes nest: "block/dense_1/...").
class NameScope {
 public:
  explicit NameScope(const std::string& name);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;
};
inline NameScope name_scope(const std::string& name) { return NameScope(name); }  // C++17 elision

// True for a symbolic tensor (a graph node's output: shape and dtype, no data).
bool is_symbolic(const Tensor& t);

// Symbolic gradients: d(sum of ys)/d(xs), as nodes of the ys' graph. A source the ys do not
// depend on gets zeros. The gradient nodes are built from each op's gradient definition when a
// Session plans the graph for concrete feed shapes (so unknown dimensions are fine).
std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs);
inline Tensor gradients(const Tensor& y, const Tensor& x) {
  return gradients(std::vector<Tensor>{y}, std::vector<Tensor>{x})[0];
}

// An update node: running it computes d loss / d vars and applies the optimiser to the
// variables exactly as eager apply_gradients does. vars empty: every trainable variable the
// graph reads. Its output is the optimiser's iteration count (i64 scalar) after the step.
Tensor minimize(optim::OptimizerRef optimizer, const Tensor& loss,
                const std::vector<Tensor>& vars = {});
Tensor minimize(optim::OptimizerRef optimizer, const Tensor& loss, const std::vector<Variable>& vars);
// The same with gradients already computed (e.g. clipped by hand).
Tensor apply_gradients(optim::OptimizerRef optimizer, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& vars);

struct SessionConfig {
  int intra_op_threads = 0;   // 0: leave soma::num_threads() as it is
  int inter_op_threads = 1;   // >1: independent branches run in parallel
  Device device = Device::cpu();
  bool soft_placement = true;  // an op with no kernel on `device` runs on the CPU (warns once)
  bool optimize = true;        // constant folding, CSE, fusion, memory planning
};

struct SessionStats {
  std::int64_t plans = 0;            // plans built (one per feed-shape signature)
  std::int64_t runs = 0;
  std::int64_t buffer_allocations = 0;  // buffers the executor allocated (over all runs)
  std::int64_t last_run_allocations = 0;
  std::int64_t folded_nodes = 0, cse_nodes = 0, fused_nodes = 0;
  std::int64_t soft_placements = 0;
};

using Feeds = std::vector<std::pair<Tensor, Tensor>>;

class Session {
 public:
  explicit Session(Graph graph, SessionConfig config = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Computes only what the fetches need, in dependency order; update nodes run after the
  // values fetched alongside them were computed. Feeds are {placeholder, value} pairs.
  std::vector<Tensor> run(const std::vector<Tensor>& fetches, const Feeds& feeds = {});
  Tensor run(const Tensor& fetch, const Feeds& feeds = {});

  const SessionStats& stats() const;
  const Graph& graph() const;
  // Graphviz of the plan for the last run (after the passes), fused groups as clusters.
  std::string plan_dot() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace soma
