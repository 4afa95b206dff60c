#pragma once
// quantize_linear / dequantize_linear (src/ops/quantize.cpp) per element, for host and device
// (SOMA_HD): the CPU kernels (src/backend/cpu/quantize.cpp) and the CUDA kernels
// (src/backend/cuda/quantize_kernels.cu) run these, and tests/unit/test_int8.cpp runs them on the
// host over every index. ONNX QuantizeLinear / DequantizeLinear semantics:
//   q = saturate(round_half_even(x / scale) + zero_point)     (u8 or i8)
//   x = (q - zero_point) * scale
// with scale and zero point either one value (per tensor) or one per index along an axis (per
// channel). A NaN quotient quantizes to the zero point (ONNX leaves it undefined).
//
// This header is compiled by nvcc (C++17) too: no soma header, no C++20.
#include <cstdint>

#include "elementwise_table.hpp"  // SOMA_HD, ew::floor

namespace soma::quant {

// Which scale / zero point element flat index i of x uses: i's index along the quantization
// axis (channels > 1), or 0 (per tensor). inner: the product of the dims after the axis.
struct ChannelIndex {
  std::int64_t inner = 1, channels = 1;
  SOMA_HD std::int64_t operator()(std::int64_t i) const {
    return channels == 1 ? 0 : (i / inner) % channels;
  }
  // x's dims, the normalised axis and the number of scales (1: per tensor).
  static ChannelIndex make(const std::int64_t* dims, int rank, int axis, std::int64_t scales) {
    ChannelIndex c;
    if (scales == 1) return c;
    c.channels = scales;
    for (int d = axis + 1; d < rank; ++d) c.inner *= dims[d];
    return c;
  }
};

// Round half to even, independent of the floating-point rounding mode.
template <class C>
SOMA_HD inline C round_half_even(C v) {
  const C r = ew::floor(v);
  const C d = v - r;
  if (d > C(0.5)) return r + C(1);
  if (d < C(0.5)) return r;
  const C half = r * C(0.5);  // r is even iff r / 2 is an integer
  return ew::floor(half) == half ? r : r + C(1);
}

// Q: std::uint8_t or std::int8_t. C: the compute type (float or double). `q` is x / scale
// already rounded to the input's storage type (as NumPy computes it in that type).
template <class Q, class C>
SOMA_HD inline Q quantize_value(C q, std::int32_t zero_point) {
  constexpr bool kSigned = Q(-1) < Q(0);
  constexpr C lo = kSigned ? C(-128) : C(0), hi = kSigned ? C(127) : C(255);
  if (!(q == q)) q = C(0);
  C v = round_half_even(q) + C(zero_point);
  v = v < lo ? lo : (v > hi ? hi : v);
  return Q(std::int32_t(v));
}

// C: the compute type of the result (float or double); I: the quantized value's type. The
// difference is taken in f32, as ONNX's reference does (exact for u8 and i8).
template <class C, class I>
SOMA_HD inline C dequantize_value(I q, I zero_point, C scale) {
  return C(float(q) - float(zero_point)) * scale;
}

}  // namespace soma::quant
