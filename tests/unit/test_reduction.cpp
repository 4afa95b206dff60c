// Reductions, softmax/log_softmax and sum_to: forward results against naive loops, gradients
// against finite differences, and the errors bad calls raise.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "soma/threading.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::noncontiguous;
using testing::rand_tensor;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- naive references ----------------------------------------------------------------------
std::vector<std::int64_t> norm_axes(const Axes& axes, std::size_t rank) {
  std::vector<std::int64_t> out;
  if (axes.empty())
    for (std::size_t i = 0; i < rank; ++i) out.push_back(std::int64_t(i));
  for (auto a : axes) out.push_back(a < 0 ? a + std::int64_t(rank) : a);
  std::sort(out.begin(), out.end());
  return out;
}

struct Ref {
  Shape shape;
  std::vector<double> values;
};

// Groups the elements of x by output position and reduces each group with `f`.
Ref naive_reduce(const Tensor& t, const Axes& axes, bool keepdims,
                 const std::function<double(const std::vector<double>&)>& f) {
  const Shape& s = t.shape();
  std::vector<double> x = t.to_vector<double>();
  auto ax = norm_axes(axes, s.size());
  auto is_red = [&](std::size_t i) {
    return std::find(ax.begin(), ax.end(), std::int64_t(i)) != ax.end();
  };
  Shape out_shape, kept_shape;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!is_red(i)) {
      out_shape.push_back(s[i]);
      kept_shape.push_back(s[i]);
    } else if (keepdims) {
      out_shape.push_back(1);
    }
  }
  std::vector<std::vector<double>> groups(std::size_t(numel(kept_shape)));
  for (std::int64_t flat = 0; flat < std::int64_t(x.size()); ++flat) {
    std::int64_t rem = flat, out_index = 0, mul = 1;
    for (std::size_t d = s.size(); d-- > 0;) {
      std::int64_t i = rem % s[d];
      rem /= s[d];
      if (!is_red(d)) {
        out_index += i * mul;
        mul *= s[d];
      }
    }
    groups[std::size_t(out_index)].push_back(x[std::size_t(flat)]);
  }
  Ref r{out_shape, {}};
  for (auto& g : groups) r.values.push_back(f(g));
  return r;
}

double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double ref_mean(const std::vector<double>& v) { return ref_sum(v) / double(v.size()); }
double ref_prod(const std::vector<double>& v) {
  double p = 1;
  for (double x : v) p *= x;
  return p;
}
double ref_max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double ref_min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double ref_var(const std::vector<double>& v) {
  double m = ref_mean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(v.size());
}
double ref_lse(const std::vector<double>& v) {
  double m = ref_max(v), s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

::testing::AssertionResult matches(const Tensor& actual, const Ref& ref, double tol = 1e-9) {
  if (actual.shape() != ref.shape)
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " vs expected "
                                         << shape_str(ref.shape);
  return all_close(actual, ref.values, tol, tol);
}

struct Case {
  Shape shape;
  Axes axes;
};
const std::vector<Case> kCases = {
    {{2, 3, 4}, {}},      {{2, 3, 4}, {0}},     {{2, 3, 4}, {1}},        {{2, 3, 4}, {-1}},
    {{2, 3, 4}, {0, 2}},  {{2, 3, 4}, {-1, 0}}, {{2, 3, 4}, {0, 1, 2}},  {{5}, {0}},
    {{3, 1, 4}, {1}},     {{7, 33}, {1}},       {{33, 7}, {0}},          {{2, 3, 4, 5}, {1, 3}},
    {{3, 600}, {0}},      {{2, 3, 4, 5}, {0, 1}},  // column chunks; two merged kept dims
};

using TensorReduction = Tensor (*)(const Tensor&, const Axes&, bool);

void expect_matches_naive(TensorReduction op, double (*ref)(const std::vector<double>&),
                          double lo, double hi, double tol = 1e-9) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases)
    for (bool keep : {false, true}) {
      Tensor x = rand_tensor(c.shape, seed++, lo, hi);
      SCOPED_TRACE(shape_str(c.shape) + " axes " + shape_str(c.axes) + (keep ? " keepdims" : ""));
      EXPECT_TRUE(matches(op(x, c.axes, keep), naive_reduce(x, c.axes, keep, ref), tol));
      EXPECT_TRUE(matches(op(noncontiguous(x), c.axes, keep), naive_reduce(x, c.axes, keep, ref), tol));
    }
}

