// Learning-rate schedules (values at chosen steps, written out from Keras 3's formulas) and the
// reduce-on-plateau rule.
#include <cmath>
#include <functional>
#include <numbers>

#include "soma/optim/schedules.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using namespace soma::optim;

namespace {
using soma::testing::error_of;
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

// -------------------------------------------------------------------------------- StepDecay

TEST(StepDecay, MultipliesByGammaEveryStepSizeSteps) {
  StepDecay s({.initial_learning_rate = 0.1, .step_size = 10, .gamma = 0.5});
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(9), 0.1);
  EXPECT_DOUBLE_EQ(s(10), 0.05);
  EXPECT_DOUBLE_EQ(s(25), 0.025);
}

TEST(StepDecay, RequiresAPositiveStepSize) {
  const auto msg = error_of([] { StepDecay({.initial_learning_rate = 0.1}); });
  EXPECT_TRUE(contains(msg, "StepDecay: step_size must be > 0, got 0")) << msg;
}

// ----------------------------------------------------------------------- PiecewiseConstant

TEST(PiecewiseConstantDecay, BoundaryStepsKeepTheEarlierValue) {
  PiecewiseConstantDecay s({100, 200}, {1.0, 0.5, 0.1});
  EXPECT_DOUBLE_EQ(s(0), 1.0);
  EXPECT_DOUBLE_EQ(s(100), 1.0);
  EXPECT_DOUBLE_EQ(s(101), 0.5);
  EXPECT_DOUBLE_EQ(s(200), 0.5);
  EXPECT_DOUBLE_EQ(s(201), 0.1);
  EXPECT_DOUBLE_EQ(s(100000), 0.1);
}

TEST(PiecewiseConstantDecay, NeedsOneMoreValueThanBoundaries) {
  const auto msg = error_of([] { PiecewiseConstantDecay({10, 20}, {1.0, 0.5}); });
  EXPECT_TRUE(contains(msg, "PiecewiseConstantDecay: values must have one more element than "
                            "boundaries; got 2 boundaries and 2 values"))
      << msg;
}

TEST(PiecewiseConstantDecay, BoundariesMustIncrease) {
  const auto msg = error_of([] { PiecewiseConstant({20, 10}, {1.0, 0.5, 0.1}); });
  EXPECT_TRUE(contains(msg, "boundaries must increase strictly")) << msg;
}

// ------------------------------------------------------------------------ ExponentialDecay

TEST(ExponentialDecay, DecaysContinuously) {
  ExponentialDecay s({.initial_learning_rate = 0.1, .decay_steps = 1000, .decay_rate = 0.96});
  for (std::int64_t step : {0, 1, 500, 1000, 2500})
    EXPECT_DOUBLE_EQ(s(step), 0.1 * std::pow(0.96, double(step) / 1000.0)) << step;
}

TEST(ExponentialDecay, StaircaseDecaysInWholeIntervals) {
  ExponentialDecay s(
      {.initial_learning_rate = 0.1, .decay_steps = 1000, .decay_rate = 0.5, .staircase = true});
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(999), 0.1);
  EXPECT_DOUBLE_EQ(s(1000), 0.05);
  EXPECT_DOUBLE_EQ(s(2999), 0.025);
}

TEST(ExponentialDecay, RequiresTheDecayRate) {
  const auto msg =
      error_of([] { ExponentialDecay({.initial_learning_rate = 0.1, .decay_steps = 10}); });
  EXPECT_TRUE(contains(msg, "ExponentialDecay: decay_rate is required")) << msg;
}

// ------------------------------------------------------------------------------ CosineDecay

namespace {
double cosine(double initial, double s, double steps, double alpha) {
  return initial * ((1 - alpha) * 0.5 * (1 + std::cos(std::numbers::pi * s / steps)) + alpha);
}
}  // namespace

TEST(CosineDecay, FollowsHalfACosineThenStays) {
  CosineDecay s({.initial_learning_rate = 0.1, .decay_steps = 100});
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(25), cosine(0.1, 25, 100, 0));
  EXPECT_NEAR(s(50), 0.05, 1e-15);
  EXPECT_NEAR(s(100), 0.0, 1e-15);
  EXPECT_NEAR(s(150), 0.0, 1e-15);  // clamped at decay_steps
}

TEST(CosineDecay, AlphaIsTheFloor) {
  CosineDecay s({.initial_learning_rate = 0.1, .decay_steps = 100, .alpha = 0.2});
  EXPECT_DOUBLE_EQ(s(30), cosine(0.1, 30, 100, 0.2));
  EXPECT_NEAR(s(100), 0.02, 1e-15);
  EXPECT_NEAR(s(1000), 0.02, 1e-15);
}

TEST(CosineDecay, WarmsUpLinearlyToTheTargetThenDecaysFromIt) {
  CosineDecay s({.initial_learning_rate = 0.0,
                 .decay_steps = 100,
                 .alpha = 0.1,
                 .warmup_target = 1.0,
                 .warmup_steps = 10});
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_DOUBLE_EQ(s(4), 0.4);
  EXPECT_DOUBLE_EQ(s(10), 1.0);
  EXPECT_DOUBLE_EQ(s(35), cosine(1.0, 25, 100, 0.1));
  EXPECT_NEAR(s(110), 0.1, 1e-15);
  EXPECT_NEAR(s(500), 0.1, 1e-15);
}

TEST(CosineDecay, WarmupStepsWithoutATargetAreRefused) {
  const auto msg = error_of(
      [] { CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 10, .warmup_steps = 5}); });
  EXPECT_TRUE(contains(msg, "CosineDecay: warmup_steps is 5 but warmup_target is not set")) << msg;
}

