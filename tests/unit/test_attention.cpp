// scaled_dot_product_attention (src/ops/attention.cpp, src/backend/cpu/attention.cpp) against
// the same attention written with other ops (matmul, softmax), whose gradients the tape derives:
// forward and gradients with causal, padding and additive masks, seq_q != seq_k and sequences
// longer than one block; fully masked rows; and memory at sequence length 4096. The registry
// suite (tests/ops) checks the op against its f64 reference and finite differences.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "soma/nn_ops.hpp"
#include "soma/runtime_checks.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// softmax(scale * q k^T + mask) v with ops; causal and boolean masks as -inf.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 bool causal) {
  const std::int64_t sq = q.dim(2), sk = k.dim(2);
  const double scale = 1.0 / std::sqrt(double(q.dim(3)));
  Tensor s = matmul(q, transpose(k, {0, 1, 3, 2})) * scale;
  if (mask.defined()) {
    if (mask.dtype() == DType::boolean) s = where(mask, s, full_like(s, -kInf));
    else s = s + mask;
  }
  if (causal) {
    std::vector<double> m(std::size_t(sq * sk));
    for (std::int64_t i = 0; i < sq; ++i)
      for (std::int64_t j = 0; j < sk; ++j) m[std::size_t(i * sk + j)] = j > i ? -kInf : 0.0;
    s = s + cast(constant(m, {sq, sk}), q.dtype());
  }
  return matmul(softmax(s, -1), v);
}

struct Case {
  Shape q, k, v;
  bool causal = false;
};

// Forward and the gradients of sum(out * w) with respect to q, k, v (and a float mask).
void expect_matches_composite(const Case& c, DType dt, const Tensor& mask, double tol) {
  Tensor q = cast(rand_tensor(c.q, 1), dt), k = cast(rand_tensor(c.k, 2), dt),
         v = cast(rand_tensor(c.v, 3), dt);
  Tensor w = cast(rand_tensor({c.q[0], c.q[1], c.q[2], c.v[3]}, 4), dt);
  const bool mask_grad = mask.defined() && mask.dtype() != DType::boolean;
  auto grads = [&](bool fused, Tensor* out) {
    GradientTape tape;
    std::vector<Tensor> src = {q, k, v};
    if (mask_grad) src.push_back(mask);
    for (auto& t : src) tape.watch(t);
    Tensor o = fused ? scaled_dot_product_attention(q, k, v, mask, {.causal = c.causal})
                     : composite(q, k, v, mask, c.causal);
    *out = o;
    return tape.gradient(sum(o * w), src);
  };
  Tensor got, want;
  auto g = grads(true, &got);
  auto r = grads(false, &want);
  EXPECT_TRUE(all_close(got, want, tol, tol)) << "forward";
  const char* names[] = {"dq", "dk", "dv", "dmask"};
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i].shape(), r[i].shape()) << names[i];
    EXPECT_TRUE(all_close(g[i], r[i], tol, tol)) << names[i];
  }
}

TEST(Attention, MatchesCompositeWithoutMask) {
  expect_matches_composite({{2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}}, DType::f64, {}, 1e-10);
  expect_matches_composite({{2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}}, DType::f32, {}, 1e-5);
}

TEST(Attention, CausalMaskSeesOnlyEarlierKeys) {
  expect_matches_composite({{1, 2, 7, 4}, {1, 2, 7, 4}, {1, 2, 7, 3}, true}, DType::f64, {},
                           1e-10);
  // The first query sees only the first key: its output is that key's value.
  Tensor q = rand_tensor({1, 1, 4, 2}, 5), k = rand_tensor({1, 1, 4, 2}, 6),
         v = rand_tensor({1, 1, 4, 3}, 7);
  Tensor o = scaled_dot_product_attention(q, k, v, {}, {.causal = true});
  for (std::int64_t c = 0; c < 3; ++c)
    EXPECT_DOUBLE_EQ(o.at<double>({0, 0, 0, c}), v.at<double>({0, 0, 0, c}));
}

TEST(Attention, CausalWithSeqQDifferentFromSeqK) {
  // top-left aligned: query i sees keys 0..i
  expect_matches_composite({{1, 2, 5, 4}, {1, 2, 9, 4}, {1, 2, 9, 3}, true}, DType::f64, {},
                           1e-10);
  expect_matches_composite({{1, 2, 9, 4}, {1, 2, 5, 4}, {1, 2, 5, 3}, true}, DType::f64, {},
                           1e-10);
}

TEST(Attention, PaddingMaskIgnoresPaddedKeys) {
  // [batch, 1, 1, seq_k]: the second sequence has its last 3 keys padded
  std::vector<double> m(2 * 6, 1.0);
  m[6 + 3] = m[6 + 4] = m[6 + 5] = 0.0;
  Tensor mask = cast(constant(m, {2, 1, 1, 6}), DType::boolean);
  expect_matches_composite({{2, 2, 4, 4}, {2, 2, 6, 4}, {2, 2, 6, 5}}, DType::f64, mask, 1e-10);
  // Padded keys' values do not reach the output.
  Tensor q = rand_tensor({2, 2, 4, 4}, 1), k = rand_tensor({2, 2, 6, 4}, 2),
         v = rand_tensor({2, 2, 6, 5}, 3);
  std::vector<double> vv = v.to_vector<double>();
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t j = 3; j < 6; ++j)
      for (std::int64_t c = 0; c < 5; ++c) vv[std::size_t(((1 * 2 + h) * 6 + j) * 5 + c)] = 1e6;
  Tensor a = scaled_dot_product_attention(q, k, v, mask);
  Tensor b = scaled_dot_product_attention(q, k, constant(vv, v.shape()), mask);
  EXPECT_TRUE(all_close(a, b, 1e-12, 1e-12));
}

