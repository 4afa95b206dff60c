// ONNX import: an nn::Model that interprets an ONNX graph with soma ops. Every op used is
// differentiable, so the tape sees the whole graph and the model can be trained; floating-point
// initialisers are the model's weights.
//
// Each node is resolved once, at load, by one lookup of its op_type:
//  - a handler in onnx_ops() for operators that need more than one soma op or ONNX rules beyond
//    a one-to-one mapping (opset-dependent inputs, variadic inputs, Conv's layout, ...);
//  - otherwise the op whose definition maps to it (OpDef::onnx, include/soma/op.hpp): its
//    attributes are converted by the mapping (onnx_attrs.hpp) and the op is called as it is.
// onnx_ops() also lists each operator's ONNX attributes with their types and ONNX defaults, so
// an unknown attribute, a wrong type or an unsupported value fails at load, naming the node.
#include "soma/onnx.hpp"

#include "soma/error.hpp"

#ifdef SOMA_HAS_ONNX
#include <algorithm>
#include <array>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <numbers>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "internal/conv_bias_act.hpp"
#include "internal/fused_inference.hpp"
#include "onnx/import_handlers.hpp"
#include "onnx/import_node.hpp"
#include "onnx/onnx_attrs.hpp"
#include "onnx/proto_util.hpp"
#include "soma/autograd.hpp"
#include "soma/nn_ops.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"
#endif

