#include "soma/dtype.hpp"

namespace soma {

namespace {
int rank_of(DType t) {
  switch (t) {
    case DType::boolean: return 0;
    case DType::u8: return 1;
    case DType::i8: return 1;
    case DType::i32: return 2;
    case DType::i64: return 3;
    case DType::f16: return 4;
    case DType::bf16: return 4;
    case DType::f32: return 5;
    case DType::f64: return 6;
  }
  return 0;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16))
    return DType::f32;
  if ((a == DType::u8 && b == DType::i8) || (a == DType::i8 && b == DType::u8)) return DType::i32;
  return rank_of(a) >= rank_of(b) ? a : b;
}

}  // namespace soma
