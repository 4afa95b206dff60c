// Interop: models exported by PyTorch (tests/onnx/torch_export.py, run with Debian's
// python3-torch) load in soma, give PyTorch's outputs on PyTorch's inputs, and fine-tune.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "emulated_device.hpp"
#include "test_support.hpp"

#ifndef SOMA_ONNX_PYTHON
#define SOMA_ONNX_PYTHON "/usr/bin/python3"
#endif
#ifndef SOMA_ONNX_SCRIPTS
#define SOMA_ONNX_SCRIPTS "tests/onnx"
#endif
#ifndef SOMA_ONNX_WORKDIR
#define SOMA_ONNX_WORKDIR "onnx_data"
#endif

using namespace soma;
namespace fs = std::filesystem;
using soma::testing::all_close;

namespace {

const fs::path kDir = fs::path(SOMA_ONNX_WORKDIR) / "torch";

// Runs the exporter: 0 ok, 77 torch missing, else a failure (its log in *log). ctest runs each
// test in its own process, so the result is kept in a stamp file (under a lock) and reused while
// it is newer than the script: PyTorch starts once per build, not once per test.
int export_once(std::string* log) {
  static int rc = -2;
  static std::string text;
  if (rc != -2) {
    *log = text;
    return rc;
  }
  fs::create_directories(kDir);
  const fs::path script = fs::path(SOMA_ONNX_SCRIPTS) / "torch_export.py";
  const fs::path out = kDir / "export.log", stamp = kDir / "export.status";
  int lock = ::open((kDir / ".lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock >= 0) ::flock(lock, LOCK_EX);
  std::error_code ec;
  if (fs::exists(stamp) && fs::last_write_time(stamp, ec) > fs::last_write_time(script, ec)) {
    std::ifstream(stamp) >> rc;
  } else {
    std::string cmd = std::string(SOMA_ONNX_PYTHON) + " '" + script.string() + "' '" +
                      kDir.string() + "' > '" + out.string() + "' 2>&1";
    int s = std::system(cmd.c_str());
    rc = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
    if (rc == 0 || rc == 77) std::ofstream(stamp) << rc << "\n";
  }
  if (lock >= 0) ::close(lock);
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  text = ss.str();
  *log = text;
  return rc;
}

// A float32 file written by numpy's tofile, with its shape from NAME.shape.
Tensor read_bin(const std::string& name, const std::string& which) {
  std::ifstream sf(kDir / (name + ".shape"));
  std::string line;
  Shape shape;
  while (std::getline(sf, line)) {
    std::istringstream ls(line);
    std::string tag;
    ls >> tag;
    if (tag != which) continue;
    for (std::int64_t d; ls >> d;) shape.push_back(d);
  }
  EXPECT_FALSE(shape.empty()) << "no shape for " << name << " " << which;
  // A line "xtype i64" marks token ids written as int64.
  sf.clear();
  sf.seekg(0);
  DType dt = DType::f32;
  while (std::getline(sf, line))
    if (line == which + "type i64") dt = DType::i64;
  Tensor t = Tensor::empty(shape, dt);
  std::ifstream f(kDir / (name + "_" + which + ".bin"), std::ios::binary);
  f.read(static_cast<char*>(t.raw_data()), std::streamsize(t.numel() * dtype_size(dt)));
  EXPECT_TRUE(bool(f)) << "short file for " << name << " " << which;
  return t;
}

class TorchInterop : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
    std::string log;
    int rc = export_once(&log);
    if (rc == 77) GTEST_SKIP() << SOMA_ONNX_PYTHON " cannot import torch: " << log;
    ASSERT_EQ(rc, 0) << "torch_export.py failed:\n" << log;
  }
};

}  // namespace

