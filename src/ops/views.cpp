// View ops (reshape, transpose, broadcast_to, slice, stop_gradient) and the copying ops that
// go with them (copy, cast). View kernels only compute geometry, so they serve every device.
#include <algorithm>

#include "internal/copy.hpp"
#include "internal/registration.hpp"
#include "references.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

Shape resolve_reshape(const Shape& in, const Shape& target) {
  Shape out = target;
  int unknown = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (unknown >= 0) fail("reshape", "only one dimension may be -1, got ", shape_str(target));
      unknown = int(i);
    } else if (out[i] < 0) {
      fail("reshape", "invalid dimension ", out[i], " in target shape ", shape_str(target));
    } else {
      known *= out[i];
    }
  }
  std::int64_t n = numel(in);
  if (unknown >= 0) {
    if (known == 0 || n % known != 0)
      fail("reshape", "cannot reshape ", shape_str(in), " (", n, " elements) into ",
           shape_str(target));
    out[std::size_t(unknown)] = n / known;
  } else if (known != n) {
    fail("reshape", "cannot reshape ", shape_str(in), " (", n, " elements) into ",
         shape_str(target), " (", known, " elements)");
  }
  return out;
}

std::vector<TensorSpec> same_as_input(const std::vector<TensorSpec>& in, const Attrs&) {
  return {in[0]};
}

// ---- reshape ----
std::vector<TensorSpec> reshape_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  return {{resolve_reshape(in[0].shape, a.ints("shape")), in[0].dtype}};
}
void reshape_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  Shape s = resolve_reshape(in[0].shape(), a.ints("shape"));
  if (in[0].is_contiguous()) {
    out.push_back(Tensor::view_of(in[0], s, contiguous_strides(s), in[0].offset()));
  } else {
    Tensor packed = Tensor::empty(in[0].shape(), in[0].dtype(), in[0].device());
    detail::copy_into(in[0], packed);
    out.push_back(Tensor::view_of(packed, s, contiguous_strides(s), 0));
  }
}
std::vector<Tensor> reshape_grad(const GradContext& c) {
  return {reshape(c.grads[0], c.inputs[0].shape())};
}

// ---- transpose ----
std::vector<std::int64_t> check_perm(const std::vector<std::int64_t>& perm, std::int64_t rank) {
  if (std::int64_t(perm.size()) != rank)
    fail("transpose", "permutation has ", perm.size(), " entries for a tensor of rank ", rank);
  std::vector<std::int64_t> p(perm.size());
  std::vector<bool> seen(perm.size(), false);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    int ax = normalize_axis(perm[i], rank, "transpose");
    if (seen[std::size_t(ax)]) fail("transpose", "axis ", perm[i], " appears twice in the permutation");
    seen[std::size_t(ax)] = true;
    p[i] = ax;
  }
  return p;
}
std::vector<TensorSpec> transpose_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  auto p = check_perm(a.ints("perm"), std::int64_t(in[0].shape.size()));
  Shape s(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) s[i] = in[0].shape[std::size_t(p[i])];
  return {{s, in[0].dtype}};
}
void transpose_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  auto p = check_perm(a.ints("perm"), in[0].rank());
  Shape s(p.size());
  Strides st(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    s[i] = in[0].shape()[std::size_t(p[i])];
    st[i] = in[0].strides()[std::size_t(p[i])];
  }
  out.push_back(Tensor::view_of(in[0], s, st, in[0].offset()));
}
std::vector<Tensor> transpose_grad(const GradContext& c) {
  const auto& p = c.attrs.ints("perm");
  std::vector<std::int64_t> inv(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) inv[std::size_t(p[i])] = std::int64_t(i);
  return {transpose(c.grads[0], inv)};
}

