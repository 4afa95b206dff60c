// finfo / iinfo (soma/dtype_info.hpp) against std::numeric_limits for f32, f64 and the integers,
// and against soma's own f16/bf16 conversions (1 + eps is the next value, max is finite and the
// next step overflows, tiny is normal and half of it is not).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "error_testing.hpp"
#include "soma/soma.hpp"

using namespace soma;

namespace {

template <class T> void expect_matches_numeric_limits(DType t) {
  const FInfo f = finfo(t);
  EXPECT_EQ(f.bits, int(8 * sizeof(T)));
  EXPECT_EQ(f.mantissa_bits, std::numeric_limits<T>::digits - 1);
  EXPECT_EQ(f.eps, double(std::numeric_limits<T>::epsilon()));
  EXPECT_EQ(f.max, double(std::numeric_limits<T>::max()));
  EXPECT_EQ(f.min, double(std::numeric_limits<T>::lowest()));
  EXPECT_EQ(f.tiny, double(std::numeric_limits<T>::min()));
  EXPECT_EQ(f.smallest_subnormal, double(std::numeric_limits<T>::denorm_min()));
}

TEST(DTypeInfo, FloatsMatchNumericLimits) {
  expect_matches_numeric_limits<float>(DType::f32);
  expect_matches_numeric_limits<double>(DType::f64);
  EXPECT_EQ(finfo(DType::f32).resolution, 1e-6);
  EXPECT_EQ(finfo(DType::f64).resolution, 1e-15);
}

// For a 16-bit format stored as T: the limits are values the format holds exactly, and one step
// further is not.
template <class T> void expect_half_limits(DType t) {
  const FInfo f = finfo(t);
  auto round_trip = [](double v) { return double(float(T(float(v)))); };
  EXPECT_EQ(f.bits, 16);
  EXPECT_EQ(round_trip(1.0 + f.eps), 1.0 + f.eps) << "1 + eps is representable";
  EXPECT_EQ(round_trip(1.0 + f.eps / 4), 1.0) << "nothing between 1 and 1 + eps";
  EXPECT_EQ(round_trip(f.max), f.max);
  EXPECT_TRUE(std::isinf(round_trip(f.max * (1 + f.eps)))) << "beyond max overflows";
  EXPECT_EQ(round_trip(f.tiny), f.tiny);
  EXPECT_EQ(round_trip(f.smallest_subnormal), f.smallest_subnormal);
  EXPECT_EQ(round_trip(f.smallest_subnormal / 4), 0.0);
  EXPECT_EQ(f.min, -f.max);
}

TEST(DTypeInfo, HalfAndBFloat16) {
  expect_half_limits<Half>(DType::f16);
  expect_half_limits<BFloat16>(DType::bf16);
  EXPECT_EQ(finfo(DType::f16).max, 65504.0);
  EXPECT_EQ(finfo(DType::bf16).eps, 0.0078125);
}

TEST(DTypeInfo, Integers) {
  EXPECT_EQ(iinfo(DType::i32).min, std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(iinfo(DType::i32).max, std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(iinfo(DType::i64).min, std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(iinfo(DType::i64).max, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(iinfo(DType::u8).min, 0);
  EXPECT_EQ(iinfo(DType::u8).max, 255);
  EXPECT_EQ(iinfo(DType::u8).bits, 8);
  EXPECT_EQ(iinfo(DType::i8).min, std::numeric_limits<std::int8_t>::min());
  EXPECT_EQ(iinfo(DType::i8).max, std::numeric_limits<std::int8_t>::max());
  EXPECT_EQ(iinfo(DType::i8).bits, 8);
}

TEST(DTypeInfo, WrongKindIsAnErrorNamingTheDtype) {
  std::string e = soma::testing::error_of([] { finfo(DType::i32); });
  EXPECT_NE(e.find("finfo"), std::string::npos) << e;
  EXPECT_NE(e.find("i32"), std::string::npos) << e;
  e = soma::testing::error_of([] { iinfo(DType::f16); });
  EXPECT_NE(e.find("use finfo"), std::string::npos) << e;
  EXPECT_NE(soma::testing::error_of([] { iinfo(DType::boolean); }), soma::testing::kNoError);
}

}  // namespace
