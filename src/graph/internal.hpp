#pragma once
// Internal to src/graph: the graph's storage, symbolic tensor handles, symbolic backprop.
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/hook.hpp"
#include "soma/graph/graph.hpp"

namespace soma {

struct Graph::Data {
  std::vector<GraphNode> nodes;  // ids are indices; inputs always have smaller ids (topological)
  std::unordered_map<std::string, int> by_name;
  std::unordered_map<const TensorImpl*, int> captures;  // captured concrete tensor -> node
  // Plan graphs (built by a Session for concrete shapes) fold constants and merge duplicates.
  bool fold = false, cse = false;
  std::unordered_map<std::string, int> cse_table;
  std::int64_t folded = 0, merged = 0;
  std::string forced_name;  // the name the next node gets (a session keeps the user's names)
};

namespace graph_detail {

// A symbolic tensor's handle: no data, a static shape (-1: unknown), and where it comes from.
struct SymbolicImpl : TensorImpl {
  std::weak_ptr<Graph::Data> graph;
  const Graph::Data* graph_raw = nullptr;
  int node = -1, index = 0;
};

const SymbolicImpl* symbolic_impl(const Tensor& t);  // nullptr for a concrete tensor
Tensor make_symbolic(const std::shared_ptr<Graph::Data>& g, int node, int index,
                     const TensorSpec& spec, Device device = Device::cpu());
std::string unique_name(Graph::Data& g, const std::string& base);  // applies the name scope
// Makes the symbolic outputs; sets n.device from its value or inputs (placeholders keep theirs).
int add_node(const std::shared_ptr<Graph::Data>& g, GraphNode n);
// The endpoint of a tensor in `g`: its own node, or a capture node for a concrete tensor.
Endpoint endpoint_in(const std::shared_ptr<Graph::Data>& g, const Tensor& t);
std::vector<Tensor> add_op_in(const std::shared_ptr<Graph::Data>& g, const OpDef& def,
                              const std::vector<Tensor>& inputs, const Attrs& attrs);
// d(sum ys)/d xs by each op's gradient definition, built as nodes of `g` (shapes concrete).
std::vector<Tensor> build_gradients(const std::shared_ptr<Graph::Data>& g,
                                    const std::vector<Tensor>& ys, const std::vector<Tensor>& xs);
// Elementwise chains to fuse: group id per node (-1: none), for the nodes in `live`.
std::vector<int> find_fusion_groups(const Graph::Data& g, const std::vector<char>& live,
                                    const std::vector<int>& consumers,
                                    const std::vector<char>& fetched);
bool is_fusable_op(const GraphNode& n);
// CSE key of a small constant's value ("" for large ones): equal scalars become one node.
std::string constant_key(const Tensor& t);
std::string attr_str(const AttrValue& v);

// Opens a graph scope for a raw graph (internal use: plans, tracing).
class DataScope {
 public:
  explicit DataScope(std::shared_ptr<Graph::Data> g);
  ~DataScope();
  DataScope(const DataScope&) = delete;
  DataScope& operator=(const DataScope&) = delete;
};
// Suspends graph building (eager execution inside a scope, e.g. constant folding).
class EagerScope {
 public:
  EagerScope();
  ~EagerScope();
 private:
  int saved_;
};

}  // namespace graph_detail
}  // namespace soma
