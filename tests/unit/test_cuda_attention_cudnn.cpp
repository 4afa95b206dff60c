// scaled_dot_product_attention on CUDA through cuDNN's fused flash attention
// (src/backend/cuda/attention_cudnn.cpp, attention_graph.hpp).
//
// On the CPU (every build, GPU or not):
//   - the support predicate and the SOMA_CUDNN_ATTENTION setting;
//   - the graph description: well formed (validate), K read transposed through its strides, the
//     Stats output [b, h, sq, 1] f32, the variant pack's uids, the two q/k/v layouts; and, run by
//     a small interpreter of the description (cuDNN's documented semantics of each operation, in
//     f64), it gives the CPU op's out and lse: the graph computes attention, causal or not,
//     sq != sk, d != dv, q/k/v packed or [b, s, h, d].
// On a GPU (skipped without one): the fused path against the CPU op in f16 and bf16, causal and
// not, head dims 64 and 128, sequence lengths not multiples of 64; lse too; heads transposed from
// [b, s, h, d] read in place; f32 under autocast;
// the backward
// (composite on CUDA) fed by the fused forward; the fallback (head dim 7, f32, an explicit mask,
// SOMA_CUDNN_ATTENTION=0) engages and gives the same answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../../src/backend/cuda/attention_graph.hpp"
#include "soma/cuda.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
namespace attn = soma::cuda_detail::attn;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

attn::Problem problem(std::int64_t b, std::int64_t h, std::int64_t sq, std::int64_t sk,
                      std::int64_t d, std::int64_t dv, bool causal,
                      attn::Elem t = attn::Elem::f16) {
  attn::Problem p;
  p.b = b, p.h = h, p.sq = sq, p.sk = sk, p.d = d, p.dv = dv, p.causal = causal, p.dtype = t;
  return p;
}

// ---- support predicate and setting ---------------------------------------------------------------
TEST(CudnnAttentionPlan, SupportPredicate) {
  EXPECT_EQ(attn::unsupported_reason(problem(2, 4, 100, 100, 64, 64, false), 9), "");
  EXPECT_EQ(attn::unsupported_reason(problem(1, 1, 77, 130, 128, 128, true, attn::Elem::bf16), 8), "");
  EXPECT_EQ(attn::unsupported_reason(problem(1, 1, 5, 3, 64, 32, true), 0), "");  // cc unknown
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 8, 64, 64, false, attn::Elem::f32), 9)
                .find("f16 and bf16"), std::string::npos);
  attn::Problem m = problem(1, 1, 8, 8, 64, 64, false);
  m.has_mask = true;
  EXPECT_NE(attn::unsupported_reason(m, 9).find("mask"), std::string::npos);
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 8, 7, 7, false), 9).find("multiples of 8"),
            std::string::npos);
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 8, 64, 12, false), 9).find("d_v = 12"),
            std::string::npos);
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 8, 264, 64, false), 9).find("above 256"),
            std::string::npos);
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 0, 64, 64, false), 9).find("empty"),
            std::string::npos);
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 8, 64, 64, false), 7).find("8.0"),
            std::string::npos);
  // cuDNN versions with known wrong answers, and decode with a causal mask before 9.10.
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 8, 64, 64, false), 9, 91000).find("9.10.0"),
            std::string::npos);
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 8, 8, 64, 64, false), 9, 91001), "");
  EXPECT_EQ(attn::unsupported_reason(problem(1, 1, 8, 8, 64, 64, false), 9, 91002), "");
  // One query row (decoding): the composite.
  EXPECT_NE(attn::unsupported_reason(problem(1, 1, 1, 8, 64, 64, false), 9, 91900).find("single"),
            std::string::npos);
  EXPECT_EQ(attn::unsupported_reason(problem(1, 1, 2, 8, 64, 64, true), 9, 91900), "");
  EXPECT_NE(attn::unsupported_reason(problem(1024, 64, 1024, 1024, 64, 64, false), 9)
                .find("2^31"), std::string::npos);
}

