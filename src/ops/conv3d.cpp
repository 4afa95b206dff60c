// The 3-d convolution ops (src/internal/conv3d_op.hpp) and the public conv3d.
//
// conv3d, conv3d_backprop_input and conv3d_backprop_filter are bilinear and their gradients are
// written with one another, as conv2d's are. Every device's kernel is a composite of conv2d ops:
// the kernel's depth taps folded into the channels ([N, C, D', KD, H, W] -> [N*D', C*KD, H, W]
// meets the kernel read as [O, C/groups*KD, KH, KW], the same bytes) and the output depths into
// the batch, so one conv2d (oneDNN, cuDNN) does the work; the CPU replaces it with oneDNN's own
// 3-d primitives for packed f32. The references are direct loops in f64.
#include <algorithm>
#include <vector>

#include "internal/conv3d_op.hpp"
#include "internal/copy.hpp"
#include "soma/autograd.hpp"
#include "soma/nn_ops.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

using G = const GradContext&;
using Ints = std::vector<std::int64_t>;

struct Geom3 {
  std::int64_t n, c, o, cg;
  std::int64_t in[3], k[3], out[3], st[3], dil[3], pb[3], pe[3];  // per spatial axis d, h, w
  std::int64_t groups;
};

std::string ints_str(const Ints& v) { return shape_str(Shape(v.begin(), v.end())); }

// The geometry of x * w under the attrs, every check done; errors name the op, the shapes and
// the attrs.
Geom3 geometry3(const char* op, const Shape& x, const Shape& w, const Attrs& a) {
  if (x.size() != 5 || w.size() != 5)
    fail(op, "expected x [N, C, D, H, W] and w [O, C/groups, KD, KH, KW], got ", shape_str(x),
         " and ", shape_str(w));
  const Ints &st = a.ints("strides"), &pads = a.ints("pads"), &dil = a.ints("dilation");
  if (st.size() != 3 || dil.size() != 3 || pads.size() != 6)
    fail(op, "attrs need strides and dilation {d, h, w} and pads {front, back, top, bottom, left, "
             "right}, got strides ", ints_str(st), ", dilation ", ints_str(dil), ", pads ",
         ints_str(pads));
  Geom3 g{};
  g.n = x[0], g.c = x[1], g.o = w[0], g.groups = a.i("groups");
  if (g.groups < 1 || g.c % g.groups != 0 || g.o % g.groups != 0 || w[1] * g.groups != g.c)
    fail(op, "channel mismatch: input ", shape_str(x), ", kernel ", shape_str(w), ", groups=",
         g.groups, ": kernel dim 1 must be C/groups = ", g.groups >= 1 ? g.c / g.groups : 0,
         " and groups must divide C and O");
  g.cg = w[1];
  for (std::size_t i = 0; i < 3; ++i) {
    g.in[i] = x[i + 2], g.k[i] = w[i + 2], g.st[i] = st[i], g.dil[i] = dil[i];
    g.pb[i] = pads[2 * i], g.pe[i] = pads[2 * i + 1];
    if (g.st[i] < 1 || g.dil[i] < 1)
      fail(op, "strides and dilation must be >= 1, got strides ", ints_str(st), " and dilation ",
           ints_str(dil));
    if (g.pb[i] < 0 || g.pe[i] < 0) fail(op, "padding must be >= 0, got ", ints_str(pads));
    const std::int64_t span = g.in[i] + g.pb[i] + g.pe[i], keff = (g.k[i] - 1) * g.dil[i] + 1;
    if (g.k[i] < 1 || keff > span)
      fail(op, "kernel ", shape_str(w), " (dilation ", ints_str(dil),
           ") does not fit the padded input (input ", shape_str(x), ", pads ", ints_str(pads),
           "): axis ", i + 2, " spans ", keff, " of ", span);
    g.out[i] = (span - keff) / g.st[i] + 1;
  }
  return g;
}

Shape out_shape(const Geom3& g) { return {g.n, g.o, g.out[0], g.out[1], g.out[2]}; }

