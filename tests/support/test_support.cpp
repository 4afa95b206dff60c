#include "test_support.hpp"

#include <cmath>
#include <random>
#include <sstream>

namespace soma::testing {

Tensor rand_tensor(const Shape& shape, std::uint64_t seed, double lo, double hi, DType dtype) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(numel(shape)));
  for (auto& x : v) x = dist(gen);
  return cast(constant(v, shape), dtype);
}

Tensor noncontiguous(const Tensor& t) {
  Shape big = t.shape();
  if (big.empty()) return t;
  big.back() *= 2;
  Tensor buf = Tensor::empty(big, t.dtype());
  Strides st = contiguous_strides(big);
  st.back() = 2;
  Tensor view = Tensor::view_of(buf, t.shape(), st, 0);
  // Write t's values through raw memory, one element at a time.
  std::vector<double> vals = t.to_vector<double>();
  Tensor packed = cast(constant(vals, t.shape().empty() ? Shape{} : t.shape()), t.dtype());
  std::size_t es = dtype_size(t.dtype());
  const char* src = static_cast<const char*>(packed.raw_data());
  char* dst = static_cast<char*>(buf.raw_data());
  for (std::int64_t i = 0; i < t.numel(); ++i) std::memcpy(dst + 2 * i * es, src + i * es, es);
  EXPECT_FALSE(view.is_contiguous() && t.numel() > 1);
  return view;
}

std::vector<std::int64_t> unravel(std::int64_t i, const Shape& s) {
  std::vector<std::int64_t> idx(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
std::int64_t ravel(const std::vector<std::int64_t>& idx, const Shape& s) {
  std::int64_t i = 0;
  for (std::size_t d = 0; d < s.size(); ++d) i = i * s[d] + idx[d];
  return i;
}

::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double atol, double rtol) {
  if (!actual.defined()) return ::testing::AssertionFailure() << "actual tensor is undefined";
  if (std::size_t(actual.numel()) != expected.size())
    return ::testing::AssertionFailure() << "actual has " << actual.numel() << " elements (shape "
                                         << shape_str(actual.shape()) << "), expected "
                                         << expected.size();
  std::vector<double> a = actual.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    double e = expected[i];
    bool ok = (std::isnan(e) && std::isnan(a[i])) || a[i] == e ||
              std::abs(a[i] - e) <= atol + rtol * std::abs(e);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": actual " << a[i]
                                           << " vs expected " << e << " (shape "
                                           << shape_str(actual.shape()) << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol,
                                     double rtol) {
  if (!actual.defined() || !expected.defined())
    return ::testing::AssertionFailure() << "undefined tensor";
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " vs "
                                         << shape_str(expected.shape());
  return all_close(actual, expected.to_vector<double>(), atol, rtol);
}

::testing::AssertionResult check_gradients(
    const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
    double eps, double tol, std::vector<int> wrt) {
  if (wrt.empty())
    for (std::size_t i = 0; i < inputs.size(); ++i) wrt.push_back(int(i));
  // Analytic.
  std::vector<Tensor> xs = inputs;
  Tensor y;
  std::vector<Tensor> grads;
  Tensor w;
  {
    GradientTape tape;
    for (int i : wrt) tape.watch(xs[std::size_t(i)]);
    y = f(xs);
    w = rand_tensor(y.shape(), 1234, -1.0, 1.0, y.dtype());
    std::vector<Tensor> srcs;
    for (int i : wrt) srcs.push_back(xs[std::size_t(i)]);
    grads = tape.gradient(y, srcs, UnconnectedGradients::Zero, w);
  }
  std::vector<double> wv = w.to_vector<double>();
  auto loss = [&](const std::vector<Tensor>& in) {
    std::vector<double> yv = f(in).to_vector<double>();
    double s = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) s += yv[i] * wv[i];
    return s;
  };
  for (std::size_t k = 0; k < wrt.size(); ++k) {
    std::size_t idx = std::size_t(wrt[k]);
    const Tensor& x = inputs[idx];
    if (grads[k].shape() != x.shape())
      return ::testing::AssertionFailure() << "gradient of input " << idx << " has shape "
                                           << shape_str(grads[k].shape()) << ", input has "
                                           << shape_str(x.shape());
    std::vector<double> xv = x.to_vector<double>();
    std::vector<double> g = grads[k].to_vector<double>();
    for (std::size_t j = 0; j < xv.size(); ++j) {
      auto shifted = [&](double delta) {
        std::vector<double> v = xv;
        v[j] += delta;
        std::vector<Tensor> in = inputs;
        in[idx] = cast(constant(v, x.shape()), x.dtype());
        return loss(in);
      };
      double num = (shifted(eps) - shifted(-eps)) / (2 * eps);
      if (std::abs(num - g[j]) > tol * (1.0 + std::abs(num)))
        return ::testing::AssertionFailure()
               << "input " << idx << " element " << j << ": tape gradient " << g[j]
               << " vs finite difference " << num << " (input shape " << shape_str(x.shape())
               << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace soma::testing
