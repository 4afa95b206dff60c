// Core layers and normalisation: forward passes against plain references, gradient checks (f64)
// w.r.t. inputs and every parameter, mode-dependent behaviour and error messages.
#include <cmath>
#include <functional>
#include <string>

#include "soma/nn/layers.hpp"
#include "soma/nn/normalization.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The message of the soma::Error thrown by f ("" if none was thrown).
using soma::testing::error_of;

// Tape gradients of L = sum(f() * w) w.r.t. each variable against central differences, found by
// assigning perturbed values to the variable.
::testing::AssertionResult check_param_gradients(const std::function<Tensor()>& f,
                                                 const std::vector<Variable>& params,
                                                 double eps = 1e-6, double tol = 1e-5) {
  std::vector<Tensor> grads;
  Tensor w;
  {
    GradientTape tape;
    Tensor y = f();
    w = rand_tensor(y.shape(), 4321, -1.0, 1.0, y.dtype());
    grads = tape.gradient(sum(y * w), params, UnconnectedGradients::Zero);
  }
  auto loss = [&] { return sum(f() * w).item<double>(); };
  for (std::size_t k = 0; k < params.size(); ++k) {
    Variable v = params[k];
    if (grads[k].shape() != v.shape())
      return ::testing::AssertionFailure() << "gradient of '" << v.name() << "' has shape "
                                           << shape_str(grads[k].shape());
    std::vector<double> orig = v.value().to_vector<double>();
    std::vector<double> g = grads[k].to_vector<double>();
    for (std::size_t j = 0; j < orig.size(); ++j) {
      auto shifted = [&](double d) {
        std::vector<double> p = orig;
        p[j] += d;
        v.assign(constant(p, v.shape()));
        return loss();
      };
      double num = (shifted(eps) - shifted(-eps)) / (2 * eps);
      v.assign(constant(orig, v.shape()));
      if (std::abs(num - g[j]) > tol * (1.0 + std::abs(num)))
        return ::testing::AssertionFailure() << "'" << v.name() << "' element " << j
                                             << ": tape gradient " << g[j]
                                             << " vs finite difference " << num;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult check_input_gradient(nn::Module& layer, const Tensor& x) {
  return check_gradients([&](const std::vector<Tensor>& in) { return layer(in[0]); }, {x});
}

const nn::DenseOptions kDense64{.dtype = DType::f64};

}  // namespace

// ---- Dense ----------------------------------------------------------------------------------

TEST(Dense, ForwardMatchesAPlainMatrixProductPlusBias) {
  nn::Dense d(3, {}, kDense64);
  Tensor x = rand_tensor({4, 2}, 1);
  d.build_for(x.shape());
  Variable b = d.bias();
  b.assign(constant({0.1, -0.2, 0.3}));
  auto xv = x.to_vector<double>(), kv = d.kernel().value().to_vector<double>();
  std::vector<double> ref(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = b.value().at<double>({j});
      for (int k = 0; k < 2; ++k) s += xv[i * 2 + k] * kv[k * 3 + j];
      ref[i * 3 + j] = s;
    }
  EXPECT_TRUE(all_close(d(x), ref, 1e-12));
}

TEST(Dense, AppliesItsActivation) {
  nn::Dense lin(3, {}, kDense64), act(3, "relu", kDense64);
  Tensor x = rand_tensor({5, 4}, 2);
  act.build_for(x.shape());
  lin.build_for(x.shape());
  lin.load_state_dict(act.state_dict());
  EXPECT_EQ(act.activation().name, "relu");
  EXPECT_TRUE(all_close(act(x), relu(lin(x)), 0, 0));
}

TEST(Dense, WorksOnTheLastAxisOfHigherRankInputs) {
  nn::Dense d(2, {}, kDense64);
  Tensor x = rand_tensor({3, 4, 5}, 3);
  Tensor y = d(x);
  EXPECT_EQ(y.shape(), (Shape{3, 4, 2}));
  EXPECT_TRUE(all_close(y[1], d(x[1]), 1e-12));
  EXPECT_EQ(d.output_shape({-1, 7, 5}), (Shape{-1, 7, 2}));
}

TEST(Dense, WithoutBiasHasOnlyAKernel) {
  nn::Dense d(4, {.use_bias = false});
  d.build_for({-1, 3});
  EXPECT_EQ(d.count_params(), 12);
  EXPECT_FALSE(d.bias().defined());
  EXPECT_EQ(d.type_name(), "Dense");
}

TEST(Dense, GradientsWrtInputKernelAndBias) {
  nn::Dense d(3, "tanh", kDense64);
  Tensor x = rand_tensor({4, 5}, 4);
  d.build_for(x.shape());
  EXPECT_TRUE(check_input_gradient(d, x));
  EXPECT_TRUE(check_param_gradients([&] { return d(x); }, d.parameters()));
}

TEST(Dense, CastsInputsToItsDtype) {
  nn::Dense d(2, {}, kDense64);
  EXPECT_EQ(d(ones({1, 3})).dtype(), DType::f64);
}

TEST(Dense, RejectsAWrongFeatureCountNamingTheShapes) {
  nn::Dense d(2);
  d.set_name("fc");
  d.build_for({-1, 3});
  std::string msg = error_of([&] { d(ones({4, 5})); });
  EXPECT_TRUE(contains(msg, "Dense: layer 'fc' expects inputs of shape [batch, ..., 3]")) << msg;
  EXPECT_TRUE(contains(msg, "got [4, 5]")) << msg;
}

TEST(Dense, RejectsRankOneInputs) {
  nn::Dense d(2);
  std::string msg = error_of([&] { d(ones({5})); });
  EXPECT_TRUE(contains(msg, "rank >= 2")) << msg;
  EXPECT_TRUE(contains(msg, "[5]")) << msg;
}

TEST(Dense, UnknownActivationNamesAreRejected) {
  std::string msg = error_of([] { nn::Dense(2, "relux"); });
  EXPECT_TRUE(contains(msg, "unknown activation 'relux'")) << msg;
}

TEST(Dense, RegularisersAddPenalties) {
  nn::Dense d(2, {}, {.kernel_initializer = nn::init::constant(0.5),
                      .kernel_regularizer = nn::regularizers::l1(0.1),
                      .dtype = DType::f64});
  d.build_for({-1, 3});
  auto losses = d.regularization_losses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_NEAR(losses[0].item<double>(), 0.1 * 6 * 0.5, 1e-12);
}

// ---- Flatten / Reshape ----------------------------------------------------------------------

TEST(Flatten, KeepsTheBatchAndJoinsTheRest) {
  nn::Flatten f;
  Tensor x = rand_tensor({2, 3, 4}, 5);
  Tensor y = f(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_TRUE(all_close(y, x.to_vector<double>(), 0, 0));
  EXPECT_EQ(f.output_shape({-1, 3, 4}), (Shape{-1, 12}));
  EXPECT_EQ(f(ones({5})).shape(), (Shape{5, 1}));
}

TEST(Reshape, ReshapesEachSampleAndFillsInMinusOne) {
  nn::Reshape r({-1, 2});
  Tensor x = rand_tensor({3, 4}, 6);
  Tensor y = r(x);
  EXPECT_EQ(y.shape(), (Shape{3, 2, 2}));
  EXPECT_TRUE(all_close(y, x.to_vector<double>(), 0, 0));
  EXPECT_EQ(r.output_shape({-1, 8}), (Shape{-1, 4, 2}));
}

TEST(Reshape, RejectsAnIncompatibleTarget) {
  nn::Reshape r({5});
  std::string msg = error_of([&] { r(ones({2, 4})); });
  EXPECT_TRUE(contains(msg, "Reshape")) << msg;
  EXPECT_TRUE(contains(msg, "cannot reshape samples of shape [4] (4 elements) to [5]")) << msg;
  EXPECT_THROW(nn::Reshape({-1, -1}), Error);
}

// ---- Dropout --------------------------------------------------------------------------------

TEST(Dropout, IsTheIdentityInEvalMode) {
  nn::Dropout d(0.5);
  d.eval();
  Tensor x = rand_tensor({10, 10}, 7);
  EXPECT_TRUE(all_close(d(x), x, 0, 0));
}

TEST(Dropout, ZeroesAboutRateOfEntriesAndScalesTheRest) {
  nn::Dropout d(0.3, 1);
  Tensor y = d(ones({200, 100}));
  auto v = y.to_vector<float>();
  int zeros_seen = 0;
  for (float e : v) {
    if (e == 0.0f) ++zeros_seen;
    else EXPECT_FLOAT_EQ(e, 1.0f / 0.7f);
  }
  EXPECT_NEAR(double(zeros_seen) / double(v.size()), 0.3, 0.01);
}

TEST(Dropout, IsReproducibleWithASeedAndChangesMaskEachCall) {
  nn::Dropout a(0.5, 9), b(0.5, 9);
  Tensor x = ones({8, 8});
  Tensor a1 = a(x), a2 = a(x);
  EXPECT_TRUE(all_close(a1, b(x), 0, 0));
  EXPECT_TRUE(all_close(a2, b(x), 0, 0));
  EXPECT_FALSE(all_close(a1, a2, 0, 0));
}

TEST(Dropout, GradientIsTheScaledMask) {
  nn::Dropout d(0.25, 3);
  Tensor x = rand_tensor({6, 6}, 8, 1.0, 2.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = d(x);
  Tensor g = tape.gradient(sum(y), x);
  EXPECT_TRUE(all_close(g, y / x, 1e-12));
}

TEST(Dropout, RateMustBeInZeroOne) {
  EXPECT_THROW(nn::Dropout(1.0), Error);
  EXPECT_THROW(nn::Dropout(-0.1), Error);
}

// ---- activation layers ----------------------------------------------------------------------

namespace {
void expect_elementwise(nn::Module& layer, const std::function<double(double)>& ref) {
  Tensor x = rand_tensor({3, 7}, 10, -3.0, 3.0);
  auto xv = x.to_vector<double>();
  std::vector<double> want;
  for (double v : xv) want.push_back(ref(v));
  EXPECT_TRUE(all_close(layer(x), want, 1e-12, 1e-12)) << layer.type_name();
  EXPECT_TRUE(check_input_gradient(layer, x)) << layer.type_name();
}
}  // namespace

TEST(ActivationLayers, ReLU) {
  nn::ReLU l;
  EXPECT_EQ(l.type_name(), "ReLU");
  expect_elementwise(l, [](double v) { return v > 0 ? v : 0.0; });
}

TEST(ActivationLayers, LeakyReLUDefaultsToKerasSlope) {
  nn::LeakyReLU l;
  EXPECT_DOUBLE_EQ(l.alpha(), 0.3);
  expect_elementwise(l, [](double v) { return v > 0 ? v : 0.3 * v; });
}

TEST(ActivationLayers, ELU) {
  nn::ELU l(0.7);
  expect_elementwise(l, [](double v) { return v > 0 ? v : 0.7 * (std::exp(v) - 1); });
}

TEST(ActivationLayers, GELU) {
  nn::GELU l;
  expect_elementwise(l, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); });
}

TEST(ActivationLayers, Sigmoid) {
  nn::Sigmoid l;
  expect_elementwise(l, [](double v) { return 1 / (1 + std::exp(-v)); });
}

TEST(ActivationLayers, Tanh) {
  nn::Tanh l;
  expect_elementwise(l, [](double v) { return std::tanh(v); });
}

TEST(ActivationLayers, GenericLayerByName) {
  nn::ActivationLayer l("softplus");
  EXPECT_EQ(l.type_name(), "Activation");
  expect_elementwise(l, [](double v) { return std::log1p(std::exp(v)); });
}

TEST(ActivationLayers, SoftmaxOnTheChosenAxis) {
  nn::Softmax l(0);
  Tensor x = rand_tensor({3, 2}, 11);
  auto xv = x.to_vector<double>();
  std::vector<double> want(6);
  for (int j = 0; j < 2; ++j) {
    double s = 0;
    for (int i = 0; i < 3; ++i) s += std::exp(xv[i * 2 + j]);
    for (int i = 0; i < 3; ++i) want[i * 2 + j] = std::exp(xv[i * 2 + j]) / s;
  }
  EXPECT_TRUE(all_close(l(x), want, 1e-12));
  EXPECT_TRUE(check_input_gradient(l, x));
}

TEST(ActivationLayers, StepIsHeavisideWithZeroGradient) {
  nn::Step l;
  Tensor x = constant({-2.0, -0.5, 0.0, 0.5, 3.0});
  EXPECT_TRUE(all_close(l(x), {0, 0, 1, 1, 1}, 0, 0));
  EXPECT_EQ(l(x).dtype(), DType::f64);
  GradientTape tape;
  tape.watch(x);
  Tensor y = l(x);
  EXPECT_TRUE(all_close(tape.gradient(sum(y), x, UnconnectedGradients::Zero), {0, 0, 0, 0, 0}, 0, 0));
}

// ---- Embedding ------------------------------------------------------------------------------

TEST(Embedding, LooksUpRowsOfTheTable) {
  nn::Embedding e(5, 3, {.dtype = DType::f64});
  Tensor idx = constant(std::vector<std::int64_t>{4, 0, 4, 2}, {2, 2});
  Tensor y = e(idx);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  Tensor table = e.embeddings().value();
  EXPECT_TRUE(all_close(y[0][0], table[4], 0, 0));
  EXPECT_TRUE(all_close(y[1][1], table[2], 0, 0));
  EXPECT_EQ(e.output_shape({-1, 7}), (Shape{-1, 7, 3}));
}

TEST(Embedding, DefaultTableIsUniformInPlusMinus005) {
  nn::Embedding e(100, 50);
  e.build_for({-1, 1});
  auto v = e.embeddings().value().to_vector<double>();
  for (double x : v) {
    ASSERT_LE(x, 0.05);
    ASSERT_GE(x, -0.05);
  }
}

TEST(Embedding, GradientFlowsToTheTableAndAddsRepeats) {
  nn::Embedding e(4, 3, {.dtype = DType::f64});
  Tensor idx = constant(std::vector<std::int32_t>{1, 3, 1, 1}, {4});
  e.build_for(idx.shape());
  EXPECT_TRUE(check_param_gradients([&] { return e(idx); }, e.parameters()));
  GradientTape tape;
  Tensor g = tape.gradient(sum(e(idx)), e.embeddings());
  EXPECT_TRUE(all_close(g, {0, 0, 0, 3, 3, 3, 0, 0, 0, 1, 1, 1}, 0, 0));
}

TEST(Embedding, AcceptsFloatingIndices) {
  nn::Embedding e(3, 2, {.dtype = DType::f64});
  Tensor y = e(constant({2.0, 1.0}));
  EXPECT_TRUE(all_close(y[0], e.embeddings().value()[2], 0, 0));
}

TEST(Embedding, RejectsIndicesOutOfRange) {
  nn::Embedding e(3, 2);
  e.set_name("emb");
  std::string msg = error_of([&] { e(constant(std::vector<std::int64_t>{0, 3}, {2})); });
  EXPECT_TRUE(contains(msg, "Embedding: layer 'emb': index 3 is out of range for input_dim 3"))
      << msg;
  msg = error_of([&] { e(constant(std::vector<std::int64_t>{-1}, {1})); });
  EXPECT_TRUE(contains(msg, "index -1")) << msg;
}

// ---- BatchNormalization ---------------------------------------------------------------------

namespace {
nn::BatchNormOptions bn64(std::int64_t axis = -1) {
  return {.axis = axis, .dtype = DType::f64};
}
// Gives gamma and beta values other than ones/zeros so the checks see them.
void perturb_affine(nn::BatchNormalization& bn, std::int64_t c) {
  Variable g = bn.gamma(), b = bn.beta();
  g.assign(rand_tensor({c}, 50, 0.5, 1.5));
  b.assign(rand_tensor({c}, 51));
}
}  // namespace

TEST(BatchNormalization, TrainingNormalisesWithBiasedBatchStatistics) {
  nn::BatchNormalization bn(bn64());
  Tensor x = rand_tensor({6, 3}, 12, -2.0, 2.0);
  bn.build_for(x.shape());
  perturb_affine(bn, 3);
  auto xv = x.to_vector<double>();
  auto gv = bn.gamma().value().to_vector<double>(), bv = bn.beta().value().to_vector<double>();
  std::vector<double> want(18);
  for (int j = 0; j < 3; ++j) {
    double m = 0, v = 0;
    for (int i = 0; i < 6; ++i) m += xv[i * 3 + j] / 6;
    for (int i = 0; i < 6; ++i) v += (xv[i * 3 + j] - m) * (xv[i * 3 + j] - m) / 6;
    for (int i = 0; i < 6; ++i)
      want[i * 3 + j] = gv[j] * (xv[i * 3 + j] - m) / std::sqrt(v + 1e-3) + bv[j];
  }
  EXPECT_TRUE(all_close(bn(x), want, 1e-12));
}

TEST(BatchNormalization, OneTrainingStepMovesTheStatisticsByMomentum) {
  nn::BatchNormalization bn({.momentum = 0.9, .dtype = DType::f64});
  Tensor x = rand_tensor({8, 2}, 13, 0.0, 4.0);
  bn(x);
  Tensor m = mean(x, {0}), v = variance(x, {0});  // variance() is the biased one
  EXPECT_TRUE(all_close(bn.moving_mean().value(), m * 0.1, 1e-12));
  EXPECT_TRUE(all_close(bn.moving_variance().value(), v * 0.1 + 0.9, 1e-12));
}

TEST(BatchNormalization, DefaultMomentumIs099) {
  nn::BatchNormalization bn(bn64());
  Tensor x = rand_tensor({8, 2}, 14, 0.0, 4.0);
  bn(x);
  EXPECT_TRUE(all_close(bn.moving_mean().value(), mean(x, {0}) * 0.01, 1e-12));
}

TEST(BatchNormalization, EvalUsesTheMovingStatisticsAndLeavesThemAlone) {
  nn::BatchNormalization bn(bn64());
  Tensor x = rand_tensor({4, 2}, 15);
  bn.build_for(x.shape());
  perturb_affine(bn, 2);
  Variable mm = bn.moving_mean(), mv = bn.moving_variance();
  mm.assign(constant({0.5, -1.0}));
  mv.assign(constant({2.0, 0.25}));
  bn.eval();
  auto xv = x.to_vector<double>();
  auto gv = bn.gamma().value().to_vector<double>(), bv = bn.beta().value().to_vector<double>();
  double m[2] = {0.5, -1.0}, v[2] = {2.0, 0.25};
  std::vector<double> want(8);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      want[i * 2 + j] = gv[j] * (xv[i * 2 + j] - m[j]) / std::sqrt(v[j] + 1e-3) + bv[j];
  EXPECT_TRUE(all_close(bn(x), want, 1e-12));
  EXPECT_TRUE(all_close(bn.moving_mean().value(), {0.5, -1.0}, 0, 0));
}

TEST(BatchNormalization, ChannelAxisOneNormalisesNCHWPerChannel) {
  nn::BatchNormalization bn(bn64(1));
  Tensor x = rand_tensor({2, 3, 4, 5}, 16, -3.0, 3.0);
  Tensor y = bn(x);
  EXPECT_EQ(bn.gamma().shape(), (Shape{3}));
  Tensor m = mean(y, {0, 2, 3}), v = variance(y, {0, 2, 3});
  EXPECT_TRUE(all_close(m, {0, 0, 0}, 1e-12));
  // Var of the normalised values is var / (var + eps), just under 1.
  Tensor vx = variance(x, {0, 2, 3});
  EXPECT_TRUE(all_close(v, vx / (vx + 1e-3), 1e-10));
}

TEST(BatchNormalization, GradientsInTrainingMode) {
  nn::BatchNormalization bn(bn64());
  Tensor x = rand_tensor({5, 3}, 17, -2.0, 2.0);
  bn.build_for(x.shape());
  perturb_affine(bn, 3);
  EXPECT_TRUE(check_input_gradient(bn, x));
  EXPECT_TRUE(check_param_gradients([&] { return bn(x); }, bn.trainable_parameters()));
}

TEST(BatchNormalization, GradientsInEvalMode) {
  nn::BatchNormalization bn(bn64(1));
  Tensor x = rand_tensor({2, 3, 2, 2}, 18, -2.0, 2.0);
  bn(x);  // one training step so the moving statistics are not trivial
  perturb_affine(bn, 3);
  bn.eval();
  EXPECT_TRUE(check_input_gradient(bn, x));
  EXPECT_TRUE(check_param_gradients([&] { return bn(x); }, bn.trainable_parameters()));
}

TEST(BatchNormalization, WeightsFollowKerasOrderAndTrainability) {
  nn::BatchNormalization bn;
  bn.build_for({-1, 4});
  std::vector<std::string> names;
  for (auto& [n, v] : bn.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"gamma", "beta", "moving_mean", "moving_variance"}));
  EXPECT_EQ(bn.trainable_parameters().size(), 2u);
  EXPECT_EQ(bn.non_trainable_parameters().size(), 2u);
  EXPECT_EQ(bn.count_params(), 16);
}

