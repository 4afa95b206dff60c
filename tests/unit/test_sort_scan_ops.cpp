// The scan, sort and element-index ops (src/ops/sort_scan.cpp): what the registry suite's one
// sample per op does not reach. The index math the CPU and CUDA kernels share
// (src/backend/cuda/sort_scan_index.hpp) over whole index spaces; every attribute combination of
// cumsum/cumprod; cumprod's gradient with zeros; NaN, inf and ties in sort/topk; scatter's
// reductions and their gradients; NumPy broadcasting in take_along_axis; and the refusals (bad
// axis, k out of range, bad indices) as soma::Errors naming the op, the shapes and what was
// expected. The CUDA cases skip without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "../../src/backend/cuda/sort_scan_index.hpp"
#include "error_testing.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::error_of;
using soma::testing::rand_tensor;
namespace ss = soma::sort_scan;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<double> vals(const Tensor& t) { return contiguous(t).to_vector<double>(); }
std::vector<std::int64_t> ints(const Tensor& t) { return contiguous(t).to_vector<std::int64_t>(); }

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- the shared index math ----
TEST(SortScanIndex, KeysOrderValuesNanLastAndZerosEqual) {
  const std::vector<double> v = {-kInf, -1e300, -1.5, -1e-310, 0.0, 1e-310, 2.0, 1e300, kInf, kNan};
  for (std::size_t i = 0; i + 1 < v.size(); ++i) {
    EXPECT_LT(ss::float_key(v[i], false), ss::float_key(v[i + 1], false)) << v[i];
    EXPECT_GT(ss::float_key(v[i], true), ss::float_key(v[i + 1], true)) << v[i];
  }
  EXPECT_EQ(ss::float_key(-0.0, false), ss::float_key(0.0, false));
  EXPECT_EQ(ss::float_key(-kNan, false), ss::float_key(kNan, false));
  const std::vector<std::int64_t> w = {std::numeric_limits<std::int64_t>::min(), -5, 0, 7,
                                       std::numeric_limits<std::int64_t>::max()};
  for (std::size_t i = 0; i + 1 < w.size(); ++i) {
    EXPECT_LT(ss::int_key(w[i], false), ss::int_key(w[i + 1], false));
    EXPECT_GT(ss::int_key(w[i], true), ss::int_key(w[i + 1], true));
  }
}

TEST(SortScanIndex, MoveSourceIsRollAndFlip) {
  const Shape s{3, 4, 5};
  ss::MoveGeom g;
  g.rank = 3;
  g.numel = 60;
  const Strides st = contiguous_strides(s);
  for (int d = 0; d < 3; ++d) {
    g.shape[d] = s[std::size_t(d)];
    g.in_stride[d] = st[std::size_t(d)];
  }
  g.shift[1] = 3;  // roll by 3 (= -1) along axis 1
  g.flip[2] = true;
  for (std::int64_t i = 0; i < 60; ++i) {
    auto c = soma::testing::unravel(i, s);
    // out[c] = flip(x)[c with axis 1 moved back by 3] = x[c0, (c1 - 3) mod 4, 4 - c2]
    std::vector<std::int64_t> src = {c[0], (c[1] + 1) % 4, 4 - c[2]};
    EXPECT_EQ(ss::move_source(g, i), soma::testing::ravel(src, s)) << i;
  }
}

TEST(SortScanIndex, ElementOffsetReplacesTheAxisCoordinate) {
  ss::ElementGeom g;
  g.rank = 3;
  g.axis = 1;
  g.ids_shape[0] = 2;
  g.ids_shape[1] = 3;
  g.ids_shape[2] = 2;
  g.count = 12;
  g.n = 5;
  const Strides st = contiguous_strides({2, 5, 4});  // the data: [2, 5, 4]
  for (int d = 0; d < 3; ++d) g.data_stride[d] = st[std::size_t(d)];
  for (std::int64_t i = 0; i < 12; ++i) {
    auto c = soma::testing::unravel(i, {2, 3, 2});
    for (std::int64_t id = 0; id < 5; ++id)
      EXPECT_EQ(ss::element_offset(g, i, id), soma::testing::ravel({c[0], id, c[2]}, {2, 5, 4}));
  }
  EXPECT_EQ(ss::normalize_element_index(-5, 5), 0);
  EXPECT_EQ(ss::normalize_element_index(4, 5), 4);
  EXPECT_EQ(ss::normalize_element_index(5, 5), -1);
  EXPECT_EQ(ss::normalize_element_index(-6, 5), -1);
}