TEST_P(TorchInterop, LoadsAndGivesPyTorchsOutputs) {
  const std::string name = GetParam();
  auto model = onnx::load((kDir / (name + ".onnx")).string());
  model->eval();
  Tensor x = read_bin(name, "x");
  Tensor want = read_bin(name, "y");
  Tensor got = (*model)(x);
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(all_close(got, want, 1e-5, 1e-5));
  // Another batch size: PyTorch's dynamic batch axis.
  Tensor x1 = slice(x, {Slice{1, 3}});
  EXPECT_TRUE(all_close((*model)(x1), slice(want, {Slice{1, 3}}), 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(PyTorch, TorchInterop,
                         ::testing::Values("mlp", "cnn", "cnn2", "deconv", "norm", "hard", "rnn", "lstm",
                                           "gru", "bilstm", "bigru"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

class TorchFineTune : public TorchInterop {};

TEST_P(TorchFineTune, LossFallsWhenFineTunedInSoma) {
  const std::string name = GetParam();
  auto model = onnx::load((kDir / (name + ".onnx")).string());
  set_seed(5);
  Tensor x = read_bin(name, "x");
  // Targets: one-hot classes i % C for sample i (something the model must learn).
  model->eval();
  const Shape ys = (*model)(x).shape();
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < ys[0]; ++i) labels.push_back(i % ys[1]);
  Tensor target = one_hot(constant(labels, Shape{ys[0]}), ys[1]);
  model->compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
  auto h = model->fit(x, target, {.epochs = 10, .batch_size = 8, .shuffle = false, .verbose = 0});
  EXPECT_LT(h["loss"].back(), h["loss"].front()) << name << ": " << h["loss"].front() << " -> " << h["loss"].back();
  EXPECT_GT(model->trainable_parameters().size(), 0u);
  // The fine-tuned model exports as PyTorch's graph with the new weights.
  model->eval();
  auto again = onnx::load_from_bytes(onnx::export_to_bytes(*model));
  EXPECT_TRUE(all_close((*again)(x), (*model)(x), 1e-6, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(PyTorch, TorchFineTune, ::testing::Values("mlp", "cnn", "lstm"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Issue 25's seven PyTorch modules (opset 17): each must import and match PyTorch within 1e-5,
// at the exported batch and at another one. Any that soma cannot yet run is listed in
// kExpectedFailures with the reason and skipped (never passed silently).
namespace {
const std::map<std::string, std::string> kExpectedFailures = {};

float max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  return max(abs(a.cast(DType::f32) - b)).to_vector<float>()[0];
}
}  // namespace

class TorchIssue25 : public TorchInterop {};

TEST_P(TorchIssue25, MatchesPyTorchWithin1e5) {
  const std::string name = GetParam();
  if (auto it = kExpectedFailures.find(name); it != kExpectedFailures.end())
    GTEST_SKIP() << "expected failure: " << it->second;
  auto model = onnx::load((kDir / (name + ".onnx")).string());
  model->eval();
  Tensor x = read_bin(name, "x");
  Tensor want = read_bin(name, "y");
  Tensor got = (*model)(x);
  ASSERT_EQ(got.shape(), want.shape());
  const float d = max_abs_diff(got, want);
  std::printf("[ %s ] max |soma - torch| = %.3g\n", name.c_str(), double(d));
  EXPECT_TRUE(all_close(got, want, 1e-5, 1e-5)) << name << ": max abs diff " << d;
  Tensor x1 = slice(x, {Slice{1, 3}});
  EXPECT_TRUE(all_close((*model)(x1), slice(want, {Slice{1, 3}}), 1e-5, 1e-5)) << name << " at batch 2";
}

INSTANTIATE_TEST_SUITE_P(PyTorch, TorchIssue25,
                         ::testing::Values("transformer", "mha", "gpt2", "embed", "upsample", "convt",
                                           "groupnorm"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Issue 24: PyTorch's models imported and moved to a device give the CPU's outputs (on the CPU
// stand-in device here; test_cuda_onnx covers a real GPU), and torchvision's ResNet-18 and
// MobileNetV2 (exported only when torchvision is importable) match PyTorch.
class TorchOnDevice : public TorchInterop {
 protected:
  void SetUp() override {
    TorchInterop::SetUp();
    if (IsSkipped()) return;
    if (!fs::exists(kDir / (GetParam() + ".onnx")))
      GTEST_SKIP() << GetParam() << ".onnx was not exported (torchvision is not importable)";
  }
};

TEST_P(TorchOnDevice, MatchesPyTorchAndTheCpuOnTheDeviceStandIn) {
  const std::string name = GetParam();
  const std::string path = (kDir / (name + ".onnx")).string();
  auto cpu = onnx::load(path);
  cpu->eval();
  Tensor x = read_bin(name, "x");
  Tensor want = read_bin(name, "y");
  Tensor on_cpu = (*cpu)(x);
  EXPECT_TRUE(all_close(on_cpu, want, 1e-4, 1e-4)) << name << ": max abs diff "
                                                   << max_abs_diff(on_cpu, want);
  soma::testing::EmulatedCuda gpu;
  auto dev = onnx::load(path);
  dev->eval();
  dev->to(gpu.device());
  Tensor got = dev->predict(x, {.batch_size = 2});
  EXPECT_TRUE(all_close(got, on_cpu, 1e-6, 1e-6)) << name << ": max abs diff "
                                                  << max_abs_diff(got, on_cpu);
}

INSTANTIATE_TEST_SUITE_P(PyTorch, TorchOnDevice,
                         ::testing::Values("cnn", "cnn2", "lstm", "bigru", "transformer", "gpt2",
                                           "resnet18", "mobilenet_v2"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
