// Issue 19: weights holding NaN or inf, or a batch-norm moving variance below zero, are reported
// by soma::check_weights (and refused by require_valid_weights), also after load_model.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <unistd.h>

#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace soma;
using soma::testing::error_of;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Replaces some values of the weight `key` of `m`.
void poke(nn::Model& m, const std::string& key, std::vector<std::pair<std::size_t, float>> values) {
  auto w = m.get_weights();
  std::vector<float> v = w.at(key).cast(DType::f32).to_vector<float>();
  for (auto [i, x] : values) v[i] = x;
  w[key] = constant(v, w.at(key).shape());
  m.set_weights(w);
}

TEST(WeightChecks, AHealthyModelHasNoProblems) {
  nn::Sequential m{nn::Input({4}), nn::Dense(3), nn::BatchNormalization(), nn::Dense(2)};
  EXPECT_TRUE(check_weights(m).empty());
  EXPECT_NO_THROW(require_valid_weights(m));
}

TEST(WeightChecks, NaNAndInfAreCountedPerVariableAndNamed) {
  nn::Sequential m{nn::Input({4}), nn::Dense(3), nn::Dense(2)};
  m.layers()[0]->set_name("hidden");
  poke(m, "0.kernel", {{0, kNaN}, {3, kNaN}, {5, -kInf}});
  poke(m, "1.bias", {{1, kInf}});
  auto p = check_weights(m);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].layer, "hidden");
  EXPECT_EQ(p[0].variable, "kernel");
  EXPECT_EQ(p[0].key, "0.kernel");
  EXPECT_EQ(p[0].nan_count, 2);
  EXPECT_EQ(p[0].inf_count, 1);
  EXPECT_EQ(p[0].size, 12);
  EXPECT_EQ(p[0].message, "layer 'hidden', variable 'kernel': 2 NaN, 1 inf of 12 values");
  EXPECT_EQ(p[1].variable, "bias");
  EXPECT_EQ(p[1].inf_count, 1);
  EXPECT_EQ(p[1].nan_count, 0);
}

TEST(WeightChecks, NegativeMovingVarianceIsReported) {
  nn::Sequential m{nn::Input({4}), nn::BatchNormalization()};
  m.layers()[0]->set_name("bn");
  poke(m, "0.moving_variance", {{1, -0.5f}, {2, -2.0f}});
  auto p = check_weights(m);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].variable, "moving_variance");
  EXPECT_EQ(p[0].negative_count, 2);
  EXPECT_EQ(p[0].message, "layer 'bn', variable 'moving_variance': 2 negative (a variance must be >= 0) of 4 values");
  // Negative values elsewhere are ordinary weights.
  poke(m, "0.moving_variance", {{1, 1.0f}, {2, 1.0f}});
  poke(m, "0.moving_mean", {{0, -3.0f}});
  EXPECT_TRUE(check_weights(m).empty());
}

TEST(WeightChecks, NestedLayersAreNamedWithTheirPath) {
  auto inner = std::make_shared<nn::Sequential>(nn::Dense(3));
  inner->set_name("block");
  nn::Sequential m{nn::Input({4}), nn::ModuleRef(inner)};
  auto key = m.get_weights().begin()->first;  // "0.0.bias"
  poke(m, key, {{0, kNaN}});
  auto p = check_weights(m);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].key, key);
  EXPECT_EQ(p[0].layer.rfind("block/", 0), 0u) << p[0].layer;
}

TEST(WeightChecks, RequireValidWeightsListsEveryProblem) {
  nn::Sequential m{nn::Input({4}), nn::Dense(3), nn::BatchNormalization()};
  m.set_name("net");
  poke(m, "0.kernel", {{0, kNaN}});
  poke(m, "1.moving_variance", {{0, -1.0f}});
  std::string msg = error_of([&] { require_valid_weights(m, "load_model"); });
  EXPECT_EQ(msg.rfind("load_model: model 'net' has invalid weights: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("variable 'kernel': 1 NaN of 12 values"), std::string::npos) << msg;
  EXPECT_NE(msg.find("variable 'moving_variance': 1 negative"), std::string::npos) << msg;
}

TEST(WeightChecks, AModelLoadedFromAFileWithNaNIsReported) {
  nn::Sequential m{nn::Input({4}), nn::Dense(3)};
  poke(m, "0.kernel", {{2, kNaN}});
  const std::string path =
      (fs::temp_directory_path() / ("soma_weight_checks_" + std::to_string(::getpid()) + ".soma")).string();
  m.save(path);
  auto loaded = load_model(path);
  fs::remove(path);
  auto p = check_weights(*loaded);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].nan_count, 1);
}

TEST(WeightChecks, IntegerAndFloat64WeightsAreHandled) {
  nn::Sequential m{nn::Input({3}), nn::Dense(2, {.dtype = DType::f64})};
  auto w = m.get_weights();
  std::vector<double> v = w.at("0.kernel").to_vector<double>();
  v[0] = std::numeric_limits<double>::quiet_NaN();
  w["0.kernel"] = constant(v, w.at("0.kernel").shape()).cast(DType::f64);
  m.set_weights(w);
  auto p = check_weights(m);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].nan_count, 1);
}

}  // namespace
