#pragma once
// Optimizer base. TF style: apply_gradients(grads, vars); libtorch style: bind the parameters at
// construction (or with set_parameters) and call step(grads). Per-variable state (moments) is
// keyed by the variable's identity and can be saved and restored (state_dict).
//
// One apply_gradients call, as in Keras 3:
//   1. variables whose gradient is an undefined Tensor are skipped (not connected to the loss);
//   1b. with gradient_accumulation_steps = k (Keras 3's optimiser argument), the gradients are
//      added to a per-variable accumulator and nothing else happens until the k-th call, which
//      goes on with their mean (sum / k) and zeroes the accumulators: k micro-batches of a
//      mean-reduced loss make one update, as one batch k times larger would. Unlike Keras 3,
//      iterations() counts updates, not calls, so schedules and Adam's bias correction see the
//      same steps as the large batch;
//   2. gradients are clipped: clipnorm (each gradient to that L2 norm) or global_clipnorm (all
//      together), then clipvalue (each element to [-v, v]);
//   3. lr = schedule(iterations()) or the constant rate;
//   4. decoupled weight decay: var -= lr * weight_decay * var, for the variables the weight
//      decay filter keeps (all by default, as Keras; exclude_from_weight_decay);
//   5. the optimiser's update rule, in place (no reallocation of variables or slots);
//   6. iterations() += 1.
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "soma/optim/schedules.hpp"
#include "soma/ref.hpp"
#include "soma/tensor.hpp"
#include "soma/variable.hpp"

namespace soma::nn {
class ConfigVisitor;
}

namespace soma::optim {

class LossScaleOptimizer;

// A learning rate: a constant or a schedule of the step count. Converts implicitly from both, so
// `Adam({.learning_rate = 1e-3})` and `SGD({.learning_rate = ExponentialDecay({...})})` both read
// like Keras.
class LearningRate {
 public:
  LearningRate(double value) : value_(value) {}  // NOLINT: implicit by design
  LearningRate(ScheduleRef schedule);             // NOLINT
  template <class S>
    requires std::derived_from<std::decay_t<S>, LearningRateSchedule>
  LearningRate(S&& schedule)  // NOLINT
      : LearningRate(ScheduleRef(std::forward<S>(schedule))) {}

  bool is_schedule() const { return bool(schedule_); }
  const ScheduleRef& schedule() const { return schedule_; }
  double at(std::int64_t step) const { return schedule_ ? (*schedule_)(step) : value_; }

 private:
  double value_ = 0.0;
  ScheduleRef schedule_;
};

// Options every optimiser takes, in Keras' order. Each concrete optimiser has one flat options
// struct holding these fields next to its own (designated initialisers cannot reach base-class
// fields), converted to CommonOptions for the base.
struct CommonOptions {
  LearningRate learning_rate = 0.01;
  double weight_decay = 0.0;              // decoupled: var -= lr * weight_decay * var
  std::optional<double> clipnorm;         // clip each gradient to this L2 norm
  std::optional<double> clipvalue;        // clip each gradient element to [-v, v]
  std::optional<double> global_clipnorm;  // clip all gradients jointly to this global norm
  // Keras 3's gradient_accumulation_steps (unset or 1: off): one update every k calls, with the
  // mean of the k gradients (see apply_gradients above).
  std::optional<std::int64_t> gradient_accumulation_steps;
};

class Optimizer {
 public:
  using Slots = std::map<std::string, Tensor>;

  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // This optimiser as a loss scaler (f16 training differentiates a scaled loss), else null.
  virtual LossScaleOptimizer* loss_scaler() { return nullptr; }
  const LossScaleOptimizer* loss_scaler() const {
    return const_cast<Optimizer*>(this)->loss_scaler();
  }

  // grads[i] is the gradient for vars[i] (an undefined Tensor skips that variable). Throws when
  // the counts differ, a shape differs, or no variable has a gradient at all.
  // Virtual so that a wrapper (LossScaleOptimizer, soma/optim/loss_scale.hpp) can decide per step.
  virtual void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  void set_parameters(std::vector<Variable> vars) { params_ = std::move(vars); }
  const std::vector<Variable>& parameters() const { return params_; }
  void step(const std::vector<Tensor>& grads) { apply_gradients(grads, params_); }

