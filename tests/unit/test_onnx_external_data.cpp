// Import of ONNX models whose initialisers live in external data files (location, offset,
// length; relative to the model file), the errors for a path leaving the model's folder, a
// file too short, or bytes without a file; models listing their initialisers as graph inputs.
// tests/onnx/external_data.py writes the files with the onnx package; the tests skip without it.
// A model over 2 GB (the protobuf limit; its data external) only with SOMA_TEST_LARGE_ONNX=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"
#include "torch_script.hpp"

#ifndef SOMA_ONNX_SCRIPTS
#define SOMA_ONNX_SCRIPTS "tests/onnx"
#endif
#ifndef SOMA_ORT_PYTHON
#define SOMA_ORT_PYTHON SOMA_ORACLE_PYTHON
#endif

using namespace soma;
namespace fs = std::filesystem;
using soma::testing::all_close;
using soma::testing::error_of;

namespace {

fs::path fresh_dir(const std::string& tag) {
  fs::path d = fs::temp_directory_path() / ("soma_extdata_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Runs tests/onnx/external_data.py DIR MODE; its tensors come back in run.t.
soma::testing::TorchRun run_script(const fs::path& dir, const std::string& mode) {
  const std::string script = fs::absolute(fs::path(SOMA_ONNX_SCRIPTS) / "external_data.py").string();
  const std::string runner = "import runpy, sys\nsys.argv = ['" + script + "', sys.argv[1], '" +
                             dir.string() + "', '" + mode + "']\nrunpy.run_path(sys.argv[0], run_name='__main__')\n";
  return soma::testing::run_torch_script(runner.c_str(), "extdata_" + mode, SOMA_ORT_PYTHON);
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(OnnxExternalData, ModelsWithExternalInitialisersLoadAndPredict) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  set_seed(3);
  nn::Sequential model{nn::Input({2, 6, 6}), nn::Conv2D(8, 3, {.activation = nn::relu}),
                       nn::BatchNormalization({.axis = 1}), nn::Flatten(), nn::Dense(16)};
  const Tensor x = soma::testing::rand_tensor({3, 2, 6, 6}, 5, -1, 1).cast(DType::f32);
  model.eval();
  const Tensor want = model(x);
  const fs::path dir = fresh_dir("small");
  onnx::export_model(model, (dir / "model.onnx").string());
  auto run = run_script(dir, "small");
  if (run.unavailable()) GTEST_SKIP() << "onnx not importable: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  const fs::path ext = dir / "ext";
  ASSERT_TRUE(fs::exists(ext / "weights.bin")) << run.log;
  // The .onnx holds no weights: they are read from weights.bin.
  EXPECT_LT(fs::file_size(ext / "model.onnx"), fs::file_size(ext / "weights.bin"));

  auto loaded = onnx::load((ext / "model.onnx").string());
  loaded->eval();
  EXPECT_TRUE(all_close((*loaded)(x), want, 1e-6, 1e-6));
  // A relative path to the model file works too (the folder is the file's).
  {
    const fs::path cwd = fs::current_path();
    fs::current_path(dir);
    auto rel = onnx::load("ext/model.onnx");
    fs::current_path(cwd);
    rel->eval();
    EXPECT_TRUE(all_close((*rel)(x), want, 1e-6, 1e-6));
  }
  // Exported again, the weights are in the file itself.
  auto again = onnx::load_from_bytes(onnx::export_to_bytes(*loaded));
  again->eval();
  EXPECT_TRUE(all_close((*again)(x), want, 1e-6, 1e-6));

  // A Constant node's value, external too.
  {
    auto cm = onnx::load((ext / "constants.onnx").string());
    Tensor y = (*cm)(run.t.at("constants_x").cast(DType::f32));
    EXPECT_TRUE(all_close(y, run.t.at("constants_y").cast(DType::f32), 1e-6, 1e-6));
  }

  // Initialisers listed as graph inputs (IR version 3) are weights, not inputs.
  auto listed = onnx::load((ext / "inputs_listed.onnx").string());
  listed->eval();
  EXPECT_TRUE(all_close((*listed)(x), want, 1e-6, 1e-6));

  // Bytes alone cannot say where the data file is.
  std::string e = error_of([&] { onnx::load_from_bytes(slurp(ext / "model.onnx")); });
  EXPECT_TRUE(has(e, "weights.bin") && has(e, "onnx::load(path)") && has(e, "initializer '")) << e;
  // A location leaving the model's folder is refused, naming the tensor and the file.
  e = error_of([&] { onnx::load((ext / "escape.onnx").string()); });
  EXPECT_TRUE(has(e, "../weights.bin") && has(e, "outside the model's folder") && has(e, "initializer '"))
      << e;
  // An absolute location is refused even where it names the model's own folder.
  e = error_of([&] { onnx::load((ext / "absolute.onnx").string()); });
  EXPECT_TRUE(has(e, "outside the model's folder") && has(e, "initializer '")) << e;
  // A data file shorter than the tensors need.
  fs::resize_file(ext / "weights.bin", fs::file_size(ext / "weights.bin") - 4);
  e = error_of([&] { onnx::load((ext / "model.onnx").string()); });
  EXPECT_TRUE(has(e, "weights.bin") && has(e, "fewer than") && has(e, "initializer '")) << e;
  fs::remove(ext / "weights.bin");
  e = error_of([&] { onnx::load((ext / "model.onnx").string()); });
  EXPECT_TRUE(has(e, "weights.bin") && has(e, "cannot open")) << e;
  fs::remove_all(dir);
}

TEST(OnnxExternalData, AModelOverTwoGigabytesLoads) {
  if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  const char* env = std::getenv("SOMA_TEST_LARGE_ONNX");
  if (!env || std::string(env) != "1")
    GTEST_SKIP() << "set SOMA_TEST_LARGE_ONNX=1 (a 2.2 GB sparse file, 2.2 GB of memory)";
  const fs::path dir = fresh_dir("large");
  auto run = run_script(dir, "large");
  if (run.unavailable()) GTEST_SKIP() << "onnx not importable: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  EXPECT_GT(fs::file_size(dir / "large" / "big.bin"), std::uintmax_t(1) << 31);
  EXPECT_LT(fs::file_size(dir / "large" / "model.onnx"), 4096u);
  auto m = onnx::load((dir / "large" / "model.onnx").string());
  Tensor ids = run.t.at("ids").cast(DType::i64);
  Tensor y = (*m)(ids);
  Tensor want = add(run.t.at("table_rows"), run.t.at("bias")).cast(DType::f32);
  EXPECT_TRUE(all_close(y, want, 0, 0));
  m.reset();
  fs::remove_all(dir);
}