namespace soma::onnx {

#ifndef SOMA_HAS_ONNX

std::shared_ptr<nn::Model> load(const std::string&, const LoadOptions&) {
  fail("onnx::load",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}
std::vector<Value> run(nn::Model&, const std::vector<Value>&) {
  fail("onnx::run",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}
std::shared_ptr<nn::Model> load_from_bytes(const std::string&, const LoadOptions&) {
  fail("onnx::load_from_bytes",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}
std::vector<Shape> input_shapes(const std::string&) {
  fail("onnx::input_shapes",
       "soma was built without ONNX support (install libonnx-dev and libprotobuf-dev, then "
       "reconfigure)");
}

#else

namespace {

using namespace soma::onnx::importer;

// ---- handlers: operators that need more than one soma op ----------------------------------------


std::vector<Tensor> dropout(const Node& n) {
  const Tensor& x = n.x();
  const double ratio = n.has(1) ? n.number(1) : n.attr.f("ratio");
  bool train = n.has(2) ? n.number(2) != 0.0 : n.training;
  if (!train || ratio <= 0.0) return {x, ones_like(x).cast(DType::boolean)};
  Tensor keep = greater_equal(random_uniform(x.shape(), 0.0, 1.0, x.dtype()), scalar(ratio, x.dtype()));
  return {x * cast(keep, x.dtype()) / (1.0 - ratio), keep};
}

// Integer quotient truncated toward zero (ONNX's Div and Mod with fmod=1 on integers), from
// soma's floor division: one more where the division leaves a remainder and the signs differ.
Tensor trunc_div(const Tensor& a, const Tensor& b) {
  Tensor q = floor_div(a, b);
  const Tensor zero = zeros({}, a.dtype());
  Tensor fix = logical_and(not_equal(mod(a, b), zero), not_equal(less(a, zero), less(b, zero)));
  return q + cast(fix, a.dtype());
}
std::vector<Tensor> divide_(const Node& n) {
  const Tensor &a = n.x(), &b = n.arg(1);
  if (is_floating(a.dtype()) || is_floating(b.dtype())) return {a / b};
  if (a.dtype() != b.dtype()) fail(kWho, n.what, ": inputs have dtypes ", a.dtype(), " and ", b.dtype());
  return {trunc_div(a, b)};
}
// fmod=0: the remainder takes the divisor's sign (soma's mod, NumPy's np.mod, for floats too as
// ONNX's reference does); fmod=1: the dividend's (C's fmod).
std::vector<Tensor> mod_(const Node& n) {
  const Tensor &a = n.x(), &b = n.arg(1);
  if (a.dtype() != b.dtype()) fail(kWho, n.what, ": inputs have dtypes ", a.dtype(), " and ", b.dtype());
  if (!n.attr.i("fmod")) return {mod(a, b)};
  if (!is_floating(a.dtype())) return {a - b * trunc_div(a, b)};
  // soma's mod is fmod plus the divisor where the signs differ: undo that.
  Tensor r = mod(a, b);
  const Tensor zero = zeros({}, a.dtype());
  Tensor undo = logical_and(not_equal(r, zero), not_equal(less(r, zero), less(a, zero)));
  return {where(undo, r - b, r)};
}
// The exponent may have another dtype than the base.
std::vector<Tensor> pow_(const Node& n) { return {pow(n.x(), cast(n.arg(1), n.x().dtype()))}; }

// Sum, Mean, Max and Min take any number of inputs.
Tensor add2(const Tensor& a, const Tensor& b) { return a + b; }
Tensor max2(const Tensor& a, const Tensor& b) { return maximum(a, b); }
Tensor min2(const Tensor& a, const Tensor& b) { return minimum(a, b); }
template <Tensor (*Combine)(const Tensor&, const Tensor&), bool Average = false>
std::vector<Tensor> variadic(const Node& n) {
  Tensor s = n.x();
  for (std::size_t i = 1; i < n.in.size(); ++i) s = Combine(s, n.arg(i));
  if (Average) s = s / double(n.in.size());
  return {s};
}

std::vector<Tensor> clip_(const Node& n) {
  double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
  if (n.opset >= 11) {  // bounds are inputs from opset 11 on
    if (n.has(1)) lo = n.number(1);
    if (n.has(2)) hi = n.number(2);
  } else {
    lo = n.attr.f("min");
    hi = n.attr.f("max");
  }
  if (lo > hi) return {full_like(n.x(), hi)};
  return {clip(n.x(), lo, hi)};
}


std::vector<Tensor> expand(const Node& n) {
  auto s = ints_of(n.arg(1));
  return {n.x() + zeros(Shape(s.begin(), s.end()), n.x().dtype())};  // broadcasts both ways
}

template <bool Log>
std::vector<Tensor> softmax_(const Node& n) {
  const Tensor& x = n.x();
  if (n.opset >= 13) {
    std::int64_t axis = n.attr.i("axis", -1);
    return {Log ? log_softmax(x, axis) : softmax(x, axis)};
  }
  // Before opset 13: over all axes from `axis` on (the input seen as 2-D).
  std::int64_t axis = norm_axis(n.attr.i("axis", 1), x.rank());
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  Tensor f = reshape(x, {outer, -1});
  return {reshape(Log ? log_softmax(f, -1) : softmax(f, -1), x.shape())};
}

std::vector<Tensor> gemm(const Node& n) {
  Tensor a = n.attr.i("transA") ? transpose(n.x()) : n.x();
  Tensor b = n.attr.i("transB") ? transpose(n.arg(1)) : n.arg(1);
  const double alpha = n.attr.f("alpha"), beta = n.attr.f("beta");
  Tensor y = matmul(a, b);
  if (alpha != 1.0) y = y * alpha;
  if (n.has(2)) y = y + (beta != 1.0 ? n.in[2] * beta : n.in[2]);
  return {y};
}

// auto_pad's values soma runs; the others fail at load (the AttrDef's allowed list).
enum class AutoPad { notset, valid, same_upper, same_lower };
const std::unordered_map<std::string, AutoPad>& auto_pads() {
  static const std::unordered_map<std::string, AutoPad> m{
      {"NOTSET", AutoPad::notset}, {"", AutoPad::notset}, {"VALID", AutoPad::valid},
      {"SAME_UPPER", AutoPad::same_upper}, {"SAME_LOWER", AutoPad::same_lower}};
  return m;
}
const std::vector<std::string_view> kAutoPads{"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER", ""};
Size2 size2(const Node& n, std::string_view attr, std::int64_t def);
Tensor lift_1d(const Tensor& t);

// 1-D windows (inputs [N, C, L]) run as 2-D ones of height 1: their attributes get a leading
// 1 (0 for pads), the input and weight a unit axis 2.
Padding onnx_padding(const Node& n) {
  switch (auto_pads().at(n.attr.s("auto_pad"))) {
    case AutoPad::valid: return Padding("valid");
    case AutoPad::same_upper: return Padding("same");  // TensorFlow's rule: the extra at the end
    case AutoPad::same_lower: {  // the same total, the extra at the beginning
      const Tensor x = lift_1d(n.x());
      const Size2 st = size2(n, "strides", 1), dil = size2(n, "dilations", 1);
      Size2 k;
      if (n.attr.has("kernel_shape")) {
        k = size2(n, "kernel_shape", 1);
      } else {  // Conv without kernel_shape: the weight's
        const Tensor w = lift_1d(n.arg(1));
        k = Size2(w.dim(2), w.dim(3));
      }
      auto total = [](std::int64_t len, std::int64_t kk, std::int64_t s, std::int64_t d) {
        const std::int64_t out = (len + s - 1) / s;
        return std::max<std::int64_t>((out - 1) * s + (kk - 1) * d + 1 - len, 0);
      };
      const std::int64_t th = total(x.dim(2), k.h, st.h, dil.h), tw = total(x.dim(3), k.w, st.w, dil.w);
      return Padding(th - th / 2, th / 2, tw - tw / 2, tw / 2);
    }
    case AutoPad::notset: break;
  }
  auto p = n.attr.has("pads") ? n.attr.ints("pads") : std::vector<std::int64_t>{0, 0, 0, 0};
  if (p.size() == 2) return Padding(0, 0, p[0], p[1]);  // 1-D {begin, end}
  if (p.size() != 4) fail(kWho, n.what, ": only 1-D and 2-D windows are supported (pads ", p.size(), ")");
  return Padding(p[0], p[2], p[1], p[3]);  // ONNX {t, l, b, r} -> soma {t, b, l, r}
}

Size2 size2(const Node& n, std::string_view attr, std::int64_t def) {
  auto v = n.attr.ints(attr);
  if (v.empty()) return Size2(def);
  if (v.size() == 1) return Size2(def, v[0]);  // 1-D: a unit first axis (0 for output_padding)
  if (v.size() != 2)
    fail(kWho, n.what, ": only 1-D and 2-D ", std::string(attr), " are supported, got ", v.size(), " values");
  return Size2(v[0], v[1]);
}
Tensor lift_1d(const Tensor& t) { return t.rank() == 3 ? expand_dims(t, 2) : t; }
Tensor drop_1d(const Tensor& t, bool lifted) { return lifted ? squeeze(t, {2}) : t; }

// A Conv with 3 spatial axes (inputs [N, C, D, H, W]): soma's conv3d, then the bias.
std::vector<Tensor> conv_3d(const Node& n) {
  const Tensor& x = n.x();
  const Tensor& w = n.arg(1);
  if (w.rank() != 5)
    fail(kWho, n.what, ": a 3-D convolution needs a weight [O, C/group, KD, KH, KW], got ",
         shape_str(w.shape()));
  auto per_axis = [&](std::string_view name, std::int64_t def, std::size_t count) {
    auto v = n.attr.ints(name);
    if (v.empty()) v.assign(count, def);
    if (v.size() != count)
      fail(kWho, n.what, ": ", std::string(name), " has ", v.size(), " values, expected ", count);
    return v;
  };
  const auto st = per_axis("strides", 1, 3), dil = per_axis("dilations", 1, 3);
  const auto on = per_axis("pads", 0, 6);  // ONNX: every begin, then every end
  std::array<std::int64_t, 6> pads{on[0], on[3], on[1], on[4], on[2], on[5]};
  const AutoPad ap = auto_pads().at(n.attr.s("auto_pad"));
  for (std::size_t a = 0; a < 3; ++a) {
    if (ap == AutoPad::valid) pads[2 * a] = pads[2 * a + 1] = 0;
    if (ap != AutoPad::same_upper && ap != AutoPad::same_lower) continue;
    const std::int64_t in = x.dim(std::int64_t(a) + 2), keff = (w.dim(std::int64_t(a) + 2) - 1) * dil[a] + 1;
    const std::int64_t out = (in + st[a] - 1) / st[a];
    const std::int64_t total = std::max<std::int64_t>((out - 1) * st[a] + keff - in, 0);
    pads[2 * a] = ap == AutoPad::same_upper ? total / 2 : total - total / 2;
    pads[2 * a + 1] = total - pads[2 * a];
  }
  Tensor y = conv3d(x, w, {st[0], st[1], st[2]}, pads, {dil[0], dil[1], dil[2]}, n.attr.i("group"));
  if (n.has(2)) y = y + reshape(n.in[2], {1, -1, 1, 1, 1});
  if (n.relu) y = relu(y);
  return {y};
}

template <bool Transposed>
std::vector<Tensor> conv(const Node& n) {
  if (!Transposed && n.x().rank() == 5) return conv_3d(n);
  const bool lifted = n.x().rank() == 3;
  const Tensor x = lift_1d(n.x());
  if (x.rank() != 4)
    fail(kWho, n.what, ": only 1-D and 2-D convolutions (inputs [N, C, L] or [N, C, H, W]) are supported");
  const Tensor w = lift_1d(n.arg(1));
  Size2 strides = size2(n, "strides", 1);
  Size2 dil = size2(n, "dilations", 1);
  const std::int64_t groups = n.attr.i("group");
  Tensor y;
  if (!Transposed) {
    // One op for convolution, bias and ReLU (cuDNN/oneDNN run them as one call plus at most one
    // elementwise pass, instead of a broadcast add and a ReLU over the output).
    const Tensor b = n.has(2) ? n.in[2] : Tensor();
    if (b.defined() && (b.dtype() != x.dtype() || w.dtype() != x.dtype()))
      fail(kWho, n.what, ": the input, weight and bias dtypes differ (", dtype_name(x.dtype()),
           ", ", dtype_name(w.dtype()), ", ", dtype_name(b.dtype()), ")");
    y = soma::detail::conv2d_bias_act(x, w, b, strides, onnx_padding(n), dil, groups, n.relu);
    return {drop_1d(y, lifted)};
  } else {
    Padding pad = onnx_padding(n);
    Size2 op_ = size2(n, "output_padding", 0);
    if (pad.mode() != Padding::Mode::explicit_) {
      // auto_pad, as ONNX's reference: VALID pads nothing; SAME_* make the output input * stride,
      // the odd unit of padding at the end (UPPER) or the beginning (LOWER).
      const AutoPad ap = auto_pads().at(n.attr.s("auto_pad"));
      auto total = [](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, std::int64_t o) {
        return s * (in - 1) + o + (k - 1) * d + 1 - in * s;
      };
      const std::int64_t th = ap == AutoPad::valid ? 0 : total(x.dim(2), w.dim(2), strides.h, dil.h, op_.h);
      const std::int64_t tw = ap == AutoPad::valid ? 0 : total(x.dim(3), w.dim(3), strides.w, dil.w, op_.w);
      if (th < 0 || tw < 0)
        fail(kWho, n.what, ": auto_pad ", n.attr.s("auto_pad"), " would need negative padding");
      const bool upper = ap != AutoPad::same_lower;
      pad = Padding(upper ? th / 2 : th - th / 2, upper ? th - th / 2 : th / 2,
                    upper ? tw / 2 : tw - tw / 2, upper ? tw - tw / 2 : tw / 2);
    }
    auto os = n.attr.ints("output_shape");
    if (os.size() == 1) os.insert(os.begin(), 1);
    const auto& p = pad.pads();
    if (!os.empty()) {  // the output size decides output_padding (the pads stay as given)
      auto keff = [](std::int64_t k, std::int64_t d) { return (k - 1) * d + 1; };
      const std::size_t o = os.size() - 2;
      op_ = Size2(os[o] - ((x.dim(2) - 1) * strides.h + keff(w.dim(2), dil.h) - p[0] - p[1]),
                  os[o + 1] - ((x.dim(3) - 1) * strides.w + keff(w.dim(3), dil.w) - p[2] - p[3]));
    }
    y = conv2d_transpose(x, w, strides, pad, op_, dil, groups);
  }
  if (n.has(2)) y = y + reshape(n.in[2], {1, -1, 1, 1});
  return {drop_1d(y, lifted)};
}

// Dilations, 3-D and wider windows, integer max pooling: the general path (pool_nd). MaxPool's
// Indices of a 1-D or 2-D float input come from soma's max_pool2d_with_indices (below).
bool pool_needs_nd(const Node& n, bool max) {
  for (auto d : n.attr.ints("dilations"))
    if (d != 1) return true;
  return (n.x().rank() != 3 && n.x().rank() != 4) || (max && !is_floating(n.x().dtype()));
}

// i64 offsets of each [N, C] plane's start in a packed [N, C, H, W] tensor with hw = H * W,
// shaped [N, C, 1, 1] on the device of `like`: ONNX's indices count over the whole tensor.
Tensor plane_starts(const Tensor& like, std::int64_t n, std::int64_t c, std::int64_t hw) {
  const Tensor s = arange(0.0, double(n * c * hw), double(hw > 0 ? hw : 1), DType::i64);
  return on_device_of(like, reshape(s, {n, c, 1, 1}));
}

// MaxPool with its Indices output: soma's plane offsets (max_pool2d_with_indices) plus each
// plane's start. storage_order 1 numbers a plane column by column: the transposed planes pooled
// with the transposed window give those offsets.
std::vector<Tensor> max_pool_indices(const Node& n, const Tensor& x, Size2 ks, Size2 st,
                                     const Padding& pad, bool lifted) {
  Tensor y, idx;
  if (n.attr.i("storage_order") == 0) {
    std::tie(y, idx) = max_pool2d_with_indices(x, ks, st, pad);
  } else {
    Padding tp = pad;
    if (pad.mode() == Padding::Mode::explicit_) {
      const auto& p = pad.pads();
      tp = Padding(p[2], p[3], p[0], p[1]);
    }
    const std::vector<std::int64_t> swap{0, 1, 3, 2};
    auto r = max_pool2d_with_indices(transpose(x, swap), Size2(ks.w, ks.h), Size2(st.w, st.h), tp);
    y = transpose(r.first, swap);
    idx = transpose(r.second, swap);
  }
  idx = idx + plane_starts(idx, x.dim(0), x.dim(1), x.dim(2) * x.dim(3));
  return {drop_1d(y, lifted), drop_1d(idx, lifted)};
}

// MaxUnpool (2-D): ONNX's whole-tensor indices less each plane's start are max_unpool2d's plane
// offsets into the pooling's input size (in - 1) * stride + kernel - pads. An output_shape
// larger than that gets zeros after (the indices still address the inferred size, as ONNX's
// reference).
// Other ranks (1-D, 3-D, ...) take max_unpool_nd (import_more.cpp: a scatter of the values).
std::vector<Tensor> max_unpool(const Node& n) {
  const Tensor& x = n.x();
  if (x.rank() != 4) return max_unpool_nd(n);
  const Size2 ks = size2(n, "kernel_shape", 1), st = size2(n, "strides", 1);
  std::vector<std::int64_t> p = n.attr.ints("pads");
  if (p.empty()) p = {0, 0, 0, 0};
  if (p.size() != 4) fail(kWho, n.what, ": pads must have 4 values, got ", p.size());
  const std::int64_t oh = (x.dim(2) - 1) * st.h + ks.h - p[0] - p[2];
  const std::int64_t ow = (x.dim(3) - 1) * st.w + ks.w - p[1] - p[3];
  const Tensor idx = on_device_of(x, cast(n.arg(1), DType::i64));
  Tensor y = max_unpool2d(x, idx - plane_starts(idx, x.dim(0), x.dim(1), oh * ow), Shape{oh, ow});
  if (n.has(2)) {
    const auto os = ints_of(n.in[2]);
    if (os.size() != 4 || os[0] != x.dim(0) || os[1] != x.dim(1) || os[2] < oh || os[3] < ow)
      fail(kWho, n.what, ": output_shape ", shape_str(Shape(os.begin(), os.end())),
           " must be [N, C, H, W] with the input's N, C and H, W at least the unpooled ", oh, "x",
           ow);
    if (os[2] != oh || os[3] != ow) y = soma::pad(y, {{0, 0}, {0, 0}, {0, os[2] - oh}, {0, os[3] - ow}});
  }
  return {y};
}

template <bool Max>
std::vector<Tensor> pool(const Node& n) {
  if (pool_needs_nd(n, Max)) return pool_nd(n, Max ? PoolKind::max : PoolKind::avg);
  const bool lifted = n.x().rank() == 3;
  const Tensor x = lift_1d(n.x());
  if (x.rank() != 4)
    fail(kWho, n.what, ": only 1-D and 2-D pooling (inputs [N, C, L] or [N, C, H, W]) is supported");
  const bool want_indices = n.proto.output_size() > 1 && !n.proto.output(1).empty();
  if (!Max && want_indices) fail(kWho, n.what, ": AveragePool has no Indices output");
  Size2 ks = size2(n, "kernel_shape", 1);
  Size2 st = size2(n, "strides", 1);  // ONNX's default is 1
  for (auto d : n.attr.ints("dilations"))
    if (d != 1) fail(kWho, n.what, ": dilated pooling is not supported");
  Padding pad = onnx_padding(n);
  Tensor xi = x;
  std::array<std::int64_t, 4> moved{0, 0, 0, 0};  // padding moved into xi
  if (!Max && n.attr.i("count_include_pad") && pad.mode() == Padding::Mode::explicit_) {
    // Zeros that count: pad explicitly, then pool without padding.
    const auto& p = pad.pads();
    moved = p;
    xi = soma::pad(x, {{0, 0}, {0, 0}, {p[0], p[1]}, {p[2], p[3]}});
    pad = Padding("valid");
  }
  if (n.attr.i("ceil_mode")) {
    // Extra padding at the end gives the ceil sizes; max pooling ignores padding and average
    // pooling leaves it out of the count, so the result is exact.
    auto base = pool2d_output_shape(xi.shape(), ks, st, pad);
    std::array<std::int64_t, 4> p{0, 0, 0, 0};
    if (pad.mode() == Padding::Mode::explicit_) p = pad.pads();
    else if (pad.mode() == Padding::Mode::same)
      p = resolve_padding(pad, xi.dim(2), xi.dim(3), ks, st);
    // A last window that would start in the end padding is dropped (ONNX, as PyTorch).
    auto ceil_len = [](std::int64_t len, std::int64_t begin, std::int64_t end,
                       std::int64_t moved_end, std::int64_t k, std::int64_t s) {
      std::int64_t out = (len + begin + end - k + s - 1) / s + 1;
      if ((out - 1) * s >= len + begin - moved_end) --out;
      return out;
    };
    const std::int64_t ch = ceil_len(xi.dim(2), p[0], p[1], moved[1], ks.h, st.h);
    const std::int64_t cw = ceil_len(xi.dim(3), p[2], p[3], moved[3], ks.w, st.w);
    if (ch != base[2] || cw != base[3]) {
      // The extra padding at the end counts in no average (soma's pooling divides by the real
      // elements; count_include_pad's zeros were padded in above).
      p[1] += (ch - 1) * st.h + ks.h - (xi.dim(2) + p[0] + p[1]);
      p[3] += (cw - 1) * st.w + ks.w - (xi.dim(3) + p[2] + p[3]);
      pad = Padding(p[0], p[1], p[2], p[3]);
    }
  }
  if (Max && want_indices) return max_pool_indices(n, xi, ks, st, pad, lifted);
  return {drop_1d(Max ? max_pool2d(xi, ks, st, pad) : avg_pool2d(xi, ks, st, pad), lifted)};
}

// LpPool: (sum over the window of |x|^p)^(1/p); padding adds zeros, so the sum is an average
// over the explicitly padded input times the window size.
std::vector<Tensor> lp_pool(const Node& n) {
  if (pool_needs_nd(n, false) || n.attr.i("ceil_mode")) return pool_nd(n, PoolKind::lp);
  const bool lifted = n.x().rank() == 3;
  const Tensor x = lift_1d(n.x());
  if (x.rank() != 4)
    fail(kWho, n.what, ": only 1-D and 2-D pooling (inputs [N, C, L] or [N, C, H, W]) is supported");
  const Size2 ks = size2(n, "kernel_shape", 1), st = size2(n, "strides", 1);
  const Padding pad = onnx_padding(n);
  std::array<std::int64_t, 4> p{0, 0, 0, 0};
  if (pad.mode() == Padding::Mode::explicit_) p = pad.pads();
  else if (pad.mode() == Padding::Mode::same) p = resolve_padding(pad, x.dim(2), x.dim(3), ks, st);
  const double power = double(n.attr.i("p"));
  Tensor xp = soma::pad(pow(abs(x), scalar(power, x.dtype())), {{0, 0}, {0, 0}, {p[0], p[1]}, {p[2], p[3]}});
  Tensor sum_w = avg_pool2d(xp, ks, st, Padding("valid")) * double(ks.h * ks.w);
  return {drop_1d(pow(sum_w, scalar(1.0 / power, x.dtype())), lifted)};
}

template <bool Max>
std::vector<Tensor> global_pool(const Node& n) {
  const Tensor& x = n.x();
  Axes axes;
  for (std::int64_t d = 2; d < x.rank(); ++d) axes.push_back(d);
  return {Max ? max(x, axes, true) : mean(x, axes, true)};
}

std::vector<Tensor> batch_norm(const Node& n) {
  if (n.attr.i("training_mode")) return batch_norm_training(n);
  const Tensor& x = n.x();
  if (n.proto.output_size() > 1)
    fail(kWho, n.what, ": training-mode outputs (running mean/var) are not supported");
  Shape b(std::size_t(x.rank()), 1);
  b[1] = x.dim(1);
  const double eps = n.attr.f("epsilon");
  // As nn::BatchNormalization in inference: (x - mean) * rsqrt(var + eps) * gamma + beta.
  Tensor y = (x - reshape(n.arg(3), b)) * rsqrt(reshape(n.arg(4), b) + eps);
  y = y * reshape(n.arg(1), b);
  return {y + reshape(n.arg(2), b)};
}

std::vector<Tensor> layer_norm(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(n.attr.i("axis"), x.rank());
  Axes axes;
  for (std::int64_t d = axis; d < x.rank(); ++d) axes.push_back(d);
  const double eps = n.attr.f("epsilon");
  Tensor m = mean(x, axes, true);
  Tensor var = mean(square(x - m), axes, true);
  Tensor inv = rsqrt(var + eps);
  Tensor y = (x - m) * inv;
  y = y * n.arg(1);
  if (n.has(2)) y = y + n.in[2];
  // Mean and InvStdDev in the stash type (1: f32).
  const DType stash = n.attr.i("stash_type") == 1 ? DType::f32 : x.dtype();
  return {y, cast(m, stash), cast(inv, stash)};
}

// The Reduce* operators. Their axes are an attribute, and an input from opset 13 (ReduceSum)
// or 18 (the others); no axes reduce everything unless noop_with_empty_axes.
enum class Reduce { sum, mean, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square };
template <Reduce R>
std::vector<Tensor> reduce(const Node& n) {
  const Tensor& x = n.x();
  Axes axes;
  if (n.opset >= (R == Reduce::sum ? 13 : 18)) {
    if (n.has(1))
      for (auto a : ints_of(n.in[1])) axes.push_back(a);
  } else {
    for (auto a : n.attr.ints("axes")) axes.push_back(a);
  }
  const bool keep = n.attr.i("keepdims") != 0;
  if (axes.empty() && n.attr.i("noop_with_empty_axes")) {
    // The input as it is, after the elementwise part (ONNX's reference: |x| for L1, x^2 ...).
    if (R == Reduce::l1) return {abs(x)};
    if (R == Reduce::sum_square) return {square(x)};
    return {x};
  }
  // Over no elements: the reduction's identity (a shape soma's reductions refuse).
  if (x.numel() == 0) {
    Shape out;
    std::vector<bool> reduced(std::size_t(x.rank()), axes.empty());
    for (auto a : axes) reduced[std::size_t(norm_axis(a, x.rank()))] = true;
    for (std::int64_t d = 0; d < x.rank(); ++d)
      if (!reduced[std::size_t(d)]) out.push_back(x.dim(d));
      else if (keep) out.push_back(1);
    const double inf = std::numeric_limits<double>::infinity();
    double v = 0.0;
    if (R == Reduce::prod) v = 1.0;
    if (R == Reduce::max || R == Reduce::log_sum || R == Reduce::log_sum_exp) v = -inf;
    if (R == Reduce::min) v = inf;
    if (x.dtype() == DType::boolean && (R == Reduce::max || R == Reduce::min))
      v = R == Reduce::max ? 0.0 : 1.0;
    else if (!is_floating(x.dtype()) && (R == Reduce::max || R == Reduce::min))
      v = R == Reduce::max ? double(std::numeric_limits<std::int64_t>::min())
                           : double(std::numeric_limits<std::int64_t>::max());
    return {fill(out, v, x.dtype())};
  }
  if (x.dtype() == DType::boolean && (R == Reduce::max || R == Reduce::min)) {
    Tensor u = cast(x, DType::u8);
    return {cast(R == Reduce::max ? max(u, axes, keep) : min(u, axes, keep), DType::boolean)};
  }
  switch (R) {
    case Reduce::sum: return {sum(x, axes, keep)};
    case Reduce::mean: return {mean(x, axes, keep)};
    case Reduce::max: return {max(x, axes, keep)};
    case Reduce::min: return {min(x, axes, keep)};
    case Reduce::prod: return {prod(x, axes, keep)};
    case Reduce::l1: return {sum(abs(x), axes, keep)};
    case Reduce::l2: return {sqrt(sum(square(x), axes, keep))};
    case Reduce::log_sum: return {log(sum(x, axes, keep))};
    case Reduce::log_sum_exp: return {logsumexp(x, axes, keep)};
    case Reduce::sum_square: return {sum(square(x), axes, keep)};
  }
  return {};
}

// ArgMax / ArgMin; select_last_index: the same on the reversed axis, counted back.
template <bool Max>
std::vector<Tensor> arg_reduce(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(n.attr.i("axis"), x.rank());
  const bool keep = n.attr.i("keepdims") != 0;
  if (!n.attr.i("select_last_index")) return {Max ? argmax(x, axis, keep) : argmin(x, axis, keep)};
  std::vector<Slice> rev(std::size_t(x.rank()));
  rev[std::size_t(axis)] = Slice{x.dim(axis) - 1, std::nullopt, -1};
  Tensor r = slice(x, rev);
  Tensor i = Max ? argmax(r, axis, keep) : argmin(r, axis, keep);
  return {scalar(double(x.dim(axis) - 1), DType::i64) - i};
}

std::vector<Tensor> size_(const Node& n) {
  return {constant(std::vector<std::int64_t>{n.x().numel()}, Shape{})};
}
std::vector<Tensor> where_(const Node& n) { return {where(n.x(), n.arg(1), n.arg(2))}; }
std::vector<Tensor> cast_like(const Node& n) { return {cast(n.x(), n.arg(1).dtype())}; }
// Cast. To a narrow integer type (INT4, UINT4, INT2, UINT2: held in i8 / u8) it keeps the low
// bits of the integer value (truncated toward zero): ONNX's rule for integer sources ("discard
// higher bits"), soma's for floating ones out of range, which the spec leaves undefined (-9 ->
// INT4 7, as onnxruntime); NaN and infinities give 0 (docs/onnx.md; the test
// OnnxImportTable.CastToSubByteIntegersFollowsTheOnnxRule states the rule).
// To a FLOAT8 type or FLOAT4E2M1 (held in f32) it rounds to that type's values (proto_util's
// round_to_narrow_float, on the host: an import emulation, not a kernel).
// x to ONNX element type `to` (held in soma's dtype for it), by the rules above.
Tensor cast_to_elem(const Tensor& in, int to, bool saturate, const std::string& what) {
  const DType d = soma_dtype(to, what + " attribute 'to'");
  if (is_narrow_float(to)) {
    std::vector<double> v = cast(in, DType::f64).to_vector<double>();
    for (double& x : v) x = round_to_narrow_float(x, to, saturate);
    return constant(v, in.shape()).cast(d).to(in.device());
  }
  bool is_signed = false;
  const int bits = narrow_int_bits(to, &is_signed);
  if (!bits) return cast(in, d);
  const double m = double(1 << bits), h = is_signed ? m / 2 : 0.0;
  Tensor x = in;
  if (is_floating(x.dtype())) {
    // |x| >= 2^60 is a multiple of 16 in every floating type soma has (low bits 0), and a cast to
    // i64 of it, or of NaN or an infinity, would be undefined: those become 0 first.
    x = cast(x, DType::f64);
    x = where(abs(x) < scalar(0x1p60, DType::f64), x, zeros({}, DType::f64));
  }
  const Tensor v = cast(x, DType::i64) + scalar(h, DType::i64);
  return cast(mod(v, scalar(m, DType::i64)) - scalar(h, DType::i64), d);
}
std::vector<Tensor> cast_(const Node& n) {
  return {cast_to_elem(n.x(), int(n.attr.i("to")), n.attr.i("saturate") != 0, n.what)};
}

// ---- quantization (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
// QLinearMatMul): u8 and i8, per tensor or per axis; check_quantize refuses the rest at load.
// A missing zero point is 0 in the output_dtype attribute's type (u8 by default); one given
// with as many values as the scale takes its shape.
Tensor zero_point_of(const Node& n, std::size_t i, const Tensor& scale, DType dtype) {
  if (!n.has(i)) return zeros(scale.shape(), dtype);
  const Tensor& z = n.arg(i);
  return z.shape() != scale.shape() && z.numel() == scale.numel() ? reshape(z, scale.shape()) : z;
}
// Blocked quantization (opset 21): scale and zero point have x's rank with ceil(n / block_size)
// along `axis`, each value serving block_size consecutive indices: gathered up to x's shape.
Tensor unblock(const Tensor& p, const Tensor& x, std::int64_t axis, std::int64_t block) {
  const int ax = normalize_axis(axis, x.rank(), "QuantizeLinear");
  std::vector<std::int64_t> idx(std::size_t(x.dim(ax)));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = std::int64_t(i) / block;
  return gather(p, constant(idx, {std::int64_t(idx.size())}), ax);
}
std::vector<Tensor> quantize_linear_(const Node& n) {
  const Tensor& x = n.x();
  const auto to = n.attr.i("output_dtype");
  const DType q = to ? soma_dtype(int(to), n.what + " attribute 'output_dtype'") : DType::u8;
  Tensor scale = n.arg(1);
  if (scale.dtype() != x.dtype()) scale = cast(scale, x.dtype());
  const Tensor zp = zero_point_of(n, 2, scale, q);
  if (const auto block = n.attr.i("block_size")) {  // the same arithmetic as quantize_linear's
    const Tensor s = unblock(scale, x, n.attr.i("axis"), block);
    const Tensor z = cast(unblock(zp, x, n.attr.i("axis"), block), x.dtype());
    const bool is_signed = q == DType::i8;
    return {cast(clip(round(x / s) + z, is_signed ? -128.0 : 0.0, is_signed ? 127.0 : 255.0), q)};
  }
  return {quantize_linear(x, scale, zp, n.attr.i("axis"))};
}
std::vector<Tensor> dequantize_linear_(const Node& n) {
  const Tensor& x = n.x();
  const Tensor& scale = n.arg(1);
  const Tensor zp = zero_point_of(n, 2, scale, x.dtype());
  Tensor y;
  if (const auto block = n.attr.i("block_size")) {  // in f32, then scale's dtype (ONNX's reference)
    const Tensor z = unblock(zp, x, n.attr.i("axis"), block);
    const Tensor dx = cast(x, DType::f32) - cast(z, DType::f32);
    y = cast(dx * unblock(scale, x, n.attr.i("axis"), block), scale.dtype());
  } else {
    y = dequantize_linear(x, scale, zp, n.attr.i("axis"));
  }
  const auto to = n.attr.i("output_dtype");
  if (to) y = cast(y, soma_dtype(int(to), n.what + " attribute 'output_dtype'"));
  return {y};
}
// ONNX's reference arithmetic, in f32: the range [min(x, 0), max(x, 0)] onto [0, 255].
std::vector<Tensor> dynamic_quantize_linear(const Node& n) {
  const Tensor x = cast(n.x(), DType::f32);
  const Tensor zero = zeros({}, DType::f32);
  const Tensor hi = maximum(max(x), zero), lo = minimum(min(x), zero);
  const Tensor scale = where(equal(hi, lo), ones({}, DType::f32), hi - lo) / 255.0;
  const Tensor zp = cast(round(clip(zero - lo / scale, 0.0, 255.0)), DType::u8);
  return {quantize_linear(x, scale, zp), cast(scale, n.x().dtype()), zp};
}
// A per-row parameter of a ([M]) applies along a's rows: [M, 1].
Tensor per_row(const Tensor& t) {
  return t.rank() == 1 && t.numel() > 1 ? reshape(t, {t.numel(), 1}) : t;
}
std::vector<Tensor> matmul_integer_(const Node& n) {
  const Tensor &a = n.x(), &b = n.arg(1);
  const Tensor az = n.has(2) ? n.arg(2) : zeros({}, a.dtype());
  const Tensor bz = n.has(3) ? n.arg(3) : zeros({}, b.dtype());
  return {matmul_integer(a, b, az, bz)};
}
// (a - a_zp) @ (b - b_zp) in i32, scaled by a_scale * b_scale / y_scale (in the scales' dtype)
// and requantized in f64, as ONNX's reference computes it.
std::vector<Tensor> qlinear_matmul(const Node& n) {
  const Tensor &a = n.x(), &b = n.arg(3), &yz = n.arg(7);
  const Tensor acc = matmul_integer(a, b, n.arg(2), n.arg(5));
  const Tensor scale = per_row(n.arg(1)) * n.arg(4) / n.arg(6);
  const bool is_signed = yz.dtype() == DType::i8;
  const Tensor d = cast(acc, DType::f64) * cast(scale, DType::f64) + cast(yz, DType::f64);
  return {cast(round(clip(d, is_signed ? -128.0 : 0.0, is_signed ? 127.0 : 255.0)), yz.dtype())};
}
std::vector<Tensor> xor_(const Node& n) { return {not_equal(n.x(), n.arg(1))}; }

// Trilu: keeps the elements on and above (upper) or below the k-th diagonal of the last two axes.
std::vector<Tensor> trilu(const Node& n) {
  const Tensor& x = n.x();
  if (x.rank() < 2) fail(kWho, n.what, ": the input has rank ", x.rank(), ", expected >= 2");
  const std::int64_t k = n.has(1) ? std::int64_t(n.number(1)) : 0;
  return {n.attr.i("upper") ? triu(x, k) : tril(x, k)};
}

// Range: start, start + delta, ... up to limit (exclusive), in the inputs' dtype.
std::vector<Tensor> range_(const Node& n) {
  return {arange(n.number(0), n.number(1), n.number(2), n.x().dtype())};
}

// CumSum along an axis (an input): soma's cumsum (an O(n) scan per line).
std::vector<Tensor> cumsum_(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(std::int64_t(n.number(1)), x.rank());
  return {cumsum(x, axis, n.attr.i("exclusive") != 0, n.attr.i("reverse") != 0)};
}

// Rows of x seen as [rows, inner], written by `updates` [k, inner] at `rows` [k]: reduction
// none replaces them, add adds (soma's gather_grad sums what lands on one row).
Tensor scatter_rows(const Node& n, const Tensor& x2, const Tensor& rows, const Tensor& updates) {
  static const OpDef& scatter_add = get_op("gather_grad");
  Attrs a;
  a.set("axis", std::int64_t(0));
  a.set("input_shape", x2.shape());
  Tensor added = call_op1(scatter_add, {updates, rows}, a);
  enum class R { none, add };
  if (keyword<R>(n.attr.s("reduction"), {{"none", R::none}, {"add", R::add}}, n.what) == R::add)
    return x2 + added;
  Attrs h;
  h.set("axis", std::int64_t(0));
  h.set("input_shape", Shape{x2.dim(0), 1});
  Tensor hit = call_op1(scatter_add, {ones({rows.numel(), 1}, DType::f32), rows}, h);
  return where(greater(hit, zeros({}, DType::f32)), added, x2);
}
// GatherElements: soma's take_along_axis op as it is (no broadcasting). A handler rather than
// the op's ONNX mapping, whose generic path would promote the indices to the data's dtype.
std::vector<Tensor> gather_elements(const Node& n) {
  static const OpDef& d = get_op("take_along_axis");
  return {call_op1(d, {n.x(), n.arg(1)}, {{"axis", n.attr.i("axis")}})};
}
// ScatterElements (and opset 9's Scatter): soma's scatter op. A handler rather than the op's
// ONNX mapping, which starts at opset 16 (the reduction attribute); this one serves 9 to now.
std::vector<Tensor> scatter_elements(const Node& n) {
  return {scatter(n.x(), n.attr.i("axis"), n.arg(1), n.arg(2), n.attr.s("reduction"))};
}

// GatherND / ScatterND: indices [..., k] address the first k axes (after batch_dims) of x.
// Returns x as [rows, inner] and the row of each index tuple (flattened).
std::pair<Tensor, Tensor> nd_rows(const Node& n, const Tensor& x, const Tensor& indices,
                                  std::int64_t batch_dims) {
  Tensor idx = cast(indices, DType::i64);
  const std::int64_t k = idx.dim(-1);
  const std::int64_t b = batch_dims;
  if (k + b > x.rank())
    fail(kWho, n.what, ": index tuples of ", k, " after ", b, " batch axes exceed rank ", x.rank());
  std::int64_t batch = 1, per = 1, inner = 1;
  for (std::int64_t d = 0; d < b; ++d) batch *= x.dim(d);
  for (std::int64_t d = b; d < b + k; ++d) per *= x.dim(d);
  for (std::int64_t d = b + k; d < x.rank(); ++d) inner *= x.dim(d);
  Tensor t = reshape(idx, {batch, -1, k});  // [batch, tuples, k]
  Tensor rows = reshape(arange(0, double(batch), 1, DType::i64), {batch, 1}) * scalar(double(per), DType::i64);
  std::int64_t stride = per;
  for (std::int64_t j = 0; j < k; ++j) {
    const std::int64_t dim = x.dim(b + j);
    stride /= dim;
    Tensor c = squeeze(slice(t, {Slice{}, Slice{}, Slice{j, j + 1}}), {2});
    c = where(less(c, zeros({}, DType::i64)), c + scalar(double(dim), DType::i64), c);
    rows = rows + c * scalar(double(stride), DType::i64);
  }
  return {reshape(x, {batch * per, inner}), reshape(rows, {-1})};
}
std::vector<Tensor> gather_nd(const Node& n) {
  const Tensor& x = n.x();
  const Tensor& idx = n.arg(1);
  const std::int64_t b = n.attr.i("batch_dims");
  auto [x2, rows] = nd_rows(n, x, idx, b);
  Shape out(idx.shape().begin(), idx.shape().end() - 1);
  for (std::int64_t d = b + idx.dim(-1); d < x.rank(); ++d) out.push_back(x.dim(d));
  return {reshape(gather(x2, rows, 0), out)};
}
std::vector<Tensor> scatter_nd(const Node& n) {
  enum class R { none, add, other };
  if (keyword<R>(n.attr.s("reduction"), {{"none", R::none}, {"add", R::add}, {"mul", R::other},
                                          {"max", R::other}, {"min", R::other}}, n.what) == R::other)
    return scatter_nd_reduce(n);  // mul, max, min (import_more.cpp)
  const Tensor& x = n.x();
  auto [x2, rows] = nd_rows(n, x, n.arg(1), 0);
  return {reshape(scatter_rows(n, x2, rows, reshape(n.arg(2), {rows.numel(), x2.dim(1)})), x.shape())};
}

// Trigonometric and hyperbolic functions from exp, log, sin and cos.
std::vector<Tensor> tan_(const Node& n) { return {sin(n.x()) / cos(n.x())}; }
std::vector<Tensor> sinh_(const Node& n) { return {(exp(n.x()) - exp(-n.x())) * 0.5}; }
std::vector<Tensor> cosh_(const Node& n) { return {(exp(n.x()) + exp(-n.x())) * 0.5}; }
std::vector<Tensor> asinh_(const Node& n) {
  const Tensor& x = n.x();
  // Odd: computed for |x| (no cancellation for large negative x), the sign put back.
  Tensor a = abs(x);
  return {sign(x) * log(a + sqrt(square(a) + 1.0))};
}
std::vector<Tensor> acosh_(const Node& n) { return {log(n.x() + sqrt(square(n.x()) - 1.0))}; }
std::vector<Tensor> atanh_(const Node& n) { return {log((1.0 + n.x()) / (1.0 - n.x())) * 0.5}; }

std::vector<Tensor> flatten(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(n.attr.i("axis"), x.rank());
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  std::int64_t inner = 1;
  for (std::int64_t d = axis; d < x.rank(); ++d) inner *= x.dim(d);
  return {reshape(x, {outer, inner})};
}

std::vector<Tensor> reshape_(const Node& n) {
  const Tensor& x = n.x();
  auto s = ints_of(n.arg(1));
  const bool allowzero = n.attr.i("allowzero") != 0;
  Shape shape;
  for (std::size_t d = 0; d < s.size(); ++d)
    shape.push_back(s[d] == 0 && !allowzero ? x.dim(std::int64_t(d)) : s[d]);
  return {reshape(x, shape)};
}

// Shape's start and end (opset 15) clamp to [0, rank] after counting negatives from the end.
std::vector<Tensor> shape_(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t r = x.rank();
  auto bound = [&](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + r : v, 0, r); };
  const std::int64_t b = bound(n.attr.i("start")), e = bound(n.attr.i("end", r));
  std::vector<std::int64_t> s;
  for (std::int64_t d = b; d < e; ++d) s.push_back(x.dim(d));
  return {constant(s, Shape{std::int64_t(s.size())})};
}

std::vector<Tensor> transpose_(const Node& n) { return {transpose(n.x(), n.attr.ints("perm"))}; }

template <bool Squeeze>
std::vector<Tensor> squeeze_(const Node& n) {
  const Tensor& x = n.x();
  std::vector<std::int64_t> axes =  // an input from opset 13 on
      n.opset >= 13 ? ints_of(n.has(1) ? n.in[1] : Tensor()) : n.attr.ints("axes");
  if (Squeeze) return {squeeze(x, axes)};
  const std::int64_t out_rank = x.rank() + std::int64_t(axes.size());
  for (auto& a : axes) a = norm_axis(a, out_rank);
  std::sort(axes.begin(), axes.end());
  Tensor y = x;
  for (auto a : axes) y = expand_dims(y, a);
  return {y};
}

std::vector<Tensor> gather_(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(n.attr.i("axis"), x.rank());
  // soma's gather counts negative indices from the end and checks the range itself.
  const Tensor idx = on_device_of(x, n.arg(1));
  if (idx.rank() == 0) {  // a scalar index drops the axis
    return {squeeze(gather(x, reshape(cast(idx, DType::i64), {1}), axis), {axis})};
  }
  return {gather(x, cast(idx, DType::i64), axis)};
}

std::vector<Tensor> slice_(const Node& n) {
  const Tensor& x = n.x();
  auto starts = ints_of(n.arg(1)), ends = ints_of(n.arg(2));
  std::vector<std::int64_t> axes = n.has(3) ? ints_of(n.in[3]) : std::vector<std::int64_t>{};
  std::vector<std::int64_t> steps = n.has(4) ? ints_of(n.in[4]) : std::vector<std::int64_t>{};
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(std::int64_t(i));
  std::vector<Slice> sl(std::size_t(x.rank()));
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::int64_t a = norm_axis(axes[i], x.rank());
    const std::int64_t dim = x.dim(a);
    const std::int64_t step = i < steps.size() ? steps[i] : 1;
    std::int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0 && e > INT64_MIN / 2) e += dim;
    Slice z;
    z.step = step;
    if (step > 0) {
      z.start = std::clamp<std::int64_t>(s, 0, dim);
      z.stop = std::clamp<std::int64_t>(e, 0, dim);
    } else {
      z.start = std::clamp<std::int64_t>(s, 0, dim - 1);
      if (e < 0) z.stop = std::nullopt;  // runs to the first element
      else z.stop = std::min<std::int64_t>(e, dim - 1);
    }
    sl[std::size_t(a)] = z;
  }
  return {slice(x, sl)};
}

// Pad: constant (negative pads crop first), or edge / reflect / wrap, each axis one gather of
// the source index of every output position.
std::vector<Tensor> pad_(const Node& n) {
  const Tensor& x = n.x();
  auto p = n.opset >= 11 ? ints_of(n.arg(1)) : n.attr.ints("pads");
  if (n.has(3)) {  // pads for the listed axes only (opset 18)
    auto axes = ints_of(n.in[3]);
    if (p.size() != 2 * axes.size())
      fail(kWho, n.what, ": pads has ", p.size(), " values for ", axes.size(), " axes");
    std::vector<std::int64_t> full(std::size_t(2 * x.rank()), 0);
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const auto a = std::size_t(norm_axis(axes[i], x.rank()));
      full[a] = p[i];
      full[a + std::size_t(x.rank())] = p[i + axes.size()];
    }
    p = full;
  }
  if (std::int64_t(p.size()) != 2 * x.rank())
    fail(kWho, n.what, ": pads has ", p.size(), " values for an input of rank ", x.rank());
  const double value = n.opset >= 11 ? (n.has(2) ? n.number(2) : 0.0) : n.attr.f("value");
  enum class Mode { constant, edge, reflect, wrap };
  const std::string mode_name = n.attr.s("mode");
  const Mode mode = keyword<Mode>(mode_name, {{"constant", Mode::constant}, {"edge", Mode::edge},
                                              {"reflect", Mode::reflect}, {"wrap", Mode::wrap}},
                                  n.what);
  if (mode != Mode::constant) {
    Tensor y = x;
    for (std::int64_t d = 0; d < x.rank(); ++d) {
      const std::int64_t a = p[std::size_t(d)], b = p[std::size_t(d + x.rank())];
      if (a == 0 && b == 0) continue;
      const std::int64_t len = x.dim(d), out = len + a + b;
      if (len == 0 || (mode == Mode::reflect && len == 1 && out > 1))
        fail(kWho, n.what, ": mode '", mode_name, "' cannot pad axis ", d, " of length ", len);
      std::vector<std::int64_t> idx(static_cast<std::size_t>(std::max<std::int64_t>(out, 0)));
      for (std::int64_t o = 0; o < out; ++o) {
        std::int64_t i = o - a;
        if (mode == Mode::edge) {
          i = std::clamp<std::int64_t>(i, 0, len - 1);
        } else if (mode == Mode::wrap) {
          i = ((i % len) + len) % len;
        } else {  // reflect: mirrored at the edges without repeating them
          const std::int64_t period = 2 * (len - 1);
          i = ((i % period) + period) % period;
          if (i >= len) i = period - i;
        }
        idx[std::size_t(o)] = i;
      }
      y = gather(y, constant(idx, Shape{std::int64_t(idx.size())}), d);
    }
    return {y};
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> pads;
  std::vector<Slice> crop(std::size_t(x.rank()));
  bool cropped = false;
  for (std::int64_t d = 0; d < x.rank(); ++d) {
    const std::int64_t a = p[std::size_t(d)], b = p[std::size_t(d + x.rank())];
    pads.emplace_back(std::max<std::int64_t>(a, 0), std::max<std::int64_t>(b, 0));
    if (a < 0 || b < 0) {  // negative pads remove elements
      crop[std::size_t(d)] = Slice{std::max<std::int64_t>(-a, 0), x.dim(d) - std::max<std::int64_t>(-b, 0)};
      cropped = true;
    }
  }
  return {soma::pad(cropped ? slice(x, crop) : x, pads, value)};
}

std::vector<Tensor> constant_of_shape(const Node& n) {
  auto s = ints_of(n.x());
  Shape shape(s.begin(), s.end());
  Tensor v = scalar(0.0, DType::f32);
  if (auto* a = n.attr.find("value")) v = from_proto(a->t());
  return {fill(shape, cast(v, DType::f64).item<double>(), v.dtype())};
}

// Constant: its value attribute, by kind (the first one the node lists).
using ConstantReader = Tensor (*)(const AttributeProto&);
const std::unordered_map<std::string_view, ConstantReader>& constant_readers() {
  static const std::unordered_map<std::string_view, ConstantReader> m{
      {"value", [](const AttributeProto& a) { return from_proto(a.t()); }},
      {"value_float", [](const AttributeProto& a) { return scalar(a.f(), DType::f32); }},
      {"value_int", [](const AttributeProto& a) { return scalar(double(a.i()), DType::i64); }},
      {"value_floats",
       [](const AttributeProto& a) {
         return constant(std::vector<float>(a.floats().begin(), a.floats().end()),
                         Shape{a.floats_size()});
       }},
      {"value_ints", [](const AttributeProto& a) {
         return constant(std::vector<std::int64_t>(a.ints().begin(), a.ints().end()),
                         Shape{a.ints_size()});
       }}};
  return m;
}
std::vector<Tensor> constant_(const Node& n) {
  for (auto& a : n.proto.attribute()) {
    auto it = constant_readers().find(a.name());
    if (it != constant_readers().end()) return {it->second(a)};
  }
  fail(kWho, n.what, ": a Constant needs a value, value_float(s) or value_int(s) attribute");
}

// Recurrent activations by name (ONNX spells them in any case).
using Activation = Tensor (*)(const Tensor&);
const std::unordered_map<std::string, Activation>& activations() {
  static const std::unordered_map<std::string, Activation> m{
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }}};
  return m;
}
Tensor activation_fn(const std::string& name, const Tensor& x, const std::string& what) {
  auto it = activations().find(lower(name));
  if (it == activations().end())
    fail(kWho, what, ": recurrent activation '", name, "' is not supported (Sigmoid, Tanh, Relu)");
  return it->second(x);
}

