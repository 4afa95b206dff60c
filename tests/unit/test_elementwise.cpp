// Elementwise ops: forward against naive references (broadcasting, scalars, empty and
// non-contiguous inputs, several dtypes) and gradients against finite differences in f64.
#include <cmath>
#include <functional>
#include <numbers>

#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::noncontiguous;
using soma::testing::rand_tensor;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;          // input domain for the test
  bool differentiable;
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }

double ref_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"abs", [](auto& t) { return abs(t); }, [](double x) { return std::abs(x); }, -2, 2, true},
      {"negative", [](auto& t) { return negative(t); }, [](double x) { return -x; }, -2, 2, true},
      {"reciprocal", [](auto& t) { return reciprocal(t); }, [](double x) { return 1 / x; }, 0.5, 2, true},
      {"square", [](auto& t) { return square(t); }, [](double x) { return x * x; }, -2, 2, true},
      {"sqrt", [](auto& t) { return sqrt(t); }, [](double x) { return std::sqrt(x); }, 0.1, 4, true},
      {"rsqrt", [](auto& t) { return rsqrt(t); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 4, true},
      {"exp", [](auto& t) { return exp(t); }, [](double x) { return std::exp(x); }, -3, 3, true},
      {"log", [](auto& t) { return log(t); }, [](double x) { return std::log(x); }, 0.1, 4, true},
      {"log1p", [](auto& t) { return log1p(t); }, [](double x) { return std::log1p(x); }, -0.5, 3, true},
      {"expm1", [](auto& t) { return expm1(t); }, [](double x) { return std::expm1(x); }, -2, 2, true},
      {"sin", [](auto& t) { return sin(t); }, [](double x) { return std::sin(x); }, -3, 3, true},
      {"cos", [](auto& t) { return cos(t); }, [](double x) { return std::cos(x); }, -3, 3, true},
      {"tanh", [](auto& t) { return tanh(t); }, [](double x) { return std::tanh(x); }, -3, 3, true},
      {"erf", [](auto& t) { return erf(t); }, [](double x) { return std::erf(x); }, -2, 2, true},
      {"sigmoid", [](auto& t) { return sigmoid(t); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -5, 5, true},
      {"relu", [](auto& t) { return relu(t); }, [](double x) { return x > 0 ? x : 0; }, -2, 2, true},
      {"leaky_relu", [](auto& t) { return leaky_relu(t, 0.1); }, [](double x) { return x > 0 ? x : 0.1 * x; }, -2, 2, true},
      {"elu", [](auto& t) { return elu(t, 1.5); }, [](double x) { return x > 0 ? x : 1.5 * std::expm1(x); }, -2, 2, true},
      {"gelu", [](auto& t) { return gelu(t); }, ref_gelu, -3, 3, true},
      {"gelu_tanh", [](auto& t) { return gelu(t, true); }, ref_gelu_tanh, -3, 3, true},
      {"softplus", [](auto& t) { return softplus(t); }, [](double x) { return std::log1p(std::exp(x)); }, -5, 5, true},
      {"sign", [](auto& t) { return sign(t); }, [](double x) { return double((x > 0) - (x < 0)); }, -2, 2, false},
      {"round", [](auto& t) { return round(t); }, [](double x) { return std::nearbyint(x); }, -5, 5, false},
      {"ceil", [](auto& t) { return ceil(t); }, [](double x) { return std::ceil(x); }, -5, 5, false},
      {"floor", [](auto& t) { return floor(t); }, [](double x) { return std::floor(x); }, -5, 5, false},
  };
}

std::vector<double> map_values(const std::vector<double>& v, const std::function<double(double)>& f) {
  std::vector<double> out;
  for (double x : v) out.push_back(f(x));
  return out;
}

}  // namespace

class UnaryOp : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryOp, MatchesReferenceForManyShapesAndLayouts) {
  const UnaryCase& c = GetParam();
  for (Shape shape : {Shape{}, Shape{0}, Shape{7}, Shape{3, 4}, Shape{2, 3, 5}, Shape{70000}}) {
    Tensor x = rand_tensor(shape, 11, c.lo, c.hi);
    std::vector<double> expect = map_values(x.to_vector<double>(), c.ref);
    EXPECT_TRUE(all_close(c.op(x), expect, 1e-12, 1e-12)) << c.name << " f64 " << shape_str(shape);
    Tensor xf = cast(x, DType::f32);
    std::vector<double> expect_f = map_values(xf.to_vector<double>(), c.ref);
    Tensor yf = c.op(xf);
    EXPECT_EQ(yf.dtype(), DType::f32);
    EXPECT_TRUE(all_close(yf, expect_f, 1e-5, 1e-5)) << c.name << " f32 " << shape_str(shape);
    if (!shape.empty()) {
      EXPECT_TRUE(all_close(c.op(noncontiguous(x)), expect, 1e-12, 1e-12))
          << c.name << " non-contiguous " << shape_str(shape);
    }
  }
}

