// Creation functions (constants, fills, eye, ranges) and reading values back (item, at,
// to_vector).
#include <cmath>
#include <limits>

#include "error_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;

using soma::testing::error_of;

// ---- constant ----------------------------------------------------------------------------------

TEST(Constant, ScalarTakesDtypeFromCppType) {
  EXPECT_EQ(constant(1.5f).dtype(), DType::f32);
  EXPECT_EQ(constant(1.5).dtype(), DType::f64);
  EXPECT_EQ(constant(std::int32_t(3)).dtype(), DType::i32);
  EXPECT_EQ(constant(std::int64_t(3)).dtype(), DType::i64);
  EXPECT_EQ(constant(std::uint8_t(3)).dtype(), DType::u8);
  EXPECT_EQ(constant(true).dtype(), DType::boolean);
  EXPECT_EQ(constant(Half(1.0f)).dtype(), DType::f16);
  EXPECT_EQ(constant(BFloat16(1.0f)).dtype(), DType::bf16);
  Tensor s = constant(2.5);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.item<double>(), 2.5);
}

TEST(Constant, ScalarWithDtypeConverts) {
  Tensor t = constant(2.75, DType::i32);
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.item<int>(), 2);
  EXPECT_EQ(constant(1, DType::f16).item<float>(), 1.0f);
}

