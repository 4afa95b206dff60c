// Model, Sequential and the functional API: compile / fit / evaluate / predict / summary and
// the progress output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "soma/metrics.hpp"
#include "soma/model/merge.hpp"
#include "soma/model/progress.hpp"
#include "soma/model/model.hpp"
#include "soma/model/sequential.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/optim/optimizers.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace nn = soma::nn;
namespace optim = soma::optim;
namespace metrics = soma::metrics;
using soma::Shape;
using soma::Tensor;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

// Integer class labels in [0, classes) as an i64 tensor of shape [n].
Tensor labels(std::int64_t n, std::int64_t classes, std::uint64_t seed) {
  Tensor u = rand_tensor({n}, seed, 0.0, double(classes));
  std::vector<std::int64_t> v;
  for (double d : u.to_vector<double>()) v.push_back(std::min<std::int64_t>(classes - 1, std::int64_t(d)));
  return soma::constant(v, {n});
}

Tensor f32(const Tensor& t) { return t.cast(soma::DType::f32); }

using soma::testing::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A small classifier: 4 features -> 3 classes.
nn::Sequential small_classifier() {
  return nn::Sequential{nn::Dense(8, nn::tanh), nn::Dense(3)};
}

void compile_classifier(nn::Model& m, double lr = 0.05) {
  m.compile(optim::Adam({.learning_rate = lr}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {metrics::Accuracy()});
}

}  // namespace

// ---- summary ------------------------------------------------------------------------------

TEST(Summary, StyleModelWithInputShowsShapesAndExactCounts) {
  nn::Sequential model{nn::Input({28, 28}), nn::Flatten(), nn::Dense(128, nn::relu),
                       nn::Dense(10)};
  std::ostringstream os;
  model.summary(os);
  const std::string s = os.str();
  EXPECT_TRUE(contains(s, "Model: \"" + model.name() + "\"")) << s;
  EXPECT_TRUE(contains(s, "Layer (type)")) << s;
  EXPECT_TRUE(contains(s, "(None, 784)")) << s;
  EXPECT_TRUE(contains(s, "(None, 128)")) << s;
  EXPECT_TRUE(contains(s, "(None, 10)")) << s;
  EXPECT_TRUE(contains(s, "100,480")) << s;
  EXPECT_TRUE(contains(s, "1,290")) << s;
  EXPECT_TRUE(contains(s, "Total params: 101,770 (397.54 KB)")) << s;
  EXPECT_TRUE(contains(s, "Trainable params: 101,770 (397.54 KB)")) << s;
  EXPECT_TRUE(contains(s, "Non-trainable params: 0 (0.00 B)")) << s;
}

TEST(Summary, RowsNameEachLayerWithItsType) {
  nn::Sequential model{nn::Input({4}), nn::Dense(2)};
  std::ostringstream os;
  model.summary(os);
  EXPECT_TRUE(contains(os.str(), model.layer(0)->name() + " (Dense)")) << os.str();
}

TEST(Summary, UnbuiltModelThrowsNamingTheFix) {
  nn::Sequential model{nn::Flatten(), nn::Dense(10)};
  std::ostringstream os;
  std::string msg = error_of([&] { model.summary(os); });
  EXPECT_TRUE(contains(msg, "not built")) << msg;
  EXPECT_TRUE(contains(msg, "nn::Input")) << msg;
}

TEST(Summary, WorksAfterTheFirstCall) {
  nn::Sequential model{nn::Flatten(), nn::Dense(128, nn::relu), nn::Dense(10)};
  model(soma::zeros({2, 28, 28}));
  std::ostringstream os;
  model.summary(os);
  EXPECT_TRUE(contains(os.str(), "(None, 128)")) << os.str();
  EXPECT_TRUE(contains(os.str(), "Total params: 101,770")) << os.str();
}

