#include "soma/nn/activation.hpp"

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

Tensor heaviside(const Tensor& x) {
  // A comparison has no gradient definition, so nothing flows back through the step (the
  // perceptron rule updates weights without one).
  return cast(greater_equal(x, scalar(0.0, x.dtype())), x.dtype());
}

namespace {
Activation make(const std::string& name) {
  if (name == "linear" || name == "identity" || name.empty()) return Activation();
  if (name == "relu") return {"relu", [](const Tensor& x) { return soma::relu(x); }};
  if (name == "sigmoid") return {"sigmoid", [](const Tensor& x) { return soma::sigmoid(x); }};
  if (name == "tanh") return {"tanh", [](const Tensor& x) { return soma::tanh(x); }};
  if (name == "softmax") return {"softmax", [](const Tensor& x) { return soma::softmax(x, -1); }};
  if (name == "log_softmax")
    return {"log_softmax", [](const Tensor& x) { return soma::log_softmax(x, -1); }};
  if (name == "gelu") return {"gelu", [](const Tensor& x) { return soma::gelu(x); }};
  if (name == "elu") return {"elu", [](const Tensor& x) { return soma::elu(x); }};
  if (name == "leaky_relu")
    return {"leaky_relu", [](const Tensor& x) { return soma::leaky_relu(x, 0.2); }};
  if (name == "softplus") return {"softplus", [](const Tensor& x) { return soma::softplus(x); }};
  if (name == "swish" || name == "silu")
    return {"swish", [](const Tensor& x) { return x * soma::sigmoid(x); }};
  if (name == "step" || name == "heaviside") return {"step", heaviside};
  fail("activation", "unknown activation '", name,
       "'; expected one of linear, relu, sigmoid, tanh, softmax, log_softmax, gelu, elu, "
       "leaky_relu, softplus, swish, step");
}
}  // namespace

Activation::Activation(const char* n) : Activation(make(n ? std::string(n) : std::string())) {}
Activation::Activation(const std::string& n) : Activation(make(n)) {}

Activation activation(const std::string& name) { return make(name); }

const Activation linear = make("linear");
const Activation relu = make("relu");
const Activation sigmoid = make("sigmoid");
const Activation tanh = make("tanh");
const Activation softmax = make("softmax");
const Activation log_softmax = make("log_softmax");
const Activation gelu = make("gelu");
const Activation elu = make("elu");
const Activation leaky_relu = make("leaky_relu");
const Activation softplus = make("softplus");
const Activation swish = make("swish");
const Activation step = make("step");

}  // namespace soma::nn
