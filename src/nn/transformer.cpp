// TransformerEncoderLayer / TransformerDecoderLayer (include/soma/nn/transformer.hpp): PyTorch's
// blocks composed from soma layers; the submodules are made in build() so that a copy of an
// unbuilt or built layer gets its own.
#include "soma/nn/transformer.hpp"

#include <cmath>

#include "soma/autograd.hpp"
#include "soma/nn/attention.hpp"
#include "soma/nn/config.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/lowering.hpp"
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

Tensor TransformerEncoderLayer::run(const Tensor& src, const Tensor& mask, KVCache* cache) {
  check_input("TransformerEncoderLayer", name(), "the input", src, d_model_);
  build_for(src.shape());
  auto& attn = static_cast<MultiHeadAttention&>(*self_attn_);
  Tensor x = in_dtype(src, opt_.dtype);
  auto sa = [&](const Tensor& h) {
    return (*dropout1_)(attn(h, h, {.attention_mask = mask, .cache = cache}));
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

Tensor TransformerEncoderLayer::forward_incremental(const Tensor& x, std::int64_t start,
                                                    KVCache& cache) {
  if (start != cache.length())
    fail("TransformerEncoderLayer", "layer '", name(), "': generation at position ", start,
         " with a KV cache of ", cache.length(), " positions (reset the cache for a new sequence)");
  return run(x, Tensor(), &cache);
}

std::vector<Tensor> TransformerEncoderLayer::call(const std::vector<Tensor>& inputs) {
  if (inputs.empty() || inputs.size() > 2)
    fail("TransformerEncoderLayer", "layer '", name(), "' takes {src [, attention_mask]}, got ",
         inputs.size(), " inputs");
  return {run(inputs[0], inputs.size() > 1 ? inputs[1] : Tensor())};
}

std::vector<LoweredValue> TransformerEncoderLayer::lower(Lowering& l,
                                                         const std::vector<LoweredValue>& in) {
  if (in.empty() || in.size() > 2)
    l.fail(describe(*this) + " takes {src [, attention_mask]}, got " + std::to_string(in.size()) +
           " inputs");
  if (!built()) l.fail(describe(*this) + " is not built");
  auto sub = [&](Module& m, const LoweredValue& v) { return l.lower(m, {v}).at(0); };
  auto add = [&](const LoweredValue& a, const LoweredValue& b) {
    return LoweredValue{l.emit1("add", {a.name, b.name}), a.shape};
  };
  auto sa = [&](const LoweredValue& h) {
    if (in.size() == 1) return sub(*dropout1_, sub(*self_attn_, h));
    return sub(*dropout1_, l.lower(*self_attn_, {h, h, h, in[1]}).at(0));
  };
  auto ff = [&](const LoweredValue& h) {
    return sub(*dropout2_, sub(*linear2_, sub(*dropout_, sub(*linear1_, h))));
  };
  LoweredValue x = in[0];
  if (opt_.norm_first) {
    x = add(x, sa(sub(*norm1_, x)));
    x = add(x, ff(sub(*norm2_, x)));
  } else {
    x = sub(*norm1_, add(x, sa(x)));
    x = sub(*norm2_, add(x, ff(x)));
  }
  x.shape = in[0].shape;
  return {x};
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
  return {run(inputs[0], inputs.size() > 1 ? inputs[1] : inputs[0],
              inputs.size() > 2 ? inputs[2] : Tensor(), nullptr)};
}

Tensor TransformerDecoderLayer::run(const Tensor& tgt, const Tensor& memory_in, const Tensor& mask,
                                    KVCache* cache) {
  check_input("TransformerDecoderLayer", name(), "the target", tgt, d_model_);
  check_input("TransformerDecoderLayer", name(), "the memory", memory_in, d_model_);
  build_for(tgt.shape());
  auto& self = static_cast<MultiHeadAttention&>(*self_attn_);
  auto& cross = static_cast<MultiHeadAttention&>(*cross_attn_);
  Tensor x = in_dtype(tgt, opt_.dtype), memory = in_dtype(memory_in, opt_.dtype);
  // The cross-attention's keys/values, fixed for a sequence, in a KVCache of their own.
  KVCache cross_cache;
  if (cache) {
    cross_cache.key = cache->cross_key;
    cross_cache.value = cache->cross_value;
  }
  auto sa = [&](const Tensor& h) { return (*dropout1_)(self(h, h, {.cache = cache})); };
  auto mha = [&](const Tensor& h) {
    return (*dropout2_)(cross(h, memory, {.attention_mask = mask,
                                          .cache = cache ? &cross_cache : nullptr,
                                          .static_kv = true}));
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
  if (cache) {
    cache->cross_key = cross_cache.key;
    cache->cross_value = cross_cache.value;
  }
  return x;
}

Tensor TransformerDecoderLayer::forward_incremental(const Tensor& x, std::int64_t start,
                                                    KVCache& cache) {
  if (start != cache.length())
    fail("TransformerDecoderLayer", "layer '", name(), "': generation at position ", start,
         " with a KV cache of ", cache.length(), " positions (reset the cache for a new sequence)");
  if (!cache.memory.defined())
    fail("TransformerDecoderLayer", "layer '", name(), "': generation needs the encoder memory "
         "in the cache (cache.memory = [batch, S, d_model]) before the first step");
  return run(x, cache.memory, cache.memory_mask, &cache);
}

std::vector<LoweredValue> TransformerDecoderLayer::lower(Lowering& l,
                                                         const std::vector<LoweredValue>& in) {
  if (in.empty() || in.size() > 3)
    l.fail(describe(*this) + " takes {tgt [, memory [, memory_mask]]}, got " +
           std::to_string(in.size()) + " inputs");
  if (!built()) l.fail(describe(*this) + " is not built");
  const LoweredValue& memory = in.size() > 1 ? in[1] : in[0];
  auto sub = [&](Module& m, const std::vector<LoweredValue>& v) { return l.lower(m, v).at(0); };
  auto add = [&](const LoweredValue& a, const LoweredValue& b) {
    return LoweredValue{l.emit1("add", {a.name, b.name}), a.shape};
  };
  auto sa = [&](const LoweredValue& h) { return sub(*dropout1_, {sub(*self_attn_, {h})}); };
  auto mha = [&](const LoweredValue& h) {
    std::vector<LoweredValue> args{h, memory};
    if (in.size() > 2) args.insert(args.end(), {memory, in[2]});
    return sub(*dropout2_, {sub(*cross_attn_, args)});
  };
  auto ff = [&](const LoweredValue& h) {
    return sub(*dropout3_, {sub(*linear2_, {sub(*dropout_, {sub(*linear1_, {h})})})});
  };
  LoweredValue x = in[0];
  if (opt_.norm_first) {
    x = add(x, sa(sub(*norm1_, {x})));
    x = add(x, mha(sub(*norm2_, {x})));
    x = add(x, ff(sub(*norm3_, {x})));
  } else {
    x = sub(*norm1_, {add(x, sa(x))});
    x = sub(*norm2_, {add(x, mha(x))});
    x = sub(*norm3_, {add(x, ff(x))});
  }
  x.shape = in[0].shape;
  return {x};
}

Tensor TransformerDecoderLayer::forward(const Tensor& x) { return call({x})[0]; }

// ---- PositionalEmbedding --------------------------------------------------------------------

PositionalEmbedding::PositionalEmbedding(std::int64_t sequence_length, PositionalEmbeddingOptions options)
    : length_(sequence_length), opt_(std::move(options)) {
  if (length_ <= 0) fail("PositionalEmbedding", "sequence_length must be positive, got ", length_);
  if (!is_floating(opt_.dtype)) fail("PositionalEmbedding", "dtype must be floating, got ", opt_.dtype);
}

void PositionalEmbedding::visit_config(ConfigVisitor& v) {
  v.field("sequence_length", length_);
  v.field("initializer", opt_.initializer);
  v.field("add_to_inputs", opt_.add_to_inputs);
  v.field("dtype", opt_.dtype);
}

void PositionalEmbedding::build(const Shape& s) {
  if (s.size() != 3 || s[2] <= 0)
    fail("PositionalEmbedding", "layer '", name(), "': the input must be [batch, seq, features] "
         "with known features, got ", shape_str(s));
  const Shape ws{length_, s[2]};
  embeddings_ = add_weight("embeddings", ws, opt_.initializer, dense_fans(ws), true, opt_.dtype);
}

Tensor PositionalEmbedding::forward(const Tensor& x) {
  KVCache none;
  return forward_incremental(x, 0, none);
}

Tensor PositionalEmbedding::forward_incremental(const Tensor& x, std::int64_t start, KVCache&) {
  build_for(x.shape());
  const Shape& ws = embeddings_.value().shape();
  if (x.rank() != 3 || x.dim(2) != ws[1] || start < 0 || start + x.dim(1) > length_)
    fail("PositionalEmbedding", "layer '", name(), "' was built for [batch, seq <= ", length_,
         ", ", ws[1], "], got ", shape_str(x.shape()), " at position ", start);
  Tensor pos = soma::slice(embeddings_.value(), {Slice{start, start + x.dim(1)}, Slice{}});
  if (opt_.add_to_inputs) return in_dtype(x, opt_.dtype) + pos;
  return broadcast_to(pos, {x.dim(0), x.dim(1), ws[1]});
}

// ---- generation --------------------------------------------------------------------------------

Tensor decode_step(const std::vector<ModuleRef>& layers, const Tensor& tokens, DecodeCache& cache) {
  if (!tokens.defined() || tokens.rank() < 2)
    fail("decode_step", "tokens must be [batch, T, ...], got ",
         tokens.defined() ? shape_str(tokens.shape()) : std::string("an undefined Tensor"));
  NoGradScope no_grad;
  Tensor x = tokens;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    // The one capability query: a layer with generation state (cache, positions) steps with it.
    if (auto* inc = dynamic_cast<IncrementalLayer*>(layers[i].get()))
      x = inc->forward_incremental(x, cache.length(), cache.layer(i));
    else
      x = (*layers[i])(x);
  }
  cache.advance(tokens.dim(1));
  return x;
}

std::vector<LoweredValue> PositionalEmbedding::lower(Lowering& l, const std::vector<LoweredValue>& in) {
  if (in.size() != 1) l.fail(describe(*this) + " takes one input");
  if (!built()) l.fail(describe(*this) + " is not built");
  if (!opt_.add_to_inputs) l.unsupported("add_to_inputs = false (the broadcast embeddings)");
  const LoweredValue& x = in[0];
  const std::int64_t T = x.shape.size() == 3 ? x.shape[1] : -1;
  if (T < 0 || T > length_)
    l.fail(describe(*this) + ": needs a known sequence length <= " + std::to_string(length_));
  Tensor rows = soma::slice(embeddings_.value(), {Slice{0, T}, Slice{}});
  return {{l.emit1("add", {x.name, l.weight("embeddings", rows)}), x.shape}};
}

std::vector<LoweredValue> SinePositionEncoding::lower(Lowering& l, const std::vector<LoweredValue>& in) {
  if (in.size() != 1) l.fail(describe(*this) + " takes one input");
  if (!add_) l.unsupported("add_to_inputs = false (the broadcast encoding)");
  const LoweredValue& x = in[0];
  if (x.shape.size() != 3 || x.shape[1] < 0 || x.shape[2] < 0)
    l.fail(describe(*this) + ": needs [batch, seq, features] with known seq and features, got " +
           shape_str(x.shape));
  Tensor t = sine_position_encoding(x.shape[1], x.shape[2], max_wavelength_, DType::f64);
  return {{l.emit1("add", {x.name, l.weight("encoding", t)}), x.shape}};
}

// ---- sinusoidal and rotary tables -------------------------------------------------------------

namespace {
// Host tables (made once, then moved): angle(t, i) = (start + t) * base^(-2 (i mod half) / dim)
// with `half` columns per frequency block as each layout wants.
Tensor table(std::int64_t seq, std::int64_t dim, DType dtype, Device device, bool interleaved,
             double base, std::int64_t start, bool want_sin_cos_mix, bool cos_table) {
  std::vector<double> v(std::size_t(seq * dim));
  for (std::int64_t t = 0; t < seq; ++t)
    for (std::int64_t i = 0; i < dim; ++i) {
      const std::int64_t k = interleaved ? i / 2 : i % (dim / 2);
      const double angle = double(start + t) * std::pow(base, -2.0 * double(k) / double(dim));
      double r;
      if (want_sin_cos_mix) r = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
      else r = cos_table ? std::cos(angle) : std::sin(angle);
      v[std::size_t(t * dim + i)] = r;
    }
  Tensor h = cast(constant(v, {seq, dim}), dtype);
  return device == Device::cpu() ? h : h.to(device);
}
}  // namespace

Tensor sine_position_encoding(std::int64_t seq, std::int64_t dim, double max_wavelength, DType dtype,
                              Device device, std::int64_t start) {
  if (seq < 0 || dim <= 0 || !(max_wavelength > 0.0))
    fail("sine_position_encoding", "needs seq >= 0, dim > 0 and max_wavelength > 0, got seq ", seq,
         ", dim ", dim, ", max_wavelength ", max_wavelength);
  return table(seq, dim, dtype, device, true, max_wavelength, start, true, false);
}

SinePositionEncoding::SinePositionEncoding(double max_wavelength, bool add_to_inputs)
    : max_wavelength_(max_wavelength), add_(add_to_inputs) {
  if (!(max_wavelength_ > 0.0))
    fail("SinePositionEncoding", "max_wavelength must be positive, got ", max_wavelength_);
}

void SinePositionEncoding::visit_config(ConfigVisitor& v) {
  v.field("max_wavelength", max_wavelength_);
  v.field("add_to_inputs", add_);
}

Tensor SinePositionEncoding::forward_incremental(const Tensor& x, std::int64_t start, KVCache&) {
  if (x.rank() != 3 || !is_floating(x.dtype()))
    fail("SinePositionEncoding", "layer '", name(), "': the input must be floating [batch, seq, "
         "features], got ", shape_str(x.shape()), " ", x.dtype());
  Tensor t = sine_position_encoding(x.dim(1), x.dim(2), max_wavelength_, x.dtype(), x.device(), start);
  return add_ ? x + t : broadcast_to(t, x.shape());
}

Tensor SinePositionEncoding::forward(const Tensor& x) {
  if (x.rank() != 3 || !is_floating(x.dtype()))
    fail("SinePositionEncoding", "layer '", name(), "': the input must be floating [batch, seq, "
         "features], got ", shape_str(x.shape()), " ", x.dtype());
  const std::int64_t T = x.dim(1), D = x.dim(2);
  if (!table_.defined() || table_.dim(0) != T || table_.dim(1) != D || table_.dtype() != x.dtype() ||
      table_.device() != x.device())
    table_ = sine_position_encoding(T, D, max_wavelength_, x.dtype(), x.device());
  if (add_) return x + table_;
  return broadcast_to(table_, x.shape());
}

RotaryTables rotary_tables(std::int64_t seq, std::int64_t dim, double base, DType dtype, Device device,
                           std::int64_t start) {
  if (seq < 0 || dim <= 0 || dim % 2 != 0 || !(base > 0.0))
    fail("rotary_tables", "needs seq >= 0, an even dim > 0 and base > 0, got seq ", seq, ", dim ",
         dim, ", base ", base);
  return {table(seq, dim, dtype, device, false, base, start, false, true),
          table(seq, dim, dtype, device, false, base, start, false, false)};
}

Tensor apply_rotary_embedding(const Tensor& x, const RotaryTables& t) {
  if (!x.defined() || x.rank() < 2 || !t.cos.defined() || t.cos.rank() != 2 ||
      t.cos.dim(0) != x.dim(-2) || t.cos.dim(1) != x.dim(-1) || x.dim(-1) % 2 != 0)
    fail("apply_rotary_embedding", "needs x [..., seq, d] with d even and tables [seq, d], got x ",
         x.defined() ? shape_str(x.shape()) : std::string("undefined"), " and tables ",
         t.cos.defined() ? shape_str(t.cos.shape()) : std::string("undefined"));
  const std::int64_t r = x.rank(), half = x.dim(-1) / 2;
  std::vector<Slice> lo(static_cast<std::size_t>(r)), hi(static_cast<std::size_t>(r));
  lo.back() = Slice{0, half};
  hi.back() = Slice{half, 2 * half};
  Tensor rotated = concat({-soma::slice(x, hi), soma::slice(x, lo)}, r - 1);
  return x * t.cos + rotated * t.sin;
}

Tensor rotary_embedding(const Tensor& x, double base, std::int64_t start) {
  if (!x.defined() || x.rank() < 2)
    fail("rotary_embedding", "needs x [..., seq, d], got ",
         x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  return apply_rotary_embedding(
      x, rotary_tables(x.dim(-2), x.dim(-1), base, x.dtype(), x.device(), start));
}

}  // namespace soma::nn