TEST(Summary, BuildForGivesShapesWithoutData) {
  nn::Sequential model{nn::Flatten(), nn::Dense(3)};
  model.build_for({-1, 2, 5});
  std::ostringstream os;
  model.summary(os);
  EXPECT_TRUE(contains(os.str(), "(None, 10)")) << os.str();
  EXPECT_TRUE(contains(os.str(), "Total params: 33 ")) << os.str();
}

TEST(Summary, FunctionalModelListsInputsAndConnections) {
  auto in = nn::Input({4}, {.name = "features"});
  auto h = nn::call(nn::Dense(5), in);
  nn::Model model(in, h);
  std::ostringstream os;
  model.summary(os);
  EXPECT_TRUE(contains(os.str(), "features (InputLayer)")) << os.str();
  EXPECT_TRUE(contains(os.str(), "Connected to")) << os.str();
  EXPECT_TRUE(contains(os.str(), "features[0][0]")) << os.str();
  EXPECT_TRUE(contains(os.str(), "Total params: 25 ")) << os.str();
}

// ---- the STYLE.md example --------------------------------------------------------------------

TEST(Fit, StyleExampleCompilesAndTrains) {
  soma::set_seed(1);
  Tensor x_train = f32(rand_tensor({64, 28, 28}, 1, 0.0, 1.0));
  Tensor y_train = labels(64, 10, 2);
  Tensor x_test = f32(rand_tensor({16, 28, 28}, 3, 0.0, 1.0));
  Tensor y_test = labels(16, 10, 4);
  soma::nn::Sequential model{
      soma::nn::Flatten(),
      soma::nn::Dense(128, soma::nn::relu),
      soma::nn::Dense(10)};
  model.compile(soma::optim::Adam({.learning_rate = 1e-3}),
                soma::nn::SparseCategoricalCrossentropy({.from_logits = true}),
                {soma::metrics::Accuracy()});
  auto history = model.fit(x_train, y_train,
                           {.epochs = 2, .batch_size = 32,
                            .validation_data = {{x_test, y_test}}, .verbose = 0});
  std::ostringstream os;
  model.summary(os);
  EXPECT_TRUE(contains(os.str(), "Total params: 101,770")) << os.str();
  for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    ASSERT_TRUE(history.contains(key)) << key;
    EXPECT_EQ(history[key].size(), 2u) << key;
  }
  EXPECT_LT(history["loss"][1], history["loss"][0]);
}

// ---- fit -------------------------------------------------------------------------------------

TEST(Fit, UncompiledModelThrows) {
  auto model = small_classifier();
  std::string msg = error_of([&] { model.fit(soma::zeros({4, 4}), labels(4, 3, 1)); });
  EXPECT_EQ(msg, "fit: the model is not compiled; call compile(optimizer, loss) first");
}

TEST(Fit, MismatchedSampleCountsNameBothShapes) {
  auto model = small_classifier();
  compile_classifier(model);
  std::string msg =
      error_of([&] { model.fit(soma::zeros({10, 4}), soma::zeros({8, 1}), {.verbose = 0}); });
  EXPECT_TRUE(contains(msg, "fit:")) << msg;
  EXPECT_TRUE(contains(msg, "[10, 4]")) << msg;
  EXPECT_TRUE(contains(msg, "[8, 1]")) << msg;
}

TEST(Fit, BadOptionsAreRejected) {
  auto model = small_classifier();
  compile_classifier(model);
  Tensor x = soma::zeros({4, 4});
  Tensor y = labels(4, 3, 1);
  EXPECT_TRUE(contains(error_of([&] { model.fit(x, y, {.batch_size = 0, .verbose = 0}); }),
                       "batch_size must be positive"));
  EXPECT_TRUE(contains(
      error_of([&] { model.fit(x, y, {.validation_split = 1.0, .verbose = 0}); }),
      "validation_split must be in [0, 1)"));
}