TEST(CosineDecay, RequiresDecaySteps) {
  const auto msg = error_of([] { CosineDecay({.initial_learning_rate = 0.1}); });
  EXPECT_TRUE(contains(msg, "CosineDecay: decay_steps must be > 0, got 0")) << msg;
}

TEST(Schedules, NegativeStepIsRefused) {
  ExponentialDecay s({.initial_learning_rate = 0.1, .decay_steps = 10, .decay_rate = 0.5});
  EXPECT_TRUE(contains(error_of([&] { s(-1); }), "step must be >= 0, got -1"));
}

// ------------------------------------------------------------------------ ReduceLROnPlateau

TEST(ReduceLROnPlateau, ReducesAfterPatienceEpochsWithoutImprovement) {
  ReduceLROnPlateau r({.factor = 0.5, .patience = 2});
  double lr = 1.0;
  lr = r.step(1.0, lr);  // best 1.0
  EXPECT_DOUBLE_EQ(lr, 1.0);
  lr = r.step(1.0, lr);  // wait 1
  EXPECT_DOUBLE_EQ(lr, 1.0);
  EXPECT_FALSE(r.reduced());
  lr = r.step(1.5, lr);  // wait 2 -> reduce
  EXPECT_DOUBLE_EQ(lr, 0.5);
  EXPECT_TRUE(r.reduced());
  EXPECT_EQ(r.wait(), 0);
  lr = r.step(0.5, lr);  // improvement
  EXPECT_DOUBLE_EQ(lr, 0.5);
  EXPECT_DOUBLE_EQ(r.best(), 0.5);
  EXPECT_FALSE(r.reduced());
}

TEST(ReduceLROnPlateau, ImprovementsSmallerThanMinDeltaDoNotCount) {
  ReduceLROnPlateau r({.factor = 0.1, .patience = 1, .min_delta = 0.01});
  double lr = r.step(1.0, 1.0);
  lr = r.step(0.995, lr);  // better by less than min_delta
  EXPECT_DOUBLE_EQ(lr, 0.1);
  EXPECT_DOUBLE_EQ(r.best(), 1.0);
}

TEST(ReduceLROnPlateau, CooldownPausesWaiting) {
  ReduceLROnPlateau r({.factor = 0.5, .patience = 1, .cooldown = 2});
  double lr = r.step(1.0, 1.0);
  lr = r.step(2.0, lr);  // reduce to 0.5, cooldown 2
  EXPECT_DOUBLE_EQ(lr, 0.5);
  EXPECT_EQ(r.cooldown_counter(), 2);
  lr = r.step(2.0, lr);  // cooldown 2 -> 1: no waiting
  EXPECT_DOUBLE_EQ(lr, 0.5);
  EXPECT_EQ(r.wait(), 0);
  EXPECT_TRUE(r.in_cooldown());
  // Keras counts the cooldown down before judging the epoch: 1 -> 0, then wait 1 -> reduce.
  lr = r.step(2.0, lr);
  EXPECT_TRUE(r.reduced());
  EXPECT_DOUBLE_EQ(lr, 0.25);
}

TEST(ReduceLROnPlateau, NeverGoesBelowMinLr) {
  ReduceLROnPlateau r({.factor = 0.1, .patience = 1, .min_lr = 0.05});
  double lr = r.step(1.0, 0.1);
  lr = r.step(1.0, lr);
  EXPECT_DOUBLE_EQ(lr, 0.05);
  lr = r.step(1.0, lr);
  EXPECT_DOUBLE_EQ(lr, 0.05);
  EXPECT_FALSE(r.reduced());
}

TEST(ReduceLROnPlateau, AutoModeMaximisesAccuracies) {
  ReduceLROnPlateau r({.monitor = "val_accuracy", .factor = 0.5, .patience = 1});
  EXPECT_TRUE(r.maximising());
  double lr = r.step(0.8, 1.0);
  lr = r.step(0.9, lr);  // higher is better
  EXPECT_DOUBLE_EQ(lr, 1.0);
  lr = r.step(0.85, lr);
  EXPECT_DOUBLE_EQ(lr, 0.5);
  EXPECT_FALSE(ReduceLROnPlateau({.monitor = "val_loss"}).maximising());
  EXPECT_TRUE(ReduceLROnPlateau({.monitor = "val_loss", .mode = "max"}).maximising());
}

TEST(ReduceLROnPlateau, NanNeverImproves) {
  ReduceLROnPlateau r({.factor = 0.5, .patience = 1});
  double lr = r.step(1.0, 1.0);
  lr = r.step(std::nan(""), lr);
  EXPECT_DOUBLE_EQ(lr, 0.5);
}

TEST(ReduceLROnPlateau, ResetForgetsTheBest) {
  ReduceLROnPlateau r({.patience = 1});
  r.step(0.1, 1.0);
  r.reset();
  EXPECT_EQ(r.best(), INFINITY);
  EXPECT_EQ(r.wait(), 0);
}

TEST(ReduceLROnPlateau, BadOptionsAreRefused) {
  EXPECT_TRUE(contains(error_of([] { ReduceLROnPlateau({.factor = 1.0}); }),
                       "ReduceLROnPlateau: factor must be in [0, 1), got 1"));
  EXPECT_TRUE(contains(error_of([] { ReduceLROnPlateau({.mode = "lowest"}); }),
                       "mode must be \"auto\", \"min\" or \"max\", got \"lowest\""));
}
