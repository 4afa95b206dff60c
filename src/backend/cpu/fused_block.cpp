// Inline loops of fused f32 elementwise chains (see fused_block.hpp). Each is written exactly
// as the op's own CPU kernel computes it, so a fused chain is bit-identical to the unfused one.
#include "backend/cpu/fused_block.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace soma::detail {

namespace {
// dst[i] = f(a[i], b[i]) over one block, one loop per operand kind so that each vectorises.
template <class F>
inline void fused_binary(float* __restrict dst, const float* a, float av, const float* b, float bv,
                         std::int64_t n, F f) {
  if (a && b)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
  else if (a)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(a[i], bv);
  else if (b)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(av, b[i]);
  else
    for (std::int64_t i = 0; i < n; ++i) dst[i] = f(av, bv);
}

}  // namespace

void fused_block_op(FusedCode code, float* __restrict dst, const float* a, float av,
                    const float* b, float bv, std::int64_t n) {
  switch (code) {
    case FusedCode::Add: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x + y; }); break;
    case FusedCode::Sub: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x - y; }); break;
    case FusedCode::Mul: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x * y; }); break;
    case FusedCode::Div: fused_binary(dst, a, av, b, bv, n, [](float x, float y) { return x / y; }); break;
    case FusedCode::Abs: for (std::int64_t i = 0; i < n; ++i) dst[i] = std::abs(a[i]); break;
    case FusedCode::Neg: for (std::int64_t i = 0; i < n; ++i) dst[i] = -a[i]; break;
    case FusedCode::Square: for (std::int64_t i = 0; i < n; ++i) dst[i] = a[i] * a[i]; break;
    case FusedCode::Sqrt: for (std::int64_t i = 0; i < n; ++i) dst[i] = std::sqrt(a[i]); break;
    case FusedCode::Relu: for (std::int64_t i = 0; i < n; ++i) dst[i] = a[i] <= 0.0f ? 0.0f : a[i]; break;
    case FusedCode::Recip: for (std::int64_t i = 0; i < n; ++i) dst[i] = 1.0f / a[i]; break;
    case FusedCode::Kernel: break;
  }
}