TEST(Fit, HistoryHasOneValuePerEpoch) {
  soma::set_seed(3);
  auto model = small_classifier();
  compile_classifier(model);
  Tensor x = f32(rand_tensor({20, 4}, 5));
  Tensor y = labels(20, 3, 6);
  auto h = model.fit(x, y, {.epochs = 3, .batch_size = 8, .verbose = 0});
  EXPECT_EQ(h.epoch, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(h["loss"].size(), 3u);
  EXPECT_EQ(h["accuracy"].size(), 3u);
  EXPECT_FALSE(h.contains("val_loss"));
  EXPECT_TRUE(contains(error_of([&] { (void)h["nope"]; }), "recorded: accuracy, loss"));
}

TEST(Fit, InitialEpochSkipsEarlierEpochs) {
  auto model = small_classifier();
  compile_classifier(model);
  auto h = model.fit(f32(rand_tensor({8, 4}, 1)), labels(8, 3, 2),
                     {.epochs = 4, .verbose = 0, .initial_epoch = 2});
  EXPECT_EQ(h.epoch, (std::vector<int>{2, 3}));
}

TEST(Fit, ValidationSplitHoldsOutTheLastSamples) {
  auto model = small_classifier();
  compile_classifier(model);
  Tensor x = f32(rand_tensor({20, 4}, 1));
  Tensor y = labels(20, 3, 2);
  std::int64_t batches = 0;
  auto counter = std::make_shared<soma::callbacks::LambdaCallback>();
  counter->on_train_batch_end_fn = [&](std::int64_t, nn::Logs&) { ++batches; };
  auto h = model.fit(x, y, {.epochs = 1, .batch_size = 5, .validation_split = 0.25,
                            .callbacks = {counter}, .verbose = 0});
  EXPECT_EQ(batches, 3);  // 15 training samples in batches of 5
  // val_loss is the loss on the last 5 samples after the epoch.
  auto ev = model.evaluate(x.slice(0, 15, 20), y.slice(0, 15, 20), {.verbose = 0});
  EXPECT_NEAR(h["val_loss"][0], ev["loss"], 1e-6);
}

TEST(Fit, SeededShuffleIsReproducible) {
  Tensor x = f32(rand_tensor({24, 4}, 1));
  Tensor y = labels(24, 3, 2);
  auto run = [&] {
    soma::set_seed(11);
    auto model = small_classifier();
    compile_classifier(model);
    model.fit(x, y, {.epochs = 2, .batch_size = 5, .verbose = 0, .seed = 99});
    return model.predict(x);
  };
  EXPECT_TRUE(all_close(run(), run(), 0.0, 0.0));
}

TEST(Fit, ShuffleChangesTheBatchOrder) {
  Tensor x = f32(rand_tensor({24, 4}, 1));
  Tensor y = labels(24, 3, 2);
  auto run = [&](bool shuffle) {
    soma::set_seed(11);
    auto model = small_classifier();
    compile_classifier(model);
    model.fit(x, y, {.epochs = 1, .batch_size = 5, .shuffle = shuffle, .verbose = 0, .seed = 5});
    return model.predict(x);
  };
  EXPECT_FALSE(all_close(run(true), run(false), 1e-7, 0.0));
}

TEST(Fit, ClassWeightScalesTheLoss) {
  Tensor x = f32(rand_tensor({6, 4}, 1));
  Tensor y = labels(6, 3, 2);
  auto first_loss = [&](std::map<std::int64_t, double> cw) {
    soma::set_seed(4);
    auto model = small_classifier();
    // A zero learning rate keeps the weights, so both runs see the same predictions.
    model.compile(optim::SGD({.learning_rate = 0.0}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}));
    return model.fit(x, y, {.batch_size = 6, .class_weight = cw, .verbose = 0})["loss"][0];
  };
  EXPECT_NEAR(first_loss({{0, 3.0}, {1, 3.0}, {2, 3.0}}), 3.0 * first_loss({}), 1e-5);
}

TEST(Fit, RestoresTheTrainingModeItFound) {
  auto model = small_classifier();
  compile_classifier(model);
  model.eval();
  model.fit(f32(rand_tensor({4, 4}, 1)), labels(4, 3, 2), {.verbose = 0});
  EXPECT_FALSE(model.training());
}

