#pragma once
// Activations as named values: Dense(128, nn::relu) or Dense(128, "relu").
#include <functional>
#include <string>

#include "soma/tensor.hpp"

namespace soma::nn {

struct Activation {
  std::string name = "linear";
  std::function<Tensor(const Tensor&)> fn;  // empty: identity

  Activation() = default;
  Activation(std::string n, std::function<Tensor(const Tensor&)> f)
      : name(std::move(n)), fn(std::move(f)) {}
  Activation(const char* name);         // NOLINT: by name, e.g. "relu"; unknown -> soma::Error
  Activation(const std::string& name);  // NOLINT
  Tensor operator()(const Tensor& x) const { return fn ? fn(x) : x; }
  bool is_linear() const { return !fn; }
};

// linear, relu, sigmoid, tanh, softmax (last axis), log_softmax, gelu, elu, leaky_relu (0.2),
// softplus, swish, step (Heaviside: 1 where x >= 0, else 0; zero gradient), and every other
// registered op tagged kActivation (soma/op.hpp), by its op name with its default attributes.
// Aliases: identity and "" (linear), silu (swish), heaviside (step), hard_swish and hard_silu
// (hardswish). An unknown name is a soma::Error listing the known ones.
Activation activation(const std::string& name);
// True for the activations whose outputs are probabilities: softmax and sigmoid.
bool is_probability_activation(const std::string& name);
extern const Activation linear, relu, sigmoid, tanh, softmax, log_softmax, gelu, elu, leaky_relu,
    softplus, swish, step;

// A Heaviside step: 1 where x >= 0 else 0, dtype of x; its gradient is zero (perceptrons).
Tensor heaviside(const Tensor& x);

}  // namespace soma::nn
