// Training that should stop and silent no-ops (issue 19): batch sizes near INT64_MAX, empty data,
// TerminateOnNaN, optimiser hyper-parameters and learning-rate schedules that give NaN or
// negative rates, weights a custom layer creates in its constructor, and models with nothing to
// train.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "error_testing.hpp"
#include "soma/data/dataset.hpp"
#include "soma/model/callbacks.hpp"
#include "soma/model/model.hpp"
#include "soma/model/sequential.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/ops.hpp"
#include "soma/optim/optimizers.hpp"
#include "soma/optim/schedules.hpp"
#include "test_support.hpp"

namespace nn = soma::nn;
namespace optim = soma::optim;
namespace cb = soma::callbacks;
using soma::DType;
using soma::Tensor;
using soma::Variable;
using soma::testing::error_of;
using soma::testing::rand_tensor;

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
const std::vector<std::int64_t> kHugeBatchSizes = {kMax, kMax - 1, std::int64_t(1) << 62};

struct Data {
  Tensor x = rand_tensor({10, 3}, 1).cast(DType::f32);
  Tensor y = rand_tensor({10, 1}, 2).cast(DType::f32);
};

nn::Sequential small_model(double lr = 0.05) {
  soma::set_seed(5);
  nn::Sequential m{nn::Input({3}), nn::Dense(4, nn::tanh), nn::Dense(1)};
  m.compile(optim::SGD({.learning_rate = lr}), nn::MeanSquaredError());
  return m;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::shared_ptr<cb::LambdaCallback> batch_counter(std::int64_t& batches) {
  auto c = std::make_shared<cb::LambdaCallback>();
  c->on_train_batch_end_fn = [&batches](std::int64_t, nn::Logs&) { ++batches; };
  return c;
}

bool all_finite(const std::map<std::string, Tensor>& state) {
  for (auto& [k, t] : state)
    for (double v : t.cast(DType::f64).to_vector<double>())
      if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

// ---- 1. batch sizes near INT64_MAX ------------------------------------------------------------

TEST(HugeBatchSize, FitTrainsOnOneBatchOfTheWholeData) {
  Data d;
  for (std::int64_t bs : kHugeBatchSizes) {
    SCOPED_TRACE(bs);
    auto model = small_model();
    std::int64_t batches = 0;
    std::ostringstream progress;
    auto h = model.fit(d.x, d.y,
                       {.epochs = 2, .batch_size = bs, .callbacks = {batch_counter(batches)},
                        .output = &progress, .is_terminal = false});
    EXPECT_EQ(batches, 2);  // one batch per epoch
    ASSERT_EQ(h["loss"].size(), 2u);
    EXPECT_TRUE(std::isfinite(h["loss"][1]));
    EXPECT_TRUE(has(progress.str(), "1/1")) << progress.str();
  }
}

TEST(HugeBatchSize, FitValidatesInOneBatch) {
  Data d;
  for (std::int64_t bs : kHugeBatchSizes) {
    SCOPED_TRACE(bs);
    auto model = small_model();
    auto h = model.fit(d.x, d.y,
                       {.batch_size = bs, .validation_data = nn::ValidationData(d.x, d.y),
                        .verbose = 0, .validation_batch_size = bs});
    EXPECT_TRUE(std::isfinite(h["val_loss"][0]));
    auto h2 = model.fit(d.x, d.y, {.batch_size = 4, .validation_split = 0.3, .verbose = 0,
                                   .validation_batch_size = bs});
    EXPECT_TRUE(std::isfinite(h2["val_loss"][0]));
  }
}

TEST(HugeBatchSize, EvaluateGivesTheSameLossAsSmallBatches) {
  Data d;
  auto model = small_model();
  const double want = model.evaluate(d.x, d.y, {.batch_size = 10, .verbose = 0}).at("loss");
  for (std::int64_t bs : kHugeBatchSizes) {
    SCOPED_TRACE(bs);
    std::ostringstream progress;
    auto logs = model.evaluate(d.x, d.y,
                               {.batch_size = bs, .output = &progress, .is_terminal = false});
    EXPECT_DOUBLE_EQ(logs.at("loss"), want);
    EXPECT_TRUE(has(progress.str(), "1/1")) << progress.str();
  }
}

TEST(HugeBatchSize, PredictGivesEveryRow) {
  Data d;
  auto model = small_model();
  const std::vector<float> want = model.predict(d.x).to_vector<float>();
  for (std::int64_t bs : kHugeBatchSizes) {
    SCOPED_TRACE(bs);
    std::ostringstream progress;
    Tensor p = model.predict(d.x, {.batch_size = bs, .verbose = 1, .output = &progress,
                                   .is_terminal = false});
    EXPECT_EQ(p.shape(), soma::Shape({10, 1}));
    EXPECT_EQ(p.to_vector<float>(), want);
  }
}

TEST(HugeBatchSize, DatasetBatchIsOneBatchOfEverything) {
  Data d;
  for (std::int64_t bs : kHugeBatchSizes) {
    SCOPED_TRACE(bs);
    auto ds = soma::data::Dataset::from_tensor_slices({d.x, d.y}).batch(bs);
    EXPECT_EQ(ds.cardinality(), 1);
    EXPECT_EQ(soma::data::Dataset::from_tensor_slices({d.x, d.y}).batch(bs, true).cardinality(),
              0);
    std::int64_t n = 0;
    for (const auto& e : ds) {
      EXPECT_EQ(e[0].shape(), soma::Shape({10, 3}));
      ++n;
    }
    EXPECT_EQ(n, 1);
    auto model = small_model();
    auto h = model.fit(ds, {.verbose = 0});
    EXPECT_TRUE(std::isfinite(h["loss"][0]));
  }
}

// ---- 2. empty data ----------------------------------------------------------------------------

TEST(EmptyData, FitRefusesZeroSamples) {
  auto model = small_model();
  const std::string e = error_of([&] { model.fit(soma::zeros({0, 3}), soma::zeros({0, 1})); });
  EXPECT_TRUE(has(e, "fit: no training data: x has 0 samples (shape [0, 3])")) << e;
}

TEST(EmptyData, FitRefusesEmptyValidationData) {
  Data d;
  auto model = small_model();
  const std::string e = error_of([&] {
    model.fit(d.x, d.y,
              {.validation_data = nn::ValidationData(soma::zeros({0, 3}), soma::zeros({0, 1})),
               .verbose = 0});
  });
  EXPECT_TRUE(has(e, "fit: validation_data is empty: x has 0 samples (shape [0, 3])")) << e;
}

TEST(EmptyData, EvaluateRefusesZeroSamples) {
  auto model = small_model();
  const std::string e =
      error_of([&] { model.evaluate(soma::zeros({0, 3}), soma::zeros({0, 1}), {.verbose = 0}); });
  EXPECT_TRUE(has(e, "evaluate: no data: x has 0 samples (shape [0, 3])")) << e;
}

TEST(EmptyData, PredictOnZeroSamplesGivesZeroRows) {
  auto model = small_model();
  Tensor p = model.predict(soma::zeros({0, 3}));
  EXPECT_EQ(p.shape(), soma::Shape({0, 1}));
  EXPECT_EQ(p.dtype(), DType::f32);
}

TEST(EmptyData, TrainOnBatchRefusesZeroSamples) {
  auto model = small_model();
  const std::string e =
      error_of([&] { model.train_on_batch(soma::zeros({0, 3}), soma::zeros({0, 1})); });
  EXPECT_TRUE(has(e, "train_on_batch: no data: x has 0 samples (shape [0, 3])")) << e;
}

TEST(EmptyData, FitRefusesADatasetWithoutBatches) {
  auto model = small_model();
  auto ds = soma::data::Dataset::from_tensor_slices({soma::zeros({0, 3}), soma::zeros({0, 1})})
                .batch(4);
  const std::string e = error_of([&] { model.fit(ds, {.verbose = 0}); });
  EXPECT_TRUE(has(e, "fit: no training data: the dataset gave no batch")) << e;
}

TEST(EmptyData, EvaluateRefusesADatasetWithoutBatches) {
  auto model = small_model();
  auto ds = soma::data::Dataset::from_tensor_slices({soma::zeros({0, 3}), soma::zeros({0, 1})})
                .batch(4);
  const std::string e = error_of([&] { model.evaluate(ds, {.verbose = 0}); });
  EXPECT_TRUE(has(e, "evaluate: no data: the dataset gave no batch")) << e;
}

// ---- 3. TerminateOnNaN ------------------------------------------------------------------------

TEST(TerminateOnNaN, SaysWhichEpochAndBatchAndTheLoss) {
  Data d;
  Tensor x = d.x.clone();
  x.data<float>()[4 * 3] = std::numeric_limits<float>::quiet_NaN();  // sample 4: batch 3 of 5
  auto model = small_model();
  testing::internal::CaptureStdout();
  model.fit(x, d.y,
            {.epochs = 3, .batch_size = 2, .shuffle = false, .callbacks = {cb::TerminateOnNaN()},
             .verbose = 0});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(has(out, "Epoch 1, batch 3: invalid loss (nan), terminating training")) << out;
}

TEST(TerminateOnNaN, CanRestoreTheWeightsOfTheLastEpochWithAFiniteLoss) {
  Data d;
  Tensor x = d.x.clone();
  auto model = small_model();
  std::map<std::string, Tensor> after_epoch_2;
  std::map<std::string, Tensor> optimizer_after_epoch_2;
  auto spoil = std::make_shared<cb::LambdaCallback>();
  spoil->on_epoch_end_fn = [&](int epoch, nn::Logs&) {
    if (epoch != 1) return;
    after_epoch_2 = model.get_weights();
    optimizer_after_epoch_2 = model.optimizer().state_dict(model.trainable_parameters());
    x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();  // epoch 3 sees a NaN
  };
  auto stop = std::make_shared<cb::TerminateOnNaN>(
      cb::TerminateOnNaNOptions{.restore_last_good_weights = true, .verbose = 0});
  auto h = model.fit(x, d.y,
                     {.epochs = 5, .batch_size = 4, .callbacks = {spoil, stop}, .verbose = 0});
  EXPECT_TRUE(stop->terminated());
  EXPECT_EQ(stop->last_good_epoch(), 1);
  EXPECT_EQ(h["loss"].size(), 3u);
  for (auto& [k, t] : model.get_weights())
    EXPECT_EQ(t.to_vector<float>(), after_epoch_2.at(k).to_vector<float>()) << k;
  auto opt = model.optimizer().state_dict(model.trainable_parameters());
  EXPECT_TRUE(all_finite(opt));
  EXPECT_EQ(opt.at("iterations").item<std::int64_t>(),
            optimizer_after_epoch_2.at("iterations").item<std::int64_t>());
}

TEST(TerminateOnNaN, WithoutAnyGoodEpochRestoresNothingAndSaysSo) {
  Data d;
  Tensor x = d.x.clone();
  x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  auto model = small_model();
  auto stop = std::make_shared<cb::TerminateOnNaN>(
      cb::TerminateOnNaNOptions{.restore_last_good_weights = true, .verbose = 0});
  model.fit(x, d.y, {.epochs = 3, .shuffle = false, .callbacks = {stop}, .verbose = 0});
  EXPECT_TRUE(stop->terminated());
  EXPECT_EQ(stop->last_good_epoch(), -1);
}

// ---- 4. optimiser hyper-parameters and schedules ----------------------------------------------

namespace {

// Each optimiser built with its learning rate set to `lr`.
std::vector<std::pair<std::string, std::function<void(double)>>> with_learning_rate() {
  return {
      {"SGD", [](double v) { optim::SGD({.learning_rate = v}); }},
      {"Adam", [](double v) { optim::Adam({.learning_rate = v}); }},
      {"AdamW", [](double v) { optim::AdamW({.learning_rate = v}); }},
      {"Nadam", [](double v) { optim::Nadam({.learning_rate = v}); }},
      {"RMSprop", [](double v) { optim::RMSprop({.learning_rate = v}); }},
      {"Adagrad", [](double v) { optim::Adagrad({.learning_rate = v}); }},
  };
}

struct BadField {
  std::string optimizer, field;
  std::function<void(double)> make;
  std::vector<double> bad;
};

std::vector<BadField> bad_fields() {
  const std::vector<double> not_finite_or_negative = {kNaN, -1.0, kInf, -kInf};
  const std::vector<double> not_in_unit = {kNaN, -0.1, 1.0, 1.5, kInf};
  return {
      {"SGD", "momentum", [](double v) { optim::SGD({.momentum = v}); }, {kNaN, -0.1, 1.5, kInf}},
      {"SGD", "weight_decay", [](double v) { optim::SGD({.weight_decay = v}); },
       not_finite_or_negative},
      {"SGD", "clipnorm", [](double v) { optim::SGD({.clipnorm = v}); }, {kNaN, -1.0, 0.0}},
      {"SGD", "clipvalue", [](double v) { optim::SGD({.clipvalue = v}); }, {kNaN, -1.0, 0.0}},
      {"SGD", "global_clipnorm", [](double v) { optim::SGD({.global_clipnorm = v}); },
       {kNaN, -1.0, 0.0}},
      {"Adam", "beta_1", [](double v) { optim::Adam({.beta_1 = v}); }, not_in_unit},
      {"Adam", "beta_2", [](double v) { optim::Adam({.beta_2 = v}); }, not_in_unit},
      {"Adam", "epsilon", [](double v) { optim::Adam({.epsilon = v}); }, not_finite_or_negative},
      {"Adam", "weight_decay", [](double v) { optim::Adam({.weight_decay = v}); },
       not_finite_or_negative},
      {"AdamW", "beta_1", [](double v) { optim::AdamW({.beta_1 = v}); }, not_in_unit},
      {"AdamW", "beta_2", [](double v) { optim::AdamW({.beta_2 = v}); }, not_in_unit},
      {"AdamW", "epsilon", [](double v) { optim::AdamW({.epsilon = v}); }, not_finite_or_negative},
      {"AdamW", "weight_decay", [](double v) { optim::AdamW({.weight_decay = v}); },
       not_finite_or_negative},
      {"Nadam", "beta_1", [](double v) { optim::Nadam({.beta_1 = v}); }, not_in_unit},
      {"Nadam", "beta_2", [](double v) { optim::Nadam({.beta_2 = v}); }, not_in_unit},
      {"Nadam", "epsilon", [](double v) { optim::Nadam({.epsilon = v}); }, not_finite_or_negative},
      {"Nadam", "weight_decay", [](double v) { optim::Nadam({.weight_decay = v}); },
       not_finite_or_negative},
      {"RMSprop", "rho", [](double v) { optim::RMSprop({.rho = v}); }, {kNaN, -0.1, 1.5, kInf}},
      {"RMSprop", "momentum", [](double v) { optim::RMSprop({.momentum = v}); },
       not_finite_or_negative},
      {"RMSprop", "epsilon", [](double v) { optim::RMSprop({.epsilon = v}); },
       not_finite_or_negative},
      {"RMSprop", "weight_decay", [](double v) { optim::RMSprop({.weight_decay = v}); },
       not_finite_or_negative},
      {"Adagrad", "initial_accumulator_value",
       [](double v) { optim::Adagrad({.initial_accumulator_value = v}); }, not_finite_or_negative},
      {"Adagrad", "epsilon", [](double v) { optim::Adagrad({.epsilon = v}); },
       not_finite_or_negative},
      {"Adagrad", "weight_decay", [](double v) { optim::Adagrad({.weight_decay = v}); },
       not_finite_or_negative},
  };
}

// An error names the optimiser and the field.
std::string name_of(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

TEST(OptimizerRefusals, EveryOptimizerRefusesANaNNegativeOrInfiniteLearningRate) {
  for (auto& [name, make] : with_learning_rate())
    for (double v : {kNaN, -0.001, kInf, -kInf}) {
      SCOPED_TRACE(name + " " + name_of(v));
      const std::string e = error_of([&, make = make] { make(v); });
      EXPECT_TRUE(has(e, name + ": learning_rate must be a finite number >= 0, got " + name_of(v)))
          << e;
    }
}

TEST(OptimizerRefusals, AZeroLearningRateIsAllowed) {
  for (auto& [name, make] : with_learning_rate()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(error_of([&, make = make] { make(0.0); }), soma::testing::kNoError);
  }
}

TEST(OptimizerRefusals, EveryOptimizerRefusesBadHyperParameters) {
  for (auto& f : bad_fields())
    for (double v : f.bad) {
      SCOPED_TRACE(f.optimizer + "." + f.field + " = " + name_of(v));
      const std::string e = error_of([&] { f.make(v); });
      EXPECT_TRUE(has(e, f.optimizer + ": " + f.field + " must be")) << e;
      EXPECT_TRUE(has(e, "got " + name_of(v))) << e;
    }
}

TEST(OptimizerRefusals, SetLearningRateRefusesNaNAndNegativeRates) {
  optim::Adam adam;
  for (double v : {kNaN, -1.0, kInf}) {
    const std::string e = error_of([&] { adam.set_learning_rate(v); });
    EXPECT_TRUE(has(e, "Adam.set_learning_rate: learning_rate must be a finite number >= 0, got " +
                           name_of(v)))
        << e;
  }
  EXPECT_DOUBLE_EQ(adam.learning_rate(), 0.001);
}

TEST(OptimizerRefusals, LoadStateDictRefusesANaNLearningRateAndChangesNothing) {
  Variable w(soma::ones({2}), "w");
  optim::SGD sgd({.learning_rate = 0.1});
  sgd.apply_gradients({soma::ones({2})}, {w});
  auto state = sgd.state_dict({w});
  state["learning_rate"] = soma::scalar(kNaN, DType::f64);
  state["iterations"] = soma::scalar(7.0, DType::i64);
  const std::string e = error_of([&] { sgd.load_state_dict(state, {w}); });
  EXPECT_TRUE(has(e, "SGD.load_state_dict: the state's learning_rate is nan")) << e;
  EXPECT_EQ(sgd.iterations(), 1);
  EXPECT_DOUBLE_EQ(sgd.learning_rate(), 0.1);
}

TEST(OptimizerRefusals, ALearningRateSchedulerCallbackGivingANegativeRateStopsFit) {
  Data d;
  auto model = small_model();
  const std::string e = error_of([&] {
    model.fit(d.x, d.y,
              {.epochs = 3,
               .callbacks = {cb::LearningRateScheduler(
                   [](int epoch, double lr) { return epoch == 1 ? -0.1 : lr; })},
               .verbose = 0});
  });
  EXPECT_TRUE(has(e, "SGD.set_learning_rate: learning_rate must be a finite number >= 0, got -0.1"))
      << e;
}

TEST(ScheduleRefusals, EverySchedulesRefusesBadFieldsAtConstruction) {
  struct Case {
    std::string expect;
    std::function<void()> make;
  };
  const std::vector<Case> cases = {
      {"StepDecay: initial_learning_rate must be a finite number >= 0, got -1",
       [] { optim::StepDecay({.initial_learning_rate = -1.0, .step_size = 1}); }},
      {"StepDecay: initial_learning_rate must be a finite number >= 0, got inf",
       [] { optim::StepDecay({.initial_learning_rate = kInf, .step_size = 1}); }},
      {"StepDecay: gamma must be a finite number >= 0, got nan",
       [] { optim::StepDecay({.initial_learning_rate = 0.1, .step_size = 1, .gamma = kNaN}); }},
      {"StepDecay: gamma must be a finite number >= 0, got -0.5",
       [] { optim::StepDecay({.initial_learning_rate = 0.1, .step_size = 1, .gamma = -0.5}); }},
      {"ExponentialDecay: initial_learning_rate must be a finite number >= 0, got -0.1",
       [] {
         optim::ExponentialDecay(
             {.initial_learning_rate = -0.1, .decay_steps = 10, .decay_rate = 0.9});
       }},
      {"ExponentialDecay: decay_rate must be a finite number >= 0, got -0.9",
       [] {
         optim::ExponentialDecay(
             {.initial_learning_rate = 0.1, .decay_steps = 10, .decay_rate = -0.9});
       }},
      {"ExponentialDecay: decay_rate must be a finite number >= 0, got inf",
       [] {
         optim::ExponentialDecay(
             {.initial_learning_rate = 0.1, .decay_steps = 10, .decay_rate = kInf});
       }},
      {"CosineDecay: initial_learning_rate must be a finite number >= 0, got -1",
       [] { optim::CosineDecay({.initial_learning_rate = -1.0, .decay_steps = 10}); }},
      {"CosineDecay: alpha must be a finite number >= 0, got nan",
       [] { optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 10, .alpha = kNaN}); }},
      {"CosineDecay: alpha must be a finite number >= 0, got -1",
       [] { optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 10, .alpha = -1}); }},
      {"CosineDecay: warmup_target must be a finite number >= 0, got nan",
       [] {
         optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 10,
                             .warmup_target = kNaN, .warmup_steps = 5});
       }},
      {"CosineDecay: warmup_target must be a finite number >= 0, got -0.1",
       [] {
         optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 10,
                             .warmup_target = -0.1, .warmup_steps = 5});
       }},
      {"PiecewiseConstantDecay: values[1] must be a finite number >= 0, got nan",
       [] { optim::PiecewiseConstantDecay({10}, {0.1, kNaN}); }},
      {"PiecewiseConstantDecay: values[0] must be a finite number >= 0, got -0.1",
       [] { optim::PiecewiseConstantDecay({10}, {-0.1, 0.1}); }},
      {"ReduceLROnPlateau: factor must be in [0, 1), got -0.5",
       [] { optim::ReduceLROnPlateau({.factor = -0.5}); }},
      {"ReduceLROnPlateau: factor must be in [0, 1), got nan",
       [] { optim::ReduceLROnPlateau({.factor = kNaN}); }},
      {"ReduceLROnPlateau: min_lr must be a finite number >= 0, got -1",
       [] { optim::ReduceLROnPlateau({.min_lr = -1.0}); }},
      {"ReduceLROnPlateau: min_delta must be a finite number >= 0, got nan",
       [] { optim::ReduceLROnPlateau({.min_delta = kNaN}); }},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.expect);
    const std::string e = error_of(c.make);
    EXPECT_TRUE(has(e, c.expect)) << e;
  }
}

