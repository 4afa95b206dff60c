// Convolution and pooling op definitions and their public functions.
//
// Ops (attrs: "strides" {sh, sw}, "pads" {top, bottom, left, right} — padding is resolved to
// explicit amounts before an op is called — "dilation" {dh, dw}, "groups"; pools: "pool"):
//   conv2d(x, w)                        -> y
//   conv2d_bias_act(x, w [, b])         -> act(conv2d(x, w) + b)  (attr "relu": 0 or 1)
//   conv2d_backprop_input(g, w)         -> dx   (attr "input_shape")
//   conv2d_backprop_filter(x, g)        -> dw   (attr "filter_shape")
//   max_pool2d(x) / max_pool2d_grad(x, g) / max_pool2d_grad_grad(x, h)
//   avg_pool2d(x) / avg_pool2d_grad(g)  (attr "input_shape"; both: "count_include_pad" 0 or 1)
//   max_pool2d_with_indices(x)          -> y, indices (i64 offsets within each [H, W] plane)
//   max_unpool2d(x, indices)            -> y  (attr "output_size" [N, C, H, W])
// The three convolution ops are bilinear and their gradients are written with one another (as
// TensorFlow does), so every order of derivative is available. The pooling gradients close the
// same way: max_pool2d_grad and max_pool2d_grad_grad are each other's gradient with respect to
// the incoming gradient (their gradient with respect to x is zero almost everywhere), and
// avg_pool2d / avg_pool2d_grad are each other's adjoint.
#include <algorithm>
#include <cctype>

#include "internal/registration.hpp"
#include "internal/conv3d_op.hpp"
#include "references.hpp"
#include "internal/conv_bias_act.hpp"
#include "internal/relu_gradient.hpp"
#include "soma/nn_ops.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

// ---- Padding ----------------------------------------------------------------------------------
Padding::Padding(const char* mode) : Padding(std::string(mode ? mode : "")) {}

Padding::Padding(const std::string& mode) {
  std::string m = mode;
  for (char& ch : m) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  struct ModeName {
    const char* name;
    Mode mode;
  };
  static constexpr ModeName kModes[] = {{"valid", Mode::valid}, {"same", Mode::same}};
  for (const auto& e : kModes)
    if (m == e.name) {
      mode_ = e.mode;
      return;
    }
  fail("padding", "unknown padding '", mode,
       "' (expected \"valid\", \"same\" or explicit amounts {top, bottom, left, right})");
}

Padding::Padding(std::int64_t p) : Padding(p, p, p, p) {}
Padding::Padding(std::int64_t v, std::int64_t h) : Padding(v, v, h, h) {}
Padding::Padding(std::int64_t t, std::int64_t b, std::int64_t l, std::int64_t r)
    : mode_(Mode::explicit_), pads_{t, b, l, r} {
  if (t < 0 || b < 0 || l < 0 || r < 0)
    fail("padding", "explicit amounts must be >= 0, got ", str());
}

std::string Padding::str() const {
  if (mode_ == Mode::valid) return "valid";
  if (mode_ == Mode::same) return "same";
  return shape_str(Shape(pads_.begin(), pads_.end()));
}