// ---- progress output -------------------------------------------------------------------------

TEST(Progress, FileOutputHasOneCleanLinePerEpoch) {
  auto model = small_classifier();
  compile_classifier(model);
  std::ostringstream os;
  Tensor x = f32(rand_tensor({40, 4}, 1));
  Tensor y = labels(40, 3, 2);
  model.fit(x, y, {.epochs = 3, .batch_size = 4, .validation_data = {{x, y}}, .verbose = 1,
                   .output = &os, .is_terminal = false});
  const std::string s = os.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 3) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  EXPECT_EQ(s.find('\x1b'), std::string::npos) << s;
  std::istringstream lines(s);
  std::string line;
  for (int e = 1; std::getline(lines, line); ++e) {
    EXPECT_EQ(line.rfind("Epoch " + std::to_string(e) + "/3 - 10/10 [====", 0), 0u) << line;
    EXPECT_TRUE(contains(line, "/step - loss: ")) << line;
    EXPECT_TRUE(contains(line, " - accuracy: ")) << line;
    EXPECT_TRUE(contains(line, " - val_loss: ")) << line;
    EXPECT_TRUE(contains(line, " - val_accuracy: ")) << line;
  }
}

TEST(Progress, VerboseTwoGivesOneLinePerEpochWithoutABar) {
  auto model = small_classifier();
  compile_classifier(model);
  std::ostringstream os;
  model.fit(f32(rand_tensor({8, 4}, 1)), labels(8, 3, 2),
            {.epochs = 2, .batch_size = 4, .verbose = 2, .output = &os, .is_terminal = true});
  const std::string s = os.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 2) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  EXPECT_EQ(s.find('['), std::string::npos) << s;
  EXPECT_EQ(s.rfind("Epoch 1/2 - ", 0), 0u) << s;
}

TEST(Progress, TerminalOutputRedrawsInPlace) {
  auto model = small_classifier();
  compile_classifier(model);
  std::ostringstream os;
  model.fit(f32(rand_tensor({8, 4}, 1)), labels(8, 3, 2),
            {.epochs = 2, .batch_size = 4, .verbose = 1, .output = &os, .is_terminal = true});
  const std::string s = os.str();
  EXPECT_NE(s.find('\r'), std::string::npos) << s;
  EXPECT_EQ(s.rfind("Epoch 1/2\n", 0), 0u) << s;
  EXPECT_TRUE(contains(s, "2/2 [==============================] - ")) << s;
}

TEST(Progress, SilentFitWritesNothing) {
  auto model = small_classifier();
  compile_classifier(model);
  std::ostringstream os;
  model.fit(f32(rand_tensor({8, 4}, 1)), labels(8, 3, 2),
            {.epochs = 2, .verbose = 0, .output = &os});
  EXPECT_TRUE(os.str().empty());
}

TEST(Progress, EvaluateToFileWritesOneLine) {
  auto model = small_classifier();
  compile_classifier(model);
  std::ostringstream os;
  model.evaluate(f32(rand_tensor({8, 4}, 1)), labels(8, 3, 2),
                 {.batch_size = 3, .verbose = 1, .output = &os, .is_terminal = false});
  const std::string s = os.str();
  EXPECT_EQ(s.rfind("3/3 [==============================] - ", 0), 0u) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1) << s;
}

TEST(Progress, LogsShowLossFirstThenMetricsThenValidation) {
  std::string s = soma::callbacks::ProgressBar::format_logs(
      {{"accuracy", 0.5}, {"loss", 1.25}, {"val_accuracy", 0.25}, {"val_loss", 2.0}});
  EXPECT_EQ(s, "loss: 1.2500 - accuracy: 0.5000 - val_loss: 2.0000 - val_accuracy: 0.2500");
}