// ---- forward: each op against its naive loop -------------------------------------------------
TEST(Sum, MatchesNaiveLoopOverAxisSets) { expect_matches_naive(sum, ref_sum, -1, 1); }
TEST(Mean, MatchesNaiveLoopOverAxisSets) { expect_matches_naive(mean, ref_mean, -1, 1); }
TEST(Max, MatchesNaiveLoopOverAxisSets) { expect_matches_naive(max, ref_max, -1, 1); }
TEST(Min, MatchesNaiveLoopOverAxisSets) { expect_matches_naive(min, ref_min, -1, 1); }
TEST(Prod, MatchesNaiveLoopOverAxisSets) { expect_matches_naive(prod, ref_prod, 0.5, 1.5); }
TEST(Variance, MatchesNaivePopulationVariance) { expect_matches_naive(variance, ref_var, -1, 1); }
TEST(Logsumexp, MatchesNaiveLoopOverAxisSets) { expect_matches_naive(logsumexp, ref_lse, -3, 3); }
TEST(Stddev, IsSqrtOfPopulationVariance) {
  expect_matches_naive(stddev, [](const std::vector<double>& v) { return std::sqrt(ref_var(v)); },
                       -1, 1);
}
TEST(Norm, OrdTwoIsEuclidean) {
  expect_matches_naive([](const Tensor& t, const Axes& a, bool k) { return norm(t, a, k, 2.0); },
                       [](const std::vector<double>& v) {
                         double s = 0;
                         for (double x : v) s += x * x;
                         return std::sqrt(s);
                       },
                       -1, 1);
}
TEST(Norm, OrdOneIsSumOfAbsoluteValues) {
  expect_matches_naive([](const Tensor& t, const Axes& a, bool k) { return norm(t, a, k, 1.0); },
                       [](const std::vector<double>& v) {
                         double s = 0;
                         for (double x : v) s += std::abs(x);
                         return s;
                       },
                       -1, 1);
}
TEST(Norm, OrdInfinityIsMaxAbsoluteValue) {
  expect_matches_naive([](const Tensor& t, const Axes& a, bool k) { return norm(t, a, k, kInf); },
                       [](const std::vector<double>& v) {
                         double s = 0;
                         for (double x : v) s = std::max(s, std::abs(x));
                         return s;
                       },
                       -1, 1);
}

TEST(Sum, OverTransposedAndSlicedViewsMatchesNaiveLoop) {
  Tensor base = rand_tensor({6, 5, 4}, 7);
  Tensor t = transpose(base, {2, 0, 1});  // [4, 6, 5], no unit stride last
  Tensor s = slice(base, {Slice{1, 5}, Slice{std::nullopt, std::nullopt, 2}, Slice{std::nullopt, std::nullopt, -1}});
  for (const Axes& axes : std::vector<Axes>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}}) {
    EXPECT_TRUE(matches(sum(t, axes), naive_reduce(t, axes, false, ref_sum)));
    EXPECT_TRUE(matches(sum(s, axes), naive_reduce(s, axes, false, ref_sum)));
    EXPECT_TRUE(matches(max(t, axes), naive_reduce(t, axes, false, ref_max)));
  }
}

TEST(Sum, BroadcastViewSumsRepeatedElements) {
  Tensor x = constant<double>({1, 2, 3});
  Tensor b = broadcast_to(x, {4, 3});  // stride 0 along axis 0
  EXPECT_TRUE(all_close(sum(b, {0}), {4, 8, 12}));
  EXPECT_TRUE(all_close(sum(b, {1}), {6, 6, 6, 6}));
}

TEST(Sum, LargeReductionsMatchNaiveLoopOnEveryKernelPath) {
  // [3, 50000] over axis 1: few outputs, long rows (split into blocks);
  // [50000, 3] over axis 0: the outer loop; [300, 200] over both: the full reduction.
  for (const Case& c : std::vector<Case>{{{3, 50000}, {1}}, {{50000, 3}, {0}},
                                         {{300, 200}, {}}, {{40, 50, 30}, {0, 2}}}) {
    Tensor x = rand_tensor(c.shape, 11);
    SCOPED_TRACE(shape_str(c.shape));
    EXPECT_TRUE(matches(sum(x, c.axes), naive_reduce(x, c.axes, false, ref_sum), 1e-9));
    EXPECT_TRUE(matches(max(x, c.axes), naive_reduce(x, c.axes, false, ref_max)));
    EXPECT_TRUE(matches(argmax(x, c.axes.empty() ? 0 : c.axes[0]),
                        naive_reduce(x, {c.axes.empty() ? 0 : c.axes[0]}, false,
                                     [](const std::vector<double>& v) {
                                       return double(std::max_element(v.begin(), v.end()) - v.begin());
                                     })));
  }
}

