// The built-in metrics. On the CPU each batch is read as doubles and scored with plain loops:
// metrics are small next to the training step, and exact host arithmetic keeps their running
// totals independent of the dtype the model computes in. On a device the common metrics (the
// accuracies without top-k, means of losses, MSE, MAE) score with ops in f64 and keep their sums
// there (MeanBase::fold reads them when the result is asked for), so that a training step reads
// nothing back; the others copy the batch to the host.
#include "soma/metrics.hpp"

#include <cmath>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "soma/autograd.hpp"
#include "soma/nn/losses.hpp"
#include "soma/ops.hpp"
#include "internal/copy.hpp"
#include "nn/accumulators.hpp"

namespace soma::detail {

namespace {
thread_local bool t_persistent = false;
}
bool persistent_accumulators() { return t_persistent; }
PersistentAccumulatorScope::PersistentAccumulatorScope(bool on) : was_(t_persistent) {
  t_persistent = on;
}
PersistentAccumulatorScope::~PersistentAccumulatorScope() { t_persistent = was_; }

void add_in_place(Tensor& acc, const Tensor& v) {
  NoGradScope no_grad;
  if (!acc.defined()) {
    acc = Tensor::empty(v.shape(), DType::f64, v.device());
    fill_value(acc, 0.0);
  }
  copy_into(acc + v, acc);
}

std::vector<double> take_device_sum(Tensor& acc) {
  if (!acc.defined()) return {};
  std::vector<double> v = acc.to(Device::cpu()).reshape({-1}).to_vector<double>();
  if (persistent_accumulators()) fill_value(acc, 0.0);
  else acc = Tensor();
  return v;
}

}  // namespace soma::detail