struct Direction {
  int count;     // directions run
  bool reverse;  // the first one runs backwards
};
const std::unordered_map<std::string, Direction>& directions() {
  static const std::unordered_map<std::string, Direction> m{
      {"forward", {1, false}}, {"reverse", {1, true}}, {"bidirectional", {2, false}}};
  return m;
}
const std::vector<std::string_view> kDirections{"forward", "reverse", "bidirectional"};

// LSTM (K = 4 gates), GRU (3) and RNN (1): one direction, forward or reverse, or both; layout
// 0 or 1.
template <int K>
std::vector<Tensor> recurrent(const Node& n) {
  constexpr int k = K;
  const std::string& what = n.what;
  const std::vector<Tensor>& in = n.in;
  const Direction dir = directions().at(n.attr.s("direction"));
  if (n.attr.has("clip")) fail(kWho, what, ": clip is not supported");
  if (n.attr.i("input_forget", 0)) fail(kWho, what, ": input_forget is not supported");
  if (in.size() > 4 && in[4].defined()) fail(kWho, what, ": sequence_lens is not supported");
  if (k == 4 && in.size() > 7 && in[7].defined())
    fail(kWho, what, ": peephole weights (P) are not supported");
  const bool batch_first = n.attr.i("layout") == 1;
  const int dirs = dir.count;
  const std::size_t per_dir = k == 4 ? 3 : k == 3 ? 2 : 1;  // activations per direction
  std::vector<std::string> acts;
  if (auto* a = n.attr.find("activations")) acts.assign(a->strings().begin(), a->strings().end());
  if (acts.empty()) {
    for (int d = 0; d < dirs; ++d) {
      if (k == 4) acts.insert(acts.end(), {"Sigmoid", "Tanh", "Tanh"});
      else if (k == 3) acts.insert(acts.end(), {"Sigmoid", "Tanh"});
      else acts.push_back("Tanh");
    }
  }
  if (acts.size() != per_dir * std::size_t(dirs))
    fail(kWho, what, ": expected ", per_dir * std::size_t(dirs), " activations, got ", acts.size());
  Tensor X = n.x(), W = n.arg(1), R = n.arg(2);
  if (batch_first) X = transpose(X, {1, 0, 2});  // -> [time, batch, features]
  const std::int64_t U = R.dim(-1);
  const std::int64_t T = X.dim(0), N = X.dim(1);
  // Initial states [dirs, batch, U] (layout 1: [batch, dirs, U]).
  auto state = [&](std::size_t idx) -> Tensor {
    if (in.size() > idx && in[idx].defined())
      return batch_first ? transpose(in[idx], {1, 0, 2}) : in[idx];
    return Tensor();
  };
  const Tensor H0 = state(5), C0 = k == 4 ? state(6) : Tensor();
  const bool linear_before_reset = n.attr.i("linear_before_reset", 0) != 0;
  auto chunk = [&](const Tensor& t, std::int64_t g) {
    return slice(t, {Slice{}, Slice{g * U, (g + 1) * U}});
  };
  std::vector<Tensor> Ys, Yhs, Ycs;
  for (int d = 0; d < dirs; ++d) {
    const bool reverse = dir.reverse || d == 1;
    const std::string* act = &acts[per_dir * std::size_t(d)];
    Tensor Wt = transpose(W[d]);  // [in, k*U]
    Tensor Rt = transpose(R[d]);  // [U, k*U]
    Tensor wb, rb;
    if (in.size() > 3 && in[3].defined()) {
      Tensor B = in[3][d];
      wb = slice(B, {Slice{0, k * U}});
      rb = slice(B, {Slice{k * U, 2 * k * U}});
    }
    // Input projections of every step in one matmul.
    Tensor XW = matmul(X, Wt);
    if (wb.defined()) XW = XW + wb;
    // Zero states on the input's device (zeros() would make them in host memory).
    auto zero_state = [&] { return zeros_like(Tensor::empty({N, U}, XW.dtype(), XW.device())); };
    Tensor H = H0.defined() ? H0[d] : zero_state();
    Tensor C = k == 4 ? (C0.defined() ? C0[d] : zero_state()) : Tensor();
    std::vector<Tensor> steps(std::size_t(T > 0 ? T : 0));
    for (std::int64_t s = 0; s < T; ++s) {
      const std::int64_t t = reverse ? T - 1 - s : s;
      Tensor xw = XW[t];  // [batch, k*U]
      if (k == 4) {  // gates i, o, f, c
        Tensor gates = xw + matmul(H, Rt);
        if (rb.defined()) gates = gates + rb;
        Tensor i = activation_fn(act[0], chunk(gates, 0), what);
        Tensor o = activation_fn(act[0], chunk(gates, 1), what);
        Tensor f = activation_fn(act[0], chunk(gates, 2), what);
        Tensor c = activation_fn(act[1], chunk(gates, 3), what);
        C = f * C + i * c;
        H = o * activation_fn(act[2], C, what);
      } else if (k == 3) {  // gates z, r, h
        Tensor Rzr = slice(Rt, {Slice{}, Slice{0, 2 * U}});
        Tensor Rh = slice(Rt, {Slice{}, Slice{2 * U, 3 * U}});
        Tensor zr = slice(xw, {Slice{}, Slice{0, 2 * U}}) + matmul(H, Rzr);
        if (rb.defined()) zr = zr + slice(rb, {Slice{0, 2 * U}});
        Tensor z = activation_fn(act[0], chunk(zr, 0), what);
        Tensor r = activation_fn(act[0], chunk(zr, 1), what);
        Tensor rbh = rb.defined() ? slice(rb, {Slice{2 * U, 3 * U}}) : Tensor();
        Tensor hh;
        if (linear_before_reset) {
          Tensor hr = matmul(H, Rh);
          if (rbh.defined()) hr = hr + rbh;
          hh = chunk(xw, 2) + r * hr;
        } else {
          hh = chunk(xw, 2) + matmul(r * H, Rh);
          if (rbh.defined()) hh = hh + rbh;
        }
        hh = activation_fn(act[1], hh, what);
        H = z * H + (1.0 - z) * hh;
      } else {
        Tensor a = xw + matmul(H, Rt);
        if (rb.defined()) a = a + rb;
        H = activation_fn(act[0], a, what);
      }
      steps[std::size_t(t)] = H;  // Y is aligned with the input positions in both directions
    }
    Ys.push_back(stack(steps, 0));  // [time, batch, U]
    Yhs.push_back(H);
    if (k == 4) Ycs.push_back(C);
  }
  Tensor Y = stack(Ys, 1);  // [time, dirs, batch, U]
  Tensor Yh = stack(Yhs, 0);  // [dirs, batch, U]
  Tensor Yc = k == 4 ? stack(Ycs, 0) : Tensor();
  if (batch_first) {
    Y = transpose(Y, {2, 0, 1, 3});  // [batch, time, dirs, U]
    Yh = transpose(Yh, {1, 0, 2});
    if (Yc.defined()) Yc = transpose(Yc, {1, 0, 2});
  }
  return {Y, Yh, Yc};
}


