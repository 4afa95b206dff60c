// TransformerEncoderLayer / TransformerDecoderLayer (include/soma/nn/transformer.hpp): PyTorch's
// blocks composed from soma layers; the submodules are made in build() so that a copy of an
// unbuilt or built layer gets its own.
#include "soma/nn/transformer.hpp"

#include "soma/nn/attention.hpp"
#include "soma/nn/config.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/normalization.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

namespace {

void check_options(const char* type, std::int64_t d_model, std::int64_t nhead,
                   const TransformerLayerOptions& o) {
  if (d_model <= 0) fail(type, "d_model must be positive, got ", d_model);
  if (nhead <= 0) fail(type, "nhead must be positive, got ", nhead);
  if (d_model % nhead != 0)
    fail(type, "d_model (", d_model, ") must be divisible by nhead (", nhead, ")");
  if (o.dim_feedforward <= 0) fail(type, "dim_feedforward must be positive, got ", o.dim_feedforward);
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) fail(type, "dropout must be in [0, 1), got ", o.dropout);
  if (!(o.layer_norm_eps > 0.0)) fail(type, "layer_norm_eps must be positive, got ", o.layer_norm_eps);
  if (!is_floating(o.dtype)) fail(type, "dtype must be floating, got ", o.dtype);
}

void visit_options(ConfigVisitor& v, std::int64_t& d_model, std::int64_t& nhead,
                   TransformerLayerOptions& o) {
  v.field("d_model", d_model);
  v.field("nhead", nhead);
  v.field("dim_feedforward", o.dim_feedforward);
  v.field("dropout", o.dropout);
  v.field("activation", o.activation);
  v.field("layer_norm_eps", o.layer_norm_eps);
  v.field("norm_first", o.norm_first);
  v.field("bias", o.bias);
  v.field("causal", o.causal);
  v.field("kernel_initializer", o.kernel_initializer);
  v.field("dtype", o.dtype);
}

void check_input(const char* type, const std::string& layer, const char* what, const Tensor& t,
                 std::int64_t d_model) {
  if (!t.defined() || t.rank() != 3 || t.dim(2) != d_model)
    fail(type, "layer '", layer, "': ", what, " must be [batch, seq, d_model = ", d_model,
         "], got ", t.defined() ? shape_str(t.shape()) : std::string("an undefined Tensor"));
}

// The pieces both layers make, named as PyTorch names them.
struct Parts {
  std::int64_t d_model, nhead;
  const TransformerLayerOptions& o;
  std::shared_ptr<MultiHeadAttention> attention(bool causal) const {
    return std::make_shared<MultiHeadAttention>(
        nhead, d_model / nhead,
        MultiHeadAttentionOptions{.use_bias = o.bias,
                                  .output_shape = d_model,
                                  .dropout = o.dropout,
                                  .use_causal_mask = causal,
                                  .kernel_initializer = o.kernel_initializer,
                                  .dtype = o.dtype});
  }
  ModuleRef dense(std::int64_t units, Activation a) const {
    return ModuleRef(Dense(units, std::move(a),
                           {.use_bias = o.bias, .kernel_initializer = o.kernel_initializer,
                            .dtype = o.dtype}));
  }
  ModuleRef norm() const {
    return ModuleRef(LayerNormalization(
        {.axis = {-1}, .epsilon = o.layer_norm_eps, .center = o.bias, .dtype = o.dtype}));
  }
  ModuleRef dropout() const { return ModuleRef(Dropout(o.dropout)); }
};

Tensor in_dtype(const Tensor& t, DType dt) { return t.dtype() == dt ? t : cast(t, dt); }

// Builds the submodules now (a model file's loader and summary() see every weight once the
// layer is built) and gives them the layer's mode and trainability, set perhaps before build().
void finish_build(Module& layer, const Shape& s, std::int64_t dim_feedforward) {
  for (auto& [name, child] : layer.named_children()) {
    if (name == "linear2") child->build_for({s[0], s[1], dim_feedforward});
    else child->build_for(s);
    child->train(layer.training());
    if (!layer.trainable()) child->set_trainable(false);
  }
}

}  // namespace

// ---- TransformerEncoderLayer -----------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                                                 TransformerLayerOptions options)
    : d_model_(d_model), nhead_(nhead), opt_(std::move(options)) {
  check_options("TransformerEncoderLayer", d_model_, nhead_, opt_);
}

void TransformerEncoderLayer::visit_config(ConfigVisitor& v) { visit_options(v, d_model_, nhead_, opt_); }

void TransformerEncoderLayer::build(const Shape& s) {
  if (s.size() != 3 || s[2] != d_model_)
    fail("TransformerEncoderLayer", "layer '", name(), "': the input must be [batch, seq, d_model = ",
         d_model_, "], got ", shape_str(s));
  Parts p{d_model_, nhead_, opt_};
  self_attn_ = register_module("self_attn", ModuleRef(p.attention(opt_.causal)));
  linear1_ = register_module("linear1", p.dense(opt_.dim_feedforward, opt_.activation));
  dropout_ = register_module("dropout", p.dropout());
  linear2_ = register_module("linear2", p.dense(d_model_, Activation()));
  norm1_ = register_module("norm1", p.norm());
  norm2_ = register_module("norm2", p.norm());
  dropout1_ = register_module("dropout1", p.dropout());
  dropout2_ = register_module("dropout2", p.dropout());
  finish_build(*this, s, opt_.dim_feedforward);
}