TEST(BatchNormalization, WithoutCenterAndScaleHasOnlyMovingStatistics) {
  nn::BatchNormalization bn({.center = false, .scale = false});
  bn.build_for({-1, 4});
  EXPECT_TRUE(bn.trainable_parameters().empty());
  EXPECT_EQ(bn.non_trainable_parameters().size(), 2u);
}

TEST(BatchNormalization, RejectsAWrongFeatureCount) {
  nn::BatchNormalization bn;
  bn.build_for({-1, 4});
  std::string msg = error_of([&] { bn(ones({2, 5})); });
  EXPECT_TRUE(contains(msg, "BatchNormalization")) << msg;
  EXPECT_TRUE(contains(msg, "with 4 features on axis 1, got shape [2, 5]")) << msg;
}

// ---- LayerNormalization ---------------------------------------------------------------------

TEST(LayerNormalization, NormalisesEachSampleOverTheLastAxis) {
  nn::LayerNormalization ln({.dtype = DType::f64});
  Tensor x = rand_tensor({3, 4}, 19, -2.0, 2.0);
  ln.build_for(x.shape());
  Variable g = ln.gamma(), b = ln.beta();
  g.assign(rand_tensor({4}, 52, 0.5, 1.5));
  b.assign(rand_tensor({4}, 53));
  auto xv = x.to_vector<double>();
  auto gv = g.value().to_vector<double>(), bv = b.value().to_vector<double>();
  std::vector<double> want(12);
  for (int i = 0; i < 3; ++i) {
    double m = 0, v = 0;
    for (int j = 0; j < 4; ++j) m += xv[i * 4 + j] / 4;
    for (int j = 0; j < 4; ++j) v += (xv[i * 4 + j] - m) * (xv[i * 4 + j] - m) / 4;
    for (int j = 0; j < 4; ++j)
      want[i * 4 + j] = gv[j] * (xv[i * 4 + j] - m) / std::sqrt(v + 1e-3) + bv[j];
  }
  EXPECT_TRUE(all_close(ln(x), want, 1e-12));
}