TEST(CudnnAttentionPlan, Setting) {
  EXPECT_EQ(attn::parse_setting(nullptr), attn::Setting::on);
  EXPECT_EQ(attn::parse_setting(""), attn::Setting::on);
  EXPECT_EQ(attn::parse_setting("1"), attn::Setting::on);
  EXPECT_EQ(attn::parse_setting("0"), attn::Setting::off);
  EXPECT_EQ(attn::parse_setting("off"), attn::Setting::off);
  EXPECT_EQ(attn::parse_setting("FALSE"), attn::Setting::off);
  EXPECT_EQ(attn::parse_setting("debug"), attn::Setting::debug);
  EXPECT_EQ(attn::parse_setting("DEBUG"), attn::Setting::debug);
}

TEST(CudnnAttentionPlan, Layouts) {
  attn::Layout l = attn::Layout::bshd;
  EXPECT_TRUE(attn::match_layout({2, 3, 5, 8}, {120, 40, 8, 1}, l));
  EXPECT_EQ(l, attn::Layout::bhsd);
  EXPECT_TRUE(attn::match_layout({2, 3, 5, 8}, {120, 8, 24, 1}, l));  // [2, 5, 3, 8] transposed
  EXPECT_EQ(l, attn::Layout::bshd);
  EXPECT_FALSE(attn::match_layout({2, 3, 5, 8}, {120, 40, 1, 5}, l));  // d not innermost
  EXPECT_FALSE(attn::match_layout({2, 3, 5, 8}, {240, 80, 16, 1}, l));  // a strided slice
  EXPECT_TRUE(attn::match_layout({1, 1, 5, 8}, {7, 9, 8, 1}, l));  // size-1 dims: any stride
  // What soma's own transpose of a [b, s, h, d] tensor gives is recognised.
  const Tensor x = rand_tensor({2, 5, 3, 8}, 1);
  const Tensor t = transpose(x, {0, 2, 1, 3});
  EXPECT_TRUE(attn::match_layout(std::vector<std::int64_t>(t.shape().begin(), t.shape().end()),
                                 std::vector<std::int64_t>(t.strides().begin(), t.strides().end()),
                                 l));
  EXPECT_EQ(l, attn::Layout::bshd);
}

TEST(CudnnAttentionPlan, KeysTellShapesDtypesAndCausalApart) {
  const attn::Problem p = problem(2, 3, 10, 12, 64, 64, false);
  attn::Problem c = p;
  c.causal = true;
  attn::Problem t = p;
  t.dtype = attn::Elem::bf16;
  attn::Problem s = p;
  s.sk = 13;
  EXPECT_NE(p.key(0), c.key(0));
  EXPECT_NE(p.key(0), t.key(0));
  EXPECT_NE(p.key(0), s.key(0));
  EXPECT_NE(p.key(0), p.key(1));
  attn::Problem l = p;
  l.k_layout = attn::Layout::bshd;
  EXPECT_NE(p.key(0), l.key(0));
  EXPECT_EQ(p.key(0), problem(2, 3, 10, 12, 64, 64, false).key(0));
}

// ---- the graph description -----------------------------------------------------------------------
TEST(CudnnAttentionPlan, GraphIsWellFormed) {
  for (bool causal : {false, true}) {
    const attn::Problem p = problem(2, 3, 10, 12, 16, 24, causal);
    const attn::Graph g = attn::forward_graph(p);
    EXPECT_EQ(attn::validate(g), "") << "causal " << causal;
    const attn::TensorNode* k = g.find(attn::uid::k);
    ASSERT_NE(k, nullptr);
    // K^T [b, h, d, sk] over a packed K [b, h, sk, d].
    EXPECT_EQ(k->dims, (std::vector<std::int64_t>{2, 3, 16, 12}));
    EXPECT_EQ(k->strides, (std::vector<std::int64_t>{3 * 12 * 16, 12 * 16, 1, 16}));
    const attn::TensorNode* st = g.find(attn::uid::stats);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->dims, (std::vector<std::int64_t>{2, 3, 10, 1}));
    EXPECT_EQ(st->type, attn::Elem::f32);
    EXPECT_FALSE(st->is_virtual);
    EXPECT_EQ(g.find(attn::uid::o)->dims, (std::vector<std::int64_t>{2, 3, 10, 24}));
    EXPECT_EQ(g.find(attn::uid::o)->type, attn::Elem::f16);
    std::vector<std::int64_t> want = {attn::uid::q, attn::uid::k, attn::uid::v, attn::uid::o,
                                      attn::uid::stats, attn::uid::scale};
    if (causal) want.push_back(attn::uid::neg_inf);
    EXPECT_EQ(g.io_uids(), want);
    EXPECT_TRUE(g.find(attn::uid::scale)->by_value);
    // The second matmul's A (the probabilities) is in the i/o dtype, as cuDNN requires.
    const attn::OpNode& last = g.ops.back();
    EXPECT_EQ(last.mode, attn::Mode::matmul);
    EXPECT_EQ(last.output, attn::uid::o);
    EXPECT_EQ(g.find(last.inputs[0])->type, attn::Elem::f16);
    for (const attn::TensorNode& t : g.tensors)
      if (t.is_virtual) EXPECT_EQ(t.strides, attn::packed_strides(t.dims)) << t.uid;
  }
}

