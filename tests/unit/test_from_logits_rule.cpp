// Issue 19: a model whose last layer is a softmax (or sigmoid) outputs probabilities; a loss
// that takes them for logits applies the softmax twice and trains silently worse. The rule:
// from_logits is false after softmax/sigmoid, true after a linear (or other) activation.
#include <gtest/gtest.h>

#include <cmath>

#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::rand_tensor;

namespace {

bool scce_from_logits(const nn::LossRef& loss) {
  return dynamic_cast<const nn::SparseCategoricalCrossentropy&>(*loss).options().from_logits;
}

TEST(FromLogitsRule, DenseWithSoftmaxOutputsProbabilities) {
  nn::Sequential m{nn::Input({4}), nn::Dense(8, nn::relu), nn::Dense(3, nn::softmax)};
  EXPECT_EQ(nn::output_activation(m), "softmax");
  EXPECT_TRUE(nn::outputs_probabilities(m));
  EXPECT_FALSE(nn::from_logits_for(m));
  EXPECT_FALSE(scce_from_logits(nn::loss_for_model("sparse_categorical_crossentropy", m)));
}

TEST(FromLogitsRule, SoftmaxLayerAfterDenseOutputsProbabilities) {
  nn::Sequential m{nn::Input({4}), nn::Dense(3), nn::Softmax()};
  EXPECT_EQ(nn::output_activation(m), "softmax");
  EXPECT_FALSE(nn::from_logits_for(m));
  nn::Sequential a{nn::Input({4}), nn::Dense(3), nn::ActivationLayer("softmax")};
  EXPECT_FALSE(nn::from_logits_for(a));
}

TEST(FromLogitsRule, SigmoidOutputsProbabilities) {
  nn::Sequential dense{nn::Input({4}), nn::Dense(1, nn::sigmoid)};
  EXPECT_EQ(nn::output_activation(dense), "sigmoid");
  EXPECT_FALSE(nn::from_logits_for(dense));
  nn::Sequential layer{nn::Input({4}), nn::Dense(1), nn::Sigmoid()};
  EXPECT_FALSE(nn::from_logits_for(layer));
  auto bce = nn::loss_for_model("binary_crossentropy", layer);
  EXPECT_FALSE(dynamic_cast<const nn::BinaryCrossentropy&>(*bce).options().from_logits);
}

TEST(FromLogitsRule, LinearLastLayerOutputsLogits) {
  nn::Sequential m{nn::Input({4}), nn::Dense(8, nn::relu), nn::Dense(3)};
  EXPECT_EQ(nn::output_activation(m), "linear");
  EXPECT_FALSE(nn::outputs_probabilities(m));
  EXPECT_TRUE(nn::from_logits_for(m));
  EXPECT_TRUE(scce_from_logits(nn::loss_for_model("sparse_categorical_crossentropy", m)));
  nn::Sequential relu_last{nn::Input({4}), nn::Dense(3, nn::relu)};
  EXPECT_TRUE(nn::from_logits_for(relu_last));
}

TEST(FromLogitsRule, ShapeOnlyLayersAfterTheActivationDoNotHideIt) {
  nn::Sequential m{nn::Input({4}), nn::Dense(6, nn::softmax), nn::Dropout(0.1), nn::Reshape({2, 3})};
  EXPECT_EQ(nn::output_activation(m), "softmax");
  nn::Sequential conv{nn::Input({1, 4, 4}), nn::Conv2D(2, 4, {.activation = nn::sigmoid}), nn::Flatten()};
  EXPECT_EQ(nn::output_activation(conv), "sigmoid");
}

TEST(FromLogitsRule, NestedSequentialAndFunctionalModels) {
  nn::Sequential nested{nn::Input({4}), nn::Sequential{nn::Dense(5), nn::Dense(3, nn::softmax)}};
  EXPECT_EQ(nn::output_activation(nested), "softmax");
  auto in = nn::Input({4});
  auto h = nn::call(nn::Dense(5, nn::relu), in);
  nn::Model probs(in, nn::call(nn::Softmax(), nn::call(nn::Dense(3), h)));
  EXPECT_EQ(nn::output_activation(probs), "softmax");
  EXPECT_FALSE(nn::from_logits_for(probs));
  nn::Model logits(in, nn::call(nn::Dense(3), h));
  EXPECT_TRUE(nn::from_logits_for(logits));
}

// A subclassed model's output cannot be read: "" and Keras' default (from_logits = false).
TEST(FromLogitsRule, UnknownOutputFallsBackToKerasDefault) {
  struct Custom : nn::Model {
    std::string type_name() const override { return "Custom"; }
  } m;
  EXPECT_EQ(nn::output_activation(m), "");
  EXPECT_FALSE(nn::outputs_probabilities(m));
  EXPECT_FALSE(nn::from_logits_for(m));
  nn::Sequential other_last{nn::Input({4}), nn::Dense(3), nn::BatchNormalization()};
  EXPECT_EQ(nn::output_activation(other_last), "");
}

// The point of the rule: the compiled loss of a softmax model is the cross-entropy of its
// probabilities, -mean(log p[label]), not that of a second softmax over them.
TEST(FromLogitsRule, CompiledLossOfASoftmaxModelIsTheCrossEntropyOfItsProbabilities) {
  nn::Sequential m{nn::Input({4}), nn::Dense(3, nn::softmax)};
  m.compile(optim::SGD(), nn::loss_for_model("sparse_categorical_crossentropy", m));
  Tensor x = rand_tensor({5, 4}, 7, -3.0, 3.0);
  Tensor y = constant({0.0, 2.0, 1.0, 1.0, 0.0});
  const auto p = m.predict(x).to_vector<double>();
  const auto labels = y.to_vector<double>();
  double want = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) want -= std::log(p[i * 3 + std::size_t(labels[i])]);
  want /= double(labels.size());
  const double got = m.evaluate(x, y, {.verbose = 0}).at("loss");
  EXPECT_NEAR(got, want, 1e-5);
  const double twice = nn::SparseCategoricalCrossentropy({.from_logits = true})(y, m.predict(x)).item<double>();
  EXPECT_GT(std::abs(twice - want), 1e-2) << "the check cannot tell the two apart";
}

// compile by Keras names follows the same rule: a cross-entropy named for a softmax model takes
// its outputs as probabilities, for a linear model as logits.
TEST(FromLogitsRule, CompileByNameChoosesFromLogitsFromTheLastActivation) {
  nn::Sequential probs{nn::Input({4}), nn::Dense(3, nn::softmax)};
  probs.compile("adam", "sparse_categorical_crossentropy", {"accuracy"});
  ASSERT_EQ(probs.compiled_losses().size(), 1u);
  EXPECT_FALSE(scce_from_logits(probs.compiled_losses()[0]));
  nn::Sequential logits{nn::Input({4}), nn::Dense(3)};
  logits.compile("adam", "sparse_categorical_crossentropy", {"accuracy"});
  EXPECT_TRUE(scce_from_logits(logits.compiled_losses()[0]));
}

}  // namespace
