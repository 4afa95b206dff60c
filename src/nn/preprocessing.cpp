#include "soma/nn/preprocessing.hpp"

#include <algorithm>

#include "soma/autograd.hpp"
#include "soma/data/dataset.hpp"

namespace soma::nn {

namespace {
Tensor to_dtype(const Tensor& x, DType t) { return x.dtype() == t ? x : cast(x, t); }

// Running population statistics of several chunks, merged with Chan et al.'s parallel update
// (exact for any split, and no catastrophic cancellation as with sum of squares).
struct Moments {
  std::int64_t n = 0;  // values per statistic
  Tensor mean, m2;     // f64, kept shape; m2 = sum of squared deviations

  void add(const Tensor& chunk_f64, const Axes& reduce, const Shape& kept) {
    std::int64_t k = std::max<std::int64_t>(1, numel(kept));
    std::int64_t nb = chunk_f64.numel() / k;
    if (nb == 0) return;
    Tensor bm = soma::mean(chunk_f64, reduce, true);
    Tensor bm2 = reshape(sum(square(chunk_f64 - bm), reduce, true), kept);
    bm = reshape(bm, kept);
    if (n == 0) {
      n = nb, mean = bm, m2 = bm2;
      return;
    }
    double na = double(n), nbd = double(nb), nt = na + nbd;
    Tensor delta = bm - mean;
    mean = mean + delta * (nbd / nt);
    m2 = m2 + bm2 + square(delta) * (na * nbd / nt);
    n += nb;
  }
};
}  // namespace

Normalization::Normalization(NormalizationOptions options) : opt_(std::move(options)) {
  if (!is_floating(opt_.dtype)) fail("Normalization", "dtype must be floating, got ", opt_.dtype);
  if (opt_.mean.empty() != opt_.variance.empty())
    fail("Normalization", "give both mean and variance or neither (got ", opt_.mean.size(),
         " mean and ", opt_.variance.size(), " variance values)");
  for (double v : opt_.variance)
    if (!(v >= 0.0)) fail("Normalization", "variance must be >= 0, got ", v);
}

Normalization::Normalization(const Normalization& other) : Module(other), opt_(other.opt_) {
  if (other.built() && !other.given() && other.has_statistics()) {
    NoGradScope no_grad;
    carried_mean_ = copy(other.mean_.value());
    carried_variance_ = copy(other.variance_.value());
    carried_count_ = other.count();
  }
}

void Normalization::build(const Shape& s) {
  std::int64_t rank = std::int64_t(s.size());
  if (global()) {
    rank_ = 0;
    kept_shape_ = {};
  } else {
    if (rank < 2)
      fail("Normalization", "layer '", name(), "' keeps statistics over axes ",
           shape_str(*opt_.axis), " and needs inputs of rank >= 2, got ", shape_str(s),
           "; for one mean/variance over all values use {.axis = std::nullopt}");
    rank_ = rank;
    axes_ = normalize_axes(*opt_.axis, rank, "Normalization");
    kept_shape_.clear();
    for (int a : axes_) {
      if (a == 0)
        fail("Normalization", "layer '", name(), "': axis 0 is the batch axis; keep a feature axis "
             "(-1, or 1 for NCHW channels) or use {.axis = std::nullopt} for global statistics");
      if (s[std::size_t(a)] <= 0)
        fail("Normalization", "layer '", name(), "': the size of axis ", a,
             " must be known, got input shape ", shape_str(s));
      kept_shape_.push_back(s[std::size_t(a)]);
    }
  }
  std::int64_t k = numel(kept_shape_);
  if (given()) {
    auto make = [&](const std::vector<double>& v, const char* what) {
      if (std::int64_t(v.size()) != k && v.size() != 1)
        fail("Normalization", "layer '", name(), "': ", what, " has ", v.size(),
             " values; expected 1 or ", k, " (the kept axes' shape ", shape_str(kept_shape_), ")");
      Tensor t = constant(v, {std::int64_t(v.size())}).cast(opt_.dtype);
      return v.size() == 1 ? fill(kept_shape_, v[0], opt_.dtype) : reshape(t, kept_shape_);
    };
    // On the layer's device when it was moved before being built.
    given_mean_ = make(opt_.mean, "mean");
    given_variance_ = make(opt_.variance, "variance");
    if (!device().is_cpu()) {
      given_mean_ = given_mean_.to(device());
      given_variance_ = given_variance_.to(device());
    }
    has_stats_ = true;
    return;
  }
  Fans f{double(k), double(k)};
  mean_ = add_weight("mean", kept_shape_, init::zeros(), f, false, opt_.dtype);
  variance_ = add_weight("variance", kept_shape_, init::ones(), f, false, opt_.dtype);
  count_ = add_weight("count", Shape{}, init::zeros(), f, false, DType::i64);
  if (carried_mean_.defined()) {
    if (carried_mean_.shape() != kept_shape_)
      fail("Normalization", "layer '", name(), "' was copied from a layer adapted with statistics "
           "of shape ", shape_str(carried_mean_.shape()), ", but is built for input shape ",
           shape_str(s), " (statistics of shape ", shape_str(kept_shape_), ")");
    mean_.assign(carried_mean_);
    variance_.assign(carried_variance_);
    count_.assign(scalar(double(carried_count_), DType::i64));
    has_stats_ = carried_count_ > 0;
    carried_mean_ = carried_variance_ = Tensor();
  }
}

bool Normalization::has_statistics() const {
  if (has_stats_) return true;
  if (!built() || given()) return has_stats_;
  // Statistics loaded by load_state_dict (a model file) show as a positive count.
  has_stats_ = count() > 0;
  return has_stats_;
}

Tensor Normalization::mean() const {
  if (!has_statistics())
    fail("Normalization", "layer '", name(), "' has no statistics yet: call adapt()");
  return given() ? given_mean_ : mean_.value();
}

Tensor Normalization::variance() const {
  if (!has_statistics())
    fail("Normalization", "layer '", name(), "' has no statistics yet: call adapt()");
  return given() ? given_variance_ : variance_.value();
}

std::int64_t Normalization::count() const {
  if (!built() || given()) return 0;
  // A count on a device is read through a host copy (item() reads host tensors only); forward
  // reads it only until it is positive (has_statistics caches that).
  const Tensor& c = count_.value();
  return c.device().is_cpu() ? c.item<std::int64_t>() : c.to(Device::cpu()).item<std::int64_t>();
}

void Normalization::check_input(const Shape& s, const char* who) const {
  if (global()) return;
  bool ok = std::int64_t(s.size()) == rank_;
  for (std::size_t i = 0; ok && i < axes_.size(); ++i)
    ok = s[std::size_t(axes_[i])] == kept_shape_[i];
  if (!ok) {
    Shape axes(axes_.begin(), axes_.end());
    fail(who, "layer '", name(), "' has statistics of shape ", shape_str(kept_shape_),
         " for axes ", shape_str(axes), " of rank-", rank_, " inputs, got shape ", shape_str(s));
  }
}

Shape Normalization::broadcast_shape(std::int64_t rank) const {
  if (global()) return Shape{};
  Shape b(std::size_t(rank), 1);
  for (std::size_t i = 0; i < axes_.size(); ++i) b[std::size_t(axes_[i])] = kept_shape_[i];
  return b;
}

Tensor Normalization::forward(const Tensor& input) {
  check_input(input.shape(), "Normalization");
  if (!has_statistics())
    fail("Normalization", "layer '", name(), "' has no mean and variance: call adapt(data) before "
         "using it, or give {.mean = ..., .variance = ...}");
  Tensor x = to_dtype(input, opt_.dtype);
  const Device dev = x.device();
  // Given statistics are plain tensors, not weights (Module::to does not see them): they follow
  // the input's device once, on the first call there.
  if (given() && given_mean_.device() != dev) {
    given_mean_ = given_mean_.to(dev);
    given_variance_ = given_variance_.to(dev);
  }
  Shape b = broadcast_shape(input.rank());
  Tensor m = reshape(mean(), b);
  // The epsilon is made where x is (a fill on a device; no host copy per call).
  Tensor eps = dev.is_cpu() ? scalar(kEpsilon, opt_.dtype)
                            : full_like(Tensor::empty({}, opt_.dtype, dev), kEpsilon);
  Tensor sd = maximum(sqrt(reshape(variance(), b)), eps);
  return opt_.invert ? m + x * sd : (x - m) / sd;
}

void Normalization::adapt(const Tensor& data) {
  if (!data.defined()) fail("Normalization.adapt", "layer '", name(), "': data is undefined");
  data::Dataset one = data::Dataset::from_tensors({data});
  adapt(one);
}

void Normalization::adapt(const data::Dataset& dataset) {
  if (given())
    fail("Normalization.adapt", "layer '", name(),
         "' was given mean and variance in its options; adapt() cannot replace them");
  if (dataset.cardinality() == data::kInfiniteCardinality)
    fail("Normalization.adapt", "layer '", name(), "': the dataset is infinite (repeat()); take() "
         "a finite part");
  NoGradScope no_grad;
  Moments acc;
  Axes reduce;
  for (auto& element : dataset) {
    if (element.empty() || !element[0].defined())
      fail("Normalization.adapt", "layer '", name(), "': a dataset element has no tensor");
    const Tensor& batch = element[0];
    if (batch.rank() < 1)
      fail("Normalization.adapt", "layer '", name(), "': data needs a batch axis, got a scalar");
    if (!built()) build_for(batch.shape());
    check_input(batch.shape(), "Normalization.adapt");
    if (reduce.empty() && !global())
      for (std::int64_t a = 0; a < batch.rank(); ++a)
        if (std::find(axes_.begin(), axes_.end(), int(a)) == axes_.end()) reduce.push_back(a);
    // Chunks of about 2^20 values bound the f64 copies (Fashion-MNIST is 47M values).
    const std::int64_t rows = batch.dim(0);
    const std::int64_t per_row = rows > 0 ? std::max<std::int64_t>(1, batch.numel() / rows) : 1;
    const std::int64_t step = std::max<std::int64_t>(1, (std::int64_t(1) << 20) / per_row);
    for (std::int64_t r = 0; r < rows; r += step) {
      Tensor chunk = batch.slice(0, r, std::min(rows, r + step));
      acc.add(cast(chunk, DType::f64), reduce, kept_shape_);  // reduce empty: all axes (global)
    }
  }
  if (acc.n == 0)
    fail("Normalization.adapt", "layer '", name(), "': no data (empty dataset or batch)");
  mean_.assign(acc.mean);
  variance_.assign(acc.m2 / double(acc.n));
  count_.assign(scalar(double(acc.n), DType::i64));
  has_stats_ = true;
}

}  // namespace soma::nn