TEST(SortScanIndex, TriKeep) {
  for (std::int64_t k = -3; k <= 3; ++k)
    for (std::int64_t i = 0; i < 2 * 3 * 4; ++i) {
      const std::int64_t r = (i / 4) % 3, c = i % 4;
      EXPECT_EQ(ss::tri_keep(i, 3, 4, k, true), c - r >= k);
      EXPECT_EQ(ss::tri_keep(i, 3, 4, k, false), c - r <= k);
    }
}

// ---- cumsum / cumprod ----
// Naive scan along `axis` of a [a, b] f64 tensor.
std::vector<double> naive_scan(const std::vector<double>& x, std::int64_t a, std::int64_t b,
                               int axis, bool prod, bool excl, bool rev) {
  std::vector<double> y(x.size());
  for (std::int64_t i = 0; i < a; ++i)
    for (std::int64_t j = 0; j < b; ++j) {
      const std::int64_t pos = axis == 0 ? i : j, n = axis == 0 ? a : b;
      double acc = prod ? 1 : 0;
      for (std::int64_t t = 0; t < n; ++t) {
        const bool in = rev ? (excl ? t > pos : t >= pos) : (excl ? t < pos : t <= pos);
        const double v = x[std::size_t(axis == 0 ? t * b + j : i * b + t)];
        if (in) acc = prod ? acc * v : acc + v;
      }
      y[std::size_t(i * b + j)] = acc;
    }
  return y;
}

TEST(Cumulative, EveryAxisExclusiveAndReverseCombination) {
  Tensor x = rand_tensor({3, 5}, 7, -1.5, 1.5);
  const auto xv = vals(x);
  for (int axis : {0, 1, -1})
    for (bool excl : {false, true})
      for (bool rev : {false, true})
        for (bool prod : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "axis " << axis << " exclusive " << excl
                                          << " reverse " << rev << (prod ? " cumprod" : " cumsum"));
          Tensor y = prod ? cumprod(x, axis, excl, rev) : cumsum(x, axis, excl, rev);
          EXPECT_TRUE(all_close(y, naive_scan(xv, 3, 5, axis < 0 ? 1 : axis, prod, excl, rev),
                                1e-12, 1e-12));
          EXPECT_TRUE(check_gradients(
              [&](const std::vector<Tensor>& in) {
                return prod ? cumprod(in[0], axis, excl, rev) : cumsum(in[0], axis, excl, rev);
              },
              {x}));
        }
}

TEST(Cumulative, IntegersAndALongLine) {
  EXPECT_EQ(ints(cumsum(constant<std::int64_t>({1, 2, 3, 4}))),
            (std::vector<std::int64_t>{1, 3, 6, 10}));
  EXPECT_EQ(ints(cumprod(constant<std::int32_t>({1, 2, 3, 4}), 0, true)),
            (std::vector<std::int64_t>{1, 1, 2, 6}));
  // O(n): a million-element line is one pass, not a matmul with an n x n triangle.
  const std::int64_t n = 1 << 20;
  Tensor y = cumsum(ones({n}, DType::f64));
  EXPECT_EQ(vals(y).back(), double(n));
}

// dx_k = sum over i >= k of g_i * prod_{j <= i, j != k} x_j, computed without division.
std::vector<double> cumprod_grad_naive(const std::vector<double>& x, const std::vector<double>& g) {
  const std::size_t n = x.size();
  std::vector<double> dx(n, 0.0);
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t i = k; i < n; ++i) {
      double p = g[i];
      for (std::size_t j = 0; j <= i; ++j)
        if (j != k) p *= x[j];
      dx[k] += p;
    }
  return dx;
}

