// Optimisers: each one's first steps against its published (Keras 3) update rule written out by
// hand in doubles, clipping, weight decay, schedules, skipped gradients, state round trips,
// convergence and the error messages.
#include <cmath>
#include <functional>

#include "soma/optim/optimizers.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using Vec = std::vector<double>;

namespace {

// The tiny problem: L(w) = sum(0.5 * a * w^2 + b * w), so dL/dw = a * w + b.
const Vec kW0 = {0.5, -1.5, 2.0};
const Vec kA = {1.0, 2.0, 0.5};
const Vec kB = {0.3, -0.2, 0.1};

Vec grad_of(const Vec& w) {
  Vec g(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) g[i] = kA[i] * w[i] + kB[i];
  return g;
}

Tensor vec(const Vec& v, DType dtype = DType::f64) {
  return constant(v, {std::int64_t(v.size())}).cast(dtype);
}

// Runs `steps` steps of the optimiser on the tiny problem (gradients from a tape); returns w
// after each step.
std::vector<Vec> run_problem(optim::Optimizer& opt, int steps, DType dtype) {
  Variable w(vec(kW0, dtype), "w");
  std::vector<Vec> out;
  for (int s = 0; s < steps; ++s) {
    GradientTape tape;
    Tensor loss = sum(vec(kA, dtype) * w * w * 0.5 + vec(kB, dtype) * w);
    opt.apply_gradients(tape.gradient(loss, std::vector<Variable>{w}), {w});
    out.push_back(w.value().cast(DType::f64).to_vector<double>());
  }
  return out;
}

::testing::AssertionResult steps_close(const std::vector<Vec>& got, const std::vector<Vec>& want,
                                       double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "step count differs";
  for (std::size_t s = 0; s < got.size(); ++s)
    for (std::size_t i = 0; i < got[s].size(); ++i)
      if (!(std::abs(got[s][i] - want[s][i]) <= tol * (1.0 + std::abs(want[s][i]))))
        return ::testing::AssertionFailure()
               << "step " << s + 1 << ", element " << i << ": got " << got[s][i] << ", want "
               << want[s][i];
  return ::testing::AssertionSuccess();
}

struct FusedKernels {  // restores the fused kernels whatever the test does
  explicit FusedKernels(bool on) { optim::Optimizer::set_fused_kernels(on); }
  ~FusedKernels() { optim::Optimizer::set_fused_kernels(true); }
};

// The hand-computed steps must match in f64 and f32, through the fused loops and the op path.
void expect_first_steps(const std::function<optim::OptimizerRef()>& make,
                        const std::vector<Vec>& want) {
  for (bool fused : {true, false}) {
    FusedKernels k(fused);
    auto o64 = make();
    EXPECT_TRUE(steps_close(run_problem(*o64, int(want.size()), DType::f64), want, 1e-12))
        << o64->name() << " f64, fused=" << fused;
    auto o32 = make();
    EXPECT_TRUE(steps_close(run_problem(*o32, int(want.size()), DType::f32), want, 2e-6))
        << o32->name() << " f32, fused=" << fused;
  }
}

// Applies the fixed gradients with the optimiser to a variable starting at w0 (f64).
std::vector<Vec> run_grads(optim::Optimizer& opt, const Vec& w0, const std::vector<Vec>& grads) {
  Variable w(vec(w0), "w");
  std::vector<Vec> out;
  for (const auto& g : grads) {
    opt.apply_gradients({vec(g)}, {w});
    out.push_back(w.value().to_vector<double>());
  }
  return out;
}

using soma::testing::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

// ------------------------------------------------------------------------------ first steps

TEST(SGD, FirstStepsFollowPlainGradientDescent) {
  const double lr = 0.1;
  std::vector<Vec> want;
  Vec w = kW0;
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * g[i];
    want.push_back(w);
  }
  expect_first_steps([&] { return optim::OptimizerRef(optim::SGD({.learning_rate = lr})); }, want);
}

TEST(SGD, FirstStepsFollowMomentumRule) {
  const double lr = 0.1, mu = 0.9;
  std::vector<Vec> want;
  Vec w = kW0, m(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = mu * m[i] - lr * g[i];
      w[i] += m[i];
    }
    want.push_back(w);
  }
  expect_first_steps(
      [&] { return optim::OptimizerRef(optim::SGD({.learning_rate = lr, .momentum = mu})); },
      want);
}

