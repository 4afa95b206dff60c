#include "soma/optim/optimizer.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <regex>

#include "core/device_backend.hpp"
#include "internal/copy.hpp"
#include "internal/optim_updates.hpp"
#include "soma/autograd.hpp"
#include "soma/ops.hpp"

namespace soma::optim {

namespace {

std::string label(const Variable& v, std::size_t i) {
  if (v.defined() && !v.name().empty()) return detail::cat("'", v.name(), "' (index ", i, ")");
  return detail::cat("at index ", i);
}

// Sum of squares in double (the norm of a big f32 gradient loses digits when summed in f32).
double sum_squares(const Tensor& g) {
  if (g.device().is_cpu() && g.is_contiguous() &&
      (g.dtype() == DType::f32 || g.dtype() == DType::f64)) {
    const std::int64_t n = g.numel();
    double s = 0.0;
    if (g.dtype() == DType::f32) {
      const float* p = g.data<float>();
      for (std::int64_t i = 0; i < n; ++i) s += double(p[i]) * double(p[i]);
    } else {
      const double* p = g.data<double>();
      for (std::int64_t i = 0; i < n; ++i) s += p[i] * p[i];
    }
    return s;
  }
  return sum(square(cast(g, DType::f64))).item<double>();
}

Tensor scale(const Tensor& g, double factor) { return g * factor; }

// A variable's slots follow the variable (its TensorImpl), not its storage: Module::to gives a
// variable new storage on another device and the slots must still be found.
const void* key_of(const Variable& v) { return v.value().impl_ptr().get(); }

// Host copies of slots for state_dict (files read them); a CPU slot is copied.
Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? copy(t) : t.to(Device::cpu()); }

}  // namespace

LearningRate::LearningRate(ScheduleRef schedule) : schedule_(std::move(schedule)) {
  if (!schedule_) fail("LearningRate", "the schedule is null");
}

Optimizer::Optimizer(const CommonOptions& o) : options_(o) {}

Optimizer::Optimizer(const Optimizer& other)
    : options_(other.options_),
      iterations_(other.iterations_),
      params_(other.params_),
      step_lr_(other.step_lr_),
      accumulated_(other.accumulated_),
      decay_filter_(other.decay_filter_),
      slots_(other.slots_) {
  NoGradScope no_grad;
  for (auto& [key, entry] : slots_)
    for (auto& [name, t] : entry.slots) t = copy(t);
}

Optimizer& Optimizer::operator=(const Optimizer& other) {
  if (this != &other) {
    options_ = other.options_;
    iterations_ = other.iterations_;
    params_ = other.params_;
    step_lr_ = other.step_lr_;
    accumulated_ = other.accumulated_;
    decay_filter_ = other.decay_filter_;
    slots_ = other.slots_;
    NoGradScope no_grad;
    for (auto& [key, entry] : slots_)
      for (auto& [name, t] : entry.slots) t = copy(t);
  }
  return *this;
}

// The update ops' CPU kernels read the switch (src/backend/cpu/optim_updates.cpp).
void Optimizer::set_fused_kernels(bool enabled) { detail::optim_fused_flag() = enabled; }
bool Optimizer::fused_kernels() { return detail::optim_fused_flag(); }

double Optimizer::learning_rate() const { return options_.learning_rate.at(iterations_); }

void Optimizer::set_learning_rate(double lr) {
  if (!(std::isfinite(lr) && lr >= 0.0))
    fail(name() + ".set_learning_rate", "learning_rate must be a finite number >= 0, got ", lr);
  if (options_.learning_rate.is_schedule())
    fail(name() + ".set_learning_rate", "the learning rate is a schedule (",
         options_.learning_rate.schedule()->name(),
         "), so it cannot be set to a constant; call set_schedule({}) first to drop the schedule");
  options_.learning_rate = LearningRate(lr);
}

void Optimizer::set_schedule(Ref<LearningRateSchedule> schedule) {
  if (schedule)
    options_.learning_rate = LearningRate(std::move(schedule));
  else
    options_.learning_rate = LearningRate(learning_rate());
}

