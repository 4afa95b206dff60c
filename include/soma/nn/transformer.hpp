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

#include "soma/nn/attention.hpp"
#include "soma/nn/module.hpp"

namespace soma::nn {

// A layer that generation can step through with state (a KV cache, a position offset): x holds
// the positions start .. start + T - 1 of the sequence and `cache` is this layer's, kept by the
// caller between calls (decode_step below does that for a stack of layers).
class IncrementalLayer {
 public:
  virtual ~IncrementalLayer() = default;
  virtual Tensor forward_incremental(const Tensor& x, std::int64_t start, KVCache& cache) = 0;
};

// One generation step through a stack of layers (a Sequential's layers()): layers that are
// IncrementalLayers get their cache and the position offset, the others (Embedding, Dense,
// norms: position-wise) are called as usual. tokens [B, T] (or the first layer's input) are
// the next T positions; returns the last layer's output for them. No tape is recorded; put the
// model in eval mode (model.eval()) first so that dropout is off.
//   nn::DecodeCache cache;
//   Tensor logits = nn::decode_step(model.layers(), prompt, cache);      // prefill
//   ... logits = nn::decode_step(model.layers(), next_token /*[B, 1]*/, cache);   // O(n) each
class DecodeCache {
 public:
  std::int64_t length() const { return length_; }  // positions seen so far
  void reset() {
    layers_.clear();
    length_ = 0;
  }
  KVCache& layer(std::size_t i) {
    if (layers_.size() <= i) layers_.resize(i + 1);
    return layers_[i];
  }
  void advance(std::int64_t n) { length_ += n; }

