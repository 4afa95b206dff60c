#include "soma/optim/optimizers.hpp"

#include <algorithm>
#include <cmath>

#include "internal/parallel.hpp"
#include "soma/ops.hpp"

// Each update has two paths: a fused loop over raw f32/f64 memory (one pass, no temporaries,
// split across threads) and an op-based one for every other dtype. Both follow the same formula
// in the same order; the per-step scalars are computed once in double.

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

// Calls f(T{}) with T = float or double, the variable's dtype.
template <class F>
void with_float(DType t, F&& f) {
  if (t == DType::f32)
    f(float{});
  else
    f(double{});
}

// f(begin, end) over the variable's elements, split across threads for big variables.
template <class F>
void for_range(std::int64_t n, F&& f) {
  detail::parallel_for(n, detail::kParallelGrain, std::forward<F>(f));
}

// One Adam step over n elements. Separate pointers (restrict) and compile-time branches keep
// the loop vectorisable (this file is built with -fno-math-errno so that sqrt vectorises too).
template <class T, bool kDecay, bool kAmsgrad>
void adam_loop(T* __restrict p, const T* __restrict gp, T* __restrict mp, T* __restrict vp,
               T* __restrict hp, std::int64_t n, T c1, T c2, T al, T ep, T d) {
  for (std::int64_t i = 0; i < n; ++i) {
    T x = p[i];
    if constexpr (kDecay) x -= x * d;
    const T gi = gp[i];
    const T mi = mp[i] + (gi - mp[i]) * c1;
    const T vi = vp[i] + (gi * gi - vp[i]) * c2;
    mp[i] = mi;
    vp[i] = vi;
    T vv = vi;
    if constexpr (kAmsgrad) {
      vv = std::max(hp[i], vi);
      hp[i] = vv;
    }
    p[i] = x - (mi * al) / (std::sqrt(vv) + ep);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------- SGD

SGD::SGD(SGDOptions o) : Optimizer(common_of("SGD", o)), o_(std::move(o)) {
  check_range("SGD", "momentum", o_.momentum, 0.0, 1.0, false);
}

void SGD::update(Variable& var, const Tensor& g, Slots& slots) {
  const double lr = step_lr(), wd = decay_factor(), mu = o_.momentum;
  const std::int64_t n = var.value().numel();
  if (mu == 0.0) {
    if (can_fuse(var, g, {})) {
      with_float(var.dtype(), [&](auto tag) {
        using T = decltype(tag);
        T* p = var.value().data<T>();
        const T* gp = g.data<T>();
        const T a = T(lr), d = T(wd);
        for_range(n, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) {
            T x = p[i];
            if (wd != 0.0) x -= x * d;
            p[i] = x - gp[i] * a;
          }
        });
      });
      mark_written(var);
      return;
    }
    apply_weight_decay(var);
    var.assign_sub(g * lr);
    return;
  }
  Tensor& m = slot(slots, "momentum", var);
  if (can_fuse(var, g, {&m})) {
    const bool nesterov = o_.nesterov;
    with_float(var.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = var.value().data<T>();
      T* mp = m.data<T>();
      const T* gp = g.data<T>();
      const T a = T(lr), d = T(wd), k = T(mu);
      for_range(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          T x = p[i];
          if (wd != 0.0) x -= x * d;
          const T mi = -gp[i] * a + mp[i] * k;
          mp[i] = mi;
          p[i] = nesterov ? x + (-gp[i] * a + mi * k) : x + mi;
        }
      });
    });
    mark_written(var);
    return;
  }
  apply_weight_decay(var);
  write(m, -(g * lr) + m * mu);
  var.assign_add(o_.nesterov ? -(g * lr) + m * mu : m);
}

// --------------------------------------------------------------------------------------- Adam

Adam::Adam(AdamOptions o) : Adam(std::move(o), "Adam") {}

Adam::Adam(AdamOptions o, const char* who) : Optimizer(common_of(who, o)), o_(std::move(o)) {
  check_range(who, "beta_1", o_.beta_1, 0.0, 1.0, true);
  check_range(who, "beta_2", o_.beta_2, 0.0, 1.0, true);
  check_epsilon(who, o_.epsilon);
}