void Optimizer::clip_on_device(std::vector<Tensor>& gs) const {
  auto sq = [](const Tensor& g) { return sum(square(cast(g, DType::f64))); };
  // g * (c / max(norm, c)): unchanged below the limit, scaled to norm c above it.
  auto factor = [](const Tensor& norm, double c) { return c / maximum(norm, full_like(norm, c)); };
  if (options_.clipnorm) {
    for (auto& g : gs) g = g * cast(factor(sqrt(sq(g)), *options_.clipnorm), g.dtype());
  } else {
    Tensor ss;
    for (const auto& g : gs) ss = ss.defined() ? ss + sq(g) : sq(g);
    Tensor f = factor(sqrt(ss), *options_.global_clipnorm);
    for (auto& g : gs) g = g * cast(f, g.dtype());
  }
}

Optimizer::Slots& Optimizer::slots_for(const Variable& var) {
  const auto& impl = var.value().impl_ptr();
  if (!slots_.count(impl.get()))  // a new variable: drop the slots of dead ones first
    std::erase_if(slots_, [](const auto& kv) { return kv.second.owner.expired(); });
  auto& e = slots_[impl.get()];
  if (e.owner.lock() != impl) {  // new variable, or a dead one's address reused
    e.owner = impl;
    e.slots.clear();
  }
  // The variable moved to another device (Module::to) since its slots were made: they follow it,
  // once.
  const Device device = impl->device;
  for (auto& [name, t] : e.slots)
    if (t.device() != device) t = t.to(device);
  return e.slots;
}

Tensor& Optimizer::slot(Slots& slots, const std::string& name, const Variable& var,
                        double init) {
  auto it = slots.find(name);
  if (it != slots.end()) return it->second;
  // On the variable's device, filled there (no host copy).
  Tensor t = Tensor::empty(var.shape(), var.dtype(), var.value().device());
  detail::fill_value(t, init);
  return slots.emplace(name, std::move(t)).first->second;
}

bool Optimizer::can_fuse(const Variable& var, const Tensor& grad,
                         std::initializer_list<const Tensor*> slots) {
  if (!fused_kernels()) return false;
  const Tensor& v = var.value();
  const DType t = v.dtype();
  if (t != DType::f32 && t != DType::f64) return false;
  if (!v.device().is_cpu() || !v.is_contiguous()) return false;
  if (grad.dtype() != t || !grad.is_contiguous() || !grad.device().is_cpu()) return false;
  for (const Tensor* s : slots)
    if (s->dtype() != t || !s->is_contiguous() || !s->device().is_cpu()) return false;
  return true;
}

void Optimizer::apply_weight_decay(Variable& var) const {
  if (options_.weight_decay == 0.0) return;
  var.assign(var.value() - var.value() * decay_factor());
}

void Optimizer::write(const Tensor& dst, const Tensor& value) {
  detail::copy_into(value, dst);
  dst.storage()->version.fetch_add(1);
}

void Optimizer::mark_written(const Variable& var) {
  var.value().storage()->version.fetch_add(1);
}