namespace soma::metrics {

namespace {

std::vector<double> host(const Tensor& t) {
  NoGradScope no_grad;
  if (t.device().kind != DeviceKind::CPU) return t.to(Device::cpu()).to_vector<double>();
  return t.to_vector<double>();
}

Shape drop_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

bool on_device(const Tensor& t) { return t.defined() && !t.device().is_cpu(); }
Tensor f64(const Tensor& t) { return t.dtype() == DType::f64 ? t : cast(t, DType::f64); }

void check_defined(const std::string& metric, const Tensor& y_true, const Tensor& y_pred) {
  if (!y_true.defined() || !y_pred.defined())
    fail(metric, "update_state needs defined y_true and y_pred tensors");
}

// y_true and y_pred of one shape, as the losses line them up: [batch] meets [batch, 1]; a
// rank-1 y_pred counts as [batch, 1]. Returns that common shape.
Shape aligned_shape(const std::string& metric, const Tensor& y_true, const Tensor& y_pred) {
  check_defined(metric, y_true, y_pred);
  if (y_pred.rank() == 0) fail(metric, "y_pred must have a batch axis, got a scalar");
  Shape ps = y_pred.shape();
  if (ps.size() == 1) ps.push_back(1);
  const Shape& ts = y_true.shape();
  if (ts == ps) return ps;
  bool fewer = ts.size() + 1 == ps.size() && ps.back() == 1 && ts == drop_last(ps);
  bool more = ts.size() == ps.size() + 1 && ts.back() == 1 && drop_last(ts) == ps;
  if (!fewer && !more)
    fail(metric, "y_true shape ", shape_str(y_true.shape()), " does not match y_pred shape ",
         shape_str(y_pred.shape()));
  return ps;
}

// Integer labels for y_pred [..., C]: shape [...] or [..., 1].
void check_sparse_shapes(const std::string& metric, const Tensor& y_true, const Tensor& y_pred) {
  check_defined(metric, y_true, y_pred);
  if (y_pred.rank() == 0) fail(metric, "y_pred must have a class axis, got a scalar");
  Shape want = drop_last(y_pred.shape());
  Shape want1 = want;
  want1.push_back(1);
  if (y_true.shape() != want && y_true.shape() != want1)
    fail(metric, "y_true shape ", shape_str(y_true.shape()), " does not match y_pred shape ",
         shape_str(y_pred.shape()), ": expected integer labels of shape ", shape_str(want), " or ",
         shape_str(want1));
}

void check_same_shape(const std::string& metric, const Tensor& y_true, const Tensor& y_pred) {
  check_defined(metric, y_true, y_pred);
  if (y_pred.rank() == 0) fail(metric, "y_pred must have a class axis, got a scalar");
  if (y_true.shape() != y_pred.shape())
    fail(metric, "y_true shape ", shape_str(y_true.shape()), " does not match y_pred shape ",
         shape_str(y_pred.shape()), " (one-hot targets expected)");
}

// One weight per element of `values_shape`: sample weights line up with the leading (batch)
// axes and stretch over the rest (Keras' squeeze_or_expand_to_same_rank, then broadcasting).
std::vector<double> element_weights(const std::string& metric, const Tensor& sw,
                                    const Shape& values_shape) {
  const std::int64_t n = numel(values_shape);
  std::vector<double> w = host(sw);
  if (w.size() == 1) return std::vector<double>(std::size_t(n), w[0]);
  Shape ws = sw.shape();
  while (ws.size() > values_shape.size() && ws.back() == 1) ws.pop_back();
  while (ws.size() < values_shape.size()) ws.push_back(1);
  bool ok = ws.size() == values_shape.size();
  for (std::size_t d = 0; ok && d < ws.size(); ++d) ok = ws[d] == 1 || ws[d] == values_shape[d];
  if (!ok)
    fail(metric, "sample_weight shape ", shape_str(sw.shape()),
         " does not line up with the values of shape ", shape_str(values_shape),
         " (expected one weight per sample, shape [", values_shape.empty() ? 1 : values_shape[0],
         "])");
  Strides wstr = contiguous_strides(ws);
  std::vector<double> out(static_cast<std::size_t>(n));
  std::vector<std::int64_t> idx(values_shape.size(), 0);
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d)
      if (ws[d] != 1) off += idx[d] * wstr[d];
    out[std::size_t(e)] = w[std::size_t(off)];
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < values_shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Index of the largest of n values starting at p (first on ties, as argmax).
std::int64_t argmax_row(const double* p, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t j = 1; j < n; ++j)
    if (p[j] > p[best]) best = j;
  return best;
}

// tf.math.in_top_k: a hit when fewer than k scores are strictly greater than the target's.
bool in_top_k(const double* p, std::int64_t n, std::int64_t target, int k) {
  if (target < 0 || target >= n) return false;
  std::int64_t greater = 0;
  for (std::int64_t j = 0; j < n; ++j)
    if (p[j] > p[target]) ++greater;
  return greater < k;
}

// Per-element or per-row hits (1 or 0) and the shape they have.
struct Scored {
  std::vector<double> values;
  Shape shape;
};

// Binary: y_pred > threshold equals y_true; exact: y_pred equals y_true.
Scored score_elementwise(const std::string& metric, const Tensor& y_true, const Tensor& y_pred,
                         std::optional<double> threshold) {
  Shape shape = aligned_shape(metric, y_true, y_pred);
  std::vector<double> t = host(y_true), p = host(y_pred);
  std::vector<double> hit(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    double pred = threshold ? (p[i] > *threshold ? 1.0 : 0.0) : p[i];
    hit[i] = t[i] == pred ? 1.0 : 0.0;
  }
  return {std::move(hit), std::move(shape)};
}

// k == 0: argmax agreement; k >= 1: the target is in the top k (see in_top_k).
Scored score_categorical(const std::string& metric, const Tensor& y_true, const Tensor& y_pred,
                         int k) {
  check_same_shape(metric, y_true, y_pred);
  const std::int64_t c = y_pred.dim(-1);
  Shape out = drop_last(y_pred.shape());
  std::vector<double> t = host(y_true), p = host(y_pred);
  std::vector<double> hit(std::size_t(numel(out)));
  for (std::size_t r = 0; r < hit.size(); ++r) {
    std::int64_t target = argmax_row(&t[r * c], c);
    bool ok = k == 0 ? argmax_row(&p[r * c], c) == target : in_top_k(&p[r * c], c, target, k);
    hit[r] = ok ? 1.0 : 0.0;
  }
  return {std::move(hit), std::move(out)};
}

// Labels that are not integers or not class ids are misses.
Scored score_sparse(const std::string& metric, const Tensor& y_true, const Tensor& y_pred, int k) {
  check_sparse_shapes(metric, y_true, y_pred);
  const std::int64_t c = y_pred.dim(-1);
  Shape out = drop_last(y_pred.shape());
  std::vector<double> t = host(y_true), p = host(y_pred);
  std::vector<double> hit(std::size_t(numel(out)));
  for (std::size_t r = 0; r < hit.size(); ++r) {
    double label = t[r];
    bool ok = false;
    if (label == std::floor(label) && label >= 0 && label < double(c)) {
      std::int64_t target = std::int64_t(label);
      ok = k == 0 ? argmax_row(&p[r * c], c) == target : in_top_k(&p[r * c], c, target, k);
    }
    hit[r] = ok ? 1.0 : 0.0;
  }
  return {std::move(hit), std::move(out)};
}

// element_weights on a device: the sample weights lined up with `shape` and broadcast to it, f64.
Tensor device_element_weights(const std::string& metric, const Tensor& sw, const Shape& shape,
                              Device device) {
  Tensor w = f64(sw.device() == device ? sw : sw.to(device));
  if (sw.numel() != 1) {
    Shape ws = sw.shape();
    while (ws.size() > shape.size() && ws.back() == 1) ws.pop_back();
    while (ws.size() < shape.size()) ws.push_back(1);
    bool ok = ws.size() == shape.size();
    for (std::size_t d = 0; ok && d < ws.size(); ++d) ok = ws[d] == 1 || ws[d] == shape[d];
    if (!ok)
      fail(metric, "sample_weight shape ", shape_str(sw.shape()),
           " does not line up with the values of shape ", shape_str(shape),
           " (expected one weight per sample, shape [", shape.empty() ? 1 : shape[0], "])");
    w = reshape(w, ws);
  } else {
    w = reshape(w, Shape{});
  }
  return w + full_like(Tensor::empty(shape, DType::f64, device), 0.0);
}

// The device versions of the scores above (same rules, with ops): hits as f64 1/0.
Tensor device_score_elementwise(const std::string& metric, const Tensor& y_true,
                                const Tensor& y_pred, std::optional<double> threshold) {
  Shape shape = aligned_shape(metric, y_true, y_pred);
  Tensor t = f64(reshape(y_true, shape)), p = f64(reshape(y_pred, shape));
  if (threshold) p = f64(p > *threshold);
  return f64(equal(t, p));
}
Tensor device_score_categorical(const std::string& metric, const Tensor& y_true,
                                const Tensor& y_pred) {
  check_same_shape(metric, y_true, y_pred);
  return f64(equal(argmax(y_true, -1), argmax(y_pred, -1)));
}
// A label that is not a class id never equals an argmax: a miss, as on the host.
Tensor device_score_sparse(const std::string& metric, const Tensor& y_true,
                           const Tensor& y_pred) {
  check_sparse_shapes(metric, y_true, y_pred);
  Shape out = drop_last(y_pred.shape());
  return f64(equal(f64(argmax(y_pred, -1)), f64(reshape(y_true, out))));
}

}  // namespace