TEST(Sum, FloatSumOfManyElementsStaysAccurate) {
  // 2^24 + more ones: a plain float accumulator stops growing at 16777216.
  const std::int64_t n = (1 << 24) + 1000;
  Tensor ones_f32 = ones({n}, DType::f32);
  EXPECT_EQ(sum(ones_f32).item<double>(), double(n));
  Tensor x = rand_tensor({1 << 20}, 3, 0.0, 1.0, DType::f32);
  double ref = 0;
  for (float v : x.to_vector<float>()) ref += double(v);
  EXPECT_NEAR(sum(x).item<double>(), ref, std::abs(ref) * 1e-7);
}

TEST(Sum, FloatRowSumsOfLongRowsStayAccurate) {
  // 64 rows of 65536 values in [0, 1): a running float sum would be off by ~1e-5 relative.
  Tensor x = rand_tensor({64, 1 << 16}, 8, 0.0, 1.0, DType::f32);
  std::vector<float> v = x.to_vector<float>();
  std::vector<double> ref(64, 0.0);
  for (std::size_t i = 0; i < v.size(); ++i) ref[i >> 16] += double(v[i]);
  EXPECT_TRUE(all_close(sum(x, {1}), ref, 0, 1e-6));
}

TEST(Sum, FloatColumnSumOfManyRowsStaysAccurate) {
  Tensor x = ones({(1 << 24) + 8, 2}, DType::f32);
  EXPECT_TRUE(all_close(sum(x, {0}), {double((1 << 24) + 8), double((1 << 24) + 8)}, 0, 0));
}

TEST(Sum, FullReductionDoesNotDependOnThreadCount) {
  Tensor x = rand_tensor({1 << 20}, 5, -1.0, 1.0, DType::f32);
  int before = get_num_threads();
  set_num_threads(1);
  float one = sum(x).item<float>();
  set_num_threads(std::max(2, before));
  float many = sum(x).item<float>();
  set_num_threads(before);
  EXPECT_EQ(one, many);
}

TEST(Sum, OfScalarIsTheScalar) {
  Tensor s = scalar(2.5, DType::f64);
  EXPECT_EQ(sum(s).shape(), Shape{});
  EXPECT_EQ(sum(s).item<double>(), 2.5);
  EXPECT_EQ(sum(s, {}, true).shape(), Shape{});
  EXPECT_EQ(max(s).item<double>(), 2.5);
  EXPECT_EQ(prod(s).item<double>(), 2.5);
  EXPECT_EQ(mean(s).item<double>(), 2.5);
}

