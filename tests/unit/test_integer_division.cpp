// Integer floor_div and mod (issue 20): defined for every operand, on every dtype and path.
//  - floor semantics as Python: the quotient rounds toward -inf, the remainder takes the
//    divisor's sign (floor_div(-7, 2) = -4, mod(-7, 2) = 1, mod(7, -2) = -1);
//  - INT_MIN / -1 wraps to INT_MIN, as NumPy (and its remainder is 0); before, the CPU's idiv
//    trapped and the process died of SIGFPE;
//  - a zero divisor gives 0 for the quotient and the remainder, as NumPy does (NumPy also warns;
//    soma does not). Before, it was an error.
// Integer dtypes: i32, i64, u8. Paths: packed operands of one shape, a scalar divisor, a scalar
// dividend, broadcast rows and strided views.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

std::vector<std::int64_t> ints_of(const Tensor& t) {
  return cast(t, DType::i64).to_vector<std::int64_t>();
}

Tensor ints(const std::vector<std::int64_t>& v, DType dt) {
  return cast(constant(v, {std::int64_t(v.size())}), dt);
}

// The four ways the elementwise loop meets its operands, each giving floor_div or mod of a and b
// (same length): packed, scalar divisor, scalar dividend, and a broadcast [n, 1] x [1, n] grid
// whose diagonal is the answer; plus both operands as strided views.
using Fn = Tensor (*)(const Tensor&, const Tensor&);
std::vector<std::int64_t> packed(Fn f, const Tensor& a, const Tensor& b) {
  return ints_of(f(a, b));
}
// t's values in a strided [n, 1] view (column 0 of an [n, 2] buffer), exact for i64 (the shared
// noncontiguous() helper goes through double).
Tensor strided_view(const Tensor& t) {
  std::vector<std::int64_t> v;
  for (std::int64_t x : ints_of(t)) v.insert(v.end(), {x, 0});
  return cast(constant(v, {t.numel(), 2}), t.dtype()).slice(1, 0, 1);
}
std::vector<std::int64_t> strided(Fn f, const Tensor& a, const Tensor& b) {
  const Tensor va = strided_view(a), vb = strided_view(b);
  if (va.is_contiguous() || vb.is_contiguous()) return {};  // not the path meant
  return ints_of(f(va, vb));
}
std::vector<std::int64_t> scalar_divisor(Fn f, const Tensor& a, const Tensor& b) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    const Tensor r = f(a, reshape(b.slice(0, i, i + 1), {}));
    out.push_back(ints_of(r)[std::size_t(i)]);
  }
  return out;
}
std::vector<std::int64_t> scalar_dividend(Fn f, const Tensor& a, const Tensor& b) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const Tensor r = f(reshape(a.slice(0, i, i + 1), {}), b);
    out.push_back(ints_of(r)[std::size_t(i)]);
  }
  return out;
}
std::vector<std::int64_t> grid(Fn f, const Tensor& a, const Tensor& b) {
  const std::int64_t n = a.numel();
  const std::vector<std::int64_t> g = ints_of(f(reshape(a, {n, 1}), reshape(b, {1, n})));
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back(g[std::size_t(i * n + i)]);
  return out;
}
using Path = std::vector<std::int64_t> (*)(Fn, const Tensor&, const Tensor&);
struct NamedPath {
  const char* name;
  Path run;
};
const NamedPath kPaths[] = {{"packed", packed},
                            {"strided", strided},
                            {"scalar divisor", scalar_divisor},
                            {"scalar dividend", scalar_dividend},
                            {"broadcast grid", grid}};

Tensor fdiv(const Tensor& a, const Tensor& b) { return floor_div(a, b); }
Tensor fmod_(const Tensor& a, const Tensor& b) { return mod(a, b); }
Tensor percent(const Tensor& a, const Tensor& b) { return a % b; }

TEST(IntegerDivision, FloorDivAndModFollowPythonForEveryOperandSign) {
  const std::vector<std::int64_t> a = {7, -7, 7, -7, 6, -6, 6, -6, 0, 1, -1, 5};
  const std::vector<std::int64_t> b = {2, 2, -2, -2, 3, 3, -3, -3, 5, 5, 5, 1};
  const std::vector<std::int64_t> q = {3, -4, -4, 3, 2, -2, -2, 2, 0, 0, -1, 5};
  const std::vector<std::int64_t> r = {1, 1, -1, -1, 0, 0, 0, 0, 0, 1, 4, 0};
  for (DType dt : {DType::i32, DType::i64}) {
    const Tensor ta = ints(a, dt), tb = ints(b, dt);
    for (const NamedPath& p : kPaths) {
      EXPECT_EQ(p.run(fdiv, ta, tb), q) << dtype_name(dt) << " " << p.name;
      EXPECT_EQ(p.run(fmod_, ta, tb), r) << dtype_name(dt) << " " << p.name;
      EXPECT_EQ(p.run(percent, ta, tb), r) << dtype_name(dt) << " " << p.name;
    }
  }
}