TEST(SGD, FirstStepsFollowNesterovRule) {
  const double lr = 0.1, mu = 0.9;
  std::vector<Vec> want;
  Vec w = kW0, m(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = mu * m[i] - lr * g[i];
      w[i] += mu * m[i] - lr * g[i];
    }
    want.push_back(w);
  }
  expect_first_steps(
      [&] {
        return optim::OptimizerRef(
            optim::SGD({.learning_rate = lr, .momentum = mu, .nesterov = true}));
      },
      want);
}

TEST(Adam, FirstStepsFollowPublishedRule) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::vector<Vec> want;
  Vec w = kW0, m(3, 0.0), v(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
    want.push_back(w);
  }
  expect_first_steps([&] { return optim::OptimizerRef(optim::Adam({.learning_rate = lr})); },
                     want);
}

TEST(Adam, AmsgradDividesByTheLargestSecondMomentSeen) {
  // A big first gradient then small ones: v shrinks, so vhat = max(vhat, v) differs from v.
  const double lr = 0.1, b1 = 0.9, b2 = 0.5, eps = 1e-7;
  const std::vector<Vec> grads = {{1.0, -2.0, 3.0}, {0.1, 0.1, -0.1}, {0.2, -0.05, 0.01}};
  std::vector<Vec> want, plain;
  Vec w = kW0, wp = kW0, m(3, 0.0), v(3, 0.0), vhat(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const Vec& g = grads[std::size_t(t - 1)];
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      vhat[i] = std::max(vhat[i], v[i]);
      w[i] -= alpha * m[i] / (std::sqrt(vhat[i]) + eps);
      wp[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
    want.push_back(w);
    plain.push_back(wp);
  }
  ASSERT_GT(std::abs(want[2][0] - plain[2][0]), 1e-3);  // the case really exercises vhat
  for (bool fused : {true, false}) {
    FusedKernels k(fused);
    optim::Adam opt({.learning_rate = lr, .beta_1 = b1, .beta_2 = b2, .amsgrad = true});
    EXPECT_TRUE(steps_close(run_grads(opt, kW0, grads), want, 1e-12)) << "fused=" << fused;
  }
}

TEST(AdamW, FirstStepsDecayWeightsBeforeTheAdamUpdate) {
  const double lr = 0.01, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::vector<Vec> want;
  Vec w = kW0, m(3, 0.0), v(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);  // the gradient at the weights before decay
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] -= lr * wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
    want.push_back(w);
  }
  expect_first_steps(
      [&] {
        return optim::OptimizerRef(optim::AdamW({.learning_rate = lr, .weight_decay = wd}));
      },
      want);
}

TEST(AdamW, DefaultsToKerasWeightDecay) {
  optim::AdamW opt;
  EXPECT_EQ(opt.name(), "AdamW");
  EXPECT_DOUBLE_EQ(opt.options().weight_decay, 0.004);
  EXPECT_DOUBLE_EQ(opt.common_options().weight_decay, 0.004);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.001);
}

TEST(Nadam, FirstStepsFollowKerasMomentumSchedule) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::vector<Vec> want;
  Vec w = kW0, m(3, 0.0), v(3, 0.0);
  double u_product = 1.0;
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    const double u_t = b1 * (1 - 0.5 * std::pow(0.96, t));
    const double u_next = b1 * (1 - 0.5 * std::pow(0.96, t + 1));
    u_product *= u_t;
    const double u_product_next = u_product * u_next;
    for (std::size_t i = 0; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = u_next * m[i] / (1 - u_product_next) + (1 - u_t) * g[i] / (1 - u_product);
      const double v_hat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
    want.push_back(w);
  }
  expect_first_steps([&] { return optim::OptimizerRef(optim::Nadam({.learning_rate = lr})); },
                     want);
}

namespace {
std::vector<Vec> rmsprop_reference(double lr, double rho, double mu, double eps, bool centered) {
  std::vector<Vec> want;
  Vec w = kW0, v(3, 0.0), a(3, 0.0), mom(3, 0.0);
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    for (std::size_t i = 0; i < w.size(); ++i) {
      v[i] = rho * v[i] + (1 - rho) * g[i] * g[i];
      double denom = v[i] + eps;
      if (centered) {
        a[i] = rho * a[i] + (1 - rho) * g[i];
        denom = v[i] - a[i] * a[i] + eps;
      }
      const double inc = lr * g[i] / std::sqrt(denom);
      if (mu > 0) {
        mom[i] = mu * mom[i] + inc;
        w[i] -= mom[i];
      } else {
        w[i] -= inc;
      }
    }
    want.push_back(w);
  }
  return want;
}
}  // namespace

