#pragma once
// Convolution and pooling layers. Inputs are NCHW ([batch, channels, height, width]) by default;
// data_format = channels_last takes and gives NHWC, Keras' default, so a Keras model ports
// without edits (the forward transposes to NCHW around the same ops; weights keep one layout).
//   Conv2D(32, 3, {.padding = "same", .activation = nn::relu})
//   Conv1D(16, 5, {.padding = "same"})   (inputs [batch, channels, width])
//   Conv2D(32, 3, {.data_format = nn::DataFormat::channels_last})  // NHWC in and out
//   Conv2DTranspose(16, {4, 4}, {.strides = 2, .padding = "same"})
//   MaxPool2D(2), AvgPool2D({3, 3}, 2, "same"), GlobalAveragePooling2D()
//   Conv3D(8, {3, 3, 3}, {.padding = "same"})   (inputs [batch, channels, depth, height, width])
//   MaxPool3D({2, 2, 2}), AvgPool3D(2), GlobalAveragePooling3D(), GlobalMaxPooling2D()
// Kernels are OIHW: Conv2D [filters, in/groups, kh, kw]; Conv2DTranspose [in, filters/groups,
// kh, kw]. Inputs are cast to the layer's dtype, as Keras does.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "soma/nn/activation.hpp"
#include "soma/nn/initializers.hpp"
#include "soma/nn/module.hpp"
#include "soma/nn_ops.hpp"

