// MultiHeadAttention (include/soma/nn/attention.hpp): projections as matmuls over the last axis,
// the attention as the fused scaled_dot_product_attention op (or, when the weights themselves are
// wanted, as matmul + softmax).
#include "soma/nn/attention.hpp"

#include <cmath>
#include <limits>

#include "soma/nn/config.hpp"
#include "soma/nn_ops.hpp"
#include "soma/ops.hpp"
#include "soma/random_state.hpp"

namespace soma::nn {

namespace {

// A 0-d tensor of t's dtype on t's device (filled there: no host-to-device copy per call).
Tensor scalar_like(double v, const Tensor& t) {
  if (t.device().is_cpu()) return scalar(v, t.dtype());
  return full_like(Tensor::empty({}, t.dtype(), t.device()), v);
}
constexpr const char* kType = "MultiHeadAttention";

Tensor in_dtype(const Tensor& t, DType dt) { return t.dtype() == dt ? t : cast(t, dt); }

void check_rank3(const std::string& layer, const char* what, const Tensor& t) {
  if (t.rank() != 3)
    fail(kType, "layer '", layer, "': ", what, " must be [batch, seq, features], got shape ",
         shape_str(t.shape()));
}
}  // namespace

MultiHeadAttention::MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                                       MultiHeadAttentionOptions options)
    : heads_(num_heads), key_dim_(key_dim), opt_(std::move(options)) {
  if (num_heads <= 0) fail(kType, "num_heads must be positive, got ", num_heads);
  if (key_dim <= 0) fail(kType, "key_dim must be positive, got ", key_dim);
  if (opt_.value_dim && *opt_.value_dim <= 0)
    fail(kType, "value_dim must be positive, got ", *opt_.value_dim);
  if (opt_.output_shape && *opt_.output_shape <= 0)
    fail(kType, "output_shape must be positive, got ", *opt_.output_shape);
  if (!(opt_.dropout >= 0.0 && opt_.dropout < 1.0))
    fail(kType, "dropout must be in [0, 1), got ", opt_.dropout);
  if (!is_floating(opt_.dtype)) fail(kType, "dtype must be floating, got ", opt_.dtype);
}

void MultiHeadAttention::visit_config(ConfigVisitor& v) {
  v.field("num_heads", heads_);
  v.field("key_dim", key_dim_);
  v.field("value_dim", opt_.value_dim);
  v.field("use_bias", opt_.use_bias);
  v.field("output_shape", opt_.output_shape);
  v.field("dropout", opt_.dropout);
  v.field("use_causal_mask", opt_.use_causal_mask);
  v.field("kernel_initializer", opt_.kernel_initializer);
  v.field("bias_initializer", opt_.bias_initializer);
  v.field("dtype", opt_.dtype);
}

Shape MultiHeadAttention::output_shape(const Shape& query_shape) {
  if (query_shape.size() != 3)
    fail(kType, "layer '", name(), "': the query must be [batch, seq, features], got shape ",
         shape_str(query_shape));
  return {query_shape[0], query_shape[1], opt_.output_shape.value_or(query_shape[2])};
}

void MultiHeadAttention::build(const Shape& query_shape) {
  if (query_shape.size() != 3 || query_shape[2] <= 0)
    fail(kType, "layer '", name(), "': the query must be [batch, seq, features] with known "
                "features, got shape ", shape_str(query_shape));
  const std::int64_t dq = query_shape[2];
  const std::int64_t dk = key_in_ > 0 ? key_in_ : dq, dv = value_in_ > 0 ? value_in_ : dq;
  const std::int64_t vd = value_dim(), out = opt_.output_shape.value_or(dq);
  const DType dt = opt_.dtype;
  // Fans as Keras' EinsumDense: the input features in, the projected features out.
  auto kernel = [&](const char* n, Shape s, double fan_in, double fan_out) {
    return add_weight(n, s, opt_.kernel_initializer, Fans{fan_in, fan_out}, true, dt);
  };
  auto bias = [&](const char* n, Shape s) {
    double f = 1;
    for (auto d : s) f *= double(d);
    return add_weight(n, s, opt_.bias_initializer, Fans{f, f}, true, dt);
  };
  wq_ = kernel("query_kernel", {dq, heads_, key_dim_}, double(dq), double(heads_ * key_dim_));
  if (opt_.use_bias) bq_ = bias("query_bias", {heads_, key_dim_});
  wk_ = kernel("key_kernel", {dk, heads_, key_dim_}, double(dk), double(heads_ * key_dim_));
  if (opt_.use_bias) bk_ = bias("key_bias", {heads_, key_dim_});
  wv_ = kernel("value_kernel", {dv, heads_, vd}, double(dv), double(heads_ * vd));
  if (opt_.use_bias) bv_ = bias("value_bias", {heads_, vd});
  wo_ = kernel("output_kernel", {heads_, vd, out}, double(heads_ * vd), double(out));
  if (opt_.use_bias) bo_ = bias("output_bias", {out});
}