TEST(Constant, OneLevelList) {
  Tensor t = constant({1.f, 2.f, 3.f});
  EXPECT_EQ(t.shape(), (Shape{3}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(Constant, TwoLevelListIsRowMajor) {
  Tensor t = constant({{1, 2, 3}, {4, 5, 6}});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(t.at<int>({1, 0}), 4);
}

TEST(Constant, ThreeLevelListIsRowMajor) {
  Tensor t =
      constant({{{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}}, {{7.0, 8.0}, {9.0, 10.0}, {11.0, 12.0}}});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(t.at<double>({1, 2, 0}), 11.0);
  EXPECT_EQ(t.at<double>({0, 1, 1}), 4.0);
  EXPECT_TRUE(all_close(t, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
}

TEST(Constant, RaggedTwoLevelListIsAnError) {
  std::string msg = error_of([] { constant({{1.0, 2.0}, {3.0}}); });
  EXPECT_NE(msg.find("constant"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ragged"), std::string::npos) << msg;
}

TEST(Constant, RaggedThreeLevelListIsAnError) {
  // Blocks of different shapes, and a ragged row inside one block.
  std::string msg = error_of([] { constant({{{1, 2}, {3, 4}}, {{5, 6}}}); });
  EXPECT_NE(msg.find("constant"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 2]"), std::string::npos) << msg;
  EXPECT_THROW(constant({{{1, 2}, {3, 4}}, {{5, 6}, {7}}}), Error);
}

TEST(Constant, FromVectorAndShape) {
  Tensor t = constant(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.at<double>({2, 1}), 6.0);
  EXPECT_EQ(constant(std::vector<float>{}, {0, 4}).shape(), (Shape{0, 4}));
  EXPECT_EQ(constant(std::vector<bool>{true, false}, {2}).to_vector<bool>(),
            (std::vector<bool>{true, false}));
}

TEST(Constant, SizeMismatchIsAnError) {
  std::string msg = error_of([] { constant(std::vector<float>{1, 2, 3}, {2, 2}); });
  EXPECT_NE(msg.find("constant"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 values"), std::string::npos) << msg;
}

TEST(Constant, NegativeDimensionIsAnError) {
  std::string msg = error_of([] { constant(std::vector<float>{}, {-1}); });
  EXPECT_NE(msg.find("constant"), std::string::npos) << msg;
}

// ---- fills -------------------------------------------------------------------------------------

TEST(Fill, ZerosAndOnes) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(6, 0.0));
  Tensor o = ones({4}, DType::i64);
  EXPECT_EQ(o.dtype(), DType::i64);
  EXPECT_EQ(o.to_vector<std::int64_t>(), std::vector<std::int64_t>(4, 1));
  EXPECT_EQ(ones({}, DType::boolean).item<bool>(), true);
}

TEST(Fill, FillConvertsToDtype) {
  EXPECT_EQ(fill({2}, 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(fill({2}, 2.5, DType::i32).to_vector<int>(), (std::vector<int>{2, 2}));
  EXPECT_EQ(fill({1}, 0.1, DType::bf16).item<float>(), float(BFloat16(0.1f)));
  EXPECT_EQ(scalar(7.0, DType::u8).item<int>(), 7);
  EXPECT_EQ(scalar(7.0).rank(), 0);
}

TEST(Fill, EmptyShape) { EXPECT_EQ(zeros({3, 0}).numel(), 0); }

TEST(Fill, NegativeDimensionIsAnError) { EXPECT_THROW(zeros({2, -3}), Error); }

TEST(Fill, LikeFunctionsCopyShapeAndDtype) {
  Tensor t = constant({{1, 2, 3}, {4, 5, 6}}).transpose();  // non-contiguous [3, 2] i32
  for (const Tensor& r : {zeros_like(t), ones_like(t), full_like(t, 9.0)}) {
    EXPECT_EQ(r.shape(), (Shape{3, 2}));
    EXPECT_EQ(r.dtype(), DType::i32);
  }
  EXPECT_EQ(zeros_like(t).to_vector<int>(), std::vector<int>(6, 0));
  EXPECT_EQ(ones_like(t).to_vector<int>(), std::vector<int>(6, 1));
  EXPECT_EQ(full_like(t, 9.7).to_vector<int>(), std::vector<int>(6, 9));
  EXPECT_EQ(full_like(constant(1.0f), -2.5).item<float>(), -2.5f);
}

// ---- eye ---------------------------------------------------------------------------------------

std::vector<double> naive_eye(std::int64_t n, std::int64_t m) {
  std::vector<double> v(std::size_t(n * m), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) v[std::size_t(i * m + j)] = i == j ? 1.0 : 0.0;
  return v;
}

TEST(Eye, Square) {
  Tensor t = eye(3);
  EXPECT_EQ(t.shape(), (Shape{3, 3}));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_TRUE(all_close(t, naive_eye(3, 3)));
}

TEST(Eye, Rectangular) {
  EXPECT_TRUE(all_close(eye(2, 4), naive_eye(2, 4)));
  EXPECT_EQ(eye(2, 4).shape(), (Shape{2, 4}));
  EXPECT_TRUE(all_close(eye(4, 2), naive_eye(4, 2)));
}

TEST(Eye, AllDtypesAndZeroSize) {
  for (DType dt :
       {DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    Tensor t = eye(3, 2, dt);
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_TRUE(all_close(t, naive_eye(3, 2))) << dt;
  }
  EXPECT_EQ(eye(0).shape(), (Shape{0, 0}));
}

TEST(Eye, NegativeSizeIsAnError) {
  std::string msg = error_of([] { eye(-1); });
  EXPECT_NE(msg.find("eye"), std::string::npos) << msg;
  EXPECT_THROW(eye(2, -2), Error);
}

// ---- linspace ----------------------------------------------------------------------------------

TEST(Linspace, EndpointsAreExact) {
  Tensor t = linspace(0.1, 0.7, 7, DType::f64);
  auto v = t.to_vector<double>();
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v.front(), 0.1);
  EXPECT_EQ(v.back(), 0.7);
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], 0.1 + 0.1 * double(i), 1e-15);
}

TEST(Linspace, DecreasingAndDefaultDtype) {
  Tensor t = linspace(1.0, -1.0, 5);
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_TRUE(all_close(t, {1.0, 0.5, 0.0, -0.5, -1.0}));
}

TEST(Linspace, OneValueIsStart) {
  Tensor t = linspace(3.0, 9.0, 1);
  EXPECT_EQ(t.shape(), (Shape{1}));
  EXPECT_EQ(t.item<double>(), 3.0);
}

TEST(Linspace, ZeroValuesIsEmpty) { EXPECT_EQ(linspace(0.0, 1.0, 0).shape(), (Shape{0})); }

TEST(Linspace, NegativeCountIsAnError) {
  std::string msg = error_of([] { linspace(0.0, 1.0, -2); });
  EXPECT_NE(msg.find("linspace"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-2"), std::string::npos) << msg;
}

// ---- arange ------------------------------------------------------------------------------------

TEST(Arange, IntegerSteps) {
  EXPECT_TRUE(all_close(arange(5.0), {0, 1, 2, 3, 4}));
  EXPECT_TRUE(all_close(arange(2.0, 11.0, 3.0), {2, 5, 8}));
  Tensor t = arange(4.0, DType::i64);
  EXPECT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3}));
}

TEST(Arange, FloatStepExcludesStop) {
  Tensor t = arange(0.0, 1.0, 0.25, DType::f64);
  EXPECT_TRUE(all_close(t, {0.0, 0.25, 0.5, 0.75}, 0, 0));
  Tensor u = arange(0.0, 1.0, 0.1, DType::f64);
  EXPECT_EQ(u.numel(), 10);
  EXPECT_NEAR(u.to_vector<double>().back(), 0.9, 1e-15);
}

TEST(Arange, NegativeStep) {
  EXPECT_TRUE(all_close(arange(3.0, -1.0, -1.0), {3, 2, 1, 0}));
  EXPECT_TRUE(all_close(arange(1.0, 0.0, -0.5, DType::f64), {1.0, 0.5}));
}

TEST(Arange, EmptyWhenStepPointsAway) {
  EXPECT_EQ(arange(0.0, 5.0, -1.0).shape(), (Shape{0}));
  EXPECT_EQ(arange(5.0, 5.0).shape(), (Shape{0}));
  EXPECT_EQ(arange(0.0).numel(), 0);
  EXPECT_EQ(arange(-3.0).numel(), 0);
}

TEST(Arange, RangeIsAnAlias) { EXPECT_TRUE(all_close(range(1.0, 4.0), {1, 2, 3})); }

TEST(Arange, ZeroStepIsAnError) {
  std::string msg = error_of([] { arange(0.0, 1.0, 0.0); });
  EXPECT_NE(msg.find("arange"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step"), std::string::npos) << msg;
}

TEST(Arange, NonFiniteArgumentsAreAnError) {
  for (double bad : {double(INFINITY), double(-INFINITY), double(NAN)}) {
    std::string msg = error_of([&] { arange(0.0, bad); });
    EXPECT_NE(msg.find("arange"), std::string::npos) << msg;
    EXPECT_NE(msg.find("finite"), std::string::npos) << msg;
    EXPECT_THROW(arange(bad, 1.0), Error);
    EXPECT_THROW(arange(0.0, 1.0, bad), Error);
  }
}

TEST(Arange, TooManyValuesIsAnError) {
  std::string msg = error_of([] { arange(0.0, 1e20); });
  EXPECT_NE(msg.find("arange"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too many"), std::string::npos) << msg;
  EXPECT_THROW(arange(0.0, 1.0, 1e-300), Error);
}

TEST(Linspace, TooManyValuesIsAnError) {
  std::string msg = error_of([] { linspace(0.0, 1.0, std::int64_t(1) << 62); });
  EXPECT_NE(msg.find("linspace"), std::string::npos) << msg;
}

// ---- reading values back
// -------------------------------------------------------------------------

TEST(Item, ConvertsToRequestedType) {
  Tensor t = constant(3.75f);
  EXPECT_EQ(t.item<float>(), 3.75f);
  EXPECT_EQ(t.item<double>(), 3.75);
  EXPECT_EQ(t.item<int>(), 3);  // truncates toward zero like a C++ cast
  EXPECT_EQ(constant(-3.75f).item<std::int64_t>(), -3);
  EXPECT_EQ(t.item<bool>(), true);
  EXPECT_EQ(constant(0.0f).item<bool>(), false);
  EXPECT_EQ(float(t.item<Half>()), 3.75f);
  EXPECT_EQ(constant(std::int64_t(1) << 40).item<std::int64_t>(), std::int64_t(1) << 40);
  EXPECT_EQ(constant(true).item<float>(), 1.0f);
}

TEST(Item, OneElementOfAnyRank) {
  EXPECT_EQ(constant({{5.0}}).item<double>(), 5.0);
  EXPECT_EQ(constant({1.0, 2.0, 3.0}).slice(0, 2, 3).item<double>(), 3.0);
}

TEST(Item, MultiElementTensorIsAnError) {
  std::string msg = error_of([] { constant({1.0, 2.0}).item<double>(); });
  EXPECT_NE(msg.find("item"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
  EXPECT_THROW(zeros({0}).item<float>(), Error);
}

TEST(At, ReadsMultiIndexWithNegativeIndices) {
  Tensor t = constant({{1, 2, 3}, {4, 5, 6}});
  EXPECT_EQ(t.at<int>({0, 0}), 1);
  EXPECT_EQ(t.at<int>({-1, -1}), 6);
  EXPECT_EQ(t.at<int>({-2, 1}), 2);
  EXPECT_EQ(t.at<double>({1, -3}), 4.0);
  EXPECT_EQ(constant(8).at<int>({}), 8);
}

TEST(At, FollowsViewStrides) {
  Tensor t = constant({{1, 2, 3}, {4, 5, 6}}).transpose();
  EXPECT_EQ(t.at<int>({2, 0}), 3);
  EXPECT_EQ(t.at<int>({0, 1}), 4);
}

TEST(At, OutOfRangeIndexIsAnError) {
  Tensor t = constant({{1, 2, 3}, {4, 5, 6}});
  std::string msg = error_of([&] { t.at<int>({2, 0}); });
  EXPECT_NE(msg.find("at"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_THROW(t.at<int>({0, -4}), Error);
  EXPECT_THROW(t.at<int>({0, 3}), Error);
}

TEST(At, WrongNumberOfIndicesIsAnError) {
  std::string msg = error_of([] { constant({{1, 2}}).at<int>({0}); });
  EXPECT_NE(msg.find("at"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 entries"), std::string::npos) << msg;
}

TEST(ToVector, RowMajorOrderOfViews) {
  Tensor t = constant({{1, 2, 3}, {4, 5, 6}});
  EXPECT_EQ(t.transpose().to_vector<int>(), (std::vector<int>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor nc = testing::noncontiguous(constant({0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(nc.to_vector<float>(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
}

TEST(ToVector, ConvertsDtypes) {
  EXPECT_EQ(constant({1.9f, -1.9f}).to_vector<int>(), (std::vector<int>{1, -1}));
  EXPECT_EQ(constant({0, 2}).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ(zeros({0, 2}).to_vector<float>().size(), 0u);
}

}  // namespace
}  // namespace soma
