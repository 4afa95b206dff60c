// The built-in losses, each a composite of differentiable ops (gradients come from the tape),
// and the Loss base's weighting and reduction.
#include "soma/nn/losses.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "nn/host_twins.hpp"
#include "soma/graph/graph.hpp"
#include "soma/ops.hpp"

// ---- host twins (nn/host_twins.hpp) ------------------------------------------------------------
namespace soma::detail {
namespace {
struct Twin {
  const Storage* storage;
  Tensor host;
};
thread_local std::vector<Twin> t_twins;
}  // namespace

HostTwinScope::HostTwinScope(const std::vector<Tensor>& device, const std::vector<Tensor>& host) {
  for (std::size_t i = 0; i < device.size() && i < host.size(); ++i) {
    if (!device[i].defined() || !host[i].defined() || device[i].device().is_cpu() ||
        !host[i].device().is_cpu())
      continue;
    t_twins.push_back({device[i].storage().get(), host[i]});
    ++added_;
  }
}
HostTwinScope::~HostTwinScope() { t_twins.resize(t_twins.size() - added_); }

Tensor host_twin(const Tensor& t) {
  for (auto it = t_twins.rbegin(); it != t_twins.rend(); ++it)
    if (it->storage == t.storage().get() && it->host.numel() == t.numel() && t.offset() == 0 &&
        t.is_contiguous())
      return reshape(it->host, t.shape());
  return Tensor();
}
}  // namespace soma::detail

