#pragma once
// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011) and the
// transforms soma's random ops apply to its words, as host/device functions. One definition for
// both devices: the CPU kernels (src/ops/random.cpp) and the CUDA kernels (random_kernels in
// index_kernels.cu) call these, so a random op gives the same numbers on either device for the
// same (seed, stream): bit for bit for uniforms (the arithmetic is spelled out so nvcc cannot
// contract it into FMAs), within a few ulps for normals (the device's log/sin/cos are not
// libm's).
//
// Compiled by nvcc (C++17) and g++/clang (C++20): it includes no soma header.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define SOMA_HD __host__ __device__
#else
#define SOMA_HD
#endif

namespace soma::philox {

// Four 32-bit words: a counter or the generator's output.
struct Block {
  std::uint32_t w[4];
  SOMA_HD std::uint32_t operator[](int i) const { return w[i]; }
};

// The bijection itself: 10 rounds of Philox4x32 on `ctr` under the key (k0, k1).
SOMA_HD inline Block philox4x32_10(Block ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;  // round multipliers
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += W0;
      k1 += W1;
    }
    const std::uint64_t p0 = std::uint64_t(M0) * ctr.w[0];
    const std::uint64_t p1 = std::uint64_t(M1) * ctr.w[2];
    ctr = Block{{std::uint32_t(p1 >> 32) ^ ctr.w[1] ^ k0, std::uint32_t(p1),
                 std::uint32_t(p0 >> 32) ^ ctr.w[3] ^ k1, std::uint32_t(p0)}};
  }
  return ctr;
}

// soma's counter layout: ctr[0..1] = block index (48 bits) | redraw attempt << 48, ctr[2..3] =
// stream; key = the 64-bit seed. Element i of a draw with `lanes` values per block comes from
// block i / lanes, so the numbers depend on (seed, stream, i) only, never on how the work is cut.
SOMA_HD inline Block bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                          std::uint32_t attempt = 0) {
  const Block ctr{{std::uint32_t(index), std::uint32_t(index >> 32) | (attempt << 16),
                   std::uint32_t(stream), std::uint32_t(stream >> 32)}};
  return philox4x32_10(ctr, std::uint32_t(seed), std::uint32_t(seed >> 32));
}

SOMA_HD inline std::uint64_t u64(std::uint32_t hi, std::uint32_t lo) {
  return (std::uint64_t(hi) << 32) | lo;
}

// Correctly rounded arithmetic that no compiler fuses into an FMA (the host build does not
// contract: -std=c++20 implies -ffp-contract=off for GCC; nvcc contracts unless told not to).
SOMA_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SOMA_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SOMA_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SOMA_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// High 64 bits of a 64x64-bit product (maps 64 random bits onto [0, range)).
SOMA_HD inline std::uint64_t mulhi64(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return std::uint64_t((unsigned __int128)a * b >> 64);
#endif
}

// Uniform in [0, 1) and in (0, 1] with the precision of the type (exact conversions).
SOMA_HD inline float unit_f(std::uint32_t x) { return float(x >> 8) * 0x1p-24f; }
SOMA_HD inline float unit_open_f(std::uint32_t x) { return float((x >> 8) + 1) * 0x1p-24f; }
SOMA_HD inline double unit_d(std::uint64_t x) { return double(x >> 11) * 0x1p-53; }
SOMA_HD inline double unit_open_d(std::uint64_t x) { return double((x >> 11) + 1) * 0x1p-53; }

// Standard normals of one block (Box-Muller): four in float precision, or two in double.
SOMA_HD inline void normals_f(const Block& b, float (&z)[4]) {
  constexpr float kTwoPi = 2.0f * 3.14159265358979323846f;
  for (int k = 0; k < 2; ++k) {
    const float r = std::sqrt(-2.0f * std::log(unit_open_f(b.w[2 * k])));
    const float theta = kTwoPi * unit_f(b.w[2 * k + 1]);
    z[2 * k] = r * std::cos(theta);
    z[2 * k + 1] = r * std::sin(theta);
  }
}
SOMA_HD inline void normals_d(const Block& b, double (&z)[2]) {
  constexpr double kTwoPi = 2.0 * 3.14159265358979323846;
  const double r = std::sqrt(-2.0 * std::log(unit_open_d(u64(b.w[0], b.w[1]))));
  const double theta = kTwoPi * unit_d(u64(b.w[2], b.w[3]));
  z[0] = r * std::cos(theta);
  z[1] = r * std::sin(theta);
}

// Truncation: lane k of block `index` drew v; a value with |v| >= 2 is redrawn from fresh
// counters (attempt 1, 2, ...) for this element only, so its neighbours keep their values.
SOMA_HD inline float truncate_f(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                                int k, float v) {
  float z[4];
  for (std::uint32_t a = 1; !(std::fabs(v) < 2.0f) && a < 0xffff; ++a) {
    normals_f(bits(seed, stream, index, a), z);
    v = z[k];
  }
  return v;
}
SOMA_HD inline double truncate_d(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                                 int k, double v) {
  double z[2];
  for (std::uint32_t a = 1; !(std::fabs(v) < 2.0) && a < 0xffff; ++a) {
    normals_d(bits(seed, stream, index, a), z);
    v = z[k];
  }
  return v;
}

// minval + width * u for the uniform draws, u from 24 bits (f32/f16/bf16: four per block) or 53
// bits (f64: two per block); the caller converts to the dtype and keeps the result below maxval.
SOMA_HD inline double uniform24(double minval, double width, std::uint32_t w) {
  return add_rn(minval, mul_rn(mul_rn(width, double(w >> 8)), 0x1p-24));
}
SOMA_HD inline double uniform53(double minval, double width, std::uint32_t hi, std::uint32_t lo) {
  return add_rn(minval, mul_rn(width, unit_d(u64(hi, lo))));
}
// An integer in [lo, lo + range) from 64 random bits (range 0: the whole 64-bit range);
// multiply-shift, bias <= range / 2^64.
SOMA_HD inline std::uint64_t uniform_int(std::uint64_t lo, std::uint64_t range,
                                         std::uint32_t hi_bits, std::uint32_t lo_bits) {
  const std::uint64_t x = u64(hi_bits, lo_bits);
  return lo + (range == 0 ? x : mulhi64(x, range));
}

}  // namespace soma::philox
