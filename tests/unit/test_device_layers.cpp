// Layers on a device without host tensors per step: Dropout's rate, the recurrent layers' zero
// states, Normalization's statistics and epsilon, and heaviside's 0, tested on the CPU stand-in
// of tests/support/emulated_device.hpp against the same models on the CPU. Copies are counted
// with cuda::transfer_stats(): a training step copies its batch in and nothing else.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "device_testing.hpp"
#include "emulated_device.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {

using soma::testing::ModelFactory;
using soma::testing::same_weights;
using soma::testing::small_mlp;
using soma::testing::twin_models;
using Data = soma::testing::ClassData;
Data make_data(const Shape& sample, std::int64_t n, std::uint64_t seed) {
  return soma::testing::class_data(sample, n, seed);
}

// Trains twins on the CPU and on the stand-in for 2 epochs of 2 steps; expects equal weights,
// exactly one copy per batch tensor in (x, y: 8; plus `once` copies on the first step) and one
// read per epoch out (the loss: 2).
void expect_trains_like_the_cpu(ModelFactory make, const Shape& sample, std::uint64_t seed,
                                std::uint64_t once = 0) {
  soma::testing::EmulatedCuda gpu;
  auto [cpu, dev] = twin_models(make);
  dev->to(gpu.device());
  Data d = make_data(sample, 16, seed);
  for (auto* m : {&cpu, &dev})
    (*m)->compile(optim::Adam({.learning_rate = 1e-2}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}));
  set_seed(5);
  cpu->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  set_seed(5);
  cuda::reset_transfer_stats();
  dev->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  const auto s = cuda::transfer_stats();
  EXPECT_EQ(s.host_to_device_copies, 8u + once);  // x and y of 4 steps, nothing else
  EXPECT_EQ(s.device_to_host_copies, 2u);  // the loss, once per epoch
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
}

}  // namespace

TEST(DeviceLayers, DropoutMakesItsRateOnTheDevice) {
  expect_trains_like_the_cpu(
      [] {
        return Ref<nn::Model>(std::make_shared<nn::Sequential>(
            nn::Input({6}), nn::Dense(16, nn::relu), nn::Dropout(0.5), nn::Dense(3)));
      },
      {6}, 13);
}

TEST(DeviceLayers, LstmTrainsLikeTheCpu) {
  expect_trains_like_the_cpu(
      [] {
        return Ref<nn::Model>(
            std::make_shared<nn::Sequential>(nn::Input({5, 4}), nn::LSTM(8), nn::Dense(3)));
      },
      {5, 4}, 3);
}

TEST(DeviceLayers, GruTrainsLikeTheCpu) {
  expect_trains_like_the_cpu(
      [] {
        return Ref<nn::Model>(
            std::make_shared<nn::Sequential>(nn::Input({5, 4}), nn::GRU(8), nn::Dense(3)));
      },
      {5, 4}, 4);
}

TEST(DeviceLayers, SimpleRnnTrainsLikeTheCpu) {
  expect_trains_like_the_cpu(
      [] {
        return Ref<nn::Model>(std::make_shared<nn::Sequential>(
            nn::Input({5, 4}), nn::SimpleRNN(8, {.return_sequences = true}), nn::Flatten(),
            nn::Dense(3)));
      },
      {5, 4}, 5);
}

TEST(DeviceLayers, NormalizationWithGivenStatisticsTrainsLikeTheCpu) {
  expect_trains_like_the_cpu(
      [] {
        return Ref<nn::Model>(std::make_shared<nn::Sequential>(
            nn::Input({4}),
            nn::Normalization({.mean = {0.1, 0.2, 0.3, 0.4}, .variance = {1.0, 2.0, 0.5, 4.0}}),
            nn::Dense(3)));
      },
      {4}, 6, /*once: the given mean and variance follow the input on its first call*/ 2);
}

TEST(DeviceLayers, NormalizationMovedAfterItsFirstCallFollowsTheInput) {
  soma::testing::EmulatedCuda gpu;
  auto make = [] {
    return std::make_shared<nn::Sequential>(
        nn::Input({4}), nn::Normalization({.mean = {0.5}, .variance = {2.0}, .invert = true}));
  };
  auto cpu = make(), dev = make();
  Tensor x = make_data({4}, 8, 7).x;
  Tensor want = (*cpu)(x);
  (void)(*dev)(x);  // first call on the CPU, then the move
  dev->to(gpu.device());
  Tensor xd = x.to(gpu.device());
  cuda::reset_transfer_stats();
  Tensor got = (*dev)(xd);
  (void)(*dev)(xd);
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 2u);  // mean and variance, once
  EXPECT_TRUE(soma::testing::all_close(got.to(Device::cpu()), want, 1e-6, 1e-6));
}

TEST(DeviceLayers, NormalizationLoadedOnADeviceReadsItsCountThere) {
  soma::testing::EmulatedCuda gpu;
  Tensor x = make_data({4}, 16, 8).x * 3.0 + 1.0;
  auto adapted = std::make_shared<nn::Normalization>();
  nn::Sequential cpu{nn::Input({4}), nn::ModuleRef(adapted)};
  adapted->adapt(x);
  auto loaded = std::make_shared<nn::Normalization>();
  nn::Sequential dev{nn::Input({4}), nn::ModuleRef(loaded)};
  dev.to(gpu.device());
  loaded->load_state_dict(adapted->state_dict());
  EXPECT_EQ(loaded->count(), 16);
  Tensor want = cpu(x);
  Tensor xd = x.to(gpu.device());
  cuda::reset_transfer_stats();
  Tensor got = dev(xd);
  // The count is read once (until it is known positive); the forward copies nothing in.
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 0u);
  EXPECT_LE(cuda::transfer_stats().device_to_host_copies, 1u);
  cuda::reset_transfer_stats();
  (void)dev(xd);
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 0u);
  EXPECT_TRUE(soma::testing::all_close(got.to(Device::cpu()), want, 1e-6, 1e-6));
}

TEST(DeviceLayers, HeavisideComparesOnTheDevice) {
  soma::testing::EmulatedCuda gpu;
  Tensor x = constant(std::vector<float>{-1.5f, 0.0f, 2.0f, -0.0f}, {4});
  Tensor xd = x.to(gpu.device());
  cuda::reset_transfer_stats();
  Tensor y = nn::heaviside(xd);
  EXPECT_EQ(y.device(), gpu.device());
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 0u);
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), nn::heaviside(x).to_vector<float>());
}

TEST(DeviceLayers, AttentionDropoutOnTheScoresMakesItsRateOnTheDevice) {
  soma::testing::EmulatedCuda gpu;
  nn::MultiHeadAttention cpu(2, 4, {.dropout = 0.5}), dev(2, 4, {.dropout = 0.5});
  Tensor x = soma::testing::rand_tensor({2, 5, 8}, 1, -1, 1, DType::f32);
  (void)cpu(x);
  (void)dev(x);
  auto pc = cpu.parameters(), pd = dev.parameters();
  ASSERT_EQ(pc.size(), pd.size());
  for (std::size_t i = 0; i < pc.size(); ++i) pd[i].assign(pc[i].value());
  dev.to(gpu.device());
  cpu.train();
  dev.train();
  Tensor xd = x.to(gpu.device());
  set_seed(9);
  auto want = cpu.attend(x, x, {.return_attention_scores = true});
  set_seed(9);
  cuda::reset_transfer_stats();
  auto got = dev.attend(xd, xd, {.return_attention_scores = true});
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 0u);
  EXPECT_TRUE(soma::testing::all_close(got.output.to(Device::cpu()), want.output, 1e-6, 1e-6));
}
