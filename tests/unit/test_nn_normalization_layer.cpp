// nn::Normalization, the Keras-style preprocessing layer: adapt() statistics against naive f64
// references, forward (per feature, global, NCHW channels), gradient, state, files, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <unistd.h>

#include "soma/data/dataset.hpp"
#include "soma/model/serialization.hpp"
#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;

namespace {

using soma::testing::error_of;
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Data with a different offset and scale per column, so per-feature statistics differ.
Tensor skewed(const Shape& shape, std::uint64_t seed) {
  Tensor x = rand_tensor(shape, seed);
  std::int64_t f = shape.back();
  Tensor scale = arange(1.0, double(f) + 1.0, 1.0, DType::f64);
  return x * scale + scale * 3.0;
}

// Naive population mean / variance of each index of `kept` (axes kept), in f64.
struct Stats {
  std::vector<double> mean, var;
};
Stats naive_stats(const Tensor& x, const std::vector<int>& kept) {
  Shape s = x.shape();
  std::vector<double> v = x.to_vector<double>();
  Shape ks;
  for (int a : kept) ks.push_back(s[std::size_t(a)]);
  std::int64_t k = numel(ks);
  std::vector<double> sum(std::size_t(k), 0.0), sq(std::size_t(k), 0.0), n(std::size_t(k), 0.0);
  auto key = [&](std::int64_t i) {
    auto idx = soma::testing::unravel(i, s);
    std::vector<std::int64_t> kidx;
    for (int a : kept) kidx.push_back(idx[std::size_t(a)]);
    return kept.empty() ? 0 : soma::testing::ravel(kidx, ks);
  };
  for (std::int64_t i = 0; i < std::int64_t(v.size()); ++i) {
    sum[std::size_t(key(i))] += v[std::size_t(i)];
    n[std::size_t(key(i))] += 1;
  }
  Stats st;
  for (std::int64_t j = 0; j < k; ++j) st.mean.push_back(sum[std::size_t(j)] / n[std::size_t(j)]);
  for (std::int64_t i = 0; i < std::int64_t(v.size()); ++i) {
    double d = v[std::size_t(i)] - st.mean[std::size_t(key(i))];
    sq[std::size_t(key(i))] += d * d;
  }
  for (std::int64_t j = 0; j < k; ++j) st.var.push_back(sq[std::size_t(j)] / n[std::size_t(j)]);
  return st;
}

// Naive forward: (x - mean[k]) / max(sqrt(var[k]), 1e-7).
std::vector<double> naive_forward(const Tensor& x, const std::vector<int>& kept, const Stats& st) {
  Shape s = x.shape();
  Shape ks;
  for (int a : kept) ks.push_back(s[std::size_t(a)]);
  std::vector<double> v = x.to_vector<double>(), out;
  for (std::int64_t i = 0; i < std::int64_t(v.size()); ++i) {
    auto idx = soma::testing::unravel(i, s);
    std::vector<std::int64_t> kidx;
    for (int a : kept) kidx.push_back(idx[std::size_t(a)]);
    std::size_t j = kept.empty() ? 0 : std::size_t(soma::testing::ravel(kidx, ks));
    out.push_back((v[std::size_t(i)] - st.mean[j]) / std::max(std::sqrt(st.var[j]), 1e-7));
  }
  return out;
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("soma_norm_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

}  // namespace

// ---- adapt and forward against naive references ------------------------------------------------

TEST(NormalizationLayer, PerFeatureAdaptMatchesNaiveF64Statistics) {
  Tensor x = skewed({40, 5}, 1);
  nn::Normalization norm({.dtype = DType::f64});
  norm.adapt(x);
  Stats st = naive_stats(x, {1});
  EXPECT_TRUE(all_close(norm.mean(), st.mean, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(norm.variance(), st.var, 1e-12, 1e-12));
  EXPECT_EQ(norm.count(), 40);
  EXPECT_EQ(norm.mean().shape(), (Shape{5}));
}

TEST(NormalizationLayer, PerFeatureForwardMatchesNaiveReference) {
  Tensor x = skewed({40, 5}, 2);
  nn::Normalization norm({.dtype = DType::f64});
  norm.adapt(x);
  Tensor probe = skewed({7, 5}, 3);
  EXPECT_TRUE(all_close(norm(probe), naive_forward(probe, {1}, naive_stats(x, {1})), 1e-12, 1e-12));
}

TEST(NormalizationLayer, KerasPerFeatureExample) {
  // Keras' documented example: every column of [0, 7, 4] lies one standard deviation below.
  Tensor data = constant<float>({{0, 7, 4}, {2, 9, 6}, {0, 7, 4}, {2, 9, 6}});
  nn::Normalization norm;
  norm.adapt(data);
  EXPECT_TRUE(all_close(norm(constant<float>({{0, 7, 4}})), {-1.0, -1.0, -1.0}, 1e-6));
}

TEST(NormalizationLayer, GlobalAxisGivesOneMeanAndVariance) {
  // Keras' axis=None example: adapt on [1..5] (mean 3, variance 2).
  for (auto axis : {std::optional<Axes>{}, std::optional<Axes>{Axes{}}}) {
    nn::Normalization norm({.axis = axis});
    norm.adapt(constant<float>({1, 2, 3, 4, 5}));
    EXPECT_EQ(norm.mean().rank(), 0);
    EXPECT_NEAR(norm.mean().item<double>(), 3.0, 1e-12);
    EXPECT_NEAR(norm.variance().item<double>(), 2.0, 1e-6);
    EXPECT_TRUE(all_close(norm(constant<float>({1, 2, 3})), {-1.4142135, -0.70710677, 0.0}, 1e-6));
  }
}

TEST(NormalizationLayer, GlobalForwardOnImagesMatchesNaiveReference) {
  Tensor x = rand_tensor({6, 4, 5}, 4, 0.0, 3.0);
  nn::Normalization norm({.axis = std::nullopt, .dtype = DType::f64});
  norm.adapt(x);
  Stats st = naive_stats(x, {});
  EXPECT_NEAR(norm.mean().item<double>(), st.mean[0], 1e-12);
  EXPECT_NEAR(norm.variance().item<double>(), st.var[0], 1e-12);
  EXPECT_EQ(norm.count(), 120);
  Tensor probe = rand_tensor({2, 4, 5}, 5, 0.0, 3.0);
  EXPECT_TRUE(all_close(norm(probe), naive_forward(probe, {}, st), 1e-12, 1e-12));
}

TEST(NormalizationLayer, NchwChannelAxisOneMatchesNaiveReference) {
  Tensor x = rand_tensor({6, 3, 4, 5}, 6, 0.0, 1.0) *
             reshape(constant<double>({1.0, 5.0, 20.0}), {1, 3, 1, 1});
  nn::Normalization norm({.axis = Axes{1}, .dtype = DType::f64});
  norm.adapt(x);
  Stats st = naive_stats(x, {1});
  EXPECT_EQ(norm.mean().shape(), (Shape{3}));
  EXPECT_TRUE(all_close(norm.mean(), st.mean, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(norm.variance(), st.var, 1e-12, 1e-12));
  EXPECT_EQ(norm.count(), 6 * 4 * 5);
  Tensor probe = rand_tensor({2, 3, 4, 5}, 7);
  EXPECT_TRUE(all_close(norm(probe), naive_forward(probe, {1}, st), 1e-12, 1e-12));
}

TEST(NormalizationLayer, SeveralKeptAxesMatchNaiveReference) {
  Tensor x = rand_tensor({5, 2, 3, 4}, 8, -2.0, 5.0);
  nn::Normalization norm({.axis = Axes{1, -1}, .dtype = DType::f64});
  norm.adapt(x);
  Stats st = naive_stats(x, {1, 3});
  EXPECT_EQ(norm.mean().shape(), (Shape{2, 4}));
  EXPECT_TRUE(all_close(norm.variance(), st.var, 1e-12, 1e-12));
  Tensor probe = rand_tensor({3, 2, 3, 4}, 9);
  EXPECT_TRUE(all_close(norm(probe), naive_forward(probe, {1, 3}, st), 1e-12, 1e-12));
}

TEST(NormalizationLayer, AdaptInChunksOfF32DataMatchesNaiveF64) {
  // 2.1M values: adapt() reads them in several chunks and merges the chunks' moments.
  Tensor x = (rand_tensor({3000, 700}, 10, 0.0, 255.0, DType::f32) + 1000.0);
  nn::Normalization norm({.axis = std::nullopt});
  norm.adapt(x);
  Stats st = naive_stats(x, {});
  EXPECT_NEAR(norm.mean().item<double>(), st.mean[0], 1e-9 * st.mean[0] + 1e-4);
  EXPECT_NEAR(norm.variance().item<double>(), st.var[0], 1e-5 * st.var[0]);
  EXPECT_EQ(norm.count(), 3000 * 700);
}

TEST(NormalizationLayer, AdaptFromDatasetOfBatchesEqualsAdaptFromTensor) {
  Tensor x = skewed({23, 4}, 11);
  Tensor y = zeros({23});
  nn::Normalization a({.dtype = DType::f64}), b({.dtype = DType::f64});
  a.adapt(x);
  b.adapt(data::Dataset::from_tensor_slices({x, y}).batch(5));
  EXPECT_TRUE(all_close(b.mean(), a.mean(), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(b.variance(), a.variance(), 1e-12, 1e-12));
  EXPECT_EQ(b.count(), 23);
}

TEST(NormalizationLayer, AdaptAgainReplacesTheStatistics) {
  nn::Normalization norm({.axis = std::nullopt});
  norm.adapt(constant<float>({1, 2, 3}));
  norm.adapt(constant<float>({10, 20}));
  EXPECT_NEAR(norm.mean().item<double>(), 15.0, 1e-6);
  EXPECT_EQ(norm.count(), 2);
}

TEST(NormalizationLayer, GivenMeanAndVarianceNeedNoAdaptAndAreNoWeights) {
  nn::Normalization norm({.mean = {1, 2, 3}, .variance = {4, 9, 16}, .dtype = DType::f64});
  Tensor y = norm(constant<double>({{3, 2, 7}}));
  EXPECT_TRUE(all_close(y, {1.0, 0.0, 1.0}));
  EXPECT_EQ(norm.count_params(), 0);
  nn::Normalization scalar_stats({.mean = {2}, .variance = {4}});
  EXPECT_TRUE(all_close(scalar_stats(constant<float>({{4, 0}})), {1.0, -1.0}));
}

TEST(NormalizationLayer, InvertUndoesTheNormalisation) {
  Tensor x = skewed({30, 3}, 12);
  nn::Normalization norm({.dtype = DType::f64});
  norm.adapt(x);
  nn::Normalization inv({.invert = true, .dtype = DType::f64});
  inv.adapt(x);
  EXPECT_TRUE(all_close(inv(norm(x)), x, 1e-10, 1e-10));
}

TEST(NormalizationLayer, ZeroVarianceDividesByKerasEpsilon) {
  nn::Normalization norm({.dtype = DType::f64});
  norm.adapt(constant<double>({{5, 1}, {5, 3}}));  // column 0 constant
  Tensor y = norm(constant<double>({{5.5, 2}}));
  EXPECT_TRUE(all_close(y, {0.5 / 1e-7, 0.0}, 1e-6, 1e-9));
}

TEST(NormalizationLayer, GradientFlowsToTheInput) {
  nn::Normalization norm({.axis = Axes{1}, .dtype = DType::f64});
  norm.adapt(rand_tensor({8, 3, 2}, 13, 0.0, 4.0));
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return norm(in[0]); },
                              {rand_tensor({2, 3, 2}, 14)}));
  nn::Normalization inv({.axis = std::nullopt, .invert = true, .dtype = DType::f64});
  inv.adapt(rand_tensor({8, 3}, 15, 0.0, 4.0));
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return inv(in[0]); },
                              {rand_tensor({2, 3}, 16)}));
}