namespace {

using G = const GradContext&;
using Ints = std::vector<std::int64_t>;

std::string pair_str(std::int64_t a, std::int64_t b) { return shape_str({a, b}); }

void check_pair(const char* op, const char* what, Size2 v) {
  if (v.h < 1 || v.w < 1)
    fail(op, what, " must be positive, got ", pair_str(v.h, v.w));
}

// TensorFlow's "same": output = ceil(n / s); the total padding that needs, the odd one after.
std::pair<std::int64_t, std::int64_t> same_pads(std::int64_t n, std::int64_t k, std::int64_t s,
                                                std::int64_t d) {
  const std::int64_t out = (n + s - 1) / s;
  const std::int64_t total = std::max<std::int64_t>((out - 1) * s + (k - 1) * d + 1 - n, 0);
  return {total / 2, total - total / 2};
}

Ints resolve_pads(const char* op, const Padding& p, std::int64_t h, std::int64_t w, Size2 k,
                  Size2 s, Size2 d) {
  check_pair(op, "strides", s);
  check_pair(op, "dilation", d);
  switch (p.mode()) {
    case Padding::Mode::valid: return {0, 0, 0, 0};
    case Padding::Mode::explicit_: return Ints(p.pads().begin(), p.pads().end());
    case Padding::Mode::same: {
      auto [t, b] = same_pads(h, k.h, s.h, d.h);
      auto [l, r] = same_pads(w, k.w, s.w, d.w);
      return {t, b, l, r};
    }
  }
  return {0, 0, 0, 0};
}

// ---- geometry and its checks (shared by infer rules and public functions) ----
struct ConvGeom {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
};

std::string pads_str(const Ints& p) { return shape_str(p); }

void check_rank4(const char* op, const Shape& s, const char* what, const char* layout) {
  if (s.size() != 4)
    fail(op, what, " must be 4-d ", layout, ", got shape ", shape_str(s));
}

void check_attr_lists(const char* op, const Ints& st, const Ints& pads, const Ints& dil) {
  if (st.size() != 2 || dil.size() != 2 || pads.size() != 4)
    fail(op, "attrs need strides and dilation {h, w} and pads {top, bottom, left, right}");
  check_pair(op, "strides", {st[0], st[1]});
  check_pair(op, "dilation", {dil[0], dil[1]});
  for (auto p : pads)
    if (p < 0) fail(op, "padding must be >= 0, got ", pads_str(pads));
}

ConvGeom conv_geometry(const char* op, const Shape& x, const Shape& w, const Ints& st,
                       const Ints& pads, const Ints& dil, std::int64_t groups) {
  check_rank4(op, x, "input", "[N, C, H, W]");
  check_rank4(op, w, "kernel", "[O, C/groups, KH, KW]");
  check_attr_lists(op, st, pads, dil);
  // Formatted only for a message: every convolution call passes here (twice).
  auto both = [&] { return "input " + shape_str(x) + ", kernel " + shape_str(w); };
  if (groups < 1) fail(op, "groups must be >= 1, got ", groups, " (", both(), ")");
  ConvGeom g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0};
  if (g.kh < 1 || g.kw < 1) fail(op, "kernel has an empty window (", both(), ")");
  if (g.c % groups != 0)
    fail(op, "groups=", groups, " does not divide the input's ", g.c, " channels (", both(), ")");
  if (g.o % groups != 0)
    fail(op, "groups=", groups, " does not divide the kernel's ", g.o, " output channels (",
         both(), ")");
  if (w[1] * groups != g.c)
    fail(op, "channel mismatch: ", both(), ", groups=", groups, ": the input has ", g.c,
         " channels, so kernel dim 1 must be C/groups = ", g.c / groups, ", got ", w[1]);
  const std::int64_t ekh = (g.kh - 1) * dil[0] + 1, ekw = (g.kw - 1) * dil[1] + 1;
  const std::int64_t ph = g.h + pads[0] + pads[1], pw = g.w + pads[2] + pads[3];
  if (ekh > ph || ekw > pw)
    fail(op, "kernel window ", ekh, "x", ekw, " (", g.kh, "x", g.kw, " with dilation ",
         pair_str(dil[0], dil[1]), ") is larger than the padded input ", ph, "x", pw, " (", both(),
         ", padding ", pads_str(pads), ")");
  g.oh = 1 + (ph - ekh) / st[0];
  g.ow = 1 + (pw - ekw) / st[1];
  return g;
}

struct PoolGeom {
  std::int64_t n, c, h, w, oh, ow;
};

PoolGeom pool_geometry(const char* op, const Shape& x, const Ints& pool, const Ints& st,
                       const Ints& pads) {
  check_rank4(op, x, "input", "[N, C, H, W]");
  if (pool.size() != 2) fail(op, "attr pool must be {h, w}");
  check_pair(op, "pool_size", {pool[0], pool[1]});
  check_attr_lists(op, st, pads, {1, 1});
  // A window made only of padding has no maximum and no elements to average. Padding smaller
  // than the window puts a real element in every window, as long as H and W are not empty
  // (PyTorch refuses empty H, W too; an empty batch or channel dim gives an empty output).
  if (x[2] == 0 || x[3] == 0)
    fail(op, "input ", shape_str(x), " has an empty spatial dim: every pool window (", pool[0],
         "x", pool[1], ", padding ", pads_str(pads), ") would hold only padding");
  if (pads[0] >= pool[0] || pads[1] >= pool[0] || pads[2] >= pool[1] || pads[3] >= pool[1])
    fail(op, "padding ", pads_str(pads), " must be smaller than the pool size ",
         pair_str(pool[0], pool[1]));
  const std::int64_t ph = x[2] + pads[0] + pads[1], pw = x[3] + pads[2] + pads[3];
  if (pool[0] > ph || pool[1] > pw)
    fail(op, "pool window ", pool[0], "x", pool[1], " is larger than the padded input ", ph, "x",
         pw, " (input ", shape_str(x), ", padding ", pads_str(pads), ")");
  return {x[0], x[1], x[2], x[3], 1 + (ph - pool[0]) / st[0], 1 + (pw - pool[1]) / st[1]};
}

void check_float(const char* op, DType t) {
  if (!is_floating(t))
    fail(op, "dtype ", dtype_name(t), " is not supported (expected f32, f64, f16 or bf16)");
}
void check_same_float(const char* op, DType a, DType b) {
  if (a != b) fail(op, "dtypes differ: ", dtype_name(a), " and ", dtype_name(b));
  check_float(op, a);
}