void check_float_pair(const char* op, DType a, DType b) {
  if (a != b) fail(op, "dtypes differ: ", dtype_name(a), " and ", dtype_name(b));
  if (!is_floating(a))
    fail(op, "dtype ", dtype_name(a), " is not supported (expected f32, f64, f16 or bf16)");
}

Attrs conv3_attrs(const Attrs& a) {
  return {{"strides", a.ints("strides")},
          {"pads", a.ints("pads")},
          {"dilation", a.ints("dilation")},
          {"groups", a.i("groups")}};
}

Tensor call3(const char* name, const std::vector<Tensor>& in, const Attrs& a) {
  return call_op1(get_op(name), in, a);
}
Tensor call_conv3d(const Tensor& x, const Tensor& w, const Attrs& a) {
  return call3("conv3d", {x, w}, conv3_attrs(a));
}
Tensor call_backprop_input(const Tensor& g, const Tensor& w, const Shape& xs, const Attrs& a) {
  return call3("conv3d_backprop_input", {g, w}, conv3_attrs(a).set("input_shape", Ints(xs)));
}
Tensor call_backprop_filter(const Tensor& x, const Tensor& g, const Shape& ws, const Attrs& a) {
  return call3("conv3d_backprop_filter", {x, g}, conv3_attrs(a).set("filter_shape", Ints(ws)));
}

// ---- infer and gradients ----
std::vector<TensorSpec> conv3d_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  check_float_pair("conv3d", in[0].dtype, in[1].dtype);
  return {{out_shape(geometry3("conv3d", in[0].shape, in[1].shape, a)), in[0].dtype}};
}
std::vector<Tensor> conv3d_grad(G c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  return {c.needs(0) ? call_backprop_input(g, w, x.shape(), c.attrs) : Tensor(),
          c.needs(1) ? call_backprop_filter(x, g, w.shape(), c.attrs) : Tensor()};
}

void check_grad_shape(const char* op, const Shape& got, const Geom3& g, const Shape& x,
                      const Shape& w) {
  if (got != out_shape(g))
    fail(op, "gradient shape ", shape_str(got), " does not match the convolution's output ",
         shape_str(out_shape(g)), " (input ", shape_str(x), ", kernel ", shape_str(w), ")");
}

std::vector<TensorSpec> backprop_input_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* op = "conv3d_backprop_input";
  check_float_pair(op, in[0].dtype, in[1].dtype);
  const Shape xs = a.ints("input_shape");
  check_grad_shape(op, in[0].shape, geometry3(op, xs, in[1].shape, a), xs, in[1].shape);
  return {{xs, in[0].dtype}};
}
// <B(g, w), h> = <g, conv3d(h, w)>: linear in g (gradient conv3d(h, w)) and in w.
std::vector<Tensor> backprop_input_grad(G c) {
  const Tensor &g = c.inputs[0], &w = c.inputs[1], &h = c.grads[0];
  return {c.needs(0) ? call_conv3d(h, w, c.attrs) : Tensor(),
          c.needs(1) ? call_backprop_filter(h, g, w.shape(), c.attrs) : Tensor()};
}

std::vector<TensorSpec> backprop_filter_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const char* op = "conv3d_backprop_filter";
  check_float_pair(op, in[0].dtype, in[1].dtype);
  const Shape ws = a.ints("filter_shape");
  check_grad_shape(op, in[1].shape, geometry3(op, in[0].shape, ws, a), in[0].shape, ws);
  return {{ws, in[0].dtype}};
}
// <F(x, g), v> = <g, conv3d(x, v)>.
std::vector<Tensor> backprop_filter_grad(G c) {
  const Tensor &x = c.inputs[0], &g = c.inputs[1], &v = c.grads[0];
  return {c.needs(0) ? call_backprop_input(g, v, x.shape(), c.attrs) : Tensor(),
          c.needs(1) ? call_conv3d(x, v, c.attrs) : Tensor()};
}

