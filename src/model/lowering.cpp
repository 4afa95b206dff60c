// Lowerings of the containers and merge layers (soma/nn/lowering.hpp): a Sequential lowers its
// layers in turn, a functional model its graph, a merge layer to the op that joins its inputs.
#include <functional>
#include <unordered_map>

#include "soma/model/merge.hpp"
#include "soma/model/sequential.hpp"
#include "soma/nn/lowering.hpp"

namespace soma::nn {

using Values = std::vector<LoweredValue>;

namespace {
std::vector<std::string> names_of(const Values& in) {
  std::vector<std::string> names;
  for (auto& v : in) names.push_back(v.name);
  return names;
}
}  // namespace

Values Add::lower(Lowering& l, const Values& in) {
  return {{l.emit1("add_n", names_of(in)), in.at(0).shape}};
}
Values Average::lower(Lowering& l, const Values& in) {
  return {{l.emit1("mean_n", names_of(in)), in.at(0).shape}};
}
Values Multiply::lower(Lowering& l, const Values& in) {
  auto names = names_of(in);
  std::string y = names.at(0);
  for (std::size_t i = 1; i < names.size(); ++i) y = l.emit1("multiply", {y, names[i]});
  return {{y, in[0].shape}};
}
Values Concatenate::lower(Lowering& l, const Values& in) {
  const auto rank = std::int64_t(in.at(0).shape.size());
  const std::int64_t a = axis() < 0 ? axis() + rank : axis();
  return {{l.emit1("concat", names_of(in), {{"axis", a}}), in[0].shape}};
}

}  // namespace soma::nn

namespace soma::model {
using Values = std::vector<LoweredValue>;
using nn::names_of;

Values Sequential::lower(Lowering& l, const Values& in) {
  if (in.size() != 1) l.fail(describe(*this) + " takes one input");
  LoweredValue h = in[0];
  const auto& shapes = layer_output_shapes();
  for (std::size_t i = 0; i < layers().size(); ++i) {
    std::vector<Shape> s;
    if (i < shapes.size()) s.push_back(shapes[i]);
    h = l.lower(*layers()[i], {h}, s.empty() ? nullptr : &s).at(0);
  }
  return {h};
}

std::vector<TensorSpec> Sequential::lowered_inputs(Lowering& l) const {
  if (!input_shape())
    l.fail("model '" + name() + "' is not built: give it an nn::Input, call it once or use "
           "build_for(shape) before exporting");
  DType dt = DType::f32;
  if (!layers().empty()) dt = layers()[0]->input_dtype().value_or(DType::f32);
  return {{*input_shape(), dt}};
}

Values Model::lower(Lowering& l, const Values& ins) {
  if (inputs().empty()) return Module::lower(l, ins);  // a subclassed model
  if (ins.size() != inputs().size())
    l.fail("model '" + name() + "' takes " + std::to_string(inputs().size()) + " inputs, got " +
           std::to_string(ins.size()));
  std::unordered_map<const detail::SymbolicNode*, Values> done;
  for (std::size_t i = 0; i < ins.size(); ++i) done[inputs()[i].node().get()] = {ins[i]};
  // Depth-first from the outputs: every node is lowered after its inputs, once (shared
  // sub-graphs and shared layers called twice become two lowerings over the same weights).
  std::function<LoweredValue(const SymbolicTensor&)> get =
      [&](const SymbolicTensor& t) -> LoweredValue {
    const auto* n = t.node().get();
    auto it = done.find(n);
    if (it == done.end()) {
      if (!n->layer)
        l.fail("model '" + name() + "': input '" + n->name + "' is not one of its inputs");
      Values in;
      for (auto& s : n->inputs) in.push_back(get(s));
      it = done.emplace(n, l.lower(*n->layer, in, &n->shapes)).first;
    }
    return it->second.at(std::size_t(t.index()));
  };
  Values outs;
  for (auto& o : outputs()) outs.push_back(get(o));
  return outs;
}

std::vector<TensorSpec> Model::lowered_inputs(Lowering& l) const {
  if (inputs().empty())
    l.fail("model '" + name() + "' (" + type_name() +
           ") is a subclassed model; only Sequential and functional models can be exported");
  std::vector<TensorSpec> specs;
  for (auto& in : inputs()) specs.push_back({in.shape(), in.dtype()});
  return specs;
}

}  // namespace soma::model
