#pragma once
// The optimiser update cases shared by test_update_formulas.cpp (rules on the host against the CPU
// kernels) and test_cuda_dense_update.cpp (CUDA kernels against the CPU): every variant the update
// ops support, with attributes that change from step to step.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "soma/optim/optimizer.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma::update_cases {

using soma::testing::rand_tensor;

constexpr int kSteps = 5;

struct UpdateCase {
  std::string name;
  const char* op;
  std::vector<std::pair<double, double>> slot_ranges;  // one per slot input, initial values
  std::function<Attrs(int step)> attrs;                // the step's attributes
};

// sgd_update with momentum, nesterov and decay as given; lr changes every step.
inline UpdateCase sgd(double momentum, bool nesterov, double decay) {
  std::vector<std::pair<double, double>> slots;
  if (momentum != 0.0) slots.push_back({-0.5, 0.5});
  return {"sgd momentum=" + std::to_string(momentum) + (nesterov ? " nesterov" : "") +
              " decay=" + std::to_string(decay),
          "sgd_update", slots, [=](int s) {
            const double lr = 0.1 / (1.0 + s);
            return Attrs{{"lr", lr}, {"decay", lr * decay}, {"momentum", momentum},
                         {"nesterov", nesterov}};
          }};
}

inline UpdateCase adam(bool amsgrad, double decay) {
  std::vector<std::pair<double, double>> slots{{-0.3, 0.3}, {0.01, 0.5}};
  if (amsgrad) slots.push_back({0.01, 0.5});
  return {std::string("adam") + (amsgrad ? " amsgrad" : "") + " decay=" + std::to_string(decay),
          "adam_update", slots, [=](int s) {
            const double t = s + 1.0, lr = 0.01;
            const double alpha = lr * std::sqrt(1.0 - std::pow(0.999, t)) / (1.0 - std::pow(0.9, t));
            return Attrs{{"alpha", alpha}, {"beta_1", 0.9}, {"beta_2", 0.999},
                         {"epsilon", 1e-7}, {"decay", lr * decay}};
          }};
}

inline UpdateCase nadam(double decay) {
  return {"nadam decay=" + std::to_string(decay), "nadam_update", {{-0.3, 0.3}, {0.01, 0.5}},
          [=](int s) {
            const double t = s + 1.0, lr = 0.01;
            return Attrs{{"lr", lr},          {"beta_1", 0.9},
                         {"beta_2", 0.999},   {"k_m", 0.5 + 0.1 * s},
                         {"k_g", 0.3 / t},    {"k_v", 1.0 / (1.0 - std::pow(0.999, t))},
                         {"epsilon", 1e-7},   {"decay", lr * decay}};
          }};
}

inline UpdateCase rmsprop(bool centered, double momentum, double decay) {
  std::vector<std::pair<double, double>> slots{{0.5, 1.0}};
  if (centered) slots.push_back({-0.1, 0.1});
  if (momentum > 0.0) slots.push_back({-0.2, 0.2});
  return {std::string("rmsprop") + (centered ? " centered" : "") +
              " momentum=" + std::to_string(momentum) + " decay=" + std::to_string(decay),
          "rmsprop_update", slots, [=](int s) {
            const double lr = 0.01 * (1.0 + 0.1 * s);
            return Attrs{{"lr", lr},       {"rho", 0.9},           {"epsilon", 1e-7},
                         {"momentum", momentum}, {"centered", centered}, {"decay", lr * decay}};
          }};
}

inline UpdateCase adagrad(double decay) {
  return {"adagrad decay=" + std::to_string(decay), "adagrad_update", {{0.1, 1.0}},
          [=](int s) {
            const double lr = 0.1 / (1.0 + s);
            return Attrs{{"lr", lr}, {"epsilon", 1e-7}, {"decay", lr * decay}};
          }};
}