// ---- broadcast_to ----
std::vector<TensorSpec> broadcast_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const Shape& target = a.ints("shape");
  if (broadcast_shapes(in[0].shape, target, "broadcast_to") != target || in[0].shape.size() > target.size())
    fail("broadcast_to", "cannot broadcast ", shape_str(in[0].shape), " to ", shape_str(target));
  return {{target, in[0].dtype}};
}
void broadcast_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Shape& target = a.ints("shape");
  Strides st(target.size(), 0);
  std::size_t lead = target.size() - std::size_t(in[0].rank());
  for (std::size_t i = 0; i < std::size_t(in[0].rank()); ++i)
    st[lead + i] = in[0].shape()[i] == 1 && target[lead + i] != 1 ? 0 : in[0].strides()[i];
  out.push_back(Tensor::view_of(in[0], target, st, in[0].offset()));
}
std::vector<Tensor> broadcast_grad(const GradContext& c) {
  return {sum_to(c.grads[0], c.inputs[0].shape())};
}

// ---- slice (attrs already normalised: begin, step and the output shape per axis) ----
// The attrs come from slice() or from a graph or model file: every selected index must lie
// inside the input (a window outside it would read past the storage).
void check_slice_window(const char* op, const Shape& s, const Attrs& a) {
  const auto& begin = a.ints("begin");
  const auto& step = a.ints("step");
  const auto& size = a.ints("size");
  if (begin.size() != s.size() || step.size() != s.size() || size.size() != s.size())
    fail(op, "begin ", shape_str(begin), ", step ", shape_str(step), " and size ",
         shape_str(size), " need one entry per axis of shape ", shape_str(s));
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (size[d] < 0) fail(op, "size ", shape_str(size), " has a negative entry");
    if (size[d] == 0) continue;
    const std::int64_t last = begin[d] + (size[d] - 1) * step[d];
    if (begin[d] < 0 || begin[d] >= s[d] || last < 0 || last >= s[d])
      fail(op, "axis ", d, ": begin ", begin[d], ", step ", step[d], ", size ", size[d],
           " select indices outside [0, ", s[d], ") of shape ", shape_str(s));
  }
}
std::vector<TensorSpec> slice_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  check_slice_window("slice", in[0].shape, a);
  return {{a.ints("size"), in[0].dtype}};
}
void slice_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const auto& begin = a.ints("begin");
  const auto& step = a.ints("step");
  const auto& size = a.ints("size");
  Strides st = in[0].strides();
  std::int64_t off = in[0].offset();
  for (std::size_t i = 0; i < st.size(); ++i) {
    if (size[i] > 0) off += begin[i] * st[i];
    st[i] *= step[i];
  }
  out.push_back(Tensor::view_of(in[0], size, st, off));
}
std::vector<Tensor> slice_grad(const GradContext& c) {
  Attrs a = c.attrs;
  a.set("input_shape", c.inputs[0].shape());
  static const OpDef& def = get_op("slice_grad");
  return {call_op1(def, {c.grads[0]}, a)};
}
// slice_grad: zeros of the input's shape with the gradient written into the sliced window.
std::vector<TensorSpec> slice_grad_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const Shape& s = a.ints("input_shape");
  check_slice_window("slice_grad", s, a);
  if (in[0].shape != a.ints("size"))
    fail("slice_grad", "gradient has shape ", shape_str(in[0].shape), " but the slice of ",
         shape_str(s), " has shape ", shape_str(a.ints("size")));
  return {{s, in[0].dtype}};
}
std::vector<Tensor> slice_grad_grad(const GradContext& c) {
  static const OpDef& def = get_op("slice");
  return {call_op1(def, {c.grads[0]}, c.attrs)};
}

// ---- copy / cast / stop_gradient ----
void copy_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  detail::copy_into(in[0], out[0]);
}
std::vector<Tensor> identity_grad(const GradContext& c) { return {c.grads[0]}; }
std::vector<TensorSpec> cast_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  return {{in[0].shape, a.dtype("dtype")}};
}
std::vector<Tensor> cast_grad(const GradContext& c) {
  if (!is_floating(c.inputs[0].dtype())) return {Tensor()};
  return {cast(c.grads[0], c.inputs[0].dtype())};
}
void alias_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  out.push_back(Tensor::view_of(in[0], in[0].shape(), in[0].strides(), in[0].offset()));
}