// ---- attrs ----
Attrs conv_attrs(const Ints& st, const Ints& pads, const Ints& dil, std::int64_t groups) {
  return {{"strides", st}, {"pads", pads}, {"dilation", dil}, {"groups", groups}};
}
Attrs conv_attrs(const Attrs& a) {
  return conv_attrs(a.ints("strides"), a.ints("pads"), a.ints("dilation"), a.i("groups"));
}
ConvGeom geometry_of(const char* op, const Shape& x, const Shape& w, const Attrs& a) {
  return conv_geometry(op, x, w, a.ints("strides"), a.ints("pads"), a.ints("dilation"),
                       a.i("groups"));
}
Attrs pool_attrs(const Ints& pool, const Ints& st, const Ints& pads) {
  return {{"pool", pool}, {"strides", st}, {"pads", pads}};
}
Attrs pool_attrs(const Attrs& a) {
  return pool_attrs(a.ints("pool"), a.ints("strides"), a.ints("pads"));
}
PoolGeom pool_geometry_of(const char* op, const Shape& x, const Attrs& a) {
  return pool_geometry(op, x, a.ints("pool"), a.ints("strides"), a.ints("pads"));
}

const OpDef& op(const char* name) { return get_op(name); }

Tensor call_conv2d(const Tensor& x, const Tensor& w, const Attrs& a) {
  static const OpDef& d = op("conv2d");
  return call_op1(d, {x, w}, conv_attrs(a));
}
Tensor call_backprop_input(const Tensor& g, const Tensor& w, const Shape& input_shape,
                           const Attrs& a) {
  static const OpDef& d = op("conv2d_backprop_input");
  return call_op1(d, {g, w}, conv_attrs(a).set("input_shape", Ints(input_shape)));
}
Tensor call_backprop_filter(const Tensor& x, const Tensor& g, const Shape& filter_shape,
                            const Attrs& a) {
  static const OpDef& d = op("conv2d_backprop_filter");
  return call_op1(d, {x, g}, conv_attrs(a).set("filter_shape", Ints(filter_shape)));
}

// ---- conv2d ----
std::vector<TensorSpec> conv2d_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  check_same_float("conv2d", in[0].dtype, in[1].dtype);
  ConvGeom g = geometry_of("conv2d", in[0].shape, in[1].shape, a);
  return {{{g.n, g.o, g.oh, g.ow}, in[0].dtype}};
}
std::vector<Tensor> conv2d_grad(G c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  // The first layer's input (the data) needs no gradient: skip its backprop-input.
  return {c.needs(0) ? call_backprop_input(g, w, x.shape(), c.attrs) : Tensor(),
          c.needs(1) ? call_backprop_filter(x, g, w.shape(), c.attrs) : Tensor()};
}

// ---- conv2d_bias_act(x, w [, b]) -> act(conv2d(x, w) + b), attr "relu" (0: linear) ----
// Conv2D's forward in one op (issue 5: the bias add and the ReLU were separate passes over the
// activation, 4% of a LeNet training step). Gradients are the separate ops' gradients: ReLU's
// mask read from the output (y > 0 exactly where conv + b > 0), the bias gradient summed over
// batch and pixels.
std::vector<TensorSpec> conv2d_bias_act_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* name = "conv2d_bias_act";
  if (in.size() != 2 && in.size() != 3)
    fail(name, "expected 2 or 3 inputs (x, kernel [, bias]), got ", in.size());
  check_same_float(name, in[0].dtype, in[1].dtype);
  ConvGeom g = geometry_of(name, in[0].shape, in[1].shape, a);
  if (in.size() == 3) {
    check_same_float(name, in[0].dtype, in[2].dtype);
    if (in[2].shape != Shape{g.o})
      fail(name, "bias of shape ", shape_str(in[2].shape), " does not match the kernel's ", g.o,
           " output channels (kernel ", shape_str(in[1].shape), "): expected [", g.o, "]");
  }
  return {{{g.n, g.o, g.oh, g.ow}, in[0].dtype}};
}
std::vector<Tensor> conv2d_bias_act_grad(G c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &y = c.outputs[0];
  const Tensor g = c.attrs.i("relu") != 0 ? detail::relu_gradient(y, c.grads[0]) : c.grads[0];
  std::vector<Tensor> out(c.inputs.size());
  if (c.needs(0)) out[0] = call_backprop_input(g, w, x.shape(), c.attrs);
  if (c.needs(1)) out[1] = call_backprop_filter(x, g, w.shape(), c.attrs);
  if (c.inputs.size() == 3 && c.needs(2)) out[2] = sum(g, {0, 2, 3});
  return out;
}

// ---- conv2d_backprop_input(g, w) -> dx ----
std::vector<TensorSpec> backprop_input_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* name = "conv2d_backprop_input";
  check_same_float(name, in[0].dtype, in[1].dtype);
  const Shape xs = a.ints("input_shape");
  ConvGeom g = geometry_of(name, xs, in[1].shape, a);
  const Shape want{g.n, g.o, g.oh, g.ow};
  if (in[0].shape != want)
    fail(name, "gradient shape ", shape_str(in[0].shape), " does not match the convolution's output ",
         shape_str(want), " (input ", shape_str(xs), ", kernel ", shape_str(in[1].shape), ")");
  return {{xs, in[0].dtype}};
}
// dx = B(g, w) is bilinear: <B(g, w), h> = <g, conv2d(h, w)> and, as a function of w,
// <g, conv2d(h, w)> has gradient conv2d_backprop_filter(h, g).
std::vector<Tensor> backprop_input_grad(G c) {
  const Tensor &g = c.inputs[0], &w = c.inputs[1], &h = c.grads[0];
  return {c.needs(0) ? call_conv2d(h, w, c.attrs) : Tensor(),
          c.needs(1) ? call_backprop_filter(h, g, w.shape(), c.attrs) : Tensor()};
}