TEST(ProgressBar, SubSecondEpochsShowMilliseconds) {
  using soma::callbacks::ProgressBar;
  EXPECT_EQ(ProgressBar::format_elapsed(0.5), "500ms");
  EXPECT_EQ(ProgressBar::format_elapsed(0.0004), "0ms");
  EXPECT_EQ(ProgressBar::format_elapsed(1.0), "1s");
  EXPECT_EQ(ProgressBar::format_elapsed(12.7), "12s");
}

// ---- evaluate / predict ----------------------------------------------------------------------

TEST(Evaluate, MatchesAManualComputation) {
  soma::set_seed(2);
  auto model = small_classifier();
  compile_classifier(model);
  Tensor x = f32(rand_tensor({10, 4}, 3));
  Tensor y = labels(10, 3, 4);
  auto logs = model.evaluate(x, y, {.batch_size = 4, .verbose = 0});  // uneven last batch
  // Plain cross-entropy from the logits and argmax accuracy, one sample at a time.
  model.eval();
  Tensor logits = model(x);
  auto yl = y.to_vector<std::int64_t>();
  double loss = 0.0, correct = 0.0;
  for (std::int64_t i = 0; i < 10; ++i) {
    double mx = -1e30, z = 0.0;
    std::int64_t arg = 0;
    for (std::int64_t k = 0; k < 3; ++k) {
      double v = logits.at<double>({i, k});
      if (v > mx) mx = v, arg = k;
    }
    for (std::int64_t k = 0; k < 3; ++k) z += std::exp(logits.at<double>({i, k}) - mx);
    loss += mx + std::log(z) - logits.at<double>({i, yl[std::size_t(i)]});
    correct += arg == yl[std::size_t(i)] ? 1.0 : 0.0;
  }
  EXPECT_NEAR(logs.at("loss"), loss / 10.0, 1e-5);
  EXPECT_NEAR(logs.at("accuracy"), correct / 10.0, 1e-12);
}

TEST(Evaluate, UncompiledModelThrows) {
  auto model = small_classifier();
  EXPECT_TRUE(contains(error_of([&] { model.evaluate(soma::zeros({2, 4}), labels(2, 3, 1)); }),
                       "evaluate: the model is not compiled"));
}

TEST(Predict, BatchesEqualOneFullForwardInEvalMode) {
  soma::set_seed(5);
  nn::Sequential model{nn::Dense(6, nn::relu), nn::Dropout(0.5), nn::Dense(2)};
  Tensor x = f32(rand_tensor({11, 3}, 7));
  Tensor batched = model.predict(x, {.batch_size = 4});
  EXPECT_TRUE(model.training());  // predict leaves the mode as it was
  model.eval();
  EXPECT_TRUE(all_close(batched, model(x), 1e-6, 1e-6));
}

TEST(Predict, OnBatchMatchesCall) {
  auto model = small_classifier();
  Tensor x = f32(rand_tensor({5, 4}, 7));
  Tensor p = model.predict_on_batch(x);
  EXPECT_TRUE(all_close(p, model(x), 0.0, 0.0));
}

TEST(TrainOnBatch, OneStepLowersTheLossOnThatBatch) {
  soma::set_seed(6);
  auto model = small_classifier();
  compile_classifier(model, 0.1);
  Tensor x = f32(rand_tensor({8, 4}, 1));
  Tensor y = labels(8, 3, 2);
  double before = model.test_on_batch(x, y).at("loss");
  auto logs = model.train_on_batch(x, y);
  EXPECT_NEAR(logs.at("loss"), before, 1e-6);  // the loss of the step, before the update
  EXPECT_TRUE(logs.count("accuracy"));
  EXPECT_LT(model.test_on_batch(x, y).at("loss"), before);
}

TEST(Model, CallingTheModelRunsItsLayers) {
  soma::set_seed(7);
  nn::ModuleRef d1 = nn::Dense(3, nn::relu), d2 = nn::Dense(2);
  nn::Sequential model{d1, d2};
  Tensor x = f32(rand_tensor({4, 5}, 1));
  EXPECT_TRUE(all_close(model(x), (*d2)((*d1)(x)), 0.0, 0.0));
  EXPECT_EQ(model.layers().size(), 2u);
  EXPECT_EQ(model.trainable_parameters().size(), 4u);
}

