// ONNX export of a byte-level GPT (examples/char_transformer's model): Embedding,
// PositionalEmbedding, causal TransformerEncoderLayers (their MultiHeadAttention lowered through
// the scaled_dot_product_attention op, which the exporter writes as MatMul/Softmax/Where with a
// Trilu causal mask), LayerNormalization and Dense; the export imports back and matches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

nn::Sequential gpt(std::int64_t T, std::int64_t d, bool norm_first, bool causal) {
  nn::Sequential m{nn::Input({T}, {.dtype = DType::i64}), nn::Embedding(256, d),
                   nn::PositionalEmbedding(T, {.add_to_inputs = true})};
  for (int l = 0; l < 2; ++l)
    m.add(nn::TransformerEncoderLayer(d, 4, {.dim_feedforward = 4 * d, .dropout = 0.1,
                                             .activation = nn::gelu, .norm_first = norm_first,
                                             .causal = causal}));
  m.add(nn::LayerNormalization());
  m.add(nn::Dense(256));
  m.eval();
  return m;
}

Tensor tokens(std::int64_t b, std::int64_t n, std::uint64_t seed) {
  return cast(floor(rand_tensor({b, n}, seed, 0.0, 255.99)), DType::i64);
}

void round_trip(nn::Sequential& m, std::int64_t T) {
  const std::string bytes = onnx::export_to_bytes(m, {.opset = 17});
  // The attention is standard operators: no custom op, the causal mask from Trilu.
  for (const char* op : {"MatMul", "Softmax", "Where", "Trilu", "LayerNormalization", "Gather"})
    EXPECT_NE(bytes.find(op), std::string::npos) << op;
  auto back = onnx::load_from_bytes(bytes);
  Tensor x = tokens(3, T, 5);  // another batch size than the export saw: the batch is dynamic
  Tensor want = m.predict(x, {.verbose = 0});
  Tensor got = back->predict(x, {.verbose = 0});
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(all_close(got, want, 1e-5, 1e-5));
}

}  // namespace

TEST(TransformerOnnx, CharGptPreNormCausalRoundTrips) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(21);
  auto m = gpt(16, 32, true, true);
  round_trip(m, 16);
}

TEST(TransformerOnnx, PostNormCausalRoundTrips) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(22);
  auto m = gpt(12, 32, false, true);
  round_trip(m, 12);
}

TEST(TransformerOnnx, NonCausalHasNoMask) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(23);
  auto m = gpt(8, 16, true, false);
  const std::string bytes = onnx::export_to_bytes(m, {.opset = 17});
  EXPECT_EQ(bytes.find("Trilu"), std::string::npos);
  auto back = onnx::load_from_bytes(bytes);
  Tensor x = tokens(2, 8, 6);
  EXPECT_TRUE(all_close(back->predict(x, {.verbose = 0}), m.predict(x, {.verbose = 0}), 1e-5, 1e-5));
}

TEST(TransformerOnnx, CausalAttentionNeedsOpset14) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(24);
  auto m = gpt(8, 16, true, true);
  // Below 17 LayerNormalization is composed; below 14 the causal mask (Trilu) is refused.
  EXPECT_NO_THROW(onnx::export_to_bytes(m, {.opset = 14}));
  EXPECT_THROW(onnx::export_to_bytes(m, {.opset = 13}), Error);
}

// An outside reader: onnxruntime (from PyPI, in the pinned oracle environment, or the python
// SOMA_TEST_PYTHON names; skipped without it) runs the exported GPT and gives soma's outputs (to 1e-4).
TEST(TransformerOnnx, OnnxRuntimeMatchesSoma) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(25);
  auto m = gpt(16, 32, true, true);
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() / ("soma_gpt_ort_" + std::to_string(::getpid()) + ".onnx");
  onnx::export_model(m, file.string(), {.opset = 17});
  const std::string script = R"(import sys
try:
    import numpy as np, onnxruntime as ort