TEST(Cumulative, CumprodGradientIsExactWithZeros) {
  for (const std::vector<double>& xv :
       {std::vector<double>{2, 0, 3, 4}, std::vector<double>{0, 0, 5, -1},
        std::vector<double>{1.5, -2, 0.5, 0}, std::vector<double>{0, 1, 1, 1}}) {
    Tensor x = constant(xv, {4});
    Tensor w = constant(std::vector<double>{0.5, -1, 2, 1.5}, {4});
    GradientTape tape;
    tape.watch(x);
    Tensor loss = sum(cumprod(x) * w);
    Tensor g = tape.gradient(loss, x);
    EXPECT_TRUE(all_close(g, cumprod_grad_naive(xv, vals(w)), 1e-12, 1e-12));
    for (double v : vals(g)) EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(Cumulative, RefusalsNameTheOpAndTheExpectation) {
  Tensor x = zeros({2, 3});
  std::string m = error_of([&] { cumsum(x, 2); });
  EXPECT_TRUE(contains(m, "cumsum")) << m;
  EXPECT_TRUE(contains(m, "2")) << m;
  m = error_of([&] { cumprod(scalar(1.0)); });
  EXPECT_TRUE(contains(m, "cumprod") && contains(m, "rank >= 1")) << m;
  m = error_of([&] { cumsum(zeros({3}, DType::boolean)); });
  EXPECT_TRUE(contains(m, "cumsum") && contains(m, "bool")) << m;
  EXPECT_EQ(cumsum(zeros({0, 3}), 0).shape(), (Shape{0, 3}));
  EXPECT_TRUE(std::isnan(vals(cumsum(constant<double>({1, kNan, 2})))[2]));
}

// ---- sort / argsort / topk ----
TEST(Sort, NanLastAscendingFirstDescendingAndInfinities) {
  Tensor x = constant(std::vector<double>{3, kNan, -kInf, 1, kInf, -2}, {6});
  auto up = vals(sort(x));
  EXPECT_EQ(std::vector<double>(up.begin(), up.end() - 1),
            (std::vector<double>{-kInf, -2, 1, 3, kInf}));
  EXPECT_TRUE(std::isnan(up.back()));
  EXPECT_EQ(ints(argsort(x)), (std::vector<std::int64_t>{2, 5, 3, 0, 4, 1}));
  EXPECT_EQ(ints(argsort(x, -1, true)), (std::vector<std::int64_t>{1, 4, 0, 3, 5, 2}));
}

TEST(Sort, TiesKeepTheirOrderBothWays) {
  Tensor x = constant<float>({1, 0, 1, 0, 1, -0.0f});
  EXPECT_EQ(ints(argsort(x)), (std::vector<std::int64_t>{1, 3, 5, 0, 2, 4}));
  EXPECT_EQ(ints(argsort(x, 0, true)), (std::vector<std::int64_t>{0, 2, 4, 1, 3, 5}));
  auto [v, i] = topk(x, 2);
  EXPECT_EQ(ints(i), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(ints(topk(x, 2, 0, false).second), (std::vector<std::int64_t>{1, 3}));
}

TEST(Sort, IntegersAlongAnInnerAxisAndStrided) {
  Tensor x = constant<std::int64_t>({{5, -1, 3}, {0, 9, -7}});
  EXPECT_EQ(ints(sort(x, 0)), (std::vector<std::int64_t>{0, -1, -7, 5, 9, 3}));
  EXPECT_EQ(ints(sort(transpose(x), 1, true)), (std::vector<std::int64_t>{5, 0, 9, -1, 3, -7}));
  EXPECT_EQ(ints(sort(constant<bool>({true, false, true}).cast(DType::u8))),
            (std::vector<std::int64_t>{0, 1, 1}));
}

TEST(Sort, GradientsScatterBack) {
  Tensor x = rand_tensor({3, 7}, 3);
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& in) { return sort(in[0], 1, true); },
                              {x}));
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& in) { return topk(in[0], 2, 0).first; },
                              {x}));
}

