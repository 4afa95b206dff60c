// nn::RMSNormalization and nn::TransformerEncoderLayer / TransformerDecoderLayer
// (include/soma/nn/normalization.hpp, include/soma/nn/transformer.hpp): PyTorch on the same
// weights (when /usr/bin/python3 imports torch; skipped otherwise), shapes, training on a toy
// task, config and model-file round trips.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "soma/model/serialization.hpp"
#include "soma/soma.hpp"
#include "emulated_device.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;
namespace fs = std::filesystem;

namespace {

// t[..., a:b, ...] on axis `axis` of a rank-3 tensor.
Tensor slice(const Tensor& t, int axis, std::int64_t a, std::int64_t b) {
  std::vector<Slice> s(3);
  s[std::size_t(axis)] = Slice{a, b};
  return soma::slice(t, s);
}

fs::path temp_dir() {
  auto dir = fs::temp_directory_path() / ("soma_transformer_layers_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// ---- PyTorch ----
// Writes, one tensor per line ("name rank d0 .. dn v0 v1 ..."), f64: an RMSNorm (torch 1.13 has no
// nn.RMSNorm: its formula) and encoder / decoder layers' weights under soma's names
// ("<prefix>/self_attn.query_kernel", "<prefix>/linear1.kernel", "<prefix>/norm1.gamma", ...),
// inputs and outputs. Exit 77: no torch.
const char* kTorchScript = R"PY(
import sys
try:
    import torch
except Exception as e:
    print("no torch:", e); sys.exit(77)
torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
E, H, F, B, T, S = 8, 2, 16, 2, 5, 6
hd = E // H
out = open(sys.argv[1], "w")
def put(name, t):
    t = t.detach().to(torch.float64).contiguous()
    out.write(" ".join([name, str(t.dim())] + [str(d) for d in t.shape] +
                       [repr(float(a)) for a in t.flatten().tolist()]) + "\n")
x = torch.randn(B, T, E); mem = torch.randn(B, S, E)
put("x", x); put("mem", mem)
# RMSNorm over the last axis, eps 1e-6
scale = torch.rand(E) + 0.5
put("rms/scale", scale)
put("rms_out", x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * scale)
def put_mha(prefix, mha):
    W, b = mha.in_proj_weight, mha.in_proj_bias
    for i, n in enumerate(["query", "key", "value"]):
        put(prefix + n + "_kernel", W[i*E:(i+1)*E].T.reshape(E, H, hd))
        put(prefix + n + "_bias", b[i*E:(i+1)*E].reshape(H, hd))
    put(prefix + "output_kernel", mha.out_proj.weight.T.reshape(H, hd, E))
    put(prefix + "output_bias", mha.out_proj.bias)
def put_layer(prefix, layer, norms):
    with torch.no_grad():
        for p in layer.parameters():
            p.uniform_(-0.5, 0.5)
        for n in norms:
            getattr(layer, n).weight.uniform_(0.5, 1.5)
    put_mha(prefix + "self_attn.", layer.self_attn)
    if hasattr(layer, "multihead_attn"):
        put_mha(prefix + "multihead_attn.", layer.multihead_attn)
    for n in ["linear1", "linear2"]:
        put(prefix + n + ".kernel", getattr(layer, n).weight.T)
        put(prefix + n + ".bias", getattr(layer, n).bias)
    for n in norms:
        put(prefix + n + ".gamma", getattr(layer, n).weight)
        put(prefix + n + ".beta", getattr(layer, n).bias)
    layer.eval()
causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # True: not allowed (PyTorch)
for tag, norm_first, act in [("post", False, "relu"), ("pre", True, "relu"), ("gelu", False, "gelu")]:
    enc = torch.nn.TransformerEncoderLayer(E, H, F, dropout=0.1, activation=act,
                                           batch_first=True, norm_first=norm_first)
    put_layer("enc_" + tag + "/", enc, ["norm1", "norm2"])
    with torch.no_grad():
        put("enc_" + tag + "_out", enc(x))
        put("enc_" + tag + "_causal_out", enc(x, src_mask=causal))
for tag, norm_first in [("post", False), ("pre", True)]:
    dec = torch.nn.TransformerDecoderLayer(E, H, F, dropout=0.1, batch_first=True,
                                           norm_first=norm_first)
    put_layer("dec_" + tag + "/", dec, ["norm1", "norm2", "norm3"])
    with torch.no_grad():
        put("dec_" + tag + "_out", dec(x, mem, tgt_mask=causal))
# RoPE, rotate-half layout (Hugging Face's Llama), base 10000, positions 3.. (a KV-cache offset)
rq = torch.randn(B, H, T, 6)
put("rope_in", rq)
inv = 1.0 / (10000.0 ** (torch.arange(0, 6, 2).double() / 6))
ang = torch.outer(torch.arange(3, 3 + T).double(), inv)
emb = torch.cat([ang, ang], -1)
rot = torch.cat([-rq[..., 3:], rq[..., :3]], -1)
put("rope_out", rq * emb.cos() + rot * emb.sin())
out.close()
)PY";

using soma::testing::TorchRun;

const TorchRun& torch_run() {
  static const TorchRun r = soma::testing::run_torch_script(kTorchScript, "tfm");
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
  // Every weight named "<prefix>/<name>" in the torch file, cast to `dt`, loaded strictly.
  void load(nn::Module& m, const std::string& prefix, DType dt) {
    std::map<std::string, Tensor> w;
    for (const auto& [name, value] : torch_run().t)
      if (name.rfind(prefix + "/", 0) == 0) w[name.substr(prefix.size() + 1)] = cast(value, dt);
    m.load_state_dict(w);
  }
  void expect_close(const Tensor& got, const std::string& want, double tol) {
    EXPECT_TRUE(all_close(cast(got, DType::f64), t(want), tol, tol)) << want;
  }
};

TEST_F(AgainstTorch, RMSNormalizationMatches) {
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    nn::RMSNormalization m({.dtype = dt});
    Tensor x = cast(t("x"), dt);
    m(x);
    load(m, "rms", dt);
    expect_close(m(x), "rms_out", dt == DType::f64 ? 1e-12 : 1e-5);
  }
}

TEST_F(AgainstTorch, TransformerEncoderLayerMatches) {
  struct Case { const char* tag; bool norm_first; nn::Activation act; };
  for (const Case& c : {Case{"post", false, nn::relu}, Case{"pre", true, nn::relu},
                        Case{"gelu", false, nn::gelu}}) {
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(std::string(c.tag) + " " + dtype_name(dt));
      const double tol = dt == DType::f64 ? 1e-10 : 1e-5;
      const std::string p = std::string("enc_") + c.tag;
      nn::TransformerEncoderLayer m(8, 2, {.dim_feedforward = 16, .activation = c.act,
                                           .norm_first = c.norm_first, .dtype = dt});
      Tensor x = cast(t("x"), dt);
      m(x);
      load(m, p, dt);
      m.eval();
      expect_close(m(x), p + "_out", tol);
      nn::TransformerEncoderLayer causal(8, 2, {.dim_feedforward = 16, .activation = c.act,
                                                .norm_first = c.norm_first, .causal = true,
                                                .dtype = dt});
      causal(x);
      causal.load_state_dict(m.state_dict());
      causal.eval();
      expect_close(causal(x), p + "_causal_out", tol);
    }
  }
}