TEST(RMSprop, FirstStepsFollowPlainRule) {
  expect_first_steps(
      [] { return optim::OptimizerRef(optim::RMSprop({.learning_rate = 0.01})); },
      rmsprop_reference(0.01, 0.9, 0.0, 1e-7, false));
}

TEST(RMSprop, FirstStepsFollowCenteredRule) {
  expect_first_steps(
      [] { return optim::OptimizerRef(optim::RMSprop({.learning_rate = 0.01, .centered = true})); },
      rmsprop_reference(0.01, 0.9, 0.0, 1e-7, true));
}

TEST(RMSprop, FirstStepsFollowMomentumRule) {
  expect_first_steps(
      [] {
        return optim::OptimizerRef(optim::RMSprop({.learning_rate = 0.01, .momentum = 0.5}));
      },
      rmsprop_reference(0.01, 0.9, 0.5, 1e-7, false));
}

TEST(RMSprop, FirstStepsFollowCenteredMomentumRule) {
  expect_first_steps(
      [] {
        return optim::OptimizerRef(optim::RMSprop(
            {.learning_rate = 0.01, .rho = 0.8, .momentum = 0.5, .centered = true}));
      },
      rmsprop_reference(0.01, 0.8, 0.5, 1e-7, true));
}

TEST(Adagrad, FirstStepsFollowPublishedRule) {
  const double lr = 0.1, acc0 = 0.1, eps = 1e-7;
  std::vector<Vec> want;
  Vec w = kW0, acc(3, acc0);
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    for (std::size_t i = 0; i < w.size(); ++i) {
      acc[i] += g[i] * g[i];
      w[i] -= lr * g[i] / std::sqrt(acc[i] + eps);
    }
    want.push_back(w);
  }
  expect_first_steps([&] { return optim::OptimizerRef(optim::Adagrad({.learning_rate = lr})); },
                     want);
}

TEST(Optimizer, KerasDefaults) {
  optim::SGD sgd;
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.01);
  EXPECT_DOUBLE_EQ(sgd.options().momentum, 0.0);
  EXPECT_FALSE(sgd.options().nesterov);
  optim::Adam adam;
  EXPECT_DOUBLE_EQ(adam.learning_rate(), 0.001);
  EXPECT_DOUBLE_EQ(adam.options().beta_1, 0.9);
  EXPECT_DOUBLE_EQ(adam.options().beta_2, 0.999);
  EXPECT_DOUBLE_EQ(adam.options().epsilon, 1e-7);
  EXPECT_FALSE(adam.options().amsgrad);
  EXPECT_DOUBLE_EQ(adam.common_options().weight_decay, 0.0);
  optim::RMSprop rms;
  EXPECT_DOUBLE_EQ(rms.learning_rate(), 0.001);
  EXPECT_DOUBLE_EQ(rms.options().rho, 0.9);
  EXPECT_FALSE(rms.options().centered);
  optim::Adagrad ada;
  EXPECT_DOUBLE_EQ(ada.options().initial_accumulator_value, 0.1);
  EXPECT_DOUBLE_EQ(optim::Nadam().learning_rate(), 0.001);
}

// ------------------------------------------------------------------------------ weight decay

TEST(SGD, DecoupledWeightDecayShrinksWeightsBeforeTheStep) {
  const double lr = 0.1, wd = 0.5;
  std::vector<Vec> want;
  Vec w = kW0;
  for (int t = 1; t <= 3; ++t) {
    Vec g = grad_of(w);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = w[i] - lr * wd * w[i] - lr * g[i];
    want.push_back(w);
  }
  expect_first_steps(
      [&] { return optim::OptimizerRef(optim::SGD({.learning_rate = lr, .weight_decay = wd})); },
      want);
}

// --------------------------------------------------------------------------------- clipping

TEST(Clipping, ClipvalueLimitsEachElement) {
  optim::SGD opt({.learning_rate = 1.0, .clipvalue = 0.5});
  auto got = run_grads(opt, {0.0, 0.0, 0.0}, {{2.0, -0.25, -3.0}});
  EXPECT_TRUE(steps_close(got, {{-0.5, 0.25, 0.5}}, 0.0));
}

