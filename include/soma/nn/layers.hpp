#pragma once
// Core layers: Dense, Flatten, Reshape, Dropout, Embedding and the activation layers. Options
// are designated-initialiser structs with Keras' defaults: Dense(128, nn::relu),
// Dense(10, {}, {.use_bias = false}), Dropout(0.2), Embedding(1000, 64).
#include <cstdint>
#include <optional>
#include <string>

#include "soma/nn/activation.hpp"
#include "soma/nn/initializers.hpp"
#include "soma/nn/module.hpp"

namespace soma::nn {

struct DenseOptions {
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer bias_initializer = init::zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  DType dtype = DType::f32;  // of the weights; inputs are cast to it (Keras' autocast)
};

// y = activation(x @ kernel + bias), on the last axis of inputs of rank >= 2.
// kernel [in, units], bias [units].
class Dense : public Module {
 public:
  explicit Dense(std::int64_t units, Activation activation = {}, DenseOptions options = {});
  Dense(std::int64_t units, DenseOptions options) : Dense(units, Activation(), std::move(options)) {}
  std::string type_name() const override { return "Dense"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;

  std::int64_t units() const { return units_; }
  const Activation& activation() const { return activation_; }
  std::string output_activation_name() const override { return activation_.name; }
  const DenseOptions& options() const { return opt_; }
  // Undefined before the layer is built (and bias without use_bias).
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)
  OpLowering op_lowering() const override;  // dense_bias_act, for a linear or ReLU activation

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t units_;
  Activation activation_;
  DenseOptions opt_;
  Variable kernel_, bias_;
};

// [batch, d1, d2, ...] -> [batch, d1*d2*...] ([batch] -> [batch, 1], as in Keras).
class Flatten : public Module {
 public:
  Flatten() = default;
  std::string type_name() const override { return "Flatten"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;
  bool passes_activation_through() const override { return true; }
  OpLowering op_lowering() const override;  // reshape to output_shape()

 protected:
  Tensor forward(const Tensor& x) override;
};

// Reshapes every sample: target_shape excludes the batch axis; one entry may be -1.
class Reshape : public Module {
 public:
  explicit Reshape(Shape target_shape);
  std::string type_name() const override { return "Reshape"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;
  const Shape& target_shape() const { return target_; }
  bool passes_activation_through() const override { return true; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Shape resolve(const Shape& input_shape) const;  // [batch] + target with -1 filled in
  Shape target_;
};

// Inverted dropout: in training, each entry is zeroed with probability `rate` and the rest are
// scaled by 1/(1 - rate); in eval mode the layer is the identity. With a seed, the sequence of
// masks (one per call) is the same in every run; without one it follows the global seed.
class Dropout : public Module {
 public:
  explicit Dropout(double rate, std::optional<std::uint64_t> seed = std::nullopt);
  std::string type_name() const override { return "Dropout"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  double rate() const { return rate_; }
  std::optional<std::uint64_t> seed() const { return seed_; }
  bool passes_activation_through() const override { return true; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  double rate_;
  std::optional<std::uint64_t> seed_;
  std::uint64_t calls_ = 0;
};

// Applies an activation elementwise (Keras' Activation layer); the named layers below fix one.
class ActivationLayer : public Module {
 public:
  explicit ActivationLayer(Activation activation) : ActivationLayer("Activation", std::move(activation)) {}
  std::string type_name() const override { return type_; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  const Activation& activation() const { return activation_; }
  std::string output_activation_name() const override { return activation_.name; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  ActivationLayer(std::string type, Activation activation)
      : type_(std::move(type)), activation_(std::move(activation)) {}
  Tensor forward(const Tensor& x) override { return activation_(x); }

 private:
  std::string type_;
  Activation activation_;
};

class ReLU : public ActivationLayer {
 public:
  ReLU();
  void visit_config(ConfigVisitor&) override {}  // no config fields
};
// Keras' LeakyReLU layer default slope is 0.3 (the leaky_relu function's is 0.2).
class LeakyReLU : public ActivationLayer {
 public:
  explicit LeakyReLU(double alpha = 0.3);
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  double alpha() const { return alpha_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  double alpha_;
};
class ELU : public ActivationLayer {
 public:
  explicit ELU(double alpha = 1.0);
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  double alpha() const { return alpha_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  double alpha_;
};
class GELU : public ActivationLayer {
 public:
  explicit GELU(bool approximate = false);
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  bool approximate() const { return approximate_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  bool approximate_ = false;
};
class Sigmoid : public ActivationLayer {
 public:
  Sigmoid();
  void visit_config(ConfigVisitor&) override {}  // no config fields
};
class Tanh : public ActivationLayer {
 public:
  Tanh();
  void visit_config(ConfigVisitor&) override {}  // no config fields
};
class Softmax : public ActivationLayer {
 public:
  explicit Softmax(std::int64_t axis = -1);
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  std::int64_t axis() const { return axis_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  std::int64_t axis_;
};
// Heaviside step: 1 where x >= 0, else 0; no gradient flows through it (perceptrons).
class Step : public ActivationLayer {
 public:
  Step();
  void visit_config(ConfigVisitor&) override {}  // no config fields
};

struct EmbeddingOptions {
  Initializer embeddings_initializer = init::random_uniform(-0.05, 0.05);
  Regularizer embeddings_regularizer{};
  DType dtype = DType::f32;
};

// Looks up rows of a trainable table [input_dim, output_dim]: integer indices of any shape ->
// indices.shape + [output_dim]. Floating indices are truncated to integers (as Keras casts).
class Embedding : public Module {
 public:
  Embedding(std::int64_t input_dim, std::int64_t output_dim, EmbeddingOptions options = {});
  std::string type_name() const override { return "Embedding"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  std::optional<DType> input_dtype() const override { return DType::i64; }
  Shape output_shape(const Shape& input_shape) override;
  std::int64_t input_dim() const { return input_dim_; }
  std::int64_t output_dim() const { return output_dim_; }
  const EmbeddingOptions& options() const { return opt_; }
  const Variable& embeddings() const { return table_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t input_dim_, output_dim_;
  EmbeddingOptions opt_;
  Variable table_;
};

}  // namespace soma::nn