TEST(NormalizationLayer, StatisticsAreNotTrainedByFit) {
  Tensor x = skewed({64, 3}, 17);
  Tensor y = sum(x, {1}, true) * 0.01;
  auto norm = std::make_shared<nn::Normalization>();
  norm->adapt(x);
  Tensor before = copy(norm->mean());
  nn::Sequential model{norm, nn::Dense(1)};
  model.compile(optim::Adam({.learning_rate = 1e-2}), nn::MeanSquaredError());
  model.fit(x, y, {.epochs = 2, .batch_size = 16, .verbose = 0});
  EXPECT_TRUE(all_close(norm->mean(), before, 0.0, 0.0));
  EXPECT_EQ(model.trainable_parameters().size(), 2u);
}

TEST(NormalizationLayer, TrainsTheSameThroughAJitTracedStep) {
  Tensor x = skewed({64, 3}, 22);
  Tensor y = sum(x, {1}, true) * 0.01;
  auto run = [&](bool jit) {
    set_seed(5);
    auto norm = std::make_shared<nn::Normalization>();
    norm->adapt(x);
    nn::Sequential model{nn::Input({3}), norm, nn::Dense(1)};
    model.compile(optim::Adam({.learning_rate = 1e-2}), nn::MeanSquaredError(), {},
                  {.jit = jit});
    model.fit(x, y, {.epochs = 2, .batch_size = 16, .verbose = 0, .seed = 1});
    return model.predict(x);
  };
  EXPECT_TRUE(all_close(run(true), run(false), 1e-5, 1e-5));
}

