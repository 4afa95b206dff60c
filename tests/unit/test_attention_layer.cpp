// nn::MultiHeadAttention (include/soma/nn/attention.hpp): PyTorch's nn.MultiheadAttention on the
// same weights (when /usr/bin/python3 imports torch; skipped otherwise), the fused path against
// the explicit-weights path, masks, config and model-file round trips, and one training step at
// sequence length 4096 under a memory budget smaller than one seq x seq matrix.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "soma/model/serialization.hpp"
#include "soma/nn/attention.hpp"
#include "soma/onnx.hpp"
#include "soma/runtime_checks.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  auto dir = fs::temp_directory_path() / ("soma_attention_layer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// ---- PyTorch ----
// Writes nn.MultiheadAttention's weights in MultiHeadAttention's layout (query_kernel [E, H, hd]
// = in_proj_weight[:E].T, ...), its inputs and its outputs (f64), one tensor per line:
// "name rank d0 .. dn v0 v1 ...". Exit 77: no torch.
const char* kTorchScript = R"PY(
import sys
try:
    import torch
except Exception as e:
    print("no torch:", e); sys.exit(77)
torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
E, H, B, T, S = 8, 2, 2, 4, 5
hd = E // H
mha = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True)
with torch.no_grad():
    mha.in_proj_bias.uniform_(-0.5, 0.5)
    mha.out_proj.bias.uniform_(-0.5, 0.5)
mha.eval()
q = torch.randn(B, T, E); k = torch.randn(B, S, E); v = torch.randn(B, S, E)
x = torch.randn(B, T, E)
pad = torch.zeros(B, S, dtype=torch.bool); pad[1, 3:] = True   # True: ignored (PyTorch)
causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)     # True: not allowed
out = open(sys.argv[1], "w")
def put(name, t):
    t = t.detach().to(torch.float64).contiguous()
    out.write(" ".join([name, str(t.dim())] + [str(d) for d in t.shape] +
                       [repr(float(a)) for a in t.flatten().tolist()]) + "\n")
W, b = mha.in_proj_weight, mha.in_proj_bias
for i, n in enumerate(["query", "key", "value"]):
    put(n + "_kernel", W[i*E:(i+1)*E].T.reshape(E, H, hd))
    put(n + "_bias", b[i*E:(i+1)*E].reshape(H, hd))
put("output_kernel", mha.out_proj.weight.T.reshape(H, hd, E))
put("output_bias", mha.out_proj.bias)
for n, t in [("q", q), ("k", k), ("v", v), ("x", x), ("pad", pad.double())]:
    put(n, t)
o, w = mha(q, k, v, need_weights=True, average_attn_weights=False)
put("cross_out", o); put("cross_weights", w)
o, w = mha(q, k, v, key_padding_mask=pad, need_weights=True, average_attn_weights=False)
put("padded_out", o); put("padded_weights", w)
o, _ = mha(x, x, x, attn_mask=causal, need_weights=False)
put("causal_out", o)
out.close()
)PY";

using soma::testing::TorchRun;

const TorchRun& torch_run() {
  static const TorchRun r = soma::testing::run_torch_script(kTorchScript, "mha");
  return r;
}

class AgainstTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    const TorchRun& r = torch_run();
    if (r.unavailable()) GTEST_SKIP() << "python3 cannot import torch: " << r.log;
    ASSERT_EQ(r.rc, 0) << r.log;
  }
  const Tensor& t(const std::string& n) { return torch_run().t.at(n); }
  // A layer with PyTorch's weights, in `dtype`.
  nn::MultiHeadAttention layer(DType dtype) {
    nn::MultiHeadAttention m(2, 4, {.dtype = dtype});
    m(cast(t("q"), dtype), cast(t("v"), dtype));  // builds it
    std::map<std::string, Tensor> w;
    for (const char* n : {"query_kernel", "query_bias", "key_kernel", "key_bias", "value_kernel",
                          "value_bias", "output_kernel", "output_bias"})
      w[n] = cast(t(n), dtype);
    m.load_state_dict(w);
    return m;
  }
};

