#include "soma/model/functional.hpp"

#include <sstream>
#include <vector>

#include "soma/autograd.hpp"
#include "soma/ops.hpp"

namespace soma::model {

using namespace soma::nn;  // the layers models are made of

namespace {
const detail::SymbolicNode& node_of(const std::shared_ptr<detail::SymbolicNode>& n) {
  if (!n) fail("SymbolicTensor", "used before being assigned (default-constructed)");
  return *n;
}

// A node owns its inputs' nodes, so a chain of n layers would be freed by n nested destructor
// calls (a stack overflow for a long chain, e.g. one read from a file). The deleter frees nodes
// one after another instead: a node released while another is being freed waits in a list.
struct NodeDeleter {
  void operator()(detail::SymbolicNode* n) const noexcept {
    thread_local std::vector<detail::SymbolicNode*>* pending = nullptr;
    if (pending) {
      pending->push_back(n);
      return;
    }
    std::vector<detail::SymbolicNode*> list{n};
    pending = &list;
    while (!list.empty()) {
      detail::SymbolicNode* p = list.back();
      list.pop_back();
      delete p;  // may push its inputs' nodes onto `list`
    }
    pending = nullptr;
  }
};

std::shared_ptr<detail::SymbolicNode> new_node() {
  return std::shared_ptr<detail::SymbolicNode>(new detail::SymbolicNode(), NodeDeleter{});
}

// Shapes for a probe run: unknown extents (-1) become 1.
Shape probe_shape(const Shape& s) {
  Shape p = s;
  for (auto& d : p)
    if (d < 0) d = 1;
  return p;
}

// Runs `layer` on zeros of the inputs' shapes (batch 1, eval mode, no tape) and reads the
// outputs' shapes and dtypes. Builds the layer on the way.
void infer_outputs(Module& layer, const std::vector<SymbolicTensor>& xs, detail::SymbolicNode& n) {
  std::vector<Tensor> probes;
  for (auto& x : xs) probes.push_back(zeros(probe_shape(x.shape()), x.dtype()));
  bool was_training = layer.training();
  layer.eval();
  std::vector<Tensor> outs;
  try {
    NoGradScope no_grad;
    outs = layer.call(probes);
  } catch (...) {
    layer.train(was_training);
    throw;
  }
  layer.train(was_training);
  for (auto& o : outs) {
    Shape s = o.shape();
    if (!s.empty() && !xs.empty() && !xs[0].shape().empty()) s[0] = xs[0].shape()[0];
    n.shapes.push_back(s);
    n.dtypes.push_back(o.dtype());
  }
}
}  // namespace

const Shape& SymbolicTensor::shape() const { return node_of(node_).shapes.at(index_); }
DType SymbolicTensor::dtype() const { return node_of(node_).dtypes.at(index_); }
const std::string& SymbolicTensor::name() const { return node_of(node_).name; }
bool SymbolicTensor::is_input() const { return !node_of(node_).layer; }

SymbolicTensor Input(const Shape& shape, const InputOptions& options) {
  for (auto d : shape)
    if (d <= 0 && d != -1)
      fail("Input", "extents must be positive (or -1 for unknown), got ", shape_str(shape));
  if (options.batch_size && *options.batch_size <= 0)
    fail("Input", "batch_size must be positive, got ", *options.batch_size);
  auto n = new_node();
  Shape full;
  full.push_back(options.batch_size ? *options.batch_size : -1);
  full.insert(full.end(), shape.begin(), shape.end());
  n->shapes = {full};
  n->dtypes = {options.dtype};
  n->name = options.name.empty() ? unique_layer_name("InputLayer") : options.name;
  return SymbolicTensor(std::move(n), 0);
}

std::vector<SymbolicTensor> call(const ModuleRef& layer, const std::vector<SymbolicTensor>& xs) {
  if (!layer) fail("nn::call", "got a null layer");
  if (xs.empty()) fail("nn::call", "layer '", layer->name(), "' called on no inputs");
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].defined())
      fail("nn::call", "layer '", layer->name(), "': input ", i, " is an unset SymbolicTensor");
  auto n = new_node();
  n->layer = layer;
  n->inputs = xs;
  n->name = layer->name();
  infer_outputs(*layer, xs, *n);
  std::vector<SymbolicTensor> out;
  for (std::size_t i = 0; i < n->shapes.size(); ++i) out.emplace_back(n, int(i));
  return out;
}

SymbolicTensor call(const ModuleRef& layer, const SymbolicTensor& x) {
  auto out = call(layer, std::vector<SymbolicTensor>{x});
  if (out.size() != 1)
    fail("nn::call", "layer '", layer->name(), "' has ", out.size(),
         " outputs; use the vector form nn::call(layer, {x}) to get them all");
  return out[0];
}

std::string format_shape(const Shape& shape) {
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

}  // namespace soma::model
