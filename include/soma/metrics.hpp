#pragma once
// The built-in metrics, stateful across batches as in Keras: update_state per batch, result()
// at any time, reset_state() per epoch. Each keeps a weighted total and count (doubles) and is
// computed without recording on any tape.
//
// Sample weights: one weight per sample (shape [batch], or [batch, 1]); a metric's value for a
// sample is first averaged over the sample's remaining axes (Keras' reduce_to_samplewise), and
// the result is sum(value * weight) / sum(weight). Precision and recall weight every element.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "soma/nn/loss.hpp"
#include "soma/nn/metric.hpp"

namespace soma::metrics {

// A running weighted mean of per-sample values; the base of most metrics below (Keras'
// Mean / MeanMetricWrapper state).
class MeanBase : public Metric {
 public:
  double result() const override {
    fold();
    return count_ == 0 ? 0.0 : total_ / count_;
  }
  void reset_state() override;
  double total() const {
    fold();
    return total_;
  }
  double count() const {
    fold();
    return count_;
  }

 protected:
  // values: [batch, ...] (any dtype, any device); averaged over all axes but the first, then
  // accumulated with the per-sample weights. A rank-0 value counts as one sample.
  void accumulate(const std::string& metric, const Tensor& values, const Tensor& sample_weight);
  // The same for values already on the host (row-major, of `shape`).
  void accumulate(const std::string& metric, const std::vector<double>& values, Shape shape,
                  const Tensor& sample_weight);

 private:
  // Values on a device are summed there (f64, 0-d) and read back only when the result is asked
  // for: a read waits for the device, so a training step must not make one.
  void fold() const;
  mutable double total_ = 0, count_ = 0;
  mutable Tensor device_total_, device_count_;
};

// ---- Mean: running (weighted) mean of values, e.g. of a loss ---------------------------------
// Keras' signature: update_state(values, sample_weight). The (y_true, y_pred) form of other
// metrics does not apply; passing a third tensor is an error.
struct MeanOptions {
  std::string name = "mean";
};
class Mean : public MeanBase {
 public:
  explicit Mean(MeanOptions o = {}) : name_(std::move(o.name)) {}
  void update_state(const Tensor& values, const Tensor& sample_weight = Tensor(),
                    const Tensor& unused = Tensor()) override;
  void update_state(double value, double weight = 1.0);
  std::string name() const override { return name_; }

 private:
  std::string name_;
};

// ---- MeanMetricWrapper: mean of fn(y_true, y_pred) ------------------------------------------
using MetricFn = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred)>;
class MeanMetricWrapper : public MeanBase {
 public:
  MeanMetricWrapper(MetricFn fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return name_; }

 private:
  MetricFn fn_;
  std::string name_;
};

// Mean of a loss's unreduced values (the loss's own reduction is ignored); named after the loss
// unless a name is given: metrics::LossMean(nn::MeanAbsoluteError()).
class LossMean : public MeanMetricWrapper {
 public:
  explicit LossMean(nn::LossRef loss, std::string name = "");
  const nn::LossRef& loss() const { return loss_; }

 private:
  nn::LossRef loss_;
};

// ---- accuracies ------------------------------------------------------------------------------
// Accuracy ("accuracy"). With mode Auto (the default) it becomes the variant Keras' compile()
// would pick, read from the shapes of the first batch:
//   y_pred [..., C], C > 1, y_true of the same shape        -> Categorical
//   y_pred [..., C], C > 1, y_true [...] or [..., 1]        -> SparseCategorical
//   y_pred [..., 1] or [batch] (floating point)             -> Binary (threshold)
//   y_pred of an integer dtype                              -> Exact
// Exact is the standalone keras.metrics.Accuracy: y_true == y_pred elementwise. A model can
// pin the variant from its loss with resolve_for_loss(). The resolved mode survives reset_state.
enum class AccuracyMode { Auto, Exact, Binary, Categorical, SparseCategorical };
struct AccuracyOptions {
  AccuracyMode mode = AccuracyMode::Auto;
  double threshold = 0.5;  // Binary only
  std::string name = "accuracy";
};
class Accuracy : public MeanBase {
 public:
  explicit Accuracy(AccuracyOptions o = {}) : o_(std::move(o)), mode_(o_.mode) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }
  // Auto until the first update (or a resolve_for_loss) decides.
  AccuracyMode mode() const { return mode_; }
  const AccuracyOptions& options() const { return o_; }
  // binary_crossentropy -> Binary, categorical_crossentropy -> Categorical,
  // sparse_categorical_crossentropy -> SparseCategorical; other losses leave the mode alone.
  // Only an Auto metric is changed.
  void resolve_for_loss(const nn::Loss& loss) override;

 private:
  AccuracyOptions o_;
  AccuracyMode mode_;
};

struct BinaryAccuracyOptions {
  double threshold = 0.5;  // a prediction counts as 1 when y_pred > threshold
  std::string name = "binary_accuracy";
};
class BinaryAccuracy : public MeanBase {
 public:
  explicit BinaryAccuracy(BinaryAccuracyOptions o = {}) : o_(std::move(o)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }
  const BinaryAccuracyOptions& options() const { return o_; }

 private:
  BinaryAccuracyOptions o_;
};

// argmax(y_true) == argmax(y_pred) along the last axis; ties go to the first index.
struct CategoricalAccuracyOptions {
  std::string name = "categorical_accuracy";
};
class CategoricalAccuracy : public MeanBase {
 public:
  explicit CategoricalAccuracy(CategoricalAccuracyOptions o = {}) : o_(std::move(o)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }

 private:
  CategoricalAccuracyOptions o_;
};

