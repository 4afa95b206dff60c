// Scaled dot-product attention: the op definitions and the public function.
//
// Ops (attrs "causal" bool, "scale" double: 0 means 1/sqrt(d)):
//   scaled_dot_product_attention(q, k, v [, mask])   -> out [B, H, Sq, Dv], lse [B, H, Sq]
//   scaled_dot_product_attention_grad(q, k, v, out, lse, dout, dlse [, mask])
//                                                    -> dq, dk, dv [, dlogits [B, H, Sq, Sk]]
// q [B, H, Sq, D], k [B, H, Sk, D], v [B, H, Sk, Dv]; the mask broadcasts to [B, H, Sq, Sk] and
// is either additive (the dtype of q) or boolean (true: the key takes part). "causal" lets query
// i see keys j <= i (top-left aligned, as PyTorch's is_causal and Keras' use_causal_mask).
// lse is the log-sum-exp of each row of logits (scale * q k^T + mask): the backward op recomputes
// the probabilities block by block from it (FlashAttention), so neither direction holds the
// [Sq, Sk] matrix. A row whose keys are all masked out gives out = 0 and lse = -inf.
// The gradient op takes dlse too (lse is an output, so a loss may use it) and, with attr
// "mask_grad", also returns the gradient of the logits, which is the additive mask's gradient
// before it is summed over the mask's broadcast axes: only that case is O(Sq * Sk) in memory.
#include <cmath>
#include <limits>

#include "dispatch_hooks.hpp"
#include "internal/attention_composite.hpp"
#include "internal/copy.hpp"
#include "internal/registration.hpp"
#include "references.hpp"
#include "soma/nn_ops.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

using G = const GradContext&;
constexpr const char* kName = "scaled_dot_product_attention";
constexpr const char* kGradName = "scaled_dot_product_attention_grad";

void check_rank4(const char* op, const Shape& s, const char* what, const char* layout) {
  if (s.size() != 4)
    fail(op, what, " must be 4-d ", layout, ", got shape ", shape_str(s));
}

// The checks both ops share; returns the logits' shape [B, H, Sq, Sk].
Shape check_qkv(const char* op, const TensorSpec& q, const TensorSpec& k, const TensorSpec& v) {
  check_rank4(op, q.shape, "query", "[batch, heads, seq_q, d]");
  check_rank4(op, k.shape, "key", "[batch, heads, seq_k, d]");
  check_rank4(op, v.shape, "value", "[batch, heads, seq_k, d_v]");
  if (!is_floating(q.dtype))
    fail(op, "query must be a floating dtype, got ", dtype_name(q.dtype));
  if (k.dtype != q.dtype || v.dtype != q.dtype)
    fail(op, "query, key and value must have one dtype, got ", dtype_name(q.dtype), ", ",
         dtype_name(k.dtype), ", ", dtype_name(v.dtype));
  if (k.shape[0] != q.shape[0] || k.shape[1] != q.shape[1] || v.shape[0] != q.shape[0] ||
      v.shape[1] != q.shape[1])
    fail(op, "batch and heads must agree: query ", shape_str(q.shape), ", key ",
         shape_str(k.shape), ", value ", shape_str(v.shape));
  if (k.shape[3] != q.shape[3])
    fail(op, "query and key must have the same depth d: query ", shape_str(q.shape), ", key ",
         shape_str(k.shape));
  if (v.shape[2] != k.shape[2])
    fail(op, "key and value must have the same length seq_k: key ", shape_str(k.shape),
         ", value ", shape_str(v.shape));
  return {q.shape[0], q.shape[1], q.shape[2], k.shape[2]};
}

void check_mask(const char* op, const TensorSpec& m, const Shape& logits, DType dtype) {
  if (m.dtype != DType::boolean && m.dtype != dtype)
    fail(op, "the mask must be boolean or additive in the query's dtype ", dtype_name(dtype),
         ", got ", dtype_name(m.dtype));
  if (m.shape.size() > 4)
    fail(op, "the mask must broadcast to [batch, heads, seq_q, seq_k] ", shape_str(logits),
         ", got rank ", m.shape.size(), " shape ", shape_str(m.shape));
  const std::size_t lead = 4 - m.shape.size();
  for (std::size_t d = 0; d < m.shape.size(); ++d)
    if (m.shape[d] != 1 && m.shape[d] != logits[lead + d])
      fail(op, "the mask ", shape_str(m.shape), " does not broadcast to [batch, heads, seq_q, "
               "seq_k] ", shape_str(logits), ": dimension ", std::int64_t(d) - std::int64_t(m.shape.size()),
           " is ", m.shape[d], " vs ", logits[lead + d]);
}

std::vector<TensorSpec> sdpa_infer(const std::vector<TensorSpec>& in, const Attrs&) {
  if (in.size() != 3 && in.size() != 4)
    fail(kName, "takes (query, key, value [, mask]), got ", in.size(), " inputs");
  const Shape logits = check_qkv(kName, in[0], in[1], in[2]);
  if (in.size() == 4) check_mask(kName, in[3], logits, in[0].dtype);
  const Shape& q = in[0].shape;
  return {{{q[0], q[1], q[2], in[2].shape[3]}, in[0].dtype}, {{q[0], q[1], q[2]}, in[0].dtype}};
}