void Adam::update(Variable& var, const Tensor& g, Slots& slots) {
  const double lr = step_lr(), wd = decay_factor();
  const double t = double(iterations_ + 1);
  const double b1 = o_.beta_1, b2 = o_.beta_2, eps = o_.epsilon;
  const double alpha = lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t));
  Tensor& m = slot(slots, "momentum", var);
  Tensor& v = slot(slots, "velocity", var);
  Tensor* vhat = o_.amsgrad ? &slot(slots, "velocity_hat", var) : nullptr;
  const std::int64_t n = var.value().numel();

  if (can_fuse(var, g, {&m, &v}) && (!vhat || can_fuse(var, g, {vhat}))) {
    with_float(var.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = var.value().data<T>();
      const T* gp = g.data<T>();
      T* mp = m.data<T>();
      T* vp = v.data<T>();
      T* hp = vhat ? vhat->data<T>() : nullptr;
      const T c1 = T(1.0 - b1), c2 = T(1.0 - b2), al = T(alpha), ep = T(eps), d = T(wd);
      for_range(n, [&](std::int64_t b, std::int64_t e) {
        if (!hp && wd == 0.0)  // the common case, as one branch-free loop the compiler vectorises
          adam_loop<T, false, false>(p + b, gp + b, mp + b, vp + b, nullptr, e - b, c1, c2, al,
                                     ep, d);
        else if (!hp)
          adam_loop<T, true, false>(p + b, gp + b, mp + b, vp + b, nullptr, e - b, c1, c2, al,
                                    ep, d);
        else if (wd == 0.0)
          adam_loop<T, false, true>(p + b, gp + b, mp + b, vp + b, hp + b, e - b, c1, c2, al, ep,
                                    d);
        else
          adam_loop<T, true, true>(p + b, gp + b, mp + b, vp + b, hp + b, e - b, c1, c2, al, ep,
                                   d);
      });
    });
    mark_written(var);
    return;
  }
  apply_weight_decay(var);
  write(m, m + (g - m) * (1.0 - b1));
  write(v, v + (square(g) - v) * (1.0 - b2));
  Tensor vv = v;
  if (vhat) {
    write(*vhat, maximum(*vhat, v));
    vv = *vhat;
  }
  var.assign_sub((m * alpha) / (sqrt(vv) + eps));
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
                       .global_clipnorm = o.global_clipnorm},
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
  const double lr = step_lr(), wd = decay_factor();
  const double t = double(iterations_ + 1);
  const double b1 = o_.beta_1, b2 = o_.beta_2, eps = o_.epsilon;
  const double u_t = b1 * (1.0 - 0.5 * std::pow(kNadamDecay, t));
  const double u_t1 = b1 * (1.0 - 0.5 * std::pow(kNadamDecay, t + 1.0));
  const double up_t = u_product_;
  const double up_t1 = up_t * u_t1;
  const double k_m = u_t1 / (1.0 - up_t1);       // weight of the new momentum in m_hat
  const double k_g = (1.0 - u_t) / (1.0 - up_t);  // weight of the gradient in m_hat
  const double k_v = 1.0 / (1.0 - std::pow(b2, t));
  Tensor& m = slot(slots, "momentum", var);
  Tensor& v = slot(slots, "velocity", var);
  const std::int64_t n = var.value().numel();

  if (can_fuse(var, g, {&m, &v})) {
    with_float(var.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = var.value().data<T>();
      const T* gp = g.data<T>();
      T* mp = m.data<T>();
      T* vp = v.data<T>();
      const T c1 = T(1.0 - b1), c2 = T(1.0 - b2), km = T(k_m), kg = T(k_g), kv = T(k_v),
              a = T(lr), ep = T(eps), d = T(wd);
      for_range(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          T x = p[i];
          if (wd != 0.0) x -= x * d;
          const T gi = gp[i];
          const T mi = mp[i] + (gi - mp[i]) * c1;
          const T vi = vp[i] + (gi * gi - vp[i]) * c2;
          mp[i] = mi;
          vp[i] = vi;
          const T m_hat = km * mi + kg * gi;
          const T v_hat = vi * kv;
          p[i] = x - (m_hat * a) / (std::sqrt(v_hat) + ep);
        }
      });
    });
    mark_written(var);
    return;
  }
  apply_weight_decay(var);
  write(m, m + (g - m) * (1.0 - b1));
  write(v, v + (square(g) - v) * (1.0 - b2));
  Tensor m_hat = m * k_m + g * k_g;
  Tensor v_hat = v * k_v;
  var.assign_sub((m_hat * lr) / (sqrt(v_hat) + eps));
}