// ---- conv2d_backprop_filter(x, g) -> dw ----
std::vector<TensorSpec> backprop_filter_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* name = "conv2d_backprop_filter";
  check_same_float(name, in[0].dtype, in[1].dtype);
  const Shape ws = a.ints("filter_shape");
  ConvGeom g = geometry_of(name, in[0].shape, ws, a);
  const Shape want{g.n, g.o, g.oh, g.ow};
  if (in[1].shape != want)
    fail(name, "gradient shape ", shape_str(in[1].shape), " does not match the convolution's output ",
         shape_str(want), " (input ", shape_str(in[0].shape), ", kernel ", shape_str(ws), ")");
  return {{ws, in[0].dtype}};
}
// <F(x, g), v> = <g, conv2d(x, v)>: gradient in x is conv2d_backprop_input(g, v), in g conv2d(x, v).
std::vector<Tensor> backprop_filter_grad(G c) {
  const Tensor &x = c.inputs[0], &g = c.inputs[1], &v = c.grads[0];
  return {c.needs(0) ? call_backprop_input(g, v, x.shape(), c.attrs) : Tensor(),
          c.needs(1) ? call_conv2d(x, v, c.attrs) : Tensor()};
}

// ---- pooling ----
Tensor call_max_pool_grad(const Tensor& x, const Tensor& g, const Attrs& a) {
  static const OpDef& d = op("max_pool2d_grad");
  return call_op1(d, {x, g}, pool_attrs(a));
}
Tensor call_max_pool_grad_grad(const Tensor& x, const Tensor& h, const Attrs& a) {
  static const OpDef& d = op("max_pool2d_grad_grad");
  return call_op1(d, {x, h}, pool_attrs(a));
}
// Average pooling's attrs: the window's, and count_include_pad where set.
Attrs avg_attrs(const Attrs& a) {
  Attrs out = pool_attrs(a);
  if (a.has("count_include_pad")) out.set("count_include_pad", a.i("count_include_pad"));
  return out;
}
Tensor call_avg_pool(const Tensor& x, const Attrs& a) {
  static const OpDef& d = op("avg_pool2d");
  return call_op1(d, {x}, avg_attrs(a));
}
Tensor call_avg_pool_grad(const Tensor& g, const Shape& input_shape, const Attrs& a) {
  static const OpDef& d = op("avg_pool2d_grad");
  return call_op1(d, {g}, avg_attrs(a).set("input_shape", Ints(input_shape)));
}

void check_pooled(const char* name, const Shape& got, const Shape& x, const PoolGeom& p) {
  const Shape want{p.n, p.c, p.oh, p.ow};
  if (got != want)
    fail(name, "gradient shape ", shape_str(got), " does not match the pooled shape ",
         shape_str(want), " of input ", shape_str(x));
}

std::vector<TensorSpec> pool_infer(const char* name, const std::vector<TensorSpec>& in,
                                   const Attrs& a) {
  check_float(name, in[0].dtype);
  PoolGeom p = pool_geometry_of(name, in[0].shape, a);
  return {{{p.n, p.c, p.oh, p.ow}, in[0].dtype}};
}
std::vector<TensorSpec> max_pool_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  return pool_infer("max_pool2d", in, a);
}
std::vector<TensorSpec> avg_pool_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  return pool_infer("avg_pool2d", in, a);
}
std::vector<Tensor> max_pool_grad_fn(G c) {
  return {call_max_pool_grad(c.inputs[0], c.grads[0], c.attrs)};
}
std::vector<Tensor> avg_pool_grad_fn(G c) {
  return {call_avg_pool_grad(c.grads[0], c.inputs[0].shape(), c.attrs)};
}

// max_pool2d_grad(x, g) -> dx shaped like x.
std::vector<TensorSpec> max_pool_grad_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* name = "max_pool2d_grad";
  check_same_float(name, in[0].dtype, in[1].dtype);
  check_pooled(name, in[1].shape, in[0].shape, pool_geometry_of(name, in[0].shape, a));
  return {{in[0].shape, in[0].dtype}};
}
std::vector<Tensor> max_pool_grad_grad_fn(G c) {
  return {Tensor(), call_max_pool_grad_grad(c.inputs[0], c.grads[0], c.attrs)};
}
// max_pool2d_grad_grad(x, h) -> h read at each window's argmax, shaped like the pooled output.
std::vector<TensorSpec> max_pool_grad_grad_infer(const std::vector<TensorSpec>& in,
                                                 const Attrs& a) {
  const char* name = "max_pool2d_grad_grad";
  check_same_float(name, in[0].dtype, in[1].dtype);
  if (in[1].shape != in[0].shape)
    fail(name, "shapes differ: ", shape_str(in[0].shape), " and ", shape_str(in[1].shape));
  PoolGeom p = pool_geometry_of(name, in[0].shape, a);
  return {{{p.n, p.c, p.oh, p.ow}, in[0].dtype}};
}
std::vector<Tensor> max_pool_grad_grad_grad_fn(G c) {
  return {Tensor(), call_max_pool_grad(c.inputs[0], c.grads[0], c.attrs)};
}

