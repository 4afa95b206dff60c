// The per-element math of the CUDA index ops and random ops, run on the CPU: the host/device
// functions of src/backend/cuda/index_math.hpp and philox.hpp over every output index, compared
// with the CPU kernels' results (and Philox with Random123's known answers, its transforms
// statistically). What only a GPU adds (the launches) is tested by test_cuda_index_ops.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>
#include <random>
#include <vector>

#include "../../src/backend/cuda/index_math.hpp"
#include "../../src/backend/cuda/philox.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::rand_tensor;
namespace ci = soma::cuda_index;
namespace px = soma::philox;

namespace {

std::vector<float> values(const Tensor& t) { return contiguous(t).to_vector<float>(); }

std::int64_t prod(const Shape& s, std::size_t b, std::size_t e) {
  std::int64_t n = 1;
  for (std::size_t i = b; i < e; ++i) n *= s[i];
  return n;
}

// Elements of `t` (any view) by their offset from its first element, as the kernels address it.
std::vector<float> storage_view(const Tensor& t, std::int64_t& first) {
  // The view's storage, read through a packed copy of its base would lose the layout: rebuild
  // the addressed buffer from the strides instead.
  std::int64_t lo = 0, hi = 0;
  for (std::size_t d = 0; d < std::size_t(t.rank()); ++d) {
    const std::int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  std::vector<float> buf(std::size_t(hi - lo + 1), NAN);
  const std::vector<float> v = values(t);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    auto idx = soma::testing::unravel(i, t.shape());
    std::int64_t off = -lo;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    buf[std::size_t(off)] = v[std::size_t(i)];
  }
  first = -lo;
  return buf;
}

}  // namespace