void Optimizer::apply_gradients(const std::vector<Tensor>& grads,
                                const std::vector<Variable>& vars) {
  const std::string op = name() + ".apply_gradients";
  if (grads.size() != vars.size())
    fail(op, "got ", grads.size(), " gradients for ", vars.size(),
         " variables; pass one gradient per variable (an undefined Tensor to skip one)");
  std::vector<Tensor> gs;
  std::vector<std::size_t> index;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const Variable& v = vars[i];
    if (!v.defined()) fail(op, "the variable at index ", i, " is undefined");
    if (!grads[i].defined()) continue;  // not connected to the loss: skipped, as in TF
    if (!is_floating(v.dtype()))
      fail(op, "variable ", label(v, i), " has dtype ", v.dtype(),
           "; only floating-point variables can be trained");
    if (grads[i].shape() != v.shape())
      fail(op, "gradient of shape ", shape_str(grads[i].shape()), " does not match variable ",
           label(v, i), " of shape ", shape_str(v.shape()));
    if (grads[i].device() != v.value().device())
      fail(op, "gradient on ", grads[i].device().str(), " for variable ", label(v, i), " on ",
           v.value().device().str());
    gs.push_back(grads[i]);
    index.push_back(i);
  }
  if (vars.empty()) return;
  if (gs.empty())
    fail(op, "no gradient for any of the ", vars.size(),
         " variables: the loss does not depend on them (was it computed inside the tape?)");

  NoGradScope no_grad;
  const std::int64_t k = gradient_accumulation_steps();
  if (k > 1) {
    // Sum into the accumulators; the k-th call updates with the mean and zeroes them.
    for (std::size_t j = 0; j < gs.size(); ++j) {
      Variable var = vars[index[j]];
      Tensor& acc = slot(slots_for(var), "gradient_accumulator", var);
      write(acc, acc + cast(gs[j], var.dtype()));
    }
    if (++accumulated_ < k) return;
    accumulated_ = 0;
    gs.clear();
    index.clear();
    for (std::size_t i = 0; i < vars.size(); ++i) {
      auto& sl = slots_for(vars[i]);
      auto a = sl.find("gradient_accumulator");
      if (a == sl.end()) continue;
      gs.push_back(a->second * (1.0 / double(k)));
      write(a->second, zeros_like(a->second));
      index.push_back(i);
    }
  }
  // Clipping (Keras: clipnorm or global_clipnorm, then clipvalue).
  const bool on_host = vars[index[0]].value().device().is_cpu();
  if (!on_host && (options_.clipnorm || options_.global_clipnorm)) {
    // On a device: the factor min(1, c / norm) is computed there, so that clipping reads
    // nothing back to the host.
    clip_on_device(gs);
  } else if (options_.clipnorm) {
    const double c = *options_.clipnorm;
    for (auto& g : gs) {
      const double n = std::sqrt(sum_squares(g));
      if (n > c) g = scale(g, c / n);
    }
  } else if (options_.global_clipnorm) {
    const double c = *options_.global_clipnorm;
    double ss = 0.0;
    for (const auto& g : gs) ss += sum_squares(g);
    const double n = std::sqrt(ss);
    if (n > c)
      for (auto& g : gs) g = scale(g, c / n);
  }
  if (options_.clipvalue) {
    const double c = *options_.clipvalue;
    for (auto& g : gs) g = clip(g, -c, c);
  }

  step_lr_ = learning_rate();
  if (!(std::isfinite(step_lr_) && step_lr_ >= 0.0)) {
    if (options_.learning_rate.is_schedule())
      fail(op, "the learning-rate schedule ", options_.learning_rate.schedule()->name(), " gave ",
           step_lr_, " at step ", iterations_,
           " (expected a finite number >= 0); no variable was changed");
    fail(op, "the learning rate is ", step_lr_, " (expected a finite number >= 0)");
  }
  begin_step();
  if (step_scalars_on()) {
    std::vector<Variable> updated;
    for (std::size_t k = 0; k < gs.size(); ++k) updated.push_back(vars[index[k]]);
    stage_step_scalars(updated);
  }
  for (std::size_t k = 0; k < gs.size(); ++k) {
    Variable var = vars[index[k]];
    Tensor g = contiguous(cast(gs[k], var.dtype()));
    decay_now_ = decays(var);
    update(var, g, slots_for(var));
  }
  decay_now_ = true;
  ++iterations_;
}

// ---- device step scalars (FitOptions::cuda_graph) ------------------------------------------

std::string Optimizer::capture_unsupported() const {
  if (gradient_accumulation_steps() > 1)
    return name() + " accumulates gradients (gradient_accumulation_steps > 1): a host counter "
                    "decides each step whether it updates";
  if (uses_step_scalars()) return "";
  if (!same_update_every_step())
    return name() + "'s updates take per-step values as op attributes, which a captured graph "
                    "would freeze (SGD, Adam and AdamW read theirs from the device)";
  if (options_.learning_rate.is_schedule())
    return name() + "'s learning rate is a schedule and its update takes the rate as an op "
                    "attribute, which a captured graph would freeze (SGD, Adam and AdamW read "
                    "theirs from the device)";
  return "";  // the attributes are the same every step (a new rate invalidates the graph)
}