except Exception as e:
    print("no onnxruntime:", e); sys.exit(77)
s = ort.InferenceSession(")" + file.string() + R"(", providers=["CPUExecutionProvider"])
x = ((np.arange(2 * 16).reshape(2, 16) * 37 + 11) % 256).astype(np.int64)
y = s.run(None, {s.get_inputs()[0].name: x})[0].astype(np.float64)
with open(sys.argv[1], "w") as out:
    out.write(" ".join(["y", str(y.ndim)] + [str(d) for d in y.shape] + [repr(float(a)) for a in y.flatten()]) + "\n")
)";
  // onnxruntime comes from PyPI: the oracle environment (scripts/oracles.lock).
  auto run = soma::testing::run_torch_script(script.c_str(), "gpt_ort", SOMA_ORACLE_PYTHON);
  fs::remove(file);
  if (run.unavailable()) GTEST_SKIP() << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  std::vector<std::int64_t> ids(32);
  for (std::int64_t i = 0; i < 32; ++i) ids[std::size_t(i)] = (i * 37 + 11) % 256;
  Tensor want = m.predict(constant(ids, {2, 16}), {.verbose = 0});
  EXPECT_TRUE(all_close(cast(run.t.at("y"), DType::f32), want, 1e-4, 1e-4));
}

// ---- RMSNormalization, SinePositionEncoding, TransformerDecoderLayer, mask inputs ------------

namespace {

// Sine positions + RMSNorm + a Dense head on float inputs [B, T, D].
nn::Sequential rms_sine(std::int64_t T, std::int64_t d) {
  nn::Sequential m{nn::Input({T, d}), nn::SinePositionEncoding(10000.0, /*add_to_inputs=*/true),
                   nn::RMSNormalization({.epsilon = 1e-5}), nn::Dense(5)};
  m.predict(zeros({1, T, d}), {.verbose = 0});  // builds it
  // A scale other than ones, so that it is seen to be exported.
  auto w = m.layers()[1]->trainable_parameters();
  w.at(0).assign(rand_tensor(w.at(0).value().shape(), 9, 0.5, 1.5));
  m.eval();
  return m;
}

// A decoder model: {tgt [T, d], memory [S, d] [, memory_mask [1, S] bool]} -> [B, T, d].
std::shared_ptr<nn::Model> decoder_model(std::int64_t T, std::int64_t S, std::int64_t d,
                                         bool norm_first, bool with_mask) {
  auto tgt = nn::Input({T, d});
  auto mem = nn::Input({S, d});
  auto mask = nn::Input({1, S}, {.dtype = DType::boolean});
  std::vector<nn::SymbolicTensor> ins{tgt, mem};
  if (with_mask) ins.push_back(mask);
  auto y = nn::call(nn::TransformerDecoderLayer(d, 2, {.dim_feedforward = 2 * d,
                                                       .norm_first = norm_first, .causal = true}),
                    ins)[0];
  auto m = std::make_shared<nn::Model>(ins, std::vector<nn::SymbolicTensor>{y});
  m->eval();
  return m;
}

std::vector<Tensor> decoder_inputs(std::int64_t B, std::int64_t T, std::int64_t S, std::int64_t d,
                                   bool with_mask) {
  std::vector<Tensor> v{rand_tensor({B, T, d}, 31, -1, 1), rand_tensor({B, S, d}, 32, -1, 1)};
  if (with_mask) {
    // Batch row b keeps its first S - b memory positions (a padding mask; none fully masked).
    std::vector<double> keep(std::size_t(B * S));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < S; ++s) keep[std::size_t(b * S + s)] = s < S - b ? 1.0 : 0.0;
    v.push_back(cast(constant(keep, {B, 1, S}), DType::boolean));
  }
  return v;
}

