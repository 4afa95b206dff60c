// Random tensors: reproducibility (seeds, global sequence, thread count), distributions, bounds,
// shuffling and argument errors.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "error_testing.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

struct Moments {
  double mean = 0, sd = 0;
};
Moments moments(const std::vector<double>& v) {
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  double m = s / double(v.size());
  for (double x : v) s2 += (x - m) * (x - m);
  return {m, std::sqrt(s2 / double(v.size()))};
}

using soma::testing::error_of;

// Restores the thread count a test changed.
struct ThreadGuard {
  int saved = get_num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

const std::vector<DType> kFloatTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

// ---- the generator itself ---------------------------------------------------------------------

TEST(Random, PhiloxMatchesPublishedKnownAnswer) {
  // Integers over the whole i64 range are the raw 64-bit words offset by -2^63, so element 0 and
  // 1 of seed 0 are Philox4x32-10(counter 0, key 0) = 6627e8d5 e169c58d bc57ac4c 9b00dbd8
  // (Random123's known-answer vector).
  Tensor t = random_uniform({2}, -9223372036854775808.0, 9223372036854775808.0, DType::i64, 0);
  auto v = t.to_vector<std::int64_t>();
  EXPECT_EQ(std::uint64_t(v[0]) ^ (std::uint64_t(1) << 63), 0x6627e8d5e169c58dull);
  EXPECT_EQ(std::uint64_t(v[1]) ^ (std::uint64_t(1) << 63), 0xbc57ac4c9b00dbd8ull);
}

// f32 uniforms make their Philox blocks 16 at a time (vectorised); the i64 draw makes them one
// at a time (philox::bits). Same seed, same blocks: element 4b + k of [0, 1) is word k of block
// b, shifted to 24 bits; the i64 elements 2b and 2b + 1 are words (0, 1) and (2, 3) of it. Over
// 4 tiles of 1024 blocks and a last partial group.
TEST(Random, VectorisedBlocksMatchTheScalarGenerator) {
  const std::int64_t blocks = 4 * 1024 + 5;
  Tensor f = random_uniform({4 * blocks - 3}, 0.0, 1.0, DType::f32, 77);
  Tensor w = random_uniform({2 * blocks}, -9223372036854775808.0, 9223372036854775808.0,
                            DType::i64, 77);
  auto fv = f.to_vector<float>();
  auto wv = w.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < fv.size(); ++i) {
    const std::uint64_t pair = std::uint64_t(wv[i / 2]) ^ (std::uint64_t(1) << 63);
    const std::uint32_t word = i % 2 == 0 ? std::uint32_t(pair >> 32) : std::uint32_t(pair);
    ASSERT_EQ(fv[i], float(word >> 8) * 0x1p-24f) << i;
  }
}

// ---- seeds and reproducibility ---------------------------------------------------------------

TEST(Random, SamePerCallSeedGivesSameValues) {
  for (DType dt : kFloatTypes) {
    EXPECT_EQ(values(random_normal({7, 5}, 0, 1, dt, 123)),
              values(random_normal({7, 5}, 0, 1, dt, 123)))
        << dt;
    EXPECT_EQ(values(random_uniform({7, 5}, -2, 3, dt, 9)),
              values(random_uniform({7, 5}, -2, 3, dt, 9)))
        << dt;
    EXPECT_EQ(values(truncated_normal({7, 5}, 1, 2, dt, 4)),
              values(truncated_normal({7, 5}, 1, 2, dt, 4)))
        << dt;
  }
  EXPECT_EQ(values(random_uniform({100}, -5, 5, DType::i32, 1)),
            values(random_uniform({100}, -5, 5, DType::i32, 1)));
}

TEST(Random, DifferentSeedsGiveDifferentValues) {
  for (DType dt : kFloatTypes) {
    EXPECT_NE(values(random_normal({64}, 0, 1, dt, 1)), values(random_normal({64}, 0, 1, dt, 2)))
        << dt;
    EXPECT_NE(values(random_uniform({64}, 0, 1, dt, 1)), values(random_uniform({64}, 0, 1, dt, 2)))
        << dt;
  }
  EXPECT_NE(values(random_uniform({64}, 0, 1000, DType::i64, 1)),
            values(random_uniform({64}, 0, 1000, DType::i64, 2)));
}