namespace {
// A user's schedule that goes wrong after two steps.
struct BrokenSchedule : optim::LearningRateSchedule {
  double bad;
  explicit BrokenSchedule(double b) : bad(b) {}
  double operator()(std::int64_t step) const override { return step < 2 ? 0.01 : bad; }
  std::string name() const override { return "BrokenSchedule"; }
};
}  // namespace

TEST(ScheduleRefusals, AScheduleGivingANaNNegativeOrInfiniteRateStopsTheStep) {
  for (double bad : {kNaN, -0.01, kInf}) {
    SCOPED_TRACE(bad);
    Variable w(soma::ones({3}), "w");
    optim::SGD sgd({.learning_rate = BrokenSchedule(bad)});
    sgd.apply_gradients({soma::ones({3})}, {w});
    sgd.apply_gradients({soma::ones({3})}, {w});
    const std::vector<float> before = w.value().to_vector<float>();
    const std::string e = error_of([&] { sgd.apply_gradients({soma::ones({3})}, {w}); });
    EXPECT_TRUE(has(e, "SGD.apply_gradients: the learning-rate schedule BrokenSchedule gave " +
                           name_of(bad) + " at step 2 (expected a finite number >= 0)"))
        << e;
    EXPECT_EQ(w.value().to_vector<float>(), before);  // the bad step changed nothing
    EXPECT_EQ(sgd.iterations(), 2);
  }
}

