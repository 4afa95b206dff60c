// ONNX export of a byte-level GPT (examples/char_transformer's model): Embedding,
// PositionalEmbedding, causal TransformerEncoderLayers (their MultiHeadAttention lowered through
// the scaled_dot_product_attention op, which the exporter writes as MatMul/Softmax/Where with a
// Trilu causal mask), LayerNormalization and Dense; the export imports back and matches.
#include <gtest/gtest.h>
#include <unistd.h>

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

// An outside reader: onnxruntime (from PyPI, when the python3 on PATH or SOMA_TEST_PYTHON imports
// it; skipped otherwise) runs the exported GPT and gives soma's outputs (to 1e-4).
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
  // onnxruntime comes from PyPI: the python3 on PATH, unless SOMA_TEST_PYTHON names another.
  ::setenv("SOMA_TEST_PYTHON", "python3", /*overwrite=*/0);
  auto run = soma::testing::run_torch_script(script.c_str(), "gpt_ort");
  fs::remove(file);
  if (run.unavailable()) GTEST_SKIP() << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  std::vector<std::int64_t> ids(32);
  for (std::int64_t i = 0; i < 32; ++i) ids[std::size_t(i)] = (i * 37 + 11) % 256;
  Tensor want = m.predict(constant(ids, {2, 16}), {.verbose = 0});
  EXPECT_TRUE(all_close(cast(run.t.at("y"), DType::f32), want, 1e-4, 1e-4));
}