// avg_pool2d_grad(g) -> dx of shape attr input_shape.
std::vector<TensorSpec> avg_pool_grad_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* name = "avg_pool2d_grad";
  check_float(name, in[0].dtype);
  const Shape xs = a.ints("input_shape");
  check_pooled(name, in[0].shape, xs, pool_geometry_of(name, xs, a));
  return {{xs, in[0].dtype}};
}
std::vector<Tensor> avg_pool_grad_grad_fn(G c) { return {call_avg_pool(c.grads[0], c.attrs)}; }

// max_pool2d_with_indices(x) -> (y, indices): y's gradient goes to each window's first maximum
// (the offset `indices` holds), as max_pool2d's; the indices carry none.
std::vector<TensorSpec> max_pool_indices_infer(const std::vector<TensorSpec>& in,
                                               const Attrs& a) {
  auto out = pool_infer("max_pool2d_with_indices", in, a);
  out.push_back({out[0].shape, DType::i64});
  return out;
}
std::vector<Tensor> max_pool_indices_grad_fn(G c) {
  if (!c.grads[0].defined()) return {Tensor()};
  return {call_max_pool_grad(c.inputs[0], c.grads[0], c.attrs)};
}

// max_unpool2d(x, indices) -> zeros of attr output_size [N, C, H, W], x written at its plane
// offsets; the gradient reads g back at them (a gather along the flattened planes).
std::vector<TensorSpec> max_unpool_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* name = "max_unpool2d";
  check_float(name, in[0].dtype);
  check_rank4(name, in[0].shape, "input", "[N, C, H, W]");
  if (in[1].dtype != DType::i64)
    fail(name, "indices must be i64, got ", dtype_name(in[1].dtype));
  if (in[1].shape != in[0].shape)
    fail(name, "indices ", shape_str(in[1].shape), " must have the input's shape ",
         shape_str(in[0].shape));
  const Shape os = a.ints("output_size");
  if (os.size() != 4 || os[0] != in[0].shape[0] || os[1] != in[0].shape[1] || os[2] < 0 ||
      os[3] < 0)
    fail(name, "output_size ", shape_str(os), " must be [N, C, H, W] with the input's N and C (",
         "input ", shape_str(in[0].shape), ")");
  if (numel(in[0].shape) != 0 && os[2] * os[3] == 0)
    fail(name, "output_size ", shape_str(os), " has empty planes but the input ",
         shape_str(in[0].shape), " does not");
  return {{os, in[0].dtype}};
}
std::vector<Tensor> max_unpool_grad_fn(G c) {
  const Shape& xs = c.inputs[0].shape();
  const Shape& os = c.grads[0].shape();
  const Tensor g = reshape(c.grads[0], {os[0], os[1], os[2] * os[3]});
  const Tensor idx = reshape(c.inputs[1], {xs[0], xs[1], xs[2] * xs[3]});
  return {reshape(take_along_axis(g, idx, 2), xs), Tensor()};
}

// ---- public-function helpers ----
void check_defined(const char* name, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!t->defined()) fail(name, "an input is an undefined Tensor");
}

Ints pair_ints(Size2 v) { return {v.h, v.w}; }

// Ranks and pair arguments checked before padding is resolved (it reads H, W, KH, KW).
Attrs public_conv_attrs(const char* name, const Shape& x, const Shape& w, Size2 strides,
                        const Padding& padding, Size2 dilation, std::int64_t groups) {
  check_rank4(name, x, "input", "[N, C, H, W]");
  check_rank4(name, w, "kernel", "[O, C/groups, KH, KW]");
  Ints pads = resolve_pads(name, padding, x[2], x[3], {w[2], w[3]}, strides, dilation);
  Attrs a = conv_attrs(pair_ints(strides), pads, pair_ints(dilation), groups);
  geometry_of(name, x, w, a);
  return a;
}

Attrs public_pool_attrs(const char* name, const Shape& x, Size2 pool,
                        std::optional<Size2> strides, const Padding& padding) {
  check_rank4(name, x, "input", "[N, C, H, W]");
  check_pair(name, "pool_size", pool);
  const Size2 st = strides.value_or(pool);
  Ints pads = resolve_pads(name, padding, x[2], x[3], pool, st, 1);
  Attrs a = pool_attrs(pair_ints(pool), pair_ints(st), pads);
  pool_geometry_of(name, x, a);
  return a;
}

}  // namespace

