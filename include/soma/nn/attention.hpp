#pragma once
// Keras' MultiHeadAttention on soma's fused scaled_dot_product_attention op (soma/nn_ops.hpp):
//
//   nn::MultiHeadAttention mha(/*num_heads=*/4, /*key_dim=*/32);
//   Tensor y = mha(query, value);                                  // key = value
//   Tensor z = mha(query, value, {.key = key, .attention_mask = m, .use_causal_mask = true});
//   auto [out, scores] = mha.attend(query, value, {.return_attention_scores = true});
//   Tensor s = mha(x);                                             // self-attention
//   auto h = nn::call(ModuleRef(nn::MultiHeadAttention(4, 32)), {q_in, v_in});  // functional
//
// query [B, T, Dq], value [B, S, Dv], key [B, S, Dk] -> [B, T, output_shape]. Weights, as Keras
// names and lays them out: query_kernel [Dq, H, key_dim], key_kernel [Dk, H, key_dim],
// value_kernel [Dv, H, value_dim], output_kernel [H, value_dim, output_shape], and biases
// query_bias [H, key_dim], key_bias, value_bias [H, value_dim], output_bias [output_shape].
// attention_mask [B, T, S] (or broadcastable, e.g. [B, 1, S] for padding): true / nonzero where
// query t may attend to key s. A query row with no key to attend to gives zeros (Keras gives
// the mean of the values: it adds -1e9 rather than masking).
// The attention runs fused (memory O(T + S), docs/attention.md) except when the scores are
// returned or dropout is active in training: those need the [B, H, T, S] weights.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "soma/nn/module.hpp"

namespace soma::nn {

struct MultiHeadAttentionOptions {
  std::optional<std::int64_t> value_dim;     // default key_dim
  bool use_bias = true;
  std::optional<std::int64_t> output_shape;  // default the query's last dimension
  double dropout = 0.0;                      // on the attention weights, in training
  // Keras takes use_causal_mask per call; here it is also a layer option so that functional
  // models and model files keep it (either one turns the causal mask on).
  bool use_causal_mask = false;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer bias_initializer = init::zeros();
  DType dtype = DType::f32;  // of the weights; inputs are cast to it
};

// The projected keys and values of the positions seen so far, so that generating one token
// costs O(n) (project its k/v, append them, attend over the cache) rather than re-running the
// whole context. One per self-attention layer; empty at the start of a sequence.
struct KVCache {
  Tensor key, value;  // [B, H, n, key_dim] and [B, H, n, value_dim]
  // A TransformerDecoderLayer's cross-attention: the encoder output it attends to (set by the
  // caller before the first step, with its padding mask [B, 1, S] if any) and the keys/values
  // projected from it on the first step, then reused.
  Tensor memory, memory_mask, cross_key, cross_value;
  std::int64_t length() const { return key.defined() ? key.dim(2) : 0; }
  void reset() { key = value = memory = memory_mask = cross_key = cross_value = Tensor(); }
};

// Keras' call arguments after query and value.
struct AttentionCallOptions {
  Tensor key;             // undefined: key = value
  Tensor attention_mask;  // undefined: none; else broadcastable to [B, T, S], bool or numeric
  bool use_causal_mask = false;
  bool return_attention_scores = false;  // attend() only
  // Self-attention during generation: the new positions' keys and values are appended to the
  // cache and the query attends over all of it. With the causal mask, query i (of T new ones)
  // sees cache positions j <= cache.length() + i (the mask is aligned bottom-right).
  KVCache* cache = nullptr;
  // With `cache`: the keys/values come from a fixed input (cross-attention to an encoder
  // memory): an empty cache is filled from key/value, a filled one is used as it is (key and
  // value are not projected again) and never grows.
  bool static_kv = false;
};

struct AttentionResult {
  Tensor output;  // [B, T, output_shape]
  Tensor scores;  // [B, H, T, S] when asked for, else undefined
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                     MultiHeadAttentionOptions options = {});
  std::string type_name() const override { return "MultiHeadAttention"; }

  using Module::operator();  // mha(x): self-attention
  Tensor operator()(const Tensor& query, const Tensor& value, const AttentionCallOptions& c = {});
  AttentionResult attend(const Tensor& query, const Tensor& value,
                         const AttentionCallOptions& c = {});
  // inputs {query, value [, key [, attention_mask]]} (one input: self-attention); one output.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  Shape output_shape(const Shape& query_shape) override;
  // As projections, the scaled_dot_product_attention op (the ONNX exporter writes it as
  // MatMul/Softmax/Where, the causal mask made from the scores' shape) and reshapes; inputs
  // {query [, value [, key]]}. An attention_mask input is not lowered.
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;

  std::int64_t num_heads() const { return heads_; }
  std::int64_t key_dim() const { return key_dim_; }
  std::int64_t value_dim() const { return opt_.value_dim.value_or(key_dim_); }
  const MultiHeadAttentionOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  void build(const Shape& query_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  Tensor project(const Tensor& x, const Variable& kernel, const Variable& bias) const;

  std::int64_t heads_, key_dim_;
  MultiHeadAttentionOptions opt_;
  std::int64_t value_in_ = 0, key_in_ = 0;  // the value's and key's last dims, for build()
  std::uint64_t dropout_calls_ = 0;
  Variable wq_, bq_, wk_, bk_, wv_, bv_, wo_, bo_;
};

}  // namespace soma::nn