TEST_F(AgainstTorch, TransformerDecoderLayerMatches) {
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre" : "post");
    const std::string p = norm_first ? "dec_pre" : "dec_post";
    nn::TransformerDecoderLayer m(8, 2, {.dim_feedforward = 16, .norm_first = norm_first,
                                         .causal = true, .dtype = DType::f32});
    Tensor x = cast(t("x"), DType::f32), mem = cast(t("mem"), DType::f32);
    m.call({x, mem});
    load(m, p, DType::f32);
    m.eval();
    expect_close(m.call({x, mem})[0], p + "_out", 1e-5);
  }
}

TEST_F(AgainstTorch, RotaryEmbeddingMatches) {
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = cast(t("rope_in"), dt);
    expect_close(nn::rotary_embedding(x, 10000.0, 3), "rope_out", dt == DType::f64 ? 1e-12 : 1e-5);
    auto tables = nn::rotary_tables(x.dim(2), x.dim(3), 10000.0, dt, x.device(), 3);
    expect_close(nn::apply_rotary_embedding(x, tables), "rope_out", dt == DType::f64 ? 1e-12 : 1e-5);
  }
}

// ---- soma alone ----

TEST(Positions, SineEncodingValues) {
  Tensor e = nn::sine_position_encoding(4, 6, 10000.0, DType::f64);
  ASSERT_EQ(e.shape(), (Shape{4, 6}));
  auto v = e.to_vector<double>();
  EXPECT_DOUBLE_EQ(v[0], 0.0);  // position 0: sin 0, cos 0, ...
  EXPECT_DOUBLE_EQ(v[1], 1.0);
  EXPECT_NEAR(v[6 + 0], std::sin(1.0), 1e-15);                       // position 1, frequency 1
  EXPECT_NEAR(v[6 + 3], std::cos(std::pow(10000.0, -2.0 / 6)), 1e-15);  // column 3: cos, k = 1
  EXPECT_NEAR(v[3 * 6 + 4], std::sin(3 * std::pow(10000.0, -4.0 / 6)), 1e-15);
  nn::SinePositionEncoding layer;
  Tensor x = rand_tensor({2, 4, 6}, 1, -1, 1, DType::f64);
  Tensor y = layer(x);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_TRUE(all_close(slice(y, 0, 1, 2), expand_dims(e, 0), 0, 0));
  nn::SinePositionEncoding adding(10000.0, true);
  EXPECT_TRUE(all_close(adding(x), x + e, 0, 0));
  EXPECT_THROW(nn::SinePositionEncoding(0.0), Error);
}