TEST(CudnnAttentionPlan, ValidateFindsBrokenGraphs) {
  attn::Graph g = attn::forward_graph(problem(1, 2, 5, 7, 8, 8, true));
  attn::Graph bad = g;
  for (attn::TensorNode& t : bad.tensors)
    if (t.uid == attn::uid::k) t.dims = {1, 2, 7, 8};  // K instead of K^T
  EXPECT_NE(attn::validate(bad).find("matmul"), std::string::npos);
  bad = g;
  std::swap(bad.ops[0], bad.ops[1]);  // the scale reads S before the matmul writes it
  EXPECT_NE(attn::validate(bad).find("before"), std::string::npos);
  bad = g;
  bad.ops.pop_back();  // O never written
  EXPECT_NE(attn::validate(bad).find("never written"), std::string::npos);
}

// A reference interpreter of the description, in f64: each operation as cuDNN documents it
// (GEN_INDEX: the index along `axis`; BINARY_SELECT: in2 ? in0 : in1; reductions over the dims
// where the output is 1; pointwise inputs broadcast; matmul batched over dims 0, 1). Non-virtual
// tensors are read through their described strides from packed buffers.
struct Interpreter {
  const attn::Graph& g;
  std::map<std::int64_t, std::vector<double>> buf;  // by uid, at the tensor's strides

  static std::int64_t span(const attn::TensorNode& t) {
    std::int64_t n = 1;
    for (int i = 0; i < 4; ++i) n += (t.dims[std::size_t(i)] - 1) * t.strides[std::size_t(i)];
    return n;
  }
  double at(const attn::TensorNode& t, const std::int64_t* idx) {
    std::int64_t off = 0;
    for (int i = 0; i < 4; ++i)
      off += (t.dims[std::size_t(i)] == 1 ? 0 : idx[i]) * t.strides[std::size_t(i)];
    return buf.at(t.uid)[std::size_t(off)];
  }
  void run() {
    for (const attn::OpNode& op : g.ops) {
      const attn::TensorNode& out = *g.find(op.output);
      std::vector<double> y(std::size_t(span(out)), 0.0);
      std::vector<const attn::TensorNode*> in;
      for (std::int64_t id : op.inputs) in.push_back(g.find(id));
      const auto& od = out.dims;
      std::int64_t i[4];
      for (i[0] = 0; i[0] < od[0]; ++i[0])
        for (i[1] = 0; i[1] < od[1]; ++i[1])
          for (i[2] = 0; i[2] < od[2]; ++i[2])
            for (i[3] = 0; i[3] < od[3]; ++i[3]) {
              std::int64_t off = 0;
              for (int d = 0; d < 4; ++d) off += i[d] * out.strides[std::size_t(d)];
              y[std::size_t(off)] = element(op, in, i);
            }
      buf[op.output] = std::move(y);
    }
  }
  double element(const attn::OpNode& op, const std::vector<const attn::TensorNode*>& in,
                 const std::int64_t* i) {
    switch (op.mode) {
      case attn::Mode::matmul: {
        double s = 0;
        for (std::int64_t k = 0; k < in[0]->dims[3]; ++k) {
          const std::int64_t ia[4] = {i[0], i[1], i[2], k}, ib[4] = {i[0], i[1], k, i[3]};
          s += at(*in[0], ia) * at(*in[1], ib);
        }
        return s;
      }
      case attn::Mode::reduce_max:
      case attn::Mode::reduce_add: {
        const bool mx = op.mode == attn::Mode::reduce_max;
        double r = mx ? -std::numeric_limits<double>::infinity() : 0.0;
        const attn::TensorNode& x = *in[0];
        std::int64_t j[4] = {i[0], i[1], i[2], i[3]};
        const std::int64_t n3 = g.find(op.output)->dims[3] == 1 ? x.dims[3] : 1;
        for (std::int64_t c = 0; c < n3; ++c) {
          if (n3 > 1) j[3] = c;
          const double v = at(x, j);
          r = mx ? std::max(r, v) : r + v;
        }
        return r;
      }
      case attn::Mode::gen_index: return double(i[op.axis]);
      case attn::Mode::cmp_ge: return at(*in[0], i) >= at(*in[1], i) ? 1.0 : 0.0;
      case attn::Mode::binary_select: return at(*in[2], i) != 0 ? at(*in[0], i) : at(*in[1], i);
      case attn::Mode::mul: return at(*in[0], i) * at(*in[1], i);
      case attn::Mode::add: return at(*in[0], i) + at(*in[1], i);
      case attn::Mode::sub: return at(*in[0], i) - at(*in[1], i);
      case attn::Mode::div: return at(*in[0], i) / at(*in[1], i);
      case attn::Mode::exp: return std::exp(at(*in[0], i));
      case attn::Mode::log: return std::log(at(*in[0], i));
    }
    return 0;
  }
};