TEST(Sequential, StateDictKeysFollowLayerPositions) {
  nn::Sequential model{nn::Input({3}), nn::Dense(2), nn::Dense(1)};
  auto sd = model.state_dict();
  EXPECT_TRUE(sd.count("0.kernel") && sd.count("0.bias") && sd.count("1.kernel")) << sd.size();
}

TEST(Sequential, AddBuildsLayersOnceTheInputIsKnown) {
  nn::Sequential model;
  model.add(nn::Input({6}));
  model.add(nn::Dense(4));
  EXPECT_EQ(model.count_params(), 28);
  EXPECT_EQ(model.layer_output_shapes().back(), (Shape{-1, 4}));
}

TEST(Sequential, ACopySharesTheLayersAndStaysBuilt) {
  nn::Sequential model{nn::Input({3}), nn::Dense(2)};
  nn::Sequential copy = model;
  EXPECT_TRUE(copy.built());
  EXPECT_EQ(copy.layer(0).get(), model.layer(0).get());
  std::ostringstream os;
  copy.summary(os);
  EXPECT_TRUE(contains(os.str(), "Total params: 8 ")) << os.str();
}

TEST(Sequential, InputShapeMismatchIsAnError) {
  nn::Sequential model{nn::Input({28, 28}), nn::Flatten(), nn::Dense(10)};
  std::string msg = error_of([&] { model(soma::zeros({2, 784})); });
  EXPECT_TRUE(contains(msg, "expects inputs of shape (None, 28, 28), got [2, 784]")) << msg;
}

TEST(Sequential, InputMustComeFirst) {
  std::string msg = error_of([] { nn::Sequential m{nn::Dense(2), nn::Input({3})}; });
  EXPECT_TRUE(contains(msg, "an Input must come first")) << msg;
}

// ---- functional API --------------------------------------------------------------------------

TEST(Functional, SymbolicShapesFollowTheLayers) {
  auto in = nn::Input({28, 28});
  EXPECT_EQ(in.shape(), (Shape{-1, 28, 28}));
  auto h = nn::call(nn::Flatten(), in);
  EXPECT_EQ(h.shape(), (Shape{-1, 784}));
  auto o = nn::call(nn::Dense(10), h);
  EXPECT_EQ(o.shape(), (Shape{-1, 10}));
  EXPECT_EQ(nn::format_shape(o.shape()), "(None, 10)");
}

TEST(Functional, TwoInputsWithASharedLayerTrainAndShareWeights) {
  soma::set_seed(8);
  auto a = nn::Input({3});
  auto b = nn::Input({3});
  nn::ModuleRef shared = nn::Dense(4, nn::tanh);
  nn::ModuleRef head = nn::Dense(1);
  auto ha = nn::call(shared, a);
  auto hb = nn::call(shared, b);
  auto out = nn::call(head, nn::call(nn::Concatenate(), std::vector{ha, hb}).at(0));
  nn::Model model({a, b}, {out});
  // The shared layer's weights appear once.
  EXPECT_EQ(model.trainable_parameters().size(), 4u);
  EXPECT_EQ(model.count_params(), 3 * 4 + 4 + 8 + 1);

  Tensor xa = f32(rand_tensor({32, 3}, 1));
  Tensor xb = f32(rand_tensor({32, 3}, 2));
  Tensor y = soma::sum(xa, {1}, true) - soma::sum(xb, {1}, true);
  model.compile(optim::Adam({.learning_rate = 0.05}), nn::MeanSquaredError());
  Tensor kernel_before = shared->state_dict().at("kernel");
  auto h = model.fit({xa, xb}, {y}, {.epochs = 30, .batch_size = 8, .verbose = 0});
  EXPECT_LT(h["loss"].back(), 0.5 * h["loss"].front());
  EXPECT_FALSE(all_close(shared->state_dict().at("kernel"), kernel_before, 1e-6, 0.0));
  // The model's output is the head applied to the shared layer on each input.
  Tensor manual = (*head)(soma::concat({(*shared)(xa), (*shared)(xb)}, 1));
  EXPECT_TRUE(all_close(model.predict({xa, xb}).at(0), manual, 1e-6, 1e-6));
}

