// Float -> integer conversion (issue 19): defined on every path, as a saturating conversion.
// NaN -> 0; a value past the target's range (infinities included) -> the target's min or max;
// anything else truncates toward zero. The same for every source float type (f32, f64, f16,
// bf16), every integer dtype (i32, i64, u8) and every path: the cast op on packed and strided
// tensors, item<T>(), at<T>(), to_vector<T>(), and the creation functions that convert a double
// (fill, scalar, full_like). Before, these were C++ static_casts: undefined behaviour (x86 gave
// INT_MIN for NaN and +inf, and wrapped u8).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using testing::noncontiguous;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr auto kI32Min = std::numeric_limits<std::int32_t>::min();
constexpr auto kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr auto kI64Min = std::numeric_limits<std::int64_t>::min();
constexpr auto kI64Max = std::numeric_limits<std::int64_t>::max();

struct Case {
  double value;
  std::int64_t expected;
};

// Values every source float type holds closely enough for the expected result (in f16, 1e10 and
// 1e19 are +inf, which saturates the same way). i64 from large finite values: see
// RangeBoundariesAreExact.
const std::vector<Case> kToI32 = {{kNaN, 0},       {kInf, kI32Max},   {-kInf, kI32Min},
                                  {1e10, kI32Max}, {-1e10, kI32Min},  {2.9, 2},
                                  {-2.9, -2},      {0.5, 0},          {-0.5, 0},
                                  {300.0, 300},    {-300.0, -300},    {-0.0, 0}};
const std::vector<Case> kToI64 = {{kNaN, 0},       {kInf, kI64Max},   {-kInf, kI64Min},
                                  {1e19, kI64Max}, {-1e19, kI64Min},  {1000.0, 1000},
                                  {2.9, 2},        {-2.9, -2},        {-0.5, 0}};
const std::vector<Case> kToU8 = {{kNaN, 0},   {kInf, 255},    {-kInf, 0},   {1e10, 255},
                                 {300.0, 255}, {256.0, 255},  {255.0, 255}, {254.0, 254},
                                 {-1.0, 0},    {-0.9, 0},     {-1e10, 0},   {2.9, 2}};

const std::vector<DType> kSources = {DType::f32, DType::f64, DType::f16, DType::bf16};

struct Target {
  DType dtype;
  const std::vector<Case>* cases;
};
const std::vector<Target> kTargets = {
    {DType::i32, &kToI32}, {DType::i64, &kToI64}, {DType::u8, &kToU8}};

std::vector<double> values_of(const std::vector<Case>& cs) {
  std::vector<double> v;
  for (const Case& c : cs) v.push_back(c.value);
  return v;
}

// The tensor's elements read as i64 (exact for every integer dtype).
std::vector<std::int64_t> ints_of(const Tensor& t) {
  return cast(t, DType::i64).to_vector<std::int64_t>();
}

TEST(FloatToIntCast, CastOpSaturatesAndMapsNaNToZero) {
  for (const Target& tg : kTargets)
    for (DType src : kSources) {
      const std::vector<Case>& cs = *tg.cases;
      const Tensor x = cast(constant(values_of(cs), {std::int64_t(cs.size())}), src);
      const Tensor y = cast(x, tg.dtype);
      ASSERT_EQ(y.dtype(), tg.dtype);
      const std::vector<std::int64_t> got = ints_of(y);
      for (std::size_t i = 0; i < cs.size(); ++i)
        EXPECT_EQ(got[i], cs[i].expected) << dtype_name(src) << " " << cs[i].value << " -> "
                                          << dtype_name(tg.dtype);
    }
}

TEST(FloatToIntCast, StridedCastGivesTheSameAsPacked) {
  for (const Target& tg : kTargets)
    for (DType src : kSources) {
      const std::vector<Case>& cs = *tg.cases;
      const Tensor x = cast(constant(values_of(cs), {std::int64_t(cs.size())}), src);
      EXPECT_EQ(ints_of(cast(noncontiguous(x), tg.dtype)), ints_of(cast(x, tg.dtype)))
          << dtype_name(src) << " -> " << dtype_name(tg.dtype);
      // Broadcast into a [3, n] view: the general copy loop.
      const std::int64_t n = std::int64_t(cs.size());
      const Tensor b = broadcast_to(reshape(x, {1, n}), {3, n});
      const std::vector<std::int64_t> rows = ints_of(cast(b, tg.dtype));
      for (std::size_t i = 0; i < cs.size(); ++i)
        EXPECT_EQ(rows[2 * cs.size() + i], cs[i].expected) << dtype_name(src);
    }
}