namespace {

// The scalar form of each inline op (the tail of a range that fills no register group).
inline float scalar_op(FusedCode code, float x, float y) {
  switch (code) {
    case FusedCode::Add: return x + y;
    case FusedCode::Sub: return x - y;
    case FusedCode::Mul: return x * y;
    case FusedCode::Div: return x / y;
    case FusedCode::Abs: return std::abs(x);
    case FusedCode::Neg: return -x;
    case FusedCode::Square: return x * x;
    case FusedCode::Sqrt: return std::sqrt(x);
    case FusedCode::Relu: return x <= 0.0f ? 0.0f : x;
    case FusedCode::Recip: return 1.0f / x;
    case FusedCode::Kernel: break;
  }
  return x;
}

void scalar_chain(const FusedInstr* prog, int nprog, float* dst, std::int64_t b, std::int64_t e) {
  for (std::int64_t i = b; i < e; ++i) {
    float r = 0;
    for (int k = 0; k < nprog; ++k) {
      const FusedInstr& in = prog[k];
      float a[2] = {0, 0};
      for (int j = 0; j < in.nargs; ++j)
        a[j] = in.kind[j] == FusedInstr::Chain ? r
               : in.kind[j] == FusedInstr::Array ? in.p[j][i] : in.v[j];
      r = scalar_op(in.code, a[0], a[1]);
    }
    dst[i] = r;
  }
}

// Vector registers of one ISA: the same IEEE operations as the scalar loops (abs and negation
// clear or flip the sign bit, relu gives +0 where x <= 0 and keeps x elsewhere, NaN included:
// the compare is "not less or equal, unordered", true for NaN).
#if defined(__AVX512F__)
#define SOMA_FUSED_REGISTERS 1
struct Vec {
  using V = __m512;
  static constexpr int kLanes = 16, kRegs = 8;  // 8 chain registers + 16 operands fit in 32
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void stream(float* p, V v) { _mm512_stream_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  // (maskz with every lane set: _mm512_sqrt_ps draws a -Wmaybe-uninitialized from GCC 12's header)
  static V sqrt(V a) { return _mm512_maskz_sqrt_ps(__mmask16(0xffff), a); }
  static V abs(V a) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
  }
  static V neg(V a) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(std::int32_t(0x80000000u))));
  }
  static V relu(V a) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NLE_UQ), a);
  }
};
#elif defined(__AVX__)
#define SOMA_FUSED_REGISTERS 1
struct Vec {
  using V = __m256;
  static constexpr int kLanes = 8, kRegs = 4;  // 16 registers only
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, V v) { _mm256_stream_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V sqrt(V a) { return _mm256_sqrt_ps(a); }
  static V abs(V a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  static V neg(V a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static V relu(V a) { return _mm256_and_ps(_mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NLE_UQ), a); }
};
#endif

#ifdef SOMA_FUSED_REGISTERS
// Groups of kRegs registers (kRegs * kLanes elements) from i to e through the whole chain. The
// operands are two named arrays (not one indexed by operand number) so that they stay in
// registers; the loop over groups is inside so that nothing is spilled between groups.
void vector_groups(const FusedInstr* prog, int nprog, float* dst, std::int64_t i,
                   std::int64_t e, bool stream) {
  constexpr int R = Vec::kRegs, L = Vec::kLanes;
  using V = Vec::V;
  for (; i + R * L <= e; i += R * L) {
    V r[R];
    for (int g = 0; g < R; ++g) r[g] = Vec::set1(0.0f);  // the first op reads no chain value
    for (int k = 0; k < nprog; ++k) {
      const FusedInstr& in = prog[k];
      V x[R], y[R];
      auto operand = [&](int j, V* d) {
        if (in.kind[j] == FusedInstr::Chain)
          for (int g = 0; g < R; ++g) d[g] = r[g];
        else if (in.kind[j] == FusedInstr::Array)
          for (int g = 0; g < R; ++g) d[g] = Vec::load(in.p[j] + i + g * L);
        else
          for (int g = 0; g < R; ++g) d[g] = Vec::set1(in.v[j]);
      };
      operand(0, x);
      if (in.nargs > 1) operand(1, y);
      else
        for (int g = 0; g < R; ++g) y[g] = x[g];  // unused; keeps y initialised
      switch (in.code) {
        case FusedCode::Add: for (int g = 0; g < R; ++g) r[g] = Vec::add(x[g], y[g]); break;
        case FusedCode::Sub: for (int g = 0; g < R; ++g) r[g] = Vec::sub(x[g], y[g]); break;
        case FusedCode::Mul: for (int g = 0; g < R; ++g) r[g] = Vec::mul(x[g], y[g]); break;
        case FusedCode::Div: for (int g = 0; g < R; ++g) r[g] = Vec::div(x[g], y[g]); break;
        case FusedCode::Abs: for (int g = 0; g < R; ++g) r[g] = Vec::abs(x[g]); break;
        case FusedCode::Neg: for (int g = 0; g < R; ++g) r[g] = Vec::neg(x[g]); break;
        case FusedCode::Square: for (int g = 0; g < R; ++g) r[g] = Vec::mul(x[g], x[g]); break;
        case FusedCode::Sqrt: for (int g = 0; g < R; ++g) r[g] = Vec::sqrt(x[g]); break;
        case FusedCode::Relu: for (int g = 0; g < R; ++g) r[g] = Vec::relu(x[g]); break;
        case FusedCode::Recip:
          for (int g = 0; g < R; ++g) r[g] = Vec::div(Vec::set1(1.0f), x[g]);
          break;
        case FusedCode::Kernel: break;
      }
    }
    if (stream)
      for (int g = 0; g < R; ++g) Vec::stream(dst + i + g * L, r[g]);
    else
      for (int g = 0; g < R; ++g) Vec::store(dst + i + g * L, r[g]);
  }
}
#endif

}  // namespace

bool fused_chain_in_registers_available() {
#ifdef SOMA_FUSED_REGISTERS
  return true;
#else
  return false;
#endif
}

void fused_chain_in_registers(const FusedInstr* prog, int nprog, float* dst, std::int64_t b,
                              std::int64_t n, bool stream) {
  std::int64_t i = b;
  const std::int64_t e = b + n;
#ifdef SOMA_FUSED_REGISTERS
  constexpr std::int64_t kGroup = std::int64_t(Vec::kRegs) * Vec::kLanes;
  if (stream) {
    // Streaming stores need aligned addresses: plain ones up to the first 64-byte boundary.
    while (i < e && (reinterpret_cast<std::uintptr_t>(dst + i) & 63) != 0) {
      scalar_chain(prog, nprog, dst, i, i + 1);
      ++i;
    }
  }
  vector_groups(prog, nprog, dst, i, e, stream);
  i += (e - i) / kGroup * kGroup;
#else
  (void)stream;
#endif
  scalar_chain(prog, nprog, dst, i, e);
}

void stream_store_block(float* __restrict dst, const float* src, std::int64_t n) {
#if defined(__SSE2__)
  std::int64_t i = 0;
  // Streaming stores need aligned addresses: plain stores up to the first 64-byte boundary.
  for (; i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 63) != 0; ++i) dst[i] = src[i];
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#elif defined(__AVX__)
  for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#else
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i] = src[i];
#else
  std::memcpy(dst, src, std::size_t(n) * sizeof(float));
#endif
}

void stream_store_fence() {
#if defined(__SSE2__)
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before the barrier
#endif
}

}  // namespace soma::detail