TEST(Positions, RotaryKeepsNormsAndDependsOnRelativePosition) {
  Tensor q = rand_tensor({1, 1, 1, 8}, 1), k = rand_tensor({1, 1, 1, 8}, 2);
  auto score = [&](std::int64_t tq, std::int64_t tk) {
    Tensor a = nn::rotary_embedding(q, 10000.0, tq), b = nn::rotary_embedding(k, 10000.0, tk);
    return sum(a * b).item<double>();
  };
  EXPECT_NEAR(score(5, 2), score(13, 10), 1e-12);
  EXPECT_GT(std::abs(score(5, 2) - score(5, 4)), 1e-6);
  Tensor x = rand_tensor({2, 3, 7, 8}, 3);
  Tensor y = nn::rotary_embedding(x);
  EXPECT_TRUE(all_close(sum(square(y), {-1}), sum(square(x), {-1}), 1e-12, 1e-12));
  EXPECT_THROW(nn::rotary_embedding(rand_tensor({2, 3, 7, 5}, 4)), Error);  // odd d
}

TEST(Positions, LearnedPositionalEmbeddingTrainsAndSaves) {
  nn::PositionalEmbedding pe(8);
  Tensor x = rand_tensor({3, 5, 4}, 1, -1, 1, DType::f32);
  Tensor y = pe(x);
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(pe.state_dict().at("embeddings").shape(), (Shape{8, 4}));
  EXPECT_TRUE(all_close(slice(y, 0, 0, 1), slice(y, 0, 2, 3), 0, 0)) << "same for every sample";
  EXPECT_THROW(pe(rand_tensor({3, 9, 4}, 2, -1, 1, DType::f32)), Error);  // longer than 8
  // learns a target that depends on the position only
  nn::Sequential model{nn::Input({5, 4}), nn::PositionalEmbedding(5, {.add_to_inputs = true}),
                       nn::Dense(1)};
  model.compile(optim::Adam({.learning_rate = 0.05}), nn::MeanSquaredError());
  Tensor xs = rand_tensor({32, 5, 4}, 3, -0.1, 0.1, DType::f32);
  Tensor target = broadcast_to(reshape(cast(constant(std::vector<double>{-2, -1, 0, 1, 2}, {5}),
                                            DType::f32), {1, 5, 1}), {32, 5, 1});
  auto hist = model.fit(xs, target, {.epochs = 60, .batch_size = 8, .verbose = 0});
  EXPECT_LT(hist["loss"].back(), 0.05 * hist["loss"].front());
  const std::string path = (temp_dir() / "pe.soma").string();
  model.save(path);
  auto loaded = load_model(path);
  fs::remove_all(temp_dir());
  EXPECT_EQ(serialization::model_config(model), serialization::model_config(*loaded));
  EXPECT_TRUE(all_close(loaded->predict(xs), model.predict(xs), 0, 0));
}