// ------------------------------------------------------------------------------------ RMSprop

RMSprop::RMSprop(RMSpropOptions o) : Optimizer(common_of("RMSprop", o)), o_(std::move(o)) {
  check_range("RMSprop", "rho", o_.rho, 0.0, 1.0, false);
  check_non_negative("RMSprop", "momentum", o_.momentum);
  check_epsilon("RMSprop", o_.epsilon);
}

void RMSprop::update(Variable& var, const Tensor& g, Slots& slots) {
  const double lr = step_lr(), wd = decay_factor();
  const double rho = o_.rho, eps = o_.epsilon, mu = o_.momentum;
  Tensor& v = slot(slots, "velocity", var);
  Tensor* avg = o_.centered ? &slot(slots, "average_gradient", var) : nullptr;
  Tensor* mom = mu > 0.0 ? &slot(slots, "momentum", var) : nullptr;
  const std::int64_t n = var.value().numel();

  if (can_fuse(var, g, {&v}) && (!avg || can_fuse(var, g, {avg})) &&
      (!mom || can_fuse(var, g, {mom}))) {
    with_float(var.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = var.value().data<T>();
      const T* gp = g.data<T>();
      T* vp = v.data<T>();
      T* ap = avg ? avg->data<T>() : nullptr;
      T* kp = mom ? mom->data<T>() : nullptr;
      const T r = T(rho), rc = T(1.0 - rho), a = T(lr), ep = T(eps), k = T(mu), d = T(wd);
      for_range(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          T x = p[i];
          if (wd != 0.0) x -= x * d;
          const T gi = gp[i];
          const T vi = r * vp[i] + rc * (gi * gi);
          vp[i] = vi;
          T denom;
          if (ap) {
            const T ai = r * ap[i] + rc * gi;
            ap[i] = ai;
            denom = vi - ai * ai + ep;
          } else {
            denom = vi + ep;
          }
          const T inc = (a * gi) / std::sqrt(denom);
          if (kp) {
            const T ki = k * kp[i] + inc;
            kp[i] = ki;
            p[i] = x - ki;
          } else {
            p[i] = x - inc;
          }
        }
      });
    });
    mark_written(var);
    return;
  }
  apply_weight_decay(var);
  write(v, v * rho + square(g) * (1.0 - rho));
  Tensor denom;
  if (avg) {
    write(*avg, *avg * rho + g * (1.0 - rho));
    denom = v - square(*avg) + eps;
  } else {
    denom = v + eps;
  }
  Tensor inc = (g * lr) / sqrt(denom);
  if (mom) {
    write(*mom, *mom * mu + inc);
    var.assign_sub(*mom);
  } else {
    var.assign_sub(inc);
  }
}

// ------------------------------------------------------------------------------------ Adagrad

Adagrad::Adagrad(AdagradOptions o) : Optimizer(common_of("Adagrad", o)), o_(std::move(o)) {
  check_non_negative("Adagrad", "initial_accumulator_value", o_.initial_accumulator_value);
  check_epsilon("Adagrad", o_.epsilon);
}

void Adagrad::update(Variable& var, const Tensor& g, Slots& slots) {
  const double lr = step_lr(), wd = decay_factor(), eps = o_.epsilon;
  Tensor& acc = slot(slots, "accumulator", var, o_.initial_accumulator_value);
  const std::int64_t n = var.value().numel();

  if (can_fuse(var, g, {&acc})) {
    with_float(var.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = var.value().data<T>();
      const T* gp = g.data<T>();
      T* cp = acc.data<T>();
      const T a = T(lr), ep = T(eps), d = T(wd);
      for_range(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          T x = p[i];
          if (wd != 0.0) x -= x * d;
          const T gi = gp[i];
          const T ci = cp[i] + gi * gi;
          cp[i] = ci;
          p[i] = x - (a * gi) / std::sqrt(ci + ep);
        }
      });
    });
    mark_written(var);
    return;
  }
  apply_weight_decay(var);
  write(acc, acc + square(g));
  var.assign_sub((g * lr) / sqrt(acc + eps));
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