namespace detail {
void register_nn_ops() {
  register_conv3d_ops();  // src/ops/conv3d.cpp
  // Test samples: a grouped, strided, dilated, asymmetrically padded convolution (output
  // [2, 6, 2, 3]) and overlapping, padded pooling windows (output [2, 3, 3, 3]).
  const Attrs conv = {{"strides", Ints{2, 1}}, {"pads", Ints{1, 0, 1, 1}},
                      {"dilation", Ints{1, 2}}, {"groups", std::int64_t(2)}};
  const Shape cx{2, 4, 5, 5}, cw{6, 2, 3, 3}, cy{2, 6, 2, 3};
  const Attrs pool = {{"pool", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 0, 1}}};
  const Shape px{2, 3, 5, 5}, py{2, 3, 3, 3};
  register_op({.name = "conv2d", .num_inputs = 2, .infer = conv2d_infer, .grad = conv2d_grad,
               .tags = kFloatOnly | kAutocastLow,
               .test = {.shapes = {cx, cw}, .attrs = conv, .reference = ref::conv2d}});
  // (x, w[, bias]): the bias is optional (Conv2D without use_bias).
  register_op({.name = "conv2d_bias_act", .num_inputs = -1, .infer = conv2d_bias_act_infer,
               .grad = conv2d_bias_act_grad, .tags = kFloatOnly | kAutocastLow,
               .test = {.shapes = {{2, 2, 4, 4}, {3, 2, 3, 3}, {3}},
                        .attrs = {{"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}},
                                  {"dilation", Ints{1, 1}}, {"groups", std::int64_t(1)},
                                  {"relu", std::int64_t(1)}},
                        .reference = ref::conv2d_bias_act}});
  register_op({.name = "conv2d_backprop_input", .num_inputs = 2, .infer = backprop_input_infer,
               .grad = backprop_input_grad, .tags = kFloatOnly | kAutocastLow,
               .test = {.shapes = {cy, cw}, .attrs = Attrs(conv).set("input_shape", Ints(cx)),
                        .reference = ref::conv2d_backprop_input}});
  register_op({.name = "conv2d_backprop_filter", .num_inputs = 2, .infer = backprop_filter_infer,
               .grad = backprop_filter_grad, .tags = kFloatOnly | kAutocastLow,
               .test = {.shapes = {cx, cy}, .attrs = Attrs(conv).set("filter_shape", Ints(cw)),
                        .reference = ref::conv2d_backprop_filter}});
  register_op({.name = "max_pool2d", .num_inputs = 1, .infer = max_pool_infer,
               .grad = max_pool_grad_fn, .tags = kFloatOnly,
               .test = {.shapes = {px}, .attrs = pool, .reference = ref::max_pool2d}});
  register_op({.name = "max_pool2d_grad", .num_inputs = 2, .infer = max_pool_grad_infer,
               .grad = max_pool_grad_grad_fn, .tags = kFloatOnly,
               .test = {.shapes = {px, py}, .attrs = pool, .reference = ref::max_pool2d_grad}});
  register_op({.name = "max_pool2d_grad_grad", .num_inputs = 2,
               .infer = max_pool_grad_grad_infer, .grad = max_pool_grad_grad_grad_fn,
               .tags = kFloatOnly,
               .test = {.shapes = {px, px}, .attrs = pool,
                        .reference = ref::max_pool2d_grad_grad}});
  register_op({.name = "avg_pool2d", .num_inputs = 1, .infer = avg_pool_infer,
               .grad = avg_pool_grad_fn, .tags = kFloatOnly,
               .test = {.shapes = {px}, .attrs = pool, .reference = ref::avg_pool2d}});
  // avg_pool2d's sample divides by the real elements, avg_pool2d_grad's by the whole window:
  // each checks the other's mode through the gradient (they are each other's adjoint).
  register_op({.name = "avg_pool2d_grad", .num_inputs = 1, .infer = avg_pool_grad_infer,
               .grad = avg_pool_grad_grad_fn, .tags = kFloatOnly,
               .test = {.shapes = {py},
                        .attrs = Attrs(pool)
                                     .set("input_shape", Ints(px))
                                     .set("count_include_pad", std::int64_t(1)),
                        .reference = ref::avg_pool2d_grad}});
  register_op({.name = "max_pool2d_with_indices", .num_inputs = 1,
               .infer = max_pool_indices_infer, .grad = max_pool_indices_grad_fn,
               .tags = kFloatOnly,
               .test = {.shapes = {px}, .attrs = pool,
                        .reference = ref::max_pool2d_with_indices}});
  // One element per plane, so the random indices never collide (a collision keeps the last
  // write, whose gradient finite differences would see but a gather does not).
  register_op({.name = "max_unpool2d", .num_inputs = 2, .infer = max_unpool_infer,
               .grad = max_unpool_grad_fn, .tags = kFloatOnly,
               .test = {.shapes = {{2, 3, 1, 1}, {2, 3, 1, 1}},
                        .attrs = {{"output_size", Ints{2, 3, 2, 3}}},
                        .reference = ref::max_unpool2d,
                        .fixed_inputs = {{.input = 1, .dtype = DType::i64, .lo = 0, .hi = 5}}}});
}
}  // namespace detail

// ---- public functions -------------------------------------------------------------------------
std::array<std::int64_t, 4> resolve_padding(const Padding& padding, std::int64_t h,
                                            std::int64_t w, Size2 kernel, Size2 strides,
                                            Size2 dilation) {
  Ints p = resolve_pads("resolve_padding", padding, h, w, kernel, strides, dilation);
  return {p[0], p[1], p[2], p[3]};
}