namespace soma::nn {

namespace {

void check_floating_pred(const std::string& loss, const Tensor& y_pred) {
  if (!y_pred.defined()) fail(loss, "y_pred is an undefined tensor");
  if (!is_floating(y_pred.dtype()))
    fail(loss, "y_pred must be a floating-point tensor (predictions), got ", y_pred.dtype());
}

Shape drop_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// Lines y_true up with y_pred as Keras does: a [batch] y_true meets a [batch, 1] y_pred and the
// other way round; anything else must match exactly. `promote_rank1` turns a rank-1 y_pred into
// [batch, 1] (one value per sample) for the losses that average over the last axis. y_true is
// cast to y_pred's dtype.
std::pair<Tensor, Tensor> align(const std::string& loss, const Tensor& y_true, const Tensor& y_pred,
                                bool promote_rank1) {
  check_floating_pred(loss, y_pred);
  if (!y_true.defined()) fail(loss, "y_true is an undefined tensor");
  if (y_pred.rank() == 0) fail(loss, "y_pred must have a batch axis, got a scalar");
  Tensor yp = y_pred;
  if (promote_rank1 && yp.rank() == 1) yp = reshape(yp, {yp.dim(0), 1});
  Tensor yt = y_true;
  const Shape& ps = yp.shape();
  const Shape& ts = yt.shape();
  if (ts != ps) {
    bool fewer = ts.size() + 1 == ps.size() && ps.back() == 1 && ts == drop_last(ps);
    bool more = ts.size() == ps.size() + 1 && ts.back() == 1 && drop_last(ts) == ps;
    if (!fewer && !more)
      fail(loss, "y_true shape ", shape_str(y_true.shape()), " does not match y_pred shape ",
           shape_str(y_pred.shape()));
    yt = reshape(yt, ps);
  }
  if (yt.dtype() != yp.dtype()) yt = cast(yt, yp.dtype());
  return {yt, yp};
}

void check_label_smoothing(const std::string& loss, double s) {
  if (!(s >= 0.0 && s <= 1.0)) fail(loss, "label_smoothing must be in [0, 1], got ", s);
}

// log(p) for probabilities, clipped away from 0 and 1 so the log and its gradient stay finite.
Tensor clipped_log(const Tensor& p) { return log(clip(p, kLossEpsilon, 1.0 - kLossEpsilon)); }

// Integer class ids of y_pred's shape without its last axis (an extra trailing 1 is allowed),
// checked against the number of classes; returns them one-hot in y_pred's shape and dtype.
Tensor one_hot_labels(const std::string& loss, const Tensor& y_true, const Tensor& y_pred) {
  check_floating_pred(loss, y_pred);
  if (!y_true.defined()) fail(loss, "y_true is an undefined tensor");
  if (y_pred.rank() == 0) fail(loss, "y_pred must have a class axis, got a scalar");
  const Shape& ps = y_pred.shape();
  Shape want = drop_last(ps);
  Shape want1 = want;
  want1.push_back(1);
  if (y_true.shape() != want && y_true.shape() != want1)
    fail(loss, "y_true shape ", shape_str(y_true.shape()), " does not match y_pred shape ",
         shape_str(ps), ": expected integer labels of shape ", shape_str(want), " or ",
         shape_str(want1));
  if (y_true.dtype() == DType::boolean)
    fail(loss, "labels must be integer class ids, got a bool tensor");
  const std::int64_t classes = ps.back();
  // Checked on the host before any computing: an out-of-range id would otherwise become an
  // all-zero one-hot row and a silently wrong loss. Labels on a device are checked through the
  // host copy fit made them from (nn/host_twins.hpp); others are copied back.
  Tensor labels = y_true;
  if (!y_true.device().is_cpu() && !is_symbolic(y_true)) {  // (traced: a device placeholder)
    labels = soma::detail::host_twin(y_true);
    if (!labels.defined()) labels = y_true.to(Device::cpu());
  }
  // (A symbolic tensor of a traced graph has no values to check.)
  if (!is_symbolic(labels)) for (double v : labels.to_vector<double>()) {
    if (v != std::floor(v)) fail(loss, "label ", v, " is not an integer class id");
    if (v < 0 || v >= double(classes))
      fail(loss, "label ", std::int64_t(v), " is out of range for ", classes,
           " classes (expected 0 <= label < ", classes, ")");
  }
  Tensor ids = y_true.dtype() == DType::i32 || y_true.dtype() == DType::i64
                   ? y_true
                   : cast(y_true, DType::i64);
  return reshape(one_hot(reshape(ids, want), classes, y_pred.dtype()), ps);
}

}  // namespace

// ---- Loss base ---------------------------------------------------------------------------------

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred,
                        const Tensor& sample_weight) const {
  Tensor values = per_sample(y_true, y_pred);
  if (sample_weight.defined()) {
    Tensor w = sample_weight;
    if (w.dtype() != values.dtype()) w = cast(w, values.dtype());
    if (w.numel() != 1 || w.rank() > values.rank()) {
      // Keras' squeeze_or_expand_to_same_rank: weights line up with the leading (batch) axes.
      Shape ws = w.shape();
      while (ws.size() > values.shape().size() && ws.back() == 1) ws.pop_back();
      while (ws.size() < values.shape().size()) ws.push_back(1);
      bool ok = ws.size() == values.shape().size();
      for (std::size_t i = 0; ok && i < ws.size(); ++i)
        ok = ws[i] == 1 || ws[i] == values.shape()[i];
      if (!ok)
        fail(name(), "sample_weight shape ", shape_str(sample_weight.shape()),
             " does not line up with the per-sample loss of shape ", shape_str(values.shape()),
             " (y_pred ", shape_str(y_pred.shape()), ")");
      w = reshape(w, ws);
    }
    values = values * w;
  }
  switch (reduction_) {
    case Reduction::None:
      return values;
    case Reduction::Sum:
      return sum(values);
    case Reduction::SumOverBatchSize: {
      // A graph with an unknown batch (-1) divides by the fed batch: the mean op's count is
      // taken when the graph runs. Known shapes keep sum / n (eager results unchanged).
      bool unknown = false;
      for (auto d : values.shape()) unknown |= d < 0;
      if (unknown) return mean(values);
      // The sum of nothing: a 0 of values' dtype where values are (not a host tensor).
      if (values.numel() == 0) return sum(values);
      return sum(values) / double(values.numel());
    }
  }
  return values;
}

// ---- free functions ----------------------------------------------------------------------------
namespace losses {

Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred) {
  auto [yt, yp] = align("mean_squared_error", y_true, y_pred, true);
  return mean(squared_difference(yp, yt), {-1});
}

Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred) {
  auto [yt, yp] = align("mean_absolute_error", y_true, y_pred, true);
  return mean(abs(yp - yt), {-1});
}