void Optimizer::set_device_step_scalars(bool on) {
  device_scalars_ = on;
  defer_scalars_ = scalars_pending_ = false;
  if (!on) {
    scalar_buffer_ = Tensor();
    staged_scalars_.clear();
    last_updated_.clear();
  }
}

void Optimizer::stage_step_scalars(const std::vector<Variable>& updated) {
  if (updated.empty()) return;
  staged_scalars_.assign(2 * updated.size(), 0.0);
  for (std::size_t k = 0; k < updated.size(); ++k) {
    decay_now_ = decays(updated[k]);
    step_scalar_values(&staged_scalars_[2 * k]);
  }
  decay_now_ = true;
  const Device dev = updated[0].value().device();
  const auto n = std::int64_t(staged_scalars_.size());
  if (!scalar_buffer_.defined() || scalar_buffer_.numel() != n || scalar_buffer_.device() != dev)
    scalar_buffer_ = Tensor::empty({n}, DType::f64, dev);
  last_updated_ = updated;
  scalar_cursor_ = 0;
  scalars_pending_ = true;
  if (!defer_scalars_) flush_step_scalars();
}

void Optimizer::flush_step_scalars() {
  if (!scalars_pending_) return;
  scalars_pending_ = false;
  const std::size_t bytes = staged_scalars_.size() * sizeof(double);
  void* dst = static_cast<char*>(scalar_buffer_.storage()->data) +
              scalar_buffer_.offset() * std::int64_t(sizeof(double));
  const Device dev = scalar_buffer_.device();
  if (dev.is_cpu()) {
    std::memcpy(dst, staged_scalars_.data(), bytes);
    return;
  }
  // Queued on the device's stream before the step's kernels (the host copy is taken before the
  // call returns).
  const detail::DeviceBackend* be = detail::device_backend(dev.kind);
  if (!be) fail(name() + ".apply_gradients", "no backend for ", dev.str());
  be->copy_bytes(dst, dev, staged_scalars_.data(), Device::cpu(), bytes);
  detail::count_transfer(true, bytes);
}

Tensor Optimizer::step_scalars_input() {
  if (!step_scalars_on() || !scalar_buffer_.defined()) return Tensor();
  const auto k = std::int64_t(scalar_cursor_++);
  return scalar_buffer_.slice(0, 2 * k, 2 * k + 2);
}

void Optimizer::replay_step() {
  step_lr_ = learning_rate();
  if (!(std::isfinite(step_lr_) && step_lr_ >= 0.0))
    fail(name() + ".apply_gradients", "the learning rate is ", step_lr_, " at step ",
         iterations_, " (expected a finite number >= 0); no variable was changed");
  begin_step();
  if (step_scalars_on()) stage_step_scalars(last_updated_);
  ++iterations_;
}

void Optimizer::rewind_step() {
  --iterations_;
  scalars_pending_ = false;
}