// Writes tensors as a Python dict of numpy arrays (float32, or bool).
std::string py_inputs(const std::vector<Tensor>& xs) {
  std::string s = "[";
  for (const Tensor& x : xs) {
    Tensor h = cast(x, DType::f64);
    const double* p = h.data<double>();
    s += "np.array([";
    char buf[32];
    for (std::int64_t i = 0; i < h.numel(); ++i) {
      std::snprintf(buf, sizeof buf, "%s%.17g", i ? "," : "", p[i]);  // exact
      s += buf;
    }
    s += "]).reshape(" ;
    for (std::int64_t a = 0; a < h.rank(); ++a) s += std::to_string(h.dim(a)) + ",";
    s += std::string(").astype(") + (x.dtype() == DType::boolean ? "bool" : "np.float32") + "),";
  }
  return s + "]";
}

// onnxruntime's outputs for `inputs` (skips when onnxruntime does not import).
struct OrtRun {
  bool skipped = false;
  std::string log;
  Tensor y;
};
OrtRun run_ort(nn::Model& m, const std::vector<Tensor>& inputs, std::int64_t opset, const char* tag) {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() /
                        (std::string("soma_") + tag + "_" + std::to_string(::getpid()) + ".onnx");
  onnx::export_model(m, file.string(), {.opset = opset});
  const std::string script = R"(import sys
try:
    import numpy as np, onnxruntime as ort
except Exception as e:
    print("no onnxruntime:", e); sys.exit(77)
s = ort.InferenceSession(")" + file.string() + R"(", providers=["CPUExecutionProvider"])
xs = )" + py_inputs(inputs) + R"(
y = s.run(None, {i.name: x for i, x in zip(s.get_inputs(), xs)})[0].astype(np.float64)
with open(sys.argv[1], "w") as out:
    out.write(" ".join(["y", str(y.ndim)] + [str(d) for d in y.shape] + [repr(float(a)) for a in y.flatten()]) + "\n")
)";
  auto run = soma::testing::run_torch_script(script.c_str(), tag, SOMA_ORACLE_PYTHON);
  fs::remove(file);
  OrtRun r;
  r.log = run.log;
  if (run.unavailable()) {
    r.skipped = true;
    return r;
  }
  EXPECT_EQ(run.rc, 0) << run.log;
  if (run.rc == 0) r.y = cast(run.t.at("y"), DType::f32);
  return r;
}

}  // namespace

TEST(TransformerOnnx, RMSNormAndSinePositionsRoundTrip) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(26);
  auto m = rms_sine(6, 8);
  Tensor x = rand_tensor({3, 6, 8}, 27, -1, 1);
  Tensor want = m.predict(x, {.verbose = 0});
  // ReduceMean takes its axes as an attribute before 18, as an input from 18; RMSNormalization
  // as one ONNX node only exists from 23.
  for (std::int64_t opset : {11, 13, 17, 18}) {
    SCOPED_TRACE(opset);
    const std::string bytes = onnx::export_to_bytes(m, {.opset = opset});
    for (const char* op : {"ReduceMean", "Sqrt", "Div"})
      EXPECT_NE(bytes.find(op), std::string::npos) << op;
    auto back = onnx::load_from_bytes(bytes);
    EXPECT_TRUE(all_close(back->predict(x, {.verbose = 0}), want, 1e-5, 1e-5));
  }
}

TEST(TransformerOnnx, SinePositionsWithoutAddAreRefused) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  nn::Sequential m{nn::Input({4, 6}), nn::SinePositionEncoding()};
  m.predict(zeros({1, 4, 6}), {.verbose = 0});
  EXPECT_THROW(onnx::export_to_bytes(m, {.opset = 17}), Error);
}