// ---- MeanBase ----------------------------------------------------------------------------------

void MeanBase::accumulate(const std::string& metric, const Tensor& values,
                          const Tensor& sample_weight) {
  if (!on_device(values)) return accumulate(metric, host(values), values.shape(), sample_weight);
  NoGradScope no_grad;
  Shape shape = values.shape();
  if (shape.empty()) shape = {1};
  const std::int64_t batch = shape[0];
  if (batch == 0) return;
  const std::int64_t per = values.numel() / batch;
  if (per == 0) return;
  Tensor v = f64(reshape(values, shape));
  Tensor t, c;
  if (!sample_weight.defined()) {
    t = sum(v) / double(per);
    if (!detail::persistent_accumulators()) count_ += double(batch);  // known on the host
  } else {
    // One weight per element, as element_weights lines them up.
    Shape ws = sample_weight.shape();
    while (ws.size() > shape.size() && ws.back() == 1) ws.pop_back();
    while (ws.size() < shape.size()) ws.push_back(1);
    bool ok = ws.size() == shape.size() || sample_weight.numel() == 1;
    for (std::size_t d = 0; ok && d < ws.size() && sample_weight.numel() != 1; ++d)
      ok = ws[d] == 1 || ws[d] == shape[d];
    if (!ok)
      fail(metric, "sample_weight shape ", shape_str(sample_weight.shape()),
           " does not line up with the values of shape ", shape_str(shape),
           " (expected one weight per sample, shape [", shape[0], "])");
    Tensor w = f64(sample_weight.device() == values.device() ? sample_weight
                                                              : sample_weight.to(values.device()));
    w = sample_weight.numel() == 1 ? reshape(w, Shape{}) : reshape(w, ws);
    Tensor wb = w + zeros_like(v);
    t = sum(v * wb) / double(per);
    c = sum(wb) / double(per);
  }
  if (detail::persistent_accumulators()) {  // in place, the count too (a replay adds it)
    if (!c.defined()) c = full_like(Tensor::empty({}, DType::f64, v.device()), double(batch));
    detail::add_in_place(device_total_, t);
    detail::add_in_place(device_count_, c);
    return;
  }
  device_total_ = device_total_.defined() ? device_total_ + t : t;
  if (c.defined()) device_count_ = device_count_.defined() ? device_count_ + c : c;
}