// ---- more operators, written with soma ops ------------------------------------------------------

// Moves the last axis of t to position `axis` (one_hot appends its axis).
Tensor last_axis_to(const Tensor& t, std::int64_t axis) {
  const std::int64_t r = t.rank();
  axis = norm_axis(axis, r);
  if (axis == r - 1) return t;
  std::vector<std::int64_t> perm;
  for (std::int64_t d = 0; d < r - 1; ++d) {
    if (d == axis) perm.push_back(r - 1);
    perm.push_back(d);
  }
  return transpose(t, perm);
}

// Split: sizes from the `split` attribute (before opset 13) or input, else num_outputs (opset
// 18: ceil-sized parts, the last smaller), else as many equal parts as the node has outputs.
std::vector<Tensor> split_(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(n.attr.i("axis"), x.rank());
  std::vector<std::int64_t> sizes = n.opset >= 13 ? ints_of(n.has(1) ? n.in[1] : Tensor())
                                                  : n.attr.ints("split");
  if (sizes.empty()) {
    const std::int64_t parts = n.attr.has("num_outputs") ? n.attr.i("num_outputs")
                                                         : std::int64_t(n.proto.output_size());
    const std::int64_t dim = x.dim(axis);
    const std::int64_t chunk = (dim + parts - 1) / parts;
    for (std::int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::max<std::int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  return split(x, sizes, axis);
}

std::vector<Tensor> tile_(const Node& n) { return {tile(n.x(), ints_of(n.arg(1)))}; }

std::vector<Tensor> einsum_(const Node& n) {
  std::string eq;
  for (char c : n.attr.s("equation"))
    if (c != ' ') eq += c;
  return {einsum(eq, n.in)};
}

// OneHot: indices (any numeric dtype; negative ones count from the end), depth, [off, on].
std::vector<Tensor> one_hot_(const Node& n) {
  Tensor idx = cast(n.x(), DType::i64);
  const std::int64_t depth = std::int64_t(n.number(1));
  const Tensor& values = n.arg(2);
  const auto v = cast(values, DType::f64).to_vector<double>();
  if (v.size() != 2) fail(kWho, n.what, ": values has ", v.size(), " elements, expected 2");
  const Tensor d = scalar(double(depth), DType::i64);
  idx = where(less(idx, zeros({}, DType::i64)), idx + d, idx);
  return {last_axis_to(one_hot(idx, depth, values.dtype(), v[1], v[0]), n.attr.i("axis", -1))};
}

// Hardmax: 1 at the first maximum along the axis (before opset 13: the input seen as 2-D).
std::vector<Tensor> hardmax(const Node& n) {
  const Tensor& x = n.x();
  auto along = [&](const Tensor& t, std::int64_t axis) {
    axis = norm_axis(axis, t.rank());
    return last_axis_to(one_hot(argmax(t, axis), t.dim(axis), t.dtype()), axis);
  };
  if (n.opset >= 13) return {along(x, n.attr.i("axis", -1))};
  const std::int64_t axis = norm_axis(n.attr.i("axis", 1), x.rank());
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  return {reshape(along(reshape(x, {outer, -1}), -1), x.shape())};
}

std::vector<Tensor> gelu(const Node& n) {
  const Tensor& x = n.x();
  enum class A { none, tanh };
  if (keyword<A>(n.attr.s("approximate"), {{"none", A::none}, {"tanh", A::tanh}}, n.what) == A::tanh)
    return {0.5 * x * (1.0 + tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)))};
  return {0.5 * x * (1.0 + erf(x * (1.0 / std::numbers::sqrt2)))};
}
std::vector<Tensor> mish(const Node& n) { return {n.x() * tanh(softplus(n.x()))}; }
std::vector<Tensor> selu(const Node& n) {
  return {elu(n.x(), n.attr.f("alpha")) * n.attr.f("gamma")};
}
std::vector<Tensor> celu(const Node& n) {
  const Tensor& x = n.x();
  const double a = n.attr.f("alpha");
  return {relu(x) + minimum(zeros_like(x), a * (exp(x / a) - 1.0))};
}
std::vector<Tensor> thresholded_relu(const Node& n) {
  const Tensor& x = n.x();
  return {where(greater(x, full_like(x, n.attr.f("alpha"))), x, zeros_like(x))};
}
std::vector<Tensor> prelu(const Node& n) {
  const Tensor& x = n.x();
  return {where(less(x, zeros_like(x)), x * n.arg(1), x)};
}
std::vector<Tensor> shrink(const Node& n) {
  const Tensor& x = n.x();
  const double lambd = n.attr.f("lambd"), bias = n.attr.f("bias");
  Tensor y = where(greater(x, full_like(x, lambd)), x - bias, zeros_like(x));
  return {where(less(x, full_like(x, -lambd)), x + bias, y)};
}
std::vector<Tensor> swish(const Node& n) { return {n.x() * sigmoid(n.x() * n.attr.f("alpha"))}; }
std::vector<Tensor> is_nan(const Node& n) { return {not_equal(n.x(), n.x())}; }
std::vector<Tensor> is_inf(const Node& n) {
  const Tensor& x = n.x();
  const double inf = std::numeric_limits<double>::infinity();
  Tensor pos = n.attr.i("detect_positive") ? equal(x, full_like(x, inf)) : zeros(x.shape(), DType::boolean);
  Tensor neg = n.attr.i("detect_negative") ? equal(x, full_like(x, -inf)) : zeros(x.shape(), DType::boolean);
  return {logical_or(pos, neg)};
}

// Normalisations over trailing or listed axes.
Axes from_axis(std::int64_t axis, std::int64_t rank) {
  Axes a;
  for (std::int64_t d = norm_axis(axis, rank); d < rank; ++d) a.push_back(d);
  return a;
}
std::vector<Tensor> rms_norm(const Node& n) {
  const Tensor& x = n.x();
  Tensor y = x * rsqrt(mean(square(x), from_axis(n.attr.i("axis", -1), x.rank()), true) +
                       n.attr.f("epsilon"));
  return {y * n.arg(1)};
}
std::vector<Tensor> instance_norm(const Node& n) {
  const Tensor& x = n.x();
  Axes axes = from_axis(2, x.rank());
  Shape b(std::size_t(x.rank()), 1);
  b[1] = x.dim(1);
  Tensor m = mean(x, axes, true);
  Tensor y = (x - m) * rsqrt(mean(square(x - m), axes, true) + n.attr.f("epsilon"));
  return {y * reshape(n.arg(1), b) + reshape(n.arg(2), b)};
}
// GroupNormalization: scale and bias per group (opset 18) or per channel (21).
std::vector<Tensor> group_norm(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t g = n.attr.i("num_groups"), c = x.dim(1);
  Tensor xg = reshape(x, {x.dim(0), g, -1});
  Tensor m = mean(xg, {2}, true);
  Tensor y = (xg - m) * rsqrt(mean(square(xg - m), {2}, true) + n.attr.f("epsilon"));
  const Tensor &scale = n.arg(1), &bias = n.arg(2);
  if (scale.numel() == g && g != c) {
    y = y * reshape(scale, {1, g, 1}) + reshape(bias, {1, g, 1});
    return {reshape(y, x.shape())};
  }
  Shape b(std::size_t(x.rank()), 1);
  b[1] = c;
  return {reshape(y, x.shape()) * reshape(scale, b) + reshape(bias, b)};
}
std::vector<Tensor> lp_norm(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(n.attr.i("axis", -1), x.rank());
  const std::int64_t p = n.attr.i("p", 2);
  if (p != 1 && p != 2) fail(kWho, n.what, ": p is ", p, ", expected 1 or 2");
  Tensor norm = p == 1 ? sum(abs(x), {axis}, true) : sqrt(sum(square(x), {axis}, true));
  // A zero norm leaves the zeros as they are (ONNX's reference).
  return {x / where(equal(norm, zeros_like(norm)), ones_like(norm), norm)};
}
// MeanVarianceNormalization, as ONNX's function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9).
std::vector<Tensor> mvn(const Node& n) {
  const Tensor& x = n.x();
  Axes axes;
  auto a = n.attr.ints("axes");
  if (a.empty()) a = {0, 2, 3};
  for (auto v : a) axes.push_back(v);
  Tensor m = mean(x, axes, true);
  Tensor sd = sqrt(mean(pow(x, scalar(2.0, x.dtype())), axes, true) - pow(m, scalar(2.0, x.dtype())));
  return {(x - m) / (sd + 1e-9)};
}

std::vector<Tensor> depth_to_space(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t b = n.attr.i("blocksize");
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  enum class M { dcr, crd };
  const bool crd = keyword<M>(n.attr.s("mode"), {{"DCR", M::dcr}, {"CRD", M::crd}}, n.what) == M::crd;
  Tensor t = crd
                 ? transpose(reshape(x, {N, C / (b * b), b, b, H, W}), {0, 1, 4, 2, 5, 3})
                 : transpose(reshape(x, {N, b, b, C / (b * b), H, W}), {0, 3, 4, 1, 5, 2});
  return {reshape(t, {N, C / (b * b), H * b, W * b})};
}
std::vector<Tensor> space_to_depth(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t b = n.attr.i("blocksize");
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  enum class M { dcr, crd };  // DepthToSpace's inverse, by mode
  const bool crd = keyword<M>(n.attr.s("mode"), {{"DCR", M::dcr}, {"CRD", M::crd}}, n.what) == M::crd;
  Tensor t = transpose(reshape(x, {N, C, H / b, b, W / b, b}),
                       crd ? std::vector<std::int64_t>{0, 1, 3, 5, 2, 4}
                           : std::vector<std::int64_t>{0, 3, 5, 1, 2, 4});
  return {reshape(t, {N, C * b * b, H / b, W / b})};
}
std::vector<Tensor> eye_like(const Node& n) {
  const Tensor& x = n.x();
  if (x.rank() != 2) fail(kWho, n.what, ": the input has rank ", x.rank(), ", expected 2");
  const DType t = n.attr.has("dtype")
                      ? soma_dtype(int(n.attr.i("dtype")), n.what + " attribute 'dtype'")
                      : x.dtype();
  Tensor d = reshape(arange(0, double(x.dim(1)), 1, DType::i64), {1, x.dim(1)}) -
             reshape(arange(0, double(x.dim(0)), 1, DType::i64), {x.dim(0), 1});
  return {cast(equal(d, scalar(double(n.attr.i("k")), DType::i64)), t)};
}

// NegativeLogLikelihoodLoss on log-probabilities [N, C, d...] and targets [N, d...]: -x[n, t]
// weighted by weight[t], 0 where the target is ignore_index; mean divides by the weights' sum.
Tensor nll(const Node& n, const Tensor& x, const Tensor& target, const Tensor& weight) {
  Tensor t = cast(target, DType::i64);
  Tensor keep = ones(t.shape(), DType::boolean);
  if (n.attr.has("ignore_index"))
    keep = not_equal(t, scalar(double(n.attr.i("ignore_index")), DType::i64));
  t = where(keep, t, zeros({}, DType::i64));
  const std::int64_t c = x.dim(1);
  Tensor picked = -sum(x * last_axis_to(one_hot(t, c, x.dtype()), 1), {1}, false);
  Tensor w = weight.defined() ? gather(weight, t, 0) : ones(t.shape(), x.dtype());
  w = w * cast(keep, x.dtype());
  Tensor loss = picked * w;
  enum class R { none, sum, mean };
  switch (keyword<R>(n.attr.s("reduction"), {{"none", R::none}, {"sum", R::sum}, {"mean", R::mean}},
                     n.what)) {
    case R::none: return loss;
    case R::sum: return sum(loss);
    case R::mean: break;
  }
  return sum(loss) / sum(w);
}
std::vector<Tensor> nll_loss(const Node& n) {
  return {nll(n, n.x(), n.arg(1), n.has(2) ? n.in[2] : Tensor())};
}
std::vector<Tensor> softmax_cross_entropy(const Node& n) {
  Tensor lp = log_softmax(n.x(), 1);
  return {nll(n, lp, n.arg(1), n.has(2) ? n.in[2] : Tensor()), lp};
}

// Attention (opsets 23-25), as ONNX's reference: Q and K each scaled by sqrt(scale), the KV
// cache concatenated, grouped KV heads repeated, softcap, an additive bias from attn_mask
// (bool: -inf where false), the causal and sliding-window frontiers (offset by the cache or per
// batch by nonpad_kv_seqlen) and the key padding; a row with every key masked gives zeros.
std::vector<Tensor> attention(const Node& n) {
  Tensor q = n.x(), k = n.arg(1), v = n.arg(2);
  const DType dt = q.dtype();
  const double inf = std::numeric_limits<double>::infinity();
  const bool three_d = q.rank() == 3;
  const std::int64_t batch = q.dim(0);
  if (three_d) {
    const std::int64_t qh = n.attr.i("q_num_heads"), kh = n.attr.i("kv_num_heads");
    if (qh <= 0 || kh <= 0)
      fail(kWho, n.what, ": 3-D inputs need q_num_heads and kv_num_heads");
    auto heads = [&](const Tensor& t, std::int64_t h) {
      return transpose(reshape(t, {batch, t.dim(1), h, t.dim(2) / h}), {0, 2, 1, 3});
    };
    q = heads(q, qh);
    k = heads(k, kh);
    v = heads(v, kh);
  }
  const double scale = n.attr.has("scale") ? n.attr.f("scale") : 1.0 / std::sqrt(double(q.dim(3)));
  const Tensor s = cast(scalar(std::sqrt(scale), DType::f64), dt);
  const bool has_past = n.has(4) && n.has(5);
  if (n.has(4) != n.has(5)) fail(kWho, n.what, ": past_key and past_value come together");
  const std::int64_t past = has_past ? n.in[4].dim(2) : 0;
  if (has_past) {
    k = concat({n.in[4], k}, 2);
    v = concat({n.in[5], v}, 2);
  }
  const Tensor present_k = k, present_v = v;
  const std::int64_t ql = q.dim(2), kl = k.dim(2);
  // The additive bias, [ql, kl] or broadcastable to [batch, heads, ql, kl].
  Tensor bias = zeros({ql, kl}, dt);
  if (n.has(3)) {
    Tensor m = n.in[3];
    if (m.dtype() == DType::boolean) m = where(m, zeros({}, dt), full_like(zeros({}, dt), -inf));
    else m = cast(m, dt);
    if (m.dim(-1) < kl) {  // shorter masks are padded with "masked"
      std::vector<std::pair<std::int64_t, std::int64_t>> pads(std::size_t(m.rank()), {0, 0});
      pads.back().second = kl - m.dim(-1);
      m = soma::pad(m, pads, -inf);
    }
    bias = bias + m;
  }
  std::vector<std::int64_t> offsets{past};  // one, or one per batch element
  std::vector<std::int64_t> nonpad;
  if (n.has(6)) {
    nonpad = ints_of(n.in[6]);
    if (!has_past) {
      offsets.clear();
      for (auto len : nonpad) offsets.push_back(len - ql);
    }
  }
  // frontier(i, j) -> allowed, as -inf / 0 added to the bias ([ql, kl], or [batch, 1, ql, kl]).
  auto add_frontier = [&](auto allowed) {
    std::vector<float> b;
    for (auto off : offsets)
      for (std::int64_t i = 0; i < ql; ++i)
        for (std::int64_t j = 0; j < kl; ++j) b.push_back(allowed(i + off, j) ? 0.0f : -float(inf));
    Shape shape = offsets.size() == 1 ? Shape{ql, kl} : Shape{std::int64_t(offsets.size()), 1, ql, kl};
    bias = bias + cast(constant(b, shape), dt);
  };
  if (n.attr.i("is_causal")) add_frontier([](std::int64_t p, std::int64_t j) { return j <= p; });
  const std::int64_t left = n.attr.i("left_window_size", -1), right = n.attr.i("right_window_size", -1);
  if (left >= 0 || right >= 0)
    add_frontier([&](std::int64_t p, std::int64_t j) {
      return (left < 0 || p - j <= left) && (right < 0 || j - p <= right);
    });
  if (!nonpad.empty()) {
    std::vector<float> b;
    for (auto len : nonpad)
      for (std::int64_t j = 0; j < kl; ++j) b.push_back(j < len ? 0.0f : -float(inf));
    bias = bias + cast(constant(b, Shape{std::int64_t(nonpad.size()), 1, 1, kl}), dt);
  }
  const std::int64_t qh = q.dim(1), kh = k.dim(1);
  if (qh != kh && qh % kh == 0) {  // grouped heads: each KV head repeated in place
    auto repeat = [&](const Tensor& t) {
      Tensor r = expand_dims(t, 2) + zeros({t.dim(0), kh, qh / kh, t.dim(2), t.dim(3)}, t.dtype());
      return reshape(r, {t.dim(0), qh, t.dim(2), t.dim(3)});
    };
    k = repeat(k);
    v = repeat(v);
  }
  Tensor scores = matmul(q * s, transpose(k * s, {0, 1, 3, 2}));
  const double softcap = n.attr.f("softcap");
  if (softcap > 0) scores = tanh(scores / softcap) * softcap;
  Tensor with_bias = scores + bias;
  const std::int64_t mode = n.attr.i("qk_matmul_output_mode");
  Tensor qk_out = mode == 2 ? with_bias : scores;
  const DType sm = n.attr.has("softmax_precision")
                       ? soma_dtype(int(n.attr.i("softmax_precision")), n.what + " softmax_precision")
                       : dt;
  Tensor masked_row = equal(max(cast(bias, DType::f32), {-1}, true), full_like(zeros({}, DType::f32), -inf));
  Tensor logits = where(masked_row, zeros({}, sm), cast(with_bias, sm));
  Tensor probs = where(masked_row, zeros({}, sm), softmax(logits, -1));
  if (mode == 3) qk_out = probs;
  Tensor y = matmul(cast(probs, dt), v);
  if (three_d) y = reshape(transpose(y, {0, 2, 1, 3}), {batch, y.dim(2), -1});
  return {y, present_k, present_v, cast(qk_out, dt)};
}

