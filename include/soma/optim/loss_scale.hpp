#pragma once
// Loss scaling for f16 training, as Keras' LossScaleOptimizer (the mixed_float16 policy) and
// PyTorch's GradScaler: f16 gradients underflow to zero below ~6e-8, so the loss is multiplied
// by a large scale before the backward pass and the gradients divided by it before the update.
//
// Each apply_gradients:
//   1. unscales the gradients (g / scale) and checks them all for inf/NaN together: one chain of
//      reductions on the gradients' device, combined there, and ONE scalar read to the host per
//      step (the decision to update or skip is made on the host, as GradScaler.step does for
//      non-fused optimisers; skipping without it would need every update op to take a flag);
//   2. finite: the wrapped optimiser applies the unscaled gradients; after
//      dynamic_growth_steps such steps in a row the scale doubles;
//   3. not finite: the step is skipped (no variable, no slot and no iteration count changes,
//      as Keras) and the scale halves.
// With dynamic = false the scale stays initial_scale and non-finite steps are still skipped.
//
//   auto opt = optim::LossScaleOptimizer(optim::Adam({.learning_rate = 1e-3}));
//   Tensor loss = ...;  grads = tape.gradient(opt.scale_loss(loss), vars);
//   opt.apply_gradients(grads, vars);
// Model::compile(..., {.mixed_precision = "f16"}) wraps its optimiser in one and fit scales
// the loss itself.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "soma/optim/optimizer.hpp"

namespace soma::optim {

struct LossScaleOptions {
  double initial_scale = 32768.0;          // 2^15, Keras' default
  std::int64_t dynamic_growth_steps = 2000;  // good steps in a row before the scale doubles
  bool dynamic = true;                     // false: a fixed scale
};

// A copy shares the wrapped optimiser (an OptimizerRef), and so its slots and step count.
class LossScaleOptimizer : public Optimizer {
 public:
  explicit LossScaleOptimizer(OptimizerRef inner, LossScaleOptions o = {});
  std::string name() const override { return "LossScaleOptimizer"; }
  using Optimizer::loss_scaler;
  LossScaleOptimizer* loss_scaler() override { return this; }

  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) override;
  // loss * scale, in the loss's dtype (f32 under autocast: losses stay f32).
  Tensor scale_loss(const Tensor& loss) const;

  double scale() const { return scale_; }
  std::int64_t good_steps() const { return good_steps_; }
  // Whether the last apply_gradients found a non-finite gradient and skipped its update.
  bool last_step_skipped() const { return last_skipped_; }
  Optimizer& inner_optimizer() const { return *inner_; }
  const OptimizerRef& inner_ref() const { return inner_; }
  const LossScaleOptions& options() const { return o_; }

  // The rate, schedule and step count are the wrapped optimiser's (callbacks such as
  // ReduceLROnPlateau reach it through the wrapper).
  double learning_rate() const override { return inner_->learning_rate(); }
  void set_learning_rate(double lr) override { inner_->set_learning_rate(lr); }
  void set_schedule(Ref<LearningRateSchedule> s) override { inner_->set_schedule(std::move(s)); }
  bool has_schedule() const override { return inner_->has_schedule(); }
  std::int64_t iterations() const override { return inner_->iterations(); }

  // Keras' fields: initial_scale, dynamic_growth_steps, plus dynamic. The wrapped optimiser's
  // config is not nested (ConfigVisitor has no optimiser field).
  void visit_config(nn::ConfigVisitor& v) override;

  // The wrapped optimiser's state plus "loss_scale" (f64) and "loss_scale_good_steps" (i64).
  std::map<std::string, Tensor> state_dict(const std::vector<Variable>& vars) const override;
  void load_state_dict(const std::map<std::string, Tensor>& state,
                       const std::vector<Variable>& vars) override;
  using Optimizer::load_state_dict;
  using Optimizer::state_dict;

 protected:
  void update(Variable&, const Tensor&, Slots&) override {}  // never called: inner_ updates
  void reset_extra_state() override;  // reset_state(): the inner state and the initial scale

 private:
  OptimizerRef inner_;
  LossScaleOptions o_;
  double scale_;
  std::int64_t good_steps_ = 0;
  bool last_skipped_ = false;
};

}  // namespace soma::optim