// ---- the composite: conv2d with the depth taps folded into the channels ----
Size2 hw_strides(const Geom3& g) { return Size2(g.st[1], g.st[2]); }
Size2 hw_dilation(const Geom3& g) { return Size2(g.dil[1], g.dil[2]); }
Padding hw_padding(const Geom3& g) { return Padding(g.pb[1], g.pe[1], g.pb[2], g.pe[2]); }

// x [N, C, D, H, W] -> [N*D', C*KD, H, W]: tap k of output depth j is the padded plane
// k*dd + j*sd.
Tensor fold_taps(const Tensor& x, const Geom3& g) {
  const Tensor xp = g.pb[0] || g.pe[0]
                        ? pad(x, {{0, 0}, {0, 0}, {g.pb[0], g.pe[0]}, {0, 0}, {0, 0}})
                        : x;
  std::vector<Tensor> taps;
  for (std::int64_t k = 0; k < g.k[0]; ++k) {
    const std::int64_t first = k * g.dil[0];
    taps.push_back(slice(xp, {Slice{}, Slice{}, Slice{first, first + (g.out[0] - 1) * g.st[0] + 1, g.st[0]}}));
  }
  return reshape(transpose(stack(taps, 3), {0, 2, 1, 3, 4, 5}),
                 {g.n * g.out[0], g.c * g.k[0], g.in[1], g.in[2]});
}
Shape folded_kernel_shape(const Geom3& g) { return {g.o, g.cg * g.k[0], g.k[1], g.k[2]}; }
// g [N, O, D', H', W'] -> [N*D', O, H', W']
Tensor fold_grad(const Tensor& gy, const Geom3& g) {
  return reshape(transpose(gy, {0, 2, 1, 3, 4}), {g.n * g.out[0], g.o, g.out[1], g.out[2]});
}

// ---- references: direct loops in f64 ----
template <class F>
void for_each_tap3(const Geom3& g, F&& f) {
  const std::int64_t og = g.o / g.groups;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.o; ++o)
      for (std::int64_t z = 0; z < g.out[0]; ++z)
        for (std::int64_t y = 0; y < g.out[1]; ++y)
          for (std::int64_t x = 0; x < g.out[2]; ++x)
            for (std::int64_t ch = 0; ch < g.cg; ++ch)
              for (std::int64_t kz = 0; kz < g.k[0]; ++kz)
                for (std::int64_t ky = 0; ky < g.k[1]; ++ky)
                  for (std::int64_t kx = 0; kx < g.k[2]; ++kx) {
                    const std::int64_t iz = z * g.st[0] + kz * g.dil[0] - g.pb[0];
                    const std::int64_t iy = y * g.st[1] + ky * g.dil[1] - g.pb[1];
                    const std::int64_t ix = x * g.st[2] + kx * g.dil[2] - g.pb[2];
                    if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1] || ix < 0 || ix >= g.in[2])
                      continue;
                    const std::int64_t ci = (o / og) * g.cg + ch;
                    const std::int64_t xi = (((n * g.c + ci) * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix;
                    const std::int64_t wi = (((o * g.cg + ch) * g.k[0] + kz) * g.k[1] + ky) * g.k[2] + kx;
                    const std::int64_t yi = (((n * g.o + o) * g.out[0] + z) * g.out[1] + y) * g.out[2] + x;
                    f(std::size_t(xi), std::size_t(wi), std::size_t(yi));
                  }
}
std::size_t numel_of(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return std::size_t(n);
}

