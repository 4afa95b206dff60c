#pragma once
// Preprocessing layers (Keras' keras.layers.Normalization): state computed from data by adapt(),
// kept as non-trainable weights so that it travels with the model (state_dict, model files).
#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "soma/nn/module.hpp"
#include "soma/ops.hpp"

namespace soma::data {
class Dataset;
}

namespace soma::nn {

struct NormalizationOptions {
  // The axes that keep their own mean and variance (Keras' `axis`): -1, the default, gives one
  // mean/variance per index of the last axis; {1} per channel of NCHW images. std::nullopt (or
  // an empty list), like Keras' axis=None, gives one mean and variance over all elements.
  std::optional<Axes> axis = Axes{-1};
  // Given statistics instead of adapt(): both or neither, each of 1 value (broadcast) or one per
  // index of the kept axes, row-major. Given statistics are configuration, not weights (Keras).
  std::vector<double> mean{};
  std::vector<double> variance{};
  // true: undoes the normalisation, x * sqrt(variance) + mean (e.g. for regression targets).
  bool invert = false;
  DType dtype = DType::f32;
};

// y = (x - mean) / max(sqrt(variance), 1e-7), as Keras (backend epsilon 1e-7). The statistics
// come from the options or from adapt(), which builds the layer and stores them in the
// non-trainable weights mean, variance (shape: the kept axes' extents) and count (i64 scalar:
// the number of values per statistic that adapt saw), so summary() counts 2 * features + 1
// non-trainable parameters, as Keras. Calling the layer before it has statistics is an error.
// The gradient flows to the input; the statistics never change in training.
// A copy keeps the adapted statistics (unlike other layers' weights), so
// `norm.adapt(x); Sequential{norm, ...}` works.
class Normalization : public Module {
 public:
  static constexpr double kEpsilon = 1e-7;

  explicit Normalization(NormalizationOptions options = {});
  Normalization(const Normalization& other);
  std::string type_name() const override { return "Normalization"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  const NormalizationOptions& options() const { return opt_; }

  // Computes the population mean and variance of `data` (batch axis first) over every axis but
  // the kept ones, accumulating in f64 chunk by chunk (Chan's parallel update), and replaces
  // any earlier statistics. Builds the layer for data's shape on first use.
  void adapt(const Tensor& data);
  // The same over a dataset whose elements' first tensor is a batch (e.g. x of (x, y) batches).
  void adapt(const data::Dataset& dataset);

  // True once the layer has statistics (given, adapted, or loaded with count > 0).
  bool has_statistics() const;
  // The statistics in the kept axes' shape (the layer's dtype); need has_statistics().
  Tensor mean() const;
  Tensor variance() const;
  std::int64_t count() const;  // 0 unless adapted (or loaded from an adapted layer)
  // The shape mean()/variance() take to broadcast against a rank-`rank` input (needs build).
  Shape broadcast_shape(std::int64_t rank) const;
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  bool given() const { return !opt_.mean.empty(); }
  bool global() const { return !opt_.axis || opt_.axis->empty(); }
  void check_input(const Shape& s, const char* who) const;

  NormalizationOptions opt_;
  std::vector<int> axes_;  // kept axes, normalised by build()
  std::int64_t rank_ = 0;  // 0 for a global layer (any rank then)
  Shape kept_shape_;       // extents of the kept axes ([] for a global layer)
  Variable mean_, variance_, count_;  // adapted statistics (undefined with given ones)
  Tensor given_mean_, given_variance_;  // given statistics in kept_shape_
  // A copy of an adapted layer carries its statistics into its own build().
  Tensor carried_mean_, carried_variance_;
  std::int64_t carried_count_ = 0;
  mutable std::atomic<bool> has_stats_{false};  // a cache: set once statistics are known
};

}  // namespace soma::nn
