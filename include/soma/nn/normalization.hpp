#pragma once
// BatchNormalization and LayerNormalization, with Keras' options and defaults.
#include <cstdint>

#include "soma/nn/initializers.hpp"
#include "soma/nn/module.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

struct BatchNormOptions {
  // The feature (channel) axis. Keras' default -1 suits [batch, features] and channels-last
  // data; soma's convolutions are NCHW, so after a Conv2D use {.axis = 1}.
  std::int64_t axis = -1;
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;  // learn beta
  bool scale = true;   // learn gamma
  Initializer beta_initializer = init::zeros();
  Initializer gamma_initializer = init::ones();
  Initializer moving_mean_initializer = init::zeros();
  Initializer moving_variance_initializer = init::ones();
  Regularizer beta_regularizer{};
  Regularizer gamma_regularizer{};
  DType dtype = DType::f32;
};

// Training: normalises with the batch mean and (biased) variance over every axis but `axis`,
// and moves moving_mean / moving_variance towards them:
//   moving = momentum * moving + (1 - momentum) * batch_statistic.
// Eval (or frozen with set_trainable(false), as in Keras): normalises with the moving statistics.
// y = gamma * (x - mean) / sqrt(var + eps) + beta.
// Weights (Keras' order): gamma, beta (trainable), moving_mean, moving_variance (not).
class BatchNormalization : public Module {
 public:
  explicit BatchNormalization(BatchNormOptions options = {});
  std::string type_name() const override { return "BatchNormalization"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  const BatchNormOptions& options() const { return opt_; }
  const Variable& gamma() const { return gamma_; }  // undefined without scale
  const Variable& beta() const { return beta_; }    // undefined without center
  const Variable& moving_mean() const { return moving_mean_; }
  const Variable& moving_variance() const { return moving_variance_; }
  std::vector<std::string> nonnegative_weights() const override { return {"moving_variance"}; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  BatchNormOptions opt_;
  int axis_ = -1;       // normalised, set by build()
  std::int64_t rank_ = 0;
  Variable gamma_, beta_, moving_mean_, moving_variance_;
};

struct LayerNormOptions {
  Axes axis = {-1};  // the axes normalised over (and that gamma/beta span)
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
  Initializer beta_initializer = init::zeros();
  Initializer gamma_initializer = init::ones();
  Regularizer beta_regularizer{};
  Regularizer gamma_regularizer{};
  DType dtype = DType::f32;
};

// Normalises each sample over `axis` with its own mean and (biased) variance, then applies
// gamma and beta of shape [dims at axis]. Same in training and eval.
class LayerNormalization : public Module {
 public:
  explicit LayerNormalization(LayerNormOptions options = {});
  std::string type_name() const override { return "LayerNormalization"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  const LayerNormOptions& options() const { return opt_; }
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  LayerNormOptions opt_;
  std::vector<int> axes_;      // normalised, set by build()
  std::int64_t rank_ = 0;
  Shape input_shape_;          // what build() saw (batch dim free)
  Variable gamma_, beta_;
};

}  // namespace soma::nn

namespace soma::nn {

struct RMSNormOptions {
  Axes axis = {-1};      // the axes normalised over (and that scale spans)
  double epsilon = 1e-6;  // Keras' default (PyTorch's nn.RMSNorm: the dtype's machine epsilon)
  Initializer scale_initializer = init::ones();
  Regularizer scale_regularizer{};
  DType dtype = DType::f32;
};

// Keras' RMSNormalization / PyTorch's nn.RMSNorm: y = x * rsqrt(mean(x^2 over axis) + eps) * scale,
// scale [dims at axis] learnable. No centring and no bias. Same in training and eval.
class RMSNormalization : public Module {
 public:
  explicit RMSNormalization(RMSNormOptions options = {});
  std::string type_name() const override { return "RMSNormalization"; }
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  const RMSNormOptions& options() const { return opt_; }
  const Variable& scale() const { return scale_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)
  // ONNX export: ReduceMean, Mul, Add, Sqrt, Div, Mul (ONNX's own RMSNormalization is opset 23).
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  RMSNormOptions opt_;
  std::vector<int> axes_;  // normalised, set by build()
  std::int64_t rank_ = 0;
  Shape input_shape_;
  Variable scale_;
};

}  // namespace soma::nn
