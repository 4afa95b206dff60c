#pragma once
// PyTorch's nn.TransformerEncoderLayer and nn.TransformerDecoderLayer (batch_first=True always),
// built from MultiHeadAttention, Dense, LayerNormalization and Dropout:
//
//   nn::TransformerEncoderLayer enc(/*d_model=*/128, /*nhead=*/4, {.dim_feedforward = 512});
//   Tensor y = enc(x);                          // x [B, T, d_model] -> [B, T, d_model]
//   nn::TransformerDecoderLayer dec(128, 4);
//   Tensor z = dec.call({tgt, memory})[0];      // causal self-attention, then cross-attention
//
// Post-norm (norm_first = false, PyTorch's default):
//   x = norm1(x + dropout1(self_attn(x)));  x = norm2(x + dropout2(ff(x)))
// Pre-norm (norm_first = true):
//   x = x + dropout1(self_attn(norm1(x)));  x = x + dropout2(ff(norm2(x)))
// with ff(x) = linear2(dropout(activation(linear1(x)))). The decoder adds, between the two,
// x = norm2(x + dropout2(cross_attn(x, memory))) (or its pre-norm form) and its feed-forward
// block uses norm3 / dropout3, as PyTorch names them.
// Submodules (and so weight names, "self_attn.query_kernel", "linear1.kernel", "norm1.gamma"):
// self_attn, [cross_attn,] linear1, linear2, norm1, norm2, [norm3,] dropout, dropout1, dropout2
// [, dropout3]. The attention weights are MultiHeadAttention's (head size d_model / nhead).
#include <cstdint>
#include <string>
#include <vector>

#include "soma/nn/module.hpp"

namespace soma::nn {

struct TransformerLayerOptions {
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = relu;  // PyTorch allows relu or gelu; any soma activation works
  double layer_norm_eps = 1e-5;
  bool norm_first = false;       // pre-norm when true
  bool bias = true;              // in the attention, the feed-forward and the norms
  // Encoder: a causal self-attention mask (a GPT block; PyTorch's is_causal). Decoder: its
  // self-attention is causal unless this is false (PyTorch's tgt_is_causal with the usual mask).
  bool causal = false;
  Initializer kernel_initializer = init::glorot_uniform();
  DType dtype = DType::f32;  // of the weights; inputs are cast to it
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                          TransformerLayerOptions options = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  // inputs {src [, attention_mask]}: the mask broadcastable to [B, T, T], true where allowed.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  std::int64_t d_model() const { return d_model_; }
  std::int64_t nhead() const { return nhead_; }
  const TransformerLayerOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  Tensor run(const Tensor& x, const Tensor& mask);
  std::int64_t d_model_, nhead_;
  TransformerLayerOptions opt_;
  ModuleRef self_attn_, linear1_, linear2_, norm1_, norm2_, dropout_, dropout1_, dropout2_;
};

class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(std::int64_t d_model, std::int64_t nhead,
                          TransformerLayerOptions options = {.causal = true});
  std::string type_name() const override { return "TransformerDecoderLayer"; }
  // inputs {tgt, memory [, memory_mask]}: memory [B, S, d_model]; memory_mask broadcastable to
  // [B, T, S], true where allowed (a padding mask [B, 1, S]). One input: memory = tgt.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  std::int64_t d_model() const { return d_model_; }
  std::int64_t nhead() const { return nhead_; }
  const TransformerLayerOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t d_model_, nhead_;
  TransformerLayerOptions opt_;
  ModuleRef self_attn_, cross_attn_, linear1_, linear2_, norm1_, norm2_, norm3_, dropout_,
      dropout1_, dropout2_, dropout3_;
};

}  // namespace soma::nn
