#include "soma/optim/optimizers.hpp"

#include <algorithm>
#include <cmath>

#include "soma/op.hpp"
#include "soma/ops.hpp"

// Each update is one registered op (src/ops/optim_updates.cpp: a fused loop on the CPU, a
// composite of ops elsewhere); the optimiser computes the per-step scalars once in double and
// passes them as attributes.

namespace soma::optim {

namespace {

void check_positive(const std::string& who, const char* what, const std::optional<double>& v) {
  if (v && !(*v > 0.0)) fail(who, what, " must be > 0, got ", *v);
}

// A rate, a decay or an epsilon: finite and >= 0 (NaN, infinities and negatives refused).
void check_non_negative(const std::string& who, const char* what, double v) {
  if (!(std::isfinite(v) && v >= 0.0)) fail(who, what, " must be a finite number >= 0, got ", v);
}

template <class O>
CommonOptions common_of(const std::string& who, const O& o) {
  if (o.clipnorm && o.global_clipnorm)
    fail(who, "only one of clipnorm and global_clipnorm can be set; got clipnorm=", *o.clipnorm,
         " and global_clipnorm=", *o.global_clipnorm);
  check_positive(who, "clipnorm", o.clipnorm);
  check_positive(who, "clipvalue", o.clipvalue);
  check_positive(who, "global_clipnorm", o.global_clipnorm);
  if (!o.learning_rate.is_schedule())
    check_non_negative(who, "learning_rate", o.learning_rate.at(0));
  check_non_negative(who, "weight_decay", o.weight_decay);
  CommonOptions c;
  c.learning_rate = o.learning_rate;
  c.weight_decay = o.weight_decay;
  c.clipnorm = o.clipnorm;
  c.clipvalue = o.clipvalue;
  c.global_clipnorm = o.global_clipnorm;
  if (o.gradient_accumulation_steps && *o.gradient_accumulation_steps < 1)
    fail(who, "gradient_accumulation_steps must be >= 1, got ", *o.gradient_accumulation_steps);
  c.gradient_accumulation_steps = o.gradient_accumulation_steps;
  return c;
}

void check_range(const std::string& who, const char* what, double v, double lo, double hi,
                 bool hi_open) {
  const bool ok = v >= lo && (hi_open ? v < hi : v <= hi);
  if (!ok)
    fail(who, what, " must be in [", lo, ", ", hi, hi_open ? ")" : "]", ", got ", v);
}

void check_epsilon(const std::string& who, double eps) {
  check_non_negative(who, "epsilon", eps);
}

}  // namespace

// ---------------------------------------------------------------------------------------- SGD

SGD::SGD(SGDOptions o) : Optimizer(common_of("SGD", o)), o_(std::move(o)) {
  check_range("SGD", "momentum", o_.momentum, 0.0, 1.0, false);
}

void SGD::step_scalar_values(double out[2]) const {
  out[0] = step_lr();
  out[1] = decay_factor();
}

void SGD::update(Variable& var, const Tensor& g, Slots& slots) {
  static const OpDef& def = get_op("sgd_update");
  const double mu = o_.momentum;
  Attrs attrs{{"lr", step_lr()},
              {"decay", decay_factor()},
              {"momentum", mu},
              {"nesterov", o_.nesterov}};
  if (Tensor steps = step_scalars_input(); steps.defined()) {  // the values from the device
    attrs.set("decay", decays_now() ? 1.0 : 0.0).set("step_scalars", true);
    std::vector<Tensor> in{var.value(), g};
    if (mu != 0.0) in.push_back(slot(slots, "momentum", var));
    in.push_back(steps);
    call_op(def, in, attrs);
    return;
  }
  if (mu == 0.0) {
    call_op(def, {var.value(), g}, attrs);
    return;
  }
  call_op(def, {var.value(), g, slot(slots, "momentum", var)}, attrs);
}

// --------------------------------------------------------------------------------------- Adam

Adam::Adam(AdamOptions o) : Adam(std::move(o), "Adam") {}

Adam::Adam(AdamOptions o, const char* who) : Optimizer(common_of(who, o)), o_(std::move(o)) {
  check_range(who, "beta_1", o_.beta_1, 0.0, 1.0, true);
  check_range(who, "beta_2", o_.beta_2, 0.0, 1.0, true);
  check_epsilon(who, o_.epsilon);
}

// The bias-corrected rate of the step being applied.
static double adam_alpha(double lr, std::int64_t iterations, double b1, double b2) {
  const double t = double(iterations + 1);
  return lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t));
}

