// The config fields of the built-in layers and losses, each listed once (soma/nn/config.hpp).
// Model files, layer_config() / loss_config() and their readers all go through these lists.
#include "soma/nn/config.hpp"

#include "soma/model/merge.hpp"
#include "soma/nn/conv.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/nn/normalization.hpp"
#include "soma/nn/preprocessing.hpp"
#include "soma/nn/recurrent.hpp"

namespace soma::nn {

// ---- core layers -----------------------------------------------------------------------------
void Dense::visit_config(ConfigVisitor& v) {
  v.field("units", units_);
  v.field("activation", activation_);
  v.field("use_bias", opt_.use_bias);
  v.field("kernel_initializer", opt_.kernel_initializer);
  v.field("bias_initializer", opt_.bias_initializer);
  v.field("kernel_regularizer", opt_.kernel_regularizer);
  v.field("bias_regularizer", opt_.bias_regularizer);
  v.field("dtype", opt_.dtype);
}

void Reshape::visit_config(ConfigVisitor& v) { v.field("target_shape", target_); }

void Dropout::visit_config(ConfigVisitor& v) {
  v.field("rate", rate_);
  v.field("seed", seed_);
}

void ActivationLayer::visit_config(ConfigVisitor& v) { v.field("activation", activation_); }
void LeakyReLU::visit_config(ConfigVisitor& v) { v.field("alpha", alpha_); }
void ELU::visit_config(ConfigVisitor& v) { v.field("alpha", alpha_); }
void GELU::visit_config(ConfigVisitor& v) { v.field("approximate", approximate_); }
void Softmax::visit_config(ConfigVisitor& v) { v.field("axis", axis_); }

void Embedding::visit_config(ConfigVisitor& v) {
  v.field("input_dim", input_dim_);
  v.field("output_dim", output_dim_);
  v.field("embeddings_initializer", opt_.embeddings_initializer);
  v.field("embeddings_regularizer", opt_.embeddings_regularizer);
  v.field("dtype", opt_.dtype);
}

void Concatenate::visit_config(ConfigVisitor& v) { v.field("axis", axis_, {.optional = true}); }

// ---- convolution and pooling -----------------------------------------------------------------
namespace {
// Keras' names; absent in files and configs written before the field existed: channels_first.
constexpr const char* kDataFormatNames[] = {"channels_first", "channels_last"};
void data_format_field(ConfigVisitor& v, DataFormat& f) {
  v.field("data_format", f, EnumNames{kDataFormatNames}, {.optional = true});
}

// What Conv2D and Conv2DTranspose share after their own leading fields.
template <class O>
void conv_common(ConfigVisitor& v, O& o) {
  v.field("dilation_rate", o.dilation_rate);
  v.field("groups", o.groups);
  v.field("activation", o.activation);
  v.field("use_bias", o.use_bias);
  v.field("kernel_initializer", o.kernel_initializer);
  v.field("bias_initializer", o.bias_initializer);
  v.field("kernel_regularizer", o.kernel_regularizer);
  v.field("bias_regularizer", o.bias_regularizer);
  v.field("dtype", o.dtype);
}
}  // namespace

void Conv2D::visit_config(ConfigVisitor& v) {
  v.field("filters", filters_);
  v.field("kernel_size", kernel_size_);
  v.field("strides", opt_.strides);
  v.field("padding", opt_.padding);
  conv_common(v, opt_);
  data_format_field(v, opt_.data_format);
}

void Conv1D::visit_config(ConfigVisitor& v) {
  v.field("filters", filters_);
  v.field("kernel_size", kernel_size_);
  v.field("strides", opt_.strides);
  v.field("padding", opt_.padding);
  conv_common(v, opt_);
}

void Conv2DTranspose::visit_config(ConfigVisitor& v) {
  v.field("filters", filters_);
  v.field("kernel_size", kernel_size_);
  v.field("strides", opt_.strides);
  v.field("padding", opt_.padding);
  v.field("output_padding", opt_.output_padding);
  conv_common(v, opt_);
  data_format_field(v, opt_.data_format);
}

void MaxPool2D::visit_config(ConfigVisitor& v) {
  v.field("pool_size", pool_);
  v.field("strides", strides_);
  v.field("padding", padding_);
  data_format_field(v, data_format_);
}

void AvgPool2D::visit_config(ConfigVisitor& v) {
  v.field("pool_size", pool_);
  v.field("strides", strides_);
  v.field("padding", padding_);
  data_format_field(v, data_format_);
}

void GlobalAveragePooling2D::visit_config(ConfigVisitor& v) {
  v.field("keepdims", keepdims_, {.optional = true});
  data_format_field(v, data_format_);
}

void Conv3D::visit_config(ConfigVisitor& v) {
  v.field("filters", filters_);
  v.field("kernel_size", kernel_size_);
  v.field("strides", opt_.strides);
  v.field("padding", opt_.padding);
  conv_common(v, opt_);
  data_format_field(v, opt_.data_format);
}

void Pool3D::visit_config(ConfigVisitor& v) {
  v.field("pool_size", pool_);
  v.field("strides", strides_);
  v.field("padding", padding_);
  data_format_field(v, data_format_);
}

void GlobalPooling::visit_config(ConfigVisitor& v) {
  v.field("keepdims", keepdims_, {.optional = true});
  data_format_field(v, data_format_);
}

// ---- normalisation ---------------------------------------------------------------------------
void BatchNormalization::visit_config(ConfigVisitor& v) {
  v.field("axis", opt_.axis);
  v.field("momentum", opt_.momentum);
  v.field("epsilon", opt_.epsilon);
  v.field("center", opt_.center);
  v.field("scale", opt_.scale);
  v.field("beta_initializer", opt_.beta_initializer);
  v.field("gamma_initializer", opt_.gamma_initializer);
  v.field("moving_mean_initializer", opt_.moving_mean_initializer);
  v.field("moving_variance_initializer", opt_.moving_variance_initializer);
  v.field("beta_regularizer", opt_.beta_regularizer);
  v.field("gamma_regularizer", opt_.gamma_regularizer);
  v.field("dtype", opt_.dtype);
}

void LayerNormalization::visit_config(ConfigVisitor& v) {
  v.field("axis", opt_.axis);
  v.field("epsilon", opt_.epsilon);
  v.field("center", opt_.center);
  v.field("scale", opt_.scale);
  v.field("beta_initializer", opt_.beta_initializer);
  v.field("gamma_initializer", opt_.gamma_initializer);
  v.field("beta_regularizer", opt_.beta_regularizer);
  v.field("gamma_regularizer", opt_.gamma_regularizer);
  v.field("dtype", opt_.dtype);
}

// Adapted statistics are weights (in a file's weights section); given ones are configuration.
// "axis" is Keras' int, list or null; "dtype" may be Keras' dtype-policy object (ignored).
void Normalization::visit_config(ConfigVisitor& v) {
  v.field("axis", opt_.axis);
  v.field("mean", opt_.mean, {.optional = true, .empty_is_null = true});
  v.field("variance", opt_.variance, {.optional = true, .empty_is_null = true});
  v.field("invert", opt_.invert, {.optional = true});
  v.field("dtype", opt_.dtype, {.optional = true, .other_types_ignored = true});
}

// ---- recurrent -------------------------------------------------------------------------------
namespace {
// Every recurrent layer's fields: units first, then these, then the layer's own.
template <class O>
void rnn_common(ConfigVisitor& v, std::int64_t& units, O& o) {
  v.field("units", units);
  v.field("activation", o.activation);
  v.field("use_bias", o.use_bias);
  v.field("kernel_initializer", o.kernel_initializer);
  v.field("recurrent_initializer", o.recurrent_initializer);
  v.field("bias_initializer", o.bias_initializer);
  v.field("kernel_regularizer", o.kernel_regularizer);
  v.field("recurrent_regularizer", o.recurrent_regularizer);
  v.field("bias_regularizer", o.bias_regularizer);
  v.field("return_sequences", o.return_sequences);
  v.field("return_state", o.return_state);
  v.field("go_backwards", o.go_backwards);
  v.field("dtype", o.dtype);
}
}  // namespace

void SimpleRNN::visit_config(ConfigVisitor& v) { rnn_common(v, units_, opt_); }

void LSTM::visit_config(ConfigVisitor& v) {
  rnn_common(v, units_, opt_);
  v.field("recurrent_activation", opt_.recurrent_activation);
  v.field("unit_forget_bias", opt_.unit_forget_bias);
}

void GRU::visit_config(ConfigVisitor& v) {
  rnn_common(v, units_, opt_);
  v.field("recurrent_activation", opt_.recurrent_activation);
  v.field("reset_after", opt_.reset_after);
}

// ---- losses ----------------------------------------------------------------------------------
namespace {
// nn::Reduction's values by name; an unknown name reads as the default, as before the schema.
constexpr const char* kReductionNames[] = {"sum_over_batch_size", "sum", "none"};
}  // namespace

void Loss::visit_config(ConfigVisitor& v) {
  v.field("reduction", reduction_, EnumNames{kReductionNames, 0}, {.optional = true});
}

void Huber::visit_config(ConfigVisitor& v) {
  Loss::visit_config(v);
  v.field("delta", delta_);
}

void BinaryCrossentropy::visit_config(ConfigVisitor& v) {
  Loss::visit_config(v);
  v.field("from_logits", o_.from_logits);
  v.field("label_smoothing", o_.label_smoothing);
}

void CategoricalCrossentropy::visit_config(ConfigVisitor& v) {
  Loss::visit_config(v);
  v.field("from_logits", o_.from_logits);
  v.field("label_smoothing", o_.label_smoothing);
  v.field("axis", o_.axis);
}

void SparseCategoricalCrossentropy::visit_config(ConfigVisitor& v) {
  Loss::visit_config(v);
  v.field("from_logits", o_.from_logits);
}

void Crossentropy::visit_config(ConfigVisitor& v) {
  Loss::visit_config(v);
  v.field("from_logits", o_.from_logits);
}

}  // namespace soma::nn
