#pragma once
// The built-in losses, with Keras' names and defaults:
//   nn::MeanSquaredError(), nn::SparseCategoricalCrossentropy({.from_logits = true}),
//   nn::BinaryCrossentropy({.label_smoothing = 0.1, .reduction = nn::Reduction::Sum}).
// Every loss is made of differentiable ops, so its gradient comes from the tape. Cross-entropies
// from logits use log-softmax / log-sum-exp; from probabilities they clip to [1e-7, 1 - 1e-7]
// as Keras does.
//
// Shapes: y_true must have y_pred's shape; as in Keras, a y_true with one axis fewer (or one
// more) of extent 1 at the end is reshaped to match ([batch] vs [batch, 1]). A rank-1 y_pred of
// shape [batch] counts as [batch, 1] (one value per sample).
#include <cstdint>
#include <string>
#include <vector>

#include "soma/nn/loss.hpp"

namespace soma::nn {

inline constexpr double kLossEpsilon = 1e-7;  // Keras' backend.epsilon()

// ---- free functions: unreduced per-sample values, as keras.losses.NAME ---------------------
namespace losses {
Tensor mean_squared_error(const Tensor& y_true, const Tensor& y_pred);
Tensor mean_absolute_error(const Tensor& y_true, const Tensor& y_pred);
Tensor huber(const Tensor& y_true, const Tensor& y_pred, double delta = 1.0);
Tensor binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, bool from_logits = false,
                           double label_smoothing = 0.0);
Tensor categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                bool from_logits = false, double label_smoothing = 0.0,
                                std::int64_t axis = -1);
// y_true: integer class ids (any integer dtype, or integer-valued floats) of shape y_pred's
// shape without its last axis, optionally with a trailing axis of 1.
Tensor sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred,
                                       bool from_logits = false);
}  // namespace losses

// ---- loss objects ----------------------------------------------------------------------------
// Options live at namespace scope (not nested) so that `= {}` default arguments compile.
struct MeanSquaredErrorOptions {
  Reduction reduction = Reduction::SumOverBatchSize;
};
class MeanSquaredError : public Loss {
 public:
  using Options = MeanSquaredErrorOptions;
  explicit MeanSquaredError(Options o = {}) : Loss(o.reduction) {}
  std::string name() const override { return "mean_squared_error"; }

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override;
};

struct MeanAbsoluteErrorOptions {
  Reduction reduction = Reduction::SumOverBatchSize;
};
class MeanAbsoluteError : public Loss {
 public:
  using Options = MeanAbsoluteErrorOptions;
  explicit MeanAbsoluteError(Options o = {}) : Loss(o.reduction) {}
  std::string name() const override { return "mean_absolute_error"; }

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override;
};

// 0.5 e^2 where |e| <= delta, delta (|e| - 0.5 delta) beyond; mean over the last axis.
struct HuberOptions {
  double delta = 1.0;
  Reduction reduction = Reduction::SumOverBatchSize;
};
class Huber : public Loss {
 public:
  using Options = HuberOptions;
  explicit Huber(Options o = {});
  std::string name() const override { return "huber_loss"; }
  double delta() const { return delta_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  double delta_;
};

// Targets in [0, 1]; label smoothing squeezes them towards 0.5: z (1 - s) + s / 2.
// Mean over the last axis (each output unit is one binary problem).
struct BinaryCrossentropyOptions {
  bool from_logits = false;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::SumOverBatchSize;
};
class BinaryCrossentropy : public Loss {
 public:
  using Options = BinaryCrossentropyOptions;
  explicit BinaryCrossentropy(Options o = {});
  std::string name() const override { return "binary_crossentropy"; }
  const Options& options() const { return o_; }
  TargetKind target_kind() const override { return TargetKind::Binary; }
  bool from_logits() const override { return o_.from_logits; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  Options o_;
};

// One-hot (or soft) targets along `axis`; label smoothing: y (1 - s) + s / num_classes.
// From probabilities, y_pred is first rescaled to sum to 1 along `axis` (as Keras does).
struct CategoricalCrossentropyOptions {
  bool from_logits = false;
  double label_smoothing = 0.0;
  std::int64_t axis = -1;
  Reduction reduction = Reduction::SumOverBatchSize;
};
class CategoricalCrossentropy : public Loss {
 public:
  using Options = CategoricalCrossentropyOptions;
  explicit CategoricalCrossentropy(Options o = {});
  std::string name() const override { return "categorical_crossentropy"; }
  const Options& options() const { return o_; }
  TargetKind target_kind() const override { return TargetKind::Categorical; }
  bool from_logits() const override { return o_.from_logits; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  Options o_;
};

// Integer class ids of shape [batch] or [batch, 1] against y_pred [batch, classes]. Labels are
// checked against the number of classes before anything is computed.
struct SparseCategoricalCrossentropyOptions {
  bool from_logits = false;
  Reduction reduction = Reduction::SumOverBatchSize;
};
class SparseCategoricalCrossentropy : public Loss {
 public:
  using Options = SparseCategoricalCrossentropyOptions;
  explicit SparseCategoricalCrossentropy(Options o = {}) : Loss(o.reduction), o_(o) {}
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  const Options& options() const { return o_; }
  TargetKind target_kind() const override { return TargetKind::SparseCategorical; }
  bool from_logits() const override { return o_.from_logits; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  Options o_;
};

// "crossentropy" (Keras' compile alias): binary, sparse or categorical cross-entropy, chosen
// per call from the shapes as Keras' compile() does: y_pred [..., 1] -> binary; y_true with
// fewer axes than y_pred, or a last axis of 1 -> sparse; else categorical (one-hot targets).
struct CrossentropyOptions {
  bool from_logits = false;
  Reduction reduction = Reduction::SumOverBatchSize;
};
class Crossentropy : public Loss {
 public:
  using Options = CrossentropyOptions;
  explicit Crossentropy(Options o = {}) : Loss(o.reduction), o_(o) {}
  std::string name() const override { return "crossentropy"; }
  const Options& options() const { return o_; }
  bool from_logits() const override { return o_.from_logits; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const override;

 private:
  Options o_;
};

// Keras' string identifiers, with default options: the class names ("MeanSquaredError",
// "SparseCategoricalCrossentropy"), the function names ("mean_squared_error",
// "sparse_categorical_crossentropy", "huber_loss") and Keras' aliases ("mse", "MSE", "mae",
// "MAE", "huber", "bce", "BCE", "crossentropy", "ce"). `from_logits` is given to the
// cross-entropies and ignored by the other losses. An unknown name is a soma::Error listing
// loss_names(). (For a model, nn::loss_for_model in soma/model/output_activation.hpp chooses
// from_logits from the model's last activation.)
LossRef loss_from_name(const std::string& name, bool from_logits = false);
// Every name loss_from_name accepts, aliases included.
std::vector<std::string> loss_names();
// loss_from_name(identifier) (the older spelling).
LossRef get_loss(const std::string& identifier);

}  // namespace soma::nn
