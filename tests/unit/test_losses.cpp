// Losses: each against a naive double-precision reference, sample weights and reductions,
// from_logits agreeing with probabilities, stability for huge logits, label smoothing, gradient
// checks in f64, and error messages.
#include <cmath>
#include <string>
#include <vector>

#include "soma/nn/losses.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

using namespace soma;
using nn::Reduction;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;

namespace {

using Rows = std::vector<std::vector<double>>;

Rows rows(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  std::int64_t c = t.dim(-1), r = t.numel() / c;
  Rows out(static_cast<std::size_t>(r), std::vector<double>(static_cast<std::size_t>(c)));
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j)
      out[std::size_t(i)][std::size_t(j)] = v[std::size_t(i * c + j)];
  return out;
}

// Per-sample references, written plainly.
template <class F>
std::vector<double> per_row(const Tensor& t, const Tensor& p, F f) {
  Rows a = rows(t), b = rows(p);
  std::vector<double> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double s = 0;
    for (std::size_t j = 0; j < a[i].size(); ++j) s += f(a[i][j], b[i][j]);
    out.push_back(s / double(a[i].size()));
  }
  return out;
}

double clipp(double p) { return std::min(std::max(p, 1e-7), 1 - 1e-7); }
double sigmoid_d(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<double> ref_mse(const Tensor& t, const Tensor& p) {
  return per_row(t, p, [](double a, double b) { return (b - a) * (b - a); });
}
std::vector<double> ref_bce(const Tensor& t, const Tensor& p) {
  return per_row(t, p, [](double z, double q) {
    q = clipp(q);
    return -(z * std::log(q) + (1 - z) * std::log(1 - q));
  });
}
std::vector<double> ref_cce(const Tensor& t, const Tensor& p) {
  Rows y = rows(t), q = rows(p);
  std::vector<double> out;
  for (std::size_t i = 0; i < y.size(); ++i) {
    double total = 0, s = 0;
    for (double v : q[i]) total += v;
    for (std::size_t j = 0; j < y[i].size(); ++j) s -= y[i][j] * std::log(clipp(q[i][j] / total));
    out.push_back(s);
  }
  return out;
}
std::vector<double> softmax_rows(const Tensor& logits) {
  std::vector<double> out;
  for (auto& r : rows(logits)) {
    double m = *std::max_element(r.begin(), r.end()), s = 0;
    for (double v : r) s += std::exp(v - m);
    for (double v : r) out.push_back(std::exp(v - m) / s);
  }
  return out;
}
double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

Tensor probs(const Shape& s, std::uint64_t seed) {  // rows summing to 1
  return constant(softmax_rows(rand_tensor(s, seed, -2, 2)), s);
}
Tensor one_hot_rows(const std::vector<std::int64_t>& labels, std::int64_t c) {
  std::vector<double> v(labels.size() * std::size_t(c), 0.0);
  for (std::size_t i = 0; i < labels.size(); ++i)
    v[i * std::size_t(c) + std::size_t(labels[i])] = 1;
  return constant(v, {std::int64_t(labels.size()), c});
}

using soma::testing::error_of;

}  // namespace

// ---- MSE / MAE / Huber -----------------------------------------------------------------------

TEST(MeanSquaredError, PerSampleValuesAreTheMeanOverTheLastAxis) {
  Tensor t = rand_tensor({4, 3}, 1), p = rand_tensor({4, 3}, 2);
  Tensor got = nn::MeanSquaredError({.reduction = Reduction::None})(t, p);
  EXPECT_EQ(got.shape(), (Shape{4}));
  EXPECT_TRUE(all_close(got, ref_mse(t, p), 1e-12));
}

TEST(MeanSquaredError, DefaultReductionIsTheMeanOverTheBatch) {
  Tensor t = rand_tensor({5, 2}, 3), p = rand_tensor({5, 2}, 4);
  Tensor got = nn::MeanSquaredError()(t, p);
  EXPECT_EQ(got.rank(), 0);
  EXPECT_NEAR(got.item<double>(), sum_of(ref_mse(t, p)) / 5, 1e-12);
}

TEST(MeanSquaredError, SumReductionAddsThePerSampleValues) {
  Tensor t = rand_tensor({5, 2}, 3), p = rand_tensor({5, 2}, 4);
  EXPECT_NEAR(nn::MeanSquaredError({.reduction = Reduction::Sum})(t, p).item<double>(),
              sum_of(ref_mse(t, p)), 1e-12);
}