TEST(Sum, KeepdimsKeepsUnitAxes) {
  Tensor x = rand_tensor({2, 3, 4}, 9);
  EXPECT_EQ(sum(x, {0, 2}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(sum(x, {}, true).shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(sum(x, {-2}).shape(), (Shape{2, 4}));
}

// ---- empty tensors ---------------------------------------------------------------------------
TEST(EmptyReduction, SumIsZeroProdIsOneMeanIsNaN) {
  Tensor e = zeros({0, 3}, DType::f32);
  EXPECT_TRUE(all_close(sum(e, {0}), {0, 0, 0}));
  EXPECT_TRUE(all_close(prod(e, {0}), {1, 1, 1}));
  EXPECT_TRUE(all_close(mean(e, {0}), {kNaN, kNaN, kNaN}));
  EXPECT_EQ(sum(e).item<double>(), 0.0);
  EXPECT_EQ(sum(e, {1}).shape(), Shape{0});
  EXPECT_TRUE(all_close(logsumexp(e, {0}), {-kInf, -kInf, -kInf}));
  EXPECT_TRUE(all_close(all(zeros({0}, DType::boolean)), {1}));
  EXPECT_TRUE(all_close(any(zeros({0}, DType::boolean)), std::vector<double>{0}));
}

TEST(EmptyReduction, MaxOverEmptyAxisThrowsNamingOpAndShape) {
  Tensor e = zeros({0, 3});
  for (auto f : {+[](const Tensor& t) { return max(t, {0}); }, +[](const Tensor& t) { return min(t); },
                 +[](const Tensor& t) { return argmax(t, 0); }, +[](const Tensor& t) { return argmin(t, 0); }}) {
    try {
      f(e);
      ADD_FAILURE() << "expected soma::Error";
    } catch (const Error& err) {
      std::string msg = err.what();
      EXPECT_NE(msg.find("[0, 3]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(max(e, {0}), Error);
  // Reducing the non-empty axis leaves an empty result, which is fine.
  EXPECT_EQ(max(e, {1}).shape(), Shape{0});
  EXPECT_EQ(argmax(e, 1).shape(), Shape{0});
}

// ---- dtypes ----------------------------------------------------------------------------------
TEST(Sum, IntegerInputsKeepTheirDtype) {
  Tensor x = constant<int>({{1, -2, 3}, {4, 5, -6}});
  Tensor s = sum(x, {1});
  EXPECT_EQ(s.dtype(), DType::i32);
  EXPECT_TRUE(all_close(s, {2, 3}));
  EXPECT_TRUE(all_close(max(x, {0}), {4, 5, 3}));
  EXPECT_TRUE(all_close(min(x), {-6}));
  EXPECT_TRUE(all_close(prod(x, {0}), {4, -10, -18}));
  EXPECT_TRUE(all_close(sum(noncontiguous(x), {0}), {5, 3, -3}));
  EXPECT_TRUE(all_close(sum(cast(x, DType::i64)), {5}));
  EXPECT_TRUE(all_close(max(cast(constant<int>({3, 200, 7}), DType::u8)), {200}));
}

TEST(Sum, OfBoolCountsTrueElementsAsI64) {
  Tensor b = constant<double>({{1, 0, 1}, {1, 1, 1}}) > 0.5;
  Tensor s = sum(b, {1});
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_TRUE(all_close(s, {2, 3}));
}

TEST(Sum, HalfPrecisionAccumulatesInFloat) {
  // In f16 arithmetic 2048 + 1 rounds back to 2048; the accumulator must be wider.
  Tensor x = ones({4096}, DType::f16);
  Tensor s = sum(x);
  EXPECT_EQ(s.dtype(), DType::f16);
  EXPECT_EQ(s.item<double>(), 4096.0);
  Tensor b = ones({3, 4096}, DType::bf16);
  EXPECT_TRUE(all_close(sum(b, {1}), {4096, 4096, 4096}));
  EXPECT_TRUE(all_close(mean(cast(rand_tensor({2, 50}, 2), DType::f16), {1}),
                        naive_reduce(cast(cast(rand_tensor({2, 50}, 2), DType::f16), DType::f64),
                                     {1}, false, ref_mean).values,
                        1e-3, 1e-3));
}

TEST(Norm, HalfPrecisionDoesNotOverflowInTheSquares) {
  Tensor x = fill({4}, 300.0, DType::f16);  // 300^2 overflows f16
  EXPECT_TRUE(all_close(norm(x), {600}, 1e-3, 1e-3));
  EXPECT_TRUE(all_close(variance(x), std::vector<double>{0}));
}

TEST(AllAny, ReduceBoolTensors) {
  Tensor b = constant<double>({{1, 0, 1}, {1, 1, 1}}) > 0.5;
  EXPECT_TRUE(all_close(all(b, {1}), {0, 1}));
  EXPECT_TRUE(all_close(any(b, {0}), {1, 1, 1}));
  EXPECT_TRUE(all_close(all(b), std::vector<double>{0}));
  EXPECT_TRUE(all_close(any(logical_not(b), {1}), {1, 0}));
  EXPECT_EQ(all(b, {1}).dtype(), DType::boolean);
  EXPECT_TRUE(all_close(all(noncontiguous(b), {0}), {1, 0, 1}));
  EXPECT_EQ(any(b, {0, 1}, true).shape(), (Shape{1, 1}));
}

TEST(AllAny, LargeInputsOnEveryPath) {
  Tensor x = rand_tensor({3, 70000}, 4) > 0.9999;  // a few true entries per row
  Ref ref_any = naive_reduce(cast(x, DType::f64), {1}, false,
                             [](const std::vector<double>& v) { return ref_max(v); });
  EXPECT_TRUE(all_close(any(x, {1}), ref_any.values));
  EXPECT_TRUE(all_close(all(logical_not(x), {1}),
                        naive_reduce(cast(x, DType::f64), {1}, false, [](const std::vector<double>& v) {
                          return 1.0 - ref_max(v);
                        }).values));
}

TEST(Max, PropagatesNaN) {
  Tensor x = constant<double>({1, kNaN, 3});
  EXPECT_TRUE(std::isnan(max(x).item<double>()));
  EXPECT_TRUE(std::isnan(min(x).item<double>()));
  EXPECT_EQ(argmax(x, 0).item<std::int64_t>(), 1);
}

// ---- argmax / argmin -------------------------------------------------------------------------
double ref_argmax(const std::vector<double>& v) {
  return double(std::max_element(v.begin(), v.end()) - v.begin());
}
double ref_argmin(const std::vector<double>& v) {
  return double(std::min_element(v.begin(), v.end()) - v.begin());
}

TEST(Argmax, MatchesNaiveLoopOnEveryAxis) {
  std::uint64_t seed = 20;
  for (Shape s : std::vector<Shape>{{5}, {4, 7}, {3, 4, 5}, {2, 300, 3}})
    for (std::int64_t axis = -std::int64_t(s.size()); axis < std::int64_t(s.size()); ++axis)
      for (bool keep : {false, true}) {
        Tensor x = rand_tensor(s, seed++);
        SCOPED_TRACE(shape_str(s) + " axis " + std::to_string(axis));
        Tensor a = argmax(x, axis, keep);
        EXPECT_EQ(a.dtype(), DType::i64);
        EXPECT_TRUE(matches(a, naive_reduce(x, {axis}, keep, ref_argmax)));
        EXPECT_TRUE(matches(argmin(x, axis, keep), naive_reduce(x, {axis}, keep, ref_argmin)));
        EXPECT_TRUE(matches(argmax(noncontiguous(x), axis, keep), naive_reduce(x, {axis}, keep, ref_argmax)));
      }
}

TEST(Argmax, TiesGoToTheFirstIndex) {
  Tensor x = constant<int>({{3, 7, 7, 1}, {2, 2, 0, 0}});
  EXPECT_TRUE(all_close(argmax(x, 1), {1, 0}));
  EXPECT_TRUE(all_close(argmin(x, 1), {3, 2}));
  EXPECT_TRUE(all_close(argmax(transpose(x), 0), {1, 0}));
}

TEST(Argmax, HalfAndIntegerInputs) {
  Tensor x = rand_tensor({6, 9}, 30);
  EXPECT_TRUE(matches(argmax(cast(x, DType::f16), 0), naive_reduce(cast(cast(x, DType::f16), DType::f64), {0}, false, ref_argmax)));
  Tensor i = cast(x * 1000.0, DType::i32);
  EXPECT_TRUE(matches(argmin(i, 1), naive_reduce(cast(i, DType::f64), {1}, false, ref_argmin)));
}

// ---- softmax / log_softmax -------------------------------------------------------------------
Ref naive_softmax(const Tensor& t, std::int64_t axis, bool log_form) {
  const Shape& s = t.shape();
  std::size_t ax = std::size_t(axis < 0 ? axis + std::int64_t(s.size()) : axis);
  std::vector<double> x = t.to_vector<double>(), y(x.size());
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < ax; ++i) outer *= s[i];
  for (std::size_t i = ax + 1; i < s.size(); ++i) inner *= s[i];
  const std::int64_t n = s[ax];
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t c = 0; c < inner; ++c) {
      auto at = [&](std::int64_t i) { return std::size_t((o * n + i) * inner + c); };
      double m = -kInf, z = 0;
      for (std::int64_t i = 0; i < n; ++i) m = std::max(m, x[at(i)]);
      for (std::int64_t i = 0; i < n; ++i) z += std::exp(x[at(i)] - m);
      for (std::int64_t i = 0; i < n; ++i)
        y[at(i)] = log_form ? x[at(i)] - m - std::log(z) : std::exp(x[at(i)] - m) / z;
    }
  return {s, y};
}

TEST(Softmax, MatchesNaiveLoopOnEveryAxis) {
  std::uint64_t seed = 40;
  for (Shape s : std::vector<Shape>{{7}, {3, 5}, {2, 3, 4}, {4, 300, 2}})
    for (std::int64_t axis = -std::int64_t(s.size()); axis < std::int64_t(s.size()); ++axis) {
      Tensor x = rand_tensor(s, seed++, -4, 4);
      SCOPED_TRACE(shape_str(s) + " axis " + std::to_string(axis));
      EXPECT_TRUE(matches(softmax(x, axis), naive_softmax(x, axis, false), 1e-12));
      EXPECT_TRUE(matches(log_softmax(x, axis), naive_softmax(x, axis, true), 1e-12));
      EXPECT_TRUE(matches(softmax(noncontiguous(x), axis), naive_softmax(x, axis, false), 1e-12));
      EXPECT_TRUE(matches(log_softmax(noncontiguous(x), axis), naive_softmax(x, axis, true), 1e-12));
    }
}

TEST(Softmax, LargeInputsStayFiniteAndCorrect) {
  Tensor x = constant<float>({1000.0f, 1001.0f});
  double e = std::exp(-1.0);
  EXPECT_TRUE(all_close(softmax(x), {e / (1 + e), 1 / (1 + e)}, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(log_softmax(x), {-std::log1p(1 / e), -std::log1p(e)}, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(logsumexp(x), {1001 + std::log1p(e)}, 1e-3, 1e-6));
  Tensor neg = constant<double>({-1000.0, -1001.0});
  EXPECT_TRUE(all_close(softmax(neg), {1 / (1 + e), e / (1 + e)}, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(logsumexp(neg), {-1000 + std::log1p(e)}, 1e-12, 1e-12));
}

TEST(Softmax, FloatMatchesDoubleReferenceToFloatPrecision) {
  Tensor x = rand_tensor({6, 1000}, 52, -40, 40);  // many entries far below the max
  Tensor y = softmax(cast(x, DType::f32), 1);
  Ref ref = naive_softmax(cast(cast(x, DType::f32), DType::f64), 1, false);
  // x - max rounds in f32 (up to 2e-6 absolute at |x - max| ~ 40), hence 1e-5 relative.
  EXPECT_TRUE(all_close(y, ref.values, 1e-30, 1e-5));
  EXPECT_TRUE(all_close(log_softmax(cast(x, DType::f32), 0),
                        naive_softmax(cast(cast(x, DType::f32), DType::f64), 0, true).values, 1e-5, 1e-6));
}

TEST(Softmax, MinusInfinityEntriesGetZeroProbability) {
  Tensor x = constant<float>({{0.0f, -INFINITY, 1.0f}, {-INFINITY, -INFINITY, 2.0f}});
  double e = std::exp(1.0);
  EXPECT_TRUE(all_close(softmax(x, 1), {1 / (1 + e), 0, e / (1 + e), 0, 0, 1}, 1e-7, 1e-6));
  EXPECT_TRUE(all_close(softmax(transpose(x), 0), {1 / (1 + e), 0, 0, 0, e / (1 + e), 1}, 1e-7, 1e-6));
}

TEST(Softmax, HalfPrecisionComputesInFloat) {
  Tensor x = rand_tensor({3, 10}, 50, -5, 5);
  Tensor h = cast(x, DType::f16);
  Ref ref = naive_softmax(cast(h, DType::f64), 1, false);
  Tensor y = softmax(h, 1);
  EXPECT_EQ(y.dtype(), DType::f16);
  EXPECT_TRUE(all_close(y, ref.values, 1e-3, 2e-3));
  EXPECT_TRUE(all_close(log_softmax(cast(x, DType::bf16), 0),
                        naive_softmax(cast(cast(x, DType::bf16), DType::f64), 0, true).values, 2e-2, 2e-2));
}

TEST(Softmax, RowsSumToOne) {
  Tensor y = softmax(rand_tensor({5, 9}, 51, -10, 10, DType::f32), 1);
  EXPECT_TRUE(all_close(sum(y, {1}), std::vector<double>(5, 1.0), 1e-6, 1e-6));
}

TEST(Logsumexp, MinusInfinitySliceGivesMinusInfinity) {
  Tensor x = constant<double>({{-kInf, -kInf}, {0.0, 0.0}});
  EXPECT_TRUE(all_close(logsumexp(x, {1}), {-kInf, std::log(2.0)}));
}

// ---- sum_to ----------------------------------------------------------------------------------
TEST(SumTo, SumsLeadingAndStretchedDims) {
  Tensor x = rand_tensor({2, 3, 4}, 60);
  EXPECT_TRUE(matches(sum_to(x, {3, 4}), naive_reduce(x, {0}, false, ref_sum)));
  EXPECT_TRUE(matches(sum_to(x, {3, 1}), Ref{{3, 1}, naive_reduce(x, {0, 2}, false, ref_sum).values}));
  EXPECT_TRUE(matches(sum_to(x, {1, 3, 1}), Ref{{1, 3, 1}, naive_reduce(x, {0, 2}, false, ref_sum).values}));
  EXPECT_TRUE(matches(sum_to(x, {}), Ref{{}, {ref_sum(x.to_vector<double>())}}));
  EXPECT_TRUE(matches(sum_to(x, {4}), naive_reduce(x, {0, 1}, false, ref_sum)));
  EXPECT_TRUE(matches(sum_to(noncontiguous(x), {2, 1, 4}), Ref{{2, 1, 4}, naive_reduce(x, {1}, false, ref_sum).values}));
}

TEST(SumTo, ReturnsTheInputItselfWhenShapesMatch) {
  Tensor x = rand_tensor({2, 3}, 61);
  EXPECT_EQ(sum_to(x, {2, 3}).impl_ptr(), x.impl_ptr());
}

TEST(SumTo, RejectsShapesThatDoNotBroadcast) {
  Tensor x = rand_tensor({2, 3}, 62);
  try {
    sum_to(x, {2});
    ADD_FAILURE() << "expected soma::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("sum_to"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
  }
  EXPECT_THROW(sum_to(x, {4, 2, 3}), Error);
}

// ---- gradients (f64, central differences) --------------------------------------------------
TEST(SumGrad, MatchesFiniteDifferences) {
  Tensor x = rand_tensor({2, 3, 4}, 70);
  for (const Axes& axes : std::vector<Axes>{{}, {0}, {-1}, {0, 2}})
    for (bool keep : {false, true})
      EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return sum(v[0], axes, keep); }, {x}));
}

TEST(MeanGrad, MatchesFiniteDifferences) {
  Tensor x = rand_tensor({2, 3, 4}, 71);
  for (const Axes& axes : std::vector<Axes>{{}, {1}, {0, -1}})
    for (bool keep : {false, true})
      EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return mean(v[0], axes, keep); }, {x}));
}

TEST(MaxGrad, MatchesFiniteDifferencesWithoutTies) {
  Tensor x = rand_tensor({3, 4, 5}, 72);  // distinct values almost surely
  for (const Axes& axes : std::vector<Axes>{{}, {1}, {0, 2}})
    for (bool keep : {false, true}) {
      EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return max(v[0], axes, keep); }, {x}));
      EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return min(v[0], axes, keep); }, {x}));
    }
}