TEST(FloatToIntCast, ItemAtAndToVectorConvertTheSameWay) {
  for (const Target& tg : kTargets)
    for (DType src : kSources)
      for (const Case& c : *tg.cases) {
        const Tensor x = cast(scalar(c.value, DType::f64), src);
        const Tensor v = reshape(x, {1});
        std::int64_t got = 0;
        if (tg.dtype == DType::i32) {
          got = x.item<std::int32_t>();
          EXPECT_EQ(v.at<std::int32_t>({0}), got);
          EXPECT_EQ(v.to_vector<std::int32_t>()[0], got);
        } else if (tg.dtype == DType::i64) {
          got = x.item<std::int64_t>();
          EXPECT_EQ(v.at<std::int64_t>({0}), got);
          EXPECT_EQ(v.to_vector<std::int64_t>()[0], got);
        } else {
          got = x.item<std::uint8_t>();
          EXPECT_EQ(v.at<std::uint8_t>({0}), got);
          EXPECT_EQ(v.to_vector<std::uint8_t>()[0], got);
        }
        EXPECT_EQ(got, c.expected) << dtype_name(src) << " " << c.value << " -> "
                                   << dtype_name(tg.dtype);
      }
}

TEST(FloatToIntCast, ItemOfNaNAsInt64IsZero) {
  EXPECT_EQ(scalar(kNaN, DType::f32).item<std::int64_t>(), 0);
  EXPECT_EQ(scalar(kInf, DType::f64).item<std::int64_t>(), kI64Max);
  EXPECT_EQ(scalar(-kInf, DType::f64).item<std::int32_t>(), kI32Min);
}

TEST(FloatToIntCast, CreationFromADoubleSaturates) {
  EXPECT_EQ(ints_of(fill({2}, 1e10, DType::i32)), (std::vector<std::int64_t>{kI32Max, kI32Max}));
  EXPECT_EQ(ints_of(fill({1}, kNaN, DType::i64)), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ints_of(scalar(-kInf, DType::i32)), (std::vector<std::int64_t>{kI32Min}));
  EXPECT_EQ(ints_of(scalar(1000.0, DType::u8)), (std::vector<std::int64_t>{255}));
  EXPECT_EQ(ints_of(scalar(-5.0, DType::u8)), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(ints_of(full_like(zeros({2}, DType::i64), 1e300)),
            (std::vector<std::int64_t>{kI64Max, kI64Max}));
  EXPECT_EQ(ints_of(constant(kNaN, DType::i32)), (std::vector<std::int64_t>{0}));
}

TEST(FloatToIntCast, RangeBoundariesAreExact) {
  // The largest doubles and floats below 2^31 and 2^63 convert exactly; 2^31 and 2^63 saturate.
  const Tensor d32 = constant<double>({2147483647.9, 2147483648.0, -2147483648.9, -2147483649.0});
  EXPECT_EQ(ints_of(cast(d32, DType::i32)),
            (std::vector<std::int64_t>{kI32Max, kI32Max, kI32Min, kI32Min}));
  const Tensor f32 =
      constant<float>({2147483520.0f, 2147483648.0f, -2147483648.0f, -2147483904.0f});
  EXPECT_EQ(ints_of(cast(f32, DType::i32)),
            (std::vector<std::int64_t>{2147483520, kI32Max, kI32Min, kI32Min}));
  const Tensor d64 = constant<double>({9223372036854774784.0, 9223372036854775808.0,
                                       -9223372036854775808.0, -9223372036854777856.0});
  EXPECT_EQ(ints_of(cast(d64, DType::i64)),
            (std::vector<std::int64_t>{9223372036854774784, kI64Max, kI64Min, kI64Min}));
  const Tensor f64 = constant<float>({9223371487098961920.0f, 9223372036854775808.0f});
  EXPECT_EQ(ints_of(cast(f64, DType::i64)),
            (std::vector<std::int64_t>{9223371487098961920, kI64Max}));
}

TEST(FloatToIntCast, IntegerToIntegerNarrowingWrapsAsNumPy) {
  // Not a float conversion: i64 -> i32 / u8 keeps the low bits (two's complement), as NumPy's
  // astype does.
  const Tensor x = constant<std::int64_t>({4294967297, -1, 256 + 7, -129});
  EXPECT_EQ(ints_of(cast(x, DType::i32)), (std::vector<std::int64_t>{1, -1, 263, -129}));
  EXPECT_EQ(ints_of(cast(x, DType::u8)), (std::vector<std::int64_t>{1, 255, 7, 127}));
}

TEST(FloatToIntCast, NaNToBoolIsTrueAsNumPy) {
  const Tensor x = constant<double>({kNaN, 0.0, -0.0, 0.25});
  const std::vector<bool> b = cast(x, DType::boolean).to_vector<bool>();
  EXPECT_EQ(b, (std::vector<bool>{true, false, false, true}));
}

// A data path that converted a float to an index: rotating by a NaN or infinite angle gave NaN
// source coordinates and converted them to int64 (undefined behaviour). Now a clear error.
TEST(FloatToIntCast, RotationByANonFiniteAngleIsAnError) {
  namespace aug = data::augment;
  const Tensor img = ones({3, 3, 1});
  for (double deg : {kNaN, kInf, -kInf}) {
    for (auto interp : {aug::Interpolation::nearest, aug::Interpolation::bilinear}) {
      try {
        aug::rotate(img, deg, interp);
        ADD_FAILURE() << "no error for " << deg << " degrees";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rotate: the angle must be finite"), std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_THROW(aug::random_rotation(img, {.max_degrees = kInf}), Error);
  EXPECT_THROW(aug::random_rotation(img, {.max_degrees = kNaN}), Error);
}

}  // namespace
}  // namespace soma