  virtual double learning_rate() const;  // current value: schedule(iterations()) or the constant
  // Replaces a constant rate (what ReduceLROnPlateau does). Throws when the rate is a schedule,
  // as Keras does.
  virtual void set_learning_rate(double lr);
  // Replaces the rate by a schedule; a null Ref turns the rate back into a constant (the
  // schedule's current value).
  virtual void set_schedule(Ref<LearningRateSchedule> schedule);
  virtual bool has_schedule() const { return options_.learning_rate.is_schedule(); }
  virtual std::int64_t iterations() const { return iterations_; }
  const CommonOptions& common_options() const { return options_; }
  std::int64_t gradient_accumulation_steps() const {
    return options_.gradient_accumulation_steps.value_or(1);
  }
  // Calls since the last update (0 .. k-1) while accumulating gradients.
  std::int64_t accumulated_steps() const { return accumulated_; }

  // Keras' exclude_from_weight_decay: no weight decay for the variables in var_list, nor for
  // those whose name (the layer's name / the weight's, e.g. "layer_normalization/gamma",
  // "dense_1/bias") matches one of the regular expressions in var_names (std::regex_search, as
  // Keras' re.search). Calls add up. Nothing is excluded unless asked:
  //   opt.exclude_from_weight_decay({}, {"bias", "gamma", "beta", "scale"});
  void exclude_from_weight_decay(const std::vector<Variable>& var_list = {},
                                 const std::vector<std::string>& var_names = {});
  // Or a predicate: weight decay applies where it returns true (replaces the exclusions).
  using VariableFilter = std::function<bool(const Variable&)>;
  void set_weight_decay_filter(VariableFilter decays) { decay_filter_ = std::move(decays); }
  bool decays(const Variable& v) const { return !decay_filter_ || decay_filter_(v); }
  // Lists the optimiser's config fields, once (soma/nn/config.hpp): optimizer_config() and model
  // files read this list. None by default.
  virtual void visit_config(nn::ConfigVisitor& v) { (void)v; }

  // "<i>/<slot>" for vars[i]'s slots (Keras' slot names: "momentum", "velocity", ...), plus
  // "iterations" (i64), "learning_rate" (f64, the current value; loading restores it only when
  // the rate is a constant, since a schedule follows iterations) and optimiser-wide state
  // (Nadam's "u_product"). Tensors are copies. Loading into the same variables (or copies of
  // them, in the same order) makes the next steps bit-identical to an uninterrupted run.
  virtual std::map<std::string, Tensor> state_dict(const std::vector<Variable>& vars) const;
  virtual void load_state_dict(const std::map<std::string, Tensor>& state,
                               const std::vector<Variable>& vars);
  std::map<std::string, Tensor> state_dict() const { return state_dict(params_); }
  void load_state_dict(const std::map<std::string, Tensor>& state) {
    load_state_dict(state, params_);
  }
  // Forgets all slots and the step count.
  void reset_state();

  // Updates of contiguous f32/f64 CPU variables run as fused loops over raw memory; other dtypes
  // (and everything when this is off) go through ops. Tests compare the two paths.
  static void set_fused_kernels(bool enabled);
  static bool fused_kernels();

  // ---- FitOptions::cuda_graph (docs/cuda.md, "CUDA graphs") --------------------------------
  // Why a captured step of this optimiser could not be replayed ("" when it can): its per-step
  // scalars must be device values (SGD, Adam, AdamW: set_device_step_scalars) or the same every
  // step (RMSprop, Adagrad with a constant rate), and no gradient accumulation (a host counter
  // picks the branch).
  virtual std::string capture_unsupported() const;
  // Step scalars on the device, as PyTorch's capturable Adam: the update ops read each step's
  // values (learning rate or schedule value, bias-corrected rate, weight decay) from a device
  // buffer that the host writes before the step (one small copy), not from op attributes that a
  // captured graph would freeze. The values are computed on the host in double as without it:
  // the same updates, bit for bit. Off by default; fit turns it on with cuda_graph.
  void set_device_step_scalars(bool on);
  bool device_step_scalars() const { return device_scalars_ && uses_step_scalars(); }
  // While a step is being captured the buffer write waits (a copy from the host is not captured)
  // until flush_step_scalars(), which fit calls after the capture, before launching the graph.
  void defer_step_scalars(bool on) { defer_scalars_ = on; }
  void flush_step_scalars();
  // The host side of a replayed step: its scalars (for the variables the last step updated)
  // written to the device buffer, and the step counted (iterations() + 1).
  void replay_step();
  // Undoes the step count of a step whose captured work never ran (a capture that failed).
  void rewind_step();