TEST(Random, CallsWithoutSeedDrawFreshValues) {
  EXPECT_NE(values(random_normal({32})), values(random_normal({32})));
  EXPECT_NE(values(random_uniform({32})), values(random_uniform({32})));
}

TEST(Random, GlobalSequenceRepeatsAfterSetSeed) {
  set_seed(42);
  auto a = values(random_normal({50}));
  auto b = values(random_uniform({50}));
  auto c = values(random_shuffle(arange(20.0)));
  set_seed(42);
  EXPECT_EQ(values(random_normal({50})), a);
  EXPECT_EQ(values(random_uniform({50})), b);
  EXPECT_EQ(values(random_shuffle(arange(20.0))), c);
  set_seed(43);
  EXPECT_NE(values(random_normal({50})), a);
}

TEST(Random, PerCallSeedDoesNotAdvanceGlobalSequence) {
  set_seed(7);
  auto first = values(random_normal({16}));
  set_seed(7);
  random_normal({16}, 0, 1, DType::f32, 99);
  random_uniform({16}, 0, 1, DType::f32, 99);
  EXPECT_EQ(values(random_normal({16})), first);
}

TEST(Random, PerCallSeedIsIndependentOfGlobalSeed) {
  set_seed(1);
  auto a = values(random_normal({16}, 0, 1, DType::f32, 5));
  set_seed(2);
  random_normal({16});
  EXPECT_EQ(values(random_normal({16}, 0, 1, DType::f32, 5)), a);
}

TEST(Random, PerCallSeedStreamDiffersFromGlobalStreamWithSameSeed) {
  set_seed(5);
  EXPECT_NE(values(random_normal({16})), values(random_normal({16}, 0, 1, DType::f32, 5)));
}

TEST(Random, ValuesDoNotDependOnThreadCount) {
  ThreadGuard guard;
  const Shape big = {(1 << 20) + 3};  // well above the parallel grain, not a multiple of a block
  auto draw = [&] {
    std::vector<std::vector<double>> out;
    for (DType dt : kFloatTypes) {
      out.push_back(values(random_normal(big, 0.5, 2, dt, 11)));
      out.push_back(values(random_uniform(big, -1, 4, dt, 12)));
      out.push_back(values(truncated_normal(big, 0, 1, dt, 13)));
    }
    out.push_back(values(random_uniform(big, -100, 100, DType::i32, 14)));
    out.push_back(values(random_uniform(big, -100, 100, DType::i64, 15)));
    out.push_back(values(random_shuffle(arange(double(1 << 17), DType::f64), 16)));
    set_seed(3);
    out.push_back(values(random_normal(big)));
    return out;
  };
  set_num_threads(1);
  auto one = draw();
  set_num_threads(2);
  auto two = draw();
  set_num_threads(4);
  auto four = draw();
  ASSERT_EQ(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(one[i] == two[i]) << "draw " << i << " differs between 1 and 2 threads";
    EXPECT_TRUE(one[i] == four[i]) << "draw " << i << " differs between 1 and 4 threads";
  }
}

TEST(Random, PrefixOfALargerDrawIsTheSmallerDraw) {
  // Element i depends only on (seed, stream, i), not on the tensor's size.
  auto small = values(random_normal({10}, 0, 1, DType::f32, 8));
  auto large = values(random_normal({1000}, 0, 1, DType::f32, 8));
  EXPECT_EQ(small, std::vector<double>(large.begin(), large.begin() + 10));
}

// ---- shapes and dtypes -----------------------------------------------------------------------

TEST(Random, OutputHasRequestedShapeAndDtype) {
  for (DType dt : kFloatTypes) {
    Tensor n = random_normal({2, 3, 4}, 0, 1, dt);
    EXPECT_EQ(n.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(n.dtype(), dt);
    EXPECT_EQ(truncated_normal({5}, 0, 1, dt).dtype(), dt);
    EXPECT_EQ(random_uniform({5}, 0, 1, dt).dtype(), dt);
  }
  EXPECT_EQ(random_uniform({5}, 0, 9, DType::i32).dtype(), DType::i32);
  EXPECT_EQ(random_uniform({5}, 0, 9, DType::i64).dtype(), DType::i64);
}

TEST(Random, EmptyAndScalarShapes) {
  EXPECT_EQ(random_normal({0, 3}).numel(), 0);
  EXPECT_EQ(random_uniform({3, 0}).shape(), (Shape{3, 0}));
  Tensor s = random_normal({}, 5, 0);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.item<double>(), 5.0);
}