TEST(MaxGrad, TiesShareTheGradientEvenly) {
  Tensor x = constant<double>({{1.0, 5.0, 5.0}, {2.0, 0.0, 1.0}});
  GradientTape tape;
  tape.watch(x);
  Tensor y = sum(max(x, {1}));
  Tensor g = tape.gradient(y, x);
  EXPECT_TRUE(all_close(g, {0, 0.5, 0.5, 1, 0, 0}));
}

TEST(ProdGrad, MatchesFiniteDifferences) {
  Tensor x = rand_tensor({2, 3, 4}, 73, 0.5, 1.5);
  for (const Axes& axes : std::vector<Axes>{{}, {1}, {0, 2}})
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return prod(v[0], axes); }, {x}));
}

TEST(ProdGrad, IsExactWithZerosInTheSlice) {
  // Row 0: one zero -> only the zero gets the product of the others. Row 1: two zeros -> all 0.
  // Row 2: no zero -> prod / x.
  Tensor x = constant<double>({{2.0, 0.0, 3.0}, {0.0, 4.0, 0.0}, {1.0, 2.0, 4.0}});
  GradientTape tape;
  tape.watch(x);
  Tensor g = tape.gradient(sum(prod(x, {1})), x);
  EXPECT_TRUE(all_close(g, {0, 6, 0, 0, 0, 0, 8, 4, 2}));
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& v) { return prod(v[0], {1}); },
                              {constant<double>({{2.0, 0.0, 3.0}, {1.0, 2.0, 4.0}})}));
}