// RotaryEmbedding (opset 23), as ONNX's reference: x [batch, heads, seq, head] or
// [batch, seq, hidden]; the first rotary_embedding_dim features of each head rotated in pairs
// (halves, or interleaved even/odd) by the cos/sin caches, indexed by position_ids if given.
std::vector<Tensor> rotary_embedding(const Node& n) {
  const Tensor& in = n.x();
  Tensor x = in.rank() == 4 ? transpose(in, {0, 2, 1, 3}) : in;  // [batch, seq, heads, head]
  if (x.rank() == 3) {
    const std::int64_t heads = n.attr.i("num_heads");
    if (heads <= 0) fail(kWho, n.what, ": a 3-D input needs num_heads");
    x = reshape(x, {x.dim(0), x.dim(1), heads, x.dim(2) / heads});
  }
  const std::int64_t head = x.dim(3);
  std::int64_t rot = n.attr.i("rotary_embedding_dim");
  if (rot == 0) rot = head;
  Tensor cos_c = n.arg(1), sin_c = n.arg(2);
  if (n.has(3)) {
    Tensor pos = cast(n.in[3], DType::i64);
    cos_c = reshape(gather(cos_c, reshape(pos, {-1}), 0), {pos.dim(0), pos.dim(1), -1});
    sin_c = reshape(gather(sin_c, reshape(pos, {-1}), 0), {pos.dim(0), pos.dim(1), -1});
  }
  if (cos_c.dim(-1) != rot / 2 || sin_c.dim(-1) != rot / 2)
    fail(kWho, n.what, ": the caches' last axis is ", cos_c.dim(-1), ", expected ", rot / 2);
  cos_c = expand_dims(cos_c, -2);
  sin_c = expand_dims(sin_c, -2);
  Tensor xr = slice(x, {Slice{}, Slice{}, Slice{}, Slice{0, rot}});
  const bool interleaved = n.attr.i("interleaved") != 0;
  Tensor x1 = interleaved ? slice(xr, {Slice{}, Slice{}, Slice{}, Slice{0, rot, 2}})
                          : slice(xr, {Slice{}, Slice{}, Slice{}, Slice{0, rot / 2}});
  Tensor x2 = interleaved ? slice(xr, {Slice{}, Slice{}, Slice{}, Slice{1, rot, 2}})
                          : slice(xr, {Slice{}, Slice{}, Slice{}, Slice{rot / 2, rot}});
  Tensor re = cos_c * x1 - sin_c * x2, im = sin_c * x1 + cos_c * x2;
  Tensor rotated = interleaved ? reshape(stack({re, im}, -1), xr.shape()) : concat({re, im}, -1);
  Tensor y = rot < head ? concat({rotated, slice(x, {Slice{}, Slice{}, Slice{}, Slice{rot, head}})}, -1)
                        : rotated;
  return {in.rank() == 3 ? reshape(y, in.shape()) : transpose(y, {0, 2, 1, 3})};
}

// CenterCropPad: each listed axis cropped or zero-padded to its target, centred (the extra
// element at the end when the difference is odd).
std::vector<Tensor> center_crop_pad(const Node& n) {
  Tensor x = n.x();
  auto target = ints_of(n.arg(1));
  std::vector<std::int64_t> axes = n.attr.ints("axes");
  if (axes.empty())
    for (std::int64_t d = 0; d < x.rank(); ++d) axes.push_back(d);
  if (axes.size() != target.size())
    fail(kWho, n.what, ": shape has ", target.size(), " values for ", axes.size(), " axes");
  std::vector<Slice> crop(std::size_t(x.rank()));
  std::vector<std::pair<std::int64_t, std::int64_t>> pads(std::size_t(x.rank()), {0, 0});
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto a = std::size_t(norm_axis(axes[i], x.rank()));
    const std::int64_t dim = x.dim(std::int64_t(a)), t = target[i];
    if (t < dim) crop[a] = Slice{(dim - t) / 2, (dim - t) / 2 + t};
    else pads[a] = {(t - dim) / 2, t - dim - (t - dim) / 2};
  }
  return {soma::pad(slice(x, crop), pads, 0.0)};
}

// CumProd along an axis (an input): soma's cumprod.
std::vector<Tensor> cumprod_(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(std::int64_t(n.number(1)), x.rank());
  return {cumprod(x, axis, n.attr.i("exclusive") != 0, n.attr.i("reverse") != 0)};
}

// TopK: soma's topk (stable: of equal values the lower index comes first, as ONNX orders ties).
std::vector<Tensor> top_k(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t k = n.opset >= 10 ? std::int64_t(n.number(1)) : n.attr.i("k");  // input from 10
  const std::int64_t axis = norm_axis(n.attr.i("axis", -1), x.rank());
  const std::int64_t len = x.dim(axis);
  if (k < 0 || k > len) fail(kWho, n.what, ": k is ", k, " for an axis of length ", len);
  auto [values, indices] = topk(x, k, axis, n.attr.i("largest") != 0, n.attr.i("sorted") != 0);
  return {values, indices};
}

// ---- checks at load: what a handler cannot run, refused before anything runs ---------------------

// Conv / pooling: 1-D and 2-D windows on floating inputs.
void check_window(const LoadCheck& c, bool pool) {
  const auto ks = c.attr.ints("kernel_shape");
  if (ks.size() > 2)
    fail(kWho, c.what, ": ", ks.size(), "-D windows are not supported (1-D and 2-D)");
  for (int i : {0, pool ? 0 : 1}) {
    const Declared d = c.input(i);
    if (d.rank >= 0 && d.rank != 3 && d.rank != 4)
      fail(kWho, c.what, ": input ", i, " has rank ", d.rank, "; only 1-D and 2-D windows "
           "(rank 3 or 4) are supported");
  }
  const Declared x = c.input(0);
  if (x.elem && !floating_elem(x.elem))
    fail(kWho, c.what, ": input 0 has element type ", elem_type_name(x.elem),
         "; soma runs it on float, double, float16 and bfloat16");
}
// Conv also runs 3-D windows (conv_3d).
void check_conv(const LoadCheck& c) {
  const Declared x = c.input(0);
  if (c.attr.ints("kernel_shape").size() == 3 || x.rank == 5) {
    for (int i : {0, 1}) {
      const Declared d = c.input(i);
      if (d.rank >= 0 && d.rank != 5)
        fail(kWho, c.what, ": input ", i, " has rank ", d.rank, "; a 3-D convolution needs rank 5");
    }
    if (x.elem && !floating_elem(x.elem))
      fail(kWho, c.what, ": input 0 has element type ", elem_type_name(x.elem),
           "; soma runs it on float, double, float16 and bfloat16");
    return;
  }
  check_window(c, false);
}
void check_conv_transpose(const LoadCheck& c) {
  check_window(c, false);
  if (auto_pads().at(c.attr.s("auto_pad")) != AutoPad::notset && c.attr.has("output_shape"))
    fail(kWho, c.what, ": auto_pad with output_shape is not supported");
}
// Pooling runs windows of any rank (pool_nd beyond 2-D, dilations and Indices); average and Lp
// pooling on floating inputs, max pooling on any soma dtype.
void check_pool_of(const LoadCheck& c, bool max) {
  const Declared x = c.input(0);
  if (x.rank >= 0 && x.rank < 3)
    fail(kWho, c.what, ": input 0 has rank ", x.rank, "; pooling needs [N, C, spatial...]");
  if (!max && x.elem && !floating_elem(x.elem))
    fail(kWho, c.what, ": input 0 has element type ", elem_type_name(x.elem),
         "; soma runs it on float, double, float16 and bfloat16");
  const auto ks = c.attr.ints("kernel_shape");
  if (x.rank >= 0 && ks.size() + 2 != std::size_t(x.rank))
    fail(kWho, c.what, ": kernel_shape has ", ks.size(), " values for input rank ", x.rank);
  if (auto_pads().at(c.attr.s("auto_pad")) != AutoPad::notset && c.attr.i("ceil_mode"))
    fail(kWho, c.what, ": ceil_mode with auto_pad is not supported");
}
void check_pool(const LoadCheck& c) { check_pool_of(c, false); }
void check_max_pool(const LoadCheck& c) { check_pool_of(c, true); }
// Dropout drops out when the model trains (nn::Module::train); a training_mode fed at run time
// would ask for a random mask that matches no other runtime's.
void check_dropout(const LoadCheck& c) {
  if (c.has_input(2) && !c.constants.count(c.proto.input(2)))
    fail(kWho, c.what, ": a training_mode input computed at run time is not supported (soma "
         "drops out while the model trains: Model::train / eval)");
}
void check_lp_pool(const LoadCheck& c) { check_pool(c); }
void check_batch_norm(const LoadCheck& c) {
  if (c.attr.i("training_mode")) return;  // the running statistics are outputs (import_more.cpp)
  for (int i = 1; i < c.proto.output_size(); ++i)
    if (c.has_output(i))
      fail(kWho, c.what, ": training-mode outputs (running mean/var) are not supported");
}
void check_recurrent(const LoadCheck& c) {
  if (c.attr.has("clip")) fail(kWho, c.what, ": clip is not supported");
  if (c.attr.has("input_forget") && c.attr.i("input_forget", 0))
    fail(kWho, c.what, ": input_forget is not supported");
  if (c.has_input(4)) fail(kWho, c.what, ": sequence_lens is not supported");
}
void check_lstm(const LoadCheck& c) {
  check_recurrent(c);
  if (c.has_input(7)) fail(kWho, c.what, ": peephole weights (P) are not supported");
}


// Resize (opset 11 on), nearest or linear, one axis at a time (multi-linear interpolation is
// separable): each output position maps to a source coordinate by the coordinate
// transformation mode; nearest gathers the rounded index, linear blends the two neighbours
// (indices clamped to the edge). tf_crop_and_resize writes extrapolation_value outside the roi.
constexpr std::string_view kNearest = "nearest";  // Resize's mode (the others: linear, cubic)
std::vector<Tensor> resize(const Node& n) {
  Tensor y = n.x();
  const std::int64_t r = y.rank();
  std::vector<std::int64_t> axes;
  for (auto a : n.attr.ints("axes")) axes.push_back(norm_axis(a, r));
  if (axes.empty())
    for (std::int64_t d = 0; d < r; ++d) axes.push_back(d);
  const std::size_t k = axes.size();
  std::vector<double> scales(k, 1.0), roi_start(k, 0.0), roi_end(k, 1.0);
  std::vector<std::int64_t> out(k);
  for (std::size_t i = 0; i < k; ++i) out[i] = y.dim(axes[i]);
  if (n.has(3) && n.in[3].numel() > 0) {  // sizes
    auto sz = ints_of(n.in[3]);
    if (sz.size() != k) fail(kWho, n.what, ": sizes has ", sz.size(), " values for ", k, " axes");
    enum class P { stretch, not_larger, not_smaller };
    const P policy = keyword<P>(n.attr.s("keep_aspect_ratio_policy"),
                                {{"stretch", P::stretch}, {"not_larger", P::not_larger},
                                 {"not_smaller", P::not_smaller}},
                                n.what);
    if (policy == P::stretch) {
      for (std::size_t i = 0; i < k; ++i) {
        out[i] = sz[i];
        scales[i] = double(sz[i]) / double(y.dim(axes[i]));
      }
    } else {  // one scale for every axis, the smallest (not_larger) or largest (not_smaller)
      double sc = policy == P::not_larger ? std::numeric_limits<double>::infinity() : 0.0;
      for (std::size_t i = 0; i < k; ++i) {
        const double v = double(sz[i]) / double(y.dim(axes[i]));
        sc = policy == P::not_larger ? std::min(sc, v) : std::max(sc, v);
      }
      for (std::size_t i = 0; i < k; ++i) {
        scales[i] = sc;
        out[i] = std::int64_t(std::floor(sc * double(y.dim(axes[i])) + 0.5));
      }
    }
  } else if (n.has(2) && n.in[2].numel() > 0) {  // scales
    auto sc = cast(n.in[2], DType::f64).to_vector<double>();
    if (sc.size() != k) fail(kWho, n.what, ": scales has ", sc.size(), " values for ", k, " axes");
    for (std::size_t i = 0; i < k; ++i) {
      scales[i] = sc[i];
      out[i] = std::int64_t(std::floor(double(y.dim(axes[i])) * sc[i]));
    }
  } else {
    fail(kWho, n.what, ": neither scales nor sizes is given");
  }
  enum class Ct { half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric,
                  tf_crop_and_resize };
  enum class Near { round_prefer_floor, round_prefer_ceil, floor, ceil };
  const bool nearest = n.attr.s("mode") == kNearest;
  const Ct ct = keyword<Ct>(n.attr.s("coordinate_transformation_mode"),
                            {{"half_pixel", Ct::half_pixel},
                             {"half_pixel_symmetric", Ct::half_pixel_symmetric},
                             {"pytorch_half_pixel", Ct::pytorch_half_pixel},
                             {"align_corners", Ct::align_corners},
                             {"asymmetric", Ct::asymmetric},
                             {"tf_crop_and_resize", Ct::tf_crop_and_resize}},
                            n.what);
  const Near nm = keyword<Near>(n.attr.s("nearest_mode"),
                                {{"round_prefer_floor", Near::round_prefer_floor},
                                 {"round_prefer_ceil", Near::round_prefer_ceil},
                                 {"floor", Near::floor}, {"ceil", Near::ceil}},
                                n.what);
  if (ct == Ct::tf_crop_and_resize) {
    if (!n.has(1)) fail(kWho, n.what, ": tf_crop_and_resize needs the roi input");
    auto roi = cast(n.in[1], DType::f64).to_vector<double>();
    const std::size_t m = roi.size() / 2;
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t j = m == k ? i : std::size_t(axes[i]);
      roi_start[i] = roi[j];
      roi_end[i] = roi[j + m];
    }
  }
  const double extrapolation = n.attr.f("extrapolation_value");
  enum class Mode { nearest, linear, cubic };
  const bool cubic = keyword<Mode>(n.attr.s("mode"), {{"nearest", Mode::nearest}, {"linear", Mode::linear},
                                                      {"cubic", Mode::cubic}}, n.what) == Mode::cubic;
  const bool antialias = n.attr.i("antialias") != 0;
  const bool general = cubic || antialias;
  const double cubic_a = n.attr.f("cubic_coeff_a");
  const bool exclude_outside = n.attr.i("exclude_outside") != 0;
  for (std::size_t i = 0; i < k; ++i) {
    const std::int64_t ax = axes[i], in_len = y.dim(ax), out_len = out[i];
    const double scale = scales[i];
    if (out_len == in_len && scale == 1.0 && ct != Ct::tf_crop_and_resize) continue;
    std::vector<double> src(static_cast<std::size_t>(out_len));
    std::vector<bool> inside(static_cast<std::size_t>(out_len), true);
    for (std::int64_t o = 0; o < out_len; ++o) {
      const double x = double(o);
      double v;
      if (ct == Ct::asymmetric) {
        v = x / scale;
      } else if (ct == Ct::align_corners) {
        // The resized length as a real number (scale * length), as ONNX's reference has it.
        const double len = scale * double(in_len);
        v = len == 1.0 ? 0.0 : x * double(in_len - 1) / (len - 1.0);
      } else if (ct == Ct::pytorch_half_pixel) {
        v = out_len > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
      } else if (ct == Ct::half_pixel_symmetric) {
        const double adjustment = double(out_len) / (scale * double(in_len));
        const double offset = double(in_len) / 2.0 * (1.0 - adjustment);
        v = offset + (x + 0.5) / scale - 0.5;
      } else if (ct == Ct::tf_crop_and_resize) {
        const double a = roi_start[i], b = roi_end[i];
        v = out_len > 1 ? a * double(in_len - 1) + x * (b - a) * double(in_len - 1) / double(out_len - 1)
                        : 0.5 * (a + b) * double(in_len - 1);
        inside[std::size_t(o)] = v >= 0 && v <= double(in_len - 1);
      } else {  // half_pixel
        v = (x + 0.5) / scale - 0.5;
      }
      src[std::size_t(o)] = v;
    }
    Shape along(std::size_t(r), 1);
    along[std::size_t(ax)] = out_len;
    Tensor z;
    if (nearest) {
      std::vector<std::int64_t> idx(static_cast<std::size_t>(out_len));
      for (std::size_t o = 0; o < idx.size(); ++o) {
        const double v = src[o];
        double f;
        if (nm == Near::floor) f = std::floor(v);
        else if (nm == Near::ceil) f = std::ceil(v);
        else if (nm == Near::round_prefer_ceil) f = std::floor(v + 0.5);
        else f = std::ceil(v - 0.5);  // round_prefer_floor
        idx[o] = std::clamp<std::int64_t>(std::int64_t(f), 0, in_len - 1);
      }
      z = gather(y, constant(idx, Shape{out_len}), ax);
    } else if (general) {  // cubic, antialiased: n taps per output position
      const ResizeTaps taps = resize_taps(src, in_len, scale, cubic, antialias, cubic_a, exclude_outside);
      for (std::size_t j = 0; j < taps.n; ++j) {
        std::vector<std::int64_t> idx(static_cast<std::size_t>(out_len));
        std::vector<double> w(idx.size());
        for (std::size_t o = 0; o < idx.size(); ++o) {
          idx[o] = taps.index[o * taps.n + j];
          w[o] = taps.weight[o * taps.n + j];
        }
        Tensor t = gather(y, constant(idx, Shape{out_len}), ax) * cast(constant(w, along), y.dtype());
        z = j == 0 ? t : z + t;
      }
    } else {  // linear
      std::vector<std::int64_t> i0(static_cast<std::size_t>(out_len)), i1(i0.size());
      std::vector<double> w(static_cast<std::size_t>(out_len));
      for (std::size_t o = 0; o < w.size(); ++o) {
        const double v = std::clamp(src[o], 0.0, double(in_len - 1));
        const double f = std::floor(v);
        i0[o] = std::int64_t(f);
        i1[o] = std::min<std::int64_t>(i0[o] + 1, in_len - 1);
        w[o] = v - f;
      }
      Tensor wt = cast(constant(w, along), y.dtype());
      z = gather(y, constant(i0, Shape{out_len}), ax) * (1.0 - wt) +
          gather(y, constant(i1, Shape{out_len}), ax) * wt;
    }
    if (ct == Ct::tf_crop_and_resize) {
      std::vector<std::uint8_t> in_v(inside.begin(), inside.end());
      Tensor mask = cast(constant(std::vector<float>(in_v.begin(), in_v.end()), along), DType::boolean);
      z = where(mask, z, full_like(z, extrapolation));
    }
    y = z;
  }
  return {y};
}

