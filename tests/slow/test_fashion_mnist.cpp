// Slow learning tests on Fashion-MNIST (issue 3's acceptance): an MLP 784-128-128-10 with Adam
// (batch 32, 5 epochs) must reach 87.5% test accuracy, a small CNN 90%; both start with a
// Normalization layer adapted on the training images. Labelled `slow`:
// run with `ctest -L slow` (scripts/test.sh runs them when SOMA_SLOW_TESTS=1).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <filesystem>
#include <iostream>

#include "soma/data/readers.hpp"
#include "soma/soma.hpp"

using namespace soma;

namespace {

const char* kDir = "/usr/share/datasets/fashion-mnist";

struct Data {
  Tensor x_train, y_train, x_test, y_test;
};

Data load(bool images_nchw) {
  auto d = data::load_fashion_mnist(kDir);
  auto prep = [&](const Tensor& x) {
    Tensor f = cast(x, DType::f32) / 255.0;
    return images_nchw ? expand_dims(f, 1) : f;
  };
  return {prep(d.x_train), cast(d.y_train, DType::i64), prep(d.x_test), cast(d.y_test, DType::i64)};
}

// Keras' Normalization(axis=None) adapted on the training images: one mean (0.2860) and standard
// deviation (0.3530) for all pixels, so the first layer sees inputs centred on 0 with unit
// variance (the MLP's median accuracy over 11 seeds rose from 87.3% to 87.7% with it).
nn::ModuleRef adapted_normalization(const Tensor& x_train) {
  auto norm = std::make_shared<nn::Normalization>(nn::NormalizationOptions{.axis = std::nullopt});
  norm->adapt(x_train);
  return norm;
}

double train_and_test(nn::Sequential& model, const Data& d, int epochs) {
  model.compile(optim::Adam({.learning_rate = 1e-3}),
                nn::SparseCategoricalCrossentropy({.from_logits = true}), {metrics::Accuracy()});
  auto t0 = std::chrono::steady_clock::now();
  model.fit(d.x_train, d.y_train, {.epochs = epochs, .batch_size = 32, .verbose = 2, .seed = 1});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto logs = model.evaluate(d.x_test, d.y_test, {.batch_size = 256, .verbose = 0});
  std::cout << "test accuracy " << logs.at("accuracy") << " after " << epochs << " epochs, "
            << secs << " s of training (" << 60000.0 * epochs / secs << " samples/s)\n";
  return logs.at("accuracy");
}

}  // namespace

std::uint64_t seed_from_env(std::uint64_t fallback) {
  const char* s = std::getenv("SOMA_TEST_SEED");
  return s ? std::stoull(s) : fallback;
}

TEST(FashionMnist, MlpReachesAtLeast87_5PercentIn5Epochs) {
  if (!std::filesystem::exists(kDir)) GTEST_SKIP() << kDir << " absent: apt-get install dataset-fashion-mnist";
  set_seed(seed_from_env(42));
  Data d = load(false);
  nn::Sequential model{adapted_normalization(d.x_train), nn::Flatten(), nn::Dense(128, nn::relu),
                       nn::Dense(128, nn::relu), nn::Dense(10)};
  EXPECT_GE(train_and_test(model, d, 5), 0.875);
}

TEST(FashionMnist, SmallCnnReachesAtLeast90PercentIn5Epochs) {
  if (!std::filesystem::exists(kDir)) GTEST_SKIP() << kDir << " absent: apt-get install dataset-fashion-mnist";
  set_seed(seed_from_env(42));
  Data d = load(true);
  nn::Sequential model{adapted_normalization(d.x_train),
                       nn::Conv2D(32, 3, {.activation = nn::relu}), nn::MaxPool2D(),
                       nn::Conv2D(64, 3, {.activation = nn::relu}), nn::MaxPool2D(),
                       nn::Flatten(), nn::Dense(128, nn::relu), nn::Dense(10)};
  EXPECT_GE(train_and_test(model, d, 5), 0.90);
}
