#pragma once
// Loss base: losses are objects (never enums). A loss computes a per-sample value, then applies
// optional sample weights and a reduction.
#include <string>

#include "soma/ref.hpp"
#include "soma/tensor.hpp"

namespace soma::nn {

enum class Reduction { SumOverBatchSize, Sum, None };  // Keras' names; mean is the default

class Loss {
 public:
  virtual ~Loss() = default;
  // y_true, y_pred batched on axis 0. sample_weight (optional) has shape [batch] (or broadcasts
  // to the per-sample loss). Returns a scalar, or per-sample values with Reduction::None.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = Tensor()) const;
  virtual std::string name() const = 0;
  Reduction reduction() const { return reduction_; }

 protected:
  explicit Loss(Reduction r = Reduction::SumOverBatchSize) : reduction_(r) {}
  // Loss per sample: shape [batch] (one value per row of y_pred).
  virtual Tensor per_sample(const Tensor& y_true, const Tensor& y_pred) const = 0;

 private:
  Reduction reduction_;
};
using LossRef = Ref<Loss>;

}  // namespace soma::nn