TEST(IntegerDivision, UnsignedFloorDivAndMod) {
  const Tensor a = ints({7, 255, 0, 200, 13}, DType::u8), b = ints({2, 16, 3, 200, 255}, DType::u8);
  for (const NamedPath& p : kPaths) {
    EXPECT_EQ(p.run(fdiv, a, b), (std::vector<std::int64_t>{3, 15, 0, 1, 0})) << p.name;
    EXPECT_EQ(p.run(fmod_, a, b), (std::vector<std::int64_t>{1, 15, 0, 0, 13})) << p.name;
  }
}

TEST(IntegerDivision, DivisionByZeroGivesZeroForEveryIntegerDtype) {
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {
    const Tensor a = ints({7, 0, 3, 100, 1}, dt);
    const Tensor b = ints({0, 0, 2, 0, 1}, dt);
    for (const NamedPath& p : kPaths) {
      EXPECT_EQ(p.run(fdiv, a, b), (std::vector<std::int64_t>{0, 0, 1, 0, 1}))
          << dtype_name(dt) << " " << p.name;
      EXPECT_EQ(p.run(fmod_, a, b), (std::vector<std::int64_t>{0, 0, 1, 0, 0}))
          << dtype_name(dt) << " " << p.name;
    }
  }
  const Tensor neg = ints({-7, -1}, DType::i32), zero = ints({0, 0}, DType::i32);
  EXPECT_EQ(ints_of(floor_div(neg, zero)), (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(ints_of(mod(neg, zero)), (std::vector<std::int64_t>{0, 0}));
}

// INT_MIN / -1 (and INT_MIN % -1) trapped on x86 (SIGFPE): run in a forked child (a gtest death
// test) so that a crash fails this test instead of the whole suite. The child exits 0 only when
// every result is right: INT_MIN wraps to INT_MIN, the remainder is 0.
template <class I>
int check_int_min_by_minus_one(DType dt) {
  const std::int64_t lo = std::numeric_limits<I>::min();
  const Tensor a = ints({lo, lo, lo, lo + 1, -1}, dt);
  const Tensor b = ints({-1, 1, lo, -1, lo}, dt);
  const std::vector<std::int64_t> q = {lo, lo, 1, -(lo + 1), 0};
  const std::vector<std::int64_t> r = {0, 0, 0, 0, -1};
  int bad = 0;
  for (const NamedPath& p : kPaths) {
    if (p.run(fdiv, a, b) != q) std::fprintf(stderr, "floor_div %s wrong\n", p.name), bad = 1;
    if (p.run(fmod_, a, b) != r) std::fprintf(stderr, "mod %s wrong\n", p.name), bad = 1;
  }
  return bad;
}

class IntegerDivisionDeath : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(IntegerDivisionDeath, Int32MinByMinusOneWrapsInsteadOfTrapping) {
  EXPECT_EXIT(std::exit(check_int_min_by_minus_one<std::int32_t>(DType::i32)),
              ::testing::ExitedWithCode(0), "");
}

TEST_F(IntegerDivisionDeath, Int64MinByMinusOneWrapsInsteadOfTrapping) {
  EXPECT_EXIT(std::exit(check_int_min_by_minus_one<std::int64_t>(DType::i64)),
              ::testing::ExitedWithCode(0), "");
}

TEST(IntegerDivision, FloatFloorDivAndModFollowIEEEAndNumPy) {
  // Floats are unchanged: a zero divisor gives inf / NaN, the remainder takes the divisor's sign.
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor a = cast(constant<double>({1.0, -7.0, 7.0, 0.0}), dt);
    const Tensor b = cast(constant<double>({0.0, 2.0, -2.0, 0.0}), dt);
    const std::vector<double> q = floor_div(a, b).to_vector<double>();
    const std::vector<double> r = mod(a, b).to_vector<double>();
    EXPECT_TRUE(std::isinf(q[0]) && q[0] > 0);
    EXPECT_EQ(q[1], -4.0);
    EXPECT_EQ(q[2], -4.0);
    EXPECT_TRUE(std::isnan(q[3]));
    EXPECT_TRUE(std::isnan(r[0]));
    EXPECT_EQ(r[1], 1.0);
    EXPECT_EQ(r[2], -1.0);
  }
}

TEST(IntegerDivision, IntegerDivideIsTrueDivision) {
  // divide() of integers is true division in f32 (no integer quotient, so nothing to trap).
  const Tensor q = divide(ints({std::numeric_limits<std::int32_t>::min(), 7, 1}, DType::i32),
                          ints({-1, 0, 0}, DType::i32));
  EXPECT_EQ(q.dtype(), DType::f32);
  const std::vector<double> v = q.to_vector<double>();
  EXPECT_EQ(v[0], 2147483648.0);
  EXPECT_TRUE(std::isinf(v[1]));
}

}  // namespace
}  // namespace soma