TEST(Functional, SeveralOutputsGetALossEach) {
  soma::set_seed(9);
  auto in = nn::Input({2});
  auto h = nn::call(nn::Dense(8, nn::tanh), in);
  auto o1 = nn::call(nn::Dense(1), h);
  auto o2 = nn::call(nn::Dense(3), h);
  nn::Model model(std::vector{in}, {o1, o2});
  model.compile(optim::Adam({.learning_rate = 0.01}),
                std::vector<nn::LossRef>{nn::MeanSquaredError(),
                                         nn::SparseCategoricalCrossentropy({.from_logits = true})},
                {{}, {metrics::Accuracy()}}, {.loss_weights = {1.0, 0.5}});
  Tensor x = f32(rand_tensor({16, 2}, 1));
  auto hist = model.fit({x}, {f32(rand_tensor({16, 1}, 2)), labels(16, 3, 3)},
                        {.epochs = 2, .verbose = 0});
  const std::string n1 = o1.name(), n2 = o2.name();
  ASSERT_TRUE(hist.contains(n1 + "_loss"));
  ASSERT_TRUE(hist.contains(n2 + "_loss"));
  ASSERT_TRUE(hist.contains(n2 + "_accuracy"));
  EXPECT_NEAR(hist["loss"][0], hist[n1 + "_loss"][0] + 0.5 * hist[n2 + "_loss"][0], 1e-4);
  auto preds = model.predict(std::vector{x});
  ASSERT_EQ(preds.size(), 2u);
  EXPECT_EQ(preds[1].shape(), (Shape{16, 3}));
}

TEST(Functional, OutputsMustDependOnlyOnListedInputs) {
  auto a = nn::Input({2}, {.name = "a_in"});
  auto b = nn::Input({2}, {.name = "b_in"});
  auto s = nn::call(nn::Add(), std::vector{a, b}).at(0);
  std::string msg = error_of([&] { nn::Model m(a, s); });
  EXPECT_TRUE(contains(msg, "input 'b_in', which is not among the model's inputs")) << msg;
}

TEST(Functional, CompileChecksOneLossPerOutput) {
  auto in = nn::Input({2});
  nn::Model model(std::vector{in}, {nn::call(nn::Dense(1), in), nn::call(nn::Dense(1), in)});
  std::string msg = error_of([&] {
    model.compile(optim::SGD(), std::vector<nn::LossRef>{nn::MeanSquaredError(),
                                                         nn::MeanSquaredError(),
                                                         nn::MeanSquaredError()});
  });
  EXPECT_EQ(msg, "compile: the model has 2 outputs but 3 losses were given (give one, or one "
                 "per output)");
}

TEST(Functional, WrongInputShapeIsAnError) {
  auto in = nn::Input({4}, {.name = "x_in"});
  nn::Model model(in, nn::call(nn::Dense(2), in));
  std::string msg = error_of([&] { model(soma::zeros({3, 5})); });
  EXPECT_TRUE(contains(msg, "input 0 ('x_in') expects shape (None, 4), got [3, 5]")) << msg;
}

TEST(Functional, WrongNumberOfInputsIsAnError) {
  auto a = nn::Input({2});
  auto b = nn::Input({2});
  nn::Model model({a, b}, {nn::call(nn::Add(), std::vector{a, b}).at(0)});
  std::string msg = error_of([&] { model(soma::zeros({3, 2})); });
  EXPECT_TRUE(contains(msg, "takes 2 input(s), got 1")) << msg;
}