TEST(TopK, RefusalsAndEdgeCases) {
  Tensor x = zeros({2, 5});
  std::string m = error_of([&] { topk(x, 6); });
  EXPECT_TRUE(contains(m, "topk") && contains(m, "[2, 5]") && contains(m, "0 <= k <= 5")) << m;
  m = error_of([&] { topk(x, -1); });
  EXPECT_TRUE(contains(m, "topk") && contains(m, "0 <= k <= 5")) << m;
  m = error_of([&] { topk(x, 1, 3); });
  EXPECT_TRUE(contains(m, "topk")) << m;
  m = error_of([&] { sort(x, -3); });
  EXPECT_TRUE(contains(m, "sort")) << m;
  EXPECT_EQ(topk(x, 0).first.shape(), (Shape{2, 0}));
  EXPECT_EQ(topk(zeros({0, 4}), 4).second.shape(), (Shape{0, 4}));
  auto [v, i] = topk(constant<double>({1, kNan, 3}), 1);
  EXPECT_TRUE(std::isnan(vals(v)[0]));  // NaN is the largest, as in PyTorch
  EXPECT_EQ(ints(i)[0], 1);
}

// ---- triu / tril / roll / flip ----
TEST(Triangles, BatchesAndDiagonals) {
  Tensor x = ones({2, 3, 3});
  EXPECT_EQ(vals(triu(x, 1)), (std::vector<double>{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1,
                                                   0, 0, 0}));
  EXPECT_EQ(vals(tril(x, -1)), (std::vector<double>{0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0,
                                                    1, 1, 0}));
  std::string m = error_of([&] { triu(ones({3})); });
  EXPECT_TRUE(contains(m, "triu") && contains(m, "rank >= 2") && contains(m, "[3]")) << m;
}

