// Imported ONNX models on a device (issue 24): a model loaded with soma::onnx::load runs after
// `.to(device)` and gives the CPU's outputs; its weights (initialisers) move with it and its
// constants (integer initialisers, Constant nodes) reach the device once. Each case runs on the
// CPU stand-in device (tests/support/emulated_device.hpp) everywhere and on cuda:0 when a GPU is
// usable (in full f32: TF32 off), so scripts/gpu-check.sh runs it on the GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../onnx/model_bytes.hpp"
#include "emulated_device.hpp"
#include "soma/onnx.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;

namespace {

enum class Where { StandIn, Gpu };

Tensor randf(const Shape& s, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return soma::testing::rand_tensor(s, seed, lo, hi).cast(DType::f32);
}

// Non-default batch-norm statistics and affine weights, so that the exported file carries them.
void perturb_batch_norms(nn::Module& m, std::uint64_t seed) {
  NoGradScope no_grad;
  for (auto& [name, v] : m.named_parameters()) {
    Variable var = v;
    if (name.find("moving_mean") != std::string::npos) var.assign(randf(v.shape(), seed++, -0.5, 0.5));
    if (name.find("moving_variance") != std::string::npos)
      var.assign(randf(v.shape(), seed++, 0.5, 1.5));
    if (name.find("gamma") != std::string::npos) var.assign(randf(v.shape(), seed++, 0.5, 1.5));
    if (name.find("beta") != std::string::npos) var.assign(randf(v.shape(), seed++, -0.3, 0.3));
  }
}

// A ResNet-like network: stem conv + batch norm, a residual block (two convs, batch norm, the
// skip added), pooling, a dense head with softmax.
std::string resnet_like_bytes() {
  using namespace nn;
  auto x = Input({3, 16, 16});
  auto h = call(Conv2D(8, 3, {.padding = "same"}), x);
  h = call(BatchNormalization({.axis = 1}), h);
  h = call(ReLU(), h);
  auto r = call(Conv2D(8, 3, {.padding = "same", .activation = nn::relu}), h);
  r = call(Conv2D(8, 3, {.padding = "same"}), r);
  r = call(BatchNormalization({.axis = 1}), r);
  auto s = call(Add(), {h, r})[0];
  s = call(ReLU(), s);
  s = call(MaxPool2D(2), s);
  s = call(Conv2D(16, 3, {.strides = 2, .padding = "same", .activation = nn::relu}), s);
  s = call(GlobalAveragePooling2D(), s);
  auto y = call(Dense(10, nn::softmax), s);
  auto m = std::make_shared<Model>(x, y);
  perturb_batch_norms(*m, 11);
  return onnx::export_to_bytes(*m);
}

std::string lstm_bytes() {
  using namespace nn;
  auto m = std::make_shared<Sequential>(Input({7, 3}), LSTM(6, {.return_sequences = true}),
                                        LSTM(5), Dense(4));
  return onnx::export_to_bytes(*m);
}

// TensorProto (dims 1, data_type 2, raw_data 9) as a Constant node's `value` attribute (t 5,
// type TENSOR 4).
std::string attr_tensor(const Shape& dims, int elem_type, const void* data, std::size_t bytes) {
  using namespace onnx_test;
  std::string t;
  for (auto d : dims) t += int_field(1, d);
  t += int_field(2, elem_type);
  t += bytes_field(9, std::string(static_cast<const char*>(data), bytes));
  return bytes_field(1, "value") + bytes_field(5, t) + int_field(20, 4);
}
onnx_test::NodeDef constant_node(const std::string& out, const Tensor& v, int elem_type) {
  return {"Constant", {}, {out},
          {attr_tensor(v.shape(), elem_type, v.raw_data(), std::size_t(v.numel()) * dtype_size(v.dtype()))}, out};
}

// x [N, 6] -> MatMul with a constant [6, 4] -> Add a constant [4] -> Reshape to a constant
// shape [-1, 2, 2] -> Relu; every operand a Constant node (float and integer), no initialiser.
std::string constants_bytes(bool with_gather) {
  using namespace onnx_test;
  std::vector<NodeDef> nodes{
      constant_node("w", randf({6, 4}, 21), kFloat),
      constant_node("b", randf({4}, 22), kFloat),
      constant_node("shape", constant<std::int64_t>({-1, 2, 2}, Shape{3}), kInt64),
      {"MatMul", {"x", "w"}, {"xw"}, {}, "mm"},
      {"Add", {"xw", "b"}, {"z"}, {}, "add"},
      {"Reshape", {"z", "shape"}, {"r"}, {}, "reshape"},
      {"Relu", {"r"}, {"y"}, {}, "relu"}};
  if (with_gather) {  // integer indices from a constant used as data, on axis 2
    nodes.push_back(constant_node("idx", constant<std::int64_t>({1, 0, 1}, Shape{3}), kInt64));
    nodes.push_back({"Gather", {"y", "idx"}, {"g"}, {attr_int("axis", 2)}, "gather"});
  }
  return onnx_model(nodes, {{"x", {-1, 6}}}, with_gather ? "g" : "y", 13);
}

// x [N, 6] -> If (a Constant condition) whose branches compute with their own Constant nodes
// (float and integer: host constants of the sub-graph) -> [N, 2, 2]. then: relu(reshape(x @ w +
// b)); else: reshape(x @ w2).
std::string if_bytes(bool condition) {
  using namespace onnx_test;
  auto sub = [](const std::vector<NodeDef>& nodes, const std::string& out) {
    std::string g;
    for (auto& n : nodes) g += bytes_field(1, node(n));
    return g + bytes_field(2, "branch") + bytes_field(12, bytes_field(1, out));
  };
  auto attr_graph = [](const std::string& name, const std::string& g) {
    return bytes_field(1, name) + bytes_field(6, g) + int_field(20, 5);
  };
  const Tensor shape = constant<std::int64_t>({-1, 2, 2}, Shape{3});
  const std::string then_g =
      sub({constant_node("w", randf({6, 4}, 41), kFloat), constant_node("b", randf({4}, 42), kFloat),
           constant_node("s", shape, kInt64), {"MatMul", {"x", "w"}, {"xw"}, {}, "mm"},
           {"Add", {"xw", "b"}, {"z"}, {}, "add"}, {"Reshape", {"z", "s"}, {"r"}, {}, "reshape"},
           {"Relu", {"r"}, {"t"}, {}, "relu"}},
          "t");
  const std::string else_g =
      sub({constant_node("w2", randf({6, 4}, 43), kFloat), constant_node("s2", shape, kInt64),
           {"MatMul", {"x", "w2"}, {"e0"}, {}, "mm2"}, {"Reshape", {"e0", "s2"}, {"e"}, {}, "r2"}},
          "e");
  const Tensor c = cast(constant<float>({condition ? 1.0f : 0.0f}, Shape{}), DType::boolean);
  return onnx_model({constant_node("c", c, kBool),
                     {"If", {"c"}, {"y"}, {attr_graph("then_branch", then_g),
                                           attr_graph("else_branch", else_g)}, "if"}},
                    {{"x", {-1, 6}}}, "y", 13);
}

class OnnxOnDevice : public ::testing::TestWithParam<Where> {
 protected:
  void SetUp() override {
    if (!onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
    if (GetParam() == Where::Gpu) {
      if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason();
      tf32_ = cuda::allow_tf32();
      cuda::set_allow_tf32(false);  // the comparison with the CPU is in full f32
      tol_ = 1e-4;  // cuDNN/cuBLAS sum in other orders than oneDNN/OpenBLAS
    } else {
      standin_.emplace();
    }
  }
  void TearDown() override {
    if (GetParam() == Where::Gpu && cuda::is_available()) cuda::set_allow_tf32(tf32_);
    standin_.reset();
  }
  Device device() const { return Device::cuda(0); }

  // Loads `bytes` twice, moves one copy to the device and compares predictions on `x` (a host
  // tensor: predict returns host outputs) and a direct call on device input (device output).
  void expect_device_matches_cpu(const std::string& bytes, const Tensor& x) {
    auto cpu = onnx::load_from_bytes(bytes);
    auto dev = onnx::load_from_bytes(bytes);
    cpu->eval();
    dev->eval();
    dev->to(device());
    for (auto& [name, v] : dev->named_parameters(false))
      EXPECT_EQ(v.value().device(), device()) << name << " stayed on " << v.value().device().str();
    const Tensor want = cpu->predict(x, {.batch_size = 4});
    const Tensor got = dev->predict(x, {.batch_size = 4});
    ASSERT_TRUE(got.device().is_cpu());
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(all_close(got, want, tol_, tol_));
    const Tensor direct = (*dev)(x.to(device()));
    EXPECT_EQ(direct.device(), device());
    EXPECT_TRUE(all_close(direct.to(Device::cpu()), (*cpu)(x), tol_, tol_));
  }

  std::optional<soma::testing::EmulatedCuda> standin_;
  double tol_ = 1e-6;
  bool tf32_ = true;
};

}  // namespace

TEST_P(OnnxOnDevice, ResNetLikeModelMatchesTheCpu) {
  expect_device_matches_cpu(resnet_like_bytes(), randf({9, 3, 16, 16}, 1));
}

TEST_P(OnnxOnDevice, LstmModelMatchesTheCpu) {
  // The recurrent handler makes its zero initial states on the input's device.
  expect_device_matches_cpu(lstm_bytes(), randf({5, 7, 3}, 2));
}

TEST_P(OnnxOnDevice, ConstantNodesFollowTheModelAndCrossOnce) {
  const std::string bytes = constants_bytes(false);
  expect_device_matches_cpu(bytes, randf({5, 6}, 3));
  auto dev = onnx::load_from_bytes(bytes);
  dev->to(device());
  const Tensor x = randf({5, 6}, 4).to(device());
  (void)(*dev)(x);  // the float constants are copied to the device here, once
  cuda::reset_transfer_stats();
  const Tensor y = (*dev)(x);
  const auto st = cuda::transfer_stats();
  EXPECT_EQ(st.host_to_device_copies, 0u) << st.host_to_device_bytes << " bytes";
  EXPECT_EQ(st.device_to_host_copies, 0u) << "Reshape's shape is read on the host, not copied back";
  EXPECT_EQ(y.device(), device());
  EXPECT_EQ(y.shape(), (Shape{5, 2, 2}));
}

TEST_P(OnnxOnDevice, IntegerConstantsUsedAsIndicesWork) {
  expect_device_matches_cpu(constants_bytes(true), randf({3, 6}, 5));
}

TEST_P(OnnxOnDevice, SubGraphConstantsFollowTheModel) {
  // If's branches are Programs like the main graph: their host constants reach the device (once,
  // then cached), shapes are read on the host.
  for (bool c : {true, false}) {
    const std::string bytes = if_bytes(c);
    expect_device_matches_cpu(bytes, randf({5, 6}, 44));
    auto dev = onnx::load_from_bytes(bytes);
    dev->to(device());
    const Tensor x = randf({5, 6}, 45).to(device());
    (void)(*dev)(x);
    cuda::reset_transfer_stats();
    const Tensor y = (*dev)(x);
    const auto st = cuda::transfer_stats();
    EXPECT_EQ(st.host_to_device_copies, 0u) << c << ": " << st.host_to_device_bytes << " bytes";
    EXPECT_EQ(y.device(), device());
  }
}

TEST_P(OnnxOnDevice, FineTuningOnTheDeviceMatchesTheCpu) {
  // Imported weights are trainable: one SGD step on each side gives the same weights.
  const std::string bytes = lstm_bytes();
  auto cpu = onnx::load_from_bytes(bytes);
  auto dev = onnx::load_from_bytes(bytes);
  dev->to(device());
  for (auto* m : {cpu.get(), dev.get()})
    m->compile(optim::SGD({.learning_rate = 0.1}), nn::MeanSquaredError());
  const Tensor x = randf({6, 7, 3}, 6), y = randf({6, 4}, 7);
  cpu->fit(x, y, {.epochs = 1, .batch_size = 3, .shuffle = false, .verbose = 0});
  dev->fit(x, y, {.epochs = 1, .batch_size = 3, .shuffle = false, .verbose = 0});
  auto a = cpu->state_dict(), b = dev->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (auto& [name, t] : a) EXPECT_TRUE(all_close(b.at(name), t, tol_, tol_)) << name;
}

TEST_P(OnnxOnDevice, ConvThenReluRunsAsOneFusedOp) {
  // Conv2D(relu) exports as Conv + Relu: the import runs them as one conv2d_bias_act. A Conv whose
  // output is also read elsewhere (here: a graph output too) is left alone.
  using namespace nn;
  auto x = Input({3, 8, 8});
  auto a = call(Conv2D(4, 3, {.padding = "same", .activation = nn::relu}), x);
  auto b = call(Conv2D(4, 3, {.padding = "same"}), a);
  auto y = call(Dense(2), call(Flatten(), call(ReLU(), b)));
  auto m = std::make_shared<Model>(std::vector<SymbolicTensor>{x},
                                   std::vector<SymbolicTensor>{y, b});
  const std::string bytes = onnx::export_to_bytes(*m);
  auto imported = onnx::load_from_bytes(bytes);
  std::ostringstream summary;
  imported->summary(summary);
  EXPECT_NE(summary.str().find("; 1 Conv+Relu fused)"), std::string::npos) << summary.str();
  // The fused model gives the original model's outputs (on the CPU), and the device the CPU's.
  const Tensor in = randf({2, 3, 8, 8}, 9);
  const auto want = m->call({in});
  const auto got = imported->call({in});
  ASSERT_EQ(got.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) EXPECT_TRUE(all_close(got[k], want[k], 1e-5, 1e-5)) << k;
  auto dev = onnx::load_from_bytes(bytes);
  dev->to(device());
  const auto on_dev = dev->call({in.to(device())});
  for (std::size_t k = 0; k < 2; ++k)
    EXPECT_TRUE(all_close(on_dev[k].to(Device::cpu()), want[k], tol_ + 1e-5, tol_ + 1e-5)) << k;
}

TEST_P(OnnxOnDevice, BatchNormAfterConvIsFoldedAndTrainsTheSame) {
  // Conv -> BatchNormalization -> Relu (torchvision's ResNet pattern) runs as one
  // conv2d_bias_act with the batch norm folded into kernel and bias, on any device; fitting the
  // imported model on the device gives the CPU's weights (the fold is differentiable).
  using namespace nn;
  auto m = std::make_shared<Sequential>(Input({3, 8, 8}), Conv2D(6, 3, {.padding = "same"}),
                                        BatchNormalization({.axis = 1}), ReLU(),
                                        Conv2D(4, 3, {.strides = 2, .use_bias = false}),
                                        BatchNormalization({.axis = 1}), GlobalAveragePooling2D(),
                                        Dense(3));
  perturb_batch_norms(*m, 31);
  const std::string bytes = onnx::export_to_bytes(*m);
  auto cpu = onnx::load_from_bytes(bytes);
  std::ostringstream summary;
  cpu->summary(summary);
  EXPECT_NE(summary.str().find("; 2 BatchNormalization folded into Conv; 1 Conv+Relu fused)"),
            std::string::npos)
      << summary.str();
  m->eval();
  cpu->eval();
  const Tensor in = randf({5, 3, 8, 8}, 12);
  EXPECT_TRUE(all_close((*cpu)(in), (*m)(in), 1e-5, 1e-5));
  auto dev = onnx::load_from_bytes(bytes);
  dev->to(device());
  EXPECT_TRUE(all_close(dev->predict(in), (*cpu)(in), tol_ + 1e-6, tol_ + 1e-6));
  for (auto* model : {cpu.get(), dev.get()})
    model->compile(optim::SGD({.learning_rate = 0.05}), nn::MeanSquaredError());
  const Tensor y = randf({5, 3}, 13);
  cpu->fit(in, y, {.epochs = 2, .batch_size = 5, .shuffle = false, .verbose = 0});
  dev->fit(in, y, {.epochs = 2, .batch_size = 5, .shuffle = false, .verbose = 0});
  auto a = cpu->state_dict(), b = dev->state_dict();
  for (auto& [name, t] : a) EXPECT_TRUE(all_close(b.at(name), t, tol_, tol_)) << name;
  // Inference keeps the folded weights; new weights (load_state_dict writes in place) must not
  // be served from the old fold.
  auto fresh = onnx::load_from_bytes(bytes);
  fresh->to(device());
  const Tensor before = fresh->predict(in);
  fresh->load_state_dict(a);
  const Tensor after = fresh->predict(in);
  EXPECT_TRUE(all_close(after, cpu->predict(in), tol_ + 1e-6, tol_ + 1e-6));
  EXPECT_FALSE(all_close(after, before, 1e-4, 1e-4)) << "the fit did not change the outputs";
}

INSTANTIATE_TEST_SUITE_P(Devices, OnnxOnDevice, ::testing::Values(Where::StandIn, Where::Gpu),
                         [](const auto& info) {
                           return std::string(info.param == Where::StandIn ? "StandIn" : "Gpu");
                         });