TEST(Attention, AdditiveMaskGetsItsGradientSummedOverBroadcastAxes) {
  Tensor mask = rand_tensor({1, 3, 5, 7}, 9);  // broadcast over the batch
  expect_matches_composite({{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 2}}, DType::f64, mask, 1e-10);
  Tensor row_mask = rand_tensor({7}, 10);  // one bias per key
  expect_matches_composite({{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 2}}, DType::f64, row_mask,
                           1e-10);
}

TEST(Attention, LongerThanOneBlockMatchesComposite) {
  // 64-row blocks: several query and key blocks, partial last blocks, causal and not
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    expect_matches_composite({{1, 2, 150, 16}, {1, 2, 200, 16}, {1, 2, 200, 8}, causal},
                             DType::f64, {}, 1e-10);
    expect_matches_composite({{1, 2, 150, 16}, {1, 2, 200, 16}, {1, 2, 200, 8}, causal},
                             DType::f32, {}, 2e-5);
  }
}

TEST(Attention, FullyMaskedRowGivesZerosAndNoGradient) {
  Tensor q = rand_tensor({1, 1, 3, 4}, 1), k = rand_tensor({1, 1, 5, 4}, 2),
         v = rand_tensor({1, 1, 5, 2}, 3);
  std::vector<double> m(15, 1.0);
  for (int j = 0; j < 5; ++j) m[std::size_t(5 + j)] = 0.0;  // query 1 sees nothing
  Tensor mask = cast(constant(m, {1, 1, 3, 5}), DType::boolean);
  GradientTape tape;
  tape.watch(q);
  tape.watch(k);
  Tensor o = scaled_dot_product_attention(q, k, v, mask);
  auto g = tape.gradient(sum(o), std::vector<Tensor>{q, k});
  for (std::int64_t c = 0; c < 2; ++c) EXPECT_EQ(o.at<double>({0, 0, 1, c}), 0.0);
  for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(g[0].at<double>({0, 0, 1, c}), 0.0);
  for (double x : g[1].to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
  for (double x : o.to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
}

TEST(Attention, LargeLogitsDoNotOverflow) {
  // logits around 1e4: a naive exp would be inf; the running maximum keeps them finite
  Tensor q = rand_tensor({1, 1, 70, 8}, 1) * 300.0, k = rand_tensor({1, 1, 90, 8}, 2) * 300.0,
         v = rand_tensor({1, 1, 90, 3}, 3);
  Tensor got = scaled_dot_product_attention(cast(q, DType::f32), cast(k, DType::f32),
                                            cast(v, DType::f32));
  EXPECT_TRUE(all_close(cast(got, DType::f64), composite(q, k, v, {}, false), 1e-4, 1e-4));
}

TEST(Attention, ExplicitScale) {
  Tensor q = rand_tensor({1, 2, 3, 4}, 1), k = rand_tensor({1, 2, 3, 4}, 2),
         v = rand_tensor({1, 2, 3, 4}, 3);
  // scale 1 on q equals the default scale on q * sqrt(d)
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {}, {.scale = 1.0}),
                        scaled_dot_product_attention(q * 2.0, k, v), 1e-12, 1e-12));
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, {}, {.scale = -1.0}), Error);
}

