#pragma once
// The functional API: symbolic tensors record which layer produced them from which inputs, and
// nn::Model(inputs, outputs) turns the recorded graph into a model.
//
//   auto in = nn::Input({784});
//   auto h = nn::call(nn::Dense(64, nn::relu), in);  // a fresh layer
//   nn::ModuleRef shared = nn::Dense(8);             // hold a layer in a ModuleRef to share it
//   auto a = nn::call(shared, in);
//   auto b = nn::call(shared, h2);                   // same weights as `a`
//   nn::Model model({in, in2}, {a, b});
//
// Layers' operator() takes concrete Tensors, so recording goes through the free function
// nn::call rather than an overload of Module::operator(): a layer is shared only when the
// graph can hold it by handle, which a ModuleRef makes explicit.
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "soma/dtype.hpp"
#include "soma/nn/module.hpp"
#include "soma/shape.hpp"

namespace soma::model {

using nn::Module;  // the layers a functional model is made of
using nn::ModuleRef;

namespace detail {
struct SymbolicNode;
}

// A placeholder for a batch of values: its shape has -1 ("None") on the batch axis.
class SymbolicTensor {
 public:
  SymbolicTensor() = default;
  SymbolicTensor(std::shared_ptr<detail::SymbolicNode> node, int index)
      : node_(std::move(node)), index_(index) {}

  bool defined() const { return node_ != nullptr; }
  const Shape& shape() const;   // batch axis first, -1 where unknown
  DType dtype() const;
  // The producing layer's name ("dense_1"), or the input's name ("input_layer").
  const std::string& name() const;
  bool is_input() const;

  const std::shared_ptr<detail::SymbolicNode>& node() const { return node_; }
  int index() const { return index_; }  // which output of the producing node

 private:
  std::shared_ptr<detail::SymbolicNode> node_;
  int index_ = 0;
};

namespace detail {
// One input placeholder or one call of a layer on symbolic inputs.
struct SymbolicNode {
  ModuleRef layer;                     // empty for an Input
  std::vector<SymbolicTensor> inputs;  // what the layer was called on
  std::vector<Shape> shapes;           // one per output, batch axis -1
  std::vector<DType> dtypes;
  std::string name;                    // the Input's name, or the layer's
};
}  // namespace detail

struct InputOptions {
  DType dtype = DType::f32;
  std::string name;                        // default "input_layer", "input_layer_1", ...
  std::optional<std::int64_t> batch_size;  // fixed batch size; default None
};

// A symbolic input of per-sample shape `shape` (the batch axis is added in front). Also usable
// as the first entry of a Sequential to give it its input shape: Sequential{Input({28, 28}), ...}.
SymbolicTensor Input(const Shape& shape, const InputOptions& options = {});

// Calls `layer` on symbolic inputs: builds it for their shapes and records the call. One input
// and one output here; use the vector form for layers with several inputs or outputs.
SymbolicTensor call(const ModuleRef& layer, const SymbolicTensor& x);
std::vector<SymbolicTensor> call(const ModuleRef& layer, const std::vector<SymbolicTensor>& xs);

// A temporary layer (nn::call(nn::Dense(4), x)) becomes a new shared handle. A named layer
// value is refused: it would be copied, and the copy would not share its weights.
template <class L>
  requires std::derived_from<std::remove_cvref_t<L>, Module>
SymbolicTensor call(L&& layer, const SymbolicTensor& x) {
  static_assert(!std::is_lvalue_reference_v<L>,
                "nn::call: pass a temporary layer (nn::call(nn::Dense(4), x)) or hold the "
                "layer in an nn::ModuleRef to call it more than once (shared weights)");
  return call(ModuleRef(std::forward<L>(layer)), x);
}
template <class L>
  requires std::derived_from<std::remove_cvref_t<L>, Module>
std::vector<SymbolicTensor> call(L&& layer, const std::vector<SymbolicTensor>& xs) {
  static_assert(!std::is_lvalue_reference_v<L>,
                "nn::call: pass a temporary layer or hold the layer in an nn::ModuleRef");
  return call(ModuleRef(std::forward<L>(layer)), xs);
}

// "(None, 128)": a shape as summary() prints it, -1 shown as None.
std::string format_shape(const Shape& shape);

}  // namespace soma::model

// Source compatibility: these lived in soma::nn before issue 21 (namespace = folder).
namespace soma::nn {
using model::SymbolicTensor;
using model::InputOptions;
using model::Input;
using model::call;
using model::format_shape;
namespace detail {
using model::detail::SymbolicNode;
}  // namespace detail
}  // namespace soma::nn