TEST_F(AgainstTorch, CrossAttentionMatches) {
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::f64 ? 1e-10 : 1e-5;
    auto m = layer(dt);
    auto r = m.attend(cast(t("q"), dt), cast(t("v"), dt),
                      {.key = cast(t("k"), dt), .return_attention_scores = true});
    EXPECT_TRUE(all_close(cast(r.output, DType::f64), t("cross_out"), tol, tol));
    EXPECT_TRUE(all_close(cast(r.scores, DType::f64), t("cross_weights"), tol, tol));
    // the fused path (no scores asked for)
    Tensor fused = m(cast(t("q"), dt), cast(t("v"), dt), {.key = cast(t("k"), dt)});
    EXPECT_TRUE(all_close(cast(fused, DType::f64), t("cross_out"), tol, tol));
  }
}

TEST_F(AgainstTorch, PaddingMaskMatches) {
  auto m = layer(DType::f32);
  // Keras' attention_mask: true where a query may attend; [B, 1, S] broadcasts over the queries.
  Tensor keep = expand_dims(logical_not(cast(t("pad"), DType::boolean)), 1);
  const nn::AttentionCallOptions c{.key = cast(t("k"), DType::f32), .attention_mask = keep,
                                   .return_attention_scores = true};
  auto r = m.attend(cast(t("q"), DType::f32), cast(t("v"), DType::f32), c);
  EXPECT_TRUE(all_close(cast(r.output, DType::f64), t("padded_out"), 1e-5, 1e-5));
  EXPECT_TRUE(all_close(cast(r.scores, DType::f64), t("padded_weights"), 1e-5, 1e-5));
  Tensor fused = m(cast(t("q"), DType::f32), cast(t("v"), DType::f32),
                   {.key = c.key, .attention_mask = keep});
  EXPECT_TRUE(all_close(cast(fused, DType::f64), t("padded_out"), 1e-5, 1e-5));
}

TEST_F(AgainstTorch, CausalSelfAttentionMatches) {
  auto m = layer(DType::f32);
  Tensor x = cast(t("x"), DType::f32);
  Tensor y = m(x, x, {.use_causal_mask = true});
  EXPECT_TRUE(all_close(cast(y, DType::f64), t("causal_out"), 1e-5, 1e-5));
  nn::MultiHeadAttention causal_layer(2, 4, {.use_causal_mask = true});
  causal_layer(x);
  causal_layer.load_state_dict(m.state_dict());
  EXPECT_TRUE(all_close(cast(causal_layer(x), DType::f64), t("causal_out"), 1e-5, 1e-5))
      << "the layer option";
}

// ---- soma alone ----
TEST(MultiHeadAttention, WeightsAreLaidOutAsKeras) {
  nn::MultiHeadAttention m(3, 5, {.value_dim = 7, .output_shape = 11});
  Tensor y = m(rand_tensor({2, 4, 6}, 1, -1, 1, DType::f32), rand_tensor({2, 9, 8}, 2, -1, 1, DType::f32),
               {.key = rand_tensor({2, 9, 10}, 3, -1, 1, DType::f32)});
  EXPECT_EQ(y.shape(), (Shape{2, 4, 11}));
  auto sd = m.state_dict();
  EXPECT_EQ(sd.at("query_kernel").shape(), (Shape{6, 3, 5}));
  EXPECT_EQ(sd.at("key_kernel").shape(), (Shape{10, 3, 5}));
  EXPECT_EQ(sd.at("value_kernel").shape(), (Shape{8, 3, 7}));
  EXPECT_EQ(sd.at("output_kernel").shape(), (Shape{3, 7, 11}));
  EXPECT_EQ(sd.at("query_bias").shape(), (Shape{3, 5}));
  EXPECT_EQ(sd.at("value_bias").shape(), (Shape{3, 7}));
  EXPECT_EQ(sd.at("output_bias").shape(), (Shape{11}));
  EXPECT_EQ(m.count_params(), 6 * 15 + 15 + 10 * 15 + 15 + 8 * 21 + 21 + 21 * 11 + 11);
  nn::MultiHeadAttention nobias(2, 4, {.use_bias = false});
  nobias(rand_tensor({1, 3, 8}, 1, -1, 1, DType::f32));
  EXPECT_EQ(nobias.count_params(), 4 * 8 * 8);
}