TEST(Attention, RefusesMismatchedShapesNamingThem) {
  Tensor q = rand_tensor({1, 2, 3, 4}, 1);
  try {
    scaled_dot_product_attention(q, rand_tensor({1, 2, 3, 5}, 2), rand_tensor({1, 2, 3, 4}, 3));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scaled_dot_product_attention"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[1, 2, 3, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scaled_dot_product_attention(q, q, q, rand_tensor({2, 3}, 4)), Error);
  EXPECT_THROW(scaled_dot_product_attention(q, q, rand_tensor({1, 2, 4, 4}, 5)), Error);
  EXPECT_THROW(scaled_dot_product_attention(rand_tensor({2, 3, 4}, 1), q, q), Error);
}

// ---- the composite kernels other devices run (registered for CUDA) ----
// They are made of ops, so they run on CPU tensors too: same outputs as the fused CPU kernels.
std::vector<Tensor> run_kernel(const char* op, DeviceKind device, const std::vector<Tensor>& in,
                               const Attrs& a) {
  const OpDef& d = get_op(op);
  std::vector<TensorSpec> specs;
  for (const auto& t : in) specs.push_back({t.shape(), t.dtype()});
  std::vector<Tensor> out;
  for (const auto& s : d.infer(specs, a)) out.push_back(Tensor::empty(s.shape, s.dtype));
  d.kernels[int(device)](in, out, a);
  return out;
}

TEST(Attention, CompositeKernelForOtherDevicesMatchesTheFusedOne) {
  Tensor q = rand_tensor({2, 2, 5, 4}, 1), k = rand_tensor({2, 2, 7, 4}, 2),
         v = rand_tensor({2, 2, 7, 3}, 3);
  std::vector<double> keep(2 * 5 * 7, 1.0);
  for (int j = 0; j < 7; ++j) keep[std::size_t(7 + j)] = 0.0;  // batch 0, query 1: sees nothing
  const Tensor bool_mask = cast(constant(keep, {2, 1, 5, 7}), DType::boolean);
  const Tensor float_mask = rand_tensor({1, 2, 5, 7}, 4);
  for (bool causal : {false, true})
    for (const Tensor* mask : {static_cast<const Tensor*>(nullptr), &bool_mask, &float_mask}) {
      SCOPED_TRACE(std::string(causal ? "causal " : "") +
                   (mask ? (mask->dtype() == DType::boolean ? "bool mask" : "float mask") : "no mask"));
      Attrs a{{"causal", causal}, {"scale", 0.0}};
      std::vector<Tensor> in = {q, k, v};
      if (mask) in.push_back(*mask);
      auto fused = run_kernel("scaled_dot_product_attention", DeviceKind::CPU, in, a);
      auto comp = run_kernel("scaled_dot_product_attention", DeviceKind::CUDA, in, a);
      for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(all_close(comp[i], fused[i], 1e-12, 1e-12)) << i;
      std::vector<Tensor> gin = {q, k, v, fused[0], fused[1], rand_tensor(fused[0].shape(), 5),
                                 rand_tensor(fused[1].shape(), 6)};
      if (mask) gin.push_back(*mask);
      Attrs ga = a;
      ga.set("mask_grad", mask && mask->dtype() != DType::boolean);
      auto gf = run_kernel("scaled_dot_product_attention_grad", DeviceKind::CPU, gin, ga);
      auto gc = run_kernel("scaled_dot_product_attention_grad", DeviceKind::CUDA, gin, ga);
      ASSERT_EQ(gf.size(), gc.size());
      for (std::size_t i = 0; i < gf.size(); ++i) EXPECT_TRUE(all_close(gc[i], gf[i], 1e-12, 1e-12)) << i;
    }
  // no keys at all
  auto out = run_kernel("scaled_dot_product_attention", DeviceKind::CUDA,
                        {q, rand_tensor({2, 2, 0, 4}, 7), rand_tensor({2, 2, 0, 3}, 8)}, {});
  EXPECT_TRUE(all_close(out[0], zeros({2, 2, 5, 3}, DType::f64), 0, 0));
}

// ---- memory at sequence length 4096 ----
// The process's peak resident set (VmHWM), reset by writing 5 to /proc/self/clear_refs.
long peak_rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return bool(f);
}

TEST(Attention, Seq4096TrainsWithoutTheSeqBySeqMatrix) {
  // batch 1, 2 heads, 4096 x 64 f32: one [4096, 4096] f32 matrix is 64 MiB per head.
  const Shape s{1, 2, 4096, 64};
  Tensor q = cast(rand_tensor(s, 1), DType::f32), k = cast(rand_tensor(s, 2), DType::f32),
         v = cast(rand_tensor(s, 3), DType::f32), w = cast(rand_tensor(s, 4), DType::f32);
  const std::size_t before_limit = memory_limit();
  // soma's tensors may take 24 MiB more than now: outputs, gradients and the loss fit (each
  // [1, 2, 4096, 64] f32 tensor is 2 MiB); one seq x seq matrix (64 MiB) does not.
  set_memory_limit(memory_in_use() + (std::size_t(24) << 20));
  const bool reset = reset_peak_rss();
  const long rss0 = peak_rss_kib();
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> g;
  try {
    GradientTape tape;
    for (auto* t : {&q, &k, &v}) tape.watch(*t);
    Tensor o = scaled_dot_product_attention(q, k, v, {}, {.causal = true});
    g = tape.gradient(sum(o * w), std::vector<Tensor>{q, k, v});
  } catch (const Error& e) {
    set_memory_limit(before_limit);
    FAIL() << e.what();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long rss1 = peak_rss_kib();
  // The composite allocates the [1, 2, 4096, 4096] logits: the same budget refuses it.
  EXPECT_THROW(composite(q, k, v, {}, false), Error);
  set_memory_limit(before_limit);
  ASSERT_EQ(g.size(), 3u);
  for (const auto& t : g) EXPECT_EQ(t.shape(), s);
  std::printf("seq 4096, d 64, 2 heads, causal, f32: forward + backward %.2f s; peak RSS grew by "
              "%.1f MiB (%s; one 4096 x 4096 f32 matrix is 64 MiB)\n",
              secs, double(rss1 - rss0) / 1024.0, reset ? "VmHWM reset first" : "no reset");
  if (reset && rss0 > 0) EXPECT_LT(rss1 - rss0, 48 * 1024) << "KiB";
}

}  // namespace