 private:
  std::vector<KVCache> layers_;
  std::int64_t length_ = 0;
};
Tensor decode_step(const std::vector<ModuleRef>& layers, const Tensor& tokens, DecodeCache& cache);

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

class TransformerEncoderLayer : public Module, public IncrementalLayer {
 public:
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                          TransformerLayerOptions options = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  // inputs {src [, attention_mask]}: the mask broadcastable to [B, T, T], true where allowed.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  // Self-attention over the cached keys/values plus x's (KVCache in attention.hpp); with
  // `causal`, x's positions see the cache and themselves up to their own position.
  Tensor forward_incremental(const Tensor& x, std::int64_t start, KVCache& cache) override;
  // ONNX export: its submodules' lowerings and the residual adds; inputs {src [,
  // attention_mask]} (the mask [B, T, T] or [B, 1, T], bool or numeric).
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  std::int64_t d_model() const { return d_model_; }
  std::int64_t nhead() const { return nhead_; }
  const TransformerLayerOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  Tensor run(const Tensor& x, const Tensor& mask, KVCache* cache = nullptr);
  std::int64_t d_model_, nhead_;
  TransformerLayerOptions opt_;
  ModuleRef self_attn_, linear1_, linear2_, norm1_, norm2_, dropout_, dropout1_, dropout2_;
};

class TransformerDecoderLayer : public Module, public IncrementalLayer {
 public:
  TransformerDecoderLayer(std::int64_t d_model, std::int64_t nhead,
                          TransformerLayerOptions options = {.causal = true});
  std::string type_name() const override { return "TransformerDecoderLayer"; }
  // inputs {tgt, memory [, memory_mask]}: memory [B, S, d_model]; memory_mask broadcastable to
  // [B, T, S], true where allowed (a padding mask [B, 1, S]). One input: memory = tgt.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  // Generation: x holds target positions start .. start + T - 1; the self-attention keys/values
  // are appended to cache.key/value, the cross-attention's are projected from cache.memory
  // (which the caller sets before the first step, with cache.memory_mask [B, 1, S] if any) once
  // and kept in cache.cross_key/cross_value.
  Tensor forward_incremental(const Tensor& x, std::int64_t start, KVCache& cache) override;
  // ONNX export: inputs {tgt, memory [, memory_mask]} (one input: memory = tgt); the mask bool
  // or numeric (nonzero: attend), [B, T, S] or [B, 1, S].
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  std::int64_t d_model() const { return d_model_; }
  std::int64_t nhead() const { return nhead_; }
  const TransformerLayerOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  Tensor run(const Tensor& tgt, const Tensor& memory, const Tensor& mask, KVCache* cache);
  std::int64_t d_model_, nhead_;
  TransformerLayerOptions opt_;
  ModuleRef self_attn_, cross_attn_, linear1_, linear2_, norm1_, norm2_, norm3_, dropout_,
      dropout1_, dropout2_, dropout3_;
};

// ---- positions ------------------------------------------------------------------------------

struct PositionalEmbeddingOptions {
  Initializer initializer = init::glorot_uniform();  // Keras-NLP's default
  bool add_to_inputs = false;  // false: return the embeddings broadcast (Keras-NLP); true: x + them
  DType dtype = DType::f32;
};

// keras_nlp.layers.PositionEmbedding: a learned table `embeddings` [sequence_length, D]; on
// inputs [B, T, D] (T <= sequence_length) gives embeddings[:T] broadcast to [B, T, D] (or, with
// add_to_inputs, the inputs plus that, usable in a Sequential after an Embedding).
class PositionalEmbedding : public Module, public IncrementalLayer {
 public:
  explicit PositionalEmbedding(std::int64_t sequence_length, PositionalEmbeddingOptions options = {});
  std::string type_name() const override { return "PositionalEmbedding"; }
  // Rows start .. start + T - 1 (generation with a cache); start + T <= sequence_length.
  Tensor forward_incremental(const Tensor& x, std::int64_t start, KVCache& cache) override;
  // ONNX export with add_to_inputs: x + the first T rows (T known from the input shape).
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  std::int64_t sequence_length() const { return length_; }
  const PositionalEmbeddingOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t length_;
  PositionalEmbeddingOptions opt_;
  Variable embeddings_;
};

// The sinusoidal encoding [seq, dim] of "Attention is all you need" as keras_nlp's
// SinePositionEncoding lays it out: column i has frequency max_wavelength^(-2 floor(i/2) / dim),
// sin on even columns, cos on odd ones; rows are positions start .. start + seq - 1.
Tensor sine_position_encoding(std::int64_t seq, std::int64_t dim, double max_wavelength = 10000.0,
                              DType dtype = DType::f32, Device device = Device::cpu(),
                              std::int64_t start = 0);

// keras_nlp.layers.SinePositionEncoding: no weights; inputs [B, T, D] -> the encoding broadcast
// to [B, T, D] (or the inputs plus it, with add_to_inputs). The table is made once per length,
// dtype and device and kept (no host constant per step).
class SinePositionEncoding : public Module, public IncrementalLayer {
 public:
  explicit SinePositionEncoding(double max_wavelength = 10000.0, bool add_to_inputs = false);
  std::string type_name() const override { return "SinePositionEncoding"; }
  // Positions start .. start + T - 1 (generation with a cache).
  Tensor forward_incremental(const Tensor& x, std::int64_t start, KVCache& cache) override;
  // ONNX export with add_to_inputs: x + the encoding as a constant [T, D] (T, D known from the
  // input shape).
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  Shape output_shape(const Shape& input_shape) override { return input_shape; }
  double max_wavelength() const { return max_wavelength_; }
  bool add_to_inputs() const { return add_; }
  void visit_config(ConfigVisitor& v) override;

 protected:
  Tensor forward(const Tensor& x) override;

 private:
  double max_wavelength_;
  bool add_;
  Tensor table_;  // the last one made: [T, D] on the input's device, in its dtype
};

// Rotary position embeddings (RoPE; Su et al.), in the "rotate half" layout of GPT-NeoX, Hugging
// Face's Llama and keras_nlp's RotaryEmbedding: for x [..., seq, d] (d even; usually
// [batch, heads, seq, d]) with x1 = x[..., :d/2], x2 = x[..., d/2:],
//   y = x * cos + concat(-x2, x1) * sin,   cos/sin [seq, d] of angle (start + t) * base^(-2i/d)
// for column i mod d/2. Apply it to the queries and keys before the attention.
struct RotaryTables {
  Tensor cos, sin;  // [seq, d]
};
RotaryTables rotary_tables(std::int64_t seq, std::int64_t dim, double base = 10000.0,
                           DType dtype = DType::f32, Device device = Device::cpu(),
                           std::int64_t start = 0);
// Only ops on x's device: make the tables once (rotary_tables) and reuse them every step.
Tensor apply_rotary_embedding(const Tensor& x, const RotaryTables& tables);
// Convenience: makes the tables for x (on x's device) and applies them.
Tensor rotary_embedding(const Tensor& x, double base = 10000.0, std::int64_t start = 0);

}  // namespace soma::nn