TEST(LogsumexpGrad, MatchesFiniteDifferences) {
  Tensor x = rand_tensor({3, 4}, 74, -3, 3);
  for (const Axes& axes : std::vector<Axes>{{}, {0}, {1}})
    for (bool keep : {false, true})
      EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return logsumexp(v[0], axes, keep); }, {x}));
}

TEST(VarianceGrad, MatchesFiniteDifferences) {
  Tensor x = rand_tensor({3, 4}, 75);
  for (const Axes& axes : std::vector<Axes>{{}, {0}, {-1}}) {
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return variance(v[0], axes); }, {x}));
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return stddev(v[0], axes, true); }, {x}));
  }
}

TEST(NormGrad, MatchesFiniteDifferencesForEachOrd) {
  Tensor x = rand_tensor({3, 4}, 76, 0.1, 1.0) * constant<double>({1.0, -1.0, 1.0, -1.0});
  for (double ord : {1.0, 2.0, kInf})
    for (const Axes& axes : std::vector<Axes>{{}, {1}})
      EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return norm(v[0], axes, false, ord); }, {x}))
          << "ord " << ord;
}

TEST(SoftmaxGrad, MatchesFiniteDifferences) {
  Tensor x = rand_tensor({3, 4, 2}, 77, -2, 2);
  for (std::int64_t axis : {0, 1, -1}) {
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return softmax(v[0], axis); }, {x}));
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return log_softmax(v[0], axis); }, {x}));
  }
}