Tensor huber(const Tensor& y_true, const Tensor& y_pred, double delta) {
  if (!(delta > 0)) fail("huber_loss", "delta must be positive, got ", delta);
  auto [yt, yp] = align("huber_loss", y_true, y_pred, true);
  // min/linear split rather than where(): one smooth expression, no discarded branch.
  Tensor a = abs(yp - yt);
  Tensor quadratic = minimum(a, full_like(a, delta));
  Tensor linear = a - quadratic;
  return mean(0.5 * square(quadratic) + delta * linear, {-1});
}

Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits,
                           double label_smoothing) {
  check_label_smoothing("binary_crossentropy", label_smoothing);
  auto [z, x] = align("binary_crossentropy", y_true, y_pred, true);
  if (label_smoothing > 0) z = z * (1.0 - label_smoothing) + 0.5 * label_smoothing;
  Tensor per_unit;
  if (from_logits) {
    // max(x, 0) - x z + log1p(exp(-|x|)), written with where() so the gradient at x == 0 is
    // sigmoid(0) - z (relu' and sign' would both give 0 there).
    Tensor pos = x >= 0.0;
    Tensor zero = zeros_like(x);
    Tensor relu_x = where(pos, x, zero);
    Tensor neg_abs = where(pos, -x, x);
    per_unit = relu_x - x * z + log1p(exp(neg_abs));
  } else {
    Tensor p = clip(x, kLossEpsilon, 1.0 - kLossEpsilon);
    per_unit = -(z * log(p) + (1.0 - z) * log(1.0 - p));
  }
  return mean(per_unit, {-1});
}

Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits,
                                double label_smoothing, std::int64_t axis) {
  const std::string name = "categorical_crossentropy";
  check_label_smoothing(name, label_smoothing);
  check_floating_pred(name, y_pred);
  if (y_pred.rank() == 0) fail(name, "y_pred must have a class axis, got a scalar");
  int ax = normalize_axis(axis, y_pred.rank(), "categorical_crossentropy");
  if (y_true.defined() && y_true.shape() != y_pred.shape())
    fail(name, "y_true shape ", shape_str(y_true.shape()), " does not match y_pred shape ",
         shape_str(y_pred.shape()),
         " (one-hot targets; use SparseCategoricalCrossentropy for "
         "integer labels)");
  auto [y, x] = align(name, y_true, y_pred, false);
  if (label_smoothing > 0) y = y * (1.0 - label_smoothing) + label_smoothing / double(x.dim(ax));
  Tensor logp;
  if (from_logits) {
    logp = log_softmax(x, ax);
  } else {
    logp = clipped_log(x / sum(x, {ax}, true));
  }
  return -sum(y * logp, {ax});
}

Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                       bool from_logits) {
  Tensor y = one_hot_labels("sparse_categorical_crossentropy", y_true, y_pred);
  Tensor logp =
      from_logits ? log_softmax(y_pred, -1) : clipped_log(y_pred / sum(y_pred, {-1}, true));
  return -sum(y * logp, {-1});
}

}  // namespace losses

// ---- loss objects ------------------------------------------------------------------------------

Tensor MeanSquaredError::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  return losses::mean_squared_error(y_true, y_pred);
}

Tensor MeanAbsoluteError::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  return losses::mean_absolute_error(y_true, y_pred);
}

Huber::Huber(Options o) : Loss(o.reduction), delta_(o.delta) {
  if (!(delta_ > 0)) fail("huber_loss", "delta must be positive, got ", delta_);
}
Tensor Huber::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  return losses::huber(y_true, y_pred, delta_);
}

BinaryCrossentropy::BinaryCrossentropy(Options o) : Loss(o.reduction), o_(o) {
  check_label_smoothing(name(), o_.label_smoothing);
}
Tensor BinaryCrossentropy::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  return losses::binary_crossentropy(y_true, y_pred, o_.from_logits, o_.label_smoothing);
}

CategoricalCrossentropy::CategoricalCrossentropy(Options o) : Loss(o.reduction), o_(o) {
  check_label_smoothing(name(), o_.label_smoothing);
}
Tensor CategoricalCrossentropy::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  return losses::categorical_crossentropy(y_true, y_pred, o_.from_logits, o_.label_smoothing,
                                          o_.axis);
}