TEST_P(UnaryOp, HalfPrecisionComputesThroughF32) {
  const UnaryCase& c = GetParam();
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor x = cast(rand_tensor({4, 5}, 3, c.lo, c.hi), t);
    Tensor y = c.op(x);
    EXPECT_EQ(y.dtype(), t);
    // Reference: the same math on the exactly representable inputs, rounded once to the dtype.
    std::vector<double> expect = cast(cast(constant(map_values(x.to_vector<double>(), c.ref), {4, 5}),
                                           DType::f32), t).to_vector<double>();
    EXPECT_TRUE(all_close(y, expect, 1e-2, t == DType::bf16 ? 1e-2 : 2e-3)) << c.name;
  }
}

TEST_P(UnaryOp, GradientMatchesFiniteDifferences) {
  const UnaryCase& c = GetParam();
  Tensor x = rand_tensor({3, 4}, 5, c.lo, c.hi);
  if (c.differentiable) {
    EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x}))
        << c.name;
  } else {  // piecewise constant: zero gradient
    GradientTape tape;
    tape.watch(x);
    Tensor g = tape.gradient(c.op(x), x);
    ASSERT_TRUE(g.defined()) << c.name;
    EXPECT_TRUE(all_close(g, zeros_like(x))) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Elementwise, UnaryOp, ::testing::ValuesIn(unary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(UnaryOp, FloatingOnlyOpsRejectIntegersNamingOpAndDtype) {
  Tensor i = constant({1, 2, 3});
  try {
    exp(i);
    FAIL() << "exp of i32 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sqrt(constant({true})), Error);
  EXPECT_THROW(negative(constant({true, false})), Error);
}

TEST(UnaryOp, IntegerAbsNegativeSignSquareRelu) {
  Tensor i = constant({-3, 0, 4});
  EXPECT_EQ(abs(i).to_vector<int>(), (std::vector<int>{3, 0, 4}));
  EXPECT_EQ(negative(i).to_vector<int>(), (std::vector<int>{3, 0, -4}));
  EXPECT_EQ(sign(i).to_vector<int>(), (std::vector<int>{-1, 0, 1}));
  EXPECT_EQ(square(i).to_vector<int>(), (std::vector<int>{9, 0, 16}));
  EXPECT_EQ(relu(i).to_vector<int>(), (std::vector<int>{0, 0, 4}));
  EXPECT_EQ(relu(i).dtype(), DType::i32);
}

TEST(UnaryOp, SigmoidAndSoftplusStayFiniteForLargeInputs) {
  Tensor x = constant({-1000.0, -50.0, 0.0, 50.0, 1000.0});
  EXPECT_TRUE(all_close(sigmoid(x), {0.0, 1.9287498479639178e-22, 0.5, 1.0, 1.0}, 1e-30, 1e-12));
  EXPECT_TRUE(all_close(softplus(x), {0.0, 1.9287498479639178e-22, std::log(2.0), 50.0, 1000.0}, 1e-30, 1e-12));
}

TEST(UnaryOp, RoundIsHalfToEven) {
  EXPECT_TRUE(all_close(round(constant({0.5, 1.5, 2.5, -0.5, -1.5})), {0.0, 2.0, 2.0, -0.0, -2.0}));
}

// ---- binary ----------------------------------------------------------------------------------

namespace {
struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo, hi;  // domain for both operands
  bool differentiable;
};

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](auto& a, auto& b) { return a + b; }, [](double a, double b) { return a + b; }, -2, 2, true},
      {"subtract", [](auto& a, auto& b) { return a - b; }, [](double a, double b) { return a - b; }, -2, 2, true},
      {"multiply", [](auto& a, auto& b) { return a * b; }, [](double a, double b) { return a * b; }, -2, 2, true},
      {"divide", [](auto& a, auto& b) { return a / b; }, [](double a, double b) { return a / b; }, 0.5, 2, true},
      {"pow", [](auto& a, auto& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); }, 0.5, 2, true},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }, -2, 2, true},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }, -2, 2, true},
      {"squared_difference", [](auto& a, auto& b) { return squared_difference(a, b); }, [](double a, double b) { return (a - b) * (a - b); }, -2, 2, true},
      {"mod", [](auto& a, auto& b) { return mod(a, b); }, py_mod, 0.5, 3, true},
      {"floor_div", [](auto& a, auto& b) { return floor_div(a, b); }, [](double a, double b) { return std::floor(a / b); }, 0.5, 3, false},
  };
}