void MeanBase::fold() const {
  for (double v : detail::take_device_sum(device_total_)) total_ += v;
  for (double v : detail::take_device_sum(device_count_)) count_ += v;
}

void MeanBase::reset_state() {
  total_ = count_ = 0;
  if (!detail::persistent_accumulators()) device_total_ = device_count_ = Tensor();
  else {  // zeroed where a captured step adds
    if (device_total_.defined()) detail::fill_value(device_total_, 0.0);
    if (device_count_.defined()) detail::fill_value(device_count_, 0.0);
  }
}

void ConfusionCounts::reset_state() {
  tp_ = fp_ = fn_ = 0;
  if (!detail::persistent_accumulators()) device_counts_ = Tensor();
  else if (device_counts_.defined()) detail::fill_value(device_counts_, 0.0);
}

void MeanBase::accumulate(const std::string& metric, const std::vector<double>& v, Shape shape,
                          const Tensor& sample_weight) {
  if (shape.empty()) shape = {1};
  const std::int64_t batch = shape[0];
  if (batch == 0) return;
  const std::int64_t per = std::int64_t(v.size()) / batch;
  if (per == 0) return;
  if (!sample_weight.defined()) {
    double s = 0;
    for (double x : v) s += x;
    total_ += s / double(per);
    count_ += double(batch);
    return;
  }
  std::vector<double> w = element_weights(metric, sample_weight, shape);
  double t = 0, c = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    t += v[i] * w[i];
    c += w[i];
  }
  total_ += t / double(per);
  count_ += c / double(per);
}

// ---- Mean --------------------------------------------------------------------------------------

void Mean::update_state(const Tensor& values, const Tensor& sample_weight, const Tensor& unused) {
  if (unused.defined())
    fail(name_,
         "Mean.update_state takes (values, sample_weight), got a third tensor; to average "
         "a function of (y_true, y_pred) use MeanMetricWrapper or LossMean");
  if (!values.defined()) fail(name_, "update_state needs a defined values tensor");
  accumulate(name_, values, sample_weight);
}

void Mean::update_state(double value, double weight) {
  accumulate(name_, std::vector<double>{value}, {1}, constant(std::vector<double>{weight}, {1}));
}

// ---- MeanMetricWrapper / LossMean --------------------------------------------------------------

void MeanMetricWrapper::update_state(const Tensor& y_true, const Tensor& y_pred,
                                     const Tensor& sample_weight) {
  check_defined(name_, y_true, y_pred);
  Tensor values;
  {
    NoGradScope no_grad;
    values = fn_(y_true, y_pred);
  }
  accumulate(name_, values, sample_weight);
}

LossMean::LossMean(nn::LossRef loss, std::string name)
    : MeanMetricWrapper(
          [loss](const Tensor& y_true, const Tensor& y_pred) { return loss->call(y_true, y_pred); },
          name.empty() ? (loss ? loss->name() : std::string("loss")) : std::move(name)) {
  loss_ = loss;
  if (!loss) fail("LossMean", "needs a loss, got an empty LossRef");
}