TEST(MultiHeadAttention, FusedPathEqualsExplicitWeightsPathWithGradients) {
  nn::MultiHeadAttention m(2, 3, {.dtype = DType::f64});
  Tensor q = rand_tensor({2, 6, 4}, 1), v = rand_tensor({2, 7, 5}, 2);
  std::vector<double> mv(2 * 6 * 7, 1.0);
  for (int s = 4; s < 7; ++s)
    for (int tq = 0; tq < 6; ++tq) mv[std::size_t(42 + tq * 7 + s)] = 0.0;  // batch 1: 3 pads
  Tensor mask = constant(mv, {2, 6, 7});  // numeric 0/1, as Keras accepts
  m(q, v);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    auto run = [&](bool scores, std::vector<Tensor>* grads) {
      GradientTape tape;
      auto params = m.trainable_parameters();
      std::vector<Tensor> src(params.begin(), params.end());
      src.push_back(q);
      for (auto& s : src) tape.watch(s);
      auto r = m.attend(q, v, {.attention_mask = mask, .use_causal_mask = causal,
                               .return_attention_scores = scores});
      *grads = tape.gradient(sum(r.output * r.output), src);
      return r.output;
    };
    std::vector<Tensor> g0, g1;
    Tensor a = run(false, &g0), b = run(true, &g1);
    EXPECT_TRUE(all_close(a, b, 1e-12, 1e-10));
    ASSERT_EQ(g0.size(), g1.size());
    for (std::size_t i = 0; i < g0.size(); ++i) EXPECT_TRUE(all_close(g0[i], g1[i], 1e-12, 1e-9)) << i;
  }
}

TEST(MultiHeadAttention, DropoutOnlyInTraining) {
  nn::MultiHeadAttention m(2, 4, {.dropout = 0.5});
  Tensor x = rand_tensor({2, 5, 8}, 1, -1, 1, DType::f32);
  m.eval();
  Tensor a = m(x), b = m(x);
  EXPECT_TRUE(all_close(a, b, 0, 0));
  m.train();
  Tensor c = m(x);
  EXPECT_FALSE(all_close(a, c, 1e-6, 1e-6)) << "dropout in training changes the output";
}

TEST(MultiHeadAttention, RefusesBadArguments) {
  EXPECT_THROW(nn::MultiHeadAttention(0, 4), Error);
  EXPECT_THROW(nn::MultiHeadAttention(2, 0), Error);
  EXPECT_THROW(nn::MultiHeadAttention(2, 4, {.dropout = 1.0}), Error);
  nn::MultiHeadAttention m(2, 4);
  Tensor q = rand_tensor({2, 5, 8}, 1, -1, 1, DType::f32);
  EXPECT_THROW(m(q, rand_tensor({3, 5, 8}, 2, -1, 1, DType::f32)), Error);  // batch
  EXPECT_THROW(m(q, q, {.key = rand_tensor({2, 6, 8}, 3, -1, 1, DType::f32)}), Error);  // seq
  EXPECT_THROW(m(rand_tensor({2, 8}, 4, -1, 1, DType::f32), q), Error);  // rank
}

TEST(MultiHeadAttention, ConfigRoundTrips) {
  nn::MultiHeadAttention m(3, 5, {.value_dim = 7, .use_bias = false, .output_shape = 11,
                                  .dropout = 0.25, .use_causal_mask = true,
                                  .kernel_initializer = nn::init::he_normal(),
                                  .dtype = DType::f64});
  m.set_name("l");
  const std::string cfg = serialization::layer_config(m);
  for (const char* field : {"\"num_heads\":3", "\"key_dim\":5", "\"value_dim\":7",
                            "\"use_bias\":false", "\"output_shape\":11", "\"dropout\":0.25",
                            "\"use_causal_mask\":true", "he_normal", "\"dtype\":\"f64\""})
    EXPECT_NE(cfg.find(field), std::string::npos) << field << " in " << cfg;
  auto back = serialization::layer_from_config(cfg);
  EXPECT_EQ(serialization::layer_config(*back), cfg);
}