Tensor TransformerEncoderLayer::run(const Tensor& src, const Tensor& mask) {
  check_input("TransformerEncoderLayer", name(), "the input", src, d_model_);
  build_for(src.shape());
  auto& attn = static_cast<MultiHeadAttention&>(*self_attn_);
  Tensor x = in_dtype(src, opt_.dtype);
  auto sa = [&](const Tensor& h) {
    return (*dropout1_)(attn(h, h, {.attention_mask = mask}));
  };
  auto ff = [&](const Tensor& h) {
    return (*dropout2_)((*linear2_)((*dropout_)((*linear1_)(h))));
  };
  if (opt_.norm_first) {
    x = x + sa((*norm1_)(x));
    x = x + ff((*norm2_)(x));
  } else {
    x = (*norm1_)(x + sa(x));
    x = (*norm2_)(x + ff(x));
  }
  return x;
}

Tensor TransformerEncoderLayer::forward(const Tensor& x) { return run(x, Tensor()); }

std::vector<Tensor> TransformerEncoderLayer::call(const std::vector<Tensor>& inputs) {
  if (inputs.empty() || inputs.size() > 2)
    fail("TransformerEncoderLayer", "layer '", name(), "' takes {src [, attention_mask]}, got ",
         inputs.size(), " inputs");
  return {run(inputs[0], inputs.size() > 1 ? inputs[1] : Tensor())};
}

// ---- TransformerDecoderLayer -----------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(std::int64_t d_model, std::int64_t nhead,
                                                 TransformerLayerOptions options)
    : d_model_(d_model), nhead_(nhead), opt_(std::move(options)) {
  check_options("TransformerDecoderLayer", d_model_, nhead_, opt_);
}

void TransformerDecoderLayer::visit_config(ConfigVisitor& v) { visit_options(v, d_model_, nhead_, opt_); }

void TransformerDecoderLayer::build(const Shape& s) {
  if (s.size() != 3 || s[2] != d_model_)
    fail("TransformerDecoderLayer", "layer '", name(), "': the target must be [batch, seq, d_model = ",
         d_model_, "], got ", shape_str(s));
  Parts p{d_model_, nhead_, opt_};
  self_attn_ = register_module("self_attn", ModuleRef(p.attention(opt_.causal)));
  cross_attn_ = register_module("multihead_attn", ModuleRef(p.attention(false)));
  linear1_ = register_module("linear1", p.dense(opt_.dim_feedforward, opt_.activation));
  dropout_ = register_module("dropout", p.dropout());
  linear2_ = register_module("linear2", p.dense(d_model_, Activation()));
  norm1_ = register_module("norm1", p.norm());
  norm2_ = register_module("norm2", p.norm());
  norm3_ = register_module("norm3", p.norm());
  dropout1_ = register_module("dropout1", p.dropout());
  dropout2_ = register_module("dropout2", p.dropout());
  dropout3_ = register_module("dropout3", p.dropout());
  finish_build(*this, s, opt_.dim_feedforward);
}

std::vector<Tensor> TransformerDecoderLayer::call(const std::vector<Tensor>& inputs) {
  if (inputs.empty() || inputs.size() > 3)
    fail("TransformerDecoderLayer", "layer '", name(), "' takes {tgt, memory [, memory_mask]}, got ",
         inputs.size(), " inputs");
  const Tensor& tgt = inputs[0];
  const Tensor& memory_in = inputs.size() > 1 ? inputs[1] : inputs[0];
  check_input("TransformerDecoderLayer", name(), "the target", tgt, d_model_);
  check_input("TransformerDecoderLayer", name(), "the memory", memory_in, d_model_);
  build_for(tgt.shape());
  const Tensor mask = inputs.size() > 2 ? inputs[2] : Tensor();
  auto& self = static_cast<MultiHeadAttention&>(*self_attn_);
  auto& cross = static_cast<MultiHeadAttention&>(*cross_attn_);
  Tensor x = in_dtype(tgt, opt_.dtype), memory = in_dtype(memory_in, opt_.dtype);
  auto sa = [&](const Tensor& h) { return (*dropout1_)(self(h, h)); };
  auto mha = [&](const Tensor& h) {
    return (*dropout2_)(cross(h, memory, {.attention_mask = mask}));
  };
  auto ff = [&](const Tensor& h) {
    return (*dropout3_)((*linear2_)((*dropout_)((*linear1_)(h))));
  };
  if (opt_.norm_first) {
    x = x + sa((*norm1_)(x));
    x = x + mha((*norm2_)(x));
    x = x + ff((*norm3_)(x));
  } else {
    x = (*norm1_)(x + sa(x));
    x = (*norm2_)(x + mha(x));
    x = (*norm3_)(x + ff(x));
  }
  return {x};
}

Tensor TransformerDecoderLayer::forward(const Tensor& x) { return call({x})[0]; }

}  // namespace soma::nn