Attrs grad_attrs(const Attrs& a, bool mask_grad) {
  Attrs g;
  g.set("causal", a.has("causal") ? a.b("causal") : false);
  g.set("scale", a.has("scale") ? a.f("scale") : 0.0);
  g.set("mask_grad", mask_grad);
  return g;
}

std::vector<Tensor> sdpa_grad(G c) {
  const bool has_mask = c.inputs.size() == 4;
  const bool mask_grad = has_mask && is_floating(c.inputs[3].dtype()) && c.needs(3);
  std::vector<Tensor> in = {c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0],
                            c.outputs[1], c.grads[0],  c.grads[1]};
  if (has_mask) in.push_back(c.inputs[3]);
  static const OpDef& d = get_op(kGradName);
  std::vector<Tensor> g = call_op(d, in, grad_attrs(c.attrs, mask_grad));
  std::vector<Tensor> out = {g[0], g[1], g[2]};
  if (has_mask) out.push_back(mask_grad ? sum_to(g[3], c.inputs[3].shape()) : Tensor());
  return out;
}

// (q, k, v, out, lse, dout, dlse [, mask]) -> dq, dk, dv [, dlogits]
std::vector<TensorSpec> sdpa_grad_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  if (in.size() != 7 && in.size() != 8)
    fail(kGradName, "takes (query, key, value, out, lse, dout, dlse [, mask]), got ", in.size(),
         " inputs");
  const Shape logits = check_qkv(kGradName, in[0], in[1], in[2]);
  const Shape& q = in[0].shape;
  const Shape out{q[0], q[1], q[2], in[2].shape[3]}, lse{q[0], q[1], q[2]};
  const char* names[] = {"out", "lse", "dout", "dlse"};
  const Shape* want[] = {&out, &lse, &out, &lse};
  for (int i = 0; i < 4; ++i) {
    if (in[3 + i].shape != *want[i] || in[3 + i].dtype != in[0].dtype)
      fail(kGradName, names[i], " must be ", shape_str(*want[i]), " ", dtype_name(in[0].dtype),
           ", got ", shape_str(in[3 + i].shape), " ", dtype_name(in[3 + i].dtype));
  }
  if (in.size() == 8) check_mask(kGradName, in[7], logits, in[0].dtype);
  std::vector<TensorSpec> r = {in[0], in[1], in[2]};
  if (a.has("mask_grad") && a.b("mask_grad")) {
    if (in.size() != 8 || in[7].dtype == DType::boolean)
      fail(kGradName, "mask_grad needs an additive (floating) mask");
    r.push_back({logits, in[0].dtype});
  }
  return r;
}

// ---- the composite kernels: any device, the [Sq, Sk] logits held whole ----------------------
// For devices without a fused kernel, and CUDA's fallback for what cuDNN's fused attention does
// not take (internal/attention_composite.hpp): matmul, softmax-like steps and the same
// fully-masked-row rule as the CPU kernels.

// A kernel's own ops are not graph nodes or tape entries: the dispatch hooks are off while it
// runs (dense's composite kernel gets the same from NoGradScope, which ops/ cannot include).
struct HooksOff {
  std::uint32_t saved = dispatch::t_active;
  HooksOff() { dispatch::set_active(dispatch::kGraphBuild | dispatch::kTapeRecord, false); }
  ~HooksOff() { dispatch::set_active(saved, true); }
  HooksOff(const HooksOff&) = delete;
  HooksOff& operator=(const HooksOff&) = delete;
};

Tensor swap_last(const Tensor& t) { return transpose(t, {0, 1, 3, 2}); }

// scale * q k^T + mask, -inf where a boolean or the causal mask hides a key.
Tensor composite_logits(const std::vector<Tensor>& in, std::size_t mask_input, const Attrs& a) {
  const Tensor &q = in[0], &k = in[1];
  const double inf = std::numeric_limits<double>::infinity();
  const std::int64_t sq = q.dim(2), sk = k.dim(2), d = q.dim(3);
  const double scale = a.has("scale") && a.f("scale") > 0 ? a.f("scale")
                                                          : (d > 0 ? 1.0 / std::sqrt(double(d)) : 1.0);
  Tensor s = matmul(q, swap_last(k)) * scale;
  if (in.size() > mask_input) {
    const Tensor& m = in[mask_input];
    s = m.dtype() == DType::boolean ? where(m, s, full_like(s, -inf)) : s + m;
  }
  if (a.has("causal") && a.b("causal")) {
    std::vector<std::uint8_t> keep(std::size_t(sq * sk));
    for (std::int64_t i = 0; i < sq; ++i)
      for (std::int64_t j = 0; j < sk; ++j) keep[std::size_t(i * sk + j)] = j <= i;
    Tensor c = cast(constant(std::vector<std::int64_t>(keep.begin(), keep.end()), {sq, sk}),
                    DType::boolean).to(q.device());
    s = where(c, s, full_like(s, -inf));
  }
  return s;
}

}  // namespace