TEST(MeanSquaredError, SampleWeightsScaleSamplesAndTheMeanDividesByBatchSize) {
  Tensor t = rand_tensor({4, 3}, 5), p = rand_tensor({4, 3}, 6);
  std::vector<double> w = {0.5, 2.0, 0.0, 1.5};
  std::vector<double> ref = ref_mse(t, p), weighted;
  for (std::size_t i = 0; i < 4; ++i) weighted.push_back(ref[i] * w[i]);
  Tensor sw = constant(w, {4});
  EXPECT_TRUE(
      all_close(nn::MeanSquaredError({.reduction = Reduction::None})(t, p, sw), weighted, 1e-12));
  EXPECT_NEAR(nn::MeanSquaredError()(t, p, sw).item<double>(), sum_of(weighted) / 4, 1e-12);
  EXPECT_NEAR(nn::MeanSquaredError({.reduction = Reduction::Sum})(t, p, sw).item<double>(),
              sum_of(weighted), 1e-12);
  // [batch, 1] weights line up the same way.
  EXPECT_NEAR(nn::MeanSquaredError()(t, p, constant(w, {4, 1})).item<double>(),
              sum_of(weighted) / 4, 1e-12);
}

TEST(MeanSquaredError, BatchVectorTargetsMeetColumnPredictions) {
  Tensor t = constant({1.0, 2.0, 3.0});
  Tensor p = constant({{1.5}, {2.0}, {2.0}});
  Tensor got = nn::MeanSquaredError({.reduction = Reduction::None})(t, p);
  EXPECT_TRUE(all_close(got, {0.25, 0.0, 1.0}));
  // And a rank-1 prediction counts as one value per sample.
  EXPECT_TRUE(
      all_close(nn::MeanSquaredError({.reduction = Reduction::None})(t, constant({1.5, 2.0, 2.0})),
                {0.25, 0.0, 1.0}));
}

TEST(MeanSquaredError, IntegerTargetsAreCastToThePredictionDtype) {
  Tensor t = constant({{1, 0}}), p = constant({{0.5f, 0.5f}});
  Tensor got = nn::MeanSquaredError()(t, p);
  EXPECT_EQ(got.dtype(), DType::f32);
  EXPECT_FLOAT_EQ(got.item<float>(), 0.25f);
}

TEST(MeanSquaredError, MismatchedShapesNameTheLossAndBothShapes) {
  std::string m = error_of([] { nn::MeanSquaredError()(zeros({4, 3}), zeros({4, 2})); });
  EXPECT_NE(m.find("mean_squared_error"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 2]"), std::string::npos) << m;
}

TEST(MeanSquaredError, MisshapenSampleWeightsAreAnError) {
  std::string m = error_of([] {
    nn::MeanSquaredError()(zeros({4, 3}), zeros({4, 3}), ones({3}));
  });
  EXPECT_NE(m.find("mean_squared_error"), std::string::npos) << m;
  EXPECT_NE(m.find("sample_weight shape [3]"), std::string::npos) << m;
}

TEST(MeanAbsoluteError, PerSampleValuesAreTheMeanAbsoluteDifference) {
  Tensor t = rand_tensor({4, 3}, 7), p = rand_tensor({4, 3}, 8);
  auto ref = per_row(t, p, [](double a, double b) { return std::abs(b - a); });
  EXPECT_TRUE(all_close(nn::MeanAbsoluteError({.reduction = Reduction::None})(t, p), ref, 1e-12));
  EXPECT_NEAR(nn::MeanAbsoluteError()(t, p).item<double>(), sum_of(ref) / 4, 1e-12);
}

TEST(Huber, IsQuadraticInsideDeltaAndLinearBeyond) {
  for (double delta : {1.0, 0.5}) {
    Tensor t = rand_tensor({6, 4}, 9, -2, 2), p = rand_tensor({6, 4}, 10, -2, 2);
    auto ref = per_row(t, p, [delta](double a, double b) {
      double e = std::abs(b - a);
      return e <= delta ? 0.5 * e * e : delta * (e - 0.5 * delta);
    });
    EXPECT_TRUE(
        all_close(nn::Huber({.delta = delta, .reduction = Reduction::None})(t, p), ref, 1e-12))
        << "delta " << delta;
  }
}

TEST(Huber, NonPositiveDeltaIsRejected) {
  std::string m = error_of([] { nn::Huber({.delta = 0.0}); });
  EXPECT_NE(m.find("huber_loss"), std::string::npos) << m;
  EXPECT_NE(m.find("delta"), std::string::npos) << m;
}

// ---- binary cross-entropy --------------------------------------------------------------------

TEST(BinaryCrossentropy, MatchesTheNaiveFormulaOnProbabilities) {
  Tensor z = rand_tensor({4, 3}, 11, 0, 1), p = rand_tensor({4, 3}, 12, 0.01, 0.99);
  EXPECT_TRUE(all_close(nn::BinaryCrossentropy({.reduction = Reduction::None})(z, p), ref_bce(z, p),
                        1e-10));
}

TEST(BinaryCrossentropy, ProbabilitiesOfZeroAndOneAreClippedToFiniteValues) {
  Tensor z = constant({{1.0, 0.0, 1.0, 0.0}}), p = constant({{0.0, 1.0, 1.0, 0.0}});
  double got = nn::BinaryCrossentropy()(z, p).item<double>();
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, sum_of(ref_bce(z, p)), 1e-9);
  EXPECT_NEAR(got, (-std::log(1e-7) * 2 - std::log(1 - 1e-7) * 2) / 4, 1e-6);
}

