#pragma once
// The limits of each dtype, as NumPy's finfo / iinfo and PyTorch's torch.finfo / torch.iinfo
// give them: soma::finfo(DType::f16).eps, soma::iinfo(DType::i32).max, ... Header-only; an
// integer dtype in finfo (or a floating one in iinfo, or bool in either) is a soma::Error.
#include <cstdint>

#include "soma/dtype.hpp"
#include "soma/error.hpp"

namespace soma {

struct FInfo {
  int bits;                // storage size in bits
  int mantissa_bits;       // explicit fraction bits (f32: 23)
  double eps;              // 1 + eps is the next representable value after 1
  double min;              // the most negative finite value (-max)
  double max;              // the largest finite value
  double tiny;             // the smallest positive normal value (NumPy's smallest_normal)
  double smallest_subnormal;
  double resolution;       // 10^-precision, precision = decimal digits (NumPy's)
};

struct IInfo {
  int bits;
  std::int64_t min;
  std::int64_t max;
};

inline FInfo finfo(DType t) {
  switch (t) {
    case DType::f32:
      return {32, 23, 0x1p-23, -0x1.fffffep+127, 0x1.fffffep+127, 0x1p-126, 0x1p-149, 1e-6};
    case DType::f64:
      return {64, 52, 0x1p-52, -0x1.fffffffffffffp+1023, 0x1.fffffffffffffp+1023, 0x1p-1022,
              0x1p-1074, 1e-15};
    case DType::f16: return {16, 10, 0x1p-10, -65504.0, 65504.0, 0x1p-14, 0x1p-24, 1e-3};
    case DType::bf16:
      return {16, 7, 0x1p-7, -0x1.fep+127, 0x1.fep+127, 0x1p-126, 0x1p-133, 1e-2};
    default:
      fail("finfo", "expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(t),
           " (use iinfo for integers)");
  }
}

inline IInfo iinfo(DType t) {
  switch (t) {
    case DType::i32: return {32, INT32_MIN, INT32_MAX};
    case DType::i64: return {64, INT64_MIN, INT64_MAX};
    case DType::u8: return {8, 0, 255};
    case DType::i8: return {8, -128, 127};
    default:
      fail("iinfo", "expected an integer dtype (i32, i64, u8, i8), got ", dtype_name(t),
           is_floating(t) ? " (use finfo for floating dtypes)" : "");
  }
}

}  // namespace soma
