// Issue 19: everything a model file can hold loads again. Goes through every registered name
// (layers, losses, metrics, optimisers, schedules: the registries, not a hand list), saves a
// model using it, loads it with load_model, saves it again and compares the two files' headers
// and tensors. Also: Keras' string aliases, the MeanAbsoluteError metric, and load errors that
// name the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <typeinfo>
#include <unistd.h>

#include "soma/model/serialization.hpp"
#include "soma/nn/attention.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "fast_paths_testing.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace soma;
using soma::testing::error_of;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

std::string temp_file(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("soma_roundtrip_names_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

using soma::testing::same_bits;

// save -> load_model -> save: the two files hold the same header (architecture, compile config
// with every metric and loss option, optimiser config) and the same tensors (weights and
// optimiser state). Returns the loaded model.
std::shared_ptr<nn::Model> expect_round_trip(const nn::Model& model, const std::string& tag) {
  const std::string a = temp_file(tag + "_a.soma"), b = temp_file(tag + "_b.soma");
  model.save(a);
  std::shared_ptr<nn::Model> loaded;
  try {
    loaded = load_model(a);
  } catch (const std::exception& e) {
    ADD_FAILURE() << tag << ": load_model failed: " << e.what();
    fs::remove(a);
    return nullptr;
  }
  loaded->save(b);
  auto fa = serialization::read_file(a), fb = serialization::read_file(b);
  EXPECT_EQ(fa.json, fb.json) << tag;
  EXPECT_EQ(fa.tensors.size(), fb.tensors.size()) << tag;
  for (auto& [k, t] : fa.tensors) {
    auto it = fb.tensors.find(k);
    if (it == fb.tensors.end()) {
      ADD_FAILURE() << tag << ": tensor " << k << " is missing after the round trip";
      continue;
    }
    EXPECT_TRUE(same_bits(t, it->second)) << tag << ": " << k;
  }
  fs::remove(a);
  fs::remove(b);
  return loaded;
}

nn::Sequential small_classifier() {
  return nn::Sequential{nn::Input({4}), nn::Dense(5, nn::relu), nn::Dense(3)};
}

// ---- the report ------------------------------------------------------------------------

TEST(RoundTripNames, LossMeanOfMeanAbsoluteErrorLoads) {
  auto m = small_classifier();
  m.compile(optim::Adam(), nn::MeanSquaredError(), {metrics::LossMean(nn::MeanAbsoluteError())});
  auto loaded = expect_round_trip(m, "lossmean_mae");
  ASSERT_TRUE(loaded);
  ASSERT_EQ(loaded->compiled_metrics().size(), 1u);
  EXPECT_EQ(loaded->compiled_metrics()[0].at(0)->name(), "mean_absolute_error");
  EXPECT_EQ(loaded->metrics_names(), m.metrics_names());
}

TEST(RoundTripNames, LoadErrorsNameTheFile) {
  auto m = small_classifier();
  m.compile(optim::Adam(), nn::MeanSquaredError(), {metrics::MeanSquaredError()});
  const std::string path = temp_file("unknown_metric.soma");
  m.save(path);
  auto f = serialization::read_file(path);
  const auto at = f.json.find("\"mean_squared_error\"]");
  ASSERT_NE(at, std::string::npos) << f.json;
  f.json.replace(at, std::strlen("\"mean_squared_error\""), "\"f7_score\"");
  serialization::write_file(path, f);
  const std::string msg = error_of([&] { load_model(path); });
  EXPECT_NE(msg.find("unknown metric 'f7_score'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << "the error does not name the file: " << msg;
  fs::remove(path);
}

// ---- layers ------------------------------------------------------------------------------------

// A model holding each registered layer type. A type registered without a case here fails the
// test: add one.
std::map<std::string, std::function<std::shared_ptr<nn::Model>()>> layer_samples() {
  using S = nn::Sequential;
#define SEQ(...) [] { return std::shared_ptr<nn::Model>(std::make_shared<nn::Sequential>(__VA_ARGS__)); }
  auto two_inputs = [](std::function<nn::ModuleRef()> merge) {
    return [merge] {
      auto a = nn::Input({3}), b = nn::Input({3});
      auto h = nn::call(merge(), {nn::call(nn::Dense(3), a), b}).at(0);
      return std::make_shared<nn::Model>(std::vector<nn::SymbolicTensor>{a, b},
                                         std::vector<nn::SymbolicTensor>{nn::call(nn::Dense(2), h)});
    };
  };
  return {
      {"Dense", SEQ(nn::Input({4}), nn::Dense(3, nn::sigmoid, {.use_bias = false}))},
      {"Conv2D", SEQ(nn::Input({2, 5, 5}), nn::Conv2D(3, 3, {.padding = "same", .activation = nn::relu}))},
      {"Conv1D", SEQ(nn::Input({2, 9}), nn::Conv1D(3, 3, {.strides = 2, .padding = "same"}))},
      {"Conv3D", SEQ(nn::Input({2, 4, 5, 5}), nn::Conv3D(3, {2, 3, 3}, {.padding = "same", .activation = nn::relu}))},
      {"MaxPool3D", SEQ(nn::Input({2, 4, 6, 6}), nn::MaxPool3D({2, 2, 2}))},
      {"AvgPool3D", SEQ(nn::Input({2, 4, 6, 6}), nn::AvgPool3D({3, 3, 3}, nn::Size3{2, 2, 2}, "same"))},
      {"GlobalAveragePooling3D", SEQ(nn::Input({2, 3, 5, 5}), nn::GlobalAveragePooling3D(true))},
      {"GlobalMaxPooling2D", SEQ(nn::Input({2, 5, 5}), nn::GlobalMaxPooling2D())},
      {"GlobalMaxPooling1D", SEQ(nn::Input({2, 5}), nn::GlobalMaxPooling1D(true))},
      {"Conv2DTranspose", SEQ(nn::Input({2, 4, 4}), nn::Conv2DTranspose(3, {3, 3}, {.strides = 2}))},
      {"MaxPool2D", SEQ(nn::Input({2, 6, 6}), nn::MaxPool2D(2))},
      {"AvgPool2D", SEQ(nn::Input({2, 6, 6}), nn::AvgPool2D({3, 3}, 2, "same"))},
      {"GlobalAveragePooling2D", SEQ(nn::Input({2, 5, 5}), nn::GlobalAveragePooling2D(true))},
      {"Flatten", SEQ(nn::Input({2, 3}), nn::Flatten())},
      {"Reshape", SEQ(nn::Input({6}), nn::Reshape({2, 3}))},
      {"Dropout", SEQ(nn::Input({4}), nn::Dropout(0.25, 3))},
      {"Activation", SEQ(nn::Input({4}), nn::ActivationLayer("swish"))},
      {"ReLU", SEQ(nn::Input({4}), nn::ReLU())},
      {"Sigmoid", SEQ(nn::Input({4}), nn::Sigmoid())},
      {"Tanh", SEQ(nn::Input({4}), nn::Tanh())},
      {"Step", SEQ(nn::Input({4}), nn::Step())},
      {"LeakyReLU", SEQ(nn::Input({4}), nn::LeakyReLU(0.1))},
      {"ELU", SEQ(nn::Input({4}), nn::ELU(0.5))},
      {"GELU", SEQ(nn::Input({4}), nn::GELU(true))},
      {"Softmax", SEQ(nn::Input({4}), nn::Softmax(-1))},
      {"Embedding", SEQ(nn::Input({3}, {.dtype = DType::i64}), nn::Embedding(10, 2))},
      {"BatchNormalization", SEQ(nn::Input({4}), nn::BatchNormalization({.momentum = 0.5}))},
      {"LayerNormalization", SEQ(nn::Input({3, 4}), nn::LayerNormalization({.axis = {-1}}))},
      {"Normalization", SEQ(nn::Input({2}), nn::Normalization({.mean = {1.0, 2.0}, .variance = {4.0, 9.0}}))},
      {"SimpleRNN", SEQ(nn::Input({3, 2}), nn::SimpleRNN(4, {.return_sequences = true}))},
      {"LSTM", SEQ(nn::Input({3, 2}), nn::LSTM(4))},
      {"GRU", SEQ(nn::Input({3, 2}), nn::GRU(4, {.reset_after = false}))},
      {"MultiHeadAttention", SEQ(nn::Input({3, 4}), nn::MultiHeadAttention(2, 3, {.use_causal_mask = true}))},
      {"PositionalEmbedding", SEQ(nn::Input({3, 4}), nn::PositionalEmbedding(5, {.add_to_inputs = true}))},
      {"SinePositionEncoding", SEQ(nn::Input({3, 4}), nn::SinePositionEncoding(100.0, true))},
      {"RMSNormalization", SEQ(nn::Input({3, 4}), nn::RMSNormalization({.epsilon = 1e-4}))},
      {"TransformerEncoderLayer", SEQ(nn::Input({3, 4}), nn::TransformerEncoderLayer(4, 2, {.dim_feedforward = 6, .norm_first = true}))},
      {"TransformerDecoderLayer", SEQ(nn::Input({3, 4}), nn::TransformerDecoderLayer(4, 2, {.dim_feedforward = 6, .activation = nn::gelu}))},
      {"Sequential", SEQ(nn::Input({4}), nn::Sequential{nn::Dense(3), nn::Dense(2)})},
      {"Add", two_inputs([] { return nn::ModuleRef(nn::Add()); })},
      {"Multiply", two_inputs([] { return nn::ModuleRef(nn::Multiply()); })},
      {"Average", two_inputs([] { return nn::ModuleRef(nn::Average()); })},
      {"Concatenate", two_inputs([] { return nn::ModuleRef(nn::Concatenate(1)); })},
      {"Functional", [] {
         auto in = nn::Input({4});
         auto inner = std::make_shared<nn::Model>(in, nn::call(nn::Dense(3, nn::relu), in));
         return std::shared_ptr<nn::Model>(
             std::make_shared<S>(nn::Input({4}), nn::ModuleRef(inner), nn::Dense(2)));
       }},
  };
#undef SEQ
}

TEST(RoundTripNames, EveryRegisteredLayerSavesAndLoads) {
  const auto samples = layer_samples();
  const auto names = serialization::registered_layers();
  ASSERT_FALSE(names.empty());
  for (const auto& name : names) {
    auto it = samples.find(name);
    if (it == samples.end()) {
      ADD_FAILURE() << "layer type '" << name << "' is registered but has no round-trip case here";
      continue;
    }
    auto model = it->second();
    EXPECT_NE(serialization::model_config(*model).find("\"" + name + "\""), std::string::npos)
        << name << " is not in its sample's config";
    auto loaded = expect_round_trip(*model, "layer_" + name);
    if (loaded) EXPECT_EQ(serialization::model_config(*model), serialization::model_config(*loaded)) << name;
  }
}

// ---- losses ------------------------------------------------------------------------------------

TEST(RoundTripNames, EveryLossNameSavesAndLoadsWithItsOptions) {
  for (const auto& name : nn::loss_names()) {
    for (bool logits : {false, true}) {
      auto m = small_classifier();
      auto loss = nn::loss_from_name(name, logits);
      m.compile(optim::SGD(), loss);
      auto loaded = expect_round_trip(m, "loss_" + name + (logits ? "_logits" : ""));
      if (!loaded) continue;
      EXPECT_EQ(serialization::loss_config(*loaded->compiled_losses().at(0)), serialization::loss_config(*loss))
          << name << " from_logits=" << logits;
    }
  }
}

TEST(RoundTripNames, LossOptionsSurvive) {
  for (nn::LossRef loss :
       {nn::LossRef(nn::Huber({.delta = 0.25, .reduction = nn::Reduction::Sum})),
        nn::LossRef(nn::CategoricalCrossentropy({.from_logits = true, .label_smoothing = 0.1})),
        nn::LossRef(nn::BinaryCrossentropy({.label_smoothing = 0.2, .reduction = nn::Reduction::None})),
        nn::LossRef(nn::Crossentropy({.from_logits = true}))}) {
    auto m = small_classifier();
    m.compile(optim::SGD(), loss);
    auto loaded = expect_round_trip(m, "loss_options_" + loss->name());
    if (loaded)
      EXPECT_EQ(serialization::loss_config(*loaded->compiled_losses().at(0)), serialization::loss_config(*loss));
  }
}

// ---- metrics -----------------------------------------------------------------------------------

// Every metric name with every loss name (compile pairs metrics with the loss, and
// "accuracy"/"crossentropy" pick their variant from it): all in one model per loss.
TEST(RoundTripNames, EveryMetricNameSavesAndLoadsWithEveryLoss) {
  for (const auto& loss_name : nn::loss_names()) {
    for (bool logits : {false, true}) {
      auto loss = nn::loss_from_name(loss_name, logits);
      std::vector<metrics::MetricRef> ms;
      for (const auto& name : metrics::metric_names()) ms.push_back(metrics::metric_from_name(name, loss.get()));
      auto m = small_classifier();
      m.compile(optim::SGD(), loss, ms);
      auto loaded = expect_round_trip(m, "metrics_" + loss_name + (logits ? "_logits" : ""));
      if (!loaded) continue;
      const auto got = loaded->compiled_metrics().at(0);
      ASSERT_EQ(got.size(), ms.size());
      for (std::size_t i = 0; i < ms.size(); ++i) {
        EXPECT_EQ(got[i]->name(), ms[i]->name()) << metrics::metric_names()[i] << " with " << loss_name;
        EXPECT_EQ(typeid(*got[i]), typeid(*ms[i])) << metrics::metric_names()[i] << " with " << loss_name;
      }
    }
  }
}

// Options that a name alone does not carry are written as the metric's config.
TEST(RoundTripNames, MetricOptionsSurvive) {
  std::vector<metrics::MetricRef> ms = {
      metrics::Precision({.threshold = 0.7, .class_id = 1, .name = "p1"}),
      metrics::Recall({.threshold = 0.2}),
      metrics::TopKCategoricalAccuracy({.k = 2}),
      metrics::SparseTopKCategoricalAccuracy({.k = 2, .name = "top2"}),
      metrics::BinaryAccuracy({.threshold = 0.3}),
      metrics::Accuracy({.mode = metrics::AccuracyMode::Exact, .name = "exact"}),
      metrics::MeanAbsoluteError({.name = "my_mae"}),
      metrics::MeanSquaredError({.name = "my_mse"}),
      metrics::Mean({.name = "running"}),
      metrics::LossMean(nn::BinaryCrossentropy({.from_logits = true, .label_smoothing = 0.1})),
      metrics::LossMean(nn::Huber({.delta = 2.0}), "huber2"),
  };
  auto m = small_classifier();
  m.compile(optim::SGD(), nn::SparseCategoricalCrossentropy({.from_logits = true}), ms);
  auto loaded = expect_round_trip(m, "metric_options");
  ASSERT_TRUE(loaded);
  const auto got = loaded->compiled_metrics().at(0);
  ASSERT_EQ(got.size(), ms.size());
  // Same options: the same results on the same batch.
  Tensor y = constant({{0.0, 1.0, 0.0}, {1.0, 0.0, 0.0}, {0.0, 0.0, 1.0}});
  Tensor p = constant({{0.1, 0.6, 0.3}, {0.25, 0.35, 0.4}, {0.5, 0.1, 0.4}});
  Tensor ids = constant({1.0, 0.0, 2.0});
  for (std::size_t i = 0; i < ms.size(); ++i) {
    if (ms[i]->name() == "running") continue;  // Mean takes values, not (y, p)
    const bool sparse = dynamic_cast<metrics::SparseTopKCategoricalAccuracy*>(ms[i].get()) != nullptr;
    const Tensor& target = sparse ? ids : y;
    ms[i]->reset_state();
    ms[i]->update_state(target, p);
    got[i]->update_state(target, p);
    EXPECT_EQ(got[i]->name(), ms[i]->name());
    EXPECT_DOUBLE_EQ(got[i]->result(), ms[i]->result()) << ms[i]->name();
  }
}

TEST(RoundTripNames, CustomMetricNeedsARegisteredFactory) {
  auto m = small_classifier();
  m.compile(optim::SGD(), nn::MeanSquaredError(),
            {metrics::MeanMetricWrapper([](const Tensor& t, const Tensor& p) { return abs(t - p); }, "my_abs")});
  const std::string path = temp_file("custom_metric.soma");
  std::string msg = error_of([&] { m.save(path); });
  EXPECT_NE(msg.find("metric 'my_abs' is not a built-in metric"), std::string::npos) << msg;
  EXPECT_NE(msg.find("register_metric"), std::string::npos) << msg;
  serialization::register_metric("my_abs", [] {
    return metrics::MetricRef(
        metrics::MeanMetricWrapper([](const Tensor& t, const Tensor& p) { return abs(t - p); }, "my_abs"));
  });
  m.save(path);
  auto loaded = load_model(path);
  EXPECT_EQ(loaded->compiled_metrics().at(0).at(0)->name(), "my_abs");
  fs::remove(path);
}

// ---- optimisers and schedules -------------------------------------------------------------------

TEST(RoundTripNames, EveryOptimizerNameSavesAndLoadsWithItsState) {
  Tensor x = rand_tensor({6, 4}, 1), y = rand_tensor({6, 3}, 2);
  for (const auto& name : optim::optimizer_names()) {
    auto m = small_classifier();
    m.compile(optim::optimizer_from_name(name), nn::MeanSquaredError());
    m.train_on_batch(x, y);  // slots and iterations to save
    auto loaded = expect_round_trip(m, "optimizer_" + name);
    if (!loaded) continue;
    EXPECT_EQ(loaded->optimizer().name(), m.optimizer().name()) << name;
    EXPECT_EQ(loaded->optimizer().iterations(), 1) << name;
  }
}

std::map<std::string, std::function<optim::ScheduleRef()>> schedule_samples() {
  return {
      {"ExponentialDecay",
       [] { return optim::ScheduleRef(optim::ExponentialDecay({.initial_learning_rate = 0.1, .decay_steps = 3, .decay_rate = 0.7})); }},
      {"PiecewiseConstantDecay",
       [] { return optim::ScheduleRef(optim::PiecewiseConstantDecay({3, 8}, {0.1, 0.05, 0.01})); }},
      {"CosineDecay",
       [] { return optim::ScheduleRef(optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 10, .alpha = 0.1})); }},
      {"StepDecay",
       [] { return optim::ScheduleRef(optim::StepDecay({.initial_learning_rate = 0.1, .step_size = 2, .gamma = 0.5})); }},
  };
}

TEST(RoundTripNames, EveryRegisteredScheduleSavesAndLoads) {
  const auto samples = schedule_samples();
  for (const auto& name : serialization::registered_schedules()) {
    auto it = samples.find(name);
    if (it == samples.end()) {
      ADD_FAILURE() << "schedule '" << name << "' is registered but has no round-trip case here";
      continue;
    }
    auto m = small_classifier();
    m.compile(optim::SGD({.learning_rate = it->second()}), nn::MeanSquaredError());
    auto loaded = expect_round_trip(m, "schedule_" + name);
    if (loaded) EXPECT_TRUE(loaded->optimizer().has_schedule()) << name;
  }
}

// ---- Keras' names ------------------------------------------------------------------------------

TEST(KerasNames, LossAliasesResolveAsKerasDoes) {
  const std::map<std::string, std::string> want = {
      {"mse", "mean_squared_error"},       {"MSE", "mean_squared_error"},
      {"mean_squared_error", "mean_squared_error"},
      {"mae", "mean_absolute_error"},      {"MAE", "mean_absolute_error"},
      {"mean_absolute_error", "mean_absolute_error"},
      {"huber", "huber_loss"},             {"bce", "binary_crossentropy"},
      {"binary_crossentropy", "binary_crossentropy"},
      {"categorical_crossentropy", "categorical_crossentropy"},
      {"sparse_categorical_crossentropy", "sparse_categorical_crossentropy"},
      {"SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"},
      {"crossentropy", "crossentropy"},
  };
  for (auto& [alias, name] : want) EXPECT_EQ(nn::loss_from_name(alias)->name(), name) << alias;
  auto scce = nn::loss_from_name("sparse_categorical_crossentropy", true);
  EXPECT_TRUE(dynamic_cast<nn::SparseCategoricalCrossentropy&>(*scce).options().from_logits);
  std::string msg = error_of([] { nn::loss_from_name("hinge_of_doom"); });
  EXPECT_NE(msg.find("unknown loss 'hinge_of_doom'; expected one of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sparse_categorical_crossentropy"), std::string::npos) << msg;
}

TEST(KerasNames, OptimizerNamesResolve) {
  const std::map<std::string, std::string> want = {{"sgd", "SGD"},         {"adam", "Adam"},
                                                   {"adamw", "AdamW"},     {"nadam", "Nadam"},
                                                   {"rmsprop", "RMSprop"}, {"adagrad", "Adagrad"},
                                                   {"Adam", "Adam"}};
  for (auto& [alias, name] : want) EXPECT_EQ(optim::optimizer_from_name(alias)->name(), name) << alias;
  std::string msg = error_of([] { optim::optimizer_from_name("lbfgs"); });
  EXPECT_NE(msg.find("unknown optimizer 'lbfgs'; expected one of sgd"), std::string::npos) << msg;
}

TEST(KerasNames, AccuracyPicksTheVariantOfTheLoss) {
  using metrics::AccuracyMode;
  auto mode = [](const std::string& id, const nn::Loss* loss) {
    auto m = metrics::metric_from_name(id, loss);
    return dynamic_cast<metrics::Accuracy&>(*m).mode();
  };
  nn::BinaryCrossentropy bce;
  nn::CategoricalCrossentropy cce;
  nn::SparseCategoricalCrossentropy scce;
  nn::MeanSquaredError mse;
  for (const char* id : {"accuracy", "acc"}) {
    EXPECT_EQ(mode(id, &bce), AccuracyMode::Binary) << id;
    EXPECT_EQ(mode(id, &cce), AccuracyMode::Categorical) << id;
    EXPECT_EQ(mode(id, &scce), AccuracyMode::SparseCategorical) << id;
    EXPECT_EQ(mode(id, &mse), AccuracyMode::Auto) << id;  // read from the first batch's shapes
    EXPECT_EQ(mode(id, nullptr), AccuracyMode::Auto) << id;
  }
}

TEST(KerasNames, CrossentropyMetricFollowsTheLoss) {
  nn::SparseCategoricalCrossentropy scce({.from_logits = true});
  auto m = metrics::metric_from_name("crossentropy", &scce);
  auto& lm = dynamic_cast<metrics::LossMean&>(*m);
  EXPECT_EQ(lm.name(), "crossentropy");
  auto* inner = dynamic_cast<const nn::SparseCategoricalCrossentropy*>(lm.loss().get());
  ASSERT_NE(inner, nullptr) << lm.loss()->name();
  EXPECT_TRUE(inner->options().from_logits);
  nn::BinaryCrossentropy bce;
  EXPECT_EQ(dynamic_cast<metrics::LossMean&>(*metrics::metric_from_name("ce", &bce)).loss()->name(),
            "binary_crossentropy");
}

TEST(KerasNames, MetricAliasesResolve) {
  EXPECT_EQ(metrics::metric_from_name("mae")->name(), "mean_absolute_error");
  EXPECT_EQ(metrics::metric_from_name("mean_absolute_error")->name(), "mean_absolute_error");
  EXPECT_EQ(metrics::metric_from_name("mse")->name(), "mean_squared_error");
  EXPECT_EQ(metrics::metric_from_name("acc")->name(), "accuracy");
  EXPECT_EQ(metrics::metric_from_name("binary_crossentropy")->name(), "binary_crossentropy");
  EXPECT_EQ(metrics::metric_from_name("sparse_categorical_crossentropy")->name(),
            "sparse_categorical_crossentropy");
  EXPECT_NE(dynamic_cast<metrics::MeanAbsoluteError*>(metrics::metric_from_name("mae").get()), nullptr);
  std::string msg = error_of([] { metrics::metric_from_name("f7_score"); });
  EXPECT_NE(msg.find("unknown metric 'f7_score'; expected one of accuracy"), std::string::npos) << msg;
}

// Crossentropy reads the variant from the shapes, as Keras' compile() does for "crossentropy".
TEST(KerasNames, CrossentropyLossChoosesByShape) {
  Tensor p3 = constant({{0.2, 0.5, 0.3}, {0.6, 0.3, 0.1}});
  Tensor onehot = constant({{0.0, 1.0, 0.0}, {1.0, 0.0, 0.0}});
  Tensor ids = constant({1.0, 0.0});
  Tensor p1 = constant({{0.8}, {0.3}});
  Tensor b = constant({{1.0}, {0.0}});
  nn::Crossentropy ce;
  EXPECT_TRUE(all_close(ce(onehot, p3), nn::CategoricalCrossentropy()(onehot, p3), 1e-12));
  EXPECT_TRUE(all_close(ce(ids, p3), nn::SparseCategoricalCrossentropy()(ids, p3), 1e-12));
  EXPECT_TRUE(all_close(ce(b, p1), nn::BinaryCrossentropy()(b, p1), 1e-12));
}

// ---- the MeanAbsoluteError metric ---------------------------------------------------------------

TEST(MeanAbsoluteErrorMetric, StreamsTheWeightedMeanOfAbsoluteErrors) {
  metrics::MeanAbsoluteError mae;
  EXPECT_EQ(mae.name(), "mean_absolute_error");
  mae.update_state(constant({{1.0, 2.0}, {3.0, 4.0}}), constant({{1.5, 1.0}, {3.0, 6.0}}));
  // per sample: (0.5 + 1) / 2 = 0.75, (0 + 2) / 2 = 1
  EXPECT_DOUBLE_EQ(mae.result(), (0.75 + 1.0) / 2);
  mae.update_state(constant({{0.0, 0.0}}), constant({{-4.0, 2.0}}), constant({2.0}));  // 3, weight 2
  EXPECT_DOUBLE_EQ(mae.result(), (0.75 + 1.0 + 2 * 3.0) / 4);
  mae.reset_state();
  EXPECT_EQ(mae.result(), 0.0);
}

TEST(MeanAbsoluteErrorMetric, MatchesTheLossMean) {
  Tensor t = rand_tensor({5, 3}, 3), p = rand_tensor({5, 3}, 4);
  metrics::MeanAbsoluteError a;
  metrics::LossMean b{nn::MeanAbsoluteError()};
  a.update_state(t, p);
  b.update_state(t, p);
  EXPECT_NEAR(a.result(), b.result(), 1e-6);
}

}  // namespace