// ---- state: copies, state_dict, model files, configs, summary -------------------------------

TEST(NormalizationLayer, CopyOfAnAdaptedLayerKeepsItsStatistics) {
  Tensor x = skewed({20, 4}, 18);
  nn::Normalization norm;
  norm.adapt(x);
  Tensor mean = copy(norm.mean()), var = copy(norm.variance());
  nn::Sequential model{std::move(norm), nn::Dense(2)};  // Module has no move: this copies
  auto* inside = dynamic_cast<nn::Normalization*>(model.layer(0).get());
  ASSERT_NE(inside, nullptr);
  model(x);
  EXPECT_TRUE(all_close(inside->mean(), mean, 0.0, 0.0));
  EXPECT_TRUE(all_close(inside->variance(), var, 0.0, 0.0));
  EXPECT_EQ(inside->count(), 20);
}

TEST(NormalizationLayer, StateDictHoldsMeanVarianceAndCountAndRoundTrips) {
  Tensor x = skewed({20, 4}, 19);
  nn::Normalization norm;
  norm.adapt(x);
  auto sd = norm.state_dict();
  ASSERT_EQ(sd.size(), 3u);
  EXPECT_EQ(sd.at("mean").shape(), (Shape{4}));
  EXPECT_EQ(sd.at("variance").shape(), (Shape{4}));
  EXPECT_EQ(sd.at("count").dtype(), DType::i64);
  EXPECT_EQ(sd.at("count").item<std::int64_t>(), 20);

  nn::Normalization fresh;
  fresh.build_for({-1, 4});
  EXPECT_FALSE(fresh.has_statistics());
  fresh.load_state_dict(sd);
  EXPECT_TRUE(fresh.has_statistics());
  Tensor probe = skewed({3, 4}, 20);
  EXPECT_TRUE(all_close(fresh(probe), norm(probe), 0.0, 0.0));
}