namespace detail {
void sdpa_composite_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& a) {
  HooksOff off;
  const double inf = std::numeric_limits<double>::infinity();
  if (in[1].dim(2) == 0) {  // no keys: every row is fully masked
    detail::fill_value(out[0], 0.0);
    detail::fill_value(out[1], -inf);
    return;
  }
  Tensor s = composite_logits(in, 3, a);
  Tensor m = max(s, {-1}, true);
  m = where(equal(m, full_like(m, -inf)), zeros_like(m), m);  // fully masked rows
  Tensor e = exp(s - m), z = sum(e, {-1}, true);
  Tensor z1 = where(equal(z, zeros_like(z)), ones_like(z), z);
  detail::copy_into(matmul(e / z1, in[2]), out[0]);
  detail::copy_into(squeeze(log(z) + m, {-1}), out[1]);
}

void sdpa_grad_composite_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                const Attrs& a) {
  HooksOff off;
  const double inf = std::numeric_limits<double>::infinity();
  if (in[1].dim(2) == 0) {
    for (auto& t : out) detail::fill_value(t, 0.0);
    return;
  }
  const Tensor &q = in[0], &k = in[1], &v = in[2], &o = in[3], &dout = in[5];
  const std::int64_t d = q.dim(3);
  const double scale = a.has("scale") && a.f("scale") > 0 ? a.f("scale")
                                                          : (d > 0 ? 1.0 / std::sqrt(double(d)) : 1.0);
  Tensor lse = expand_dims(in[4], -1), dlse = expand_dims(in[6], -1);
  lse = where(equal(lse, full_like(lse, -inf)), zeros_like(lse), lse);  // P = 0 there anyway
  Tensor p = exp(composite_logits(in, 7, a) - lse);
  Tensor di = sum(dout * o, {-1}, true);
  Tensor ds = p * (matmul(dout, swap_last(v)) - di + dlse);
  detail::copy_into(matmul(ds, k) * scale, out[0]);
  detail::copy_into(matmul(swap_last(ds), q) * scale, out[1]);
  detail::copy_into(matmul(swap_last(p), dout), out[2]);
  if (out.size() > 3) detail::copy_into(ds, out[3]);
}

void register_attention_ops() {
  const std::vector<AttrSpec> attrs = {{"causal", false}, {"scale", 0.0}};
  // Samples: seq_q != seq_k, d != d_v, a causal mask on top of an additive one broadcast over
  // the heads (so its gradient is a sum over them).
  const Attrs sample = {{"causal", true}, {"scale", 0.7}};
  // Under autocast on a device the forward runs in bf16/f16 (as PyTorch's autocast does), which
  // on CUDA is cuDNN's fused attention; the backward stays in its inputs' dtype (f32).
  OpDef fwd{.name = kName, .num_inputs = -1, .infer = sdpa_infer, .grad = sdpa_grad,
            .tags = kFloatOnly | kAutocastLow, .attrs = attrs,
            .test = {.shapes = {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, {2, 1, 3, 5}},
                     .attrs = sample,
                     .reference = ref::scaled_dot_product_attention}};
  std::vector<AttrSpec> gattrs = attrs;
  gattrs.push_back({"mask_grad", false});
  OpDef bwd{.name = kGradName, .num_inputs = -1, .infer = sdpa_grad_infer,
            .tags = kFloatOnly, .attrs = gattrs,
            .test = {.shapes = {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, {2, 2, 3, 3},
                                {2, 2, 3}, {2, 2, 3, 3}, {2, 2, 3}, {1, 2, 3, 5}},
                     .attrs = Attrs(sample).set("mask_grad", true),
                     .reference = ref::scaled_dot_product_attention_grad}};
  // The composite on every device; the CPU's fused kernels replace it there
  // (src/backend/cpu/attention.cpp).
  for (int k = 0; k < kNumDeviceKinds; ++k) {
    fwd.kernels[k] = sdpa_composite_kernel;
    bwd.kernels[k] = sdpa_grad_composite_kernel;
  }
  register_op(std::move(fwd));
  register_op(std::move(bwd));
}
}  // namespace detail

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, const AttentionOptions& options) {
  static const OpDef& d = get_op(kName);
  if (!q.defined() || !k.defined() || !v.defined())
    fail(kName, "query, key and value must be defined Tensors");
  if (options.scale && !(*options.scale > 0.0))
    fail(kName, "scale must be > 0, got ", *options.scale);
  Attrs a{{"causal", options.causal}, {"scale", options.scale.value_or(0.0)}};
  if (!mask.defined()) return call_op1(d, {q, k, v}, a);
  return call_op1(d, {q, k, v, mask}, a);
}

}  // namespace soma