void register_view(OpDef d) {
  for (int k = 0; k < kNumDeviceKinds; ++k) d.kernels[k] = d.kernels[0];
  register_op(std::move(d));
}

}  // namespace

namespace detail {
void register_view_ops() {
  using Ints = std::vector<std::int64_t>;
  register_view({.name = "reshape", .num_inputs = 1, .infer = reshape_infer, .grad = reshape_grad,
                 .view = true, .kernels = {reshape_kernel}, .tags = kShapeOnly,
                 .test = {.shapes = {{2, 3, 4}}, .attrs = {{"shape", Ints{4, -1}}},
                          .reference = ref::reshape}});
  register_view({.name = "transpose", .num_inputs = 1, .infer = transpose_infer,
                 .grad = transpose_grad, .view = true, .kernels = {transpose_kernel},
                 .tags = kShapeOnly, .onnx = {.op_type = "Transpose", .attrs = {{"perm", "perm"}}},
                 .test = {.shapes = {{2, 3, 4}}, .attrs = {{"perm", Ints{2, 0, 1}}},
                          .reference = ref::transpose}});
  register_view({.name = "broadcast_to", .num_inputs = 1, .infer = broadcast_infer,
                 .grad = broadcast_grad, .view = true, .kernels = {broadcast_kernel},
                 .tags = kShapeOnly,
                 .test = {.shapes = {{3, 1}}, .attrs = {{"shape", Ints{2, 3, 4}}},
                          .reference = ref::broadcast_to}});
  register_view({.name = "slice", .num_inputs = 1, .infer = slice_infer, .grad = slice_grad,
                 .view = true, .kernels = {slice_kernel}, .tags = kShapeOnly,
                 .test = {.shapes = {{4, 5}},
                          .attrs = {{"begin", Ints{1, 4}}, {"step", Ints{2, -2}},
                                    {"size", Ints{2, 3}}},
                          .reference = ref::slice}});
  // Its gradient is zero by definition, not the identity's: no finite-difference check.
  register_view({.name = "stop_gradient", .num_inputs = 1, .infer = same_as_input,
                 .grad = nullptr, .view = true, .kernels = {alias_kernel}, .tags = kShapeOnly,
                 .test = {.shapes = {{3, 4}}, .reference = ref::identity, .gradcheck = false}});
  register_op({.name = "slice_grad", .num_inputs = 1, .infer = slice_grad_infer,
               .grad = slice_grad_grad, .tags = kShapeOnly,
               .test = {.shapes = {{2, 3}},
                        .attrs = {{"begin", Ints{1, 4}}, {"step", Ints{2, -2}},
                                  {"size", Ints{2, 3}}, {"input_shape", Ints{4, 5}}},
                        .reference = ref::slice_grad}});
  register_op({.name = "copy", .num_inputs = 1, .infer = same_as_input, .grad = identity_grad,
               .tags = kShapeOnly, .test = {.shapes = {{3, 4}}, .reference = ref::identity}});
  register_op({.name = "cast", .num_inputs = 1, .infer = cast_infer, .grad = cast_grad,
               .attrs = {{"dtype", DType::f32}},
               .onnx = {.op_type = "Cast", .min_opset = 6, .attrs = {{"dtype", "to"}}},
               .test = {.shapes = {{3, 4}}, .attrs = {{"dtype", DType::f64}},
                        .reference = ref::cast}});
  register_kernel("copy", DeviceKind::CPU, copy_kernel);
  register_kernel("cast", DeviceKind::CPU, copy_kernel);
  register_kernel("slice_grad", DeviceKind::CPU,
                  [](const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
                    detail::fill_value(out[0], 0.0);
                    std::vector<Tensor> window;
                    slice_kernel({out[0]}, window, a);
                    detail::copy_into(in[0], window[0]);
                  });
}
}  // namespace detail

