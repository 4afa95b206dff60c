#pragma once
// Element types. f16 and bf16 are storage types: math on them goes through f32.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

namespace soma {

// New dtypes go at the end: the numeric codes are written to model and weight files.
enum class DType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean, i8 };
inline constexpr int kNumDTypes = 9;

// IEEE 754 binary16, stored as bits; converts to and from float with round-to-nearest-even.
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a built-in float type
  operator float() const { return to_float(bits); }
  static std::uint16_t from_float(float f);
  static float to_float(std::uint16_t h);
};

// bfloat16: the upper half of an f32, rounded to nearest even.
struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return std::bit_cast<float>(std::uint32_t(bits) << 16); }
  static std::uint16_t from_float(float f) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return std::uint16_t(u >> 16);
  }
};

inline std::uint16_t Half::from_float(float f) {
#if defined(__FLT16_MAX__) && defined(__F16C__)
  // The hardware conversion (vcvtps2ph) rounds to nearest even, like the portable code below.
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
#endif
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return std::uint16_t(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (absx >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                      // subnormal or zero in f16
    if (absx < 0x33000000u) return std::uint16_t(sign);
    std::uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - int(absx >> 23);  // 14 .. 24
    std::uint32_t r = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1u);
    std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return std::uint16_t(sign | r);
  }
  std::uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  std::uint32_t res = r >> 13;
  std::uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) ++res;
  return std::uint16_t(sign | res);
}

inline float Half::to_float(std::uint16_t h) {
#if defined(__FLT16_MAX__) && defined(__F16C__)
  return static_cast<float>(std::bit_cast<_Float16>(h));
#endif
  std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400u));
      out = sign | (std::uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: return 2;
    case DType::u8: case DType::i8: case DType::boolean: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::i8: return "i8";
    case DType::boolean: return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) {
  return t == DType::i32 || t == DType::i64 || t == DType::u8 || t == DType::i8;
}

// The dtype of a binary op's result: the wider of the two (bool < u8, i8 < i32 < i64 <
// f16/bf16 < f32 < f64; f16 with bf16 gives f32). u8 with i8 gives i32: NumPy and PyTorch give
// int16, the smallest signed type holding both, which soma lacks.
DType promote_types(DType a, DType b);

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<std::int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace soma