TEST(ScheduleRefusals, AnExponentialDecayThatOverflowsStopsTheStep) {
  Variable w(soma::ones({2}), "w");
  optim::Adam adam({.learning_rate = optim::ExponentialDecay(
                        {.initial_learning_rate = 1.0, .decay_steps = 1, .decay_rate = 1e200})});
  adam.apply_gradients({soma::ones({2})}, {w});
  adam.apply_gradients({soma::ones({2})}, {w});
  const std::string e = error_of([&] { adam.apply_gradients({soma::ones({2})}, {w}); });
  EXPECT_TRUE(has(e, "Adam.apply_gradients: the learning-rate schedule ExponentialDecay gave inf "
                     "at step 2"))
      << e;
}

// ---- 5. weights created in a custom layer's constructor ---------------------------------------

namespace {

// The libtorch / Keras idiom: the layer knows its weights' shapes up front and creates them in
// its constructor; forward() uses the members.
struct MyAffine : nn::Module {
  Variable kernel, bias;
  explicit MyAffine(std::int64_t in) {
    kernel = add_weight("kernel", soma::fill({in, 1}, 0.1));
    bias = add_weight("bias", soma::zeros({1}));
  }
  std::string type_name() const override { return "MyAffine"; }

 protected:
  Tensor forward(const Tensor& x) override { return soma::matmul(x, kernel.value()) + bias.value(); }
};

}  // namespace

