#include "soma/nn/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

namespace {

// One row: the id drawn with uniform number u in [0, 1).
std::int64_t sample_row(const float* logits, std::int64_t V, const SamplingOptions& o, double u) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), std::int64_t(0));
  // Largest first, ties to the lower id, so greedy is argmax with NumPy's tie rule.
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return logits[a] > logits[b]; });
  if (o.temperature <= 0.0 || o.top_k == 1) return order[0];
  std::int64_t keep = o.top_k > 0 ? std::min(o.top_k, V) : V;
  // Softmax of the kept logits / temperature (max subtracted: no overflow).
  std::vector<double> p(static_cast<std::size_t>(keep));
  const double top = double(logits[order[0]]) / o.temperature;
  double sum = 0.0;
  for (std::int64_t i = 0; i < keep; ++i) {
    p[std::size_t(i)] = std::exp(double(logits[order[std::size_t(i)]]) / o.temperature - top);
    sum += p[std::size_t(i)];
  }
  if (o.top_p < 1.0) {
    double mass = 0.0;
    std::int64_t n = 0;
    while (n < keep) {
      mass += p[std::size_t(n)] / sum;
      ++n;
      if (mass >= o.top_p) break;
    }
    keep = n;
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  double target = u * sum, acc = 0.0;
  for (std::int64_t i = 0; i < keep; ++i) {
    acc += p[std::size_t(i)];
    if (target < acc) return order[std::size_t(i)];
  }
  return order[std::size_t(keep - 1)];  // u * sum rounded up to the total
}

}  // namespace

Tensor sample_next(const Tensor& logits, const SamplingOptions& o) {
  if (logits.rank() != 1 && logits.rank() != 2)
    fail("sample_next", "logits of shape ", logits.shape(), ": expected [V] or [B, V]");
  if (!(o.top_p > 0.0 && o.top_p <= 1.0) || o.top_k < 0)
    fail("sample_next", "top_k ", o.top_k, ", top_p ", o.top_p,
         ": expected top_k >= 0 and 0 < top_p <= 1");
  const std::int64_t V = logits.dim(-1);
  const std::int64_t B = logits.rank() == 2 ? logits.dim(0) : 1;
  if (V < 1) fail("sample_next", "logits of shape ", logits.shape(), ": empty vocabulary");
  const std::vector<float> host = logits.to(Device::cpu()).cast(DType::f32).to_vector<float>();
  // The uniform numbers: from the seed, or one draw of soma's global generator.
  std::vector<double> u(static_cast<std::size_t>(B));
  if (o.seed) {
    std::mt19937_64 gen(*o.seed);
    std::uniform_real_distribution<double> dist(0.0, 1.0);
    for (auto& v : u) v = dist(gen);
  } else {
    const std::vector<double> d =
        random_uniform({B}, 0.0, 1.0, DType::f64).to_vector<double>();
    std::copy(d.begin(), d.end(), u.begin());
  }
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b)
    ids[std::size_t(b)] = sample_row(host.data() + b * V, V, o, u[std::size_t(b)]);
  if (logits.rank() == 1) return constant(ids[0]);
  return constant(ids, {B});
}

}  // namespace soma::nn
