// CPU == CUDA for every built-in layer: each layer type of the model-file registry
// (serialization::registered_layers()) is built on a sample input on the CPU, a twin gets the
// same weights and moves to cuda:0 (Module::to), and both run forward in training mode with a
// tape: outputs, the gradients of the input and of every trainable weight, and the weights after
// the pass (batch norm's moving statistics) must agree within the dtype's tolerance.
// The samples table below must name every registered layer (a meta-test checks it, GPU or not);
// the comparisons skip without a usable GPU.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "soma/cuda.hpp"
#include "soma/model/merge.hpp"
#include "soma/model/serialization.hpp"
#include "soma/nn/conv.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/normalization.hpp"
#include "soma/nn/preprocessing.hpp"
#include "soma/nn/recurrent.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

struct InputSpec {
  Shape shape;
  DType dtype = DType::f32;
  double lo = -1.0, hi = 1.0;  // integers: indices in [lo, hi)
};

struct LayerSample {
  std::function<nn::ModuleRef()> make;  // the same layer (config) each call
  std::vector<InputSpec> inputs;
  // Random in training mode (dropout): the CPU's and the GPU's generators differ, so the pair
  // runs in inference mode, where it is deterministic.
  bool inference_only = false;
};

// One sample per registered layer type, with options that exercise the layer (not only its
// defaults): activations, padding, return_sequences, given statistics.
std::map<std::string, LayerSample> samples() {
  using nn::ModuleRef;
  std::map<std::string, LayerSample> s;
  s["Dense"] = {[] { return ModuleRef(nn::Dense(7, nn::relu)); }, {{{5, 6}}}};
  s["Conv2D"] = {[] {
                   return ModuleRef(
                       nn::Conv2D(4, 3, {.padding = "same", .activation = nn::relu}));
                 },
                 {{{2, 3, 8, 8}}}};
  s["Conv1D"] = {[] {
                   return ModuleRef(nn::Conv1D(4, 3, {.strides = 2, .padding = "same",
                                                      .activation = nn::relu}));
                 },
                 {{{2, 3, 9}}}};
  s["Conv3D"] = {[] {
                   return ModuleRef(nn::Conv3D(4, {2, 3, 3}, {.strides = {1, 2, 1}, .padding = "same",
                                                              .activation = nn::relu}));
                 },
                 {{{2, 3, 4, 6, 5}}}};
  s["MaxPool3D"] = {[] { return ModuleRef(nn::MaxPool3D({2, 2, 2}, nn::Size3{2, 1, 2}, "same")); },
                    {{{2, 3, 5, 4, 5}}}};
  s["AvgPool3D"] = {[] { return ModuleRef(nn::AvgPool3D({3, 2, 2}, nn::Size3{2, 2, 1}, "same")); },
                    {{{2, 3, 5, 4, 5}}}};
  s["GlobalAveragePooling3D"] = {[] { return ModuleRef(nn::GlobalAveragePooling3D()); },
                                 {{{2, 3, 3, 4, 5}}}};
  s["GlobalMaxPooling2D"] = {[] { return ModuleRef(nn::GlobalMaxPooling2D()); }, {{{2, 3, 5, 5}}}};
  s["GlobalMaxPooling1D"] = {[] { return ModuleRef(nn::GlobalMaxPooling1D()); }, {{{2, 3, 7}}}};
  s["Conv2DTranspose"] = {[] { return ModuleRef(nn::Conv2DTranspose(3, 3, {.strides = 2})); },
                          {{{2, 4, 5, 5}}}};
  s["MaxPool2D"] = {[] { return ModuleRef(nn::MaxPool2D()); }, {{{2, 3, 8, 8}}}};
  s["AvgPool2D"] = {[] { return ModuleRef(nn::AvgPool2D({3, 3}, Size2{2, 2}, "same")); },
                    {{{2, 3, 7, 7}}}};
  s["GlobalAveragePooling2D"] = {[] { return ModuleRef(nn::GlobalAveragePooling2D()); },
                                 {{{2, 3, 5, 5}}}};
  s["Flatten"] = {[] { return ModuleRef(nn::Flatten()); }, {{{2, 3, 4, 5}}}};
  s["Reshape"] = {[] { return ModuleRef(nn::Reshape({4, 3})); }, {{{2, 12}}}};
  s["Dropout"] = {[] { return ModuleRef(nn::Dropout(0.5, 7)); }, {{{4, 9}}}, true};
  s["Activation"] = {[] { return ModuleRef(nn::ActivationLayer(nn::Activation("swish"))); },
                     {{{3, 8}}}};
  s["ReLU"] = {[] { return ModuleRef(nn::ReLU()); }, {{{3, 8}}}};
  s["Sigmoid"] = {[] { return ModuleRef(nn::Sigmoid()); }, {{{3, 8}}}};
  s["Tanh"] = {[] { return ModuleRef(nn::Tanh()); }, {{{3, 8}}}};
  s["Step"] = {[] { return ModuleRef(nn::Step()); }, {{{3, 8}}}};
  s["LeakyReLU"] = {[] { return ModuleRef(nn::LeakyReLU(0.2)); }, {{{3, 8}}}};
  s["ELU"] = {[] { return ModuleRef(nn::ELU()); }, {{{3, 8}}}};
  s["GELU"] = {[] { return ModuleRef(nn::GELU()); }, {{{3, 8}}}};
  s["Softmax"] = {[] { return ModuleRef(nn::Softmax()); }, {{{3, 8}}}};
  s["Embedding"] = {[] { return ModuleRef(nn::Embedding(11, 4)); },
                    {{{3, 5}, DType::i64, 0, 11}}};
  s["BatchNormalization"] = {[] { return ModuleRef(nn::BatchNormalization()); },
                             {{{6, 5}}}};
  s["LayerNormalization"] = {[] { return ModuleRef(nn::LayerNormalization()); }, {{{4, 6}}}};
  s["MultiHeadAttention"] = {[] { return ModuleRef(nn::MultiHeadAttention(2, 4, {.use_causal_mask = true})); },
                            {{{2, 5, 8}}, {{2, 6, 8}}}};
  s["PositionalEmbedding"] = {[] { return ModuleRef(nn::PositionalEmbedding(7, {.add_to_inputs = true})); },
                             {{{2, 5, 6}}}};
  s["SinePositionEncoding"] = {[] { return ModuleRef(nn::SinePositionEncoding(10000.0, true)); },
                              {{{2, 5, 6}}}};
  s["RMSNormalization"] = {[] { return ModuleRef(nn::RMSNormalization()); }, {{{4, 6}}}};
  s["TransformerEncoderLayer"] = {[] {
                                    return ModuleRef(nn::TransformerEncoderLayer(
                                        8, 2, {.dim_feedforward = 12, .dropout = 0.0, .causal = true}));
                                  },
                                  {{{2, 5, 8}}}};
  s["TransformerDecoderLayer"] = {[] {
                                    return ModuleRef(nn::TransformerDecoderLayer(
                                        8, 2, {.dim_feedforward = 12, .dropout = 0.0,
                                               .norm_first = true, .causal = true}));
                                  },
                                  {{{2, 5, 8}}, {{2, 6, 8}}}};
  s["Normalization"] = {[] {
                          return ModuleRef(nn::Normalization(
                              {.mean = {0.5}, .variance = {4.0}}));
                        },
                        {{{4, 6}}}};
  s["SimpleRNN"] = {[] { return ModuleRef(nn::SimpleRNN(5, {.return_sequences = true})); },
                    {{{2, 4, 3}}}};
  s["LSTM"] = {[] { return ModuleRef(nn::LSTM(5)); }, {{{2, 4, 3}}}};
  s["GRU"] = {[] { return ModuleRef(nn::GRU(5, {.return_sequences = true})); }, {{{2, 4, 3}}}};
  s["Add"] = {[] { return ModuleRef(nn::Add()); }, {{{3, 4}}, {{3, 4}}}};
  s["Multiply"] = {[] { return ModuleRef(nn::Multiply()); }, {{{3, 4}}, {{3, 4}}}};
  s["Average"] = {[] { return ModuleRef(nn::Average()); }, {{{3, 4}}, {{3, 4}}}};
  s["Concatenate"] = {[] { return ModuleRef(nn::Concatenate()); }, {{{3, 4}}, {{3, 2}}}};
  return s;
}