TEST(BinaryCrossentropy, FromLogitsAgreesWithSigmoidProbabilities) {
  Tensor z = rand_tensor({5, 3}, 13, 0, 1), x = rand_tensor({5, 3}, 14, -4, 4);
  Tensor from_logits =
      nn::BinaryCrossentropy({.from_logits = true, .reduction = Reduction::None})(z, x);
  Tensor from_probs = nn::BinaryCrossentropy({.reduction = Reduction::None})(z, sigmoid(x));
  EXPECT_TRUE(all_close(from_logits, from_probs, 1e-10, 1e-10));
}

TEST(BinaryCrossentropy, HugeLogitsGiveFiniteExactLosses) {
  Tensor x = constant({{1e4}, {-1e4}, {1e4}, {-1e4}});
  Tensor z = constant({{0.0}, {1.0}, {1.0}, {0.0}});
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor got =
        nn::BinaryCrossentropy({.from_logits = true, .reduction = Reduction::None})(z, cast(x, dt));
    EXPECT_TRUE(all_close(cast(got, DType::f64), {1e4, 1e4, 0.0, 0.0}, 1e-6, 1e-7)) << dt;
  }
}

TEST(BinaryCrossentropy, LabelSmoothingPullsTargetsTowardsOneHalf) {
  Tensor z = constant({{1.0, 0.0}, {0.0, 1.0}}), x = rand_tensor({2, 2}, 15, -3, 3);
  Tensor smoothed = z * 0.8 + 0.1;
  for (bool logits : {false, true}) {
    Tensor p = logits ? x : sigmoid(x);
    Tensor got = nn::BinaryCrossentropy({.from_logits = logits, .label_smoothing = 0.2})(z, p);
    Tensor want = nn::BinaryCrossentropy({.from_logits = logits})(smoothed, p);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-12) << "from_logits " << logits;
  }
  EXPECT_TRUE(all_close(
      nn::BinaryCrossentropy({.label_smoothing = 0.2, .reduction = Reduction::None})(z, sigmoid(x)),
      ref_bce(smoothed, sigmoid(x)), 1e-10));
}

TEST(BinaryCrossentropy, LogitGradientAtZeroIsSigmoidOfZeroMinusTarget) {
  Tensor x = zeros({3, 1}, DType::f64);
  Tensor z = constant({{1.0}, {0.0}, {0.25}});
  GradientTape tape;
  tape.watch(x);
  Tensor loss = nn::BinaryCrossentropy({.from_logits = true, .reduction = Reduction::Sum})(z, x);
  EXPECT_TRUE(all_close(tape.gradient(loss, x), {-0.5, 0.5, 0.25}, 1e-12));
}

TEST(BinaryCrossentropy, LabelSmoothingOutsideZeroToOneIsRejected) {
  std::string m = error_of([] { nn::BinaryCrossentropy({.label_smoothing = 1.5}); });
  EXPECT_NE(m.find("binary_crossentropy"), std::string::npos) << m;
  EXPECT_NE(m.find("label_smoothing"), std::string::npos) << m;
}

// ---- categorical cross-entropy ---------------------------------------------------------------

TEST(CategoricalCrossentropy, MatchesTheNaiveFormulaOnProbabilities) {
  Tensor y = one_hot_rows({0, 2, 1, 2}, 3), p = probs({4, 3}, 16);
  EXPECT_TRUE(all_close(nn::CategoricalCrossentropy({.reduction = Reduction::None})(y, p),
                        ref_cce(y, p), 1e-12));
}

