// The f32 exp, erf and tanh of soma: the elementwise ops (soma::exp, ...: scalar libm, one call
// per element) and the loops that call glibc's vector math library, libmvec
// (src/internal/vector_math.hpp, issue 26; the fused attention kernel's exp), run here in this
// file's own loops, which include that header and are built as libsoma is (-fno-math-errno).
// Measured: the largest error in units in the last place over a sweep of every float exponent
// and densely where the functions bend, against the f64 function rounded to f32, and the special
// values (signed zeros, infinities, NaN, denormal inputs and results, overflow and underflow).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "internal/vector_math.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

// The largest errors allowed: libm's (measured 1, 1, 2 with glibc 2.36) and libmvec's (measured
// on AVX-512: exp 3 ulp at 10 and near 0.24, erf 4 ulp near 3.65 where erf is almost 1, tanh 2;
// glibc states 4 ulp for every libmvec function).
constexpr std::int64_t kExpUlps = 1, kErfUlps = 1, kTanhUlps = 2;
constexpr std::int64_t kVecExpUlps = 3, kVecErfUlps = 4, kVecTanhUlps = 2;

// Floats ordered as integers: adjacent floats differ by 1, -0 and +0 are both 0.
std::int64_t ordered(float f) {
  const std::int32_t b = std::bit_cast<std::int32_t>(f);
  return b < 0 ? -std::int64_t(b & 0x7fffffff) : std::int64_t(b);
}
std::int64_t ulps(float a, float b) {
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Every 509th bit pattern (a prime: the mantissas vary) over the whole float range, NaNs
// excluded, plus the values of `extra`.
std::vector<float> sweep() {
  std::vector<float> xs;
  for (std::uint64_t b = 0; b <= 0xffffffffu; b += 509) {
    const float f = std::bit_cast<float>(std::uint32_t(b));
    if (!std::isnan(f)) xs.push_back(f);
  }
  return xs;
}

using Fn = std::vector<float> (*)(const std::vector<float>&);

template <Tensor (*Op)(const Tensor&)>
std::vector<float> via_op(const std::vector<float>& xs) {
  Tensor y = Op(constant(xs, {std::int64_t(xs.size())}));
  const float* p = y.data<float>();
  return std::vector<float>(p, p + xs.size());
}
// A loop GCC vectorises through libmvec (its last iterations call the scalar function).
template <float (*F)(float)>
std::vector<float> via_loop(const std::vector<float>& xs) {
  std::vector<float> ys(xs.size());
  const float* __restrict x = xs.data();
  float* __restrict y = ys.data();
  for (std::size_t i = 0; i < xs.size(); ++i) y[i] = F(x[i]);
  return ys;
}
inline float exp_f(float x) { return std::exp(x); }
inline float erf_f(float x) { return std::erf(x); }
inline float tanh_f(float x) { return std::tanh(x); }

struct Worst {
  std::int64_t ulp = 0;
  float x = 0;
};

// The largest ulp error of op against ref (f64) over xs; NaN must match NaN.
Worst worst_error(Fn fn, double (*ref)(double), const std::vector<float>& xs) {
  const std::vector<float> ys = fn(xs);
  Worst w;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float want = float(ref(double(xs[i])));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(ys[i])) << xs[i];
      continue;
    }
    const std::int64_t u = ulps(ys[i], want);
    if (u > w.ulp) w = {u, xs[i]};
  }
  return w;
}

double exp_ref(double x) { return std::exp(x); }
double erf_ref(double x) { return std::erf(x); }
double tanh_ref(double x) { return std::tanh(x); }
Tensor exp_t(const Tensor& t) { return exp(t); }
Tensor erf_t(const Tensor& t) { return erf(t); }
Tensor tanh_t(const Tensor& t) { return tanh(t); }

struct Case {
  const char* name;
  Fn fn;
  double (*ref)(double);
  std::int64_t ulps;
};
const Case kCases[] = {
    {"exp (op)", via_op<exp_t>, exp_ref, kExpUlps},
    {"erf (op)", via_op<erf_t>, erf_ref, kErfUlps},
    {"tanh (op)", via_op<tanh_t>, tanh_ref, kTanhUlps},
    {"exp (libmvec loop)", via_loop<exp_f>, exp_ref, kVecExpUlps},
    {"erf (libmvec loop)", via_loop<erf_f>, erf_ref, kVecErfUlps},
    {"tanh (libmvec loop)", via_loop<tanh_f>, tanh_ref, kVecTanhUlps},
};