// ---- Philox4x32-10 ----------------------------------------------------------------------------
// Random123's known-answer vectors (kat_vectors: philox4x32_10).
TEST(Philox, MatchesRandom123KnownAnswers) {
  auto check = [](px::Block ctr, std::uint32_t k0, std::uint32_t k1, px::Block want) {
    const px::Block got = px::philox4x32_10(ctr, k0, k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], want[i]) << "word " << i;
  };
  check({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  check({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
        {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  check({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
        {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, CounterLayoutIsIndexAttemptStreamUnderTheSeedKey) {
  const std::uint64_t seed = 0x0123456789abcdefull, stream = 0x8000000000000005ull;
  const std::uint64_t index = 0x0000123456789abcull;
  const px::Block got = px::bits(seed, stream, index, 3);
  const px::Block want = px::philox4x32_10(
      {{0x56789abcu, 0x1234u | (3u << 16), 0x00000005u, 0x80000000u}}, 0x89abcdefu, 0x01234567u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], want[i]);
}

// The generator the CUDA kernels run is the CPU op's: element i of a draw is lane i % lanes of
// block i / lanes, whatever the launch configuration.
TEST(Philox, CpuUniformOpIsTheHeadersFunctionOfTheElementIndex) {
  const std::uint64_t seed = 77;
  const auto v = random_uniform({1001}, -1.0, 3.0, DType::f32, seed).to_vector<float>();
  for (std::int64_t i = 0; i < 1001; ++i) {
    const px::Block w = px::bits(seed, 0, std::uint64_t(i / 4));
    EXPECT_EQ(v[std::size_t(i)], float(px::uniform24(-1.0, 4.0, w[int(i % 4)]))) << i;
  }
  const auto d = random_uniform({11}, 0.0, 1.0, DType::f64, seed).to_vector<double>();
  for (std::int64_t i = 0; i < 11; ++i) {
    const px::Block w = px::bits(seed, 0, std::uint64_t(i / 2));
    const int k = int(i % 2);
    EXPECT_EQ(d[std::size_t(i)], px::uniform53(0.0, 1.0, w[2 * k], w[2 * k + 1])) << i;
  }
  const auto n = random_normal({9}, 0.0, 1.0, DType::f32, seed).to_vector<float>();
  for (std::int64_t i = 0; i < 9; ++i) {
    float z[4];
    px::normals_f(px::bits(seed, 0, std::uint64_t(i / 4)), z);
    EXPECT_EQ(n[std::size_t(i)], 0.0f + 1.0f * z[i % 4]) << i;
  }
}

namespace {
struct Moments {
  double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= double(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= double(v.size() - 1);
  return m;
}
double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
// Largest gap between the empirical CDF of v and `cdf` (Kolmogorov-Smirnov statistic).
template <class F>
double ks(std::vector<double> v, F cdf) {
  std::sort(v.begin(), v.end());
  double d = 0;
  const double n = double(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double c = cdf(v[i]);
    d = std::max({d, std::abs(double(i + 1) / n - c), std::abs(c - double(i) / n)});
  }
  return d;
}
constexpr int kBlocks = 50000;  // 200000 f32 values, 100000 f64 values
// KS critical value at alpha = 1e-4: 2.15 / sqrt(n) (asymptotic), loose enough to never flake.
double ks_limit(std::size_t n) { return 2.15 / std::sqrt(double(n)); }
}  // namespace

TEST(Philox, UnitIntervalsAreUniformAndHalfOpen) {
  std::vector<double> u, uo;
  for (int b = 0; b < kBlocks; ++b) {
    const px::Block w = px::bits(5, 9, std::uint64_t(b));
    for (int k = 0; k < 4; ++k) {
      const float a = px::unit_f(w[k]), o = px::unit_open_f(w[k]);
      ASSERT_TRUE(a >= 0.0f && a < 1.0f);
      ASSERT_TRUE(o > 0.0f && o <= 1.0f);
      u.push_back(a);
      uo.push_back(o);
    }
  }
  const Moments m = moments(u);
  const double se = std::sqrt(1.0 / 12.0 / double(u.size()));
  EXPECT_NEAR(m.mean, 0.5, 5 * se);
  EXPECT_NEAR(m.var, 1.0 / 12.0, 0.002);
  EXPECT_LT(ks(u, [](double x) { return x; }), ks_limit(u.size()));
  EXPECT_LT(ks(uo, [](double x) { return x; }), ks_limit(uo.size()));
  EXPECT_EQ(px::unit_f(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(px::unit_open_f(0u), 0x1p-24f);
  EXPECT_EQ(px::unit_d(~0ull), 1.0 - 0x1p-53);
}

TEST(Philox, BoxMullerGivesStandardNormals) {
  std::vector<double> f, d;
  for (int b = 0; b < kBlocks; ++b) {
    const px::Block w = px::bits(11, 0, std::uint64_t(b));
    float z[4];
    px::normals_f(w, z);
    f.insert(f.end(), z, z + 4);
    double zd[2];
    px::normals_d(w, zd);
    d.insert(d.end(), zd, zd + 2);
  }
  for (const auto* v : {&f, &d}) {
    const Moments m = moments(*v);
    EXPECT_NEAR(m.mean, 0.0, 5 / std::sqrt(double(v->size())));
    EXPECT_NEAR(m.var, 1.0, 0.02);
    EXPECT_LT(ks(*v, normal_cdf), ks_limit(v->size()));
  }
  // The two values of a Box-Muller pair are uncorrelated.
  double c = 0;
  for (std::size_t i = 0; i < d.size(); i += 2) c += d[i] * d[i + 1];
  EXPECT_NEAR(c / double(d.size() / 2), 0.0, 5 / std::sqrt(double(d.size() / 2)));
}

TEST(Philox, TruncationRedrawsOnlyValuesOutsideTwoStandardDeviations) {
  std::vector<double> f, d;
  int redrawn = 0;
  for (int b = 0; b < kBlocks; ++b) {
    const px::Block w = px::bits(3, 1, std::uint64_t(b));
    float z[4];
    px::normals_f(w, z);
    for (int k = 0; k < 4; ++k) {
      const float v = px::truncate_f(3, 1, std::uint64_t(b), k, z[k]);
      ASSERT_LT(std::abs(v), 2.0f);
      if (std::abs(z[k]) < 2.0f) ASSERT_EQ(v, z[k]);  // kept as drawn
      else ++redrawn;
      f.push_back(v);
    }
    double zd[2];
    px::normals_d(w, zd);
    for (int k = 0; k < 2; ++k) {
      const double v = px::truncate_d(3, 1, std::uint64_t(b), k, zd[k]);
      ASSERT_LT(std::abs(v), 2.0);
      d.push_back(v);
    }
  }
  // About 4.55% of standard normals lie outside [-2, 2].
  EXPECT_NEAR(double(redrawn) / double(f.size()), 0.0455, 0.003);
  // The normal truncated to [-2, 2]: variance 1 - 4 phi(2) / (Phi(2) - Phi(-2)) = 0.7737.
  const double z = normal_cdf(2) - normal_cdf(-2);
  const double phi2 = std::exp(-2.0) / std::sqrt(2 * std::numbers::pi);
  const double var = 1 - 4 * phi2 / z;
  auto cdf = [&](double x) { return (normal_cdf(x) - normal_cdf(-2)) / z; };
  for (const auto* v : {&f, &d}) {
    const Moments m = moments(*v);
    EXPECT_NEAR(m.mean, 0.0, 5 * std::sqrt(var / double(v->size())));
    EXPECT_NEAR(m.var, var, 0.02);
    EXPECT_LT(ks(*v, cdf), ks_limit(v->size()));
  }
}

TEST(Philox, UniformIntCoversTheRangeWithoutBias) {
  std::vector<int> counts(7, 0);
  for (int b = 0; b < kBlocks; ++b) {
    const px::Block w = px::bits(1, 2, std::uint64_t(b));
    const std::uint64_t v = px::uniform_int(std::uint64_t(-3), 7, w[0], w[1]);
    const std::int64_t s = std::int64_t(v);
    ASSERT_TRUE(s >= -3 && s < 4) << s;
    ++counts[std::size_t(s + 3)];
  }
  for (int c : counts) EXPECT_NEAR(c, kBlocks / 7.0, 5 * std::sqrt(kBlocks / 7.0));
  // Range 0 means all 64 bits: the raw word.
  const px::Block w = px::bits(0, 0, 0);
  EXPECT_EQ(px::uniform_int(0, 0, w[0], w[1]), 0x6627e8d5e169c58dull);
}

// ---- concat -----------------------------------------------------------------------------------
namespace {
// The CUDA concat over `ins` (packed) on `axis`, windows of at most `group` parts per launch.
std::vector<float> concat_by_geom(const std::vector<Tensor>& ins, int axis, int group) {
  const Shape& s0 = ins[0].shape();
  std::int64_t total = 0;
  for (const auto& t : ins) total += t.shape()[std::size_t(axis)];
  Shape os = s0;
  os[std::size_t(axis)] = total;
  std::vector<float> out(std::size_t(numel(os)), NAN);
  std::vector<std::vector<float>> src;
  for (const auto& t : ins) src.push_back(values(t));
  std::int64_t at = 0;
  for (std::size_t g = 0; g < ins.size(); g += std::size_t(group)) {
    const std::size_t end = std::min(ins.size(), g + std::size_t(group));
    ci::ConcatGeom geom;
    geom.outer = prod(os, 0, std::size_t(axis));
    geom.total = total;
    geom.inner = prod(os, std::size_t(axis) + 1, os.size());
    geom.parts = int(end - g);
    geom.axis_begin = at;
    for (std::size_t p = g; p < end; ++p) {
      geom.begin[p - g] = at;
      at += ins[p].shape()[std::size_t(axis)];
    }
    geom.axis_end = at;
    geom.begin[end - g] = at;
    for (std::int64_t i = 0; i < geom.count(); ++i) {
      const ci::ConcatSource s = ci::concat_source(geom, i);
      out[std::size_t(s.out)] = src[g + std::size_t(s.part)][std::size_t(s.src)];
    }
  }
  return out;
}
}  // namespace

TEST(CudaIndexMath, ConcatSourceOfEveryOutputElementMatchesTheCpuConcat) {
  struct Case {
    std::vector<Shape> shapes;
    int axis;
  };
  for (const Case& c : std::vector<Case>{{{{2, 3}, {2, 1}, {2, 2}}, 1},
                                         {{{1, 4}, {3, 4}}, 0},
                                         {{{2, 3, 4}, {2, 1, 4}, {2, 5, 4}, {2, 2, 4}}, 1},
                                         {{{2, 3, 1}, {2, 3, 2}}, 2}}) {
    std::vector<Tensor> ins;
    std::uint64_t seed = 1;
    for (const auto& s : c.shapes) ins.push_back(rand_tensor(s, seed++));
    const std::vector<float> want = values(concat(ins, c.axis));
    for (int group : {1, 2, ci::kMaxConcatParts})
      EXPECT_EQ(concat_by_geom(ins, c.axis, group), want) << "axis " << c.axis << " group " << group;
  }
}

// ---- pad --------------------------------------------------------------------------------------
TEST(CudaIndexMath, PadSourceOfEveryOutputElementMatchesTheCpuPad) {
  // A transposed (strided) input, as the CUDA kernel reads it.
  const Tensor base = rand_tensor({4, 3, 2}, 9);
  for (const Tensor& x : {base, transpose(base, {2, 0, 1}), base.slice(1, 1, 3)}) {
    const std::vector<std::pair<std::int64_t, std::int64_t>> p = {{1, 0}, {2, 1}, {0, 3}};
    const Tensor want = pad(x, p, 0.25);
    ci::PadGeom g;
    g.rank = int(x.rank());
    g.numel = want.numel();
    for (std::size_t d = 0; d < 3; ++d) {
      g.out_shape[d] = want.shape()[d];
      g.in_shape[d] = x.shape()[d];
      g.in_stride[d] = x.strides()[d];
      g.before[d] = p[d].first;
    }
    std::int64_t first = 0;
    const std::vector<float> buf = storage_view(x, first);
    std::vector<float> got(std::size_t(g.numel));
    for (std::int64_t i = 0; i < g.numel; ++i) {
      std::int64_t src = 0;
      got[std::size_t(i)] = ci::pad_source(g, i, &src) ? buf[std::size_t(first + src)] : 0.25f;
    }
    EXPECT_EQ(got, values(want)) << shape_str(x.shape());
  }
}

// ---- gather / gather_grad ---------------------------------------------------------------------
TEST(CudaIndexMath, NormalizeIndexCountsNegativesFromTheEndAndRejectsTheRest) {
  EXPECT_EQ(ci::normalize_index(0, 4), 0);
  EXPECT_EQ(ci::normalize_index(3, 4), 3);
  EXPECT_EQ(ci::normalize_index(-1, 4), 3);
  EXPECT_EQ(ci::normalize_index(-4, 4), 0);
  EXPECT_EQ(ci::normalize_index(4, 4), -1);
  EXPECT_EQ(ci::normalize_index(-5, 4), -1);
  EXPECT_EQ(ci::normalize_index(0, 0), -1);
}

TEST(CudaIndexMath, GatherSourceOfEveryOutputElementMatchesTheCpuGather) {
  const Tensor t = rand_tensor({3, 5, 2}, 4);
  const std::vector<std::int64_t> ids = {4, -1, 0, 2, 2, -5};
  for (int ax : {0, 1, 2}) {
    const std::int64_t n = t.shape()[std::size_t(ax)];
    std::vector<std::int64_t> in_range;
    for (auto j : ids) in_range.push_back(((j % n) + n) % n - (j < 0 ? n : 0));
    const Tensor idx_ax = constant(in_range, {2, 3});
    const Tensor want = gather(t, idx_ax, ax);
    ci::GatherGeom g{prod(t.shape(), 0, std::size_t(ax)), n, 6,
                     prod(t.shape(), std::size_t(ax) + 1, 3)};
    ASSERT_EQ(g.count(), want.numel());
    const std::vector<float> src = values(t);
    std::vector<float> got(std::size_t(g.count()));
    for (std::int64_t i = 0; i < g.count(); ++i) {
      const std::int64_t id = ci::normalize_index(in_range[std::size_t(ci::gather_which(g, i))], n);
      ASSERT_GE(id, 0);
      got[std::size_t(i)] = src[std::size_t(ci::gather_source(g, i, id))];
    }
    EXPECT_EQ(got, values(want)) << "axis " << ax;
  }
}

namespace {
// The CUDA gather_grad's algorithm on the host: a stable sort of the normalised indices with
// their positions, then one sum per (o, run, i) in the original order.
std::vector<float> gather_grad_by_runs(const std::vector<float>& grad,
                                       const std::vector<std::int64_t>& ids,
                                       const ci::GatherGeom& g) {
  std::vector<std::pair<std::uint64_t, std::int64_t>> kv;
  for (std::size_t j = 0; j < ids.size(); ++j)
    kv.push_back({std::uint64_t(ci::normalize_index(ids[j], g.n)), std::int64_t(j)});
  std::stable_sort(kv.begin(), kv.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::uint64_t> keys;
  std::vector<std::int64_t> pos;
  for (auto& [k, p] : kv) {
    keys.push_back(k);
    pos.push_back(p);
  }
  std::vector<float> out(std::size_t(g.outer * g.n * g.inner), 0.0f);
  std::vector<int> writes(out.size(), 0);
  for (std::int64_t e = 0; e < g.count(); ++e) {
    const std::int64_t slot = (e / g.inner) % g.k;
    if (!ci::gather_grad_run_start(keys.data(), slot)) continue;
    float acc = 0.0f;
    for (std::int64_t s = slot; s < g.k && keys[std::size_t(s)] == keys[std::size_t(slot)]; ++s)
      acc = acc + grad[std::size_t(ci::gather_grad_src(g, e, pos[std::size_t(s)]))];
    const std::size_t dst = std::size_t(ci::gather_grad_dest(g, e, keys[std::size_t(slot)]));
    out[dst] = acc;
    ++writes[dst];
  }
  for (int w : writes) EXPECT_LE(w, 1) << "two runs wrote one element (a race on the GPU)";
  return out;
}
}  // namespace

TEST(CudaIndexMath, GatherGradByRunsMatchesTheCpuScatterAddBitForBit) {
  // Many repeats in a scrambled order: the sums must follow the positions' order like the CPU's.
  std::mt19937 rng(3);
  for (int ax : {0, 1}) {
    const Shape table = ax == 0 ? Shape{7, 3} : Shape{2, 7, 3};
    std::vector<std::int64_t> ids(40);
    for (auto& j : ids) j = std::int64_t(rng() % 14) - 7;  // -7 .. 6: negatives too
    const Tensor idx = constant(ids, {40});
    Shape gs = table;
    gs[std::size_t(ax)] = 40;
    // f32 with a large spread: the order of the additions shows in the last bits.
    const Tensor grad = rand_tensor(gs, 5, -1000.0, 1000.0, DType::f32);
    const OpDef& d = get_op("gather_grad");
    const Tensor want = call_op1(d, {grad, idx},
                                 {{"axis", std::int64_t(ax)},
                                  {"input_shape", std::vector<std::int64_t>(table.begin(), table.end())}});
    ci::GatherGeom g{prod(table, 0, std::size_t(ax)), table[std::size_t(ax)], 40,
                     prod(table, std::size_t(ax) + 1, table.size())};
    // The CPU kernel's order, spelled out: every position j in turn adds into its row.
    const std::vector<float> gv = values(grad);
    std::vector<float> seq(std::size_t(g.outer * g.n * g.inner), 0.0f);
    for (std::int64_t o = 0; o < g.outer; ++o)
      for (std::int64_t j = 0; j < g.k; ++j)
        for (std::int64_t i = 0; i < g.inner; ++i)
          seq[std::size_t((o * g.n + ci::normalize_index(ids[std::size_t(j)], g.n)) * g.inner + i)] +=
              gv[std::size_t((o * g.k + j) * g.inner + i)];
    EXPECT_EQ(seq, values(want)) << "axis " << ax;
    EXPECT_EQ(gather_grad_by_runs(gv, ids, g), seq) << "axis " << ax;
  }
}

// ---- one_hot ----------------------------------------------------------------------------------
TEST(CudaIndexMath, OneHotOfEveryOutputElementMatchesTheCpuOneHot) {
  const std::vector<std::int64_t> ids = {0, 3, -1, 4, 2, 2};
  const Tensor want = one_hot(constant(ids, {2, 3}), 4, DType::f32, 2.5, -0.5);
  std::vector<float> got(ids.size() * 4);
  for (std::int64_t i = 0; i < std::int64_t(got.size()); ++i)
    got[std::size_t(i)] =
        ci::one_hot_on(i, 4, ids[std::size_t(ci::one_hot_row(i, 4))]) ? 2.5f : -0.5f;
  EXPECT_EQ(got, values(want));
}

// ---- argmax / argmin --------------------------------------------------------------------------
namespace {
// Combines per-chunk winners in a scrambled tree, as the GPU's threads and shared-memory tree do.
template <bool Max>
std::int64_t arg_by_tree(const std::vector<float>& v, std::mt19937& rng) {
  struct Best {
    float v;
    std::int64_t i;
  };
  std::vector<Best> parts;
  const std::size_t chunk = 1 + rng() % 4;
  for (std::size_t s = 0; s < v.size(); s += chunk) {
    // A thread's strided share would do as well; chunks keep the test short.
    Best b{v[s], std::int64_t(s)};
    for (std::size_t i = s + 1; i < std::min(v.size(), s + chunk); ++i)
      if (ci::arg_better<Max>(v[i], std::int64_t(i), b.v, b.i)) b = {v[i], std::int64_t(i)};
    parts.push_back(b);
  }
  std::shuffle(parts.begin(), parts.end(), rng);
  while (parts.size() > 1) {
    std::vector<Best> next;
    for (std::size_t i = 0; i + 1 < parts.size(); i += 2)
      next.push_back(ci::arg_better<Max>(parts[i + 1].v, parts[i + 1].i, parts[i].v, parts[i].i)
                         ? parts[i + 1]
                         : parts[i]);
    if (parts.size() % 2) next.push_back(parts.back());
    parts = next;
  }
  return parts[0].i;
}
}  // namespace

TEST(CudaIndexMath, ArgBetterGivesTheCpuAnswerInAnyCombiningOrder) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> v(1 + rng() % 12);
    for (auto& x : v) {
      const unsigned r = rng() % 10;
      x = r < 2 ? NAN : float(int(rng() % 4) - 2);  // ties, and NaNs in some rows
    }
    const Tensor t = constant(v, {std::int64_t(v.size())});
    const std::int64_t want_max = argmax(t, 0).to_vector<std::int64_t>()[0];
    const std::int64_t want_min = argmin(t, 0).to_vector<std::int64_t>()[0];
    EXPECT_EQ(arg_by_tree<true>(v, rng), want_max) << "trial " << trial;
    EXPECT_EQ(arg_by_tree<false>(v, rng), want_min) << "trial " << trial;
  }
}