std::map<std::string, Tensor> Optimizer::state_dict(const std::vector<Variable>& vars) const {
  NoGradScope no_grad;
  std::map<std::string, Tensor> out;
  out["iterations"] = scalar(double(iterations_), DType::i64);
  out["learning_rate"] = scalar(learning_rate(), DType::f64);
  if (gradient_accumulation_steps() > 1)
    out["accumulated_steps"] = scalar(double(accumulated_), DType::i64);
  save_extra_state(out);
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i].defined()) continue;
    auto it = slots_.find(key_of(vars[i]));
    if (it == slots_.end() || it->second.owner.lock() != vars[i].value().impl_ptr()) continue;
    for (const auto& [name, t] : it->second.slots)
      out[std::to_string(i) + "/" + name] = host_copy(t);
  }
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state,
                                const std::vector<Variable>& vars) {
  const std::string op = name() + ".load_state_dict";
  NoGradScope no_grad;
  auto it = state.find("iterations");
  if (it == state.end() || !it->second.defined() || it->second.numel() != 1)
    fail(op, "the state has no 'iterations' scalar; it does not come from state_dict()");
  const auto iterations = it->second.item<std::int64_t>();

  // Check everything before changing anything.
  std::vector<Slots> per(vars.size());
  for (const auto& [key, t] : state) {
    if (key == "iterations" || key == "learning_rate" || key == "accumulated_steps" ||
        is_extra_state_key(key))
      continue;
    const auto slash = key.find('/');
    std::size_t idx = 0, used = 0;
    bool ok = slash != std::string::npos && slash > 0 && slash + 1 < key.size();
    if (ok) {
      try {
        idx = std::stoul(key.substr(0, slash), &used);
      } catch (const std::exception&) {
        ok = false;
      }
      ok = ok && used == slash;
    }
    if (!ok) fail(op, "unexpected key '", key, "' (expected '<variable index>/<slot>')");
    if (idx >= vars.size())
      fail(op, "the state has slot '", key, "' for variable ", idx, " but only ", vars.size(),
           " variables were given");
    const Variable& v = vars[idx];
    if (!v.defined()) fail(op, "the variable at index ", idx, " is undefined");
    if (!t.defined() || t.shape() != v.shape())
      fail(op, "slot '", key, "' has shape ", t.defined() ? shape_str(t.shape()) : "undefined",
           " but variable ", label(v, idx), " has shape ", shape_str(v.shape()));
    Tensor slot_value = copy(cast(t, v.dtype()));
    if (slot_value.device() != v.value().device()) slot_value = slot_value.to(v.value().device());
    per[idx][key.substr(slash + 1)] = std::move(slot_value);
  }
  auto lr = state.find("learning_rate");
  const bool load_lr = lr != state.end() && !options_.learning_rate.is_schedule();
  if (load_lr) {
    const double v = lr->second.item<double>();
    if (!(std::isfinite(v) && v >= 0.0))
      fail(op, "the state's learning_rate is ", v, " (expected a finite number >= 0)");
  }
  load_extra_state(state);

  iterations_ = iterations;
  auto acc = state.find("accumulated_steps");
  accumulated_ = acc == state.end() ? 0 : acc->second.item<std::int64_t>();
  if (load_lr) options_.learning_rate = LearningRate(lr->second.item<double>());

  for (std::size_t i = 0; i < vars.size(); ++i) slots_for(vars[i]) = std::move(per[i]);
}

void Optimizer::exclude_from_weight_decay(const std::vector<Variable>& var_list,
                                          const std::vector<std::string>& var_names) {
  std::vector<std::weak_ptr<TensorImpl>> ids;
  for (const auto& v : var_list) {
    if (!v.defined()) fail(name() + ".exclude_from_weight_decay", "a variable in var_list is undefined");
    ids.push_back(v.value().impl_ptr());
  }
  std::vector<std::regex> patterns;
  for (const auto& n : var_names) {
    try {
      patterns.emplace_back(n);
    } catch (const std::regex_error& e) {
      fail(name() + ".exclude_from_weight_decay", "var_names entry '", n,
           "' is not a regular expression: ", e.what());
    }
  }
  VariableFilter before = std::move(decay_filter_);
  decay_filter_ = [before = std::move(before), ids = std::move(ids),
                   patterns = std::move(patterns)](const Variable& v) {
    if (before && !before(v)) return false;
    for (const auto& id : ids)
      if (id.lock() == v.value().impl_ptr()) return false;
    for (const auto& p : patterns)
      if (std::regex_search(v.name(), p)) return false;
    return true;
  };
}

void Optimizer::reset_state() {
  slots_.clear();
  iterations_ = 0;
  accumulated_ = 0;
  reset_extra_state();
}

}  // namespace soma::optim
