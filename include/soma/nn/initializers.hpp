#pragma once
// Weight initialisers and regularisers. Initialisers draw from soma's counter-based RNG: with a
// seed they give the same values every time; without one they follow the global seed.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "soma/tensor.hpp"

namespace soma::nn {

// fan_in / fan_out as Keras computes them: Dense kernel [in, out]; conv kernel OIHW ->
// fan_in = I*H*W, fan_out = O*H*W.
struct Fans {
  double fan_in = 1, fan_out = 1;
};
Fans dense_fans(const Shape& kernel_shape);  // [in, out]
Fans conv_fans(const Shape& kernel_shape);   // [out, in/groups, kh, kw]

struct Initializer {
  std::string name;
  std::function<Tensor(const Shape&, DType, Fans)> fn;
  Tensor operator()(const Shape& s, DType t, Fans f) const { return fn(s, t, f); }
};

namespace init {
using Seed = std::optional<std::uint64_t>;
Initializer zeros();
Initializer ones();
Initializer constant(double value);
Initializer random_normal(double mean = 0.0, double stddev = 0.05, Seed seed = std::nullopt);
Initializer random_uniform(double minval = -0.05, double maxval = 0.05, Seed seed = std::nullopt);
Initializer truncated_normal(double mean = 0.0, double stddev = 0.05, Seed seed = std::nullopt);
Initializer glorot_uniform(Seed seed = std::nullopt);  // Keras' default kernel initialiser
Initializer glorot_normal(Seed seed = std::nullopt);
Initializer he_uniform(Seed seed = std::nullopt);
Initializer he_normal(Seed seed = std::nullopt);
Initializer lecun_uniform(Seed seed = std::nullopt);
Initializer lecun_normal(Seed seed = std::nullopt);
Initializer orthogonal(double gain = 1.0, Seed seed = std::nullopt);
}  // namespace init

// A penalty on a weight, added to the loss: l1 * sum(|w|) + l2 * sum(w^2).
struct Regularizer {
  double l1 = 0.0, l2 = 0.0;
  bool active() const { return l1 != 0.0 || l2 != 0.0; }
  Tensor operator()(const Tensor& w) const;
};
namespace regularizers {
inline Regularizer l1(double v) { return {v, 0.0}; }
inline Regularizer l2(double v) { return {0.0, v}; }
inline Regularizer l1_l2(double a, double b) { return {a, b}; }
}  // namespace regularizers

}  // namespace soma::nn