std::vector<Tensor> ref_conv3d(const std::vector<Tensor>& in, const Attrs& a) {
  const Geom3 g = geometry3("conv3d", in[0].shape(), in[1].shape(), a);
  const auto x = in[0].to_vector<double>(), w = in[1].to_vector<double>();
  std::vector<double> y(numel_of(out_shape(g)), 0.0);
  for_each_tap3(g, [&](std::size_t xi, std::size_t wi, std::size_t yi) { y[yi] += x[xi] * w[wi]; });
  return {cast(constant(y, out_shape(g)), in[0].dtype())};
}
std::vector<Tensor> ref_backprop_input(const std::vector<Tensor>& in, const Attrs& a) {
  const Shape xs = a.ints("input_shape");
  const Geom3 g = geometry3("conv3d_backprop_input", xs, in[1].shape(), a);
  const auto gy = in[0].to_vector<double>(), w = in[1].to_vector<double>();
  std::vector<double> dx(numel_of(xs), 0.0);
  for_each_tap3(g, [&](std::size_t xi, std::size_t wi, std::size_t yi) { dx[xi] += gy[yi] * w[wi]; });
  return {cast(constant(dx, xs), in[0].dtype())};
}
std::vector<Tensor> ref_backprop_filter(const std::vector<Tensor>& in, const Attrs& a) {
  const Shape ws = a.ints("filter_shape");
  const Geom3 g = geometry3("conv3d_backprop_filter", in[0].shape(), ws, a);
  const auto x = in[0].to_vector<double>(), gy = in[1].to_vector<double>();
  std::vector<double> dw(numel_of(ws), 0.0);
  for_each_tap3(g, [&](std::size_t xi, std::size_t wi, std::size_t yi) { dw[wi] += gy[yi] * x[xi]; });
  return {cast(constant(dw, ws), in[0].dtype())};
}

// ---- the composite kernels (every device; the CPU's replaces them for packed f32) ----
void conv3d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  detail::copy_into(detail::conv3d_composite(in[0], in[1], a), out[0]);
}
void backprop_input_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  detail::copy_into(detail::conv3d_backprop_input_composite(in[0], in[1], a), out[0]);
}
void backprop_filter_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  detail::copy_into(detail::conv3d_backprop_filter_composite(in[0], in[1], a), out[0]);
}

}  // namespace