struct Case {
  std::int64_t b, h, sq, sk, d, dv;
  bool causal;
  double scale;  // 0: 1/sqrt(d)
  bool bshd = false;  // q, k, v given as [b, s, h, d] buffers (read through the layout's strides)
};

TEST(CudnnAttentionPlan, DescribedGraphComputesTheOp) {
  const std::vector<Case> cases = {{2, 2, 5, 7, 8, 8, false, 0.0},  {2, 2, 5, 7, 8, 16, true, 0.0},
                                   {1, 3, 9, 4, 16, 8, true, 0.7},  {1, 1, 6, 6, 8, 8, true, 0.0},
                                   {2, 1, 3, 11, 24, 8, false, 1.3},
                                   {2, 3, 5, 7, 8, 16, true, 0.0, true},
                                   {2, 2, 6, 4, 16, 8, false, 0.5, true}};
  for (const Case& c : cases) {
    const Tensor q = rand_tensor({c.b, c.h, c.sq, c.d}, 1);
    const Tensor k = rand_tensor({c.b, c.h, c.sk, c.d}, 2);
    const Tensor v = rand_tensor({c.b, c.h, c.sk, c.dv}, 3);
    const Attrs a{{"causal", c.causal}, {"scale", c.scale}};
    const std::vector<Tensor> want = call_op(get_op("scaled_dot_product_attention"), {q, k, v}, a);

    attn::Problem p = problem(c.b, c.h, c.sq, c.sk, c.d, c.dv, c.causal);
    if (c.bshd) p.q_layout = p.k_layout = p.v_layout = attn::Layout::bshd;
    const attn::Graph g = attn::forward_graph(p);
    ASSERT_EQ(attn::validate(g), "");
    Interpreter run{g, {}};
    // q, k, v buffers in the layout described: its strides say how to read them (K transposed).
    auto buffer = [&](const Tensor& t) {
      return (c.bshd ? transpose(t, {0, 2, 1, 3}) : t).to_vector<double>();
    };
    run.buf[attn::uid::q] = buffer(q);
    run.buf[attn::uid::k] = buffer(k);
    run.buf[attn::uid::v] = buffer(v);
    run.buf[attn::uid::scale] = {c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.d))};
    run.buf[attn::uid::neg_inf] = {-std::numeric_limits<double>::infinity()};
    run.run();
    const std::string what = "case sq " + std::to_string(c.sq) + " sk " + std::to_string(c.sk) +
                             " causal " + std::to_string(c.causal) + " bshd " + std::to_string(c.bshd);
    EXPECT_TRUE(all_close(want[0], run.buf.at(attn::uid::o), 1e-12, 1e-12)) << what;
    EXPECT_TRUE(all_close(want[1], run.buf.at(attn::uid::stats), 1e-12, 1e-12)) << what;
  }
}

// ---- on a GPU ------------------------------------------------------------------------------------
#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason()

