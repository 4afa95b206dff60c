#pragma once
// Helpers of the device tests (test_device_training, test_device_layers, test_device_graph,
// test_batch_staging): twin models with equal weights, one trained on the CPU and one on a device
// (usually the CPU stand-in of emulated_device.hpp), data to train them on, and the comparison.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma::testing {

using ModelFactory = Ref<nn::Model> (*)();

// 6 -> 16 (relu) -> 8 (tanh) -> 3 logits, built by its Input.
inline Ref<nn::Model> small_mlp() {
  return std::make_shared<nn::Sequential>(nn::Input({6}), nn::Dense(16, nn::relu),
                                          nn::Dense(8, nn::tanh), nn::Dense(3));
}

struct ClassData {
  Tensor x, y;
};

// n samples of shape `sample` (f32, from the test RNG) with sparse three-class labels (i64).
inline ClassData class_data(const Shape& sample, std::int64_t n, std::uint64_t seed) {
  Shape xs = {n};
  xs.insert(xs.end(), sample.begin(), sample.end());
  Tensor x = rand_tensor(xs, seed).cast(DType::f32);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[std::size_t(i)] = (i * 7 + std::int64_t(seed)) % 3;
  return {x, constant(labels, {n})};
}

// Two models with equal weights: `make` twice, the second given the first's values.
inline std::pair<Ref<nn::Model>, Ref<nn::Model>> twin_models(ModelFactory make) {
  Ref<nn::Model> a = make(), b = make();
  auto pa = a->parameters(), pb = b->parameters();
  EXPECT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size() && i < pb.size(); ++i) pb[i].assign(pa[i].value());
  return {a, b};
}

// Every parameter of `dev` (wherever it lives) equals `cpu`'s within `tol`.
inline ::testing::AssertionResult same_weights(const nn::Model& cpu, const nn::Model& dev,
                                               double tol) {
  auto a = cpu.parameters(), b = dev.parameters();
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "parameter counts differ";
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto r = all_close(b[i].value().to(Device::cpu()), a[i].value(), tol, tol);
    if (!r) return r << " (parameter " << a[i].name() << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace soma::testing