// GridSample on [N, C, H, W] (opset 16 on), as ONNX's reference: grid [N, Ho, Wo, 2] holds
// normalised (x, y); nearest rounds half to even, linear blends the four neighbours; samples
// outside are zeros, the border's, or reflected. One gather of rows of x as [N*H*W, C] per
// neighbour.
std::vector<Tensor> grid_sample(const Node& n) {
  const Tensor& x = n.x();
  const Tensor& grid = n.arg(1);
  enum class Mode { nearest, linear, cubic };
  const Mode mode = keyword<Mode>(n.attr.s("mode"), {{"nearest", Mode::nearest}, {"linear", Mode::linear},
                                                     {"bilinear", Mode::linear}, {"cubic", Mode::cubic},
                                                     {"bicubic", Mode::cubic}}, n.what);
  if (x.rank() != 4 || mode == Mode::cubic)
    return grid_sample_nd(n);  // other ranks, cubic (import_more.cpp)
  enum class Pad { zeros, border, reflection };
  const Pad pm = keyword<Pad>(n.attr.s("padding_mode"),
                              {{"zeros", Pad::zeros}, {"border", Pad::border},
                               {"reflection", Pad::reflection}},
                              n.what);
  const bool align = n.attr.i("align_corners") != 0;
  const bool nearest = n.attr.s("mode") == kNearest;
  const std::int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t Ho = grid.dim(1), Wo = grid.dim(2);
  const DType gt = grid.dtype();
  auto coord = [&](std::int64_t k, std::int64_t len) {
    Tensor g = squeeze(slice(grid, {Slice{}, Slice{}, Slice{}, Slice{k, k + 1}}), {3});
    return align ? (g + 1.0) / 2.0 * double(len - 1) : ((g + 1.0) * double(len) - 1.0) / 2.0;
  };
  // The reflection of v into [lo, hi] (a triangle wave), as a float tensor.
  auto reflect = [&](const Tensor& v, double lo, double hi) {
    const double rng = hi - lo;
    if (rng <= 0) return full_like(v, lo);
    Tensor t = mod(v - lo, full_like(v, 2 * rng));
    return where(less_equal(t, full_like(t, rng)), t, 2 * rng - t) + lo;
  };
  // The source coordinate along one axis, with the padding mode applied outside the borders.
  auto source = [&](Tensor v, std::int64_t len) {
    const double lo = align ? 0.0 : -0.5, hi = align ? double(len - 1) : double(len) - 0.5;
    if (nearest) v = round(v);
    Tensor out = logical_or(less(v, full_like(v, lo)), greater(v, full_like(v, hi)));
    if (pm == Pad::border) v = where(out, clip(v, 0.0, double(len - 1)), v);
    if (pm == Pad::reflection) v = where(out, reflect(v, lo, hi), v);
    return v;
  };
  // An integer index along one axis -> (index inside [0, len), valid).
  auto fetch_index = [&](const Tensor& i, std::int64_t len) {
    const double lo = align ? 0.0 : -0.5, hi = align ? double(len - 1) : double(len) - 0.5;
    Tensor valid = logical_and(greater_equal(i, zeros({}, gt)), less(i, full_like(zeros({}, gt), double(len))));
    Tensor j = i;
    if (pm == Pad::reflection) j = where(valid, i, reflect(i, lo, hi));
    j = cast(clip(j, 0.0, double(len - 1)), DType::i64);  // (reflected values truncate, as int())
    if (pm != Pad::zeros) valid = ones(i.shape(), DType::boolean);
    return std::pair<Tensor, Tensor>{j, valid};
  };
  const Tensor rows = reshape(transpose(x, {0, 2, 3, 1}), {N * H * W, C});
  const Tensor base = reshape(arange(0, double(N), 1, DType::i64), {N, 1, 1}) *
                      scalar(double(H * W), DType::i64);
  auto pixel = [&](const Tensor& yi, const Tensor& xi) {  // [N, Ho, Wo, C]
    auto [y, vy] = fetch_index(yi, H);
    auto [xx, vx] = fetch_index(xi, W);
    Tensor pos = base + y * scalar(double(W), DType::i64) + xx;
    Tensor v = reshape(gather(rows, reshape(pos, {-1}), 0), {N, Ho, Wo, C});
    return where(expand_dims(logical_and(vy, vx), 3), v, zeros({}, x.dtype()));
  };
  Tensor sx = source(coord(0, W), W), sy = source(coord(1, H), H);
  Tensor y;
  if (nearest) {
    y = pixel(sy, sx);
  } else {
    Tensor x0 = floor(sx), y0 = floor(sy);
    Tensor wx = expand_dims(cast(sx - x0, x.dtype()), 3), wy = expand_dims(cast(sy - y0, x.dtype()), 3);
    Tensor x1 = x0 + 1.0, y1 = y0 + 1.0;
    y = (pixel(y0, x0) * (1.0 - wx) + pixel(y0, x1) * wx) * (1.0 - wy) +
        (pixel(y1, x0) * (1.0 - wx) + pixel(y1, x1) * wx) * wy;
  }
  return {transpose(y, {0, 3, 1, 2})};
}
void check_grid_sample(const LoadCheck& c) {
  const Declared x = c.input(0);
  if (x.rank >= 0 && x.rank < 3)
    fail(kWho, c.what, ": input 0 has rank ", x.rank, "; sampling needs [N, C, spatial...]");
  if (x.elem && !floating_elem(x.elem))
    fail(kWho, c.what, ": element type ", elem_type_name(x.elem), " is not supported");
}
// Cast's target type and CastLike's: one soma holds (a narrow integer target only through Cast,
// where cast_ wraps it; CastLike would see the i8 / u8 that holds it).
void check_cast(const LoadCheck& c) {
  // The cast op's mapping still gives the opsets (Cast's `to` was a STRING before opset 6).
  const OpDef& d = get_op("cast");
  if (c.opset < d.onnx.min_opset)
    fail(kWho, c.what, ": operator 'Cast' is supported for opsets ", d.onnx.min_opset,
         ".. (soma op 'cast'); the model imports opset ", c.opset);
  soma_dtype(int(c.attr.i("to")), c.what + " attribute 'to'");
}

// Quantized values soma holds: u8 and i8 (i32 for DequantizeLinear's input); per tensor, per
// axis or blocked.
template <bool quantize>
void check_quantize(const LoadCheck& c) {
  using TP = ::onnx::TensorProto;
  if (c.attr.i("block_size") < 0)
    fail(kWho, c.what, ": block_size must be non-negative, got ", c.attr.i("block_size"));
  if (quantize && c.attr.i("precision"))
    fail(kWho, c.what, ": attribute 'precision' is not supported");
  auto ok = [&](int e) { return e == TP::UINT8 || e == TP::INT8 || (!quantize && e == TP::INT32); };
  const int q = quantize ? (c.input(2).elem ? c.input(2).elem : int(c.attr.i("output_dtype")))
                         : c.input(0).elem;
  if (q && !ok(q))
    fail(kWho, c.what, ": quantized element type ", elem_type_name(q), " is not supported (soma ",
         "quantizes to UINT8 and INT8", quantize ? "" : "; dequantizes UINT8, INT8 and INT32", ")");
  if (quantize && c.input(0).elem && !floating_elem(c.input(0).elem))
    fail(kWho, c.what, ": input 0 has element type ", elem_type_name(c.input(0).elem),
         ", expected a floating type");
}
void check_resize(const LoadCheck& c) {
  if (c.opset < 11)
    fail(kWho, c.what, ": Resize before opset 11 is not supported (the model imports opset ",
         c.opset, ")");
  if (c.attr.i("antialias") && c.attr.s("mode") == kNearest)
    fail(kWho, c.what, ": antialias applies to linear and cubic modes only");
  const Declared x = c.input(0);
  if (x.elem && !floating_elem(x.elem) && c.attr.s("mode") != kNearest)
    fail(kWho, c.what, ": ", c.attr.s("mode"), " resizing of element type ", elem_type_name(x.elem),
         " is not supported (floating types only)");
}

// ---- the table -----------------------------------------------------------------------------------


// Attributes of opset-1 operators that later opsets dropped (ignored, as other runtimes do).
std::vector<AttrDef> legacy(std::vector<AttrDef> more = {}) {
  more.push_back(Is("consumed_inputs"));
  return more;
}
std::vector<AttrDef> legacy_broadcast() { return legacy({I("broadcast"), I("axis")}); }
std::vector<AttrDef> conv_attrs(std::vector<AttrDef> more = {}) {
  for (auto& a : {S("auto_pad", "NOTSET", kAutoPads), Is("dilations"), I("group", 1),
                  Is("kernel_shape"), Is("pads"), Is("strides")})
    more.push_back(a);
  return more;
}
std::vector<AttrDef> pool_attrs(std::vector<AttrDef> more = {}) {
  for (auto& a : {S("auto_pad", "NOTSET", kAutoPads), I("ceil_mode"), Is("dilations"),
                  Is("kernel_shape"), Is("pads"), Is("strides")})
    more.push_back(a);
  return more;
}
std::vector<AttrDef> reduce_attrs() {
  return {Is("axes"), I("keepdims", 1), I("noop_with_empty_axes")};
}
std::vector<AttrDef> rnn_attrs(std::vector<AttrDef> more = {}) {
  for (auto& a : {Fs("activation_alpha"), Fs("activation_beta"), Ss("activations"), F("clip"),
                  S("direction", "forward", kDirections), I("hidden_size"), I("layout"),
                  I("output_sequence")})
    more.push_back(a);
  return more;
}

const std::unordered_map<std::string_view, OnnxOp>& onnx_ops() {
  static const std::unordered_map<std::string_view, OnnxOp> ops{
      // one-to-one (the op definition's mapping does the work): ONNX's attributes only
      {"Add", {nullptr, legacy_broadcast()}},
      {"Sub", {nullptr, legacy_broadcast()}},
      {"Mul", {nullptr, legacy_broadcast()}},
      {"Equal", {nullptr, {I("broadcast"), I("axis")}}},
      {"Greater", {nullptr, {I("broadcast"), I("axis")}}},
      {"Less", {nullptr, {I("broadcast"), I("axis")}}},
      {"Relu", {nullptr, legacy()}},
      {"Sigmoid", {nullptr, legacy()}},
      {"Tanh", {nullptr, legacy()}},
      {"Exp", {nullptr, legacy()}},
      {"Log", {nullptr, legacy()}},
      {"Sqrt", {nullptr, legacy()}},
      {"Abs", {nullptr, legacy()}},
      {"Neg", {nullptr, legacy()}},
      {"Reciprocal", {nullptr, legacy()}},
      {"LeakyRelu", {nullptr, legacy({F("alpha", 0.01f)})}},
      {"Elu", {nullptr, legacy({F("alpha", 1.0f)})}},
      {"HardSigmoid", {nullptr, legacy({F("alpha", 0.2f), F("beta", 0.5f)})}},
      {"Concat", {nullptr, {I("axis", 0)}}},
      {"Cast",
       {cast_, {I("to", 1), I("saturate", 1), S("round_mode", "up")}, {}, false, check_cast}},
      // handlers
      {"Identity", {identity_value}},
      {"Dropout", {dropout, legacy({F("ratio", 0.5f), I("is_test"), I("seed")}), {}, false,
                   check_dropout}},
      {"Div", {divide_, legacy_broadcast()}},
      {"Mod", {mod_, {I("fmod")}}},
      {"Pow", {pow_, {I("broadcast"), I("axis")}}},
      {"Sum", {variadic<add2>, legacy()}},
      {"Mean", {variadic<add2, true>, legacy()}},
      {"Max", {variadic<max2>, legacy()}},
      {"Min", {variadic<min2>, legacy()}},
      {"Clip", {clip_, legacy({F("min", -FLT_MAX), F("max", FLT_MAX)})}},
      {"Expand", {expand}},
      {"Softmax", {softmax_<false>, {I("axis")}}},
      {"LogSoftmax", {softmax_<true>, {I("axis")}}},
      {"Gemm", {gemm, {F("alpha", 1.0f), F("beta", 1.0f), I("transA"), I("transB"),
                       I("broadcast")}}},
      {"Conv", {conv<false>, conv_attrs(), {}, false, check_conv}},
      {"ConvTranspose", {conv<true>, conv_attrs({Is("output_padding"), Is("output_shape")}), {},
                         false, check_conv_transpose}},
      {"MaxPool", {pool<true>, pool_attrs({I("storage_order")}), {}, false, check_max_pool}},
      {"AveragePool", {pool<false>, pool_attrs({I("count_include_pad")}), {}, false, check_pool}},
      {"MaxUnpool", {max_unpool, {Is("kernel_shape"), Is("pads"), Is("strides")}}},
      {"LpPool", {lp_pool, pool_attrs({I("p", 2)}), {}, false, check_lp_pool}},
      {"GlobalAveragePool", {global_pool<false>}},
      {"GlobalMaxPool", {global_pool<true>}},
      {"BatchNormalization",
       {batch_norm, legacy({F("epsilon", 1e-5f), F("momentum", 0.9f), I("spatial", 1),
                            I("is_test"), I("training_mode")}),
        {3, 4}, false, check_batch_norm}},
      {"LayerNormalization", {layer_norm, {I("axis", -1), F("epsilon", 1e-5f), I("stash_type", 1)}}},
      {"ReduceMean", {reduce<Reduce::mean>, reduce_attrs()}},
      {"ReduceSum", {reduce<Reduce::sum>, reduce_attrs()}},
      {"ReduceMax", {reduce<Reduce::max>, reduce_attrs()}},
      {"ReduceMin", {reduce<Reduce::min>, reduce_attrs()}},
      {"ReduceProd", {reduce<Reduce::prod>, reduce_attrs()}},
      {"ReduceL1", {reduce<Reduce::l1>, reduce_attrs()}},
      {"ReduceL2", {reduce<Reduce::l2>, reduce_attrs()}},
      {"ReduceLogSum", {reduce<Reduce::log_sum>, reduce_attrs()}},
      {"ReduceLogSumExp", {reduce<Reduce::log_sum_exp>, reduce_attrs()}},
      {"ReduceSumSquare", {reduce<Reduce::sum_square>, reduce_attrs()}},
      {"ArgMax", {arg_reduce<true>, {I("axis"), I("keepdims", 1), I("select_last_index")}}},
      {"ArgMin", {arg_reduce<false>, {I("axis"), I("keepdims", 1), I("select_last_index")}}},
      {"Size", {size_}},
      {"Where", {where_}},
      {"CastLike",
       {cast_like, {I("saturate", 1), S("round_mode", "up")}}},
      {"QuantizeLinear", {quantize_linear_, {I("axis", 1), I("saturate", 1), I("block_size"),
                                             I("output_dtype"), I("precision")},
                          {}, false, check_quantize<true>}},
      {"DequantizeLinear", {dequantize_linear_, {I("axis", 1), I("block_size"), I("output_dtype")},
                            {}, false, check_quantize<false>}},
      {"DynamicQuantizeLinear", {dynamic_quantize_linear}},
      {"MatMulInteger", {matmul_integer_}},
      {"QLinearMatMul", {qlinear_matmul}},
      {"Xor", {xor_, {I("broadcast"), I("axis")}}},
      {"Trilu", {trilu, {I("upper", 1)}}},
      {"Range", {range_}},
      {"CumSum", {cumsum_, {I("exclusive"), I("reverse")}}},
      {"GatherElements", {gather_elements, {I("axis")}}},
      {"Resize",
       {resize,
        {I("antialias"), Is("axes"),
         S("coordinate_transformation_mode", "half_pixel",
           {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
            "asymmetric", "tf_crop_and_resize"}),
         F("cubic_coeff_a", -0.75f), I("exclude_outside"), F("extrapolation_value", 0.0f),
         S("keep_aspect_ratio_policy", "stretch", {"stretch", "not_larger", "not_smaller"}),
         S("mode", "nearest", {"nearest", "linear", "cubic"}),
         S("nearest_mode", "round_prefer_floor",
           {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})},
        {}, false, check_resize}},
      {"ScatterElements",
       {scatter_elements, {I("axis"), S("reduction", "none", {"none", "add", "mul", "max", "min"})}}},
      {"Scatter", {scatter_elements, {I("axis"), S("reduction", "none", {"none"})}}},
      {"GatherND", {gather_nd, {I("batch_dims")}}},
      {"ScatterND", {scatter_nd, {S("reduction", "none", {"none", "add", "mul", "max", "min"})}}},
      {"Tan", {tan_}},
      {"Sinh", {sinh_}},
      {"Cosh", {cosh_}},
      {"Asinh", {asinh_}},
      {"Acosh", {acosh_}},
      {"Atanh", {atanh_}},
      {"Attention",
       {attention,
        {I("is_causal"), I("kv_num_heads"), I("q_num_heads"), I("qk_matmul_output_mode"),
         F("scale"), F("softcap"), I("softmax_precision"), I("left_window_size", -1),
         I("right_window_size", -1)}}},
      {"RotaryEmbedding",
       {rotary_embedding, {I("interleaved"), I("num_heads"), I("rotary_embedding_dim")}}},
      {"CenterCropPad", {center_crop_pad, {Is("axes")}}},
      {"CumProd", {cumprod_, {I("exclusive"), I("reverse")}}},
      {"TopK", {top_k, {I("axis", -1), I("k"), I("largest", 1), I("sorted", 1)}}},
      {"GridSample",
       {grid_sample,
        {I("align_corners"), S("mode", "linear", {"nearest", "linear", "bilinear", "cubic", "bicubic"}),
         S("padding_mode", "zeros", {"zeros", "border", "reflection"})},
        {}, false, check_grid_sample}},
      {"Split", {split_, {I("axis"), Is("split"), I("num_outputs")}}},
      {"Tile", {tile_}},
      {"Einsum", {einsum_, {S("equation")}}},
      {"OneHot", {one_hot_, {I("axis", -1)}}},
      {"Hardmax", {hardmax, {I("axis")}}},
      {"Gelu", {gelu, {S("approximate", "none", {"none", "tanh"})}}},
      {"Mish", {mish}},
      {"Selu", {selu, legacy({F("alpha", 1.67326319217681884765625f),
                              F("gamma", 1.05070102214813232421875f)})}},
      {"Celu", {celu, {F("alpha", 1.0f)}}},
      {"ThresholdedRelu", {thresholded_relu, {F("alpha", 1.0f)}}},
      {"PRelu", {prelu, legacy()}},
      {"Shrink", {shrink, {F("bias", 0.0f), F("lambd", 0.5f)}}},
      {"Swish", {swish, {F("alpha", 1.0f)}}},
      {"IsNaN", {is_nan}},
      {"IsInf", {is_inf, {I("detect_negative", 1), I("detect_positive", 1)}}},
      {"RMSNormalization", {rms_norm, {I("axis", -1), F("epsilon", 1e-5f), I("stash_type", 1)}}},
      {"InstanceNormalization", {instance_norm, {F("epsilon", 1e-5f)}}},
      {"GroupNormalization", {group_norm, {F("epsilon", 1e-5f), I("num_groups"), I("stash_type", 1)}}},
      {"LpNormalization", {lp_norm, {I("axis", -1), I("p", 2)}}},
      {"MeanVarianceNormalization", {mvn, {Is("axes")}}},
      {"DepthToSpace", {depth_to_space, {I("blocksize"), S("mode", "DCR", {"DCR", "CRD"})}}},
      {"SpaceToDepth", {space_to_depth, {I("blocksize"), S("mode", "DCR", {"DCR", "CRD"})}}},
      {"EyeLike", {eye_like, {I("dtype"), I("k")}}},
      {"NegativeLogLikelihoodLoss",
       {nll_loss, {I("ignore_index"), S("reduction", "mean", {"none", "sum", "mean"})}}},
      {"SoftmaxCrossEntropyLoss",
       {softmax_cross_entropy, {I("ignore_index"), S("reduction", "mean", {"none", "sum", "mean"})}}},
      {"Flatten", {flatten, {I("axis", 1)}}},
      {"Reshape", {reshape_, legacy({I("allowzero"), Is("shape")})}},
      {"Shape", {shape_, {I("start"), I("end")}}},
      {"Transpose", {transpose_, {Is("perm")}}},
      {"Squeeze", {squeeze_<true>, {Is("axes")}}},
      {"Unsqueeze", {squeeze_<false>, {Is("axes")}}},
      {"Gather", {gather_, {I("axis")}}},
      {"Slice", {slice_, {Is("starts"), Is("ends"), Is("axes")}}},
      {"Pad", {pad_, {S("mode", "constant", {"constant", "edge", "reflect", "wrap"}), Is("pads"), Is("paddings"),
                      F("value")}}},
      {"ConstantOfShape", {constant_of_shape, {T("value")}}},
      {"Constant",
       {constant_,
        {T("value"), F("value_float"), Fs("value_floats"), I("value_int"), Is("value_ints"),
         S("value_string"), Ss("value_strings"), {"sparse_value", AP::SPARSE_TENSOR}},
        {},
        true}},
      {"Adagrad",
       {adagrad, {F("decay_factor"), F("epsilon", 1e-6f), F("norm_coefficient")}, {}, false, nullptr,
        "ai.onnx.preview.training"}},
      {"Adam",
       {adam, {F("alpha", 0.9f), F("beta", 0.999f), F("epsilon", 1e-6f), F("norm_coefficient"),
               F("norm_coefficient_post")}, {}, false, nullptr, "ai.onnx.preview.training"}},
      {"Momentum",
       {momentum, {F("alpha"), F("beta"), S("mode", "", {"standard", "nesterov"}), F("norm_coefficient")},
        {}, false, nullptr, "ai.onnx.preview.training"}},
      {"Binarizer", {binarizer, {F("threshold")}, {}, false, nullptr, "ai.onnx.ml"}},
      {"ArrayFeatureExtractor", {array_feature_extractor, {}, {}, false, nullptr, "ai.onnx.ml"}},
      {"ReverseSequence", {reverse_sequence, {I("batch_axis", 1), I("time_axis")}}},
      {"TensorScatter", {tensor_scatter, {I("axis", -2), S("mode", "linear", {"linear", "circular"})}}},
      {"AffineGrid", {affine_grid, {I("align_corners")}}},
      {"DFT", {dft, {I("axis", 1), I("inverse"), I("onesided")}, {}, false, check_dft}},
      {"STFT", {stft, {I("onesided", 1)}}},
      {"NonZero", {non_zero}},
      {"Compress", {compress, {I("axis")}}},
      {"Unique", {unique, {I("axis"), I("sorted", 1)}}},
      {"NonMaxSuppression", {non_max_suppression, {I("center_point_box")}}},
      {"Col2Im", {col2im, {Is("dilations"), Is("pads"), Is("strides")}}},
      {"BitCast", {bit_cast, {I("to")}, {}, false, check_bit_cast}},
      {"RoiAlign",
       {roi_align,
        {S("coordinate_transformation_mode", "half_pixel", {"half_pixel", "output_half_pixel"}),
         S("mode", "avg", {"avg", "max"}), I("output_height", 1), I("output_width", 1),
         I("sampling_ratio"), F("spatial_scale", 1.0f)}}},
      {"Upsample", {upsample, {S("mode", "nearest", {"nearest"}), Fs("scales")}}},
      {"MelWeightMatrix", {mel_weight_matrix, {I("output_datatype", 1)}}},
      // import_control.cpp
      {"If", {if_, {G("then_branch"), G("else_branch")}}},
      {"Loop", {loop, {G("body")}}},
      {"Scan",
       {scan,
        {G("body"), I("num_scan_inputs"), Is("scan_input_axes"), Is("scan_input_directions"),
         Is("scan_output_axes"), Is("scan_output_directions")},
        {}, false, check_scan}},
      {"SequenceEmpty", {sequence_empty, {I("dtype", 1)}}},
      {"SequenceConstruct", {sequence_construct}},
      {"SequenceInsert", {sequence_insert}},
      {"SequenceAt", {sequence_at}},
      {"SequenceErase", {sequence_erase}},
      {"SequenceLength", {sequence_length}},
      {"ConcatFromSequence", {concat_from_sequence, {I("axis"), I("new_axis")}}},
      {"SplitToSequence", {split_to_sequence, {I("axis"), I("keepdims", 1)}}},
      {"SequenceMap", {sequence_map, {G("body")}}},
      {"Optional", {optional, {{"type", AP::TYPE_PROTO}}}},
      {"OptionalHasElement", {optional_has_element}},
      {"OptionalGetElement", {optional_get_element}},
      // import_more.cpp
      {"LinearAttention",
       {linear_attention,
        {I("chunk_size"), I("kv_num_heads"), I("q_num_heads"), F("scale"),
         S("update_rule", "gated_delta", {"linear", "gated", "delta", "gated_delta"})}}},
      {"CausalConvWithState", {causal_conv_with_state, {S("activation", "none", {"none", "silu", "swish"})}}},
      {"SwiGLU", {swiglu, {F("alpha", 1.0f)}}},
      {"HannWindow", {window<0>, {I("output_datatype", 1), I("periodic", 1)}}},
      {"HammingWindow", {window<1>, {I("output_datatype", 1), I("periodic", 1)}}},
      {"BlackmanWindow", {window<2>, {I("output_datatype", 1), I("periodic", 1)}}},
      {"LRN", {lrn, {F("alpha", 1e-4f), F("beta", 0.75f), F("bias", 1.0f), I("size")}}},
      {"LSTM", {recurrent<4>, rnn_attrs({I("input_forget")}), {}, false, check_lstm}},
      {"GRU", {recurrent<3>, rnn_attrs({I("linear_before_reset")}), {}, false, check_recurrent}},
      {"RNN", {recurrent<1>, rnn_attrs(), {}, false, check_recurrent}},
  };
  return ops;
}