void Adam::step_scalar_values(double out[2]) const {
  out[0] = adam_alpha(step_lr(), iterations_, o_.beta_1, o_.beta_2);
  out[1] = decay_factor();
}

void Adam::update(Variable& var, const Tensor& g, Slots& slots) {
  static const OpDef& def = get_op("adam_update");
  const double b1 = o_.beta_1, b2 = o_.beta_2;
  const double alpha = adam_alpha(step_lr(), iterations_, b1, b2);
  Attrs attrs{{"alpha", alpha},
              {"beta_1", b1},
              {"beta_2", b2},
              {"epsilon", o_.epsilon},
              {"decay", decay_factor()}};
  Tensor& m = slot(slots, "momentum", var);
  Tensor& v = slot(slots, "velocity", var);
  if (Tensor steps = step_scalars_input(); steps.defined()) {  // the values from the device
    attrs.set("decay", decays_now() ? 1.0 : 0.0).set("step_scalars", true);
    std::vector<Tensor> in{var.value(), g, m, v};
    if (o_.amsgrad) in.push_back(slot(slots, "velocity_hat", var));
    in.push_back(steps);
    call_op(def, in, attrs);
    return;
  }
  if (!o_.amsgrad) {
    call_op(def, {var.value(), g, m, v}, attrs);
    return;
  }
  call_op(def, {var.value(), g, m, v, slot(slots, "velocity_hat", var)}, attrs);
}

AdamW::AdamW(AdamWOptions o)
    : Adam(AdamOptions{.learning_rate = o.learning_rate,
                       .beta_1 = o.beta_1,
                       .beta_2 = o.beta_2,
                       .epsilon = o.epsilon,
                       .amsgrad = o.amsgrad,
                       .weight_decay = o.weight_decay,
                       .clipnorm = o.clipnorm,
                       .clipvalue = o.clipvalue,
                       .global_clipnorm = o.global_clipnorm,
                       .gradient_accumulation_steps = o.gradient_accumulation_steps},
           "AdamW"),
      ow_(std::move(o)) {}

// -------------------------------------------------------------------------------------- Nadam

namespace {
constexpr double kNadamDecay = 0.96;  // Keras' momentum-schedule base
}

Nadam::Nadam(NadamOptions o) : Optimizer(common_of("Nadam", o)), o_(std::move(o)) {
  check_range("Nadam", "beta_1", o_.beta_1, 0.0, 1.0, true);
  check_range("Nadam", "beta_2", o_.beta_2, 0.0, 1.0, true);
  check_epsilon("Nadam", o_.epsilon);
}

void Nadam::begin_step() {
  const double t = double(iterations_ + 1);
  u_product_ *= o_.beta_1 * (1.0 - 0.5 * std::pow(kNadamDecay, t));
}

std::string Nadam::capture_unsupported() const {
  return "Nadam's per-step scalars (momentum schedule, bias corrections) are op attributes that "
         "a captured graph would freeze (SGD, Adam and AdamW read theirs from the device)";
}

void Nadam::save_extra_state(std::map<std::string, Tensor>& state) const {
  state["u_product"] = scalar(u_product_, DType::f64);
}

void Nadam::load_extra_state(const std::map<std::string, Tensor>& state) {
  auto it = state.find("u_product");
  if (it == state.end() || !it->second.defined() || it->second.numel() != 1)
    fail("Nadam.load_state_dict", "the state has no 'u_product' scalar");
  u_product_ = it->second.item<double>();
}

