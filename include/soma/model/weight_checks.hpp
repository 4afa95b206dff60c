#pragma once
// Checks of a model's weights, for a model loaded from a file or after training: a NaN or an
// infinity in any weight, or a negative batch-norm moving variance (which makes the inference
// normalisation take the square root of a negative number) give NaN predictions without a word.
//
//   auto model = soma::load_model("m.soma");
//   for (auto& p : soma::check_weights(*model)) std::cerr << p.message << "\n";
//   soma::require_valid_weights(*model);  // or throw soma::Error listing them all
#include <cstdint>
#include <string>
#include <vector>

#include "soma/nn/module.hpp"

namespace soma {

struct WeightProblem {
  std::string layer;     // the layer's name ("dense_1"); nested layers as "outer/inner"
  std::string variable;  // the weight's name in its layer ("kernel", "moving_variance")
  std::string key;       // its state_dict() key ("1.kernel")
  std::int64_t nan_count = 0;
  std::int64_t inf_count = 0;       // +inf and -inf
  std::int64_t negative_count = 0;  // values below zero of a batch-norm moving variance
  std::int64_t size = 0;            // the weight's number of values
  // "layer 'dense_1', variable 'kernel': 3 NaN of 7840 values"
  std::string message;
};

// Every weight of `model` (its layers' and its own, trainable or not) holding a NaN or an
// infinity, and every BatchNormalization moving_variance with values below zero; empty when all
// is well. Weights of integer dtypes are skipped. Works on any device (values are read on the
// host).
std::vector<WeightProblem> check_weights(const nn::Module& model);

// check_weights, throwing soma::Error("<who>: ...") that lists every problem when there is one.
void require_valid_weights(const nn::Module& model, const std::string& who = "check_weights");

}  // namespace soma
