// Initialisers (Keras' formulas, statistics of large draws, seeding), fans and regularisers.
#include <cmath>
#include <string>

#include "soma/nn/initializers.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;

namespace {

struct Stats {
  double mean, std, min, max;
};
Stats stats(const Tensor& t) {
  auto v = t.to_vector<double>();
  double s = 0, s2 = 0, lo = v[0], hi = v[0];
  for (double x : v) {
    s += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  double m = s / double(v.size());
  for (double x : v) s2 += (x - m) * (x - m);
  return {m, std::sqrt(s2 / double(v.size())), lo, hi};
}

const Shape kBig{200, 300};
const nn::Fans kFans{200, 300};

// Uniform draws: inside [-limit, limit], reaching close to it, with std limit / sqrt(3).
void expect_uniform(const nn::Initializer& init, double limit) {
  Stats s = stats(init(kBig, DType::f64, kFans));
  EXPECT_LE(s.max, limit);
  EXPECT_GE(s.min, -limit);
  EXPECT_GT(s.max, 0.99 * limit);
  EXPECT_NEAR(s.mean, 0.0, 0.02 * limit);
  EXPECT_NEAR(s.std, limit / std::sqrt(3.0), 0.02 * limit / std::sqrt(3.0));
}

// Truncated-normal draws whose std after truncation is `stddev`, cut at 2 / 0.8796 of it.
void expect_truncated(const nn::Initializer& init, double stddev) {
  Stats s = stats(init(kBig, DType::f64, kFans));
  double cut = 2.0 * stddev / 0.87962566103423978;
  EXPECT_LE(s.max, cut);
  EXPECT_GE(s.min, -cut);
  EXPECT_NEAR(s.mean, 0.0, 0.02 * stddev);
  EXPECT_NEAR(s.std, stddev, 0.02 * stddev);
}

}  // namespace

TEST(Fans, DenseKernelIsInByOut) {
  auto f = nn::dense_fans({784, 128});
  EXPECT_EQ(f.fan_in, 784);
  EXPECT_EQ(f.fan_out, 128);
  auto b = nn::dense_fans({10});
  EXPECT_EQ(b.fan_in, 10);
  EXPECT_EQ(b.fan_out, 10);
}

TEST(Fans, ConvKernelOIHWMultipliesTheReceptiveField) {
  auto f = nn::conv_fans({16, 3, 5, 5});
  EXPECT_EQ(f.fan_in, 3 * 25);
  EXPECT_EQ(f.fan_out, 16 * 25);
}

TEST(Initializers, ZerosOnesAndConstantFillInTheAskedDtype) {
  auto z = nn::init::zeros()({2, 3}, DType::f64, {});
  EXPECT_EQ(z.dtype(), DType::f64);
  EXPECT_TRUE(all_close(z, zeros({2, 3}, DType::f64), 0, 0));
  EXPECT_TRUE(all_close(nn::init::ones()({4}, DType::f32, {}), {1, 1, 1, 1}, 0, 0));
  EXPECT_TRUE(all_close(nn::init::constant(0.5)({2}, DType::f32, {}), {0.5, 0.5}, 0, 0));
}

TEST(Initializers, GlorotUniformLimitIsSqrt6OverFanSum) {
  expect_uniform(nn::init::glorot_uniform(1), std::sqrt(6.0 / 500.0));
}

TEST(Initializers, GlorotNormalStddevIsSqrt2OverFanSum) {
  expect_truncated(nn::init::glorot_normal(2), std::sqrt(2.0 / 500.0));
}

TEST(Initializers, HeUniformLimitIsSqrt6OverFanIn) {
  expect_uniform(nn::init::he_uniform(3), std::sqrt(6.0 / 200.0));
}

TEST(Initializers, HeNormalStddevIsSqrt2OverFanIn) {
  expect_truncated(nn::init::he_normal(4), std::sqrt(2.0 / 200.0));
}

TEST(Initializers, LecunUniformLimitIsSqrt3OverFanIn) {
  expect_uniform(nn::init::lecun_uniform(5), std::sqrt(3.0 / 200.0));
}

TEST(Initializers, LecunNormalStddevIsSqrt1OverFanIn) {
  expect_truncated(nn::init::lecun_normal(6), std::sqrt(1.0 / 200.0));
}

TEST(Initializers, RandomNormalHasTheAskedMeanAndStddev) {
  Stats s = stats(nn::init::random_normal(1.5, 0.2, 7)(kBig, DType::f64, {}));
  EXPECT_NEAR(s.mean, 1.5, 0.005);
  EXPECT_NEAR(s.std, 0.2, 0.004);
}

TEST(Initializers, RandomUniformStaysInItsRange) {
  Stats s = stats(nn::init::random_uniform(-0.05, 0.05, 8)(kBig, DType::f32, {}));
  EXPECT_GE(s.min, -0.05);
  EXPECT_LE(s.max, 0.05);
  EXPECT_NEAR(s.mean, 0.0, 0.001);
}

TEST(Initializers, TruncatedNormalIsCutAtTwoStddevs) {
  Stats s = stats(nn::init::truncated_normal(0.0, 0.05, 9)(kBig, DType::f64, {}));
  EXPECT_LE(s.max, 0.1);
  EXPECT_GE(s.min, -0.1);
  EXPECT_GT(s.max, 0.099);
}

TEST(Initializers, TheSameSeedGivesTheSameValues) {
  auto a = nn::init::glorot_uniform(42)({5, 7}, DType::f32, {5, 7});
  auto b = nn::init::glorot_uniform(42)({5, 7}, DType::f32, {5, 7});
  auto c = nn::init::glorot_uniform(43)({5, 7}, DType::f32, {5, 7});
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_FALSE(all_close(a, c, 0, 0));
}

TEST(Initializers, UnseededDrawsDifferButReplayAfterSetSeed) {
  auto init = nn::init::he_normal();
  set_seed(11);
  auto a = init({4, 4}, DType::f32, {4, 4});
  auto b = init({4, 4}, DType::f32, {4, 4});
  EXPECT_FALSE(all_close(a, b, 0, 0));
  set_seed(11);
  EXPECT_TRUE(all_close(init({4, 4}, DType::f32, {4, 4}), a, 0, 0));
}

TEST(Initializers, IntegerDtypesAreRejectedByRandomInitialisers) {
  try {
    nn::init::glorot_uniform()({2, 2}, DType::i32, {2, 2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("glorot_uniform"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
}

TEST(Orthogonal, TallMatrixHasOrthonormalColumns) {
  auto q = nn::init::orthogonal(1.0, 1)({6, 4}, DType::f64, {});
  EXPECT_TRUE(all_close(matmul(transpose(q), q), eye(4, std::nullopt, DType::f64), 1e-12, 0));
}

TEST(Orthogonal, WideMatrixHasOrthonormalRows) {
  auto q = nn::init::orthogonal(1.0, 2)({3, 5}, DType::f64, {});
  EXPECT_TRUE(all_close(matmul(q, transpose(q)), eye(3, std::nullopt, DType::f64), 1e-12, 0));
}

TEST(Orthogonal, SquareMatrixIsOrthogonalBothWaysAndScaledByGain) {
  auto q = nn::init::orthogonal(2.0, 3)({8, 8}, DType::f64, {});
  Tensor four = eye(8, std::nullopt, DType::f64) * 4.0;
  EXPECT_TRUE(all_close(matmul(transpose(q), q), four, 1e-12, 0));
  EXPECT_TRUE(all_close(matmul(q, transpose(q)), four, 1e-12, 0));
}

TEST(Orthogonal, HigherRankFlattensAllButTheLastAxis) {
  auto q = nn::init::orthogonal(1.0, 4)({2, 3, 4}, DType::f64, {});
  EXPECT_EQ(q.shape(), (Shape{2, 3, 4}));
  Tensor flat = reshape(q, {6, 4});
  EXPECT_TRUE(all_close(matmul(transpose(flat), flat), eye(4, std::nullopt, DType::f64), 1e-12, 0));
}

TEST(Orthogonal, IsReproducibleWithASeedAndNotAnIdentity) {
  auto a = nn::init::orthogonal(1.0, 5)({4, 4}, DType::f32, {});
  auto b = nn::init::orthogonal(1.0, 5)({4, 4}, DType::f32, {});
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_FALSE(all_close(a, eye(4), 1e-3, 0));
}

TEST(Orthogonal, RejectsVectors) {
  EXPECT_THROW(nn::init::orthogonal()({5}, DType::f32, {}), Error);
}

TEST(Regularizers, L1AndL2PenaltiesMatchTheirFormulas) {
  Tensor w = constant({1.0, -2.0, 3.0});
  EXPECT_DOUBLE_EQ(nn::regularizers::l1(0.1)(w).item<double>(), 0.1 * 6.0);
  EXPECT_DOUBLE_EQ(nn::regularizers::l2(0.01)(w).item<double>(), 0.01 * 14.0);
  EXPECT_NEAR(nn::regularizers::l1_l2(0.1, 0.01)(w).item<double>(), 0.6 + 0.14, 1e-15);
  EXPECT_FALSE(nn::Regularizer{}.active());
}

TEST(Regularizers, PenaltyHasAGradient) {
  Tensor w = constant({1.0, -2.0});
  GradientTape tape;
  tape.watch(w);
  Tensor p = nn::regularizers::l1_l2(0.5, 0.25)(w);
  // d/dw: 0.5 * sign(w) + 0.5 * w
  EXPECT_TRUE(all_close(tape.gradient(p, w), {0.5 + 0.5, -0.5 - 1.0}, 1e-12));
}
