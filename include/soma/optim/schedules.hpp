#pragma once
// Learning-rate schedules (functions of the optimiser's step count, as in Keras 3) and the
// reduce-on-plateau rule (a function of a monitored metric, fed once per epoch).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "soma/ref.hpp"

namespace soma::nn {
class ConfigVisitor;
}

namespace soma::optim {

// lr = schedule(step), where step is the number of updates already applied (the optimiser's
// iterations() before the update). Schedules are stateless, so copies may share one.
class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  virtual double operator()(std::int64_t step) const = 0;
  virtual std::string name() const = 0;
  // Lists the schedule's config fields, once (soma/nn/config.hpp). None by default: a custom
  // schedule is saved through serialization::register_schedule.
  virtual void visit_config(nn::ConfigVisitor& v) { (void)v; }
};
using ScheduleRef = Ref<LearningRateSchedule>;

// Fields marked "required" have no Keras default: leaving them unset throws soma::Error.
inline constexpr double kRequired = std::numeric_limits<double>::quiet_NaN();

// lr = initial_learning_rate * gamma ^ floor(step / step_size)   (PyTorch's StepLR).
struct StepDecayOptions {
  double initial_learning_rate = kRequired;
  std::int64_t step_size = 0;  // required, > 0
  double gamma = 0.1;
};
class StepDecay : public LearningRateSchedule {
 public:
  explicit StepDecay(StepDecayOptions o);
  double operator()(std::int64_t step) const override;
  std::string name() const override { return "StepDecay"; }
  const StepDecayOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  StepDecayOptions o_;
};

// values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <= boundaries[i],
// values.back() after the last boundary (Keras' PiecewiseConstantDecay). Boundaries increase
// strictly; values has one more element than boundaries.
class PiecewiseConstantDecay : public LearningRateSchedule {
 public:
  PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values);
  double operator()(std::int64_t step) const override;
  std::string name() const override { return "PiecewiseConstantDecay"; }
  const std::vector<std::int64_t>& boundaries() const { return boundaries_; }
  const std::vector<double>& values() const { return values_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  std::vector<std::int64_t> boundaries_;
  std::vector<double> values_;
};
using PiecewiseConstant = PiecewiseConstantDecay;

// lr = initial_learning_rate * decay_rate ^ (step / decay_steps), the exponent floored when
// staircase is set.
struct ExponentialDecayOptions {
  double initial_learning_rate = kRequired;
  std::int64_t decay_steps = 0;  // required, > 0
  double decay_rate = kRequired;
  bool staircase = false;
};
class ExponentialDecay : public LearningRateSchedule {
 public:
  explicit ExponentialDecay(ExponentialDecayOptions o);
  double operator()(std::int64_t step) const override;
  std::string name() const override { return "ExponentialDecay"; }
  const ExponentialDecayOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  ExponentialDecayOptions o_;
};

// Keras 3 CosineDecay. Without warm-up: s = min(step, decay_steps),
//   lr = initial * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha).
// With warmup_target: s = min(step, warmup_steps + decay_steps); while s < warmup_steps the rate
// rises linearly from initial to warmup_target, then decays from warmup_target as above with
// s - warmup_steps.
struct CosineDecayOptions {
  double initial_learning_rate = kRequired;
  std::int64_t decay_steps = 0;  // required, > 0
  double alpha = 0.0;            // floor, as a fraction of the rate decayed from
  std::optional<double> warmup_target;
  std::int64_t warmup_steps = 0;
};
class CosineDecay : public LearningRateSchedule {
 public:
  explicit CosineDecay(CosineDecayOptions o);
  double operator()(std::int64_t step) const override;
  std::string name() const override { return "CosineDecay"; }
  const CosineDecayOptions& options() const { return o_; }
  void visit_config(nn::ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 private:
  CosineDecayOptions o_;
};

// Keras' ReduceLROnPlateau rule without the callback plumbing (PyTorch keeps it in optim too):
// feed the monitored value once per epoch with the current learning rate; after `patience`
// epochs without an improvement of more than min_delta the rate is multiplied by factor (not
// below min_lr), then `cooldown` epochs pass before waiting starts again. mode "auto" means
// "max" when the monitor's name contains "acc", else "min".
struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;  // < 1
  int patience = 10;
  std::string mode = "auto";  // "auto", "min" or "max"
  double min_delta = 1e-4;
  int cooldown = 0;
  double min_lr = 0.0;
};
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions o = {});
  // One epoch: returns the learning rate to use from now on (== learning_rate when unchanged).
  // A NaN value never counts as an improvement.
  double step(double value, double learning_rate);
  void reset();  // forget the best value, the wait and the cooldown

  bool reduced() const { return reduced_; }  // whether the last step() lowered the rate
  bool maximising() const { return maximise_; }
  double best() const { return best_; }
  int wait() const { return wait_; }
  int cooldown_counter() const { return cooldown_counter_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }
  const ReduceLROnPlateauOptions& options() const { return o_; }

 private:
  bool improved(double value) const;
  ReduceLROnPlateauOptions o_;
  bool maximise_ = false;
  double best_ = 0.0;
  int wait_ = 0;
  int cooldown_counter_ = 0;
  bool reduced_ = false;
};

}  // namespace soma::optim