// x [B, T, D] -> [B, H, T, d] with kernel [D, H, d] and bias [H, d].
Tensor MultiHeadAttention::project(const Tensor& x, const Variable& kernel,
                                   const Variable& bias) const {
  const Shape& ks = kernel.value().shape();
  if (x.dim(-1) != ks[0])
    fail(kType, "layer '", name(), "' was built for inputs with ", ks[0], " features, got shape ",
         shape_str(x.shape()));
  Tensor y = matmul(x, reshape(kernel.value(), {ks[0], ks[1] * ks[2]}));
  if (bias.defined()) y = y + reshape(bias.value(), {ks[1] * ks[2]});
  return transpose(reshape(y, {x.dim(0), x.dim(1), ks[1], ks[2]}), {0, 2, 1, 3});
}

AttentionResult MultiHeadAttention::attend(const Tensor& query_in, const Tensor& value_in,
                                           const AttentionCallOptions& c) {
  if (!query_in.defined() || !value_in.defined())
    fail(kType, "layer '", name(), "': query and value must be defined Tensors");
  const Tensor& key_given = c.key.defined() ? c.key : value_in;
  check_rank3(name(), "the query", query_in);
  check_rank3(name(), "the value", value_in);
  check_rank3(name(), "the key", key_given);
  if (key_given.dim(0) != value_in.dim(0) || key_given.dim(1) != value_in.dim(1) ||
      query_in.dim(0) != value_in.dim(0))
    fail(kType, "layer '", name(), "': query ", shape_str(query_in.shape()), ", value ",
         shape_str(value_in.shape()), " and key ", shape_str(key_given.shape()),
         " must share the batch, and key and value the sequence length");
  if (!built()) {
    value_in_ = value_in.dim(-1);
    key_in_ = key_given.dim(-1);
  }
  build_for(query_in.shape());
  const DType dt = opt_.dtype;
  const Tensor query = in_dtype(query_in, dt), value = in_dtype(value_in, dt),
               key = in_dtype(key_given, dt);
  const Tensor q = project(query, wq_, bq_);
  Tensor k, v;
  if (c.cache && c.static_kv && c.cache->length() > 0) {
    // Cross-attention to a fixed memory: its keys/values were projected on the first step.
    if (c.cache->key.dim(0) != q.dim(0))
      fail(kType, "layer '", name(), "': the cross-attention cache holds keys ",
           shape_str(c.cache->key.shape()), " for another batch than the query's ",
           shape_str(query.shape()), " (reset it for a new batch)");
    k = c.cache->key;
    v = c.cache->value;
  } else {
    k = project(key, wk_, bk_);
    v = project(value, wv_, bv_);
  }
  const bool grows = c.cache && !c.static_kv;
  const std::int64_t past = grows ? c.cache->length() : 0;
  if (c.cache && c.static_kv) {
    c.cache->key = k;
    c.cache->value = v;
  } else if (c.cache) {
    if (past > 0) {
      if (c.cache->key.dim(0) != k.dim(0) || c.cache->key.device() != k.device() ||
          c.cache->key.dtype() != k.dtype())
        fail(kType, "layer '", name(), "': the KV cache holds keys ",
             shape_str(c.cache->key.shape()), " ", c.cache->key.dtype(), " on ",
             c.cache->key.device().str(), ", the new ones are ", shape_str(k.shape()), " ",
             k.dtype(), " on ", k.device().str(), " (reset it for a new batch)");
      k = concat({c.cache->key, k}, 2);
      v = concat({c.cache->value, v}, 2);
    }
    c.cache->key = k;
    c.cache->value = v;
  }
  const std::int64_t B = query.dim(0), T = query.dim(1), S = k.dim(2);
  bool causal = c.use_causal_mask || opt_.use_causal_mask;
  // With a cache the causal mask is bottom-right (query i is position past + i): the op's
  // top-left rule holds for past = 0, a single new query sees every key, else an explicit mask.
  Tensor cache_mask;
  if (causal && past > 0) {
    causal = false;
    if (T > 1) {
      std::vector<double> cm(std::size_t(T * S));
      for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t j = 0; j < S; ++j) cm[std::size_t(i * S + j)] = j <= past + i ? 1.0 : 0.0;
      cache_mask = cast(constant(cm, {T, S}), DType::boolean);
      if (q.device() != cache_mask.device()) cache_mask = cache_mask.to(q.device());
    }
  }

  // The mask as bool [B or 1, 1, T or 1, S or 1] for the op.
  Tensor mask;
  if (c.attention_mask.defined()) {
    Tensor m = c.attention_mask;
    if (m.rank() < 2 || m.rank() > 3)
      fail(kType, "layer '", name(), "': attention_mask must broadcast to [batch, T, S] = ",
           shape_str({B, T, S}), ", got shape ", shape_str(m.shape()));
    if (m.rank() == 2) m = expand_dims(m, 0);
    mask = expand_dims(m.dtype() == DType::boolean ? m : not_equal(m, zeros_like(m)), 1);
  }
  if (cache_mask.defined()) mask = mask.defined() ? logical_and(mask, cache_mask) : cache_mask;

  const bool weights_wanted = c.return_attention_scores || (training() && opt_.dropout > 0.0);
  AttentionResult r;
  Tensor o;  // [B, H, T, value_dim]
  if (!weights_wanted) {
    o = scaled_dot_product_attention(q, k, v, mask, {.causal = causal, .scale = std::nullopt});
  } else {
    // The [B, H, T, S] weights themselves: matmul and softmax, masked entries at -1e30 (finite,
    // so a fully masked row is uniform, then zeroed by the mask as the fused op gives zeros).
    // The scale goes on q ([B, H, T, d], S/d times smaller than the logits), as PyTorch does.
    Tensor s = matmul(q * (1.0 / std::sqrt(double(key_dim_))), transpose(k, {0, 1, 3, 2}));
    Tensor allowed = mask;
    if (causal) {
      std::vector<double> cm(std::size_t(T * S));
      for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t j = 0; j < S; ++j) cm[std::size_t(i * S + j)] = j <= i ? 1.0 : 0.0;
      Tensor cmask = cast(constant(cm, {T, S}), DType::boolean);
      allowed = allowed.defined() ? logical_and(allowed, cmask) : cmask;
    }
    if (allowed.defined()) s = where(allowed, s, scalar_like(-1e30, s));
    Tensor p = soma::softmax(s, -1);
    // Only a mask other than the causal one can leave a row with no key (the causal mask always
    // allows the diagonal): zero such rows as the fused op does.
    if (mask.defined()) p = p * cast(allowed, dt);
    r.scores = p;
    const bool drop = training() && opt_.dropout > 0.0;
    if (drop) {
      Tensor u = soma::detail::dropout_uniform(p, std::nullopt, dropout_calls_++);
      // `u >= rate` makes the rate on u's device (no host tensor per call); u has p's dtype.
      // The 1 / (1 - rate) goes on the [B, H, T, value_dim] output, not on the weights.
      p = p * cast(u >= opt_.dropout, dt);
    }
    o = matmul(p, v);
    if (drop) o = o * (1.0 / (1.0 - opt_.dropout));
  }
  const Shape& wos = wo_.value().shape();
  Tensor merged = reshape(transpose(o, {0, 2, 1, 3}), {B, T, wos[0] * wos[1]});
  Tensor y = matmul(merged, reshape(wo_.value(), {wos[0] * wos[1], wos[2]}));
  if (bo_.defined()) y = y + bo_.value();
  r.output = y;
  if (!c.return_attention_scores) r.scores = Tensor();
  return r;
}