TEST(Clipping, ClipnormRescalesEachGradientToTheNorm) {
  optim::SGD opt({.learning_rate = 1.0, .clipnorm = 1.0});
  Variable a(vec({0.0, 0.0}), "a"), b(vec({0.0, 0.0}), "b");
  // |[3, 4]| = 5 -> scaled to norm 1; |[0.3, 0.4]| = 0.5 stays.
  opt.apply_gradients({vec({3.0, 4.0}), vec({0.3, 0.4})}, {a, b});
  EXPECT_TRUE(all_close(a.value(), {-0.6, -0.8}, 1e-15));
  EXPECT_TRUE(all_close(b.value(), {-0.3, -0.4}, 1e-15));
}

TEST(Clipping, GlobalClipnormRescalesAllGradientsTogether) {
  optim::SGD opt({.learning_rate = 1.0, .global_clipnorm = 2.0});
  Variable a(vec({0.0, 0.0}), "a"), b(vec({0.0}), "b");
  // global norm sqrt(9 + 16 + 144) = 13 -> every gradient times 2/13.
  opt.apply_gradients({vec({3.0, 4.0}), vec({12.0})}, {a, b});
  EXPECT_TRUE(all_close(a.value(), {-6.0 / 13, -8.0 / 13}, 1e-15));
  EXPECT_TRUE(all_close(b.value(), {-24.0 / 13}, 1e-15));
}

TEST(Clipping, GlobalClipnormLeavesSmallGradientsAlone) {
  optim::SGD opt({.learning_rate = 1.0, .global_clipnorm = 20.0});
  Variable a(vec({0.0, 0.0}), "a");
  opt.apply_gradients({vec({3.0, 4.0})}, {a});
  EXPECT_TRUE(all_close(a.value(), {-3.0, -4.0}, 0.0));
}

TEST(Clipping, NormThenValue) {
  optim::SGD opt({.learning_rate = 1.0, .clipnorm = 1.0, .clipvalue = 0.7});
  Variable a(vec({0.0, 0.0}), "a");
  opt.apply_gradients({vec({3.0, 4.0})}, {a});  // -> [0.6, 0.8] -> [0.6, 0.7]
  EXPECT_TRUE(all_close(a.value(), {-0.6, -0.7}, 1e-15));
}

TEST(Clipping, ClippingDoesNotModifyTheCallersGradient) {
  optim::SGD opt({.learning_rate = 1.0, .clipnorm = 1.0, .clipvalue = 0.1});
  Variable a(vec({0.0, 0.0}), "a");
  Tensor g = vec({3.0, 4.0});
  opt.apply_gradients({g}, {a});
  EXPECT_TRUE(all_close(g, {3.0, 4.0}, 0.0));
}

TEST(Clipping, ClipnormAndGlobalClipnormTogetherAreRefused) {
  const auto msg = error_of([] { optim::Adam({.clipnorm = 1.0, .global_clipnorm = 1.0}); });
  EXPECT_TRUE(contains(msg, "Adam")) << msg;
  EXPECT_TRUE(contains(msg, "only one of clipnorm and global_clipnorm")) << msg;
}

TEST(Clipping, NonPositiveClipIsRefused) {
  const auto msg = error_of([] { optim::SGD({.clipvalue = 0.0}); });
  EXPECT_TRUE(contains(msg, "SGD: clipvalue must be > 0, got 0")) << msg;
}

// -------------------------------------------------------------------------------- schedules

TEST(Optimizer, UsesTheScheduleAtTheCurrentIteration) {
  optim::SGD opt({.learning_rate = optim::PiecewiseConstantDecay({0, 1}, {1.0, 0.5, 0.25})});
  EXPECT_TRUE(opt.has_schedule());
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 1.0);
  // Gradient 1 each step: the steps use lr(0)=1, lr(1)=0.5, lr(2)=0.25.
  auto got = run_grads(opt, {0.0}, {{1.0}, {1.0}, {1.0}});
  EXPECT_TRUE(steps_close(got, {{-1.0}, {-1.5}, {-1.75}}, 0.0));
  EXPECT_EQ(opt.iterations(), 3);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.25);
}

