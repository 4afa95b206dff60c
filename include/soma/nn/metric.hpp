#pragma once
// Metric base: stateful across batches (update_state per batch, result at any time, reset per
// epoch), as in Keras.
#include <string>

#include "soma/ref.hpp"
#include "soma/tensor.hpp"

namespace soma::nn {
class Loss;
}

namespace soma::metrics {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void update_state(const Tensor& y_true, const Tensor& y_pred,
                            const Tensor& sample_weight = Tensor()) = 0;
  virtual double result() const = 0;
  virtual void reset_state() = 0;
  virtual std::string name() const = 0;  // the key in logs/History ("accuracy", "precision")
  // Model::compile passes the loss of the metric's output: a metric whose meaning depends on
  // the loss (Accuracy's variant) settles it here. Default: nothing.
  virtual void resolve_for_loss(const nn::Loss& loss) { (void)loss; }
};
using MetricRef = Ref<Metric>;

}  // namespace soma::metrics
