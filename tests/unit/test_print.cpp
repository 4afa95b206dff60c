// Tensor printing: NumPy's array repr layout, then shape and dtype.
#include <cmath>
#include <sstream>

#include "test_support.hpp"

namespace soma {
namespace {

TEST(Print, FloatMatrixHasAlignedRows) {
  EXPECT_EQ(constant({{1.f, 2.f}, {3.f, 4.f}}).str(),
            "tensor([[1., 2.],\n"
            "        [3., 4.]], shape=[2, 2], dtype=f32)");
}

TEST(Print, IntegerVectorIsRightAligned) {
  EXPECT_EQ(constant({1, -20, 300}).str(), "tensor([  1, -20, 300], shape=[3], dtype=i32)");
}

TEST(Print, LargeIntegersPrintExactly) {
  EXPECT_EQ(constant({std::int64_t(-9223372036854775807LL - 1), std::int64_t(7)}).str(),
            "tensor([-9223372036854775808,                    7], shape=[2], dtype=i64)");
  EXPECT_EQ(constant({std::uint8_t(0), std::uint8_t(255)}).str(),
            "tensor([  0, 255], shape=[2], dtype=u8)");
}

TEST(Print, BoolsAsTrueFalse) {
  EXPECT_EQ(constant({true, false, true}).str(),
            "tensor([ true, false,  true], shape=[3], dtype=bool)");
  EXPECT_EQ(constant(true).str(), "tensor(true, shape=[], dtype=bool)");
}

TEST(Print, Scalar) {
  EXPECT_EQ(constant(3.0f).str(), "tensor(3., shape=[], dtype=f32)");
  EXPECT_EQ(constant(std::int32_t(-4)).str(), "tensor(-4, shape=[], dtype=i32)");
}

TEST(Print, EmptyTensorsShowTheirShape) {
  EXPECT_EQ(zeros({0, 3}).str(), "tensor([], shape=[0, 3], dtype=f32)");
  EXPECT_EQ(zeros({0}, DType::i64).str(), "tensor([], shape=[0], dtype=i64)");
}

TEST(Print, UndefinedHandle) { EXPECT_EQ(Tensor().str(), "tensor(undefined)"); }

TEST(Print, NonContiguousTransposeInLogicalOrder) {
  Tensor t = constant({{1, 2, 3}, {4, 5, 6}}).transpose();
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.str(),
            "tensor([[1, 4],\n"
            "        [2, 5],\n"
            "        [3, 6]], shape=[3, 2], dtype=i32)");
}

TEST(Print, StridedSliceWithOffset) {
  Tensor t = arange(10.0, DType::i32).slice(0, 2, 8, 3);
  EXPECT_EQ(t.str(), "tensor([2, 5], shape=[2], dtype=i32)");
}

TEST(Print, NonContiguousFloatView) {
  Tensor t = testing::noncontiguous(constant({0.5, 0.25}));
  EXPECT_EQ(t.str(), "tensor([0.5 , 0.25], shape=[2], dtype=f64)");
}

TEST(Print, FractionsAlignOnTheDecimalPoint) {
  EXPECT_EQ(constant({1.5, -2.25, 10.0}).str(),
            "tensor([ 1.5 , -2.25, 10.  ], shape=[3], dtype=f64)");
}

TEST(Print, FloatsRoundToFourDecimals) {
  EXPECT_EQ(constant({1.0 / 3, 2.0 / 3}).str(), "tensor([0.3333, 0.6667], shape=[2], dtype=f64)");
  EXPECT_EQ(constant({0.12999999f}).str(), "tensor([0.13], shape=[1], dtype=f32)");
}

TEST(Print, ShortestDigitsFollowTheDtype) {
  // 0.1 is not exact in any of these, yet "0.1" reads back as the same value of each dtype.
  Tensor f = constant({0.1f});
  EXPECT_EQ(f.str(), "tensor([0.1], shape=[1], dtype=f32)");
  EXPECT_EQ(cast(f, DType::f16).str(), "tensor([0.1], shape=[1], dtype=f16)");
  EXPECT_EQ(cast(f, DType::bf16).str(), "tensor([0.1], shape=[1], dtype=bf16)");
  EXPECT_EQ(constant(3.14159f, DType::bf16).str(), "tensor(3.14, shape=[], dtype=bf16)");
}

TEST(Print, NegativeZeroKeepsItsSign) {
  EXPECT_EQ(constant({-0.0f, 1.0f}).str(), "tensor([-0.,  1.], shape=[2], dtype=f32)");
}

TEST(Print, ScientificForTinyOrHugeOrWideRanges) {
  EXPECT_EQ(constant({1e-5, 1.0}).str(), "tensor([1.e-05, 1.e+00], shape=[2], dtype=f64)");
  EXPECT_EQ(constant({1.5e-5, 1.0}).str(), "tensor([1.5e-05, 1.0e+00], shape=[2], dtype=f64)");
  EXPECT_EQ(constant({123456789.0}).str(), "tensor([1.2346e+08], shape=[1], dtype=f64)");
  EXPECT_EQ(constant({1.0, 2000.0}).str(), "tensor([1.e+00, 2.e+03], shape=[2], dtype=f64)");
  EXPECT_EQ(constant({-1e100, 1.0}).str(), "tensor([-1.e+100,  1.e+000], shape=[2], dtype=f64)");
}

TEST(Print, NanAndInfByName) {
  EXPECT_EQ(constant({NAN, 1.0f, -INFINITY}).str(),
            "tensor([ nan,   1., -inf], shape=[3], dtype=f32)");
  EXPECT_EQ(constant({INFINITY, 0.25f}).str(), "tensor([ inf, 0.25], shape=[2], dtype=f32)");
  EXPECT_EQ(constant(NAN).str(), "tensor(nan, shape=[], dtype=f32)");
}

TEST(Print, ThreeDimensionsSeparateBlocksWithABlankLine) {
  EXPECT_EQ(arange(8.0, DType::i32).reshape({2, 2, 2}).str(),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]], shape=[2, 2, 2], dtype=i32)");
}

