#pragma once
// Internal: run a template lambda for a runtime dtype: dispatch_dtype(t, [&]<class T>() {...}).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "soma/dtype.hpp"
#include "soma/error.hpp"

namespace soma::detail {

template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<Half>();
    case DType::bf16: return f.template operator()<BFloat16>();
    case DType::i32: return f.template operator()<std::int32_t>();
    case DType::i64: return f.template operator()<std::int64_t>();
    case DType::u8: return f.template operator()<std::uint8_t>();
    case DType::boolean: return f.template operator()<bool>();
    case DType::i8: return f.template operator()<std::int8_t>();
  }
  throw Error("dispatch: unknown dtype");
}

// Floating dtypes only (f32, f64, f16, bf16); anything else is an error naming the op.
template <class F>
decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<Half>();
    case DType::bf16: return f.template operator()<BFloat16>();
    default:
      fail(op, "dtype ", dtype_name(t), " is not supported (expected f32, f64, f16 or bf16)");
  }
}

// The type arithmetic is done in: f32 for the 16-bit floats, the type itself otherwise.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;
// f32 and the 16-bit floats: the dtypes the CPU kernels' instruction-set passes compile their own
// loops for (the other dtypes run the baseline pass's loops; backend/cpu/elementwise.cpp).
template <class T> constexpr bool computes_in_f32_v = std::is_same_v<compute_t<T>, float>;

// f64 -> f32 rounded to odd (truncate, then set the last bit if anything was lost), so that a
// second rounding to 16 bits gives the same result as rounding f64 to 16 bits directly.
inline float round_to_odd_f32(double d) {
  float f = static_cast<float>(d);
  if (!(static_cast<double>(f) != d) || std::isinf(f) || d != d) return f;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if (std::abs(static_cast<double>(f)) > std::abs(d)) --bits;  // truncate toward zero
  return std::bit_cast<float>(bits | 1u);
}

// Float -> integer, defined for every input (a plain static_cast is undefined behaviour for NaN
// and out-of-range values): NaN -> 0, values past the range (infinities included) -> the
// integer's min or max, anything else truncated toward zero. Branch-free selects, so that loops
// over it still vectorise.
template <class I, class F>
inline I saturate_to_int(F v) {
  static_assert(std::is_integral_v<I> && std::is_floating_point_v<F>);
  constexpr F lo = F(std::numeric_limits<I>::min());  // 0 or -2^digits: exact in F
  constexpr F hi = F(2) * F(I(1) << (std::numeric_limits<I>::digits - 1));  // 2^digits, exact
  const F in_range = (v >= lo && v < hi) ? v : F(0);  // NaN fails both comparisons
  I r = static_cast<I>(in_range);
  r = v >= hi ? std::numeric_limits<I>::max() : r;
  r = v < lo ? std::numeric_limits<I>::min() : r;
  return r;
}

template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(static_cast<compute_t<From>>(v)) != 0.0f;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return saturate_to_int<To>(v);
  } else if constexpr ((std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) &&
                       std::is_same_v<From, double>) {
    return To(round_to_odd_f32(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace soma::detail