// An op definition that maps to an ONNX operator.
struct Mapped {
  const OpDef* def;
  const OnnxMapping* map;
  bool covers(std::int64_t opset) const {
    return opset >= map->min_opset && (map->max_opset == 0 || opset <= map->max_opset);
  }
};
// ONNX op_type -> the op definitions that map to it (one per opset range), from all_ops().
const std::unordered_map<std::string, std::vector<Mapped>>& mapped_ops() {
  static const auto table = [] {
    std::unordered_map<std::string, std::vector<Mapped>> m;
    for (const OpDef* d : all_ops())
      if (!d->onnx.op_type.empty()) m[d->onnx.op_type].push_back({d, &d->onnx});
    return m;
  }();
  return table;
}

// Every operator soma imports, for messages.
std::string supported_list() {
  std::set<std::string> names;
  for (auto& [t, op] : onnx_ops())
    if (op.run) names.emplace(t);
  for (auto& [t, defs] : mapped_ops()) names.insert(t);
  return join(names);
}

// A node resolved at load: the handler, or the op with its attributes converted.
struct Step {
  const NodeProto* proto = nullptr;
  std::string what;
  const OnnxOp* op = nullptr;  // nullptr: not listed in onnx_ops()
  const OpDef* def = nullptr;  // a mapped op (run == nullptr)
  Attrs def_attrs;
  std::unique_ptr<NodeAttrs> attrs;
  bool fused_relu = false;  // a Conv that applies the Relu after it
  bool fused_away = false;  // that Relu (or BatchNormalization): its output is the Conv's
  // A CastLike whose `like` is declared with a type soma holds in a wider dtype (INT4 in i8,
  // FLOAT8E4M3FN in f32, ...): run as Cast to that ONNX type (its dtype alone cannot tell).
  int cast_to = 0;
  const Step* folded_bn = nullptr;  // a Conv: the BatchNormalization folded into it
  double bn_eps = 0.0;
  // The folded kernel and bias of the last inference call, and what they were made from (the
  // tensors, kept alive so that their storage cannot be reused, and their versions).
  struct FoldCache {
    std::vector<Tensor> from;
    std::vector<std::uint64_t> versions;
    Tensor w, b;
  };
  mutable FoldCache fold;
  Subgraphs graphs;  // its GRAPH attributes (If's branches, Loop's body), resolved
};
std::unique_ptr<Subgraph> make_subgraph(const ::onnx::GraphProto& g, std::int64_t opset);

const std::vector<AttrDef> kNoAttrs;

// The op's attributes from the node, converted by the mapping: the node's value, else ONNX's
// default (onnx_ops()), else the op's declared default.
Attrs convert_attrs(const Step& s, const Mapped& m) {
  Attrs out;
  auto spec_of = [&](const std::string& name) -> const AttrSpec* {
    for (auto& a : m.def->attrs)
      if (a.name == name) return &a;
    return nullptr;
  };
  std::set<std::string> done;
  for (auto& ma : m.map->attrs) {
    const AttrSpec* spec = spec_of(ma.soma);
    const AttrValue* like = spec ? &spec->default_value : nullptr;
    const std::string what = s.what + " attribute '" + ma.onnx + "'";
    if (auto* a = s.attrs->find(ma.onnx)) {
      out.set(ma.soma, attr_from_onnx(*a, like, what));
    } else if (const AttrDef* d = s.attrs->def(ma.onnx);
               d && (d->type == AP::INT || d->type == AP::FLOAT || d->type == AP::STRING)) {
      AttributeProto def;  // ONNX's default, converted as a file's value would be
      def.set_name(ma.onnx);
      def.set_type(d->type);
      if (d->type == AP::INT) def.set_i(std::int64_t(d->num));
      else if (d->type == AP::FLOAT) def.set_f(float(d->num));
      else if (d->type == AP::STRING) def.set_s(std::string(d->str));
      out.set(ma.soma, attr_from_onnx(def, like, what));
    } else if (spec) {
      out.set(ma.soma, spec->default_value);
    }
    done.insert(ma.soma);
  }
  for (auto& a : m.def->attrs)
    if (!done.count(a.name)) out.set(a.name, a.default_value);
  return out;
}

Step resolve(const NodeProto& n, int index, std::int64_t opset) {
  Step s;
  s.proto = &n;
  s.what = node_desc(n, index);
  auto it = onnx_ops().find(n.op_type());
  if (it != onnx_ops().end()) s.op = &it->second;
  const std::vector<AttrDef>& defs = s.op ? s.op->attrs : kNoAttrs;
  auto no_subgraphs = [&] {
    for (auto& a : n.attribute())
      if (a.type() == AP::GRAPH || a.type() == AP::GRAPHS)
        fail(kWho, s.what, ": sub-graphs are not supported");
  };
  if (s.op && s.op->run) {
    for (auto& a : n.attribute())  // a GRAPH attribute the handler lists is one it runs
      if ((a.type() == AP::GRAPH || a.type() == AP::GRAPHS) &&
          !std::any_of(defs.begin(), defs.end(), [&](const AttrDef& d) { return d.name == a.name(); }))
        fail(kWho, s.what, ": sub-graphs are not supported");
    s.attrs = std::make_unique<NodeAttrs>(n, defs, nullptr, nullptr, s.what);
    for (auto& a : n.attribute())
      if (a.type() == AP::GRAPH) s.graphs[a.name()] = make_subgraph(a.g(), opset);
    return s;
  }
  auto m = mapped_ops().find(n.op_type());
  if (m == mapped_ops().end())
    fail(kWho, s.what, ": operator '", n.op_type(), "' is not supported by soma (opset ", opset,
         "; supported: ",
         supported_list(), ")");
  no_subgraphs();
  const Mapped* use = nullptr;
  for (auto& c : m->second)
    if (c.covers(opset)) use = &c;
  if (!use) {
    std::vector<std::string> ranges;
    for (auto& c : m->second)
      ranges.push_back(std::to_string(c.map->min_opset) + ".." +
                       (c.map->max_opset ? std::to_string(c.map->max_opset) : "") + " (soma op '" +
                       c.def->name + "')");
    fail(kWho, s.what, ": operator '", n.op_type(), "' is supported for opsets ", join(ranges),
         "; the model imports opset ", opset);
  }
  s.def = use->def;
  s.attrs = std::make_unique<NodeAttrs>(n, defs, use->map, use->def, s.what);
  s.def_attrs = convert_attrs(s, *use);
  return s;
}

// A mapped op: called as it is, on the node's inputs. Two inputs of different dtypes are
// promoted first, as soma's binary functions and matmul do.
std::vector<Tensor> run_mapped(const Step& s, const std::vector<Tensor>& in) {
  for (std::size_t i = 0; i < in.size(); ++i)
    if (!in[i].defined()) fail(kWho, s.what, ": input ", i, " is missing");
  if (in.size() == 2 && s.def->num_inputs == 2 && in[0].dtype() != in[1].dtype()) {
    const DType t = promote_types(in[0].dtype(), in[1].dtype());
    return call_op(*s.def, {cast(in[0], t), cast(in[1], t)}, s.def_attrs);
  }
  return call_op(*s.def, in, s.def_attrs);
}

// ---- graphs: the main graph and sub-graphs, resolved at load --------------------------------------

// A graph resolved at load: one step per node, its constants (non-float initialisers of the main
// graph, every initialiser of a sub-graph, Constant nodes' outputs) and what it declares about
// its values; run on an environment of named values.
struct Program {
  std::int64_t opset = 0;
  std::vector<Step> steps;  // one per node, in graph order
  std::unordered_map<std::string, Tensor> constants;
  std::unordered_map<std::string, Declared> declared;
  // Device copies of constants, made when a node on a device first needs one (Module::to moves
  // the weights only: the constants stay in host memory, where shapes and axes are read).
  mutable std::unordered_map<std::string, Tensor> device_constants;
  std::int64_t fused = 0, folded = 0;  // Conv + Relu pairs, batch norms folded into a Conv

  // Every node is resolved before anything runs, so an unsupported operator or attribute fails
  // at load (in sub-graphs too).
  void resolve_nodes(const ::onnx::GraphProto& g) {
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      auto it = onnx_ops().find(n.op_type());
      const std::string_view domain = it == onnx_ops().end() ? "" : it->second.domain;
      if (default_domain(n.domain()) ? !domain.empty() : n.domain() != domain)
        fail(kWho, node_desc(n, i), ": operator '", n.op_type(), "' of domain '",
             default_domain(n.domain()) ? "ai.onnx" : n.domain(), "' is not supported (soma runs "
             "operators of the default ONNX domain, and a few of ai.onnx.ml and "
             "ai.onnx.preview.training)");
      if (default_domain(n.domain()) && opset == 0)
        fail(kWho, "the model imports no opset of the default ONNX domain");
      steps.push_back(resolve(n, i, opset));
    }
  }
  // Nodes without inputs (Constant) are evaluated once, here; they are constants, not weights.
  void eval_at_load() {
    for (auto& s : steps) {
      if (!s.op || !s.op->at_load) continue;
      Env env;
      const Scope scope{&env, nullptr};
      auto out = run_node(s, {}, {}, scope, false);
      for (int k = 0; k < s.proto->output_size() && std::size_t(k) < out.size(); ++k)
        if (!s.proto->output(k).empty() && out[std::size_t(k)].is_tensor())
          constants[s.proto->output(k)] = out[std::size_t(k)].tensor;
    }
  }
  // What the file declares about each value, then each handler's checks.
  void check(const ::onnx::GraphProto& g) {
    auto declare = [&](const ::onnx::ValueInfoProto& vi) {
      if (!vi.type().has_tensor_type()) return;
      const auto& tt = vi.type().tensor_type();
      declared[vi.name()] = {tt.has_shape() ? std::int64_t(tt.shape().dim_size()) : -1,
                             tt.elem_type()};
    };
    for (auto& vi : g.input()) declare(vi);
    for (auto& vi : g.value_info()) declare(vi);
    for (auto& vi : g.output()) declare(vi);
    for (auto& t : g.initializer()) declared[t.name()] = {t.dims_size(), t.data_type()};
    for (auto& s : steps)
      if (s.op && s.op->check) s.op->check({*s.proto, *s.attrs, s.what, declared, opset, constants});
    for (auto& s : steps)
      if (s.op && s.op->run.tensors == &cast_like && s.proto->input_size() > 1)
        if (auto d = declared.find(s.proto->input(1)); d != declared.end())
          if (narrow_int_bits(d->second.elem) || is_narrow_float(d->second.elem)) s.cast_to = d->second.elem;
    check_narrow();
  }
  // Values of the types soma holds in a wider dtype (INT4, UINT4, INT2, UINT2 in i8 / u8; the
  // FLOAT8 types in f32) are exact through Cast only: any other operator given one is refused
  // (in the wider dtype its arithmetic would round and wrap differently).
  void check_narrow() const {
    std::unordered_map<std::string, int> narrow;  // value -> its ONNX element type
    auto held = [](int e) { return narrow_int_bits(e) || is_narrow_float(e); };
    for (auto& [name, d] : declared)
      if (held(d.elem)) narrow[name] = d.elem;
    for (auto& s : steps) {
      const auto& n = *s.proto;
      // Cast's handler converts them; CastLike's converts its input 0 and reads only the type
      // of input 1 (a narrow one makes it a Cast to that type: cast_to).
      const bool is_cast = s.op && s.op->run.tensors == &cast_;
      const bool is_cast_like = s.op && s.op->run.tensors == &cast_like;
      for (int k = 0; k < n.input_size(); ++k) {
        auto it = narrow.find(n.input(k));
        if (it != narrow.end() && !is_cast && !is_cast_like)
          fail(kWho, s.what, ": input ", k, " has element type ", elem_type_name(it->second),
               ", which soma holds in ", soma_dtype(it->second, ""), " for Cast only (",
               n.op_type(), " on it is not supported)");
      }
      const int to = is_cast ? int(s.attrs->i("to")) : s.cast_to;
      if ((is_cast || is_cast_like) && held(to))
        for (auto& o : n.output()) narrow[o] = to;
    }
  }
  void fuse_conv_relu(const ::onnx::GraphProto& g);
  void place_inputs(const Step& s, std::vector<Tensor>& in) const;
  std::pair<Tensor, Tensor> folded_weights(const Step& s, std::vector<Tensor> from) const;

  std::vector<Value> run_node(const Step& s, const std::vector<Value>& values,
                              const std::vector<Tensor>& in, const Scope& scope,
                              bool training) const {
    if (s.def) {
      auto t = run_mapped(s, in);
      return {t.begin(), t.end()};
    }
    if (s.cast_to) {
      if (in.empty() || !in[0].defined()) fail(kWho, s.what, ": input 0 is missing");
      return {cast_to_elem(in[0], s.cast_to, s.attrs->i("saturate") != 0, s.what)};
    }
    Node node{*s.proto, s.what, *s.attrs, in, opset, training, values, &scope, &s.graphs};
    node.relu = s.fused_relu;
    return s.op->run(node);
  }

  // Runs every node on `env` (which holds the graph's inputs and constants); names the graph
  // does not define come from `outer`.
  void run(Env& env, const Scope* outer, bool training) const {
    const Scope scope{&env, outer};
    for (const Step& s : steps) {
      if (s.op && s.op->at_load) continue;
      const NodeProto& n = *s.proto;
      if (s.fused_away) {  // a Relu or a batch norm its Conv applied
        const Value* v = scope.find(n.input(0));
        if (!v) fail(kWho, s.what, ": input '", n.input(0), "' is not computed before the node");
        env[n.output(0)] = *v;
        continue;
      }
      const bool takes_values = s.op && s.op->run.values;
      std::vector<Value> values;
      std::vector<Tensor> in;
      for (auto& name : n.input()) {
        if (name.empty()) {  // an omitted optional input
          values.emplace_back();
          in.emplace_back();
          continue;
        }
        const Value* v = scope.find(name);
        if (!v)
          fail(kWho, s.what, ": input '", name, "' is not computed before the node "
               "(the graph is not topologically sorted, or the name is unknown)");
        if (!takes_values && v->is_sequence())
          fail(kWho, s.what, ": input '", name, "' is a sequence; ", n.op_type(), " takes tensors");
        values.push_back(*v);
        in.push_back(v->is_tensor() ? v->tensor : Tensor());
      }
      if (!takes_values && (in.empty() || !in[0].defined()))
        fail(kWho, s.what, ": input 0 is missing");
      place_inputs(s, in);
      for (std::size_t k = 0; k < in.size(); ++k)
        if (values[k].is_tensor()) values[k].tensor = in[k];
      if (s.folded_bn) {  // the Conv runs with the batch norm's weights folded into its own
        if (in.size() < 2 || !in[1].defined()) fail(kWho, s.what, ": input 1 is missing");
        std::vector<Tensor> from{in[1], in.size() > 2 ? in[2] : Tensor()};
        for (int k = 1; k < 5; ++k) {
          const std::string& name = s.folded_bn->proto->input(k);
          const Value* v = scope.find(name);
          if (!v || !v->is_tensor())
            fail(kWho, s.folded_bn->what, ": input '", name, "' is not computed before the node");
          Tensor t = v->tensor;
          if (t.device() != in[1].device()) t = t.to(in[1].device());
          from.push_back(t);
        }
        auto [wf, bf] = folded_weights(s, std::move(from));
        in.resize(3);
        in[1] = wf;
        in[2] = bf;
      }
      std::vector<Value> out;
      try {
        out = run_node(s, values, in, scope, training);
      } catch (const Error& e) {
        const std::string msg = e.what();
        if (msg.rfind(kWho, 0) == 0) throw;
        fail(kWho, s.what, ": ", msg);
      }
      for (int k = 0; k < n.output_size(); ++k) {
        if (n.output(k).empty()) continue;
        const std::size_t ku = std::size_t(k);
        if (ku >= out.size() || (!takes_values && !out[ku].is_tensor()))
          fail(kWho, s.what, ": output ", k, " ('", n.output(k), "') is not supported");
        env[n.output(k)] = out[ku];
      }
    }
  }
};