TEST(CategoricalCrossentropy, UnnormalisedProbabilitiesAreRescaledToSumToOne) {
  Tensor y = one_hot_rows({1, 0}, 3), p = probs({2, 3}, 17);
  Tensor a = nn::CategoricalCrossentropy()(y, p), b = nn::CategoricalCrossentropy()(y, p * 3.0);
  EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-12);
}

TEST(CategoricalCrossentropy, FromLogitsAgreesWithSoftmaxProbabilities) {
  Tensor y = rand_tensor({4, 5}, 18, 0, 1), x = rand_tensor({4, 5}, 19, -3, 3);
  y = y / sum(y, {-1}, true);  // soft targets
  Tensor a = nn::CategoricalCrossentropy({.from_logits = true, .reduction = Reduction::None})(y, x);
  Tensor b = nn::CategoricalCrossentropy({.reduction = Reduction::None})(y, softmax(x));
  EXPECT_TRUE(all_close(a, b, 1e-10, 1e-10));
}

TEST(CategoricalCrossentropy, HugeLogitsGiveFiniteExactLosses) {
  Tensor x = constant({{1e4, 0.0, -1e4}, {1e4, 0.0, -1e4}});
  Tensor y = one_hot_rows({0, 1}, 3);
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor got = nn::CategoricalCrossentropy({.from_logits = true, .reduction = Reduction::None})(
        cast(y, dt), cast(x, dt));
    EXPECT_TRUE(all_close(cast(got, DType::f64), {0.0, 1e4}, 1e-6, 1e-7)) << dt;
  }
}

TEST(CategoricalCrossentropy, LabelSmoothingSpreadsMassOverAllClasses) {
  Tensor y = one_hot_rows({0, 2}, 4), p = probs({2, 4}, 20);
  Tensor smoothed = y * 0.9 + 0.1 / 4;
  Tensor got =
      nn::CategoricalCrossentropy({.label_smoothing = 0.1, .reduction = Reduction::None})(y, p);
  EXPECT_TRUE(all_close(got, ref_cce(smoothed, p), 1e-12));
}

TEST(CategoricalCrossentropy, AxisOptionPicksTheClassAxis) {
  Tensor y = one_hot_rows({0, 2, 1}, 3), x = rand_tensor({3, 3}, 21, -2, 2);
  Tensor a = nn::CategoricalCrossentropy(
      {.from_logits = true, .axis = 0, .reduction = Reduction::None})(transpose(y), transpose(x));
  Tensor b = nn::CategoricalCrossentropy({.from_logits = true, .reduction = Reduction::None})(y, x);
  EXPECT_TRUE(all_close(a, b, 1e-12));
}