const Device kGpu = Device::cuda(0);

struct EnvVar {
  std::string name;
  std::string old;
  bool had;
  EnvVar(const char* n, const char* value) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    setenv(n, value, 1);
  }
  ~EnvVar() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

double tol(DType t) { return t == DType::bf16 ? 2e-2 : 4e-3; }

// out, lse of the op on the GPU (inputs of dtype t), and the CPU op's on the same rounded values.
struct Outputs {
  std::vector<Tensor> gpu, cpu;
};
Outputs both(DType t, const Case& c, const Tensor& mask = Tensor()) {
  const Tensor q = cast(rand_tensor({c.b, c.h, c.sq, c.d}, 11), t);
  const Tensor k = cast(rand_tensor({c.b, c.h, c.sk, c.d}, 12), t);
  const Tensor v = cast(rand_tensor({c.b, c.h, c.sk, c.dv}, 13), t);
  const Attrs a{{"causal", c.causal}, {"scale", c.scale}};
  const OpDef& op = get_op("scaled_dot_product_attention");
  std::vector<Tensor> in = {q, k, v}, gin = {q.to(kGpu), k.to(kGpu), v.to(kGpu)};
  if (mask.defined()) {
    in.push_back(mask);
    gin.push_back(mask.to(kGpu));
  }
  Outputs r;
  for (const Tensor& x : call_op(op, gin, a)) r.gpu.push_back(cast(x.to(Device::cpu()), DType::f64));
  for (const Tensor& x : call_op(op, in, a)) r.cpu.push_back(cast(x, DType::f64));
  return r;
}

TEST(CudnnAttentionGpu, FusedMatchesCpu) {
  SKIP_WITHOUT_GPU();
  EnvVar on("SOMA_CUDNN_ATTENTION", "debug");
  const std::vector<Case> cases = {{2, 3, 100, 100, 64, 64, false, 0.0},
                                   {2, 3, 100, 100, 64, 64, true, 0.0},
                                   {1, 2, 77, 130, 128, 128, false, 0.0},
                                   {1, 2, 77, 130, 128, 128, true, 0.0},
                                   {1, 2, 130, 77, 64, 64, true, 0.3},
                                   {2, 1, 2, 65, 64, 64, false, 0.0}};
  for (DType t : {DType::f16, DType::bf16}) {
    for (const Case& c : cases) {
      cuda::reset_fused_attention_stats();
      const Outputs r = both(t, c);
      const cuda::FusedAttentionStats s = cuda::fused_attention_stats();
      const std::string what = std::string(dtype_name(t)) + " sq " + std::to_string(c.sq) +
                               " sk " + std::to_string(c.sk) + " d " + std::to_string(c.d) +
                               " causal " + std::to_string(c.causal);
      EXPECT_EQ(s.cudnn_calls, 1u) << what << ": fell back: " << s.last_fallback_reason;
      EXPECT_TRUE(all_close(r.gpu[0], r.cpu[0], tol(t), tol(t))) << what;
      EXPECT_TRUE(all_close(r.gpu[1], r.cpu[1], 4 * tol(t), tol(t))) << what << " (lse)";
    }
  }
}

// Heads as MultiHeadAttention makes them (a [b, s, h, d] projection transposed): read in place.
TEST(CudnnAttentionGpu, TransposedHeadsRunInPlace) {
  SKIP_WITHOUT_GPU();
  const DType t = DType::f16;
  const Tensor xq = cast(rand_tensor({2, 70, 4, 64}, 41), t);
  const Tensor xk = cast(rand_tensor({2, 90, 4, 64}, 42), t);
  const Tensor xv = cast(rand_tensor({2, 90, 4, 64}, 43), t);
  auto heads = [](const Tensor& x) { return transpose(x, {0, 2, 1, 3}); };
  const Tensor want = scaled_dot_product_attention(heads(xq), heads(xk), heads(xv), {},
                                                   {.causal = true});
  cuda::reset_fused_attention_stats();
  const Tensor got = scaled_dot_product_attention(heads(xq.to(kGpu)), heads(xk.to(kGpu)),
                                                  heads(xv.to(kGpu)), {}, {.causal = true});
  EXPECT_EQ(cuda::fused_attention_stats().cudnn_calls, 1u)
      << cuda::fused_attention_stats().last_fallback_reason;
  EXPECT_TRUE(all_close(cast(got.to(Device::cpu()), DType::f64), cast(want, DType::f64), tol(t),
                        tol(t)));
}

