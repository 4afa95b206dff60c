#include "soma/optim/loss_scale.hpp"

#include <cmath>

#include "soma/autograd.hpp"
#include "soma/ops.hpp"

namespace soma::optim {

namespace {

constexpr const char* kScaleKey = "loss_scale";
constexpr const char* kGoodStepsKey = "loss_scale_good_steps";

// g / scale into a new contiguous tensor, and whether every element is finite: one pass over
// host memory for contiguous f32/f64 CPU gradients.
template <class T>
bool unscale_host(const Tensor& g, Tensor& out, double inv) {
  out = Tensor::empty(g.shape(), g.dtype(), g.device());
  const T* src = g.data<T>();
  T* dst = out.data<T>();
  const T f = T(inv);
  bool finite = true;
  for (std::int64_t i = 0, n = g.numel(); i < n; ++i) {
    dst[i] = src[i] * f;
    finite &= std::isfinite(dst[i]);
  }
  return finite;
}

}  // namespace

LossScaleOptimizer::LossScaleOptimizer(OptimizerRef inner, LossScaleOptions o)
    : Optimizer(inner ? inner->common_options() : CommonOptions{}), inner_(std::move(inner)), o_(o) {
  const char* who = "LossScaleOptimizer";
  if (!inner_) fail(who, "the inner optimizer is null");
  if (inner_->loss_scaler())
    fail(who, "the inner optimizer is already a LossScaleOptimizer");
  if (!(std::isfinite(o_.initial_scale) && o_.initial_scale > 0.0))
    fail(who, "initial_scale must be a finite number > 0, got ", o_.initial_scale);
  if (o_.dynamic_growth_steps < 1)
    fail(who, "dynamic_growth_steps must be >= 1, got ", o_.dynamic_growth_steps);
  scale_ = o_.initial_scale;
}

Tensor LossScaleOptimizer::scale_loss(const Tensor& loss) const { return loss * scale_; }

void LossScaleOptimizer::apply_gradients(const std::vector<Tensor>& grads,
                                         const std::vector<Variable>& vars) {
  const std::string op = name() + ".apply_gradients";
  if (grads.size() != vars.size())
    fail(op, "got ", grads.size(), " gradients for ", vars.size(),
         " variables; pass one gradient per variable (an undefined Tensor to skip one)");
  std::vector<Tensor> unscaled(grads.size());
  bool finite = true;
  {
    NoGradScope no_grad;
    const double inv = 1.0 / scale_;
    // Device gradients: each contributes sum(g/scale) in f64 (NaN or inf when any element is),
    // added on the device; the total is read once. f64 sums of f32/f16 values cannot overflow.
    Tensor total;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Tensor& g = grads[i];
      if (!g.defined()) continue;
      if (g.device().is_cpu() && g.is_contiguous() && g.dtype() == DType::f32) {
        finite &= unscale_host<float>(g, unscaled[i], inv);
      } else if (g.device().is_cpu() && g.is_contiguous() && g.dtype() == DType::f64) {
        finite &= unscale_host<double>(g, unscaled[i], inv);
      } else {
        unscaled[i] = g * inv;
        Tensor s = sum(cast(unscaled[i], DType::f64));
        total = total.defined() ? total + s : s;
      }
    }
    if (total.defined() && finite) {
      if (!total.device().is_cpu()) total = total.to(Device::cpu());  // the step's one read
      finite = std::isfinite(total.item<double>());
    }
  }
  last_skipped_ = !finite;
  if (finite) {
    inner_->apply_gradients(unscaled, vars);
    if (o_.dynamic && ++good_steps_ >= o_.dynamic_growth_steps) {
      // Keras and GradScaler grow without bound; an infinite scale would only ever be halved
      // back, so stay finite.
      if (std::isfinite(scale_ * 2.0)) scale_ *= 2.0;
      good_steps_ = 0;
    }
  } else if (o_.dynamic) {
    scale_ /= 2.0;
    good_steps_ = 0;
  }
  iterations_ = inner_->iterations();
}

std::map<std::string, Tensor> LossScaleOptimizer::state_dict(
    const std::vector<Variable>& vars) const {
  auto out = inner_->state_dict(vars);
  out[kScaleKey] = scalar(scale_, DType::f64);
  out[kGoodStepsKey] = scalar(double(good_steps_), DType::i64);
  return out;
}

void LossScaleOptimizer::load_state_dict(const std::map<std::string, Tensor>& state,
                                         const std::vector<Variable>& vars) {
  const std::string op = name() + ".load_state_dict";
  auto s = state.find(kScaleKey);
  auto g = state.find(kGoodStepsKey);
  if (s == state.end() || g == state.end() || !s->second.defined() || !g->second.defined() ||
      s->second.numel() != 1 || g->second.numel() != 1)
    fail(op, "the state has no '", kScaleKey, "' and '", kGoodStepsKey,
         "' scalars; it does not come from a LossScaleOptimizer's state_dict()");
  const double scale = s->second.item<double>();
  const auto good = g->second.item<std::int64_t>();
  if (!(std::isfinite(scale) && scale > 0.0))
    fail(op, "the state's loss_scale is ", scale, " (expected a finite number > 0)");
  if (good < 0) fail(op, "the state's loss_scale_good_steps is ", good, " (expected >= 0)");
  auto inner_state = state;
  inner_state.erase(kScaleKey);
  inner_state.erase(kGoodStepsKey);
  inner_->load_state_dict(inner_state, vars);  // checks (and may throw) before we change anything
  scale_ = scale;
  good_steps_ = good;
  iterations_ = inner_->iterations();
}

void LossScaleOptimizer::reset_extra_state() {
  inner_->reset_state();
  scale_ = o_.initial_scale;
  good_steps_ = 0;
  last_skipped_ = false;
}

}  // namespace soma::optim