Tensor MultiHeadAttention::operator()(const Tensor& query, const Tensor& value,
                                      const AttentionCallOptions& c) {
  return attend(query, value, c).output;
}

std::vector<Tensor> MultiHeadAttention::call(const std::vector<Tensor>& inputs) {
  if (inputs.empty() || inputs.size() > 4)
    fail(kType, "layer '", name(), "' takes {query, value [, key [, attention_mask]]}, got ",
         inputs.size(), " inputs");
  AttentionCallOptions c;
  if (inputs.size() > 2) c.key = inputs[2];
  if (inputs.size() > 3) c.attention_mask = inputs[3];
  return {attend(inputs[0], inputs.size() > 1 ? inputs[1] : inputs[0], c).output};
}

Tensor MultiHeadAttention::forward(const Tensor& x) { return attend(x, x).output; }

std::vector<LoweredValue> MultiHeadAttention::lower(Lowering& l,
                                                    const std::vector<LoweredValue>& in) {
  if (in.empty() || in.size() > 4)
    l.fail(describe(*this) + " takes {query [, value [, key [, attention_mask]]]}, got " +
           std::to_string(in.size()) + " inputs");
  if (!built()) l.fail(describe(*this) + " is not built");
  const LoweredValue& query = in[0];
  const LoweredValue& value = in.size() > 1 ? in[1] : in[0];
  const LoweredValue& key = in.size() > 2 && !in[2].name.empty() ? in[2] : value;
  using Ints = std::vector<std::int64_t>;
  // x [B, T, D] -> [B, H, T, d] (or [B, H, d, T] for the key, ready for q k^T)
  auto project = [&](const LoweredValue& x, const char* which, const Variable& kernel,
                     const Variable& bias, const Ints& perm) {
    const Shape& ks = kernel.value().shape();
    std::string y = l.emit1("matmul", {x.name, l.weight(std::string(which) + "_kernel",
                                                         reshape(kernel.value(), {ks[0], ks[1] * ks[2]}))});
    if (bias.defined())
      y = l.emit1("add", {y, l.weight(std::string(which) + "_bias", reshape(bias.value(), {ks[1] * ks[2]}))});
    y = l.emit1("reshape", {y}, {{"shape", Ints{0, 0, ks[1], ks[2]}}});
    return l.emit1("transpose", {y}, {{"perm", perm}});
  };
  const std::string q = project(query, "query", wq_, bq_, {0, 2, 1, 3});
  const std::string k = project(key, "key", wk_, bk_, {0, 2, 1, 3});
  const std::string v = project(value, "value", wv_, bv_, {0, 2, 1, 3});
  // The attention as the op itself (the ONNX exporter writes MatMul/Softmax/Where for it); the
  // scale explicit, since the consumer may not know the head size.
  std::vector<std::string> qkv{q, k, v};
  if (in.size() > 3 && !in[3].name.empty()) {
    // attention_mask [B, T, S] or [T, S] (bool, or numeric: nonzero attends) -> bool with a
    // heads axis, as attend() makes it.
    const LoweredValue& m = in[3];
    if (m.shape.size() < 2 || m.shape.size() > 3)
      l.fail(describe(*this) + ": attention_mask must be [batch, T, S] or [T, S], got " +
             shape_str(m.shape));
    std::string mask = l.emit1("cast", {m.name}, {{"dtype", DType::boolean}});
    mask = l.emit1("expand_dims", {mask},
                   {{"axes", m.shape.size() == 2 ? Ints{0, 1} : Ints{1}}});
    qkv.push_back(mask);
  }
  std::string o = l.emit1("scaled_dot_product_attention", qkv,
                          {{"causal", opt_.use_causal_mask},
                           {"scale", 1.0 / std::sqrt(double(key_dim_))}});
  const Shape& wos = wo_.value().shape();
  o = l.emit1("reshape", {l.emit1("transpose", {o}, {{"perm", Ints{0, 2, 1, 3}}})},
              {{"shape", Ints{0, 0, wos[0] * wos[1]}}});
  std::string y = l.emit1("matmul", {o, l.weight("output_kernel",
                                                 reshape(wo_.value(), {wos[0] * wos[1], wos[2]}))});
  if (bo_.defined()) y = l.emit1("add", {y, l.weight("output_bias", bo_.value())});
  return {{y, {query.shape.empty() ? -1 : query.shape[0], query.shape.size() > 1 ? query.shape[1] : -1,
               wos[2]}}};
}

}  // namespace soma::nn