TEST(RMSNormalization, ShapesWeightsAndErrors) {
  nn::RMSNormalization m;
  Tensor x = rand_tensor({3, 4, 6}, 1, -1, 1, DType::f32);
  EXPECT_EQ(m(x).shape(), x.shape());
  EXPECT_EQ(m.state_dict().at("scale").shape(), (Shape{6}));
  // unit scale: each row has mean square 1 (up to eps)
  Tensor ms = mean(square(m(x)), {-1});
  EXPECT_TRUE(all_close(ms, ones_like(ms), 1e-4, 1e-4));
  nn::RMSNormalization two({.axis = {1, 2}});
  two(x);
  EXPECT_EQ(two.state_dict().at("scale").shape(), (Shape{4, 6}));
  EXPECT_THROW(m(rand_tensor({3, 4, 5}, 2, -1, 1, DType::f32)), Error);
  EXPECT_THROW(nn::RMSNormalization({.epsilon = 0.0}), Error);
  EXPECT_THROW(nn::RMSNormalization({.axis = {}}), Error);
}

TEST(TransformerLayers, ShapesAndWeightNames) {
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16});
  Tensor x = rand_tensor({3, 5, 8}, 1, -1, 1, DType::f32);
  EXPECT_EQ(enc(x).shape(), x.shape());
  auto sd = enc.state_dict();
  for (const char* n : {"self_attn.query_kernel", "self_attn.output_bias", "linear1.kernel",
                        "linear2.bias", "norm1.gamma", "norm2.beta"})
    EXPECT_TRUE(sd.count(n)) << n;
  EXPECT_EQ(sd.at("linear1.kernel").shape(), (Shape{8, 16}));
  EXPECT_EQ(sd.at("self_attn.query_kernel").shape(), (Shape{8, 2, 4}));
  // PyTorch's parameter count: 4 E^2 + 4 E (attention) + 2 E F + F + E + 4 E (norms)
  EXPECT_EQ(enc.count_params(), 4 * 64 + 32 + 2 * 8 * 16 + 16 + 8 + 32);
  nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16});
  Tensor mem = rand_tensor({3, 7, 8}, 2, -1, 1, DType::f32);
  EXPECT_EQ(dec.call({x, mem})[0].shape(), x.shape());
  EXPECT_TRUE(dec.state_dict().count("multihead_attn.key_kernel"));
  EXPECT_TRUE(dec.state_dict().count("norm3.gamma"));
  EXPECT_EQ(dec.count_params(), 2 * (4 * 64 + 32) + 2 * 8 * 16 + 16 + 8 + 48);
  EXPECT_THROW(nn::TransformerEncoderLayer(8, 3), Error);  // 8 % 3
  EXPECT_THROW(nn::TransformerEncoderLayer(8, 2, {.dropout = 1.0}), Error);
  EXPECT_THROW(enc(rand_tensor({3, 5, 6}, 3, -1, 1, DType::f32)), Error);
  EXPECT_THROW(dec.call({x, rand_tensor({3, 7, 6}, 4, -1, 1, DType::f32)}), Error);
}

TEST(TransformerLayers, CausalEncoderIgnoresTheFuture) {
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .causal = true});
  Tensor x = rand_tensor({1, 6, 8}, 1, -1, 1, DType::f32);
  Tensor y = enc(x);
  // change the last position: the first five outputs stay
  Tensor x2 = concat({slice(x, 1, 0, 5), rand_tensor({1, 1, 8}, 9, -1, 1, DType::f32)}, 1);
  Tensor y2 = enc(x2);
  EXPECT_TRUE(all_close(slice(y, 1, 0, 5), slice(y2, 1, 0, 5), 1e-6, 1e-6));
  EXPECT_FALSE(all_close(slice(y, 1, 5, 6), slice(y2, 1, 5, 6), 1e-6, 1e-6));
}