// Registered "layers" that are whole models (covered by the model tests and by training the
// examples on the GPU), not one layer to sample.
const std::set<std::string> kNotLayers = {"Sequential", "Functional"};

std::vector<Tensor> sample_inputs(const LayerSample& s, std::uint64_t seed) {
  std::vector<Tensor> in;
  for (const auto& spec : s.inputs) {
    Tensor t = rand_tensor(spec.shape, seed++, spec.lo, spec.hi);
    if (!is_floating(spec.dtype)) t = floor(t);
    in.push_back(cast(t, spec.dtype));
  }
  return in;
}

std::vector<Tensor> call(nn::Module& m, const std::vector<Tensor>& in) {
  return in.size() == 1 ? std::vector<Tensor>{m(in[0])} : m.call(in);
}

struct PassResult {
  std::vector<Tensor> outputs, input_grads, weight_grads;
  std::map<std::string, Tensor> state_after;
};

// One forward pass with a tape; L = sum_k <out_k, w_k> for fixed random w_k.
PassResult pass(nn::Module& m, const std::vector<Tensor>& in, const std::vector<Tensor>& ws) {
  PassResult r;
  GradientTape tape;
  std::vector<Tensor> float_in;
  for (const auto& t : in)
    if (is_floating(t.dtype())) {
      tape.watch(t);
      float_in.push_back(t);
    }
  r.outputs = call(m, in);
  Tensor loss;
  for (std::size_t k = 0; k < r.outputs.size(); ++k) {
    Tensor term = sum(multiply(r.outputs[k], cast(ws[k], r.outputs[k].dtype())));
    loss = loss.defined() ? loss + term : term;
  }
  std::vector<Tensor> sources = float_in;
  const std::vector<Variable> weights = m.trainable_parameters();
  for (const auto& w : weights) sources.push_back(w.value());
  std::vector<Tensor> grads = tape.gradient(loss, sources, UnconnectedGradients::Zero);
  r.input_grads.assign(grads.begin(), grads.begin() + std::ptrdiff_t(float_in.size()));
  r.weight_grads.assign(grads.begin() + std::ptrdiff_t(float_in.size()), grads.end());
  r.state_after = m.state_dict();
  return r;
}