// Every value a GRAPH attribute's nodes (at any depth) or outputs read counts as a reader: a
// sub-graph may read an outer Conv's output by name, so that Conv is fused only if nothing else
// reads it (over-counting a sub-graph's own names only leaves a pair unfused).
void read_by_subgraph(const AttributeProto& a, std::unordered_map<std::string, int>& readers) {
  auto graph = [&](const ::onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      for (const auto& name : n.input()) ++readers[name];
      for (const auto& b : n.attribute()) read_by_subgraph(b, readers);
    }
    for (const auto& o : g.output()) ++readers[o.name()];
  };
  if (a.has_g()) graph(a.g());
  for (const auto& g : a.graphs()) graph(g);
}

// A Conv whose output is read by one node only, a Relu, and is not a graph output runs as one
// conv2d_bias_act with the ReLU (one cuDNN/oneDNN call and at most one elementwise pass on the
// output instead of three passes); the Relu then only names the Conv's result.
void Program::fuse_conv_relu(const ::onnx::GraphProto& g) {
  static const std::set<std::string> kActivationsToFuse{"Relu"};
  std::unordered_map<std::string, int> readers;
  for (const Step& s : steps) {
    for (const auto& name : s.proto->input()) ++readers[name];
    for (const auto& a : s.proto->attribute()) read_by_subgraph(a, readers);
  }
  for (const auto& o : g.output()) ++readers[o.name()];
  std::unordered_map<std::string, std::size_t> conv_of;  // output name -> its Conv's step
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const Step& s = steps[k];
    if (s.op && s.op->run.tensors == &conv<false> && s.proto->output_size() == 1)
      conv_of[s.proto->output(0)] = k;
  }
  // A BatchNormalization (inference form: one output, all five inputs) that alone reads a Conv's
  // output is folded into it; the Conv's result then goes by the batch norm's output name.
  for (Step& s : steps) {
    if (!s.op || s.op->run.tensors != &batch_norm || s.proto->output_size() != 1 ||
        s.proto->input_size() != 5 || s.attrs->i("training_mode") != 0)
      continue;
    auto it = conv_of.find(s.proto->input(0));
    if (it == conv_of.end() || readers[it->first] != 1) continue;
    bool all_inputs = true;
    for (int k = 1; k < 5; ++k) all_inputs = all_inputs && !s.proto->input(k).empty();
    if (!all_inputs) continue;
    Step& c = steps[it->second];
    c.folded_bn = &s;
    c.bn_eps = s.attrs->f("epsilon");
    s.fused_away = true;
    ++folded;
    const std::size_t conv_step = it->second;
    conv_of.erase(it);
    conv_of[s.proto->output(0)] = conv_step;
  }
  for (Step& s : steps) {
    if (!kActivationsToFuse.count(s.proto->op_type()) || s.proto->input_size() != 1) continue;
    auto it = conv_of.find(s.proto->input(0));
    if (it == conv_of.end() || readers[it->first] != 1) continue;
    steps[it->second].fused_relu = true;
    s.fused_away = true;
    ++fused;
  }
}

// A model moved to a device computes there, but constants stay in host memory: most are
// shapes, axes and pads that handlers read on the host (ints_of), and Shape's outputs are made
// there too. A node whose inputs include a device tensor gets its other host inputs on that
// device: every one for a mapped op (a soma op, whose kernel needs its inputs on one device);
// floating ones for a handler (integer ones it reads itself, and moves where it uses them as
// data, as Gather does). Copies of constants are kept, so a constant crosses once per device.
// 0-d tensors stay: soma ops take a 0-d host tensor as a value on any device.
// With s = gamma / sqrt(var + eps), bn(conv(x, w) + b) = conv(x, w * s) + (b - mean) * s + beta
// per output channel: exact up to rounding, and made of ops, so a tape differentiates through
// it and fine-tuning trains the file's own weights. `from`: w, b (may be undefined), gamma,
// beta, mean, var. In plain inference (no tape recording, no graph being built) the result is
// kept and reused while none of them has been written (storage and version unchanged).
std::pair<Tensor, Tensor> Program::folded_weights(const Step& s, std::vector<Tensor> from) const {
  const bool keep = nn::fusion::fused_op_state_ok() &&
                    (active_tapes().empty() || grad_recording_disabled());
  auto version_of = [](const Tensor& t) {
    return t.defined() ? t.storage()->version.load() : std::uint64_t(0);
  };
  Step::FoldCache& c = s.fold;
  if (keep && c.from.size() == from.size()) {
    bool same = true;
    for (std::size_t k = 0; same && k < from.size(); ++k)
      same = from[k].defined() == c.from[k].defined() &&
             (!from[k].defined() || (from[k].storage() == c.from[k].storage() &&
                                     from[k].raw_data() == c.from[k].raw_data() &&
                                     version_of(from[k]) == c.versions[k]));
    if (same) return {c.w, c.b};
  }
  const Tensor &w = from[0], &b = from[1], &gamma = from[2], &beta = from[3], &mean = from[4],
               &var = from[5];
  const Tensor scale = gamma * rsqrt(var + s.bn_eps);
  Shape per_channel(std::size_t(w.rank()), 1);
  per_channel[0] = -1;
  Tensor wf = w * reshape(scale, per_channel);
  Tensor bf = (b.defined() ? b - mean : negative(mean)) * scale + beta;
  c = {};
  if (keep) {
    for (const Tensor& t : from) c.versions.push_back(version_of(t));
    c.from = std::move(from);
    c.w = wf;
    c.b = bf;
  }
  return {wf, bf};
}

void Program::place_inputs(const Step& s, std::vector<Tensor>& in) const {
  Device dev = Device::cpu();
  for (const Tensor& t : in)
    if (t.defined() && !t.device().is_cpu()) {
      dev = t.device();
      break;
    }
  if (dev.is_cpu()) return;
  for (std::size_t k = 0; k < in.size(); ++k) {
    Tensor& t = in[k];
    if (!t.defined() || !t.device().is_cpu() || t.rank() == 0) continue;
    if (!s.def && !is_floating(t.dtype())) continue;
    const std::string& name = s.proto->input(int(k));
    if (!constants.count(name)) {
      t = t.to(dev);  // a value computed on the host this call (from Shape, say)
      continue;
    }
    Tensor& cached = device_constants[name];
    if (!cached.defined() || cached.device() != dev) cached = constants.at(name).to(dev);
    t = cached;
  }
}

// A GRAPH attribute: its own inputs, outputs, initialisers and nodes.
class GraphBody final : public Subgraph {
 public:
  GraphBody(const ::onnx::GraphProto& g, std::int64_t opset) {
    prog_.opset = opset;
    prog_.resolve_nodes(g);
    prog_.fuse_conv_relu(g);
    for (auto& t : g.initializer()) prog_.constants[t.name()] = from_proto(t);
    prog_.eval_at_load();
    for (auto& vi : g.input()) inputs_.push_back(vi.name());
    for (auto& vo : g.output()) outputs_.push_back(vo.name());
    prog_.check(g);
  }
  std::vector<Value> run(const std::vector<Value>& inputs, const Scope& outer) const override {
    if (inputs.size() != inputs_.size())
      fail(kWho, "a sub-graph takes ", inputs_.size(), " input(s), got ", inputs.size());
    Env env;
    for (auto& [n, t] : prog_.constants) env[n] = t;
    for (std::size_t i = 0; i < inputs.size(); ++i) env[inputs_[i]] = inputs[i];
    prog_.run(env, &outer, false);
    const Scope scope{&env, &outer};
    std::vector<Value> out;
    for (auto& o : outputs_) {
      const Value* v = scope.find(o);
      if (!v) fail(kWho, "sub-graph output '", o, "' is never computed");
      out.push_back(*v);
    }
    return out;
  }
  std::size_t num_inputs() const override { return inputs_.size(); }
  std::size_t num_outputs() const override { return outputs_.size(); }

 private:
  Program prog_;
  std::vector<std::string> inputs_, outputs_;
};

std::unique_ptr<Subgraph> make_subgraph(const ::onnx::GraphProto& g, std::int64_t opset) {
  return std::make_unique<GraphBody>(g, opset);
}

// ---- the model -----------------------------------------------------------------------------------

class OnnxModel : public nn::Model {
 public:
  OnnxModel(::onnx::ModelProto proto, const LoadOptions& options);
  std::string type_name() const override { return "OnnxModel"; }
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  std::vector<Value> run(const std::vector<Value>& inputs);

  // The graph with each weight's initialiser holding its current value.
  ::onnx::ModelProto with_current_weights() const {
    ::onnx::ModelProto m = proto_;
    std::unordered_map<std::string, Tensor> values;
    for (auto& [n, v] : named_parameters(false)) values[n] = v.value();
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
      const std::string name = t.name();  // to_proto clears t first
      auto it = values.find(name);
      if (it != values.end()) to_proto(it->second, ElemType(t.data_type()), name, t);
    }
    return m;
  }

  void summary(std::ostream& os) const override {
    os << "Model: \"" << name() << "\" (ONNX graph '" << graph().name() << "', opset "
       << prog_.opset << ", " << graph().node_size() << " nodes";
    if (prog_.folded) os << "; " << prog_.folded << " BatchNormalization folded into Conv";
    if (prog_.fused) os << "; " << prog_.fused << " Conv+Relu fused";
    os << ")\n";
    for (auto& i : inputs_) os << "  input  " << i.name << " " << format_dims(i.shape) << "\n";
    for (auto& o : output_names_) os << "  output " << o << "\n";
    print_totals(os);
  }

 protected:
  Tensor forward(const Tensor& x) override { return call({x}).at(0); }

 private:
  struct Input {
    std::string name;
    Shape shape;  // -1 where symbolic or unknown
    DType dtype;
    bool sequence = false;  // a sequence of tensors of dtype (shape unchecked)
    bool optional = false;  // may be empty
  };
  const ::onnx::GraphProto& graph() const { return proto_.graph(); }
  static std::string format_dims(const Shape& s) {
    std::string r = "[";
    for (std::size_t i = 0; i < s.size(); ++i)
      r += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
    return r + "]";
  }

  ::onnx::ModelProto proto_;
  Program prog_;
  std::vector<Input> inputs_;
  std::vector<std::string> output_names_;
};

OnnxModel::OnnxModel(::onnx::ModelProto proto, const LoadOptions& options)
    : proto_(std::move(proto)) {
  for (auto& os : proto_.opset_import())
    if (default_domain(os.domain())) prog_.opset = os.version();
  // A model of only ai.onnx.ml or training operators may import no default opset (0 here).
  const auto& g = graph();
  if (!g.name().empty()) {
    std::string n;
    for (char c : g.name()) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    set_name(n);
  }
  prog_.resolve_nodes(g);
  prog_.fuse_conv_relu(g);
  prog_.eval_at_load();
  // Running statistics (BatchNormalization's) are weights that training leaves alone.
  std::set<std::string> statistics;
  for (auto& s : prog_.steps)
    if (s.op)
      for (int k : s.op->statistics)
        if (k < s.proto->input_size()) statistics.insert(s.proto->input(k));

  std::set<std::string> init_names;
  for (auto& t : g.initializer()) {
    if (t.name().empty()) fail(kWho, "an initializer has no name");
    init_names.insert(t.name());
    Tensor v = from_proto(t);
    if (is_floating(v.dtype())) {
      add_weight(t.name(), v, options.trainable && !statistics.count(t.name()));
    } else {
      prog_.constants[t.name()] = v;
    }
  }
  for (auto& vi : g.input()) {
    if (init_names.count(vi.name())) continue;  // IR < 4 lists initialisers as inputs too
    // A tensor, a sequence of tensors, or an optional of either.
    const ::onnx::TypeProto* type = &vi.type();
    const bool optional = type->has_optional_type();
    if (optional) type = &type->optional_type().elem_type();
    const bool sequence = type->has_sequence_type();
    if (sequence) type = &type->sequence_type().elem_type();
    if (!type->has_tensor_type())
      fail(kWho, "graph input '", vi.name(), "' is not a tensor, a sequence of tensors or an "
           "optional of either");
    const auto& tt = type->tensor_type();
    Input in{vi.name(), {}, soma_dtype(tt.elem_type(), "graph input '" + vi.name() + "'"),
             sequence, optional};
    if (tt.has_shape() && !sequence)
      for (auto& d : tt.shape().dim()) in.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    else
      in.shape = {};  // unknown rank
    inputs_.push_back(in);
  }
  prog_.check(g);
  for (auto& vo : g.output()) output_names_.push_back(vo.name());
  if (output_names_.empty()) fail(kWho, "the graph has no outputs");
}

std::vector<Tensor> OnnxModel::call(const std::vector<Tensor>& inputs) {
  std::vector<Value> outs = run({inputs.begin(), inputs.end()});
  std::vector<Tensor> t;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].is_tensor())
      fail(type_name(), "model '", name(), "': output '", output_names_[i], "' is ",
           outs[i].is_sequence() ? "a sequence" : "an empty optional",
           "; run the model with soma::onnx::run");
    t.push_back(outs[i].tensor);
  }
  return t;
}

std::vector<Value> OnnxModel::run(const std::vector<Value>& inputs) {
  if (inputs.size() != inputs_.size())
    fail(type_name(), "model '", name(), "' takes ", inputs_.size(), " input(s) (", [&] {
      std::string s;
      for (auto& i : inputs_) s += (s.empty() ? "" : ", ") + i.name;
      return s;
    }(), "), got ", inputs.size());
  Env env;
  for (auto& [n, t] : prog_.constants) env[n] = t;
  for (auto& [n, v] : named_parameters(false)) env[n] = v.value();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Input& want = inputs_[i];
    Value v = inputs[i];
    if (v.kind == Value::Kind::none) {
      if (!want.optional) fail(type_name(), "input '", want.name, "' is undefined");
    } else if (v.is_sequence() != want.sequence) {
      fail(type_name(), "model '", name(), "': input '", want.name, "' expects ",
           want.sequence ? "a sequence" : "a tensor", ", got ", v.is_sequence() ? "a sequence" : "a tensor");
    } else if (v.is_sequence()) {
      for (auto& t : v.items)
        if (t.dtype() != want.dtype) t = cast(t, want.dtype);
    } else {
      Tensor& x = v.tensor;
      bool ok = want.shape.empty() || x.rank() == std::int64_t(want.shape.size());
      for (std::size_t d = 0; ok && d < want.shape.size(); ++d)
        ok = want.shape[d] < 0 || want.shape[d] == x.shape()[d];
      if (!ok)
        fail(type_name(), "model '", name(), "': input '", want.name, "' expects shape ",
             format_dims(want.shape), ", got ", shape_str(x.shape()));
      if (x.dtype() != want.dtype) x = cast(x, want.dtype);
    }
    env[want.name] = v;
  }
  prog_.run(env, nullptr, training());
  std::vector<Value> outs;
  for (auto& o : output_names_) {
    auto it = env.find(o);
    if (it == env.end()) fail(kWho, "graph output '", o, "' is never computed");
    outs.push_back(it->second);
  }
  return outs;
}

std::shared_ptr<nn::Model> build(::onnx::ModelProto proto, const LoadOptions& options) {
  return std::make_shared<OnnxModel>(std::move(proto), options);
}

}  // namespace
}  // namespace soma::onnx

namespace soma::onnx {
namespace {
// The model as load() made it, or nullptr.
OnnxModel* imported(const nn::Model& model) {
  return dynamic_cast<OnnxModel*>(const_cast<nn::Model*>(&model));
}
}  // namespace
}  // namespace soma::onnx

namespace soma::onnx_detail {
bool export_imported(const nn::Model& model, ::onnx::ModelProto& out) {
  auto* m = soma::onnx::imported(model);
  if (!m) return false;
  out = m->with_current_weights();
  return true;
}
}  // namespace soma::onnx_detail

namespace soma::onnx {

std::vector<Value> run(nn::Model& model, const std::vector<Value>& inputs) {
  auto* m = imported(model);
  if (!m) fail(kWho, "soma::onnx::run takes a model made by soma::onnx::load");
  return m->run(inputs);
}

std::shared_ptr<nn::Model> load_from_bytes(const std::string& bytes, const LoadOptions& options) {
  ::onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) fail(kWho, "the data is not an ONNX model (protobuf parse failed)");
  return build(std::move(m), options);
}

std::vector<Shape> input_shapes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(kWho, "cannot open '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  ::onnx::ModelProto m;
  if (!m.ParseFromString(ss.str()))
    fail(kWho, "'", path, "' is not an ONNX model (protobuf parse failed)");
  std::set<std::string> inits;
  for (auto& t : m.graph().initializer()) inits.insert(t.name());
  std::vector<Shape> out;
  for (auto& vi : m.graph().input()) {
    if (inits.count(vi.name())) continue;  // IR < 4 lists initialisers as inputs too
    Shape s;
    if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
      for (auto& d : vi.type().tensor_type().shape().dim())
        s.push_back(d.has_dim_value() ? d.dim_value() : -1);
    out.push_back(s);
  }
  return out;
}

std::shared_ptr<nn::Model> load(const std::string& path, const LoadOptions& options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(kWho, "cannot open '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  ::onnx::ModelProto m;
  if (!m.ParseFromString(ss.str()))
    fail(kWho, "'", path, "' is not an ONNX model (protobuf parse failed)");
  // External-data initialisers are read relative to the model file's folder.
  ExternalDataFolder folder(std::filesystem::absolute(path).parent_path().string());
  inline_external_attributes(*m.mutable_graph());
  return build(std::move(m), options);
}

#endif  // SOMA_HAS_ONNX

}  // namespace soma::onnx