TEST(Random, SixteenBitFloatsAreRoundedF32Draws) {
  // f16/bf16 are computed in f32 and rounded, so they match a cast of the f32 draw.
  Tensor f32 = random_normal({1000}, 1, 3, DType::f32, 21);
  EXPECT_EQ(values(random_normal({1000}, 1, 3, DType::f16, 21)), values(cast(f32, DType::f16)));
  EXPECT_EQ(values(random_normal({1000}, 1, 3, DType::bf16, 21)), values(cast(f32, DType::bf16)));
}

// ---- distributions ---------------------------------------------------------------------------

TEST(Random, NormalHasRequestedMeanAndStddev) {
  for (DType dt : {DType::f32, DType::f64}) {
    auto v = values(random_normal({1000000}, 2.0, 3.0, dt, 31));
    Moments m = moments(v);
    // Standard error of the mean is 3e-3; of the stddev about 2e-3.
    EXPECT_NEAR(m.mean, 2.0, 0.015) << dt;
    EXPECT_NEAR(m.sd, 3.0, 0.012) << dt;
  }
}

TEST(Random, NormalHasGaussianShape) {
  auto v = values(random_normal({1000000}, 0, 1, DType::f32, 32));
  double within1 = 0, within2 = 0, kurt = 0;
  for (double x : v) {
    within1 += std::abs(x) < 1;
    within2 += std::abs(x) < 2;
    kurt += x * x * x * x;
  }
  double n = double(v.size());
  EXPECT_NEAR(within1 / n, 0.682689, 0.003);
  EXPECT_NEAR(within2 / n, 0.954500, 0.002);
  EXPECT_NEAR(kurt / n, 3.0, 0.05);
}

TEST(Random, NormalSamplesAreUncorrelated) {
  // Neighbours share a Philox block (and a Box-Muller pair): they must still be independent.
  for (DType dt : {DType::f32, DType::f64}) {
    auto v = values(random_normal({1000000}, 0, 1, dt, 33));
    for (std::size_t lag : {1, 2, 3, 4}) {
      double c = 0;
      for (std::size_t i = lag; i < v.size(); ++i) c += v[i] * v[i - lag];
      EXPECT_NEAR(c / double(v.size()), 0.0, 0.006) << dt << " lag " << lag;
    }
  }
}

TEST(Random, ZeroStddevGivesTheMean) {
  for (double x : values(random_normal({100}, -1.5, 0.0))) EXPECT_EQ(x, -1.5);
}

TEST(Random, UniformStaysInHalfOpenRange) {
  for (DType dt : kFloatTypes) {
    auto v = values(random_uniform({200000}, -2.0, 3.0, dt, 41));
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    EXPECT_GE(*lo, -2.0) << dt;
    EXPECT_LT(*hi, 3.0) << dt;
    EXPECT_LT(*lo, -1.9) << dt;  // the range is actually covered
    EXPECT_GT(*hi, 2.9) << dt;
  }
}

TEST(Random, UniformNeverRoundsUpToMaxvalInLowPrecision) {
  // bf16 has 8 significant bits: many f32 draws just under 1 round to 1.0 and must be kept out.
  auto v = values(random_uniform({100000}, 0.0, 1.0, DType::bf16, 42));
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), double(BFloat16(0.99609375f)));
}

TEST(Random, UniformHasFlatMoments) {
  for (DType dt : {DType::f32, DType::f64}) {
    Moments m = moments(values(random_uniform({1000000}, 1.0, 5.0, dt, 43)));
    EXPECT_NEAR(m.mean, 3.0, 0.006) << dt;
    EXPECT_NEAR(m.sd, 4.0 / std::sqrt(12.0), 0.003) << dt;
  }
}

TEST(Random, UniformIntegersCoverHalfOpenRangeEvenly) {
  for (DType dt : {DType::i32, DType::i64}) {
    auto v = random_uniform({70000}, -3, 4, dt, 44).to_vector<std::int64_t>();
    std::map<std::int64_t, int> counts;
    for (auto x : v) ++counts[x];
    ASSERT_EQ(counts.size(), 7u) << dt;
    EXPECT_EQ(counts.begin()->first, -3);
    EXPECT_EQ(counts.rbegin()->first, 3);
    for (auto [k, c] : counts) EXPECT_NEAR(c, 10000, 500) << dt << " value " << k;
  }
}