Tensor SparseCategoricalCrossentropy::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  return losses::sparse_categorical_crossentropy(y_true, y_pred, o_.from_logits);
}

// Keras' compile() rule for "crossentropy", applied to each call's shapes.
Tensor Crossentropy::per_sample(const Tensor& y_true, const Tensor& y_pred) const {
  check_floating_pred(name(), y_pred);
  if (!y_true.defined()) fail(name(), "y_true is an undefined tensor");
  if (y_pred.rank() == 0) fail(name(), "y_pred must have a batch axis, got a scalar");
  if (y_pred.rank() == 1 || y_pred.shape().back() == 1)
    return losses::binary_crossentropy(y_true, y_pred, o_.from_logits);
  if (y_true.rank() < y_pred.rank() || (y_true.rank() > 0 && y_true.shape().back() == 1))
    return losses::sparse_categorical_crossentropy(y_true, y_pred, o_.from_logits);
  return losses::categorical_crossentropy(y_true, y_pred, o_.from_logits);
}

namespace {
struct LossName {
  const char* name;
  LossRef (*make)(bool from_logits);
};
// Class names, function names, then Keras' aliases.
const LossName kLossNames[] = {
    {"MeanSquaredError", [](bool) -> LossRef { return MeanSquaredError(); }},
    {"mean_squared_error", [](bool) -> LossRef { return MeanSquaredError(); }},
    {"mse", [](bool) -> LossRef { return MeanSquaredError(); }},
    {"MSE", [](bool) -> LossRef { return MeanSquaredError(); }},
    {"MeanAbsoluteError", [](bool) -> LossRef { return MeanAbsoluteError(); }},
    {"mean_absolute_error", [](bool) -> LossRef { return MeanAbsoluteError(); }},
    {"mae", [](bool) -> LossRef { return MeanAbsoluteError(); }},
    {"MAE", [](bool) -> LossRef { return MeanAbsoluteError(); }},
    {"Huber", [](bool) -> LossRef { return Huber(); }},
    {"huber_loss", [](bool) -> LossRef { return Huber(); }},
    {"huber", [](bool) -> LossRef { return Huber(); }},
    {"BinaryCrossentropy", [](bool l) -> LossRef { return BinaryCrossentropy({.from_logits = l}); }},
    {"binary_crossentropy", [](bool l) -> LossRef { return BinaryCrossentropy({.from_logits = l}); }},
    {"bce", [](bool l) -> LossRef { return BinaryCrossentropy({.from_logits = l}); }},
    {"BCE", [](bool l) -> LossRef { return BinaryCrossentropy({.from_logits = l}); }},
    {"CategoricalCrossentropy",
     [](bool l) -> LossRef { return CategoricalCrossentropy({.from_logits = l}); }},
    {"categorical_crossentropy",
     [](bool l) -> LossRef { return CategoricalCrossentropy({.from_logits = l}); }},
    {"SparseCategoricalCrossentropy",
     [](bool l) -> LossRef { return SparseCategoricalCrossentropy({.from_logits = l}); }},
    {"sparse_categorical_crossentropy",
     [](bool l) -> LossRef { return SparseCategoricalCrossentropy({.from_logits = l}); }},
    {"Crossentropy", [](bool l) -> LossRef { return Crossentropy({.from_logits = l}); }},
    {"crossentropy", [](bool l) -> LossRef { return Crossentropy({.from_logits = l}); }},
    {"ce", [](bool l) -> LossRef { return Crossentropy({.from_logits = l}); }},
};
}  // namespace

LossRef loss_from_name(const std::string& name, bool from_logits) {
  for (const auto& n : kLossNames)
    if (name == n.name) return n.make(from_logits);
  std::string known;
  for (const auto& n : kLossNames) known += std::string(known.empty() ? "" : ", ") + n.name;
  fail("loss_from_name", "unknown loss '", name, "'; expected one of ", known);
}

std::vector<std::string> loss_names() {
  std::vector<std::string> out;
  for (const auto& n : kLossNames) out.push_back(n.name);
  return out;
}

LossRef get_loss(const std::string& id) { return loss_from_name(id); }

}  // namespace soma::nn
