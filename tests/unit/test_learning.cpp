// Learning tests: small classic problems that must be solved on fixed seeds (issue 3's
// acceptance list). Each runs in well under a few seconds.
#include <gtest/gtest.h>

#include <cmath>

#include "soma/model/model.hpp"
#include "soma/model/sequential.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/optim/optimizers.hpp"
#include "test_support.hpp"

namespace nn = soma::nn;
namespace optim = soma::optim;
using soma::Tensor;

namespace {

Tensor xor_inputs() { return soma::constant<float>({{0, 0}, {0, 1}, {1, 0}, {1, 1}}); }

// Runs the perceptron learning rule (Rosenblatt) on a Dense(1) layer with a Heaviside step:
// w += lr * (t - y) * x and b += lr * (t - y), one sample at a time. Returns, per epoch, how many
// of the points the layer classified correctly at the end of that epoch.
std::vector<int> perceptron_rule(nn::Dense& unit, const Tensor& x, const std::vector<float>& t,
                                 int epochs, double lr = 0.1) {
  unit(x);  // builds kernel [2, 1] and bias [1]
  soma::Variable w = unit.kernel(), b = unit.bias();
  std::vector<int> correct_per_epoch;
  for (int e = 0; e < epochs; ++e) {
    for (std::int64_t i = 0; i < x.shape()[0]; ++i) {
      Tensor xi = x.slice(0, i, i + 1);  // [1, 2]
      float y = unit(xi).item<float>();
      double err = double(t[std::size_t(i)]) - double(y);
      if (err != 0.0) {
        w.assign_add(xi.transpose() * (lr * err));
        b.assign_add(soma::scalar(lr * err));
      }
    }
    auto y = unit(x).to_vector<float>();
    int correct = 0;
    for (std::size_t i = 0; i < y.size(); ++i) correct += y[i] == t[i];
    correct_per_epoch.push_back(correct);
  }
  return correct_per_epoch;
}

}  // namespace

TEST(Learning, MlpLearnsXor) {
  soma::set_seed(42);
  nn::Sequential model{nn::Input({2}), nn::Dense(4, nn::tanh), nn::Dense(1, nn::sigmoid)};
  model.compile(optim::Adam({.learning_rate = 0.05}), nn::BinaryCrossentropy());
  Tensor x = xor_inputs();
  Tensor y = soma::constant<float>({{0}, {1}, {1}, {0}});
  model.fit(x, y, {.epochs = 600, .batch_size = 4, .verbose = 0, .seed = 1});
  auto p = model.predict(x).to_vector<float>();
  const float want[] = {0, 1, 1, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p[std::size_t(i)] > 0.5f, want[i] > 0.5f) << "point " << i << ": " << p[std::size_t(i)];
}

TEST(Learning, PerceptronLearnsNand) {
  soma::set_seed(1);
  nn::Dense unit(1, nn::step);
  auto correct = perceptron_rule(unit, xor_inputs(), {1, 1, 1, 0}, 50);
  EXPECT_EQ(correct.back(), 4);
}

TEST(Learning, PerceptronCannotLearnXor) {
  // XOR is not linearly separable: whatever the rule does, a single threshold unit never gets
  // all four points right.
  soma::set_seed(1);
  nn::Dense unit(1, nn::step);
  auto correct = perceptron_rule(unit, xor_inputs(), {0, 1, 1, 0}, 100);
  for (std::size_t e = 0; e < correct.size(); ++e) ASSERT_LT(correct[e], 4) << "epoch " << e;
}

TEST(Learning, EightThreeEightAutoencoderReconstructsEveryOneHot) {
  soma::set_seed(7);
  nn::Sequential model{nn::Input({8}), nn::Dense(3, nn::sigmoid), nn::Dense(8)};
  model.compile(optim::Adam({.learning_rate = 0.05}),
                nn::CategoricalCrossentropy({.from_logits = true}));
  Tensor x = soma::eye(8);
  model.fit(x, x, {.epochs = 1500, .batch_size = 8, .verbose = 0, .seed = 3});
  Tensor decoded = soma::argmax(model.predict(x), -1);
  EXPECT_EQ(decoded.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Learning, LinearRegressionRecoversSlopeAndIntercept) {
  soma::set_seed(3);
  nn::ModuleRef dense = nn::Dense(1);
  nn::Sequential model{nn::Input({1}), dense};
  model.compile(optim::SGD({.learning_rate = 0.1}), nn::MeanSquaredError());
  Tensor x = soma::linspace(-1.0, 1.0, 64).reshape({64, 1});
  Tensor y = x * 3.0 + 2.0;  // noise-free
  model.fit(x, y, {.epochs = 200, .batch_size = 16, .verbose = 0, .seed = 5});
  auto& d = static_cast<nn::Dense&>(*dense);
  EXPECT_NEAR(d.kernel().value().item<double>(), 3.0, 1e-3);
  EXPECT_NEAR(d.bias().value().item<double>(), 2.0, 1e-3);
}