// ---- accuracies --------------------------------------------------------------------------------

namespace {
// The accuracy variant for a loss's targets; Auto when the loss does not say.
AccuracyMode accuracy_mode_for(nn::TargetKind k) {
  switch (k) {
    case nn::TargetKind::Binary: return AccuracyMode::Binary;
    case nn::TargetKind::Categorical: return AccuracyMode::Categorical;
    case nn::TargetKind::SparseCategorical: return AccuracyMode::SparseCategorical;
    case nn::TargetKind::Unspecified: break;
  }
  return AccuracyMode::Auto;
}
}  // namespace

void Accuracy::resolve_for_loss(const nn::Loss& loss) {
  if (mode_ != AccuracyMode::Auto) return;
  mode_ = accuracy_mode_for(loss.target_kind());
}

void Accuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                            const Tensor& sample_weight) {
  check_defined(o_.name, y_true, y_pred);
  if (mode_ == AccuracyMode::Auto) {
    const Shape& ps = y_pred.shape();
    if (!is_floating(y_pred.dtype())) {
      mode_ = AccuracyMode::Exact;
    } else if (ps.size() >= 2 && ps.back() > 1) {
      if (y_true.shape() == ps) {
        mode_ = AccuracyMode::Categorical;
      } else {
        check_sparse_shapes(o_.name, y_true, y_pred);
        mode_ = AccuracyMode::SparseCategorical;
      }
    } else {
      mode_ = AccuracyMode::Binary;
    }
  }
  if (on_device(y_pred)) {
    Tensor hits;
    switch (mode_) {
      case AccuracyMode::Categorical:
        hits = device_score_categorical(o_.name, y_true, y_pred);
        break;
      case AccuracyMode::SparseCategorical:
        hits = device_score_sparse(o_.name, y_true, y_pred);
        break;
      case AccuracyMode::Binary:
        hits = device_score_elementwise(o_.name, y_true, y_pred, o_.threshold);
        break;
      default: hits = device_score_elementwise(o_.name, y_true, y_pred, std::nullopt); break;
    }
    return accumulate(o_.name, hits, sample_weight);
  }
  Scored s;
  switch (mode_) {
    case AccuracyMode::Categorical:
      s = score_categorical(o_.name, y_true, y_pred, 0);
      break;
    case AccuracyMode::SparseCategorical:
      s = score_sparse(o_.name, y_true, y_pred, 0);
      break;
    case AccuracyMode::Binary:
      s = score_elementwise(o_.name, y_true, y_pred, o_.threshold);
      break;
    default:
      s = score_elementwise(o_.name, y_true, y_pred, std::nullopt);
      break;
  }
  accumulate(o_.name, s.values, s.shape, sample_weight);
}

void BinaryAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                  const Tensor& sample_weight) {
  if (on_device(y_pred))
    return accumulate(o_.name, device_score_elementwise(o_.name, y_true, y_pred, o_.threshold),
                      sample_weight);
  Scored s = score_elementwise(o_.name, y_true, y_pred, o_.threshold);
  accumulate(o_.name, s.values, s.shape, sample_weight);
}

void CategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                       const Tensor& sample_weight) {
  if (on_device(y_pred))
    return accumulate(o_.name, device_score_categorical(o_.name, y_true, y_pred), sample_weight);
  Scored s = score_categorical(o_.name, y_true, y_pred, 0);
  accumulate(o_.name, s.values, s.shape, sample_weight);
}

void SparseCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                             const Tensor& sample_weight) {
  if (on_device(y_pred))
    return accumulate(o_.name, device_score_sparse(o_.name, y_true, y_pred), sample_weight);
  Scored s = score_sparse(o_.name, y_true, y_pred, 0);
  accumulate(o_.name, s.values, s.shape, sample_weight);
}

TopKCategoricalAccuracy::TopKCategoricalAccuracy(TopKCategoricalAccuracyOptions o)
    : o_(std::move(o)) {
  if (o_.k < 1) fail(o_.name, "k must be at least 1, got ", o_.k);
}

void TopKCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                           const Tensor& sample_weight) {
  Scored s = score_categorical(o_.name, y_true, y_pred, o_.k);
  accumulate(o_.name, s.values, s.shape, sample_weight);
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(SparseTopKCategoricalAccuracyOptions o)
    : o_(std::move(o)) {
  if (o_.k < 1) fail(o_.name, "k must be at least 1, got ", o_.k);
}

void SparseTopKCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                                 const Tensor& sample_weight) {
  Scored s = score_sparse(o_.name, y_true, y_pred, o_.k);
  accumulate(o_.name, s.values, s.shape, sample_weight);
}

// ---- precision / recall ------------------------------------------------------------------------

void ConfusionCounts::fold() const {
  std::vector<double> c = detail::take_device_sum(device_counts_);
  if (c.size() != 3) return;
  tp_ += c[0];
  fp_ += c[1];
  fn_ += c[2];
}

void ConfusionCounts::update_state(const Tensor& y_true, const Tensor& y_pred,
                                   const Tensor& sample_weight) {
  const std::string metric = name();
  Shape shape = aligned_shape(metric, y_true, y_pred);
  if (on_device(y_pred)) {
    NoGradScope no_grad;
    Tensor t = f64(reshape(y_true, shape)), p = f64(reshape(y_pred, shape));
    Tensor w = sample_weight.defined()
                   ? device_element_weights(metric, sample_weight, shape, y_pred.device())
                   : ones_like(p);
    if (class_id_) {
      const std::int64_t c = shape.back();
      if (*class_id_ < 0 || *class_id_ >= c)
        fail(metric, "class_id ", *class_id_, " is out of range for y_pred shape ",
             shape_str(y_pred.shape()), " (", c, " classes)");
      const std::int64_t last = std::int64_t(shape.size()) - 1;
      t = t.slice(last, *class_id_, *class_id_ + 1);
      p = p.slice(last, *class_id_, *class_id_ + 1);
      w = w.slice(last, *class_id_, *class_id_ + 1);
    }
    Tensor pred = f64(p > threshold_), actual = f64(t != 0.0);
    Tensor counts = concat({reshape(sum(pred * actual * w), {1}),
                            reshape(sum(pred * (1.0 - actual) * w), {1}),
                            reshape(sum((1.0 - pred) * actual * w), {1})},
                           0);
    if (detail::persistent_accumulators()) detail::add_in_place(device_counts_, counts);
    else device_counts_ = device_counts_.defined() ? device_counts_ + counts : counts;
    return;
  }
  std::vector<double> t = host(y_true), p = host(y_pred);
  std::vector<double> w = sample_weight.defined() ? element_weights(metric, sample_weight, shape)
                                                  : std::vector<double>(p.size(), 1.0);
  std::int64_t stride = 1, start = 0;
  if (class_id_) {
    const std::int64_t c = shape.back();
    if (*class_id_ < 0 || *class_id_ >= c)
      fail(metric, "class_id ", *class_id_, " is out of range for y_pred shape ",
           shape_str(y_pred.shape()), " (", c, " classes)");
    stride = c;
    start = *class_id_;
  }
  for (std::size_t i = std::size_t(start); i < p.size(); i += std::size_t(stride)) {
    bool pred = p[i] > threshold_;
    bool actual = t[i] != 0.0;
    if (pred && actual)
      tp_ += w[i];
    else if (pred)
      fp_ += w[i];
    else if (actual)
      fn_ += w[i];
  }
}

double Precision::result() const {
  double d = true_positives() + false_positives();
  return d > 0 ? true_positives() / d : 0.0;
}

double Recall::result() const {
  double d = true_positives() + false_negatives();
  return d > 0 ? true_positives() / d : 0.0;
}

// ---- regression --------------------------------------------------------------------------------

