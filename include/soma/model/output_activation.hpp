#pragma once
// What a model's output is: logits or probabilities. A cross-entropy loss or a prediction that
// treats probabilities as logits applies the softmax twice and trains or reports silently worse
// (issue 19); these helpers read the answer from the model's last layer, the rule that
// `soma train`, `soma predict` and compile-by-name follow:
//
//   model.compile(optim::optimizer_from_name("adam"),
//                 nn::loss_for_model("sparse_categorical_crossentropy", model),
//                 {metrics::metric_from_name("accuracy")});
#include <string>

#include "soma/model/model.hpp"
#include "soma/nn/loss.hpp"

namespace soma::model {

// The activation the model's single output ends with: "softmax", "sigmoid", "linear", "relu",
// ... read from the last layer of a Sequential (through nested Sequentials and shape-only
// layers: Flatten, Reshape, Dropout) or the layer producing a functional model's output: an
// activation layer (Activation, Softmax, Sigmoid, ...) or a layer with an activation option
// (Dense, Conv2D, Conv2DTranspose). "" when it cannot be told (a subclassed model, several
// outputs, a last layer of another kind).
std::string output_activation(const Model& model);

// True when the output is already a probability: the output activation is "softmax" or
// "sigmoid".
bool outputs_probabilities(const Model& model);

// The from_logits a cross-entropy needs for this model: false when the output ends with softmax
// or sigmoid, true when it ends with a known non-probability activation (linear, relu, ...), and
// Keras' default false when it cannot be told ("" above).
bool from_logits_for(const Model& model);

// loss_from_name(name, from_logits_for(model)) (soma/nn/losses.hpp).
LossRef loss_for_model(const std::string& name, const Model& model);

}  // namespace soma::model

// Source compatibility: these lived in soma::nn before issue 21 (namespace = folder).
namespace soma::nn {
using model::output_activation;
using model::outputs_probabilities;
using model::from_logits_for;
using model::loss_for_model;
}  // namespace soma::nn