// Naive broadcasting reference: index arithmetic written out for each output element.
std::vector<double> broadcast_ref(const Tensor& a, const Tensor& b, const Shape& out,
                                  const std::function<double(double, double)>& f) {
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> res;
  std::int64_t n = numel(out);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::int64_t> idx(out.size());
    std::int64_t r = i;
    for (std::size_t d = out.size(); d-- > 0;) {
      idx[d] = r % out[d];
      r /= out[d];
    }
    auto flat = [&](const Shape& s) {
      std::int64_t off = 0;
      std::size_t lead = out.size() - s.size();
      for (std::size_t d = 0; d < s.size(); ++d) off = off * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
      return off;
    };
    res.push_back(f(va[std::size_t(flat(a.shape()))], vb[std::size_t(flat(b.shape()))]));
  }
  return res;
}

const std::vector<std::pair<Shape, Shape>> kBroadcastPairs = {
    {{5, 3, 2}, {5, 3, 2}}, {{5, 3, 2}, {3, 2}}, {{5, 3, 2}, {5, 1, 2}}, {{5, 3, 2}, {1, 3, 2}},
    {{5, 3, 2}, {5, 3, 1}}, {{5, 3, 2}, {}},     {{}, {5, 3, 2}},        {{4, 1}, {1, 6}},
    {{0, 3}, {3}},          {{}, {}},            {{300, 300}, {300}},    {{1, 300}, {300, 1}}};
}  // namespace

class BinaryOp : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryOp, MatchesReferenceWithBroadcasting) {
  const BinaryCase& c = GetParam();
  for (auto& [sa, sb] : kBroadcastPairs) {
    Tensor a = rand_tensor(sa, 1, c.lo, c.hi), b = rand_tensor(sb, 2, c.lo, c.hi);
    Shape out = broadcast_shapes(sa, sb);
    Tensor y = c.op(a, b);
    EXPECT_EQ(y.shape(), out);
    EXPECT_TRUE(all_close(y, broadcast_ref(a, b, out, c.ref), 1e-12, 1e-12))
        << c.name << " " << shape_str(sa) << " with " << shape_str(sb);
    if (!sa.empty() && !sb.empty()) {
      EXPECT_TRUE(all_close(c.op(noncontiguous(a), noncontiguous(b)), broadcast_ref(a, b, out, c.ref),
                            1e-12, 1e-12))
          << c.name << " non-contiguous " << shape_str(sa) << " with " << shape_str(sb);
    }
    Tensor af = cast(a, DType::f32), bf = cast(b, DType::f32);
    EXPECT_TRUE(all_close(c.op(af, bf), broadcast_ref(af, bf, out, c.ref), 1e-5, 1e-5)) << c.name << " f32";
  }
}