namespace detail {
Tensor conv2d_bias_act(const Tensor& x, const Tensor& w, const Tensor& b, Size2 strides,
                       const Padding& padding, Size2 dilation, std::int64_t groups, bool relu) {
  static const OpDef& d = get_op("conv2d_bias_act");
  check_defined("conv2d_bias_act", {&x, &w});
  Attrs a = public_conv_attrs("conv2d_bias_act", x.shape(), w.shape(), strides, padding, dilation,
                              groups);
  a.set("relu", std::int64_t(relu ? 1 : 0));
  if (!b.defined()) return call_op1(d, {x, w}, a);
  return call_op1(d, {x, w, b}, a);
}
}  // namespace detail

Shape conv2d_output_shape(const Shape& x, const Shape& w, Size2 strides, const Padding& padding,
                          Size2 dilation, std::int64_t groups) {
  Attrs a = public_conv_attrs("conv2d", x, w, strides, padding, dilation, groups);
  ConvGeom g = geometry_of("conv2d", x, w, a);
  return {g.n, g.o, g.oh, g.ow};
}

Tensor conv2d(const Tensor& x, const Tensor& w, Size2 strides, const Padding& padding,
              Size2 dilation, std::int64_t groups) {
  static const OpDef& d = get_op("conv2d");
  check_defined("conv2d", {&x, &w});
  Attrs a = public_conv_attrs("conv2d", x.shape(), w.shape(), strides, padding, dilation, groups);
  const DType t = promote_types(x.dtype(), w.dtype());
  check_float("conv2d", t);
  return call_op1(d, {cast(x, t), cast(w, t)}, a);
}

// The height-1 image's padding: none above and below, the explicit left/right amounts.
static Padding conv1d_padding(const Padding& p) {
  if (p.mode() != Padding::Mode::explicit_) return p;
  return Padding(0, 0, p.pads()[2], p.pads()[3]);
}

Tensor conv1d(const Tensor& x, const Tensor& w, std::int64_t stride, const Padding& padding,
              std::int64_t dilation, std::int64_t groups) {
  check_defined("conv1d", {&x, &w});
  if (x.rank() != 3 || w.rank() != 3)
    fail("conv1d", "expected x [batch, channels, width] and w [out, in/groups, kernel], got ",
         shape_str(x.shape()), " and ", shape_str(w.shape()));
  Tensor y = conv2d(expand_dims(x, 2), expand_dims(w, 2), Size2(1, stride),
                    conv1d_padding(padding), Size2(1, dilation), groups);
  return squeeze(y, {2});
}

// conv3d: src/ops/conv3d.cpp

Tensor conv2d_backprop_input(const Tensor& g, const Tensor& w, const Shape& input_shape,
                             Size2 strides, const Padding& padding, Size2 dilation,
                             std::int64_t groups) {
  const char* name = "conv2d_backprop_input";
  check_defined(name, {&g, &w});
  Attrs a = public_conv_attrs(name, input_shape, w.shape(), strides, padding, dilation, groups);
  const DType t = promote_types(g.dtype(), w.dtype());
  check_float(name, t);
  return call_backprop_input(cast(g, t), cast(w, t), input_shape, a);
}

Tensor conv2d_backprop_filter(const Tensor& x, const Tensor& g, const Shape& filter_shape,
                              Size2 strides, const Padding& padding, Size2 dilation,
                              std::int64_t groups) {
  const char* name = "conv2d_backprop_filter";
  check_defined(name, {&x, &g});
  Attrs a = public_conv_attrs(name, x.shape(), filter_shape, strides, padding, dilation, groups);
  const DType t = promote_types(x.dtype(), g.dtype());
  check_float(name, t);
  return call_backprop_filter(cast(x, t), cast(g, t), filter_shape, a);
}