TEST(Random, UniformIntegersReachI32Limits) {
  auto v =
      random_uniform({1000}, -2147483648.0, 2147483648.0, DType::i32, 45).to_vector<std::int64_t>();
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_LT(*lo, -2000000000);
  EXPECT_GT(*hi, 2000000000);
}

TEST(Random, TruncatedNormalStaysWithinTwoStddev) {
  for (DType dt : kFloatTypes) {
    auto v = values(truncated_normal({200000}, 1.0, 0.5, dt, 51));
    for (double x : v) ASSERT_LE(std::abs(x - 1.0), 1.0 * (1 + 1e-2)) << dt;
  }
  auto v = values(truncated_normal({200000}, 1.0, 0.5, DType::f64, 52));
  for (double x : v) ASSERT_LE(std::abs(x - 1.0), 1.0);
}

TEST(Random, TruncatedNormalHasTruncatedMoments) {
  // A standard normal cut at +-2 has variance 1 - 4 phi(2) / (2 Phi(2) - 1) = 0.773741.
  for (DType dt : {DType::f32, DType::f64}) {
    Moments m = moments(values(truncated_normal({1000000}, -1.0, 2.0, dt, 53)));
    EXPECT_NEAR(m.mean, -1.0, 0.01) << dt;
    EXPECT_NEAR(m.sd, 2.0 * std::sqrt(0.773741), 0.01) << dt;
  }
}

TEST(Random, TruncatedNormalKeepsInRangeDrawsOfTheNormal) {
  // Accepted values are the normal draw itself; only the rejected ones are redrawn.
  auto n = values(random_normal({10000}, 0, 1, DType::f32, 54));
  auto t = values(truncated_normal({10000}, 0, 1, DType::f32, 54));
  int redrawn = 0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    if (std::abs(n[i]) < 2)
      EXPECT_EQ(t[i], n[i]) << i;
    else
      ++redrawn;
  }
  EXPECT_GT(redrawn, 300);  // about 4.55% of 10000
  EXPECT_LT(redrawn, 620);
}

// ---- shuffle ---------------------------------------------------------------------------------

std::vector<std::vector<double>> rows_of(const Tensor& t) {
  auto v = values(t);
  std::int64_t n = t.shape()[0], w = n ? t.numel() / n : 0;
  std::vector<std::vector<double>> rows;
  for (std::int64_t i = 0; i < n; ++i)
    rows.emplace_back(v.begin() + i * w, v.begin() + (i + 1) * w);
  return rows;
}

TEST(Random, ShuffleIsAPermutationOfRows) {
  Tensor t = testing::rand_tensor({100, 3}, 1);
  Tensor s = random_shuffle(t, 61);
  EXPECT_EQ(s.shape(), t.shape());
  EXPECT_EQ(s.dtype(), t.dtype());
  auto a = rows_of(t), b = rows_of(s);
  EXPECT_NE(a, b);  // 100! orders: the identity is (practically) impossible
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
}

TEST(Random, ShuffleIsReproducibleWithSeed) {
  Tensor t = arange(50.0, DType::i32);
  EXPECT_EQ(values(random_shuffle(t, 62)), values(random_shuffle(t, 62)));
  EXPECT_NE(values(random_shuffle(t, 62)), values(random_shuffle(t, 63)));
}

TEST(Random, ShuffleOrdersAreUniform) {
  // Each of the 3! orders of three rows should come up 1/6 of the time.
  set_seed(64);
  Tensor t = constant({0, 1, 2});
  std::map<std::vector<double>, int> counts;
  for (int i = 0; i < 6000; ++i) ++counts[values(random_shuffle(t))];
  ASSERT_EQ(counts.size(), 6u);
  for (auto& [order, c] : counts) EXPECT_NEAR(c, 1000, 150);
}

TEST(Random, ShuffleReadsNonContiguousInput) {
  Tensor base = testing::rand_tensor({4, 6}, 2);
  Tensor view = base.transpose();  // [6, 4], non-contiguous
  Tensor s = random_shuffle(view, 65);
  auto a = rows_of(contiguous(view)), b = rows_of(s);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(values(s), values(random_shuffle(contiguous(view), 65)));
}

