// Inline loops of fused f32 elementwise chains (see fused_block.hpp). Each op is its functor from
// the elementwise table, so a fused chain is bit-identical to the unfused one: the block loops
// and the scalar tail call it on floats, the register groups on a vector type whose operators
// are the same IEEE operations lane by lane.
//
// The table's functors, instantiated for a pass's Vec, take an AVX vector by value in a function
// with the baseline options (isa_foreach.hpp): GCC notes the ABI of that, but vector_groups
// inlines them all (flatten), so no such call exists.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include "backend/cpu/fused_block.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#define SOMA_ISA_FILE "backend/cpu/fused_block.cpp"
#include "backend/cpu/isa_foreach.hpp"  // this file once per instruction set (runtime dispatch)

namespace soma::detail {
SOMA_ISA_BEGIN

namespace {

struct TableEntry {
  FusedCode code;
  ew::Fuse fuse;
};
const std::unordered_map<std::string_view, TableEntry>& fusion_table() {
  static const std::unordered_map<std::string_view, TableEntry> table = {
#define SOMA_FUSED_ENTRY(NAME, ...) {#NAME, {FusedCode::NAME, ew::NAME##_fn::fuse}},
      SOMA_ELEMENTWISE_UNARY(SOMA_FUSED_ENTRY) SOMA_ELEMENTWISE_BINARY(SOMA_FUSED_ENTRY)
#undef SOMA_FUSED_ENTRY
  };
  return table;
}

// Calls fn(functor) for the op of `in` when it has an inline form (Fuse::Registers), with the
// instruction's attributes; returns whether it did.
template <class Fn>
inline bool with_inline_op(const FusedInstr& in, Fn&& fn) {
  switch (in.code) {
#define SOMA_FUSED_CASE(NAME, ...)                                  \
  case FusedCode::NAME:                                             \
    if constexpr (ew::NAME##_fn::fuse == ew::Fuse::Registers) {     \
      ew::NAME##_fn f;                                              \
      f.alpha = in.alpha;                                           \
      f.beta = in.beta;                                             \
      fn(f);                                                        \
      return true;                                                  \
    }                                                               \
    return false;
    SOMA_ELEMENTWISE_UNARY(SOMA_FUSED_CASE) SOMA_ELEMENTWISE_BINARY(SOMA_FUSED_CASE)
#undef SOMA_FUSED_CASE
    case FusedCode::Kernel: break;
  }
  return false;
}

// dst[i] = f(a[i], b[i]) over one block, one loop per operand kind so that each vectorises.
template <class F>
inline void fused_binary(float* __restrict dst, const float* a, float av, const float* b, float bv,
                         std::int64_t n, const F& f) {
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

bool fusable_op(std::string_view op) {
  auto it = fusion_table().find(op);
  return it != fusion_table().end() && it->second.fuse != ew::Fuse::No;
}

FusedInstr fused_instr(std::string_view op, const Attrs& attrs) {
  FusedInstr in;
  auto it = fusion_table().find(op);
  if (it == fusion_table().end() || it->second.fuse != ew::Fuse::Registers) return in;
  in.code = it->second.code;
  with_inline_op(in, [&](const auto& f) {
    const auto g = ew::make_functor<std::decay_t<decltype(f)>>(attrs);
    in.alpha = g.alpha;
    in.beta = g.beta;
  });
  return in;
}

void fused_block_op(const FusedInstr& in, float* __restrict dst, const float* a, float av,
                    const float* b, float bv, std::int64_t n) {
  with_inline_op(in, [&](const auto& f) {
    if constexpr (std::decay_t<decltype(f)>::arity == 2)
      fused_binary(dst, a, av, b, bv, n, f);
    else
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f(a[i]);
  });
}

namespace {

// The scalar form of each inline op (the tail of a range that fills no register group).
inline float scalar_op(const FusedInstr& in, float x, float y) {
  float r = x;
  with_inline_op(in, [&](const auto& f) {
    if constexpr (std::decay_t<decltype(f)>::arity == 2) r = f(x, y);
    else r = f(x);
  });
  return r;
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
      r = scalar_op(in, a[0], a[1]);
    }
    dst[i] = r;
  }
}

// A vector of floats for the table's functors: the operators, compares (ordered, as C++'s on
// floats: false for NaN), select, abs (clears the sign bit) and sqrt of one ISA, lane by lane
// the IEEE operations the scalar code does.
#undef SOMA_FUSED_REGISTERS  // (set by the pass before)
#if SOMA_ISA_AVX512
#define SOMA_FUSED_REGISTERS 1
struct VMask {
  __mmask16 m;
};
struct Vec {
  using V = __m512;
  static constexpr int kLanes = 16, kRegs = 8;  // 8 chain registers + 16 operands fit in 32
  V v;
  Vec() = default;
  explicit Vec(V x) : v(x) {}
  explicit Vec(float f) : v(_mm512_set1_ps(f)) {}
  static Vec load(const float* p) { return Vec(_mm512_loadu_ps(p)); }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void stream(float* p) const { _mm512_stream_ps(p, v); }
};
inline Vec operator+(Vec a, Vec b) { return Vec(_mm512_add_ps(a.v, b.v)); }
inline Vec operator-(Vec a, Vec b) { return Vec(_mm512_sub_ps(a.v, b.v)); }
inline Vec operator*(Vec a, Vec b) { return Vec(_mm512_mul_ps(a.v, b.v)); }
inline Vec operator/(Vec a, Vec b) { return Vec(_mm512_div_ps(a.v, b.v)); }
inline Vec operator-(Vec a) {
  return Vec(_mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(std::int32_t(0x80000000u)))));
}
inline VMask operator<(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
inline VMask operator<=(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LE_OQ)}; }
inline VMask operator>(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)}; }
inline VMask operator>=(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ)}; }
inline Vec select(VMask m, Vec a, Vec b) { return Vec(_mm512_mask_blend_ps(m.m, b.v, a.v)); }
inline Vec abs(Vec a) {
  return Vec(_mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(a.v), _mm512_set1_epi32(0x7fffffff))));
}
// (maskz with every lane set: _mm512_sqrt_ps draws a -Wmaybe-uninitialized from GCC 12's header)
inline Vec sqrt(Vec a) { return Vec(_mm512_maskz_sqrt_ps(__mmask16(0xffff), a.v)); }
#elif SOMA_ISA_AVX
#define SOMA_FUSED_REGISTERS 1
struct VMask {
  __m256 m;
};
struct Vec {
  using V = __m256;
  static constexpr int kLanes = 8, kRegs = 4;  // 16 registers only
  V v;
  Vec() = default;
  explicit Vec(V x) : v(x) {}
  explicit Vec(float f) : v(_mm256_set1_ps(f)) {}
  static Vec load(const float* p) { return Vec(_mm256_loadu_ps(p)); }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
  void stream(float* p) const { _mm256_stream_ps(p, v); }
};
inline Vec operator+(Vec a, Vec b) { return Vec(_mm256_add_ps(a.v, b.v)); }
inline Vec operator-(Vec a, Vec b) { return Vec(_mm256_sub_ps(a.v, b.v)); }
inline Vec operator*(Vec a, Vec b) { return Vec(_mm256_mul_ps(a.v, b.v)); }
inline Vec operator/(Vec a, Vec b) { return Vec(_mm256_div_ps(a.v, b.v)); }
inline Vec operator-(Vec a) { return Vec(_mm256_xor_ps(a.v, _mm256_set1_ps(-0.0f))); }
inline VMask operator<(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)}; }
inline VMask operator<=(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LE_OQ)}; }
inline VMask operator>(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)}; }
inline VMask operator>=(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GE_OQ)}; }
inline Vec select(VMask m, Vec a, Vec b) { return Vec(_mm256_blendv_ps(b.v, a.v, m.m)); }
inline Vec abs(Vec a) {
  return Vec(_mm256_and_ps(a.v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))));
}
inline Vec sqrt(Vec a) { return Vec(_mm256_sqrt_ps(a.v)); }
#endif