inline std::vector<UpdateCase> all_cases() {
  std::vector<UpdateCase> c;
  for (double decay : {0.0, 0.04}) {
    c.push_back(sgd(0.0, false, decay));
    c.push_back(sgd(0.9, false, decay));
    c.push_back(sgd(0.9, true, decay));
    c.push_back(adam(false, decay));
    c.push_back(adam(true, decay));
    c.push_back(nadam(decay));
    for (bool centered : {false, true})
      for (double mu : {0.0, 0.9}) c.push_back(rmsprop(centered, mu, decay));
    c.push_back(adagrad(decay));
  }
  return c;
}

struct FusedKernels {
  explicit FusedKernels(bool on) { optim::Optimizer::set_fused_kernels(on); }
  ~FusedKernels() { optim::Optimizer::set_fused_kernels(true); }
};

inline const Shape kShape{5, 7};

inline std::vector<Tensor> initial_state(const UpdateCase& c, DType t,
                                         const Shape& shape = kShape) {
  std::vector<Tensor> s{rand_tensor(shape, 11, -1.0, 1.0, t)};
  for (std::size_t i = 0; i < c.slot_ranges.size(); ++i)
    s.push_back(rand_tensor(shape, 20 + i, c.slot_ranges[i].first, c.slot_ranges[i].second, t));
  return s;
}
inline Tensor gradient(int step, DType t, const Shape& shape = kShape) {
  return rand_tensor(shape, 100 + step, -1.0, 1.0, t);
}

// The step-scalars form of a step (FitOptions::cuda_graph, src/ops/optim_updates.cpp): for
// sgd_update and adam_update, the per-step values ([lr or alpha, decay]) go in an f64 [2] input
// on `dev` appended to `in`, the attributes get step_scalars and "decay" as a flag. Gives the
// results of the attributes, bit for bit. False (nothing changed) for the other ops.
inline bool to_step_scalars(const UpdateCase& c, std::vector<Tensor>& in, Attrs& a, Device dev) {
  const std::string op = c.op;
  if (op != "sgd_update" && op != "adam_update") return false;
  const double first = a.f(op == "sgd_update" ? "lr" : "alpha"), decay = a.f("decay");
  a.set("decay", decay != 0.0 ? 1.0 : 0.0).set("step_scalars", true);
  const Tensor s = constant(std::vector<double>{first, decay}, Shape{2});
  in.push_back(dev.is_cpu() ? s : s.to(dev));
  return true;
}

// kSteps of the op on `dev` (attributes, or the step-scalars form): the state at the end, on
// the host. Nothing for an op without a step-scalars form when `steps` is set.
inline std::vector<Tensor> run_steps(const UpdateCase& c, DType t, Device dev, bool fused,
                                     bool steps) {
  FusedKernels k(fused);
  std::vector<Tensor> s = initial_state(c, t);
  for (Tensor& x : s) x = dev.is_cpu() ? x : x.to(dev);
  for (int step = 0; step < kSteps; ++step) {
    const Tensor g = gradient(step, t);
    std::vector<Tensor> in{s[0], dev.is_cpu() ? g : g.to(dev)};
    in.insert(in.end(), s.begin() + 1, s.end());
    Attrs a = c.attrs(step);
    if (steps && !to_step_scalars(c, in, a, dev)) return {};
    call_op(get_op(c.op), in, a);
  }
  for (Tensor& x : s) x = x.to(Device::cpu());
  return s;
}

// The step-scalars form gives the attributes' results exactly, for every sgd/adam case.
inline ::testing::AssertionResult step_scalars_match(Device dev, DType t, bool fused) {
  int checked = 0;
  for (const UpdateCase& c : all_cases()) {
    const std::vector<Tensor> got = run_steps(c, t, dev, fused, true);
    if (got.empty()) continue;
    ++checked;
    const std::vector<Tensor> want = run_steps(c, t, dev, fused, false);
    for (std::size_t i = 0; i < got.size(); ++i) {
      auto r = soma::testing::all_close(got[i], want[i], 0.0, 0.0);
      if (!r) return r << " " << c.name << " " << dtype_name(t) << (fused ? " fused" : " composite")
                       << " on " << dev.str() << (i == 0 ? ": the variable" : ": a slot");
    }
  }
  if (checked != 10) return ::testing::AssertionFailure() << checked << " cases checked, not 10";
  return ::testing::AssertionSuccess();
}

}  // namespace soma::update_cases