TEST(CategoricalCrossentropy, IntegerLabelsOfTheWrongShapeAreAnError) {
  std::string m = error_of([] {
    nn::CategoricalCrossentropy()(constant({1, 2}), constant({{0.5, 0.5, 0.0}, {0.2, 0.3, 0.5}}));
  });
  EXPECT_NE(m.find("categorical_crossentropy"), std::string::npos) << m;
  EXPECT_NE(m.find("[2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
}

// ---- sparse categorical cross-entropy --------------------------------------------------------

TEST(SparseCategoricalCrossentropy, EqualsCategoricalWithOneHotTargets) {
  std::vector<std::int64_t> labels = {2, 0, 1, 2};
  Tensor p = probs({4, 3}, 22), x = rand_tensor({4, 3}, 23, -3, 3);
  for (bool logits : {false, true}) {
    Tensor pred = logits ? x : p;
    Tensor a = nn::SparseCategoricalCrossentropy(
        {.from_logits = logits, .reduction = Reduction::None})(constant(labels, {4}), pred);
    Tensor b = nn::CategoricalCrossentropy({.from_logits = logits, .reduction = Reduction::None})(
        one_hot_rows(labels, 3), pred);
    EXPECT_TRUE(all_close(a, b, 1e-12)) << "from_logits " << logits;
  }
  EXPECT_TRUE(all_close(
      nn::SparseCategoricalCrossentropy({.reduction = Reduction::None})(constant(labels, {4}), p),
      ref_cce(one_hot_rows(labels, 3), p), 1e-12));
}

TEST(SparseCategoricalCrossentropy, AcceptsI32AndI64LabelsOfShapeBatchOrBatchByOne) {
  Tensor x = rand_tensor({3, 4}, 24, -2, 2);
  nn::SparseCategoricalCrossentropy loss({.from_logits = true});
  double want = loss(constant(std::vector<std::int64_t>{3, 0, 1}, {3}), x).item<double>();
  EXPECT_NEAR(loss(constant(std::vector<std::int32_t>{3, 0, 1}, {3}), x).item<double>(), want,
              1e-15);
  EXPECT_NEAR(loss(constant(std::vector<std::int64_t>{3, 0, 1}, {3, 1}), x).item<double>(), want,
              1e-15);
  EXPECT_NEAR(loss(constant(std::vector<std::int32_t>{3, 0, 1}, {3, 1}), x).item<double>(), want,
              1e-15);
}

TEST(SparseCategoricalCrossentropy, HugeLogitsGiveFiniteExactLosses) {
  Tensor x = constant({{1e4f, 0.0f, -1e4f}, {1e4f, 0.0f, -1e4f}});
  Tensor got = nn::SparseCategoricalCrossentropy(
      {.from_logits = true, .reduction = Reduction::None})(constant({0, 2}), x);
  EXPECT_TRUE(all_close(cast(got, DType::f64), {0.0, 2e4}, 1e-6, 1e-7));
}

TEST(SparseCategoricalCrossentropy, SampleWeightsAndReductions) {
  Tensor x = rand_tensor({3, 4}, 25, -2, 2), y = constant({1, 3, 0});
  Tensor w = constant({1.0, 0.0, 3.0});
  auto per =
      nn::SparseCategoricalCrossentropy({.from_logits = true, .reduction = Reduction::None})(y, x)
          .to_vector<double>();
  double weighted = per[0] + 3 * per[2];
  EXPECT_NEAR(nn::SparseCategoricalCrossentropy({.from_logits = true})(y, x, w).item<double>(),
              weighted / 3, 1e-12);
  EXPECT_NEAR(
      nn::SparseCategoricalCrossentropy({.from_logits = true, .reduction = Reduction::Sum})(y, x, w)
          .item<double>(),
      weighted, 1e-12);
}

TEST(SparseCategoricalCrossentropy, OutOfRangeLabelNamesTheLabelAndTheClassCount) {
  std::string m = error_of([] {
    nn::SparseCategoricalCrossentropy({.from_logits = true})(constant({1, 10}), zeros({2, 10}));
  });
  EXPECT_NE(m.find("sparse_categorical_crossentropy"), std::string::npos) << m;
  EXPECT_NE(m.find("label 10"), std::string::npos) << m;
  EXPECT_NE(m.find("10 classes"), std::string::npos) << m;
  EXPECT_NE(error_of([] {
              nn::SparseCategoricalCrossentropy()(constant({-1}), fill({1, 3}, 1.0 / 3));
            }).find("label -1"),
            std::string::npos);
}

TEST(SparseCategoricalCrossentropy, LabelShapeMismatchIsAnError) {
  std::string m = error_of([] {
    nn::SparseCategoricalCrossentropy()(constant({0, 1, 2}), fill({2, 3}, 1.0 / 3));
  });
  EXPECT_NE(m.find("sparse_categorical_crossentropy"), std::string::npos) << m;
  EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
}

TEST(Losses, IntegerPredictionsAreRejected) {
  std::string m = error_of([] { nn::MeanAbsoluteError()(constant({1, 2}), constant({1, 2})); });
  EXPECT_NE(m.find("mean_absolute_error"), std::string::npos) << m;
  EXPECT_NE(m.find("floating-point"), std::string::npos) << m;
}

// ---- gradients (f64, central differences) ----------------------------------------------------

TEST(LossGradients, RegressionLossesWithRespectToPredictions) {
  Tensor t = rand_tensor({4, 3}, 30, -2, 2), p = rand_tensor({4, 3}, 31, -2, 2);
  Tensor w = rand_tensor({4}, 32, 0, 2);
  std::vector<nn::LossRef> losses = {nn::MeanSquaredError(), nn::MeanAbsoluteError(),
                                     nn::Huber({.delta = 0.7}),
                                     nn::MeanSquaredError({.reduction = Reduction::None}),
                                     nn::Huber({.reduction = Reduction::Sum})};
  for (auto& loss : losses)
    EXPECT_TRUE(
        check_gradients([&](const std::vector<Tensor>& in) { return (*loss)(t, in[0], w); }, {p}))
        << loss->name();
}

TEST(LossGradients, BinaryCrossentropyWithRespectToProbabilitiesAndLogits) {
  Tensor z = rand_tensor({4, 3}, 33, 0, 1), p = rand_tensor({4, 3}, 34, 0.05, 0.95);
  Tensor x = rand_tensor({4, 3}, 35, -3, 3);
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) {
        return nn::BinaryCrossentropy({.label_smoothing = 0.1})(z, in[0]);
      },
      {p}));
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) {
        return nn::BinaryCrossentropy({.from_logits = true, .reduction = Reduction::None})(z,
                                                                                           in[0]);
      },
      {x}));
}