 protected:
  explicit Optimizer(const CommonOptions& o);
  Optimizer(const Optimizer& other);  // deep-copies the slots: copies never share state
  Optimizer& operator=(const Optimizer& other);
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  // One update of one variable with its gradient (already clipped, cast to the variable's dtype
  // and contiguous); `slots` is this variable's persistent state, created on first use with
  // slot(). The update applies the weight decay itself (apply_weight_decay or fused).
  virtual void update(Variable& var, const Tensor& grad, Slots& slots) = 0;
  // Called once per apply_gradients before the per-variable updates (iterations_ not yet
  // incremented).
  virtual void begin_step() {}
  // Optimiser-wide state beyond slots and iterations.
  virtual void save_extra_state(std::map<std::string, Tensor>& /*state*/) const {}
  virtual void load_extra_state(const std::map<std::string, Tensor>& /*state*/) {}
  virtual void reset_extra_state() {}
  virtual bool is_extra_state_key(const std::string& /*key*/) const { return false; }

  // The slot `name` of a variable, created as a contiguous tensor of its shape and dtype filled
  // with `init` when absent.
  static Tensor& slot(Slots& slots, const std::string& name, const Variable& var,
                      double init = 0.0);
  // Device step scalars (set_device_step_scalars): whether update() passes them (SGD, Adam),
  // their values for the variable being updated ([rate, decay], from step_lr() and
  // decay_factor()), and the input update() appends to its op (with attribute step_scalars and
  // a nonzero "decay" when the variable decays; undefined when off).
  virtual bool uses_step_scalars() const { return false; }
  // Whether update()'s op attributes are the same every step while the learning rate is
  // (RMSprop, Adagrad): a captured step then stays valid with a constant rate. Not assumed.
  virtual bool same_update_every_step() const { return false; }
  virtual void step_scalar_values(double out[2]) const { out[0] = out[1] = 0.0; }
  Tensor step_scalars_input();
  // Whether the device step scalars are on for this update.
  bool step_scalars_on() const { return device_scalars_ && uses_step_scalars(); }

  // Whether update() may use raw f32/f64 loops on this variable, gradient and slots.
  static bool can_fuse(const Variable& var, const Tensor& grad,
                       std::initializer_list<const Tensor*> slots);
  // Generic path helpers: var -= lr * wd * var; dst <- value, in place.
  void apply_weight_decay(Variable& var) const;
  static void write(const Tensor& dst, const Tensor& value);
  // Records an in-place write to a variable's memory done through raw pointers.
  static void mark_written(const Variable& var);

  // The fields every optimiser lists first: the current learning rate (which set_learning_rate /
  // set_schedule may have changed since construction), weight decay and clipping.
  void visit_common_config(nn::ConfigVisitor& v, double& weight_decay, std::optional<double>& clipnorm,
                           std::optional<double>& clipvalue, std::optional<double>& global_clipnorm,
                           std::optional<std::int64_t>& gradient_accumulation_steps);

  double step_lr() const { return step_lr_; }  // the rate of the step being applied
  // lr * wd for the variable being updated (0 when the filter excludes it).
  double decay_factor() const { return decay_now_ ? step_lr_ * options_.weight_decay : 0.0; }
  // Whether the variable being updated has a weight decay at all (whatever the rate).
  bool decays_now() const { return decay_now_ && options_.weight_decay != 0.0; }

  CommonOptions options_;
  std::int64_t iterations_ = 0;

 private:
  struct Entry {
    std::weak_ptr<TensorImpl> owner;  // detects a dead variable whose address was reused
    Slots slots;
  };
  // The variable's slots, moved to its device first if it moved (Module::to).
  Slots& slots_for(const Variable& var);
  // clipnorm / global_clipnorm for gradients on a device, without reading the norms back.
  void clip_on_device(std::vector<Tensor>& gs) const;

  std::vector<Variable> params_;
  double step_lr_ = 0.0;
  bool decay_now_ = true;
  std::int64_t accumulated_ = 0;
  VariableFilter decay_filter_;
  std::map<const void*, Entry> slots_;  // keyed by the variable (its TensorImpl)
  // Device step scalars: [rate, decay] per update of the step, staged on the host and written
  // to `scalar_buffer_` (f64 [2 * updates], on the variables' device) before the step runs.
  void stage_step_scalars(const std::vector<Variable>& updated);
  bool device_scalars_ = false, defer_scalars_ = false, scalars_pending_ = false;
  std::vector<double> staged_scalars_;
  Tensor scalar_buffer_;
  std::size_t scalar_cursor_ = 0;
  std::vector<Variable> last_updated_;  // the variables of the last step, for replay_step
};
using OptimizerRef = Ref<Optimizer>;

}  // namespace soma::optim
