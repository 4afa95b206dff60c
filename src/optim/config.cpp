// The config fields of the built-in optimisers and learning-rate schedules, each listed once
// (soma/nn/config.hpp). Keras' field names, so that configs read like Keras' get_config().
#include "soma/nn/config.hpp"

#include "soma/optim/loss_scale.hpp"
#include "soma/optim/optimizers.hpp"
#include "soma/optim/schedules.hpp"

namespace soma::optim {

// ---- optimisers ------------------------------------------------------------------------------
void Optimizer::visit_common_config(nn::ConfigVisitor& v, double& weight_decay, std::optional<double>& clipnorm,
                                    std::optional<double>& clipvalue, std::optional<double>& global_clipnorm,
                                    std::optional<std::int64_t>& gradient_accumulation_steps) {
  // A schedule is written as its config (it follows the saved "iterations"), else the constant.
  v.field("learning_rate", options_.learning_rate);
  v.field("weight_decay", weight_decay);
  v.field("clipnorm", clipnorm);
  v.field("clipvalue", clipvalue);
  v.field("global_clipnorm", global_clipnorm);
  v.field("gradient_accumulation_steps", gradient_accumulation_steps);
}

void SGD::visit_config(nn::ConfigVisitor& v) {
  visit_common_config(v, o_.weight_decay, o_.clipnorm, o_.clipvalue, o_.global_clipnorm,
                      o_.gradient_accumulation_steps);
  v.field("momentum", o_.momentum);
  v.field("nesterov", o_.nesterov);
}

void Adam::visit_config(nn::ConfigVisitor& v) {
  visit_common_config(v, o_.weight_decay, o_.clipnorm, o_.clipvalue, o_.global_clipnorm,
                      o_.gradient_accumulation_steps);
  v.field("beta_1", o_.beta_1);
  v.field("beta_2", o_.beta_2);
  v.field("epsilon", o_.epsilon);
  v.field("amsgrad", o_.amsgrad);
}

void AdamW::visit_config(nn::ConfigVisitor& v) {
  visit_common_config(v, ow_.weight_decay, ow_.clipnorm, ow_.clipvalue, ow_.global_clipnorm,
                      ow_.gradient_accumulation_steps);
  v.field("beta_1", ow_.beta_1);
  v.field("beta_2", ow_.beta_2);
  v.field("epsilon", ow_.epsilon);
  v.field("amsgrad", ow_.amsgrad);
}

void Nadam::visit_config(nn::ConfigVisitor& v) {
  visit_common_config(v, o_.weight_decay, o_.clipnorm, o_.clipvalue, o_.global_clipnorm,
                      o_.gradient_accumulation_steps);
  v.field("beta_1", o_.beta_1);
  v.field("beta_2", o_.beta_2);
  v.field("epsilon", o_.epsilon);
}

void RMSprop::visit_config(nn::ConfigVisitor& v) {
  visit_common_config(v, o_.weight_decay, o_.clipnorm, o_.clipvalue, o_.global_clipnorm,
                      o_.gradient_accumulation_steps);
  v.field("rho", o_.rho);
  v.field("momentum", o_.momentum);
  v.field("epsilon", o_.epsilon);
  v.field("centered", o_.centered);
}

void Adagrad::visit_config(nn::ConfigVisitor& v) {
  visit_common_config(v, o_.weight_decay, o_.clipnorm, o_.clipvalue, o_.global_clipnorm,
                      o_.gradient_accumulation_steps);
  v.field("initial_accumulator_value", o_.initial_accumulator_value);
  v.field("epsilon", o_.epsilon);
}

void LossScaleOptimizer::visit_config(nn::ConfigVisitor& v) {
  v.field("initial_scale", o_.initial_scale);
  v.field("dynamic_growth_steps", o_.dynamic_growth_steps);
  v.field("dynamic", o_.dynamic, {.optional = true});
}

// ---- schedules -------------------------------------------------------------------------------
void StepDecay::visit_config(nn::ConfigVisitor& v) {
  v.field("initial_learning_rate", o_.initial_learning_rate);
  v.field("step_size", o_.step_size);
  v.field("gamma", o_.gamma);
}

void PiecewiseConstantDecay::visit_config(nn::ConfigVisitor& v) {
  v.field("boundaries", boundaries_);
  v.field("values", values_);
}

void ExponentialDecay::visit_config(nn::ConfigVisitor& v) {
  v.field("initial_learning_rate", o_.initial_learning_rate);
  v.field("decay_steps", o_.decay_steps);
  v.field("decay_rate", o_.decay_rate);
  v.field("staircase", o_.staircase);
}

void CosineDecay::visit_config(nn::ConfigVisitor& v) {
  v.field("initial_learning_rate", o_.initial_learning_rate);
  v.field("decay_steps", o_.decay_steps);
  v.field("alpha", o_.alpha);
  v.field("warmup_target", o_.warmup_target);
  v.field("warmup_steps", o_.warmup_steps);
}

}  // namespace soma::optim