TEST(SoftmaxGrad, SecondDerivativeMatchesFiniteDifferences) {
  // The gradient is itself made of ops, so differentiating it again works.
  Tensor x = rand_tensor({2, 3}, 78, -2, 2);
  auto grad_of_softmax = [](const std::vector<Tensor>& v) {
    GradientTape inner;
    inner.watch(v[0]);
    Tensor y = sum(square(softmax(v[0], 1)));
    return inner.gradient(y, v[0]);
  };
  EXPECT_TRUE(check_gradients(grad_of_softmax, {x}, 1e-5, 1e-4));
}

TEST(SumToGrad, MatchesFiniteDifferences) {
  Tensor x = rand_tensor({2, 3, 4}, 79);
  for (Shape s : std::vector<Shape>{{3, 4}, {3, 1}, {1, 3, 1}, {}, {2, 3, 4}})
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& v) { return sum_to(v[0], s); }, {x}));
}

TEST(SumGrad, BroadcastingAddSendsSummedGradients) {
  Tensor a = rand_tensor({2, 3}, 80), b = rand_tensor({3}, 81);
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& v) { return v[0] + v[1]; }, {a, b}));
}

// ---- errors ----------------------------------------------------------------------------------
void expect_error_mentions(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected soma::Error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(ReductionErrors, AxisOutOfRangeNamesOpAxisAndShape) {
  Tensor x = zeros({2, 3});
  expect_error_mentions([&] { sum(x, {2}); }, {"sum", "axis 2", "[2, 3]"});
  expect_error_mentions([&] { max(x, {-3}); }, {"max", "axis -3", "[2, 3]"});
  expect_error_mentions([&] { mean(x, {0, 5}); }, {"mean", "axis 5", "[2, 3]"});
  expect_error_mentions([&] { argmax(x, 2); }, {"argmax", "axis 2", "[2, 3]"});
  expect_error_mentions([&] { softmax(x, 2); }, {"softmax", "axis 2", "[2, 3]"});
  expect_error_mentions([&] { logsumexp(x, {7}); }, {"logsumexp", "axis 7", "[2, 3]"});
  expect_error_mentions([&] { sum(scalar(1.0), {0}); }, {"sum", "axis 0", "[]"});
}

TEST(ReductionErrors, RepeatedAxisNamesTheOp) {
  Tensor x = zeros({2, 3});
  expect_error_mentions([&] { sum(x, {1, -1}); }, {"sum", "axis 1", "more than once"});
  expect_error_mentions([&] { variance(x, {0, 0}); }, {"variance", "more than once"});
}

TEST(ReductionErrors, BadDtypesNameOpAndDtype) {
  Tensor i = zeros({2, 3}, DType::i32);
  Tensor f = zeros({2, 3}, DType::f32);
  Tensor b = zeros({2, 3}, DType::boolean);
  expect_error_mentions([&] { mean(i); }, {"mean", "i32"});
  expect_error_mentions([&] { variance(i); }, {"variance", "i32"});
  expect_error_mentions([&] { stddev(i); }, {"stddev", "i32"});
  expect_error_mentions([&] { logsumexp(i); }, {"logsumexp", "i32"});
  expect_error_mentions([&] { norm(i); }, {"norm", "i32"});
  expect_error_mentions([&] { softmax(i); }, {"softmax", "i32"});
  expect_error_mentions([&] { log_softmax(i); }, {"log_softmax", "i32"});
  expect_error_mentions([&] { all(f); }, {"all", "f32", "bool"});
  expect_error_mentions([&] { any(i); }, {"any", "i32", "bool"});
  expect_error_mentions([&] { max(b); }, {"max", "bool"});
  expect_error_mentions([&] { prod(b); }, {"prod", "bool"});
}

TEST(ReductionErrors, NormRejectsOtherOrders) {
  expect_error_mentions([] { norm(zeros({3}), {}, false, 3.0); }, {"norm", "ord", "3"});
}

TEST(ReductionErrors, SoftmaxOfScalarHasNoAxis) {
  expect_error_mentions([] { softmax(scalar(1.0)); }, {"softmax", "[]"});
}

}  // namespace
}  // namespace soma