TEST(LossGradients, CategoricalCrossentropyWithRespectToProbabilitiesAndLogits) {
  Tensor y = one_hot_rows({0, 2, 1}, 4), p = probs({3, 4}, 36), x = rand_tensor({3, 4}, 37, -3, 3);
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) {
        return nn::CategoricalCrossentropy({.label_smoothing = 0.1})(y, in[0]);
      },
      {p}));
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) {
        return nn::CategoricalCrossentropy({.from_logits = true, .reduction = Reduction::None})(
            y, in[0]);
      },
      {x}));
}

TEST(LossGradients, SparseCategoricalCrossentropyWithRespectToProbabilitiesAndLogits) {
  Tensor y = constant({3, 0, 2}), p = probs({3, 4}, 38), x = rand_tensor({3, 4}, 39, -3, 3);
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) { return nn::SparseCategoricalCrossentropy()(y, in[0]); },
      {p}));
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) {
        return nn::SparseCategoricalCrossentropy({.from_logits = true})(y, in[0],
                                                                        constant({1.0, 2.0, 0.5}));
      },
      {x}));
}

TEST(LossGradients, SoftmaxCrossentropyGradientIsSoftmaxMinusTarget) {
  Tensor x = rand_tensor({2, 3}, 40, -2, 2);
  GradientTape tape;
  tape.watch(x);
  Tensor loss = nn::SparseCategoricalCrossentropy(
      {.from_logits = true, .reduction = Reduction::Sum})(constant({1, 2}), x);
  std::vector<double> want = softmax_rows(x);
  want[1] -= 1;
  want[5] -= 1;
  EXPECT_TRUE(all_close(tape.gradient(loss, x), want, 1e-12));
}

// ---- objects and identifiers -----------------------------------------------------------------

TEST(Losses, NamesFollowKeras) {
  EXPECT_EQ(nn::MeanSquaredError().name(), "mean_squared_error");
  EXPECT_EQ(nn::MeanAbsoluteError().name(), "mean_absolute_error");
  EXPECT_EQ(nn::Huber().name(), "huber_loss");
  EXPECT_EQ(nn::BinaryCrossentropy().name(), "binary_crossentropy");
  EXPECT_EQ(nn::CategoricalCrossentropy().name(), "categorical_crossentropy");
  EXPECT_EQ(nn::SparseCategoricalCrossentropy().name(), "sparse_categorical_crossentropy");
}

TEST(Losses, FreeFunctionsReturnUnreducedValues) {
  Tensor t = rand_tensor({3, 2}, 41), p = rand_tensor({3, 2}, 42);
  EXPECT_TRUE(all_close(nn::losses::mean_squared_error(t, p), ref_mse(t, p), 1e-12));
  EXPECT_TRUE(all_close(nn::MeanSquaredError().call(t, p), ref_mse(t, p), 1e-12));
}

TEST(Losses, StringIdentifiersBuildDefaultLosses) {
  EXPECT_EQ(nn::get_loss("mse")->name(), "mean_squared_error");
  EXPECT_EQ(nn::get_loss("sparse_categorical_crossentropy")->name(),
            "sparse_categorical_crossentropy");
  std::string m = error_of([] { nn::get_loss("hinge_of_doom"); });
  EXPECT_NE(m.find("unknown loss 'hinge_of_doom'"), std::string::npos) << m;
}

TEST(Losses, RefCopiesTheOptions) {
  nn::LossRef ref =
      nn::SparseCategoricalCrossentropy({.from_logits = true, .reduction = Reduction::Sum});
  EXPECT_EQ(ref->reduction(), Reduction::Sum);
  Tensor x = constant({{1e4, 0.0}});
  EXPECT_NEAR((*ref)(constant({1}), x).item<double>(), 1e4, 1e-6);  // logits, so finite and exact
}