// f32 inputs under autocast: the op is lowered to f16 and runs fused; outputs come back f32.
TEST(CudnnAttentionGpu, AutocastLowersF32ToTheFusedPath) {
  SKIP_WITHOUT_GPU();
  const Case c{1, 2, 64, 96, 64, 64, true, 0.0};
  const Tensor q = cast(rand_tensor({c.b, c.h, c.sq, c.d}, 31), DType::f32);
  const Tensor k = cast(rand_tensor({c.b, c.h, c.sk, c.d}, 32), DType::f32);
  const Tensor v = cast(rand_tensor({c.b, c.h, c.sk, c.dv}, 33), DType::f32);
  const Tensor want = scaled_dot_product_attention(q, k, v, {}, {.causal = true});
  cuda::reset_fused_attention_stats();
  Tensor got;
  {
    AutocastScope scope(DType::f16);
    got = scaled_dot_product_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), {}, {.causal = true});
  }
  EXPECT_EQ(got.dtype(), DType::f32);
  EXPECT_EQ(cuda::fused_attention_stats().cudnn_calls, 1u)
      << cuda::fused_attention_stats().last_fallback_reason;
  EXPECT_TRUE(all_close(cast(got.to(Device::cpu()), DType::f64), cast(want, DType::f64), 4e-3, 4e-3));
}

TEST(CudnnAttentionGpu, BackwardFromFusedForwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const DType t = DType::f16;
  const Case c{1, 2, 70, 90, 64, 64, true, 0.0};
  const Tensor q = cast(rand_tensor({c.b, c.h, c.sq, c.d}, 21), t);
  const Tensor k = cast(rand_tensor({c.b, c.h, c.sk, c.d}, 22), t);
  const Tensor v = cast(rand_tensor({c.b, c.h, c.sk, c.dv}, 23), t);
  const Tensor dout = cast(rand_tensor({c.b, c.h, c.sq, c.dv}, 24), t);
  const Tensor dlse = cast(rand_tensor({c.b, c.h, c.sq}, 25), t);
  const Attrs a{{"causal", true}, {"scale", 0.0}};
  const OpDef& fwd = get_op("scaled_dot_product_attention");
  const OpDef& bwd = get_op("scaled_dot_product_attention_grad");
  cuda::reset_fused_attention_stats();
  const std::vector<Tensor> go = call_op(fwd, {q.to(kGpu), k.to(kGpu), v.to(kGpu)}, a);
  EXPECT_EQ(cuda::fused_attention_stats().cudnn_calls, 1u)
      << cuda::fused_attention_stats().last_fallback_reason;
  const std::vector<Tensor> co = call_op(fwd, {q, k, v}, a);
  const Attrs ga = Attrs(a).set("mask_grad", false);
  const std::vector<Tensor> gg =
      call_op(bwd, {q.to(kGpu), k.to(kGpu), v.to(kGpu), go[0], go[1], dout.to(kGpu),
                    dlse.to(kGpu)}, ga);
  const std::vector<Tensor> cg = call_op(bwd, {q, k, v, co[0], co[1], dout, dlse}, ga);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(all_close(cast(gg[std::size_t(i)].to(Device::cpu()), DType::f64),
                          cast(cg[std::size_t(i)], DType::f64), 3e-2, 3e-2))
        << "gradient " << i;
}