namespace soma::nn {

// Where the channels of a 4-d image batch are: NCHW (soma's default) or NHWC (Keras' default).
enum class DataFormat { channels_first, channels_last };

struct Conv2DOptions {
  Size2 strides = {1, 1};
  Padding padding = "valid";
  Size2 dilation_rate = {1, 1};
  std::int64_t groups = 1;
  Activation activation{};
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer bias_initializer = init::zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  DType dtype = DType::f32;  // of the weights
  DataFormat data_format = DataFormat::channels_first;  // of inputs and outputs
};

// y = activation(conv2d(x, kernel) + bias): kernel [filters, in/groups, kh, kw], bias [filters].
class Conv2D : public Module {
 public:
  Conv2D(std::int64_t filters, Size2 kernel_size, Conv2DOptions options = {});
  std::string type_name() const override { return "Conv2D"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;

  std::int64_t filters() const { return filters_; }
  Size2 kernel_size() const { return kernel_size_; }
  const Conv2DOptions& options() const { return opt_; }
  std::string output_activation_name() const override { return opt_.activation.name; }
  const Variable& kernel() const { return kernel_; }  // undefined until built
  const Variable& bias() const { return bias_; }      // undefined until built / without bias
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t filters_;
  Size2 kernel_size_;
  Conv2DOptions opt_;
  Variable kernel_, bias_;
};

struct Conv1DOptions {
  std::int64_t strides = 1;
  Padding padding = "valid";  // explicit: its left/right amounts (`2`: both sides)
  std::int64_t dilation_rate = 1;
  std::int64_t groups = 1;
  Activation activation{};
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer bias_initializer = init::zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  DType dtype = DType::f32;  // of the weights
};

// y = activation(conv1d(x, kernel) + bias) on [batch, channels, width] inputs (NCW, as
// PyTorch's Conv1d): kernel [filters, in/groups, kernel_size], bias [filters].
class Conv1D : public Module {
 public:
  Conv1D(std::int64_t filters, std::int64_t kernel_size, Conv1DOptions options = {});
  std::string type_name() const override { return "Conv1D"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;

  std::int64_t filters() const { return filters_; }
  std::int64_t kernel_size() const { return kernel_size_; }
  const Conv1DOptions& options() const { return opt_; }
  std::string output_activation_name() const override { return opt_.activation.name; }
  const Variable& kernel() const { return kernel_; }  // undefined until built
  const Variable& bias() const { return bias_; }      // undefined until built / without bias
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t filters_;
  std::int64_t kernel_size_;
  Conv1DOptions opt_;
  Variable kernel_, bias_;
};

struct Conv2DTransposeOptions {
  Size2 strides = {1, 1};
  Padding padding = "valid";
  std::optional<Size2> output_padding{};  // Keras' rule for the output size when unset
  Size2 dilation_rate = {1, 1};
  std::int64_t groups = 1;
  Activation activation{};
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer bias_initializer = init::zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  DType dtype = DType::f32;
  DataFormat data_format = DataFormat::channels_first;  // of inputs and outputs
};

// y = activation(conv2d_transpose(x, kernel) + bias): kernel [in, filters/groups, kh, kw].
class Conv2DTranspose : public Module {
 public:
  Conv2DTranspose(std::int64_t filters, Size2 kernel_size, Conv2DTransposeOptions options = {});
  std::string type_name() const override { return "Conv2DTranspose"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;

  std::int64_t filters() const { return filters_; }
  Size2 kernel_size() const { return kernel_size_; }
  const Conv2DTransposeOptions& options() const { return opt_; }
  std::string output_activation_name() const override { return opt_.activation.name; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t filters_;
  Size2 kernel_size_;
  Conv2DTransposeOptions opt_;
  Variable kernel_, bias_;
};

// Max / average over pool_size windows of H and W; strides default to pool_size. "same"
// average pooling divides by the number of real (unpadded) elements, as TensorFlow does.
class MaxPool2D : public Module {
 public:
  explicit MaxPool2D(Size2 pool_size = {2, 2}, std::optional<Size2> strides = std::nullopt,
                     Padding padding = "valid",
                     DataFormat data_format = DataFormat::channels_first);
  std::string type_name() const override { return "MaxPool2D"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;
  Size2 pool_size() const { return pool_; }
  Size2 strides() const { return strides_; }
  const Padding& padding() const { return padding_; }
  DataFormat data_format() const { return data_format_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Size2 pool_, strides_;
  Padding padding_;
  DataFormat data_format_;
};

class AvgPool2D : public Module {
 public:
  explicit AvgPool2D(Size2 pool_size = {2, 2}, std::optional<Size2> strides = std::nullopt,
                     Padding padding = "valid",
                     DataFormat data_format = DataFormat::channels_first);
  std::string type_name() const override { return "AvgPool2D"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;
  Size2 pool_size() const { return pool_; }
  Size2 strides() const { return strides_; }
  const Padding& padding() const { return padding_; }
  DataFormat data_format() const { return data_format_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  Size2 pool_, strides_;
  Padding padding_;
  DataFormat data_format_;
};

// Mean over H and W: [N, C, H, W] -> [N, C] ([N, C, 1, 1] with keepdims); channels_last:
// [N, H, W, C] -> [N, C] ([N, 1, 1, C]).
class GlobalAveragePooling2D : public Module {
 public:
  explicit GlobalAveragePooling2D(bool keepdims = false,
                                  DataFormat data_format = DataFormat::channels_first)
      : keepdims_(keepdims), data_format_(data_format) {}
  std::string type_name() const override { return "GlobalAveragePooling2D"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  bool keepdims() const { return keepdims_; }
  DataFormat data_format() const { return data_format_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)
  Shape output_shape(const Shape& input_shape) override;

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  bool keepdims_;
  DataFormat data_format_;
};

// ---- 3-d convolution and pooling ------------------------------------------------------------
// Sizes of the three spatial axes {depth, height, width}: one value (used for all three) or
// three, as Keras takes an int or a tuple. A layer keeps the three values.
using Size3 = std::vector<std::int64_t>;

struct Conv3DOptions {
  Size3 strides = {1, 1, 1};
  Padding padding = "valid";  // "valid" or "same" (TensorFlow's rule: the odd unit at the end)
  Size3 dilation_rate = {1, 1, 1};
  std::int64_t groups = 1;
  Activation activation{};
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer bias_initializer = init::zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  DType dtype = DType::f32;  // of the weights
  DataFormat data_format = DataFormat::channels_first;  // NCDHW, or NDHWC with channels_last
};

// y = activation(conv3d(x, kernel) + bias) on [batch, channels, depth, height, width] inputs
// (PyTorch's Conv3d layout; channels_last: [batch, d, h, w, channels], Keras' default):
// kernel [filters, in/groups, kd, kh, kw], bias [filters]. Runs soma's conv3d (one conv2d per
// kernel depth, so oneDNN/cuDNN kernels and conv2d's gradients).
class Conv3D : public Module {
 public:
  Conv3D(std::int64_t filters, Size3 kernel_size, Conv3DOptions options = {});
  Conv3D(std::int64_t filters, std::int64_t kernel_size, Conv3DOptions options = {})
      : Conv3D(filters, Size3{kernel_size}, std::move(options)) {}
  std::string type_name() const override { return "Conv3D"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;

  std::int64_t filters() const { return filters_; }
  const Size3& kernel_size() const { return kernel_size_; }
  const Conv3DOptions& options() const { return opt_; }
  // The padding conv3d gets for an input of this shape (the layer's data_format):
  // {front, back, top, bottom, left, right}.
  std::array<std::int64_t, 6> pads(const Shape& input_shape) const;
  std::string output_activation_name() const override { return opt_.activation.name; }
  const Variable& kernel() const { return kernel_; }  // undefined until built
  const Variable& bias() const { return bias_; }      // undefined until built / without bias
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t filters_;
  Size3 kernel_size_;
  Conv3DOptions opt_;
  Variable kernel_, bias_;
};

// Max / average over pool_size windows of D, H and W; strides default to pool_size; "same"
// average pooling divides by the number of real (unpadded) elements, as TensorFlow does.
// Keras' MaxPooling3D / AveragePooling3D.
class Pool3D : public Module {
 public:
  Shape output_shape(const Shape& input_shape) override;
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  const Size3& pool_size() const { return pool_; }
  const Size3& strides() const { return strides_; }
  const Padding& padding() const { return padding_; }
  DataFormat data_format() const { return data_format_; }
  bool is_max() const { return max_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Pool3D(bool max, Size3 pool_size, std::optional<Size3> strides, Padding padding,
         DataFormat data_format);
  Tensor forward(const Tensor& x) override;

 private:
  bool max_;
  Size3 pool_, strides_;
  Padding padding_;
  DataFormat data_format_;
};

class MaxPool3D : public Pool3D {
 public:
  explicit MaxPool3D(Size3 pool_size = {2, 2, 2}, std::optional<Size3> strides = std::nullopt,
                     Padding padding = "valid",
                     DataFormat data_format = DataFormat::channels_first)
      : Pool3D(true, std::move(pool_size), std::move(strides), std::move(padding), data_format) {}
  std::string type_name() const override { return "MaxPool3D"; }
};

class AvgPool3D : public Pool3D {
 public:
  explicit AvgPool3D(Size3 pool_size = {2, 2, 2}, std::optional<Size3> strides = std::nullopt,
                     Padding padding = "valid",
                     DataFormat data_format = DataFormat::channels_first)
      : Pool3D(false, std::move(pool_size), std::move(strides), std::move(padding), data_format) {}
  std::string type_name() const override { return "AvgPool3D"; }
};

// Mean or max over every spatial axis of a [N, C, spatial...] batch ([N, spatial..., C] with
// channels_last) -> [N, C] (keepdims: the spatial axes kept as 1). Keras' GlobalAveragePooling3D,
// GlobalMaxPooling2D and GlobalMaxPooling1D (soma's 1-d layers take [N, C, W], as Conv1D).
class GlobalPooling : public Module {
 public:
  Shape output_shape(const Shape& input_shape) override;
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  bool keepdims() const { return keepdims_; }
  DataFormat data_format() const { return data_format_; }
  bool is_max() const { return max_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  GlobalPooling(bool max, std::int64_t spatial, bool keepdims, DataFormat data_format)
      : max_(max), spatial_(spatial), keepdims_(keepdims), data_format_(data_format) {}
  Tensor forward(const Tensor& x) override;

 private:
  bool max_;
  std::int64_t spatial_;  // the number of spatial axes
  bool keepdims_;
  DataFormat data_format_;
};

class GlobalAveragePooling3D : public GlobalPooling {
 public:
  explicit GlobalAveragePooling3D(bool keepdims = false,
                                  DataFormat data_format = DataFormat::channels_first)
      : GlobalPooling(false, 3, keepdims, data_format) {}
  std::string type_name() const override { return "GlobalAveragePooling3D"; }
};

class GlobalMaxPooling2D : public GlobalPooling {
 public:
  explicit GlobalMaxPooling2D(bool keepdims = false,
                              DataFormat data_format = DataFormat::channels_first)
      : GlobalPooling(true, 2, keepdims, data_format) {}
  std::string type_name() const override { return "GlobalMaxPooling2D"; }
};

class GlobalMaxPooling1D : public GlobalPooling {
 public:
  explicit GlobalMaxPooling1D(bool keepdims = false,
                              DataFormat data_format = DataFormat::channels_first)
      : GlobalPooling(true, 1, keepdims, data_format) {}
  std::string type_name() const override { return "GlobalMaxPooling1D"; }
};

}  // namespace soma::nn