TEST(Optimizer, SetScheduleReplacesTheConstantRate) {
  optim::SGD opt({.learning_rate = 0.1});
  opt.set_schedule(optim::ExponentialDecay(
      {.initial_learning_rate = 1.0, .decay_steps = 1, .decay_rate = 0.5}));
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 1.0);
  run_grads(opt, {0.0}, {{1.0}});
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.5);
  opt.set_schedule({});  // back to a constant: the schedule's current value
  EXPECT_FALSE(opt.has_schedule());
  run_grads(opt, {0.0}, {{1.0}});
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.5);
}

TEST(Optimizer, SetLearningRateChangesTheConstantRate) {
  optim::SGD opt({.learning_rate = 0.1});
  opt.set_learning_rate(0.25);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.25);
  auto got = run_grads(opt, {1.0}, {{2.0}});
  EXPECT_TRUE(steps_close(got, {{0.5}}, 0.0));
}

TEST(Optimizer, SetLearningRateOnAScheduleThrows) {
  optim::Adam opt({.learning_rate = optim::CosineDecay(
                       {.initial_learning_rate = 0.1, .decay_steps = 10})});
  const auto msg = error_of([&] { opt.set_learning_rate(0.5); });
  EXPECT_TRUE(contains(msg, "Adam.set_learning_rate")) << msg;
  EXPECT_TRUE(contains(msg, "CosineDecay")) << msg;
}

// ----------------------------------------------------------------------- apply_gradients rules

TEST(Optimizer, UndefinedGradientsSkipTheirVariables) {
  optim::Adam opt({.learning_rate = 0.1});
  Variable a(vec({1.0, 2.0}), "a"), b(vec({3.0}), "b");
  opt.apply_gradients({Tensor(), vec({1.0})}, {a, b});
  EXPECT_TRUE(all_close(a.value(), {1.0, 2.0}, 0.0));
  EXPECT_LT(b.value().item<double>(), 3.0);
  EXPECT_EQ(opt.iterations(), 1);
  auto state = opt.state_dict({a, b});
  EXPECT_FALSE(state.count("0/momentum"));  // no slots were made for the skipped variable
  EXPECT_TRUE(state.count("1/momentum"));
}

TEST(Optimizer, AllGradientsUndefinedThrows) {
  optim::SGD opt;
  Variable a(vec({1.0}), "a");
  const auto msg = error_of([&] { opt.apply_gradients({Tensor()}, {a}); });
  EXPECT_TRUE(contains(msg, "SGD.apply_gradients: no gradient for any of the 1 variables")) << msg;
}

TEST(Optimizer, GradientCountMismatchThrows) {
  optim::SGD opt;
  Variable a(vec({1.0}), "a"), b(vec({1.0}), "b");
  const auto msg = error_of([&] { opt.apply_gradients({vec({1.0})}, {a, b}); });
  EXPECT_TRUE(contains(msg, "SGD.apply_gradients: got 1 gradients for 2 variables")) << msg;
}

TEST(Optimizer, GradientShapeMismatchNamesTheVariable) {
  optim::Adam opt;
  Variable a(vec({1.0}), "a"), k(zeros({2, 3}, DType::f64), "dense/kernel");
  const auto msg = error_of([&] { opt.apply_gradients({vec({1.0}), zeros({3, 2})}, {a, k}); });
  EXPECT_TRUE(contains(msg, "Adam.apply_gradients: gradient of shape [3, 2] does not match "
                            "variable 'dense/kernel' (index 1) of shape [2, 3]"))
      << msg;
}

TEST(Optimizer, IntegerVariableIsRefused) {
  optim::SGD opt;
  Variable n(constant<std::int64_t>(std::vector<std::int64_t>{1, 2}, {2}), "count");
  const auto msg = error_of([&] { opt.apply_gradients({vec({1.0, 1.0})}, {n}); });
  EXPECT_TRUE(contains(msg, "'count'")) << msg;
  EXPECT_TRUE(contains(msg, "floating-point")) << msg;
}

TEST(Optimizer, InvalidHyperparametersAreRefused) {
  EXPECT_TRUE(contains(error_of([] { optim::SGD({.momentum = 1.5}); }),
                       "SGD: momentum must be in [0, 1], got 1.5"));
  EXPECT_TRUE(contains(error_of([] { optim::Adam({.beta_1 = 1.0}); }),
                       "Adam: beta_1 must be in [0, 1), got 1"));
  EXPECT_TRUE(contains(error_of([] { optim::AdamW({.beta_2 = -0.5}); }),
                       "AdamW: beta_2 must be in [0, 1), got -0.5"));
  EXPECT_TRUE(contains(error_of([] { optim::RMSprop({.weight_decay = -1.0}); }),
                       "RMSprop: weight_decay must be a finite number >= 0, got -1"));
}

