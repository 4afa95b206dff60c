#pragma once
// The optimiser update rules (src/ops/optim_updates.cpp) as per-element functors, callable from
// host and device code (SOMA_HD): the CUDA kernels of the update ops run them
// (src/backend/cuda/update_kernels.cu), and tests/unit/test_update_formulas.cpp runs them on the
// host against the CPU kernels and the composites. Same formula, same order of operations as the
// CPU fused loops (src/backend/cpu/optim_updates.cpp).
//
// A rule holds the op's attributes converted to the compute type T once (T(lr), T(1 - beta_1),
// ..., as the CPU loops do) and is applied as rule(p, g, s0, s1, s2): the variable's element
// (updated in place), the gradient's, and up to three slots in the order the rule names them
// below (an unused slot is a dummy the rule never reads). make() takes the attributes in double.
//
// Step scalars (FitOptions::cuda_graph, docs/cuda.md "CUDA graphs"): with the op attribute
// step_scalars, the per-step values (sgd: lr, decay; adam: alpha, decay) come from a device f64
// buffer instead of the attributes, so that a captured graph reads each replay's values.
// set_step(s) puts them in a rule made from the other attributes, with the same conversions to T
// as make(): the same rule, bit for bit.
//
// This header is compiled by nvcc (C++17) too: no soma header, no C++20.
#include "elementwise_table.hpp"  // SOMA_HD, ew::sqrt

namespace soma::upd {

// sgd_update: slot momentum (when momentum != 0).
template <class T>
struct Sgd {
  T lr, decay, momentum;
  bool has_decay, has_momentum, nesterov;
  static Sgd make(double lr, double decay, double momentum, bool nesterov) {
    return {T(lr), T(decay), T(momentum), decay != 0.0, momentum != 0.0, nesterov};
  }
  SOMA_HD void set_step(const double* s) {  // [lr, decay]
    lr = T(s[0]);
    decay = T(s[1]);
  }
  SOMA_HD void operator()(T& p, T g, T& m, T&, T&) const {
    T x = p;
    if (has_decay) x -= x * decay;
    if (!has_momentum) {
      p = x - g * lr;
      return;
    }
    const T mi = -g * lr + m * momentum;
    m = mi;
    p = nesterov ? x + (-g * lr + mi * momentum) : x + mi;
  }
};

// adam_update (Adam, AdamW): slots m, v [, vhat] (amsgrad).
template <class T>
struct Adam {
  T c1, c2, alpha, epsilon, decay;  // c1 = 1 - beta_1, c2 = 1 - beta_2
  bool has_decay, amsgrad;
  static Adam make(double alpha, double beta_1, double beta_2, double epsilon, double decay,
                   bool amsgrad) {
    return {T(1.0 - beta_1), T(1.0 - beta_2), T(alpha), T(epsilon), T(decay), decay != 0.0,
            amsgrad};
  }
  SOMA_HD void set_step(const double* s) {  // [alpha, decay]
    alpha = T(s[0]);
    decay = T(s[1]);
  }
  SOMA_HD void operator()(T& p, T g, T& m, T& v, T& vhat) const {
    T x = p;
    if (has_decay) x -= x * decay;
    const T mi = m + (g - m) * c1;
    const T vi = v + (g * g - v) * c2;
    m = mi;
    v = vi;
    T vv = vi;
    if (amsgrad) {
      vv = vhat < vi ? vi : vhat;  // std::max(vhat, vi)
      vhat = vv;
    }
    p = x - (mi * alpha) / (ew::sqrt(vv) + epsilon);
  }
};

// nadam_update: slots m, v.
template <class T>
struct Nadam {
  T c1, c2, k_m, k_g, k_v, lr, epsilon, decay;
  bool has_decay;
  static Nadam make(double lr, double beta_1, double beta_2, double k_m, double k_g, double k_v,
                    double epsilon, double decay) {
    return {T(1.0 - beta_1), T(1.0 - beta_2), T(k_m), T(k_g), T(k_v), T(lr), T(epsilon),
            T(decay), decay != 0.0};
  }
  SOMA_HD void set_step(const double*) {}  // no step scalars: attributes only
  SOMA_HD void operator()(T& p, T g, T& m, T& v, T&) const {
    T x = p;
    if (has_decay) x -= x * decay;
    const T mi = m + (g - m) * c1;
    const T vi = v + (g * g - v) * c2;
    m = mi;
    v = vi;
    const T m_hat = k_m * mi + k_g * g;
    const T v_hat = vi * k_v;
    p = x - (m_hat * lr) / (ew::sqrt(v_hat) + epsilon);
  }
};

// rmsprop_update: slots v, avg (centered), mom (momentum > 0). The op's inputs list avg and mom
// only when used: the caller maps them onto s1 and s2.
template <class T>
struct Rmsprop {
  T rho, rc, lr, epsilon, momentum, decay;  // rc = 1 - rho
  bool has_decay, centered, has_momentum;
  static Rmsprop make(double lr, double rho, double epsilon, double momentum, bool centered,
                      double decay) {
    return {T(rho),      T(1.0 - rho), T(lr),    T(epsilon),     T(momentum),
            T(decay),    decay != 0.0, centered, momentum > 0.0};
  }
  SOMA_HD void set_step(const double*) {}  // no step scalars: attributes only
  SOMA_HD void operator()(T& p, T g, T& v, T& avg, T& mom) const {
    T x = p;
    if (has_decay) x -= x * decay;
    const T vi = rho * v + rc * (g * g);
    v = vi;
    T denom;
    if (centered) {
      const T ai = rho * avg + rc * g;
      avg = ai;
      denom = vi - ai * ai + epsilon;
    } else {
      denom = vi + epsilon;
    }
    const T inc = (lr * g) / ew::sqrt(denom);
    if (has_momentum) {
      const T ki = momentum * mom + inc;
      mom = ki;
      p = x - ki;
    } else {
      p = x - inc;
    }
  }
};

// adagrad_update: slot acc.
template <class T>
struct Adagrad {
  T lr, epsilon, decay;
  bool has_decay;
  static Adagrad make(double lr, double epsilon, double decay) {
    return {T(lr), T(epsilon), T(decay), decay != 0.0};
  }
  SOMA_HD void set_step(const double*) {}  // no step scalars: attributes only
  SOMA_HD void operator()(T& p, T g, T& acc, T&, T&) const {
    T x = p;
    if (has_decay) x -= x * decay;
    const T ci = acc + g * g;
    acc = ci;
    p = x - (lr * g) / ew::sqrt(ci + epsilon);
  }
};

}  // namespace soma::upd