TEST(ConstructorWeights, ACopyOfTheLayerKeepsThem) {
  MyAffine layer(3);
  MyAffine copy = layer;
  ASSERT_EQ(copy.parameters().size(), 2u);
  // Shared with the members the copy's forward() reads, so training reaches them.
  EXPECT_EQ(copy.parameters()[0].value().storage(), copy.kernel.value().storage());
  EXPECT_EQ(copy.count_params(), 4);
}

TEST(ConstructorWeights, SequentialCountsThem) {
  nn::Sequential model{nn::Input({3}), MyAffine(3), nn::Dense(2)};
  EXPECT_EQ(model.count_params(), 4 + 4);
  EXPECT_EQ(model.trainable_parameters().size(), 4u);
  std::ostringstream os;
  model.summary(os);
  EXPECT_TRUE(has(os.str(), "Total params: 8")) << os.str();
}

TEST(ConstructorWeights, FitTrainsThem) {
  Data d;
  Tensor y = soma::matmul(d.x, soma::constant<float>({0.5f, -1.0f, 2.0f}).reshape({3, 1})) + 0.3;
  nn::Sequential model{MyAffine(3)};
  model.compile(optim::SGD({.learning_rate = 0.1}), nn::MeanSquaredError());
  auto h = model.fit(d.x, y, {.epochs = 30, .batch_size = 5, .verbose = 0});
  EXPECT_LT(h["loss"].back(), 0.1 * h["loss"].front());
}