TEST(NormalizationLayer, ModelFileRoundTripKeepsStatisticsAndPredictions) {
  Tensor x = skewed({32, 6}, 21);
  auto norm = std::make_shared<nn::Normalization>(nn::NormalizationOptions{.axis = std::nullopt});
  norm->adapt(x);
  nn::Sequential model{nn::Input({6}), norm, nn::Dense(3)};
  Tensor want = model.predict(x);
  std::string path = temp_file("model.soma");
  model.save(path);
  auto loaded = load_model(path);
  std::filesystem::remove(path);
  auto* seq = dynamic_cast<nn::Sequential*>(loaded.get());
  ASSERT_NE(seq, nullptr);
  auto* ln = dynamic_cast<nn::Normalization*>(seq->layer(0).get());
  ASSERT_NE(ln, nullptr);
  EXPECT_FALSE(ln->options().axis.has_value());
  EXPECT_TRUE(all_close(ln->mean(), norm->mean(), 0.0, 0.0));
  EXPECT_TRUE(all_close(ln->variance(), norm->variance(), 0.0, 0.0));
  EXPECT_EQ(ln->count(), 32 * 6);
  EXPECT_TRUE(all_close(loaded->predict(x), want, 0.0, 0.0));
}

TEST(NormalizationLayer, ConfigRoundTripKeepsOptions) {
  nn::Normalization norm({.axis = Axes{1, 2}, .mean = {1, 2}, .variance = {3, 4}, .invert = true,
                          .dtype = DType::f64});
  std::string cfg = serialization::layer_config(norm);
  EXPECT_TRUE(contains(cfg, "\"Normalization\"")) << cfg;
  nn::ModuleRef back = serialization::layer_from_config(cfg);
  auto* n = dynamic_cast<nn::Normalization*>(back.get());
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->options().axis, (std::optional<Axes>{Axes{1, 2}}));
  EXPECT_EQ(n->options().mean, (std::vector<double>{1, 2}));
  EXPECT_EQ(n->options().variance, (std::vector<double>{3, 4}));
  EXPECT_TRUE(n->options().invert);
  EXPECT_EQ(n->options().dtype, DType::f64);
  nn::Normalization global({.axis = std::nullopt});
  auto g = serialization::layer_from_config(serialization::layer_config(global));
  EXPECT_FALSE(dynamic_cast<nn::Normalization&>(*g).options().axis.has_value());
}

TEST(NormalizationLayer, KerasConfigWithAnIntegerAxisLoads) {
  auto m = serialization::layer_from_config(
      R"({"class_name": "Normalization", "config": {"name": "norm", "axis": -1, "mean": null,)"
      R"( "variance": null, "invert": false}})");
  auto& n = dynamic_cast<nn::Normalization&>(*m);
  EXPECT_EQ(n.options().axis, (std::optional<Axes>{Axes{-1}}));
  EXPECT_TRUE(n.options().mean.empty());
  EXPECT_EQ(n.options().dtype, DType::f32);
}