TEST(TransformerLayers, DropoutOnlyInTraining) {
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .dropout = 0.5});
  Tensor x = rand_tensor({2, 5, 8}, 1, -1, 1, DType::f32);
  enc.eval();
  Tensor a = enc(x);
  EXPECT_TRUE(all_close(a, enc(x), 0, 0));
  enc.train();
  EXPECT_FALSE(all_close(a, enc(x), 1e-6, 1e-6));
}

// A toy task: predict, at each position, the running mean of the first feature up to it
// (needs causal attention); the loss must fall well below its start.
TEST(TransformerLayers, TrainingReducesLoss) {
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre" : "post");
    nn::Sequential model{nn::Input({6, 8}),
                         nn::RMSNormalization(),
                         nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 32, .dropout = 0.0,
                                                            .norm_first = norm_first,
                                                            .causal = true}),
                         nn::TransformerDecoderLayer(8, 2, {.dim_feedforward = 32, .dropout = 0.0,
                                                            .norm_first = norm_first}),
                         nn::Dense(1)};
    model.compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
    Tensor x = rand_tensor({64, 6, 8}, 3, -1, 1, DType::f32);
    std::vector<double> avg(36, 0.0);  // row t: 1/(t+1) on columns 0..t
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j <= i; ++j) avg[std::size_t(i * 6 + j)] = 1.0 / (i + 1);
    Tensor y = matmul(cast(constant(avg, {6, 6}), DType::f32), slice(x, 2, 0, 1));
    auto hist = model.fit(x, y, {.epochs = 40, .batch_size = 16, .verbose = 0});
    const auto& loss = hist["loss"];
    ASSERT_EQ(loss.size(), 40u);
    EXPECT_LT(loss.back(), 0.3 * loss.front()) << loss.front() << " -> " << loss.back();
  }
}

TEST(TransformerLayers, ConfigRoundTrips) {
  nn::TransformerEncoderLayer enc(16, 4, {.dim_feedforward = 24, .dropout = 0.25,
                                          .activation = nn::gelu, .layer_norm_eps = 1e-6,
                                          .norm_first = true, .bias = false, .causal = true,
                                          .dtype = DType::f64});
  enc.set_name("e");
  const std::string cfg = serialization::layer_config(enc);
  for (const char* field : {"\"d_model\":16", "\"nhead\":4", "\"dim_feedforward\":24",
                            "\"dropout\":0.25", "gelu", "\"norm_first\":true", "\"bias\":false",
                            "\"causal\":true", "\"dtype\":\"f64\""})
    EXPECT_NE(cfg.find(field), std::string::npos) << field << " in " << cfg;
  EXPECT_EQ(serialization::layer_config(*serialization::layer_from_config(cfg)), cfg);
  nn::TransformerDecoderLayer dec(8, 2);
  dec.set_name("d");
  const std::string dcfg = serialization::layer_config(dec);
  EXPECT_NE(dcfg.find("\"causal\":true"), std::string::npos) << dcfg;
  EXPECT_EQ(serialization::layer_config(*serialization::layer_from_config(dcfg)), dcfg);
  nn::RMSNormalization rms({.axis = {1, 2}, .epsilon = 1e-3});
  rms.set_name("r");
  const std::string rcfg = serialization::layer_config(rms);
  EXPECT_EQ(serialization::layer_config(*serialization::layer_from_config(rcfg)), rcfg);
}

TEST(TransformerLayers, ModelSavesAndLoads) {
  nn::Sequential model{nn::Input({5, 8}), nn::RMSNormalization(),
                       nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 16, .norm_first = true}),
                       nn::TransformerDecoderLayer(8, 2, {.dim_feedforward = 16}), nn::Dense(3)};
  model.compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
  Tensor x = rand_tensor({4, 5, 8}, 1, -1, 1, DType::f32);
  Tensor y = rand_tensor({4, 5, 3}, 2, -1, 1, DType::f32);
  model.fit(x, y, {.epochs = 2, .batch_size = 4, .verbose = 0});
  const std::string path = (temp_dir() / "tfm.soma").string();
  model.save(path);
  auto loaded = load_model(path);
  fs::remove_all(temp_dir());
  EXPECT_EQ(serialization::model_config(model), serialization::model_config(*loaded));
  EXPECT_TRUE(all_close(loaded->predict(x), model.predict(x), 0, 0));
}