TEST(MultiHeadAttention, FunctionalModelSavesAndLoads) {
  auto q_in = nn::Input({6, 8}), v_in = nn::Input({9, 4});
  auto h = nn::call(nn::MultiHeadAttention(2, 4, {.use_causal_mask = true}), {q_in, v_in}).at(0);
  auto out = nn::call(nn::Dense(3), h);
  nn::Model model({q_in, v_in}, {out});
  model.compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
  std::vector<Tensor> x{rand_tensor({4, 6, 8}, 1, -1, 1, DType::f32),
                        rand_tensor({4, 9, 4}, 2, -1, 1, DType::f32)};
  Tensor y = rand_tensor({4, 6, 3}, 3, -1, 1, DType::f32);
  auto hist = model.fit(x, {y}, {.epochs = 3, .batch_size = 4, .verbose = 0});
  ASSERT_EQ(hist["loss"].size(), 3u);
  EXPECT_LT(hist["loss"].back(), hist["loss"].front()) << "it trains";
  const std::string path = (temp_dir() / "mha.soma").string();
  model.save(path);
  auto loaded = load_model(path);
  fs::remove_all(temp_dir());
  EXPECT_EQ(serialization::model_config(model), serialization::model_config(*loaded));
  auto p0 = model.predict(x), p1 = loaded->predict(x);
  ASSERT_EQ(p1.size(), 1u);
  EXPECT_TRUE(all_close(p1[0], p0[0], 0, 0));
}

TEST(MultiHeadAttention, ExportsToOnnxAndImportsBack) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  // self-attention with a causal mask (Sequential), and cross-attention (functional)
  nn::Sequential self{nn::Input({5, 8}), nn::MultiHeadAttention(2, 3, {.value_dim = 4,
                                                                        .use_causal_mask = true})};
  Tensor x = rand_tensor({2, 5, 8}, 1, -1, 1, DType::f32);
  auto a = onnx::load_from_bytes(onnx::export_to_bytes(self));
  EXPECT_TRUE(all_close(a->predict(x), self.predict(x), 1e-5, 1e-5));

  auto q_in = nn::Input({4, 6}), v_in = nn::Input({7, 5});
  auto h = nn::call(nn::MultiHeadAttention(3, 2, {.output_shape = 9}), {q_in, v_in}).at(0);
  nn::Model cross({q_in, v_in}, {h});
  std::vector<Tensor> xs{rand_tensor({2, 4, 6}, 2, -1, 1, DType::f32),
                         rand_tensor({2, 7, 5}, 3, -1, 1, DType::f32)};
  auto b = onnx::load_from_bytes(onnx::export_to_bytes(cross));
  EXPECT_TRUE(all_close(b->predict(xs).at(0), cross.predict(xs).at(0), 1e-5, 1e-5));
}

TEST(MultiHeadAttention, Seq4096TrainingStepFitsUnderOneSeqBySeqMatrix) {
  // 1 layer, batch 1, 4096 tokens, 64 features, 4 heads of 16: one [4, 4096, 4096] f32 weights
  // tensor would be 256 MiB; the step runs under a budget of 48 MiB above what is in use.
  nn::MultiHeadAttention m(4, 16);
  Tensor x = rand_tensor({1, 4096, 64}, 1, -1, 1, DType::f32);
  m(rand_tensor({1, 2, 64}, 2, -1, 1, DType::f32));  // builds it
  const std::size_t before = memory_limit();
  set_memory_limit(memory_in_use() + (std::size_t(48) << 20));
  try {
    GradientTape tape;
    auto params = m.trainable_parameters();
    Tensor y = m(x, x, {.use_causal_mask = true});
    Tensor loss = mean(y * y);
    auto grads = tape.gradient(loss, params);
    for (std::size_t i = 0; i < params.size(); ++i) params[i].assign_sub(grads[i] * 0.01);
  } catch (const Error& e) {
    set_memory_limit(before);
    FAIL() << e.what();
  }
  set_memory_limit(before);
}

}  // namespace