// ---- 5. models with nothing to train ----------------------------------------------------------

TEST(NothingToTrain, FitRefusesAModelWithoutWeights) {
  Data d;
  nn::Sequential empty{nn::Input({1}), nn::Flatten()};
  empty.set_name("no_weights");
  empty.compile(optim::SGD(), nn::MeanSquaredError());
  const std::string e = error_of([&] { empty.fit(d.y, d.y, {.verbose = 0}); });
  EXPECT_TRUE(has(e, "fit: model 'no_weights' has no trainable variables")) << e;
  EXPECT_TRUE(has(e, "add_weight")) << e;
}

TEST(NothingToTrain, FitRefusesAModelWhoseWeightsAreAllFrozen) {
  Data d;
  auto model = small_model();
  model.set_name("frozen");
  model.set_trainable(false);
  const std::string e = error_of([&] { model.fit(d.x, d.y, {.verbose = 0}); });
  EXPECT_TRUE(has(e, "fit: model 'frozen' has no trainable variables")) << e;
  EXPECT_TRUE(has(e, "set_trainable(true)")) << e;
}

TEST(NothingToTrain, TrainOnBatchRefusesAFrozenModel) {
  Data d;
  auto model = small_model();
  model.set_trainable(false);
  const std::string e = error_of([&] { model.train_on_batch(d.x, d.y); });
  EXPECT_TRUE(has(e, "train_on_batch: model '")) << e;
  EXPECT_TRUE(has(e, "has no trainable variables")) << e;
}

TEST(NothingToTrain, APartlyFrozenModelStillTrains) {
  Data d;
  auto model = small_model();
  model.layer(0)->set_trainable(false);  // transfer learning: the base frozen, the head trained
  const auto frozen = model.layer(0)->state_dict();
  auto h = model.fit(d.x, d.y, {.epochs = 5, .verbose = 0});
  EXPECT_LT(h["loss"].back(), h["loss"].front());
  for (auto& [k, t] : model.layer(0)->state_dict())
    EXPECT_EQ(t.to_vector<float>(), frozen.at(k).to_vector<float>());
}
