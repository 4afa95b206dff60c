#pragma once
// nn::Sequential: a plain stack of layers, each feeding the next.
//
//   nn::Sequential model{nn::Input({28, 28}), nn::Flatten(), nn::Dense(128, nn::relu),
//                        nn::Dense(10)};
//
// Layers are taken by value (copied into shared handles) or as ModuleRefs (shared). An
// nn::Input first gives the input shape, so the model is built at once and summary() works
// before any call; otherwise it builds on its first call (or build_for({-1, 28, 28})).
// Children are registered under their position ("0", "1", ...), so state_dict keys such as
// "1.kernel" do not depend on process-wide layer name counters.
#include <concepts>
#include <iostream>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "soma/model/functional.hpp"
#include "soma/model/model.hpp"

namespace soma::model {

class Sequential : public Model {
 public:
  Sequential() = default;
  // A copy shares the layers (Module's copy rule: submodules are shared handles) and, when the
  // input shape is known, is built at once like the original.
  Sequential(const Sequential& other);
  template <class... Layers>
    requires(sizeof...(Layers) > 0 &&
             !(sizeof...(Layers) == 1 &&
               (std::is_same_v<std::remove_cvref_t<Layers>, Sequential> && ...)))
  Sequential(Layers&&... layers) {  // NOLINT: Sequential{Flatten(), Dense(10)} reads naturally
    (add_item(std::forward<Layers>(layers)), ...);
  }

  std::string type_name() const override { return "Sequential"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  std::vector<TensorSpec> lowered_inputs(Lowering& l) const override;
  // The last layer's activation, through shape-only layers (see nn::output_activation).
  std::string output_activation_name() const override;

  // Appends a layer; builds it at once when the model's input shape is known. A named layer
  // value is refused (it would be copied, so training would not reach it): pass a temporary,
  // or a ModuleRef to keep a handle on the layer.
  Sequential& add(ModuleRef layer);
  template <class L>
    requires std::derived_from<std::remove_cvref_t<L>, Module>
  Sequential& add(L&& layer) {
    static_assert(!std::is_lvalue_reference_v<L>,
                  "Sequential: pass a temporary layer (nn::Dense(10)) or an nn::ModuleRef to "
                  "keep a handle on it; a named layer value would be copied");
    return add(ModuleRef(std::forward<L>(layer)));
  }
  // Sets the input shape (per sample, without the batch axis); must come before any layer.
  Sequential& add(const SymbolicTensor& input);

  const std::vector<ModuleRef>& layers() const { return layers_; }
  ModuleRef layer(std::size_t i) const;
  // Output shape of each layer, batch axis -1 (known once built).
  const std::vector<Shape>& layer_output_shapes() const { return shapes_; }
  std::optional<Shape> input_shape() const { return input_shape_; }

  void summary(std::ostream& os = std::cout) const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;

 private:
  void add_item(const SymbolicTensor& input) { add(input); }
  void add_item(ModuleRef layer) { add(std::move(layer)); }
  template <class L>
    requires std::derived_from<std::remove_cvref_t<L>, Module>
  void add_item(L&& layer) {
    add(std::forward<L>(layer));
  }

  std::vector<ModuleRef> layers_;
  std::optional<Shape> input_shape_;  // with batch axis -1
  std::vector<Shape> shapes_;         // per layer, batch axis -1
};

}  // namespace soma::model

// Source compatibility: these lived in soma::nn before issue 21 (namespace = folder).
namespace soma::nn {
using model::Sequential;
}  // namespace soma::nn