TEST(RollFlip, NumPySemantics) {
  Tensor x = arange(6.0, DType::f64);
  EXPECT_EQ(vals(roll(x, {2})), (std::vector<double>{4, 5, 0, 1, 2, 3}));
  Tensor m = reshape(x, {2, 3});
  EXPECT_EQ(vals(roll(m, {1})), (std::vector<double>{5, 0, 1, 2, 3, 4}));  // flat
  EXPECT_EQ(vals(roll(m, {-1, 1}, {1, 0})), (std::vector<double>{4, 5, 3, 1, 2, 0}));
  EXPECT_EQ(vals(flip(m)), (std::vector<double>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(vals(flip(m, {1})), (std::vector<double>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(vals(flip(transpose(m), {0})), (std::vector<double>{2, 5, 1, 4, 0, 3}));
  std::string e = error_of([&] { roll(m, {1, 2}, {0}); });
  EXPECT_TRUE(contains(e, "roll") && contains(e, "one shift per axis")) << e;
  e = error_of([&] { flip(m, {2}); });
  EXPECT_TRUE(contains(e, "flip")) << e;
}

// ---- take_along_axis / scatter / index_add ----
TEST(TakeAlongAxis, BroadcastsLikeNumPyAndMatchesArgsort) {
  Tensor x = rand_tensor({3, 6}, 11);
  EXPECT_TRUE(all_close(take_along_axis(x, argsort(x, 1), 1), sort(x, 1), 0, 0));
  // indices [1, 6] broadcast over x's 3 rows; x [3, 1] broadcast over 4 index columns
  Tensor ids = constant<std::int64_t>({{5, 0, -1, 2, 2, 1}});
  EXPECT_EQ(take_along_axis(x, ids, 1).shape(), (Shape{3, 6}));
  Tensor col = constant<double>({{1}, {2}, {3}});
  EXPECT_EQ(vals(take_along_axis(col, zeros({3, 4}, DType::i32), 0)),
            (std::vector<double>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  std::string m = error_of([&] { take_along_axis(x, constant<std::int64_t>({{6}}), 1); });
  EXPECT_TRUE(contains(m, "take_along_axis") && contains(m, "index 6") &&
              contains(m, "-6 <= index < 6")) << m;
  m = error_of([&] { take_along_axis(x, zeros({3, 2}, DType::f32), 1); });
  EXPECT_TRUE(contains(m, "take_along_axis") && contains(m, "i32 or i64")) << m;
  m = error_of([&] { take_along_axis(x, zeros({3}, DType::i64), 1); });
  EXPECT_TRUE(contains(m, "take_along_axis") && contains(m, "same rank")) << m;
}

TEST(Scatter, ReductionsAndRepeatedIndices) {
  Tensor x = constant<double>({{1, 2}, {3, 4}, {5, 6}});
  Tensor ids = constant<std::int64_t>({{0, 2}, {0, -1}});
  Tensor u = constant<double>({{10, 20}, {30, 40}});
  EXPECT_EQ(vals(scatter(x, 0, ids, u)), (std::vector<double>{30, 2, 3, 4, 5, 40}));  // last wins
  EXPECT_EQ(vals(scatter_add(x, 0, ids, u)), (std::vector<double>{41, 2, 3, 4, 5, 66}));
  EXPECT_EQ(vals(scatter(x, 0, ids, u, "mul")), (std::vector<double>{300, 2, 3, 4, 5, 4800}));
  EXPECT_EQ(vals(scatter(x, 0, ids, -u, "max")), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(vals(scatter(x, 0, ids, -u, "min")), (std::vector<double>{-30, 2, 3, 4, 5, -40}));
  std::string m = error_of([&] { scatter(x, 0, ids, u, "avg"); });
  EXPECT_TRUE(contains(m, "scatter") && contains(m, "none, add, mul, max, min")) << m;
  m = error_of([&] { scatter(x, 0, ids, constant<double>({1, 2})); });
  EXPECT_TRUE(contains(m, "scatter") && contains(m, "same shape")) << m;
  m = error_of([&] { scatter(x, 1, constant<std::int64_t>({{0, 2}}), constant<double>({{1, 2}})); });
  EXPECT_TRUE(contains(m, "scatter") && contains(m, "index 2") && contains(m, "size 2")) << m;
  m = error_of([&] { scatter(x, 1, zeros({4, 2}, DType::i64), zeros({4, 2}, DType::f64)); });
  EXPECT_TRUE(contains(m, "scatter") && contains(m, "[4, 2]") && contains(m, "expected at most 3"))
      << m;
}

TEST(Scatter, GradientsOfEveryReduction) {
  Tensor x = rand_tensor({4, 3}, 5, 0.5, 2.0);
  Tensor u = rand_tensor({2, 3}, 6, 0.5, 2.0);
  Tensor ids = constant<std::int64_t>({{1, 0, 3}, {1, 2, 3}});  // repeats in columns 0 and 2
  for (const char* r : {"none", "add", "mul", "max", "min"}) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(check_gradients(
        [&](const std::vector<Tensor>& in) { return scatter(in[0], 0, ids, in[1], r); }, {x, u}));
  }
}

TEST(IndexAdd, PyTorchSemantics) {
  Tensor x = zeros({3, 2}, DType::f64);
  Tensor src = constant<double>({{1, 2}, {3, 4}, {5, 6}});
  Tensor idx = constant<std::int64_t>({2, 0, 2});
  EXPECT_EQ(vals(index_add(x, 0, idx, src, 2.0)), (std::vector<double>{6, 8, 0, 0, 12, 16}));
  EXPECT_TRUE(check_gradients(
      [&](const std::vector<Tensor>& in) { return index_add(in[0], 0, idx, in[1]); },
      {rand_tensor({3, 2}, 1), rand_tensor({3, 2}, 2)}));
  std::string m = error_of([&] { index_add(x, 0, idx, zeros({2, 2}, DType::f64)); });
  EXPECT_TRUE(contains(m, "index_add") && contains(m, "[3, 2]")) << m;
}

// Graph mode's symbolic gradients of a chain of the new ops equal the tape's (scatter's
// "none" gradient builds its winner mask from ops: arange, scatter, take_along_axis).
TEST(SortScanGraph, SymbolicGradientsEqualTheTape) {
  Tensor x = rand_tensor({4, 3}, 21, 0.5, 2.0);
  Tensor u = rand_tensor({2, 3}, 22, 0.5, 2.0);
  Tensor ids = constant<std::int64_t>({{1, 0, 3}, {1, 2, 3}});
  auto f = [&](const Tensor& a, const Tensor& b) {
    Tensor s = scatter(a, 0, ids, b) + scatter(a, 0, ids, b, "max") * 0.5;
    return sum(cumprod(s, 1, true) * 0.3 + sort(s, 0, true) + sum(topk(s, 2, 1).first) +
               roll(flip(triu(s, 0), {1}), {1}, {0}) + sum(take_along_axis(s, ids, 0)) +
               cumsum(s, 0, false, true));
  };
  GradientTape tape;
  tape.watch(x);
  tape.watch(u);
  const auto want = tape.gradient(f(x, u), {x, u});
  Graph g;
  Tensor px, pu;
  std::vector<Tensor> sym;
  {
    GraphScope scope(g);
    px = g.placeholder(DType::f64, {4, 3}, "x");
    pu = g.placeholder(DType::f64, {2, 3}, "u");
    sym = gradients(std::vector<Tensor>{f(px, pu)}, std::vector<Tensor>{px, pu});
  }
  Session session(g);
  const auto got = session.run(sym, {{px, x}, {pu, u}});
  EXPECT_TRUE(all_close(got[0], want[0], 1e-12, 1e-12));
  EXPECT_TRUE(all_close(got[1], want[1], 1e-12, 1e-12));
}

// ---- CUDA == CPU on larger shapes (the registry suite runs the small samples) ----
TEST(SortScanCuda, LargerShapesMatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason();
  const Device gpu = Device::cuda(0);
  auto same = [&](const Tensor& on_gpu, const Tensor& on_cpu) {
    EXPECT_TRUE(on_gpu.device().is_cuda());
    EXPECT_TRUE(all_close(on_gpu.to(Device::cpu()).cast(DType::f64), on_cpu.cast(DType::f64),
                          1e-5, 1e-5));
  };
  Tensor x = rand_tensor({37, 1000}, 1, -3, 3, DType::f32);
  Tensor xg = x.to(gpu);
  same(cumsum(xg, 1, true, true), cumsum(x, 1, true, true));
  same(cumprod(xg * 0.0 + 1.0, 0), cumprod(x * 0.0 + 1.0, 0));
  // few long lines: the block-scan kernel
  Tensor lng = rand_tensor({3, 5000}, 4, -1, 1, DType::f64);
  same(cumsum(lng.to(gpu), 1, true, true), cumsum(lng, 1, true, true));
  same(cumsum(lng.to(gpu), 1), cumsum(lng, 1));
  Tensor near1 = 1.0 + lng * 1e-4;
  same(cumprod(near1.to(gpu), 1, true), cumprod(near1, 1, true));
  same(sort(xg, 1, true), sort(x, 1, true));
  same(argsort(xg, 0), argsort(x, 0));
  same(topk(xg, 17, 1).second, topk(x, 17, 1).second);
  same(triu(xg, 3), triu(x, 3));
  same(roll(xg, {5, -7}, {0, 1}), roll(x, {5, -7}, {0, 1}));
  same(flip(transpose(xg)), flip(transpose(x)));
  Tensor ids = cast(floor(rand_tensor({37, 500}, 2, 0, 999.99)), DType::i64);
  same(take_along_axis(xg, ids.to(gpu), 1), take_along_axis(x, ids, 1));
  Tensor u = rand_tensor({37, 500}, 3, -1, 1, DType::f32);
  for (const char* r : {"none", "add", "max", "min"})
    same(scatter(xg, 1, ids.to(gpu), u.to(gpu), r), scatter(x, 1, ids, u, r));
  Tensor x16 = x.cast(DType::f16);
  same(sort(x16.to(gpu), 1), sort(x16, 1));
  Tensor bad = constant<std::int64_t>({{1000}}).to(gpu);
  std::string m = error_of([&] { take_along_axis(xg, bad, 1); });
  EXPECT_TRUE(contains(m, "take_along_axis") && contains(m, "index 1000")) << m;
}

}  // namespace