// ---- on a device ----
// On tests/support's CPU stand-in for a GPU: after a first call, a training step (forward and
// gradients) copies nothing from the host, and gives what the CPU twin gives.

void expect_no_host_copies_per_step(nn::Module& cpu, nn::Module& dev, const std::vector<Tensor>& in) {
  soma::testing::EmulatedCuda gpu;
  auto run = [](nn::Module& m, const std::vector<Tensor>& xs, std::vector<Tensor>* grads) {
    GradientTape tape;
    auto params = m.trainable_parameters();
    std::vector<Tensor> src(params.begin(), params.end());
    Tensor y = xs.size() == 1 ? m(xs[0]) : m.call(xs)[0];
    if (!src.empty()) *grads = tape.gradient(sum(y * y), src);
    return y;
  };
  std::vector<Tensor> g;
  (void)run(cpu, in, &g);  // builds
  auto pc = cpu.parameters();
  (void)run(dev, in, &g);
  auto pd = dev.parameters();
  ASSERT_EQ(pc.size(), pd.size());
  for (std::size_t i = 0; i < pc.size(); ++i) pd[i].assign(pc[i].value());
  dev.to(gpu.device());
  std::vector<Tensor> ind;
  for (const auto& t : in) ind.push_back(t.to(gpu.device()));
  std::vector<Tensor> gc, gd;
  Tensor want = run(cpu, in, &gc);
  (void)run(dev, ind, &gd);  // first call on the device: tables may be made
  cuda::reset_transfer_stats();
  Tensor got = run(dev, ind, &gd);
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 0u) << dev.type_name();
  EXPECT_EQ(got.device(), gpu.device());
  EXPECT_TRUE(all_close(got.to(Device::cpu()), want, 1e-5, 1e-5)) << dev.type_name();
  ASSERT_EQ(gc.size(), gd.size());
  for (std::size_t i = 0; i < gc.size(); ++i)
    EXPECT_TRUE(all_close(gd[i].to(Device::cpu()), gc[i], 1e-4, 1e-4)) << dev.type_name() << " " << i;
}

TEST(OnADevice, LayersMakeNoHostConstantsPerStep) {
  Tensor x = rand_tensor({2, 5, 8}, 1, -1, 1, DType::f32), mem = rand_tensor({2, 6, 8}, 2, -1, 1, DType::f32);
  {
    nn::RMSNormalization a, b;
    expect_no_host_copies_per_step(a, b, {x});
  }
  for (bool norm_first : {false, true}) {
    const nn::TransformerLayerOptions o{.dim_feedforward = 12, .dropout = 0.0,
                                        .activation = nn::gelu, .norm_first = norm_first,
                                        .causal = true};
    nn::TransformerEncoderLayer a(8, 2, o), b(8, 2, o);
    expect_no_host_copies_per_step(a, b, {x});
    nn::TransformerDecoderLayer c(8, 2, o), d(8, 2, o);
    expect_no_host_copies_per_step(c, d, {x, mem});
  }
  {
    nn::PositionalEmbedding a(7, {.add_to_inputs = true}), b(7, {.add_to_inputs = true});
    expect_no_host_copies_per_step(a, b, {x});
  }
  {
    nn::SinePositionEncoding a(10000.0, true), b(10000.0, true);
    expect_no_host_copies_per_step(a, b, {x});
  }
}

TEST(OnADevice, RotaryTablesAreMadeOnTheDevice) {
  soma::testing::EmulatedCuda gpu;
  Tensor x = rand_tensor({2, 2, 5, 6}, 1, -1, 1, DType::f32);
  auto tables = nn::rotary_tables(5, 6, 10000.0, DType::f32, gpu.device());
  EXPECT_EQ(tables.cos.device(), gpu.device());
  Tensor xd = x.to(gpu.device());
  cuda::reset_transfer_stats();
  Tensor y = nn::apply_rotary_embedding(xd, tables);
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 0u);
  EXPECT_TRUE(all_close(y.to(Device::cpu()), nn::rotary_embedding(x), 1e-6, 1e-6));
}

}  // namespace
