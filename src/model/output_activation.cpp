// Whether a model's output is logits or probabilities, read from its last layer.
#include "soma/model/output_activation.hpp"

#include "soma/model/sequential.hpp"
#include "soma/nn/conv.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"

namespace soma::model {

using namespace soma::nn;  // the layers models are made of

namespace {

// The activation `layer` ends with; "" when unknown. Shape-only layers defer to what comes
// before them (`before`).
std::string layer_activation(const Module& layer, const std::string& before, bool& shape_only) {
  shape_only = false;
  if (auto* m = dynamic_cast<const Model*>(&layer)) return output_activation(*m);
  if (auto* a = dynamic_cast<const ActivationLayer*>(&layer)) return a->activation().name;
  if (auto* d = dynamic_cast<const Dense*>(&layer)) return d->activation().name;
  if (auto* c = dynamic_cast<const Conv2D*>(&layer)) return c->options().activation.name;
  if (auto* c = dynamic_cast<const Conv2DTranspose*>(&layer)) return c->options().activation.name;
  if (dynamic_cast<const Flatten*>(&layer) || dynamic_cast<const Reshape*>(&layer) ||
      dynamic_cast<const Dropout*>(&layer)) {
    shape_only = true;
    return before;
  }
  return "";
}

}  // namespace

std::string output_activation(const Model& model) {
  if (auto* seq = dynamic_cast<const Sequential*>(&model)) {
    const auto& layers = seq->layers();
    // Walk back over shape-only layers to the last one that decides.
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      bool shape_only = false;
      std::string a = layer_activation(**it, "", shape_only);
      if (!shape_only) return a;
    }
    return "";
  }
  if (model.outputs().size() != 1) return "";
  // A functional model: the layer that produced the output, through shape-only layers.
  auto node = model.outputs()[0].node();
  while (node && node->layer) {
    bool shape_only = false;
    std::string a = layer_activation(*node->layer, "", shape_only);
    if (!shape_only) return a;
    if (node->inputs.size() != 1) return "";
    node = node->inputs[0].node();
  }
  return "";
}

bool outputs_probabilities(const Model& model) {
  const std::string a = output_activation(model);
  return a == "softmax" || a == "sigmoid";
}

bool from_logits_for(const Model& model) {
  const std::string a = output_activation(model);
  if (a.empty()) return false;  // unknown: Keras' default
  return a != "softmax" && a != "sigmoid";
}

LossRef loss_for_model(const std::string& name, const Model& model) {
  return loss_from_name(name, from_logits_for(model));
}

}  // namespace soma::model