TEST(TransformerOnnx, DecoderLayerRoundTrips) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  for (bool norm_first : {false, true})
    for (bool with_mask : {false, true}) {
      SCOPED_TRACE(std::string(norm_first ? "pre" : "post") + (with_mask ? ", mask" : ""));
      set_seed(28);
      auto m = decoder_model(5, 7, 8, norm_first, with_mask);
      const std::string bytes = onnx::export_to_bytes(*m, {.opset = 17});
      EXPECT_NE(bytes.find("Trilu"), std::string::npos);  // the causal self-attention
      auto back = onnx::load_from_bytes(bytes);
      auto xs = decoder_inputs(3, 5, 7, 8, with_mask);
      auto want = m->predict(xs, {.verbose = 0});
      auto got = back->predict(xs, {.verbose = 0});
      ASSERT_EQ(got.size(), 1u);
      ASSERT_EQ(got[0].shape(), want.at(0).shape());
      EXPECT_TRUE(all_close(got[0], want[0], 1e-5, 1e-5));
      if (with_mask) {  // the mask is used: another mask gives other outputs
        auto xs2 = xs;
        xs2[2] = cast(ones({3, 1, 7}), DType::boolean);
        EXPECT_FALSE(all_close(back->predict(xs2, {.verbose = 0})[0], want[0], 1e-5, 1e-5));
      }
    }
}

// TransformerEncoderLayer {src, attention_mask}: a padding mask [B, 1, T] with the causal one.
TEST(TransformerOnnx, EncoderLayerWithAMaskInputRoundTrips) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(30);
  auto src = nn::Input({6, 8});
  auto mask = nn::Input({1, 6}, {.dtype = DType::boolean});
  auto y = nn::call(nn::TransformerEncoderLayer(8, 2, {.dim_feedforward = 16, .causal = true}),
                    std::vector<nn::SymbolicTensor>{src, mask})[0];
  nn::Model m(std::vector<nn::SymbolicTensor>{src, mask}, std::vector<nn::SymbolicTensor>{y});
  m.eval();
  auto xs = decoder_inputs(3, 6, 6, 8, true);  // [3, 6, 8], [3, 6, 8], mask [3, 1, 6]
  std::vector<Tensor> ins{xs[0], xs[2]};
  auto back = onnx::load_from_bytes(onnx::export_to_bytes(m, {.opset = 17}));
  auto want = m.predict(ins, {.verbose = 0});
  EXPECT_TRUE(all_close(back->predict(ins, {.verbose = 0}).at(0), want.at(0), 1e-5, 1e-5));
  // The mask is used: all-true gives other outputs.
  std::vector<Tensor> open{xs[0], cast(ones({3, 1, 6}), DType::boolean)};
  EXPECT_FALSE(all_close(back->predict(open, {.verbose = 0}).at(0), want.at(0), 1e-5, 1e-5));
  auto r = run_ort(m, ins, 17, "enc_mask_ort");
  if (r.skipped) GTEST_SKIP() << r.log;
  ASSERT_TRUE(r.y.defined()) << r.log;
  EXPECT_TRUE(all_close(r.y, want.at(0), 1e-4, 1e-4));
}

TEST(TransformerOnnx, OnnxRuntimeRunsDecoderRMSNormAndSine) {
  if (!onnx::available()) GTEST_SKIP() << "built without ONNX";
  set_seed(29);
  auto dec = decoder_model(5, 7, 8, /*norm_first=*/true, /*with_mask=*/true);
  auto xs = decoder_inputs(2, 5, 7, 8, true);
  auto r = run_ort(*dec, xs, 17, "dec_ort");
  if (r.skipped) GTEST_SKIP() << r.log;
  ASSERT_TRUE(r.y.defined()) << r.log;
  EXPECT_TRUE(all_close(r.y, dec->predict(xs, {.verbose = 0}).at(0), 1e-4, 1e-4));

  auto m = rms_sine(6, 8);
  Tensor x = rand_tensor({2, 6, 8}, 30, -1, 1);
  auto r2 = run_ort(m, {x}, 13, "rms_ort");
  ASSERT_TRUE(r2.y.defined()) << r2.log;
  EXPECT_TRUE(all_close(r2.y, m.predict(x, {.verbose = 0}), 1e-4, 1e-4));
}