TEST(Random, ShuffleOfEmptyAndSingleRow) {
  EXPECT_EQ(random_shuffle(zeros({0, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(values(random_shuffle(constant({{1.0, 2.0}}))), (std::vector<double>{1, 2}));
}

// ---- errors ----------------------------------------------------------------------------------

TEST(Random, NegativeStddevIsAnError) {
  std::string msg = error_of([] { random_normal({3}, 0, -1); });
  EXPECT_NE(msg.find("random_normal"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stddev"), std::string::npos) << msg;
  msg = error_of([] { truncated_normal({3}, 0, -0.5); });
  EXPECT_NE(msg.find("truncated_normal"), std::string::npos) << msg;
}

TEST(Random, NormalOfIntegerDtypeIsAnError) {
  std::string msg = error_of([] { random_normal({3}, 0, 1, DType::i32); });
  EXPECT_NE(msg.find("random_normal"), std::string::npos) << msg;
  EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
  msg = error_of([] { truncated_normal({3}, 0, 1, DType::boolean); });
  EXPECT_NE(msg.find("truncated_normal"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bool"), std::string::npos) << msg;
}

TEST(Random, UniformWithEmptyRangeIsAnError) {
  std::string msg = error_of([] { random_uniform({3}, 2.0, 2.0); });
  EXPECT_NE(msg.find("random_uniform"), std::string::npos) << msg;
  EXPECT_NE(msg.find("minval"), std::string::npos) << msg;
  EXPECT_THROW(random_uniform({3}, 3.0, 1.0), Error);
  EXPECT_THROW(random_uniform({3}, 0.0, INFINITY), Error);
}

TEST(Random, UniformIntegerBoundsMustBeIntegersThatFit) {
  std::string msg = error_of([] { random_uniform({3}, 0.5, 4, DType::i32); });
  EXPECT_NE(msg.find("random_uniform"), std::string::npos) << msg;
  EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
  EXPECT_THROW(random_uniform({3}, 0, 4294967296.0, DType::i32), Error);
}

TEST(Random, UniformOfUnsupportedDtypeIsAnError) {
  std::string msg = error_of([] { random_uniform({3}, 0, 1, DType::u8); });
  EXPECT_NE(msg.find("random_uniform"), std::string::npos) << msg;
  EXPECT_NE(msg.find("u8"), std::string::npos) << msg;
}

TEST(Random, NegativeShapeIsAnError) {
  std::string msg = error_of([] { random_normal({2, -1}); });
  EXPECT_NE(msg.find("random_normal"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, -1]"), std::string::npos) << msg;
}

TEST(Random, ShuffleOfScalarIsAnError) {
  std::string msg = error_of([] { random_shuffle(scalar(1.0)); });
  EXPECT_NE(msg.find("random_shuffle"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace soma

// The *_like forms are the same registered ops with the shape taken from a tensor: eagerly they
// draw exactly what the fixed-shape forms draw.
TEST(Random, LikeFormsDrawWhatTheShapeFormsDraw) {
  soma::Tensor like = soma::zeros({3, 7}, soma::DType::f64);
  soma::set_seed(17);
  soma::Tensor a = soma::random_uniform({3, 7}, -1.0, 2.0, soma::DType::f64);
  soma::Tensor b = soma::random_normal({3, 7}, 0.5, 2.0, soma::DType::f64);
  soma::Tensor c = soma::truncated_normal({3, 7}, 0.0, 1.0, soma::DType::f64, 5);
  soma::set_seed(17);
  EXPECT_EQ(soma::random_uniform_like(like, -1.0, 2.0).to_vector<double>(), a.to_vector<double>());
  EXPECT_EQ(soma::random_normal_like(like, 0.5, 2.0).to_vector<double>(), b.to_vector<double>());
  EXPECT_EQ(soma::truncated_normal_like(like, 0.0, 1.0, 5).to_vector<double>(),
            c.to_vector<double>());
  EXPECT_EQ(soma::get_rng_state().calls, 2u);  // the seeded draw left the counter alone
}

TEST(Random, RandomOpsAreRegisteredWithoutGradient) {
  for (const char* name : {"random_uniform", "random_normal", "truncated_normal"})
    EXPECT_EQ(soma::get_op(name).grad, nullptr) << name;
}
