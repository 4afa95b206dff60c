#include "soma/nn/initializers.hpp"

#include <cmath>
#include <vector>

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

// Keras' _compute_fans, for its HWIO/[in, out] layout: the last axis is fan_out, the one before
// it fan_in, and the leading axes form the receptive field.
Fans dense_fans(const Shape& s) {
  if (s.empty()) return {1, 1};
  if (s.size() == 1) return {double(s[0]), double(s[0])};
  double receptive = 1;
  for (std::size_t i = 0; i + 2 < s.size(); ++i) receptive *= double(s[i]);
  return {double(s[s.size() - 2]) * receptive, double(s.back()) * receptive};
}

// soma's convolution kernels are OIHW: [out, in/groups, kh, kw, ...].
Fans conv_fans(const Shape& s) {
  if (s.size() < 2) return dense_fans(s);
  double receptive = 1;
  for (std::size_t i = 2; i < s.size(); ++i) receptive *= double(s[i]);
  return {double(s[1]) * receptive, double(s[0]) * receptive};
}

namespace init {

namespace {

void check_float(const char* who, DType t) {
  if (!is_floating(t)) fail(who, "weights must have a floating dtype, got ", t);
}

enum class FanMode { in, out, avg };
enum class Dist { truncated_normal, uniform };

// Keras' VarianceScaling: variance = scale / fan; a normal truncated at two standard deviations
// is widened by 1/0.8796... so that its variance after truncation is the one asked for.
Initializer variance_scaling(std::string name, double scale, FanMode mode, Dist dist, Seed seed) {
  return {name, [name, scale, mode, dist, seed](const Shape& s, DType t, Fans f) {
            check_float(name.c_str(), t);
            double fan = mode == FanMode::in    ? f.fan_in
                         : mode == FanMode::out ? f.fan_out
                                                : (f.fan_in + f.fan_out) / 2.0;
            double var = scale / std::max(1.0, fan);
            if (dist == Dist::uniform) {
              double limit = std::sqrt(3.0 * var);
              return random_uniform(s, -limit, limit, t, seed);
            }
            double stddev = std::sqrt(var) / 0.87962566103423978;
            return truncated_normal(s, 0.0, stddev, t, seed);
          }};
}

}  // namespace

Initializer zeros() {
  return {"zeros", [](const Shape& s, DType t, Fans) { return soma::zeros(s, t); }};
}
Initializer ones() {
  return {"ones", [](const Shape& s, DType t, Fans) { return soma::ones(s, t); }};
}
Initializer constant(double value) {
  return {"constant", [value](const Shape& s, DType t, Fans) { return fill(s, value, t); }};
}

Initializer random_normal(double mean, double stddev, Seed seed) {
  return {"random_normal", [=](const Shape& s, DType t, Fans) {
            check_float("random_normal", t);
            return soma::random_normal(s, mean, stddev, t, seed);
          }};
}
Initializer random_uniform(double minval, double maxval, Seed seed) {
  return {"random_uniform", [=](const Shape& s, DType t, Fans) {
            check_float("random_uniform", t);
            return soma::random_uniform(s, minval, maxval, t, seed);
          }};
}
Initializer truncated_normal(double mean, double stddev, Seed seed) {
  return {"truncated_normal", [=](const Shape& s, DType t, Fans) {
            check_float("truncated_normal", t);
            return soma::truncated_normal(s, mean, stddev, t, seed);
          }};
}

Initializer glorot_uniform(Seed seed) {
  return variance_scaling("glorot_uniform", 1.0, FanMode::avg, Dist::uniform, seed);
}
Initializer glorot_normal(Seed seed) {
  return variance_scaling("glorot_normal", 1.0, FanMode::avg, Dist::truncated_normal, seed);
}
Initializer he_uniform(Seed seed) {
  return variance_scaling("he_uniform", 2.0, FanMode::in, Dist::uniform, seed);
}
Initializer he_normal(Seed seed) {
  return variance_scaling("he_normal", 2.0, FanMode::in, Dist::truncated_normal, seed);
}
Initializer lecun_uniform(Seed seed) {
  return variance_scaling("lecun_uniform", 1.0, FanMode::in, Dist::uniform, seed);
}
Initializer lecun_normal(Seed seed) {
  return variance_scaling("lecun_normal", 1.0, FanMode::in, Dist::truncated_normal, seed);
}

// Keras' Orthogonal: flatten to [prod(shape[:-1]), shape[-1]], take the Q of a QR decomposition
// of a normal matrix (of the transpose when it is wide) with R's diagonal made positive, so Q is
// uniformly distributed over orthogonal matrices; scale by gain.
Initializer orthogonal(double gain, Seed seed) {
  return {"orthogonal", [=](const Shape& s, DType t, Fans) {
            check_float("orthogonal", t);
            if (s.size() < 2)
              fail("orthogonal", "needs a shape of rank >= 2, got ", shape_str(s));
            std::int64_t cols = s.back();
            std::int64_t rows = soma::numel(s) / std::max<std::int64_t>(cols, 1);
            bool wide = rows < cols;
            std::int64_t m = wide ? cols : rows, n = wide ? rows : cols;  // m >= n
            std::vector<double> a =
                soma::random_normal({m, n}, 0.0, 1.0, DType::f64, seed).to_vector<double>();
            // Modified Gram-Schmidt on the columns of a (row-major m x n), twice for accuracy.
            // r_jj = |column| > 0 gives the positive-diagonal R that Keras' sign fix produces.
            for (std::int64_t j = 0; j < n; ++j) {
              for (int pass = 0; pass < 2; ++pass)
                for (std::int64_t k = 0; k < j; ++k) {
                  double dot = 0;
                  for (std::int64_t i = 0; i < m; ++i) dot += a[i * n + k] * a[i * n + j];
                  for (std::int64_t i = 0; i < m; ++i) a[i * n + j] -= dot * a[i * n + k];
                }
              double norm = 0;
              for (std::int64_t i = 0; i < m; ++i) norm += a[i * n + j] * a[i * n + j];
              norm = std::sqrt(norm);
              if (norm == 0) fail("orthogonal", "degenerate random matrix");
              for (std::int64_t i = 0; i < m; ++i) a[i * n + j] /= norm;
            }
            std::vector<double> q(std::size_t(rows * cols));
            for (std::int64_t i = 0; i < rows; ++i)
              for (std::int64_t j = 0; j < cols; ++j)
                q[std::size_t(i * cols + j)] = gain * (wide ? a[j * n + i] : a[i * n + j]);
            return soma::constant(q, s).cast(t);
          }};
}

}  // namespace init

Tensor Regularizer::operator()(const Tensor& w) const {
  Tensor penalty = scalar(0.0, w.dtype());
  if (l1 != 0.0) penalty = penalty + sum(abs(w)) * l1;
  if (l2 != 0.0) penalty = penalty + sum(square(w)) * l2;
  return penalty;
}

}  // namespace soma::nn