// label == argmax(y_pred) along the last axis; labels [batch] or [batch, 1].
struct SparseCategoricalAccuracyOptions {
  std::string name = "sparse_categorical_accuracy";
};
class SparseCategoricalAccuracy : public MeanBase {
 public:
  explicit SparseCategoricalAccuracy(SparseCategoricalAccuracyOptions o = {}) : o_(std::move(o)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }

 private:
  SparseCategoricalAccuracyOptions o_;
};

// Top-k: the target class counts as a hit when fewer than k classes score strictly higher than
// it. Ties at the boundary therefore count as hits (tf.math.in_top_k's rule): with scores
// [0.4, 0.4, 0.2] and k = 1, targets 0 and 1 are both hits.
struct TopKCategoricalAccuracyOptions {
  int k = 5;
  std::string name = "top_k_categorical_accuracy";
};
class TopKCategoricalAccuracy : public MeanBase {
 public:
  explicit TopKCategoricalAccuracy(TopKCategoricalAccuracyOptions o = {});
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }
  const TopKCategoricalAccuracyOptions& options() const { return o_; }

 private:
  TopKCategoricalAccuracyOptions o_;
};

struct SparseTopKCategoricalAccuracyOptions {
  int k = 5;
  std::string name = "sparse_top_k_categorical_accuracy";
};
class SparseTopKCategoricalAccuracy : public MeanBase {
 public:
  explicit SparseTopKCategoricalAccuracy(SparseTopKCategoricalAccuracyOptions o = {});
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }
  const SparseTopKCategoricalAccuracyOptions& options() const { return o_; }

 private:
  SparseTopKCategoricalAccuracyOptions o_;
};

// ---- precision and recall (binary) -----------------------------------------------------------
// A prediction is positive when y_pred > threshold; y_true is positive when non-zero. Counts
// are weighted (the sample weight applies to every element of its sample). With class_id set,
// only that column of [batch, classes] inputs is scored. No predicted (actual) positives
// gives a precision (recall) of 0, as in Keras.
struct PrecisionOptions {
  double threshold = 0.5;
  std::optional<std::int64_t> class_id;
  std::string name = "precision";
};
struct RecallOptions {
  double threshold = 0.5;
  std::optional<std::int64_t> class_id;
  std::string name = "recall";
};

class ConfusionCounts : public Metric {
 public:
  void reset_state() override;
  double true_positives() const {
    fold();
    return tp_;
  }
  double false_positives() const {
    fold();
    return fp_;
  }
  double false_negatives() const {
    fold();
    return fn_;
  }
  double threshold() const { return threshold_; }
  std::optional<std::int64_t> class_id() const { return class_id_; }
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;

 protected:
  ConfusionCounts(double threshold, std::optional<std::int64_t> class_id)
      : threshold_(threshold), class_id_(class_id) {}

 private:
  double threshold_;
  std::optional<std::int64_t> class_id_;
  // As MeanBase: on a device the counts ([tp, fp, fn], f64) stay there until read.
  void fold() const;
  mutable double tp_ = 0, fp_ = 0, fn_ = 0;
  mutable Tensor device_counts_;
};

class Precision : public ConfusionCounts {
 public:
  explicit Precision(PrecisionOptions o = {})
      : ConfusionCounts(o.threshold, o.class_id), name_(std::move(o.name)) {}
  double result() const override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
};

class Recall : public ConfusionCounts {
 public:
  explicit Recall(RecallOptions o = {})
      : ConfusionCounts(o.threshold, o.class_id), name_(std::move(o.name)) {}
  double result() const override;
  std::string name() const override { return name_; }

 private:
  std::string name_;
};

// ---- regression ------------------------------------------------------------------------------
// Mean over the last axis per sample, then the weighted mean over samples.
struct MeanSquaredErrorOptions {
  std::string name = "mean_squared_error";
};
class MeanSquaredError : public MeanBase {
 public:
  explicit MeanSquaredError(MeanSquaredErrorOptions o = {}) : o_(std::move(o)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }

 private:
  MeanSquaredErrorOptions o_;
};

// Mean over the last axis of |y_true - y_pred| per sample, then the weighted mean over samples
// (keras.metrics.MeanAbsoluteError).
struct MeanAbsoluteErrorOptions {
  std::string name = "mean_absolute_error";
};
class MeanAbsoluteError : public MeanBase {
 public:
  explicit MeanAbsoluteError(MeanAbsoluteErrorOptions o = {}) : o_(std::move(o)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) override;
  std::string name() const override { return o_.name; }

 private:
  MeanAbsoluteErrorOptions o_;
};

// Keras' string identifiers and aliases, with default options: "accuracy"/"acc",
// "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy",
// "top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy", "precision", "recall",
// "mean_squared_error"/"mse"/"MSE", "mean_absolute_error"/"mae"/"MAE", "mean", the loss means
// "binary_crossentropy"/"bce", "categorical_crossentropy", "sparse_categorical_crossentropy",
// "huber_loss"/"huber", "crossentropy"/"ce", and the class names ("Accuracy",
// "MeanAbsoluteError", ...). The metric keeps the name it was asked by ("acc" logs as "acc").
// With `loss` (what compile() pairs it with), "accuracy"/"acc" and "crossentropy"/"ce" pick the
// variant that goes with that loss, as Keras' compile() does: binary_crossentropy -> binary,
// categorical_crossentropy -> categorical, sparse_categorical_crossentropy -> sparse (the
// cross-entropy metric also takes the loss's from_logits); otherwise accuracy is resolved from
// the shapes of the first batch. An unknown name is a soma::Error listing metric_names().
MetricRef metric_from_name(const std::string& name, const nn::Loss* loss = nullptr);
// Every name metric_from_name accepts, aliases included.
std::vector<std::string> metric_names();
// metric_from_name(identifier) (the older spelling).
MetricRef get(const std::string& identifier);

}  // namespace soma::metrics
