#include "soma/model/sequential.hpp"

#include "internal/dense_chain.hpp"
#include "model/summary_table.hpp"
#include "soma/ops.hpp"

namespace soma::model {

using namespace soma::nn;  // the layers models are made of

namespace {
Shape with_batch(Shape s, std::int64_t b) {
  if (!s.empty()) s[0] = b;
  return s;
}
// Builds `layer` for `in` (batch 1) and returns its output shape.
Shape infer(Module& layer, const Shape& in) {
  layer.build_for(in);
  return layer.output_shape(in);
}
}  // namespace

Sequential::Sequential(const Sequential& other)
    : Model(other), layers_(other.layers_), input_shape_(other.input_shape_) {
  if (input_shape_) build_for(with_batch(*input_shape_, 1));
}

Sequential& Sequential::add(const SymbolicTensor& input) {
  if (!input.defined()) fail("Sequential", "add: the Input is an unset SymbolicTensor");
  if (!input.is_input())
    fail("Sequential", "add: only an nn::Input() can give the input shape, got the output of '",
         input.name(), "'");
  if (!layers_.empty() || input_shape_)
    fail("Sequential", "model '", name(), "': an Input must come first, before any layer");
  input_shape_ = input.shape();
  build_for(with_batch(*input_shape_, 1));
  return *this;
}

Sequential& Sequential::add(ModuleRef layer) {
  if (!layer) fail("Sequential", "add: got a null layer");
  for (auto& l : layers_)
    if (l.get() == layer.get())
      fail("Sequential", "model '", name(), "': layer '", layer->name(),
           "' is already in the model");
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(layer);
  if (built()) {
    // The model already knows its input shape: build the new layer from the last output.
    Shape in = shapes_.size() + 1 == layers_.size()
                   ? (shapes_.empty() ? *input_shape_ : shapes_.back())
                   : Shape();
    if (in.empty())
      fail("Sequential", "model '", name(), "': cannot add a layer to a model whose shapes are "
           "unknown");
    shapes_.push_back(with_batch(infer(*layer, with_batch(in, 1)), -1));
  }
  return *this;
}

ModuleRef Sequential::layer(std::size_t i) const {
  if (i >= layers_.size())
    fail("Sequential", "layer(", i, "): model '", name(), "' has ", layers_.size(), " layers");
  return layers_[i];
}

void Sequential::build(const Shape& input_shape) {
  // Builds each layer in turn for the shape the previous one gives (batch axis probed as 1).
  if (!input_shape_) input_shape_ = with_batch(input_shape, -1);
  shapes_.clear();
  Shape s = with_batch(input_shape, 1);
  for (auto& l : layers_) {
    s = infer(*l, s);
    shapes_.push_back(with_batch(s, -1));
  }
}

std::vector<Tensor> Sequential::call(const std::vector<Tensor>& inputs) {
  if (inputs.size() != 1)
    fail("Sequential", "model '", name(), "' takes one input, got ", inputs.size());
  return Module::call(inputs);
}

Tensor Sequential::forward(const Tensor& x) {
  if (input_shape_) {
    const Shape& want = *input_shape_;
    bool ok = x.rank() == std::int64_t(want.size());
    for (std::size_t d = 1; ok && d < want.size(); ++d)
      if (want[d] >= 0 && want[d] != x.shape()[d]) ok = false;
    if (!ok)
      fail("Sequential", "model '", name(), "' expects inputs of shape ", format_shape(want),
           ", got ", shape_str(x.shape()));
  }
  Tensor h = x;
  for (std::size_t i = 0; i < layers_.size();) {
    // Inference through [Flatten] Dense Dense ... runs as one fused chain
    // (internal/dense_chain.hpp).
    if (const std::size_t done = run_fused_dense_chain(layers_, i, h)) {
      i += done;
      continue;
    }
    h = (*layers_[i])(h);
    ++i;
  }
  return h;
}

void Sequential::summary(std::ostream& os) const {
  if (!built())
    fail("summary", "model '", name(),
         "' is not built yet, so its output shapes are unknown: give it an input shape with "
         "nn::Input({...}) as the first layer or build_for({-1, ...}), or call it on a batch");
  detail::SummaryTable table({"Layer (type)", "Output Shape", "Param #"}, {31, 22, 13});
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    table.add_row({l->name() + " (" + l->type_name() + ")",
                   i < shapes_.size() ? format_shape(shapes_[i]) : "?",
                   detail::thousands(l->count_params())});
  }
  os << "Model: \"" << name() << "\"\n";
  table.print(os);
  print_totals(os);
}

}  // namespace soma::model