TEST(CudnnAttentionGpu, FallbackEngagesAndAgrees) {
  SKIP_WITHOUT_GPU();
  // Head dim 7: refused by the predicate; the composite gives the CPU's answer.
  {
    cuda::reset_fused_attention_stats();
    const Outputs r = both(DType::f16, {1, 2, 33, 40, 7, 7, true, 0.0});
    const cuda::FusedAttentionStats s = cuda::fused_attention_stats();
    EXPECT_EQ(s.cudnn_calls, 0u);
    EXPECT_EQ(s.fallback_calls, 1u);
    EXPECT_NE(s.last_fallback_reason.find("multiples of 8"), std::string::npos)
        << s.last_fallback_reason;
    EXPECT_TRUE(all_close(r.gpu[0], r.cpu[0], tol(DType::f16), tol(DType::f16)));
  }
  // f32 and an explicit mask: the composite.
  {
    cuda::reset_fused_attention_stats();
    const Outputs r = both(DType::f32, {1, 2, 33, 40, 64, 64, false, 0.0});
    EXPECT_EQ(cuda::fused_attention_stats().fallback_calls, 1u);
    EXPECT_TRUE(all_close(r.gpu[0], r.cpu[0], 1e-3, 1e-3));  // TF32 matmuls
    const Tensor mask = cast(rand_tensor({1, 1, 33, 40}, 5), DType::f16);  // additive
    cuda::reset_fused_attention_stats();
    const Outputs m = both(DType::f16, {1, 2, 33, 40, 64, 64, false, 0.0}, mask);
    EXPECT_EQ(cuda::fused_attention_stats().fallback_calls, 1u);
    EXPECT_TRUE(all_close(m.gpu[0], m.cpu[0], tol(DType::f16), tol(DType::f16)));
  }
  // SOMA_CUDNN_ATTENTION=0 on a shape the fused path takes: the same answer as the fused path.
  {
    const Case c{2, 2, 100, 100, 64, 64, true, 0.0};
    cuda::reset_fused_attention_stats();
    const Outputs fused = both(DType::f16, c);
    EXPECT_EQ(cuda::fused_attention_stats().cudnn_calls, 1u);
    EnvVar off("SOMA_CUDNN_ATTENTION", "0");
    cuda::reset_fused_attention_stats();
    const Outputs composite = both(DType::f16, c);
    EXPECT_EQ(cuda::fused_attention_stats().cudnn_calls, 0u);
    EXPECT_EQ(cuda::fused_attention_stats().last_fallback_reason, "SOMA_CUDNN_ATTENTION=0");
    EXPECT_TRUE(all_close(composite.gpu[0], fused.gpu[0], tol(DType::f16), tol(DType::f16)));
    EXPECT_TRUE(all_close(composite.gpu[0], composite.cpu[0], tol(DType::f16), tol(DType::f16)));
  }
}

// Not run by default (--gtest_also_run_disabled_tests --gtest_filter=*Timing*): forward time and
// peak device memory of the fused path and of the composite (SOMA_CUDNN_ATTENTION=0), f16.
TEST(CudnnAttentionGpu, DISABLED_TimingFusedVsComposite) {
  SKIP_WITHOUT_GPU();
  for (bool causal : {false, true}) {
    const std::int64_t B = 4, H = 16, S = 2048, D = 64;
    const Tensor q = cast(rand_tensor({B, H, S, D}, 51), DType::f16).to(kGpu);
    const Tensor k = cast(rand_tensor({B, H, S, D}, 52), DType::f16).to(kGpu);
    const Tensor v = cast(rand_tensor({B, H, S, D}, 53), DType::f16).to(kGpu);
    double ms[2] = {0, 0};
    std::size_t peak[2] = {0, 0};
    for (int composite = 0; composite < 2; ++composite) {
      EnvVar env("SOMA_CUDNN_ATTENTION", composite ? "0" : "1");
      for (int i = 0; i < 3; ++i) scaled_dot_product_attention(q, k, v, {}, {.causal = causal});
      cuda::synchronize();
      cuda::reset_peak_memory_stats(0);
      const std::size_t before = cuda::memory_stats(0).allocated_bytes;
      cuda::Event start, stop;
      const int n = 20;
      start.record();
      for (int i = 0; i < n; ++i) scaled_dot_product_attention(q, k, v, {}, {.causal = causal});
      stop.record();
      ms[composite] = start.elapsed_ms(stop) / n;
      peak[composite] = cuda::memory_stats(0).peak_allocated_bytes - before;
    }
    std::printf("[%lld, %lld, %lld, %lld] f16%s forward: cuDNN fused %.3f ms (peak +%.1f MiB), "
                "composite %.3f ms (peak +%.1f MiB), %.1fx\n",
                (long long)B, (long long)H, (long long)S, (long long)D, causal ? " causal" : "",
                ms[0], double(peak[0]) / (1 << 20), ms[1], double(peak[1]) / (1 << 20),
                ms[1] / ms[0]);
  }
}

}  // namespace