Tensor host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

::testing::AssertionResult close_all(const std::vector<Tensor>& got,
                                     const std::vector<Tensor>& want, const char* what,
                                     Device device) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!got[i].defined()) return ::testing::AssertionFailure() << what << " " << i << " is undefined";
    if (got[i].device() != device)
      return ::testing::AssertionFailure() << what << " " << i << " is on " << got[i].device().str()
                                           << ", not on " << device.str();
    auto r = all_close(host(got[i]), want[i], 1e-4, 1e-4);
    if (!r) return r << " (" << what << " " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

// The layer `s` on the CPU and its twin on `device`, from the same weights: forward, gradients
// and the weights after the pass agree.
void expect_twins_agree(const LayerSample& s, Device device) {
  const std::vector<Tensor> in = sample_inputs(s, 17);

  nn::ModuleRef cpu_layer = s.make(), gpu_layer = s.make();  // gpu_layer: the one on `device`
  cpu_layer->train(!s.inference_only);
  gpu_layer->train(!s.inference_only);
  const std::vector<Tensor> first = call(*cpu_layer, in);  // builds the weights
  call(*gpu_layer, in);
  gpu_layer->load_state_dict(cpu_layer->state_dict());
  std::vector<Tensor> ws;
  for (std::size_t k = 0; k < first.size(); ++k)
    ws.push_back(rand_tensor(first[k].shape(), 99 + k, -1.0, 1.0));

  // The twins start from the same state: the first pass above moved batch norm's statistics
  // on the CPU twin only if it ran before the copy, and it did; both now hold the same.
  const PassResult want = pass(*cpu_layer, in, ws);
  gpu_layer->to(device);
  std::vector<Tensor> in_gpu, ws_gpu;
  for (const auto& t : in) in_gpu.push_back(t.to(device));
  for (const auto& t : ws) ws_gpu.push_back(t.to(device));
  const PassResult got = pass(*gpu_layer, in_gpu, ws_gpu);

  EXPECT_TRUE(close_all(got.outputs, want.outputs, "output", device));
  EXPECT_TRUE(close_all(got.input_grads, want.input_grads, "input gradient", device));
  EXPECT_TRUE(close_all(got.weight_grads, want.weight_grads, "weight gradient", device));
  ASSERT_EQ(got.state_after.size(), want.state_after.size());
  for (const auto& [name, w] : want.state_after) {
    ASSERT_TRUE(got.state_after.count(name)) << name;
    EXPECT_TRUE(all_close(host(got.state_after.at(name)), w, 1e-4, 1e-4))
        << "weight " << name << " after the pass";
  }
}

class LayerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerParity, CudaEqualsCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason();
  expect_twins_agree(samples().at(GetParam()), Device::cuda(0));
}

// The harness itself, with the twin on the CPU too (runs everywhere): weight gradients come back
// for every trainable weight, the copied state makes the twins equal, and training-mode passes
// (batch norm's statistics) agree. A CPU stand-in device, where there is one, goes here too.
TEST_P(LayerParity, HarnessAgreesOnTheCpu) {
  expect_twins_agree(samples().at(GetParam()), Device::cpu());
}

std::vector<std::string> sampled_layers() {
  std::vector<std::string> names;
  for (const auto& [name, s] : samples()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Layers, LayerParity, ::testing::ValuesIn(sampled_layers()),
                         [](const auto& info) { return info.param; });

}  // namespace

// Runs everywhere: a new layer type must come with a sample here, so that it is compared on the
// GPU too.
TEST(LayerParityTable, EveryRegisteredLayerHasASample) {
  const auto all = samples();
  for (const auto& name : serialization::registered_layers()) {
    if (kNotLayers.count(name)) continue;
    EXPECT_TRUE(all.count(name)) << "layer type '" << name << "' has no sample in "
                                 << "tests/unit/test_cuda_layer_parity.cpp: add one";
  }
}

// The samples build on the CPU and give the registered type, so that the GPU run compares the
// layer it claims to.
TEST(LayerParityTable, SamplesBuildOnTheCpu) {
  for (const auto& [name, s] : samples()) {
    SCOPED_TRACE(name);
    nn::ModuleRef m = s.make();
    EXPECT_EQ(m->type_name(), name);
    const std::vector<Tensor> out = call(*m, sample_inputs(s, 17));
    ASSERT_FALSE(out.empty());
    for (const auto& t : out) EXPECT_GT(t.numel(), 0);
  }
}