TEST(Optimizer, UpdatesWriteVariablesInPlace) {
  for (bool fused : {true, false}) {
    FusedKernels k(fused);
    optim::Adam opt({.learning_rate = 0.1});
    Variable w(vec({1.0, 2.0, 3.0}), "w");
    const void* w_mem = w.value().raw_data();
    const auto version = w.value().storage()->version.load();
    opt.apply_gradients({vec({1.0, 1.0, 1.0})}, {w});
    EXPECT_EQ(w.value().raw_data(), w_mem);
    EXPECT_GT(w.value().storage()->version.load(), version);  // tapes can see the write
  }
}

TEST(StateDict, ReturnsCopiesThatLaterStepsLeaveAlone) {
  optim::Adam opt({.learning_rate = 0.1});
  Variable w(vec({1.0}), "w");
  opt.apply_gradients({vec({1.0})}, {w});
  auto saved = opt.state_dict({w});
  opt.apply_gradients({vec({1.0})}, {w});
  EXPECT_DOUBLE_EQ(saved.at("0/momentum").item<double>(), 0.1);  // (1 - beta_1) * g
  EXPECT_DOUBLE_EQ(opt.state_dict({w}).at("0/momentum").item<double>(), 0.19);
}

TEST(Optimizer, AcceptsNonContiguousAndOtherDtypeGradients) {
  optim::SGD opt({.learning_rate = 1.0});
  Variable w(zeros({2, 3}, DType::f32), "w");
  Tensor g = constant<double>(Vec{1, 2, 3, 4, 5, 6}, {3, 2}).transpose();  // [[1,3,5],[2,4,6]]
  opt.apply_gradients({g}, {w});
  EXPECT_TRUE(all_close(w.value(), {-1, -3, -5, -2, -4, -6}, 0.0));
}

TEST(Optimizer, StepUpdatesTheBoundParameters) {
  optim::SGD opt({.learning_rate = 0.5});
  Variable w(vec({2.0}), "w");
  opt.set_parameters({w});
  opt.step({vec({1.0})});
  EXPECT_DOUBLE_EQ(w.value().item<double>(), 1.5);
}

TEST(Optimizer, HalfPrecisionVariablesGoThroughTheOpPath) {
  for (DType t : {DType::bf16, DType::f16}) {
    optim::Adam lo({.learning_rate = 0.01});
    optim::Adam hi({.learning_rate = 0.01});
    auto a = run_problem(lo, 3, t);
    auto b = run_problem(hi, 3, DType::f64);
    EXPECT_TRUE(steps_close(a, b, 1e-2)) << t;
  }
}

TEST(Optimizer, FusedAndOpPathsAgreeOnALargeVariable) {
  // Big enough to be split across threads.
  const Shape shape{300, 400};
  Tensor w0 = soma::testing::rand_tensor(shape, 1, -1, 1, DType::f32);
  Tensor g0 = soma::testing::rand_tensor(shape, 2, -1, 1, DType::f32);
  auto run = [&](bool fused, optim::Optimizer& opt) {
    FusedKernels k(fused);
    Variable w(w0, "w");
    for (int s = 0; s < 3; ++s) opt.apply_gradients({g0 * double(s + 1)}, {w});
    return w.value().clone();
  };
  std::vector<std::function<optim::OptimizerRef()>> makers = {
      [] { return optim::OptimizerRef(optim::SGD({.momentum = 0.9, .nesterov = true})); },
      [] { return optim::OptimizerRef(optim::AdamW({.amsgrad = true})); },
      [] { return optim::OptimizerRef(optim::Nadam()); },
      [] { return optim::OptimizerRef(optim::RMSprop({.momentum = 0.5, .centered = true})); },
      [] { return optim::OptimizerRef(optim::Adagrad()); }};
  for (auto& make : makers) {
    auto a = make(), b = make();
    EXPECT_TRUE(all_close(run(true, *a), run(false, *b), 1e-6, 1e-5)) << a->name();
  }
}

