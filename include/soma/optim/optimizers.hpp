#pragma once
// The optimisers, with Keras 3's update rules and defaults. In the formulas g is the (clipped)
// gradient, lr the step's learning rate, t = iterations() + 1 the step being applied; every
// optimiser first applies the decoupled weight decay var -= lr * weight_decay * var.
//
//   optim::Adam({.learning_rate = 1e-3, .amsgrad = true})
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "soma/optim/optimizer.hpp"

namespace soma::optim {

// m = momentum * m - lr * g;  var += m                      (momentum > 0)
//                             var += momentum * m - lr * g  (nesterov, with the new m)
// var -= lr * g                                             (momentum == 0)
struct SGDOptions {
  LearningRate learning_rate = 0.01;
  double momentum = 0.0;  // in [0, 1]
  bool nesterov = false;
  double weight_decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<std::int64_t> gradient_accumulation_steps;  // Keras 3's; unset: off
};
class SGD : public Optimizer {
 public:
  explicit SGD(SGDOptions o = {});
  std::string name() const override { return "SGD"; }
  const SGDOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void update(Variable& var, const Tensor& grad, Slots& slots) override;
  bool uses_step_scalars() const override { return true; }
  void step_scalar_values(double out[2]) const override;

 private:
  SGDOptions o_;
};

// m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2);  vhat = max(vhat, v) (amsgrad)
// var -= m * lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) / (sqrt(v or vhat) + epsilon)
struct AdamOptions {
  LearningRate learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  double weight_decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<std::int64_t> gradient_accumulation_steps;  // Keras 3's; unset: off
};
class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions o = {});
  std::string name() const override { return "Adam"; }
  const AdamOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Adam(AdamOptions o, const char* who);  // `who` names the optimiser in error messages
  void update(Variable& var, const Tensor& grad, Slots& slots) override;
  bool uses_step_scalars() const override { return true; }
  void step_scalar_values(double out[2]) const override;

 private:
  AdamOptions o_;
};

// Adam with decoupled weight decay on by default (Keras' AdamW: weight_decay 0.004).
struct AdamWOptions {
  LearningRate learning_rate = 0.001;
  double weight_decay = 0.004;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<std::int64_t> gradient_accumulation_steps;  // Keras 3's; unset: off
};
class AdamW : public Adam {
 public:
  explicit AdamW(AdamWOptions o = {});
  std::string name() const override { return "AdamW"; }
  const AdamWOptions& options() const { return ow_; }  // hides Adam::options()
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  AdamWOptions ow_;
};

// Keras 3 Nadam (Dozat's Nesterov Adam with the momentum schedule of Sutskever et al.):
//   u_t = beta_1 * (1 - 0.5 * 0.96^t),  u_{t+1} = beta_1 * (1 - 0.5 * 0.96^(t+1)),
//   u_product_t = u_1 * ... * u_t  (optimiser-wide, updated once per step before the updates),
//   m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
//   m_hat = u_{t+1} * m / (1 - u_product_t * u_{t+1}) + (1 - u_t) * g / (1 - u_product_t)
//   v_hat = v / (1 - beta_2^t)
//   var -= lr * m_hat / (sqrt(v_hat) + epsilon)
struct NadamOptions {
  LearningRate learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<std::int64_t> gradient_accumulation_steps;  // Keras 3's; unset: off
};
class Nadam : public Optimizer {
 public:
  explicit Nadam(NadamOptions o = {});
  std::string name() const override { return "Nadam"; }
  const NadamOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)
  double u_product() const { return u_product_; }
  // Its per-step momentum-schedule scalars are op attributes (no device step scalars yet).
  std::string capture_unsupported() const override;

 protected:
  void update(Variable& var, const Tensor& grad, Slots& slots) override;
  void begin_step() override;
  void save_extra_state(std::map<std::string, Tensor>& state) const override;
  void load_extra_state(const std::map<std::string, Tensor>& state) override;
  void reset_extra_state() override { u_product_ = 1.0; }
  bool is_extra_state_key(const std::string& key) const override { return key == "u_product"; }

 private:
  NadamOptions o_;
  double u_product_ = 1.0;
};

// v = rho * v + (1 - rho) * g^2;  a = rho * a + (1 - rho) * g  (centered)
// inc = lr * g / sqrt(v - a^2 + epsilon)   (centered)   or   lr * g / sqrt(v + epsilon)
// mom = momentum * mom + inc; var -= mom   (momentum > 0)   or   var -= inc
struct RMSpropOptions {
  LearningRate learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  double weight_decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<std::int64_t> gradient_accumulation_steps;  // Keras 3's; unset: off
};
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(RMSpropOptions o = {});
  std::string name() const override { return "RMSprop"; }
  const RMSpropOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void update(Variable& var, const Tensor& grad, Slots& slots) override;
  // Its attributes change only with the learning rate (a constant one: a captured graph stays valid).
  bool same_update_every_step() const override { return true; }

 private:
  RMSpropOptions o_;
};

// acc += g^2 (acc starts at initial_accumulator_value);  var -= lr * g / sqrt(acc + epsilon)
struct AdagradOptions {
  LearningRate learning_rate = 0.001;
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<std::int64_t> gradient_accumulation_steps;  // Keras 3's; unset: off
};
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(AdagradOptions o = {});
  std::string name() const override { return "Adagrad"; }
  const AdagradOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void update(Variable& var, const Tensor& grad, Slots& slots) override;
  // Its attributes change only with the learning rate (a constant one: a captured graph stays valid).
  bool same_update_every_step() const override { return true; }

 private:
  AdagradOptions o_;
};

// Keras' string identifiers, with default options: "sgd", "adam", "adamw", "nadam", "rmsprop",
// "adagrad" and the class names ("SGD", "Adam", "AdamW", "Nadam", "RMSprop", "Adagrad"). An
// unknown name is a soma::Error listing optimizer_names().
OptimizerRef optimizer_from_name(const std::string& name);
// Every name optimizer_from_name accepts.
std::vector<std::string> optimizer_names();

}  // namespace soma::optim
