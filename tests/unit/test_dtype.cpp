// Element types: the 16-bit float conversions (checked against a nearest-value search over every
// representable value), promotion, sizes and names.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "test_support.hpp"

namespace soma {
namespace {

constexpr DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                          DType::i32, DType::i64, DType::u8,  DType::boolean};

float f32_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

// The correctly rounded 16-bit encoding of f, found by search: `decode` maps bits to float for
// the positive finite encodings [0, max_bits], which grow with their bits. Ties go to the even
// encoding; values at or past the midpoint above the largest finite value become infinity.
template <class Decode>
std::uint16_t nearest(float f, std::uint16_t max_bits, std::uint16_t inf_bits, Decode decode) {
  std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::abs(double(f));
  double max = decode(max_bits);
  double next = max + (max - decode(std::uint16_t(max_bits - 1)));  // one step past the largest
  if (a >= (max + next) / 2) return std::uint16_t(sign | inf_bits);
  // Binary search for the last encoding <= a.
  std::uint32_t lo = 0, hi = max_bits;
  while (lo < hi) {
    std::uint32_t mid = (lo + hi + 1) / 2;
    if (decode(std::uint16_t(mid)) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  std::uint16_t below = std::uint16_t(lo);
  if (below == max_bits) return std::uint16_t(sign | below);
  std::uint16_t above = std::uint16_t(lo + 1);
  double db = a - decode(below), da = decode(above) - a;
  std::uint16_t pick = db < da ? below : da < db ? above : (below % 2 == 0 ? below : above);
  return std::uint16_t(sign | pick);
}

double half_value(std::uint16_t h) {  // independent decoder: exponent/mantissa arithmetic
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
double bf16_value(std::uint16_t b) {
  int e = (b >> 7) & 0xff, m = b & 0x7f;
  double v = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  return (b & 0x8000) ? -v : v;
}

// Floats spread over every exponent, plus values exactly halfway between 16-bit neighbours.
std::vector<float> probe_floats() {
  std::mt19937 gen(1234);
  std::vector<float> v;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = gen();
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // skip inf/nan here
    v.push_back(f32_bits(u));
  }
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {  // f16 midpoints (exact in f32)
    v.push_back(float((half_value(std::uint16_t(h)) + half_value(std::uint16_t(h + 1))) / 2));
  }
  for (std::uint32_t b = 0; b < 0x7f80; ++b)  // bf16 midpoints: one bit below the bf16 lsb
    v.push_back(f32_bits((b << 16) | 0x8000u));
  return v;
}

// ---- Half
// ----------------------------------------------------------------------------------------

TEST(Half, DecodesEveryEncoding) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    float f = Half::to_float(std::uint16_t(h));
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
    } else if ((h & 0x7fff) == 0x7c00) {
      EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << std::hex << h;
    } else {
      ASSERT_EQ(double(f), half_value(std::uint16_t(h))) << std::hex << h;
    }
  }
}

TEST(Half, EveryNonNanEncodingRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
    ASSERT_EQ(Half::from_float(Half::to_float(std::uint16_t(h))), h) << std::hex << h;
  }
}

TEST(Half, RoundsToNearestEvenLikeAnExactSearch) {
  for (float f : probe_floats()) {
    std::uint16_t want = nearest(f, 0x7bff, 0x7c00, half_value);
    ASSERT_EQ(Half::from_float(f), want)
        << "f = " << f << " (bits " << std::hex << std::bit_cast<std::uint32_t>(f) << ")";
  }
}