TEST_P(BinaryOp, GradientMatchesFiniteDifferencesThroughBroadcasting) {
  const BinaryCase& c = GetParam();
  auto f = [&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); };
  for (auto& [sa, sb] : {std::pair<Shape, Shape>{{3, 4}, {3, 4}}, {{2, 3, 4}, {3, 1}}, {{4}, {2, 1, 4}}, {{}, {3}}}) {
    Tensor a = rand_tensor(sa, 7, c.lo, c.hi), b = rand_tensor(sb, 8, c.lo, c.hi);
    if (c.differentiable) {
      EXPECT_TRUE(check_gradients(f, {a, b})) << c.name << " " << shape_str(sa) << " " << shape_str(sb);
    } else {
      GradientTape tape;
      tape.watch(a);
      Tensor g = tape.gradient(f({a, b}), a);
      ASSERT_TRUE(g.defined());
      EXPECT_TRUE(all_close(g, zeros_like(a)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Elementwise, BinaryOp, ::testing::ValuesIn(binary_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Broadcasting, IncompatibleShapesFailNamingBothShapes) {
  for (auto& [sa, sb] : {std::pair<Shape, Shape>{{5, 3, 2}, {5, 2}}, {{5, 3, 2}, {5, 3}}}) {
    try {
      add(zeros(sa), zeros(sb));
      FAIL() << "no error for " << shape_str(sa) << " + " << shape_str(sb);
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("add"), std::string::npos) << m;
      EXPECT_NE(m.find(shape_str(sa)), std::string::npos) << m;
      EXPECT_NE(m.find(shape_str(sb)), std::string::npos) << m;
    }
  }
}

TEST(Broadcasting, MessageNamesTheDimension) {
  try {
    multiply(zeros({5, 3, 2}), zeros({5, 2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "multiply: cannot broadcast [5, 3, 2] with [5, 2]: dimension -2 is 3 vs 5");
  }
}

TEST(BinaryOp, MixedDtypesPromote) {
  Tensor a = constant({1, 2, 3});
  Tensor b = constant({0.5f, 0.5f, 0.5f});
  Tensor y = a + b;
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, {1.5, 2.5, 3.5}));
  EXPECT_EQ((constant({1.0}) * constant({2.0f})).dtype(), DType::f64);
  EXPECT_EQ((cast(constant({1.0f}), DType::f16) + cast(constant({1.0f}), DType::bf16)).dtype(), DType::f32);
}

TEST(BinaryOp, ScalarOperandsTakeTheTensorsDtype) {
  Tensor a = constant({1.0f, 2.0f});
  EXPECT_EQ((a * 2.0).dtype(), DType::f32);
  EXPECT_TRUE(all_close(a * 2.0, {2, 4}));
  EXPECT_TRUE(all_close(1.0 - a, {0, -1}));
  EXPECT_TRUE(all_close(2.0 / a, {2, 1}));
  EXPECT_TRUE(all_close(a / 2.0 + 1.0, {1.5, 2}));
  EXPECT_EQ((constant({1, 2}) + 1.0).dtype(), DType::i32);
}

TEST(BinaryOp, IntegerDivideIsTrueDivisionInF32) {
  Tensor y = constant({7, -7}) / constant({2, 2});
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, {3.5, -3.5}));
}

TEST(BinaryOp, IntegerFloorDivAndModFollowPython) {
  Tensor a = constant({7, -7, 7, -7}), b = constant({2, 2, -2, -2});
  EXPECT_EQ(floor_div(a, b).to_vector<int>(), (std::vector<int>{3, -4, -4, 3}));
  EXPECT_EQ(mod(a, b).to_vector<int>(), (std::vector<int>{1, 1, -1, -1}));
  EXPECT_EQ((a % b).to_vector<int>(), (std::vector<int>{1, 1, -1, -1}));
}

TEST(BinaryOp, IntegerDivisionByZeroGivesZeroAsNumPy) {
  // Defined as NumPy's result (issue 20; test_integer_division has the full specification).
  EXPECT_EQ(floor_div(constant({1, 2}), constant({1, 0})).to_vector<int>(),
            (std::vector<int>{1, 0}));
  EXPECT_EQ(mod(constant({1, 2}), constant({0, 1})).to_vector<int>(), (std::vector<int>{0, 0}));
  // Floats follow IEEE: inf, not an error.
  EXPECT_TRUE(std::isinf(divide(constant({1.0}), constant({0.0})).item<double>()));
}

TEST(BinaryOp, IntegerPow) {
  EXPECT_EQ(pow(constant({2, 3, -2}), constant({10, 0, 3})).to_vector<int>(), (std::vector<int>{1024, 1, -8}));
}

TEST(BinaryOp, MaximumAndMinimumPropagateNaN) {
  Tensor a = constant({std::nan(""), 1.0}), b = constant({0.0, std::nan("")});
  auto mx = maximum(a, b).to_vector<double>();
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_TRUE(std::isnan(mx[1]));
}

TEST(BinaryOp, MaximumGradientGoesToFirstInputOnTies) {
  Tensor a = constant({1.0, 2.0, 3.0}), b = constant({1.0, 5.0, 0.0});
  GradientTape tape(true);
  tape.watch(std::vector<Tensor>{a, b});
  Tensor y = maximum(a, b);
  EXPECT_TRUE(all_close(tape.gradient(y, a), {1, 0, 1}));
  EXPECT_TRUE(all_close(tape.gradient(y, b), {0, 1, 0}));
}

TEST(BinaryOp, BoolArithmeticIsRejected) {
  EXPECT_THROW(add(constant({true}), constant({false})), Error);
}

// ---- comparisons, logic, where, clip --------------------------------------------------------

TEST(Comparison, ReturnsBoolWithBroadcasting) {
  Tensor a = constant({{1.0, 2.0, 3.0}}), b = constant({{2.0}, {3.0}});
  Tensor lt = a < b;
  EXPECT_EQ(lt.dtype(), DType::boolean);
  EXPECT_EQ(lt.shape(), (Shape{2, 3}));
  EXPECT_EQ(lt.to_vector<bool>(), (std::vector<bool>{true, false, false, true, true, false}));
  EXPECT_EQ((a <= b).to_vector<bool>(), (std::vector<bool>{true, true, false, true, true, true}));
  EXPECT_EQ((a > b).to_vector<bool>(), (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_EQ((a >= b).to_vector<bool>(), (std::vector<bool>{false, true, true, false, false, true}));
  EXPECT_EQ((a == b).to_vector<bool>(), (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_EQ((a != b).to_vector<bool>(), (std::vector<bool>{true, false, true, true, true, false}));
}

TEST(Comparison, IntegerTensorAgainstFractionalScalarDoesNotTruncate) {
  EXPECT_EQ((constant({0, 1}) > 0.5).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ((constant({0, 1}) == 1.0).to_vector<bool>(), (std::vector<bool>{false, true}));
}

TEST(Logical, AndOrNotOnBools) {
  Tensor a = constant({true, true, false, false}), b = constant({true, false, true, false});
  EXPECT_EQ((a && b).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ((a || b).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ((!a).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  EXPECT_THROW(logical_and(constant({1}), constant({1})), Error);
}

TEST(Where, SelectsWithThreeWayBroadcasting) {
  Tensor cond = constant({true, false, true});
  Tensor a = constant({{1.0}, {2.0}});
  Tensor b = constant({-1.0, -2.0, -3.0});
  Tensor y = where(cond, a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_TRUE(all_close(y, {1, -2, 1, 2, -2, 2}));
}

TEST(Where, GradientFlowsToTheSelectedBranch) {
  Tensor cond = constant({true, false, true, false});
  auto f = [&](const std::vector<Tensor>& in) { return where(cond, in[0] * in[0], in[1]); };
  EXPECT_TRUE(check_gradients(f, {rand_tensor({4}, 1), rand_tensor({4}, 2)}));
  EXPECT_TRUE(check_gradients([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); },
                              {rand_tensor({2, 1}, 3), rand_tensor({}, 4)}));
}

TEST(Where, ConditionMustBeBool) {
  EXPECT_THROW(where(constant({1.0}), constant({1.0}), constant({2.0})), Error);
}

TEST(Clip, BoundsValuesAndPassesGradientInside) {
  Tensor x = constant({-2.0, -0.5, 0.5, 2.0});
  EXPECT_TRUE(all_close(clip(x, -1, 1), {-1, -0.5, 0.5, 1}));
  GradientTape tape;
  tape.watch(x);
  EXPECT_TRUE(all_close(tape.gradient(clip(x, -1, 1), x), {0, 1, 1, 0}));
  EXPECT_THROW(clip(x, 1, -1), Error);
}

TEST(HalfPrecision, AddAndMultiplyRoundOnceFromF32) {
  Tensor a = cast(constant({1.0f, 2.5f, 1000.0f}), DType::f16);
  Tensor b = cast(constant({0.0009765625f, 0.25f, 0.5f}), DType::f16);
  Tensor y = a + b;
  EXPECT_EQ(y.dtype(), DType::f16);
  EXPECT_TRUE(all_close(y, {1.0009765625, 2.75, 1000.5}));
  Tensor bf = cast(constant({3.0f}), DType::bf16) * cast(constant({7.0f}), DType::bf16);
  EXPECT_EQ(bf.dtype(), DType::bf16);
  EXPECT_EQ(bf.item<float>(), 21.0f);
}

TEST(Threads, LargeBinaryOpGivesSameResultWithOneAndTwoThreads) {
  Tensor a = rand_tensor({1 << 18}, 1, -1, 1, DType::f32), b = rand_tensor({1 << 18}, 2, -1, 1, DType::f32);
  int before = get_num_threads();
  set_num_threads(1);
  auto one = (a * b + a).to_vector<float>();
  set_num_threads(2);
  auto two = (a * b + a).to_vector<float>();
  set_num_threads(before);
  EXPECT_EQ(one, two);
}