TEST(LayerNormalization, SeveralAxesShareOneNormalisation) {
  nn::LayerNormalization ln({.axis = {-2, -1}, .dtype = DType::f64});
  Tensor x = rand_tensor({2, 3, 4}, 20, -2.0, 2.0);
  Tensor y = ln(x);
  EXPECT_EQ(ln.gamma().shape(), (Shape{3, 4}));
  Tensor m = mean(y, {1, 2}), v = variance(y, {1, 2});
  Tensor vx = variance(x, {1, 2});
  EXPECT_TRUE(all_close(m, {0, 0}, 1e-12));
  EXPECT_TRUE(all_close(v, vx / (vx + 1e-3), 1e-10));
}

TEST(LayerNormalization, GradientsWrtInputGammaAndBeta) {
  nn::LayerNormalization ln({.axis = {-2, -1}, .dtype = DType::f64});
  Tensor x = rand_tensor({2, 2, 3}, 21, -2.0, 2.0);
  ln.build_for(x.shape());
  Variable g = ln.gamma();
  g.assign(rand_tensor({2, 3}, 54, 0.5, 1.5));
  EXPECT_TRUE(check_input_gradient(ln, x));
  EXPECT_TRUE(check_param_gradients([&] { return ln(x); }, ln.parameters()));
}

TEST(LayerNormalization, RejectsAShapeOtherThanTheBuiltOne) {
  nn::LayerNormalization ln;
  ln.build_for({-1, 4});
  std::string msg = error_of([&] { ln(ones({2, 3})); });
  EXPECT_TRUE(contains(msg, "LayerNormalization")) << msg;
  EXPECT_TRUE(contains(msg, "got [2, 3]")) << msg;
}

TEST(BatchNormalization, AFrozenLayerRunsInInferenceModeEvenWhileTraining) {
  nn::BatchNormalization bn(bn64());
  Tensor x = rand_tensor({4, 2}, 22, 1.0, 3.0);
  bn.build_for(x.shape());
  bn.set_trainable(false);
  Tensor y = bn(x);
  EXPECT_TRUE(all_close(bn.moving_mean().value(), {0, 0}, 0, 0));
  EXPECT_TRUE(all_close(y, x / std::sqrt(1.0 + 1e-3), 1e-12));
}