TEST(VectorMath, WithinTheirUlpsOverEveryExponent) {
  const std::vector<float> xs = sweep();
  for (const Case& c : kCases) {
    const Worst w = worst_error(c.fn, c.ref, xs);
    std::printf("%s: max %lld ulp (at %a)\n", c.name, static_cast<long long>(w.ulp), double(w.x));
    EXPECT_LE(w.ulp, c.ulps) << c.name << " at x = " << w.x;
  }
}

// Densely where the functions bend: every 16th float with 2^-4 <= |x| < 16 (erf and tanh
// saturate to +-1 in f32 inside it; smaller |x| are the sweep's).
TEST(VectorMath, DenseWhereTheyBend) {
  std::vector<float> xs;
  for (std::uint32_t b = std::bit_cast<std::uint32_t>(0.0625f); b < std::bit_cast<std::uint32_t>(16.0f);
       b += 16) {
    xs.push_back(std::bit_cast<float>(b));
    xs.push_back(-std::bit_cast<float>(b));
  }
  for (const Case& c : kCases) EXPECT_LE(worst_error(c.fn, c.ref, xs).ulp, c.ulps) << c.name;
}

TEST(VectorMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float den = std::numeric_limits<float>::denorm_min();
  // 64 copies each, so the values go through the vector loop and not only its remainder.
  std::vector<float> base = {0.0f, -0.0f, inf, -inf, nan, den, -den, 1e-39f, -1e-39f,
                             88.72283f, 88.72284f, 89.0f, -87.3f, -100.0f, -103.97f, -104.0f,
                             -150.0f, 3.92f, -3.92f, 10.0f, -10.0f, 1e-20f, -1e-20f};
  std::vector<float> xs;
  for (int r = 0; r < 64; ++r) xs.insert(xs.end(), base.begin(), base.end());
  for (const Case& c : kCases) {
    const std::vector<float> ys = c.fn(xs);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float x = xs[i];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(ys[i])) << c.name;
        continue;
      }
      EXPECT_LE(ulps(ys[i], float(c.ref(double(x)))), c.ulps) << c.name << " " << x;
      if (x == 0.0f && c.ref != exp_ref)  // the sign of zero survives erf and tanh
        EXPECT_EQ(std::signbit(ys[i]), std::signbit(x)) << c.name;
    }
  }
  for (Fn e : {Fn(via_op<exp_t>), Fn(via_loop<exp_f>)})
    EXPECT_EQ(e({inf, -inf, 89.0f, -104.0f}), (std::vector<float>{inf, 0.0f, inf, 0.0f}));
  for (Fn f : {Fn(via_op<erf_t>), Fn(via_loop<erf_f>), Fn(via_op<tanh_t>), Fn(via_loop<tanh_f>)})
    EXPECT_EQ(f({inf, -inf}), (std::vector<float>{1.0f, -1.0f}));
}

// The libmvec loops are vectorised where this header says they are (else this file measured
// libm twice).
TEST(VectorMath, LibmvecIsUsedWhereAvailable) {
  if (!SOMA_HAS_LIBMVEC) GTEST_SKIP() << "no libmvec declarations for this compiler/libc";
  // libmvec's erf differs from libm's somewhere in the sweep: the loop did not call libm only.
  const std::vector<float> xs = sweep();
  EXPECT_NE(via_loop<erf_f>(xs), via_op<erf_t>(xs));
}

// The fused GELU (exact, erf form) and its gradient against f64 formulas over a dense range.
TEST(VectorMath, GeluErfAndItsGradientMatchF64) {
  std::vector<float> xs;
  for (float x = -12.0f; x <= 12.0f; x += 1.0f / 1024) xs.push_back(x);
  const Tensor x = constant(xs, {std::int64_t(xs.size())});
  const Tensor y = gelu(x);
  const Tensor g = call_op1(get_op("gelu_erf_grad"), {x, ones_like(x)});
  const float* py = y.data<float>();
  const float* pg = g.data<float>();
  double worst_y = 0, worst_g = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    const double yv = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    const double gv = 0.5 * (1 + std::erf(v / std::sqrt(2.0))) +
                      v * std::exp(-0.5 * v * v) / std::sqrt(2 * 3.14159265358979323846);
    // Absolute error scaled by max(1, |value|): relative for large values, absolute near the
    // zeros of gelu (x = 0, and x -> -inf where it underflows).
    worst_y = std::max(worst_y, std::fabs(py[i] - yv) / std::max(1.0, std::fabs(yv)));
    worst_g = std::max(worst_g, std::fabs(pg[i] - gv) / std::max(1.0, std::fabs(gv)));
  }
  EXPECT_LT(worst_y, 4e-7);
  EXPECT_LT(worst_g, 4e-7);
}

}  // namespace
}  // namespace soma