Tensor conv2d_transpose(const Tensor& x, const Tensor& w, Size2 strides, const Padding& padding,
                        std::optional<Size2> output_padding, Size2 dilation,
                        std::int64_t groups) {
  const char* name = "conv2d_transpose";
  check_defined(name, {&x, &w});
  check_rank4(name, x.shape(), "input", "[N, C_in, H, W]");
  check_rank4(name, w.shape(), "kernel", "[C_in, C_out/groups, KH, KW]");
  check_pair(name, "strides", strides);
  check_pair(name, "dilation", dilation);
  if (groups < 1) fail(name, "groups must be >= 1, got ", groups);
  if (w.dim(0) != x.dim(1))
    fail(name, "channel mismatch: input ", shape_str(x.shape()), " has ", x.dim(1),
         " channels but kernel ", shape_str(w.shape()), " expects ", w.dim(0),
         " (kernel dim 0 is C_in)");
  if (output_padding && (output_padding->h < 0 || output_padding->w < 0 ||
                         output_padding->h >= strides.h || output_padding->w >= strides.w))
    fail(name, "output_padding ", pair_str(output_padding->h, output_padding->w),
         " must be >= 0 and smaller than the strides ", pair_str(strides.h, strides.w));
  // The forward convolution this transposes maps [N, C_out, H_out, W_out] -> x's shape.
  const bool has_op = output_padding.has_value();
  const Size2 op = output_padding.value_or(Size2(0));
  auto out_len = [&](std::int64_t n, std::int64_t k, std::int64_t s, std::int64_t d,
                     std::int64_t pa, std::int64_t pb, std::int64_t extra) {
    const std::int64_t ek = (k - 1) * d + 1;
    switch (padding.mode()) {
      case Padding::Mode::valid:
        return has_op ? (n - 1) * s + ek + extra : n * s + std::max<std::int64_t>(ek - s, 0);
      case Padding::Mode::same: return has_op ? (n - 1) * s + ek - 2 * (ek / 2) + extra : n * s;
      case Padding::Mode::explicit_: return (n - 1) * s + ek - pa - pb + extra;
    }
    return n;
  };
  const auto& ep = padding.pads();
  const std::int64_t ho = out_len(x.dim(2), w.dim(2), strides.h, dilation.h, ep[0], ep[1], op.h);
  const std::int64_t wo = out_len(x.dim(3), w.dim(3), strides.w, dilation.w, ep[2], ep[3], op.w);
  if (ho < 1 || wo < 1)
    fail(name, "the output would be empty (", ho, "x", wo, ") for input ", shape_str(x.shape()),
         ", kernel ", shape_str(w.shape()), " and padding ", padding.str());
  const Shape out{x.dim(0), w.dim(1) * groups, ho, wo};
  Ints pads = resolve_pads(name, padding, ho, wo, {w.dim(2), w.dim(3)}, strides, dilation);
  Attrs a = conv_attrs(pair_ints(strides), pads, pair_ints(dilation), groups);
  ConvGeom g = geometry_of(name, out, w.shape(), a);
  if (g.oh != x.dim(2) || g.ow != x.dim(3))
    fail(name, "output_padding/padding give an output ", shape_str(out),
         " whose convolution is ", g.oh, "x", g.ow, ", not the input's ", x.dim(2), "x", x.dim(3),
         " (input ", shape_str(x.shape()), ", kernel ", shape_str(w.shape()), ", padding ",
         padding.str(), ")");
  const DType t = promote_types(x.dtype(), w.dtype());
  check_float(name, t);
  return call_backprop_input(cast(x, t), cast(w, t), out, a);
}

Shape pool2d_output_shape(const Shape& x, Size2 pool_size, std::optional<Size2> strides,
                          const Padding& padding) {
  Attrs a = public_pool_attrs("pool2d", x, pool_size, strides, padding);
  PoolGeom p = pool_geometry_of("pool2d", x, a);
  return {p.n, p.c, p.oh, p.ow};
}

Tensor max_pool2d(const Tensor& x, Size2 pool_size, std::optional<Size2> strides,
                  const Padding& padding) {
  static const OpDef& d = get_op("max_pool2d");
  check_defined("max_pool2d", {&x});
  return call_op1(d, {x}, public_pool_attrs("max_pool2d", x.shape(), pool_size, strides, padding));
}

Tensor avg_pool2d(const Tensor& x, Size2 pool_size, std::optional<Size2> strides,
                  const Padding& padding, bool count_include_pad) {
  check_defined("avg_pool2d", {&x});
  Attrs a = public_pool_attrs("avg_pool2d", x.shape(), pool_size, strides, padding);
  if (count_include_pad) a.set("count_include_pad", std::int64_t(1));
  return call_avg_pool(x, a);
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Size2 pool_size,
                                                  std::optional<Size2> strides,
                                                  const Padding& padding) {
  static const OpDef& d = get_op("max_pool2d_with_indices");
  check_defined("max_pool2d_with_indices", {&x});
  auto out = call_op(
      d, {x},
      public_pool_attrs("max_pool2d_with_indices", x.shape(), pool_size, strides, padding));
  return {out[0], out[1]};
}

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Shape& output_size) {
  static const OpDef& d = get_op("max_unpool2d");
  check_defined("max_unpool2d", {&x, &indices});
  Shape os = output_size;
  if (os.size() == 2 && x.rank() == 4) os = {x.dim(0), x.dim(1), os[0], os[1]};
  return call_op1(d, {x, indices}, {{"output_size", Ints(os)}});
}

Tensor max_pool2d_grad(const Tensor& x, const Tensor& g, Size2 pool_size,
                       std::optional<Size2> strides, const Padding& padding) {
  check_defined("max_pool2d_grad", {&x, &g});
  Attrs a = public_pool_attrs("max_pool2d_grad", x.shape(), pool_size, strides, padding);
  const DType t = promote_types(x.dtype(), g.dtype());
  return call_max_pool_grad(cast(x, t), cast(g, t), a);
}

Tensor avg_pool2d_grad(const Tensor& g, const Shape& input_shape, Size2 pool_size,
                       std::optional<Size2> strides, const Padding& padding,
                       bool count_include_pad) {
  check_defined("avg_pool2d_grad", {&g});
  Attrs a = public_pool_attrs("avg_pool2d_grad", input_shape, pool_size, strides, padding);
  if (count_include_pad) a.set("count_include_pad", std::int64_t(1));
  return call_avg_pool_grad(g, input_shape, a);
}

}  // namespace soma