namespace detail {

Tensor conv3d_composite(const Tensor& x, const Tensor& w, const Attrs& a) {
  NoGradScope no_grad;
  const Geom3 g = geometry3("conv3d", x.shape(), w.shape(), a);
  const Tensor y2 = conv2d(fold_taps(x, g), reshape(w, folded_kernel_shape(g)), hw_strides(g),
                           hw_padding(g), hw_dilation(g), g.groups);
  return transpose(reshape(y2, {g.n, g.out[0], g.o, g.out[1], g.out[2]}), {0, 2, 1, 3, 4});
}

Tensor conv3d_backprop_filter_composite(const Tensor& x, const Tensor& gy, const Attrs& a) {
  NoGradScope no_grad;
  const Shape ws = a.ints("filter_shape");
  const Geom3 g = geometry3("conv3d_backprop_filter", x.shape(), ws, a);
  const Tensor dw2 = conv2d_backprop_filter(fold_taps(x, g), fold_grad(gy, g),
                                            folded_kernel_shape(g), hw_strides(g), hw_padding(g),
                                            hw_dilation(g), g.groups);
  return reshape(dw2, ws);
}

// The folded input's gradient, unfolded: tap k of output depth j goes back to padded plane
// k*dd + j*sd (the taps' planes interleaved with sd - 1 zero planes, then shifted by k*dd).
Tensor conv3d_backprop_input_composite(const Tensor& gy, const Tensor& w, const Attrs& a) {
  NoGradScope no_grad;
  const Shape xs = a.ints("input_shape");
  const Geom3 g = geometry3("conv3d_backprop_input", xs, w.shape(), a);
  const Tensor dx2 = conv2d_backprop_input(fold_grad(gy, g), reshape(w, folded_kernel_shape(g)),
                                           {g.n * g.out[0], g.c * g.k[0], g.in[1], g.in[2]},
                                           hw_strides(g), hw_padding(g), hw_dilation(g), g.groups);
  const Tensor taps = reshape(dx2, {g.n, g.out[0], g.c, g.k[0], g.in[1], g.in[2]});
  const std::int64_t dp = g.in[0] + g.pb[0] + g.pe[0], od = g.out[0], sd = g.st[0];
  const std::int64_t span = (od - 1) * sd + 1;
  Tensor acc;  // [N, D + pads, C, H, W]
  for (std::int64_t k = 0; k < g.k[0]; ++k) {
    Tensor t = squeeze(slice(taps, {Slice{}, Slice{}, Slice{}, Slice{k, k + 1}}), {3});
    if (sd > 1) {
      t = pad(expand_dims(t, 2), {{0, 0}, {0, 0}, {0, sd - 1}, {0, 0}, {0, 0}, {0, 0}});
      t = slice(reshape(t, {g.n, od * sd, g.c, g.in[1], g.in[2]}), {Slice{}, Slice{0, span}});
    }
    const std::int64_t first = k * g.dil[0];
    t = pad(t, {{0, 0}, {first, dp - first - span}, {0, 0}, {0, 0}, {0, 0}});
    acc = acc.defined() ? acc + t : t;
  }
  return transpose(slice(acc, {Slice{}, Slice{g.pb[0], g.pb[0] + g.in[0]}}), {0, 2, 1, 3, 4});
}

void register_conv3d_ops() {
  // A grouped convolution, strided in depth, dilated in width, padded unevenly (output
  // [1, 4, 2, 5, 3]).
  const Attrs conv = {{"strides", Ints{2, 1, 1}}, {"pads", Ints{1, 0, 1, 1, 0, 1}},
                      {"dilation", Ints{1, 1, 2}}, {"groups", std::int64_t(2)}};
  const Shape cx{1, 4, 4, 5, 4}, cw{4, 2, 2, 3, 2}, cy{1, 4, 2, 5, 3};
  auto def = [](OpDef d, KernelFn composite) {
    for (int k = 0; k < kNumDeviceKinds; ++k) d.kernels[k] = composite;
    register_op(std::move(d));
  };
  def({.name = "conv3d", .num_inputs = 2, .infer = conv3d_infer, .grad = conv3d_grad,
       .tags = kFloatOnly,
       .test = {.shapes = {cx, cw}, .attrs = conv, .reference = ref_conv3d}},
      conv3d_kernel);
  def({.name = "conv3d_backprop_input", .num_inputs = 2, .infer = backprop_input_infer,
       .grad = backprop_input_grad, .tags = kFloatOnly,
       .test = {.shapes = {cy, cw}, .attrs = Attrs(conv).set("input_shape", Ints(cx)),
                .reference = ref_backprop_input}},
      backprop_input_kernel);
  def({.name = "conv3d_backprop_filter", .num_inputs = 2, .infer = backprop_filter_infer,
       .grad = backprop_filter_grad, .tags = kFloatOnly,
       .test = {.shapes = {cx, cy}, .attrs = Attrs(conv).set("filter_shape", Ints(cw)),
                .reference = ref_backprop_filter}},
      backprop_filter_kernel);
}

}  // namespace detail

Tensor conv3d(const Tensor& x, const Tensor& w, std::array<std::int64_t, 3> strides,
              std::array<std::int64_t, 6> pads, std::array<std::int64_t, 3> dilation,
              std::int64_t groups) {
  const char* name = "conv3d";
  if (!x.defined() || !w.defined()) fail(name, "an input is an undefined Tensor");
  const Attrs a = {{"strides", Ints(strides.begin(), strides.end())},
                   {"pads", Ints(pads.begin(), pads.end())},
                   {"dilation", Ints(dilation.begin(), dilation.end())},
                   {"groups", groups}};
  geometry3(name, x.shape(), w.shape(), a);
  const DType t = promote_types(x.dtype(), w.dtype());
  if (!is_floating(t))
    fail(name, "dtype ", dtype_name(t), " is not supported (expected f32, f64, f16 or bf16)");
  return call_op1(get_op(name), {cast(x, t), cast(w, t)}, a);
}

}  // namespace soma