void Nadam::update(Variable& var, const Tensor& g, Slots& slots) {
  static const OpDef& def = get_op("nadam_update");
  const double t = double(iterations_ + 1);
  const double b1 = o_.beta_1, b2 = o_.beta_2;
  const double u_t = b1 * (1.0 - 0.5 * std::pow(kNadamDecay, t));
  const double u_t1 = b1 * (1.0 - 0.5 * std::pow(kNadamDecay, t + 1.0));
  const double up_t = u_product_;
  const double up_t1 = up_t * u_t1;
  const Attrs attrs{{"lr", step_lr()},
                    {"beta_1", b1},
                    {"beta_2", b2},
                    {"k_m", u_t1 / (1.0 - up_t1)},         // weight of the new momentum in m_hat
                    {"k_g", (1.0 - u_t) / (1.0 - up_t)},   // weight of the gradient in m_hat
                    {"k_v", 1.0 / (1.0 - std::pow(b2, t))},
                    {"epsilon", o_.epsilon},
                    {"decay", decay_factor()}};
  Tensor& m = slot(slots, "momentum", var);
  Tensor& v = slot(slots, "velocity", var);
  call_op(def, {var.value(), g, m, v}, attrs);
}

// ------------------------------------------------------------------------------------ RMSprop

RMSprop::RMSprop(RMSpropOptions o) : Optimizer(common_of("RMSprop", o)), o_(std::move(o)) {
  check_range("RMSprop", "rho", o_.rho, 0.0, 1.0, false);
  check_non_negative("RMSprop", "momentum", o_.momentum);
  check_epsilon("RMSprop", o_.epsilon);
}

void RMSprop::update(Variable& var, const Tensor& g, Slots& slots) {
  static const OpDef& def = get_op("rmsprop_update");
  const double mu = o_.momentum;
  const Attrs attrs{{"lr", step_lr()},        {"rho", o_.rho},
                    {"epsilon", o_.epsilon},  {"momentum", mu},
                    {"centered", o_.centered}, {"decay", decay_factor()}};
  Tensor& v = slot(slots, "velocity", var);
  Tensor* avg = o_.centered ? &slot(slots, "average_gradient", var) : nullptr;
  Tensor* mom = mu > 0.0 ? &slot(slots, "momentum", var) : nullptr;
  std::vector<Tensor> inputs{var.value(), g, v};
  if (avg) inputs.push_back(*avg);
  if (mom) inputs.push_back(*mom);
  call_op(def, inputs, attrs);
}

// ------------------------------------------------------------------------------------ Adagrad

Adagrad::Adagrad(AdagradOptions o) : Optimizer(common_of("Adagrad", o)), o_(std::move(o)) {
  check_non_negative("Adagrad", "initial_accumulator_value", o_.initial_accumulator_value);
  check_epsilon("Adagrad", o_.epsilon);
}

void Adagrad::update(Variable& var, const Tensor& g, Slots& slots) {
  static const OpDef& def = get_op("adagrad_update");
  const Attrs attrs{{"lr", step_lr()}, {"epsilon", o_.epsilon}, {"decay", decay_factor()}};
  Tensor& acc = slot(slots, "accumulator", var, o_.initial_accumulator_value);
  call_op(def, {var.value(), g, acc}, attrs);
}

// ---- by name (Keras' identifiers) --------------------------------------------------------------

namespace {
struct OptimizerName {
  const char* name;
  OptimizerRef (*make)();
};
const OptimizerName kOptimizerNames[] = {
    {"sgd", []() -> OptimizerRef { return SGD(); }},         {"SGD", []() -> OptimizerRef { return SGD(); }},
    {"adam", []() -> OptimizerRef { return Adam(); }},       {"Adam", []() -> OptimizerRef { return Adam(); }},
    {"adamw", []() -> OptimizerRef { return AdamW(); }},     {"AdamW", []() -> OptimizerRef { return AdamW(); }},
    {"nadam", []() -> OptimizerRef { return Nadam(); }},     {"Nadam", []() -> OptimizerRef { return Nadam(); }},
    {"rmsprop", []() -> OptimizerRef { return RMSprop(); }}, {"RMSprop", []() -> OptimizerRef { return RMSprop(); }},
    {"adagrad", []() -> OptimizerRef { return Adagrad(); }}, {"Adagrad", []() -> OptimizerRef { return Adagrad(); }},
};
}  // namespace

OptimizerRef optimizer_from_name(const std::string& name) {
  for (const auto& n : kOptimizerNames)
    if (name == n.name) return n.make();
  std::string known;
  for (const auto& n : kOptimizerNames) known += std::string(known.empty() ? "" : ", ") + n.name;
  fail("optimizer_from_name", "unknown optimizer '", name, "'; expected one of ", known);
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> out;
  for (const auto& n : kOptimizerNames) out.push_back(n.name);
  return out;
}

}  // namespace soma::optim