void MeanSquaredError::update_state(const Tensor& y_true, const Tensor& y_pred,
                                    const Tensor& sample_weight) {
  Shape shape = aligned_shape(o_.name, y_true, y_pred);
  if (on_device(y_pred)) {
    NoGradScope no_grad;
    Tensor d = f64(reshape(y_pred, shape)) - f64(reshape(y_true, shape));
    return accumulate(o_.name, mean(square(d), {-1}), sample_weight);
  }
  std::vector<double> t = host(y_true), p = host(y_pred);
  const std::int64_t last = shape.back();
  Shape out = drop_last(shape);
  std::vector<double> se(std::size_t(numel(out)), 0.0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    double d = p[i] - t[i];
    se[i / std::size_t(last)] += d * d / double(last);
  }
  accumulate(o_.name, se, out, sample_weight);
}

void MeanAbsoluteError::update_state(const Tensor& y_true, const Tensor& y_pred,
                                     const Tensor& sample_weight) {
  Shape shape = aligned_shape(o_.name, y_true, y_pred);
  if (on_device(y_pred)) {
    NoGradScope no_grad;
    Tensor d = f64(reshape(y_pred, shape)) - f64(reshape(y_true, shape));
    return accumulate(o_.name, mean(abs(d), {-1}), sample_weight);
  }
  std::vector<double> t = host(y_true), p = host(y_pred);
  const std::int64_t last = shape.back();
  Shape out = drop_last(shape);
  std::vector<double> ae(std::size_t(numel(out)), 0.0);
  for (std::size_t i = 0; i < p.size(); ++i) ae[i / std::size_t(last)] += std::abs(p[i] - t[i]) / double(last);
  accumulate(o_.name, ae, out, sample_weight);
}

// ---- identifiers -------------------------------------------------------------------------------

