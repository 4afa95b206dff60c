// Whether a model's output is logits or probabilities, read from its last layer: each layer
// says what its output ends with (Module::output_activation_name) or that it passes the
// activation before it through (Module::passes_activation_through).
#include "soma/model/output_activation.hpp"

#include "soma/model/sequential.hpp"
#include "soma/nn/losses.hpp"

namespace soma::model {

using namespace soma::nn;  // the layers models are made of

std::string Sequential::output_activation_name() const {
  // Walk back over shape-only layers to the last one that decides.
  for (auto it = layers().rbegin(); it != layers().rend(); ++it)
    if (!(*it)->passes_activation_through()) return (*it)->output_activation_name();
  return "";
}

std::string Model::output_activation_name() const {
  if (outputs().size() != 1) return "";
  // A functional model: the layer that produced the output, through shape-only layers.
  auto node = outputs()[0].node();
  while (node && node->layer) {
    if (!node->layer->passes_activation_through()) return node->layer->output_activation_name();
    if (node->inputs.size() != 1) return "";
    node = node->inputs[0].node();
  }
  return "";
}

std::string output_activation(const Model& model) { return model.output_activation_name(); }

bool outputs_probabilities(const Model& model) {
  return is_probability_activation(output_activation(model));
}

bool from_logits_for(const Model& model) {
  const std::string a = output_activation(model);
  if (a.empty()) return false;  // unknown: Keras' default
  return !is_probability_activation(a);
}

LossRef loss_for_model(const std::string& name, const Model& model) {
  return loss_from_name(name, from_logits_for(model));
}

}  // namespace soma::model