TEST(Print, LongRowsWrapAtSeventyFiveColumns) {
  EXPECT_EQ(arange(30.0, DType::i32).str(),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15,\n"
            "        16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29], shape=[30], "
            "dtype=i32)");
}

TEST(Print, ThousandElementsAreNotElided) {
  std::string s = arange(1000.0, DType::i32).str();
  EXPECT_EQ(s.find("..."), std::string::npos);
  EXPECT_NE(s.find(" 500,"), std::string::npos);
  std::istringstream lines(s);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    if (line.find("shape=") == std::string::npos) EXPECT_LE(line.size(), 75u) << line;
  }
  EXPECT_GT(n, 10);
}

TEST(Print, MoreThanThousandElementsElideTheMiddle) {
  std::string s = arange(1000.0, 3000.0, 1.0).str();
  EXPECT_EQ(s, "tensor([1000., 1001., 1002., ..., 2997., 2998., 2999.], shape=[2000], dtype=f32)");
}

TEST(Print, ElisionAppliesToEveryLongAxis) {
  EXPECT_EQ(arange(2000.0, DType::i32).reshape({40, 50}).str(),
            "tensor([[   0,    1,    2, ...,   47,   48,   49],\n"
            "        [  50,   51,   52, ...,   97,   98,   99],\n"
            "        [ 100,  101,  102, ...,  147,  148,  149],\n"
            "        ...,\n"
            "        [1850, 1851, 1852, ..., 1897, 1898, 1899],\n"
            "        [1900, 1901, 1902, ..., 1947, 1948, 1949],\n"
            "        [1950, 1951, 1952, ..., 1997, 1998, 1999]], shape=[40, 50], dtype=i32)");
}

TEST(Print, ElidedFormatIsFittedToShownValues) {
  // The hidden middle holds 1e9; only the shown edges decide the layout (no scientific).
  std::vector<double> v = arange(1000.0, 3000.0, 1.0, DType::f64).to_vector<double>();
  v[1000] = 1e9;
  EXPECT_EQ(constant(v, {2000}).str(),
            "tensor([1000., 1001., 1002., ..., 2997., 2998., 2999.], shape=[2000], dtype=f64)");
}

TEST(Print, StreamOperatorMatchesStr) {
  Tensor t = constant({{0.5f, -1.f}});
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), t.str());
  EXPECT_EQ(os.str(), "tensor([[ 0.5, -1. ]], shape=[1, 2], dtype=f32)");
}

}  // namespace
}  // namespace soma