#ifdef SOMA_FUSED_REGISTERS
// Groups of kRegs registers (kRegs * kLanes elements) from i to e through the whole chain. The
// operands are two named arrays (not one indexed by operand number) so that they stay in
// registers; the loop over groups is inside so that nothing is spilled between groups.
// flatten: the table's functors are header templates, compiled with the baseline options even
// when instantiated for this pass's Vec (isa_foreach.hpp), so GCC's early inliner cannot inline
// the Vec operators into them and left ~90 calls in this loop; inlining everything into this
// function (which has the pass's options) gives the code of a -march=native build.
[[gnu::flatten]] void vector_groups(const FusedInstr* prog, int nprog, float* dst, std::int64_t i,
                   std::int64_t e, bool stream) {
  constexpr int R = Vec::kRegs, L = Vec::kLanes;
  for (; i + R * L <= e; i += R * L) {
    Vec r[R];
    for (int g = 0; g < R; ++g) r[g] = Vec(0.0f);  // the first op reads no chain value
    for (int k = 0; k < nprog; ++k) {
      const FusedInstr& in = prog[k];
      Vec x[R], y[R];
      auto operand = [&](int j, Vec* d) {
        if (in.kind[j] == FusedInstr::Chain)
          for (int g = 0; g < R; ++g) d[g] = r[g];
        else if (in.kind[j] == FusedInstr::Array)
          for (int g = 0; g < R; ++g) d[g] = Vec::load(in.p[j] + i + g * L);
        else
          for (int g = 0; g < R; ++g) d[g] = Vec(in.v[j]);
      };
      operand(0, x);
      if (in.nargs > 1) operand(1, y);
      else
        for (int g = 0; g < R; ++g) y[g] = x[g];  // unused; keeps y initialised
      with_inline_op(in, [&](const auto& f) {
        if constexpr (std::decay_t<decltype(f)>::arity == 2)
          for (int g = 0; g < R; ++g) r[g] = f(x[g], y[g]);
        else
          for (int g = 0; g < R; ++g) r[g] = f(x[g]);
      });
    }
    if (stream)
      for (int g = 0; g < R; ++g) r[g].stream(dst + i + g * L);
    else
      for (int g = 0; g < R; ++g) r[g].store(dst + i + g * L);
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
#if SOMA_ISA_AVX512
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#elif SOMA_ISA_AVX
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
SOMA_ISA_END

#if SOMA_ISA_ONCE
// The functions of the active instruction set (src/internal/cpu_isa.hpp).
bool fusable_op(std::string_view op) { return SOMA_ISA_SELECT(fusable_op)(op); }
FusedInstr fused_instr(std::string_view op, const Attrs& attrs) {
  return SOMA_ISA_SELECT(fused_instr)(op, attrs);
}
void fused_block_op(const FusedInstr& in, float* __restrict dst, const float* a, float av,
                    const float* b, float bv, std::int64_t n) {
  SOMA_ISA_SELECT(fused_block_op)(in, dst, a, av, b, bv, n);
}
bool fused_chain_in_registers_available() {
  return SOMA_ISA_SELECT(fused_chain_in_registers_available)();
}
void fused_chain_in_registers(const FusedInstr* prog, int nprog, float* dst, std::int64_t b,
                              std::int64_t n, bool stream) {
  SOMA_ISA_SELECT(fused_chain_in_registers)(prog, nprog, dst, b, n, stream);
}
void stream_store_block(float* __restrict dst, const float* src, std::int64_t n) {
  SOMA_ISA_SELECT(stream_store_block)(dst, src, n);
}
void stream_store_fence() { SOMA_ISA_SELECT(stream_store_fence)(); }
#endif

}  // namespace soma::detail