TEST(Optimizer, CopiesDoNotShareSlots) {
  optim::SGD a({.learning_rate = 1.0, .momentum = 0.5});
  Variable w(vec({0.0}), "w");
  a.apply_gradients({vec({1.0})}, {w});
  optim::SGD b = a;
  a.apply_gradients({vec({1.0})}, {w});
  EXPECT_DOUBLE_EQ(a.state_dict({w}).at("0/momentum").item<double>(), -1.5);
  EXPECT_DOUBLE_EQ(b.state_dict({w}).at("0/momentum").item<double>(), -1.0);
  EXPECT_EQ(b.iterations(), 1);
}

TEST(Optimizer, RefBuildsFromAnOptimizerValue) {
  optim::OptimizerRef ref = optim::Adam({.learning_rate = 1e-3});
  EXPECT_EQ(ref->name(), "Adam");
  EXPECT_DOUBLE_EQ(ref->learning_rate(), 1e-3);
}

// ------------------------------------------------------------------------------- state_dict

namespace {

std::vector<Variable> make_vars() {
  return {Variable(soma::testing::rand_tensor({3, 4}, 11, -1, 1, DType::f32), "kernel"),
          Variable(soma::testing::rand_tensor({4}, 12, -1, 1, DType::f32), "bias")};
}

std::vector<Variable> copy_vars(const std::vector<Variable>& vs) {
  std::vector<Variable> out;
  for (const auto& v : vs) out.emplace_back(v.value(), v.name());
  return out;
}

// A deterministic "training step": gradients depend on the variables and the step number.
void train_step(optim::Optimizer& opt, const std::vector<Variable>& vars, int step) {
  GradientTape tape;
  Tensor x = soma::testing::rand_tensor({5, 3}, 100 + std::uint64_t(step), -1, 1, DType::f32);
  Tensor y = matmul(x, vars[0].value()) + vars[1].value();
  Tensor loss = mean(square(tanh(y) - 0.25));
  opt.apply_gradients(tape.gradient(loss, vars), vars);
}

void expect_bit_identical(const std::vector<Variable>& a, const std::vector<Variable>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].value().to_vector<float>(), b[i].value().to_vector<float>()) << a[i].name();
}

class StateDictRoundTrip : public ::testing::TestWithParam<int> {};