namespace {

// The targets of `loss` (Keras' compile() pairing); Unspecified without a loss.
nn::TargetKind target_kind(const nn::Loss* loss) {
  return loss ? loss->target_kind() : nn::TargetKind::Unspecified;
}

bool loss_from_logits(const nn::Loss* loss) { return loss && loss->from_logits(); }

MetricRef accuracy_for(const nn::Loss* loss) {
  AccuracyOptions o;
  o.mode = accuracy_mode_for(target_kind(loss));
  return Accuracy(o);
}

// The cross-entropy that matches the loss's targets, with its from_logits.
MetricRef crossentropy_for(const nn::Loss* loss, const std::string& name) {
  const bool logits = loss_from_logits(loss);
  nn::LossRef l;
  switch (target_kind(loss)) {
    case nn::TargetKind::Binary: l = nn::BinaryCrossentropy({.from_logits = logits}); break;
    case nn::TargetKind::Categorical: l = nn::CategoricalCrossentropy({.from_logits = logits}); break;
    case nn::TargetKind::SparseCategorical:
      l = nn::SparseCategoricalCrossentropy({.from_logits = logits});
      break;
    case nn::TargetKind::Unspecified: l = nn::Crossentropy({.from_logits = logits}); break;
  }
  return LossMean(l, name);
}

// A loss's mean as a metric, named as Keras names it; a cross-entropy takes the paired loss's
// from_logits when that loss is a cross-entropy too.
template <class L>
MetricRef loss_metric(const nn::Loss* loss, const std::string& name) {
  if constexpr (std::is_same_v<L, nn::MeanSquaredError> || std::is_same_v<L, nn::MeanAbsoluteError> ||
                std::is_same_v<L, nn::Huber>)
    return LossMean(L(), name);
  else
    return LossMean(L({.from_logits = loss_from_logits(loss)}), name);
}

struct MetricName {
  const char* name;
  MetricRef (*make)(const nn::Loss* loss);
};
const MetricName kMetricNames[] = {
    {"accuracy", [](const nn::Loss* l) { return accuracy_for(l); }},
    {"acc", [](const nn::Loss* l) { return accuracy_for(l); }},
    {"Accuracy", [](const nn::Loss* l) { return accuracy_for(l); }},
    {"binary_accuracy", [](const nn::Loss*) -> MetricRef { return BinaryAccuracy(); }},
    {"BinaryAccuracy", [](const nn::Loss*) -> MetricRef { return BinaryAccuracy(); }},
    {"categorical_accuracy", [](const nn::Loss*) -> MetricRef { return CategoricalAccuracy(); }},
    {"CategoricalAccuracy", [](const nn::Loss*) -> MetricRef { return CategoricalAccuracy(); }},
    {"sparse_categorical_accuracy", [](const nn::Loss*) -> MetricRef { return SparseCategoricalAccuracy(); }},
    {"SparseCategoricalAccuracy", [](const nn::Loss*) -> MetricRef { return SparseCategoricalAccuracy(); }},
    {"top_k_categorical_accuracy", [](const nn::Loss*) -> MetricRef { return TopKCategoricalAccuracy(); }},
    {"TopKCategoricalAccuracy", [](const nn::Loss*) -> MetricRef { return TopKCategoricalAccuracy(); }},
    {"sparse_top_k_categorical_accuracy",
     [](const nn::Loss*) -> MetricRef { return SparseTopKCategoricalAccuracy(); }},
    {"SparseTopKCategoricalAccuracy",
     [](const nn::Loss*) -> MetricRef { return SparseTopKCategoricalAccuracy(); }},
    {"precision", [](const nn::Loss*) -> MetricRef { return Precision(); }},
    {"Precision", [](const nn::Loss*) -> MetricRef { return Precision(); }},
    {"recall", [](const nn::Loss*) -> MetricRef { return Recall(); }},
    {"Recall", [](const nn::Loss*) -> MetricRef { return Recall(); }},
    {"mean_squared_error", [](const nn::Loss*) -> MetricRef { return MeanSquaredError(); }},
    {"mse", [](const nn::Loss*) -> MetricRef { return MeanSquaredError(); }},
    {"MSE", [](const nn::Loss*) -> MetricRef { return MeanSquaredError(); }},
    {"MeanSquaredError", [](const nn::Loss*) -> MetricRef { return MeanSquaredError(); }},
    {"mean_absolute_error", [](const nn::Loss*) -> MetricRef { return MeanAbsoluteError(); }},
    {"mae", [](const nn::Loss*) -> MetricRef { return MeanAbsoluteError(); }},
    {"MAE", [](const nn::Loss*) -> MetricRef { return MeanAbsoluteError(); }},
    {"MeanAbsoluteError", [](const nn::Loss*) -> MetricRef { return MeanAbsoluteError(); }},
    {"mean", [](const nn::Loss*) -> MetricRef { return Mean(); }},
    {"Mean", [](const nn::Loss*) -> MetricRef { return Mean(); }},
    {"binary_crossentropy",
     [](const nn::Loss* l) { return loss_metric<nn::BinaryCrossentropy>(l, "binary_crossentropy"); }},
    {"bce", [](const nn::Loss* l) { return loss_metric<nn::BinaryCrossentropy>(l, "binary_crossentropy"); }},
    {"BCE", [](const nn::Loss* l) { return loss_metric<nn::BinaryCrossentropy>(l, "binary_crossentropy"); }},
    {"categorical_crossentropy",
     [](const nn::Loss* l) { return loss_metric<nn::CategoricalCrossentropy>(l, "categorical_crossentropy"); }},
    {"sparse_categorical_crossentropy",
     [](const nn::Loss* l) {
       return loss_metric<nn::SparseCategoricalCrossentropy>(l, "sparse_categorical_crossentropy");
     }},
    {"huber_loss", [](const nn::Loss* l) { return loss_metric<nn::Huber>(l, "huber_loss"); }},
    {"huber", [](const nn::Loss* l) { return loss_metric<nn::Huber>(l, "huber_loss"); }},
    {"crossentropy", [](const nn::Loss* l) { return crossentropy_for(l, "crossentropy"); }},
    {"ce", [](const nn::Loss* l) { return crossentropy_for(l, "crossentropy"); }},
};

}  // namespace

MetricRef metric_from_name(const std::string& name, const nn::Loss* loss) {
  for (const auto& n : kMetricNames)
    if (name == n.name) return n.make(loss);
  std::string known;
  for (const auto& n : kMetricNames) known += std::string(known.empty() ? "" : ", ") + n.name;
  fail("metric_from_name", "unknown metric '", name, "'; expected one of ", known);
}

std::vector<std::string> metric_names() {
  std::vector<std::string> out;
  for (const auto& n : kMetricNames) out.push_back(n.name);
  return out;
}

MetricRef get(const std::string& id) { return metric_from_name(id); }

}  // namespace soma::metrics