TEST(NormalizationLayer, SummaryCountsMeanVarianceAndCountAsNonTrainable) {
  auto norm = std::make_shared<nn::Normalization>();
  norm->adapt(zeros({2, 784}));
  nn::Sequential model{nn::Input({784}), norm, nn::Dense(10)};
  std::ostringstream os;
  model.summary(os);
  const std::string s = os.str();
  EXPECT_TRUE(contains(s, "(Normalization)")) << s;
  EXPECT_TRUE(contains(s, "1,569")) << s;  // 2 * 784 + 1, as Keras
  EXPECT_TRUE(contains(s, "Non-trainable params: 1,569")) << s;
  EXPECT_TRUE(contains(s, "Trainable params: 7,850")) << s;

  nn::Normalization global({.axis = std::nullopt});
  global.adapt(zeros({2, 28, 28}));
  EXPECT_EQ(global.count_params(), 3);
}

TEST(NormalizationLayer, OnnxExportRoundTripGivesTheSamePredictions) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  Tensor x = rand_tensor({10, 3, 4, 4}, 23, 0.0, 2.0, DType::f32);
  for (auto axis : {std::optional<Axes>{}, std::optional<Axes>{Axes{1}}}) {
    for (bool invert : {false, true}) {
      auto norm = std::make_shared<nn::Normalization>(
          nn::NormalizationOptions{.axis = axis, .invert = invert});
      norm->adapt(x);
      nn::Sequential model{nn::Input({3, 4, 4}), norm, nn::Flatten(), nn::Dense(2)};
      Tensor want = model.predict(x);
      auto back = onnx::load_from_bytes(onnx::export_to_bytes(model));
      EXPECT_TRUE(all_close(back->predict(x), want, 1e-5, 1e-5))
          << "axis " << (axis ? "{1}" : "nullopt") << " invert " << invert;
    }
  }
}

// ---- errors -------------------------------------------------------------------------------

TEST(NormalizationLayer, CallingBeforeAdaptNamesTheFix) {
  nn::Normalization norm;
  std::string e = error_of([&] { norm(zeros({2, 3})); });
  EXPECT_TRUE(contains(e, "Normalization")) << e;
  EXPECT_TRUE(contains(e, "call adapt(data)")) << e;
}

TEST(NormalizationLayer, WrongFeatureSizeNamesTheShapes) {
  nn::Normalization norm;
  norm.adapt(zeros({4, 3}));
  std::string e = error_of([&] { norm(zeros({2, 5})); });
  EXPECT_TRUE(contains(e, "Normalization")) << e;
  EXPECT_TRUE(contains(e, "statistics of shape [3]")) << e;
  EXPECT_TRUE(contains(e, "got shape [2, 5]")) << e;
  e = error_of([&] { norm.adapt(zeros({4, 7})); });
  EXPECT_TRUE(contains(e, "Normalization.adapt")) << e;
  EXPECT_TRUE(contains(e, "got shape [4, 7]")) << e;
}

TEST(NormalizationLayer, BadOptionsAndDataAreErrors) {
  std::string e = error_of([] { nn::Normalization({.mean = {1, 2}}); });
  EXPECT_TRUE(contains(e, "both mean and variance")) << e;
  e = error_of([] { nn::Normalization({.mean = {1}, .variance = {-1}}); });
  EXPECT_TRUE(contains(e, "variance must be >= 0")) << e;
  e = error_of([] { nn::Normalization({.dtype = DType::i32}); });
  EXPECT_TRUE(contains(e, "dtype must be floating")) << e;

  nn::Normalization sized({.mean = {1, 2}, .variance = {1, 1}});
  e = error_of([&] { sized(zeros({2, 3})); });
  EXPECT_TRUE(contains(e, "mean has 2 values; expected 1 or 3")) << e;

  nn::Normalization batch_axis({.axis = Axes{0}});
  e = error_of([&] { batch_axis.adapt(zeros({4, 3})); });
  EXPECT_TRUE(contains(e, "axis 0 is the batch axis")) << e;

  nn::Normalization rank1;
  e = error_of([&] { rank1.adapt(zeros({4})); });
  EXPECT_TRUE(contains(e, "axis = std::nullopt")) << e;

  nn::Normalization given({.mean = {0}, .variance = {1}});
  e = error_of([&] { given.adapt(zeros({4, 3})); });
  EXPECT_TRUE(contains(e, "adapt() cannot replace them")) << e;

  nn::Normalization empty;
  e = error_of([&] { empty.adapt(zeros({0, 3})); });
  EXPECT_TRUE(contains(e, "no data")) << e;
}