optim::OptimizerRef make_optimizer(int which) {
  auto decay = optim::ExponentialDecay(
      {.initial_learning_rate = 0.05, .decay_steps = 2, .decay_rate = 0.7});
  switch (which) {
    case 0: return optim::SGD({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
    case 1: return optim::Adam({.learning_rate = decay, .amsgrad = true, .clipnorm = 0.5});
    case 2: return optim::AdamW({.learning_rate = 0.01, .weight_decay = 0.1});
    case 3: return optim::Nadam({.learning_rate = 0.01});
    case 4: return optim::RMSprop({.learning_rate = 0.01, .momentum = 0.5, .centered = true});
    default: return optim::Adagrad({.learning_rate = 0.1, .global_clipnorm = 0.1});
  }
}

}  // namespace

TEST_P(StateDictRoundTrip, ResumedTrainingIsBitIdentical) {
  auto opt = make_optimizer(GetParam());
  auto vars = make_vars();
  for (int s = 0; s < 3; ++s) train_step(*opt, vars, s);
  auto state = opt->state_dict(vars);
  auto saved = copy_vars(vars);
  for (int s = 3; s < 5; ++s) train_step(*opt, vars, s);  // the uninterrupted run goes on

  auto fresh = make_optimizer(GetParam());
  fresh->load_state_dict(state, saved);
  EXPECT_EQ(fresh->iterations(), 3);
  for (int s = 3; s < 5; ++s) train_step(*fresh, saved, s);
  expect_bit_identical(vars, saved);
  EXPECT_EQ(fresh->iterations(), opt->iterations());
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, StateDictRoundTrip, ::testing::Range(0, 6),
                         [](const auto& info) { return make_optimizer(info.param)->name(); });

TEST(StateDict, NamesSlotsByVariableIndex) {
  optim::Adam opt({.amsgrad = true});
  auto vars = make_vars();
  train_step(opt, vars, 0);
  auto state = opt.state_dict(vars);
  for (const char* key : {"iterations", "learning_rate", "0/momentum", "0/velocity",
                          "0/velocity_hat", "1/momentum", "1/velocity", "1/velocity_hat"})
    EXPECT_TRUE(state.count(key)) << key;
  EXPECT_EQ(state.size(), 8u);
  EXPECT_EQ(state.at("iterations").item<std::int64_t>(), 1);
  EXPECT_EQ(state.at("0/momentum").shape(), (Shape{3, 4}));
}

TEST(StateDict, RestoresAConstantLearningRate) {
  optim::SGD a({.learning_rate = 0.1});
  a.set_learning_rate(0.01);  // as ReduceLROnPlateau would
  optim::SGD b({.learning_rate = 0.1});
  b.load_state_dict(a.state_dict({}), {});
  EXPECT_DOUBLE_EQ(b.learning_rate(), 0.01);
}

TEST(StateDict, SlotShapeMismatchNamesTheVariable) {
  optim::SGD opt({.momentum = 0.9});
  auto vars = make_vars();
  train_step(opt, vars, 0);
  auto state = opt.state_dict(vars);
  std::vector<Variable> swapped = {vars[1], vars[0]};
  const auto msg = error_of([&] { optim::SGD({.momentum = 0.9}).load_state_dict(state, swapped); });
  EXPECT_TRUE(contains(msg, "SGD.load_state_dict: slot '0/momentum' has shape [3, 4] but variable "
                            "'bias' (index 0) has shape [4]"))
      << msg;
}

TEST(StateDict, SlotForAMissingVariableThrows) {
  optim::SGD opt({.momentum = 0.9});
  auto vars = make_vars();
  train_step(opt, vars, 0);
  auto state = opt.state_dict(vars);
  const auto msg = error_of([&] { optim::SGD().load_state_dict(state, {vars[0]}); });
  EXPECT_TRUE(contains(msg, "slot '1/momentum' for variable 1 but only 1 variables were given"))
      << msg;
}

TEST(StateDict, MissingIterationsThrows) {
  const auto msg = error_of([] { optim::Adam().load_state_dict({}, {}); });
  EXPECT_TRUE(contains(msg, "Adam.load_state_dict")) << msg;
  EXPECT_TRUE(contains(msg, "'iterations'")) << msg;
}

TEST(StateDict, ResetStateForgetsSlotsAndSteps) {
  optim::Nadam opt;
  auto vars = make_vars();
  train_step(opt, vars, 0);
  opt.reset_state();
  EXPECT_EQ(opt.iterations(), 0);
  EXPECT_DOUBLE_EQ(opt.u_product(), 1.0);
  EXPECT_EQ(opt.state_dict(vars).size(), 3u);  // iterations, learning_rate, u_product
}

// ------------------------------------------------------------------------------ convergence

class Converges : public ::testing::TestWithParam<int> {};

TEST_P(Converges, MinimisesAQuadratic) {
  // L(w) = sum(a * (w - c)^2), minimum at c, ill-conditioned (a spans 0.5..4).
  optim::OptimizerRef opt;
  switch (GetParam()) {
    case 0: opt = optim::SGD({.learning_rate = 0.1, .momentum = 0.9}); break;
    case 1: opt = optim::Adam({.learning_rate = 0.05}); break;
    case 2: opt = optim::AdamW({.learning_rate = 0.05, .weight_decay = 1e-4}); break;
    case 3: opt = optim::Nadam({.learning_rate = 0.05}); break;
    case 4: opt = optim::RMSprop({.learning_rate = 0.01, .centered = true}); break;
    default: opt = optim::Adagrad({.learning_rate = 0.5}); break;
  }
  Tensor a = constant<float>({0.5f, 1.0f, 2.0f, 4.0f});
  Tensor c = constant<float>({1.0f, -2.0f, 0.5f, 3.0f});
  Variable w(zeros({4}), "w");
  double loss0 = 0.0, loss = 0.0;
  for (int s = 0; s < 500; ++s) {
    GradientTape tape;
    Tensor l = sum(a * square(w.value() - c));
    if (s == 0) loss0 = l.item<double>();
    loss = l.item<double>();
    opt->apply_gradients(tape.gradient(l, std::vector<Variable>{w}), {w});
  }
  EXPECT_LT(loss, 1e-3 * loss0) << opt->name();
  EXPECT_TRUE(all_close(w.value(), c, 0.05)) << opt->name();
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, Converges, ::testing::Range(0, 6));