// ---- public functions ----
Tensor reshape(const Tensor& t, const Shape& shape) {
  static const OpDef& d = get_op("reshape");
  return call_op1(d, {t}, {{"shape", shape}});
}

Tensor transpose(const Tensor& t, const std::vector<std::int64_t>& perm) {
  static const OpDef& d = get_op("transpose");
  std::vector<std::int64_t> p = perm;
  if (p.empty())
    for (std::int64_t i = t.rank(); i-- > 0;) p.push_back(i);
  return call_op1(d, {t}, {{"perm", p}});
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  static const OpDef& d = get_op("broadcast_to");
  return call_op1(d, {t}, {{"shape", shape}});
}

Tensor squeeze(const Tensor& t, const Axes& axes) {
  Shape s;
  if (axes.empty()) {
    for (auto d : t.shape())
      if (d != 1) s.push_back(d);
  } else {
    std::vector<int> ax = normalize_axes(axes, t.rank(), "squeeze");
    for (std::int64_t i = 0; i < t.rank(); ++i) {
      bool drop = std::find(ax.begin(), ax.end(), int(i)) != ax.end();
      if (drop && t.shape()[std::size_t(i)] != 1)
        fail("squeeze", "cannot squeeze axis ", i, " of size ", t.shape()[std::size_t(i)],
             " in shape ", shape_str(t.shape()), " (expected size 1)");
      if (!drop) s.push_back(t.shape()[std::size_t(i)]);
    }
  }
  return reshape(t, s);
}

Tensor expand_dims(const Tensor& t, std::int64_t axis) {
  int ax = normalize_axis(axis, t.rank() + 1, "expand_dims");
  Shape s = t.shape();
  s.insert(s.begin() + ax, 1);
  return reshape(t, s);
}

Tensor slice(const Tensor& t, const std::vector<Slice>& slices) {
  if (std::int64_t(slices.size()) > t.rank())
    fail("slice", slices.size(), " slices given for a tensor of shape ", shape_str(t.shape()));
  std::size_t r = std::size_t(t.rank());
  std::vector<std::int64_t> begin(r, 0), step(r, 1), size(t.shape());
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    std::int64_t n = t.shape()[i];
    if (s.step == 0) fail("slice", "step must not be zero (axis ", i, ")");
    std::int64_t b, e;
    if (s.step > 0) {
      b = s.start ? (*s.start < 0 ? *s.start + n : *s.start) : 0;
      e = s.stop ? (*s.stop < 0 ? *s.stop + n : *s.stop) : n;
      b = std::clamp<std::int64_t>(b, 0, n);
      e = std::clamp<std::int64_t>(e, 0, n);
      size[i] = e > b ? (e - b + s.step - 1) / s.step : 0;
    } else {
      b = s.start ? (*s.start < 0 ? *s.start + n : *s.start) : n - 1;
      e = s.stop ? (*s.stop < 0 ? *s.stop + n : *s.stop) : -1;
      b = std::clamp<std::int64_t>(b, -1, n - 1);
      e = std::clamp<std::int64_t>(e, -1, n - 1);
      size[i] = b > e ? (b - e + (-s.step) - 1) / (-s.step) : 0;
    }
    begin[i] = b;
    step[i] = s.step;
  }
  static const OpDef& d = get_op("slice");
  return call_op1(d, {t}, {{"begin", begin}, {"step", step}, {"size", size}});
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : copy(t); }

Tensor copy(const Tensor& t) {
  static const OpDef& d = get_op("copy");
  return call_op1(d, {t});
}

Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  static const OpDef& d = get_op("cast");
  return call_op1(d, {t}, {{"dtype", dtype}});
}

Tensor stop_gradient(const Tensor& t) {
  static const OpDef& d = get_op("stop_gradient");
  return call_op1(d, {t});
}

}  // namespace soma
