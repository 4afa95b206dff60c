#pragma once
// Loss base: losses are objects (never enums). A loss computes per-sample values, then applies
// optional sample weights and a reduction.
#include <string>

#include "soma/ref.hpp"
#include "soma/tensor.hpp"

namespace soma::nn {

enum class Reduction { SumOverBatchSize, Sum, None };  // Keras' names; mean is the default
class ConfigVisitor;

// The targets a loss expects, read where a metric must match the loss (the "accuracy" or
// cross-entropy metric that goes with it): Unspecified when the loss does not say (it is not a
// cross-entropy, or it picks binary/categorical/sparse per call).
enum class TargetKind { Unspecified, Binary, Categorical, SparseCategorical };

class Loss {
 public:
  virtual ~Loss() = default;
  // y_true, y_pred batched on axis 0. sample_weight (optional) has shape [batch] (or any shape
  // that lines up with the leading axes of the per-sample loss: it is expanded on the right, as
  // Keras does). Returns a scalar, or the weighted per-sample values with Reduction::None.
  // SumOverBatchSize divides the weighted sum by the number of loss values (Keras' semantics,
  // not by the sum of the weights).
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) const;
  // The unweighted, unreduced loss values (what keras.losses.FN returns); metrics such as
  // metrics::LossMean average these.
  Tensor call(const Tensor& y_true, const Tensor& y_pred) const {
    return per_sample(y_true, y_pred);
  }
  virtual std::string name() const = 0;
  Reduction reduction() const { return reduction_; }
  // Lists the loss's config fields, once (soma/nn/config.hpp): "reduction", then the loss's own.
  virtual void visit_config(ConfigVisitor& v);

 protected:
  explicit Loss(Reduction r = Reduction::SumOverBatchSize) : reduction_(r) {}
  // Loss per sample: y_pred's shape without the reduced (class/feature) axis, so [batch] for
  // the usual [batch, features] inputs.
  virtual Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const = 0;

 private:
  Reduction reduction_;

 public:
  // See TargetKind.
  virtual TargetKind target_kind() const { return TargetKind::Unspecified; }
  // True when the loss takes logits rather than probabilities (a cross-entropy's from_logits).
  virtual bool from_logits() const { return false; }
};
using LossRef = Ref<Loss>;

}  // namespace soma::nn
