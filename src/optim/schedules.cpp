#include "soma/optim/schedules.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "soma/error.hpp"

namespace soma::optim {

namespace {

void require(const std::string& who, const char* what, double v) {
  if (std::isnan(v)) fail(who, what, " is required");
}

// A rate or a factor of one: finite and >= 0 (a NaN, infinite or negative one would give the
// optimiser such a learning rate).
void require_non_negative(const std::string& who, const std::string& what, double v) {
  if (!(std::isfinite(v) && v >= 0.0)) fail(who, what, " must be a finite number >= 0, got ", v);
}

void require_steps(const std::string& who, const char* what, std::int64_t v) {
  if (v <= 0) fail(who, what, " must be > 0, got ", v);
}

void check_step(const std::string& who, std::int64_t step) {
  if (step < 0) fail(who, "step must be >= 0, got ", step);
}

}  // namespace

// ---------------------------------------------------------------------------------- StepDecay

StepDecay::StepDecay(StepDecayOptions o) : o_(o) {
  require("StepDecay", "initial_learning_rate", o_.initial_learning_rate);
  require_non_negative("StepDecay", "initial_learning_rate", o_.initial_learning_rate);
  require_steps("StepDecay", "step_size", o_.step_size);
  require_non_negative("StepDecay", "gamma", o_.gamma);
}

double StepDecay::operator()(std::int64_t step) const {
  check_step("StepDecay", step);
  return o_.initial_learning_rate * std::pow(o_.gamma, double(step / o_.step_size));
}

// ------------------------------------------------------------------------ PiecewiseConstant

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<std::int64_t> boundaries,
                                               std::vector<double> values)
    : boundaries_(std::move(boundaries)), values_(std::move(values)) {
  if (values_.size() != boundaries_.size() + 1)
    fail("PiecewiseConstantDecay", "values must have one more element than boundaries; got ",
         boundaries_.size(), " boundaries and ", values_.size(), " values");
  for (std::size_t i = 1; i < boundaries_.size(); ++i)
    if (boundaries_[i] <= boundaries_[i - 1])
      fail("PiecewiseConstantDecay", "boundaries must increase strictly; boundary ", i, " is ",
           boundaries_[i], " after ", boundaries_[i - 1]);
  for (std::size_t i = 0; i < values_.size(); ++i)
    require_non_negative("PiecewiseConstantDecay", "values[" + std::to_string(i) + "]",
                         values_[i]);
}

double PiecewiseConstantDecay::operator()(std::int64_t step) const {
  // The first boundary >= step closes the interval the step lies in.
  auto it = std::lower_bound(boundaries_.begin(), boundaries_.end(), step);
  return values_[std::size_t(it - boundaries_.begin())];
}

// --------------------------------------------------------------------------- ExponentialDecay

ExponentialDecay::ExponentialDecay(ExponentialDecayOptions o) : o_(o) {
  require("ExponentialDecay", "initial_learning_rate", o_.initial_learning_rate);
  require_non_negative("ExponentialDecay", "initial_learning_rate", o_.initial_learning_rate);
  require_steps("ExponentialDecay", "decay_steps", o_.decay_steps);
  require("ExponentialDecay", "decay_rate", o_.decay_rate);
  require_non_negative("ExponentialDecay", "decay_rate", o_.decay_rate);
}

double ExponentialDecay::operator()(std::int64_t step) const {
  check_step("ExponentialDecay", step);
  double p = double(step) / double(o_.decay_steps);
  if (o_.staircase) p = std::floor(p);
  return o_.initial_learning_rate * std::pow(o_.decay_rate, p);
}

// -------------------------------------------------------------------------------- CosineDecay

CosineDecay::CosineDecay(CosineDecayOptions o) : o_(o) {
  require("CosineDecay", "initial_learning_rate", o_.initial_learning_rate);
  require_non_negative("CosineDecay", "initial_learning_rate", o_.initial_learning_rate);
  require_steps("CosineDecay", "decay_steps", o_.decay_steps);
  require_non_negative("CosineDecay", "alpha", o_.alpha);
  if (o_.warmup_target) require_non_negative("CosineDecay", "warmup_target", *o_.warmup_target);
  if (o_.warmup_steps < 0) fail("CosineDecay", "warmup_steps must be >= 0, got ", o_.warmup_steps);
  if (o_.warmup_steps > 0 && !o_.warmup_target)
    fail("CosineDecay", "warmup_steps is ", o_.warmup_steps, " but warmup_target is not set");
}

double CosineDecay::operator()(std::int64_t step) const {
  check_step("CosineDecay", step);
  const double decay_steps = double(o_.decay_steps);
  auto decay = [&](double s, double from) {
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * s / decay_steps));
    return from * ((1.0 - o_.alpha) * cosine + o_.alpha);
  };
  if (!o_.warmup_target) return decay(std::min(double(step), decay_steps), o_.initial_learning_rate);
  const double warmup = double(o_.warmup_steps);
  const double s = std::min(double(step), decay_steps + warmup);
  if (s < warmup)
    return (*o_.warmup_target - o_.initial_learning_rate) * (s / warmup) +
           o_.initial_learning_rate;
  return decay(s - warmup, *o_.warmup_target);
}

// -------------------------------------------------------------------------- ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions o) : o_(std::move(o)) {
  if (!(o_.factor >= 0.0 && o_.factor < 1.0))
    fail("ReduceLROnPlateau", "factor must be in [0, 1), got ", o_.factor);
  require_non_negative("ReduceLROnPlateau", "min_lr", o_.min_lr);
  require_non_negative("ReduceLROnPlateau", "min_delta", o_.min_delta);
  if (o_.patience < 0) fail("ReduceLROnPlateau", "patience must be >= 0, got ", o_.patience);
  if (o_.cooldown < 0) fail("ReduceLROnPlateau", "cooldown must be >= 0, got ", o_.cooldown);
  // The modes: whether the monitored value is maximised (-1: "auto", read from the monitor's
  // name as Keras does: accuracies are maximised).
  struct Mode {
    const char* name;
    int maximise;
  };
  constexpr Mode kModes[] = {{"auto", -1}, {"min", 0}, {"max", 1}};
  const Mode* mode = nullptr;
  for (const Mode& m : kModes)
    if (o_.mode == m.name) mode = &m;
  if (!mode)
    fail("ReduceLROnPlateau", "mode must be \"auto\", \"min\" or \"max\", got \"", o_.mode, "\"");
  maximise_ = mode->maximise < 0 ? o_.monitor.find("acc") != std::string::npos : mode->maximise == 1;
  reset();
}

void ReduceLROnPlateau::reset() {
  best_ = maximise_ ? -INFINITY : INFINITY;
  wait_ = 0;
  cooldown_counter_ = 0;
  reduced_ = false;
}

bool ReduceLROnPlateau::improved(double value) const {
  return maximise_ ? value > best_ + o_.min_delta : value < best_ - o_.min_delta;
}

double ReduceLROnPlateau::step(double value, double learning_rate) {
  reduced_ = false;
  if (in_cooldown()) {
    --cooldown_counter_;
    wait_ = 0;
  }
  if (improved(value)) {
    best_ = value;
    wait_ = 0;
    return learning_rate;
  }
  if (in_cooldown()) return learning_rate;
  if (++wait_ >= o_.patience && learning_rate > o_.min_lr) {
    wait_ = 0;
    cooldown_counter_ = o_.cooldown;
    reduced_ = true;
    return std::max(learning_rate * o_.factor, o_.min_lr);
  }
  return learning_rate;
}

}  // namespace soma::optim
