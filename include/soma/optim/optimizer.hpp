#pragma once
// Optimizer base. TF style: apply_gradients(grads, vars); libtorch style: bind the parameters at
// construction (or with set_parameters) and call step(grads). Per-variable state (moments) is
// keyed by the variable's identity and can be saved and restored (state_dict).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "soma/ref.hpp"
#include "soma/tensor.hpp"
#include "soma/variable.hpp"

namespace soma::optim {

class LearningRateSchedule;

// Options every optimiser takes (each concrete optimiser adds its own fields).
struct CommonOptions {
  double learning_rate = 0.01;
  std::optional<double> clipvalue;     // clip each gradient element to [-v, v]
  std::optional<double> clipnorm;      // clip each gradient to this L2 norm
  std::optional<double> global_clipnorm;  // clip all gradients jointly to this global norm
  double weight_decay = 0.0;           // decoupled (AdamW-style) when the optimiser supports it
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;

  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  void set_parameters(std::vector<Variable> vars) { params_ = std::move(vars); }
  const std::vector<Variable>& parameters() const { return params_; }
  void step(const std::vector<Tensor>& grads) { apply_gradients(grads, params_); }

  double learning_rate() const;  // current value (from the schedule when one is set)
  void set_learning_rate(double lr);
  void set_schedule(Ref<LearningRateSchedule> schedule);
  std::int64_t iterations() const { return iterations_; }

  // Slots (moments etc.) by "<var name or index>/<slot>", plus "iterations" and "learning_rate".
  virtual std::map<std::string, Tensor> state_dict(const std::vector<Variable>& vars) const;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state,
                               const std::vector<Variable>& vars);

 protected:
  explicit Optimizer(const CommonOptions& o) : options_(o) {}
  // One update of one variable with its (already clipped) gradient; `slots` is this variable's
  // persistent state, created on first use.
  virtual void update(Variable& var, const Tensor& grad, std::map<std::string, Tensor>& slots) = 0;
  CommonOptions options_;
  std::int64_t iterations_ = 0;

 private:
  std::vector<Variable> params_;
  Ref<LearningRateSchedule> schedule_;
  std::map<const void*, std::map<std::string, Tensor>> slots_;  // keyed by variable storage
};
using OptimizerRef = Ref<Optimizer>;

}  // namespace soma::optim