TEST(Half, TiesGoToEven) {
  EXPECT_EQ(Half::from_float(1.0f + 0x1p-11f), 0x3c00);      // between 1 and 1+2^-10
  EXPECT_EQ(Half::from_float(1.0f + 3 * 0x1p-11f), 0x3c02);  // between 1+2^-10 and 1+2^-9
  EXPECT_EQ(Half::from_float(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
}

TEST(Half, OverflowsToInfinity) {
  EXPECT_EQ(Half::from_float(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(Half::from_float(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(Half::from_float(65520.0f), 0x7c00);  // the midpoint rounds to even: infinity
  EXPECT_EQ(Half::from_float(1e6f), 0x7c00);
  EXPECT_EQ(Half::from_float(-1e6f), 0xfc00);
  EXPECT_EQ(Half::from_float(INFINITY), 0x7c00);
  EXPECT_EQ(Half::from_float(-INFINITY), 0xfc00);
}

TEST(Half, Subnormals) {
  EXPECT_EQ(Half::from_float(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(Half::from_float(0x1p-25f), 0x0000);             // tie with zero: even
  EXPECT_EQ(Half::from_float(0x1.02p-25f), 0x0001);          // just above the tie
  EXPECT_EQ(Half::from_float(3 * 0x1p-25f), 0x0002);         // tie between 1 and 2: even
  EXPECT_EQ(Half::from_float(0x1p-14f - 0x1p-25f), 0x0400);  // tie up into the normals
  EXPECT_EQ(Half::from_float(-1e-10f), 0x8000);              // underflow keeps the sign
  EXPECT_EQ(Half::to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(Half::to_float(0x03ff), 0x1p-14f - 0x1p-24f);
}

TEST(Half, NanStaysNan) {
  std::uint16_t h = Half::from_float(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(h & 0x7c00, 0x7c00);
  EXPECT_NE(h & 0x3ff, 0);
  EXPECT_TRUE(std::isnan(float(Half(NAN))));
  EXPECT_TRUE(std::isnan(float(Half(f32_bits(0x7f800001u)))));  // signalling NaN payload
}

// ---- BFloat16 ----------------------------------------------------------------------------------

TEST(BFloat16, EveryEncodingDecodesToTheUpperHalfOfAFloat) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    BFloat16 x;
    x.bits = std::uint16_t(b);
    float f = x;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f), b << 16);
    if ((b & 0x7f80) != 0x7f80) ASSERT_EQ(double(f), bf16_value(std::uint16_t(b))) << std::hex << b;
  }
}

TEST(BFloat16, EveryNonNanEncodingRoundTrips) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) continue;
    ASSERT_EQ(BFloat16::from_float(f32_bits(b << 16)), b) << std::hex << b;
  }
}

TEST(BFloat16, RoundsToNearestEvenLikeAnExactSearch) {
  for (float f : probe_floats()) {
    std::uint16_t want = nearest(f, 0x7f7f, 0x7f80, bf16_value);
    ASSERT_EQ(BFloat16::from_float(f), want)
        << "f = " << f << " (bits " << std::hex << std::bit_cast<std::uint32_t>(f) << ")";
  }
}

TEST(BFloat16, TiesGoToEven) {
  EXPECT_EQ(BFloat16::from_float(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(BFloat16::from_float(1.0f + 3 * 0x1p-8f), 0x3f82);
}

TEST(BFloat16, OverflowAndSubnormals) {
  EXPECT_EQ(BFloat16::from_float(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(BFloat16::from_float(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(BFloat16::from_float(f32_bits(0x7f7f7fffu)), 0x7f7f);  // just below the midpoint
  EXPECT_EQ(BFloat16::from_float(f32_bits(0x00008000u)), 0x0000);  // subnormal tie to even
  EXPECT_EQ(BFloat16::from_float(f32_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(BFloat16::from_float(f32_bits(0x00010001u)), 0x0001);
}

TEST(BFloat16, NanStaysNan) {
  EXPECT_TRUE(std::isnan(float(BFloat16(NAN))));
  // A NaN whose payload lives only in the low bits must not round to infinity.
  std::uint16_t b = BFloat16::from_float(f32_bits(0x7f800001u));
  EXPECT_EQ(b & 0x7f80, 0x7f80);
  EXPECT_NE(b & 0x7f, 0);
  EXPECT_TRUE(std::isnan(float(BFloat16(f32_bits(0xffffffffu)))));
}

// ---- tensors of 16-bit floats convert through these rules ---------------------------------

TEST(SixteenBit, CastUsesTheSameRounding) {
  std::vector<float> v = {1.0f + 0x1p-11f, 65520.0f, 0x1p-25f, 3.14159f, -0.1f};
  Tensor t = constant(v, {5});
  auto h = cast(t, DType::f16).to_vector<float>();
  auto b = cast(t, DType::bf16).to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(h[i]), std::bit_cast<std::uint32_t>(float(Half(v[i]))));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(b[i]),
              std::bit_cast<std::uint32_t>(float(BFloat16(v[i]))));
  }
}

// ---- promotion ---------------------------------------------------------------------------------

TEST(PromoteTypes, FullTable) {
  using D = DType;
  // Rows and columns in the order of kAll: f32 f64 f16 bf16 i32 i64 u8 bool.
  const DType table[8][8] = {
      /* f32  */ {D::f32, D::f64, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32},
      /* f64  */ {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
      /* f16  */ {D::f32, D::f64, D::f16, D::f32, D::f16, D::f16, D::f16, D::f16},
      /* bf16 */ {D::f32, D::f64, D::f32, D::bf16, D::bf16, D::bf16, D::bf16, D::bf16},
      /* i32  */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::i32, D::i32},
      /* i64  */ {D::f32, D::f64, D::f16, D::bf16, D::i64, D::i64, D::i64, D::i64},
      /* u8   */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::u8},
      /* bool */ {D::f32, D::f64, D::f16, D::bf16, D::i32, D::i64, D::u8, D::boolean},
  };
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(promote_types(kAll[i], kAll[j]), table[i][j]) << kAll[i] << " with " << kAll[j];
}

TEST(PromoteTypes, IsSymmetric) {
  for (DType a : kAll)
    for (DType b : kAll) EXPECT_EQ(promote_types(a, b), promote_types(b, a)) << a << ", " << b;
}

// ---- sizes, names, categories --------------------------------------------------------------

TEST(DTypeInfo, SizesMatchTheCppTypes) {
  EXPECT_EQ(dtype_size(DType::f32), sizeof(float));
  EXPECT_EQ(dtype_size(DType::f64), sizeof(double));
  EXPECT_EQ(dtype_size(DType::f16), sizeof(Half));
  EXPECT_EQ(dtype_size(DType::bf16), sizeof(BFloat16));
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_size(DType::boolean), sizeof(bool));
}

TEST(DTypeInfo, Names) {
  const char* names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_STREQ(dtype_name(kAll[i]), names[i]);
    std::ostringstream os;
    os << kAll[i];
    EXPECT_EQ(os.str(), names[i]);
  }
}

TEST(DTypeInfo, Categories) {
  for (DType t : kAll) {
    bool fl = t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
    bool in = t == DType::i32 || t == DType::i64 || t == DType::u8;
    EXPECT_EQ(is_floating(t), fl) << t;
    EXPECT_EQ(is_integral(t), in) << t;
  }
}

TEST(DTypeInfo, CppTypeMapping) {
  static_assert(dtype_v<float> == DType::f32 && dtype_v<double> == DType::f64);
  static_assert(dtype_v<Half> == DType::f16 && dtype_v<BFloat16> == DType::bf16);
  static_assert(dtype_v<std::int32_t> == DType::i32 && dtype_v<std::int64_t> == DType::i64);
  static_assert(dtype_v<std::uint8_t> == DType::u8 && dtype_v<bool> == DType::boolean);
  EXPECT_EQ(constant({Half(1.5f)}).dtype(), DType::f16);
}

}  // namespace
}  // namespace soma
