// Shape op definitions: concat, split, unstack (multi-output views), pad, gather (+ its
// scatter-add gradient), one_hot, and the composites stack and tile. split and unstack are view
// ops, so their kernels live here and serve every device; the others have CPU kernels in
// src/backend/cpu/shape.cpp.
#include <algorithm>

#include "internal/registration.hpp"
#include "references.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

using G = const GradContext&;

// ---- concat ----
std::vector<TensorSpec> concat_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  if (in.empty()) fail("concat", "needs at least one tensor, got an empty list");
  const Shape& s0 = in[0].shape;
  if (s0.empty())
    fail("concat", "cannot concatenate scalars (input 0 has shape []); use stack instead");
  int ax = normalize_axis(a.i("axis"), std::int64_t(s0.size()), "concat");
  Shape out = s0;
  out[std::size_t(ax)] = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i].shape;
    if (in[i].dtype != in[0].dtype)
      fail("concat", "input ", i, " has dtype ", dtype_name(in[i].dtype), " but input 0 has dtype ",
           dtype_name(in[0].dtype), " (cast them to one dtype first)");
    bool match = s.size() == s0.size();
    for (std::size_t d = 0; match && d < s.size(); ++d)
      if (int(d) != ax && s[d] != s0[d]) match = false;
    if (!match)
      fail("concat", "input ", i, " has shape ", shape_str(s), " but input 0 has shape ",
           shape_str(s0), "; shapes must match on every axis except the concat axis ", ax);
    out[std::size_t(ax)] += s[std::size_t(ax)];
  }
  return {{out, in[0].dtype}};
}
std::vector<Tensor> concat_grad(G c) {
  int ax = normalize_axis(c.attrs.i("axis"), c.grads[0].rank(), "concat");
  std::vector<Tensor> gs;
  gs.reserve(c.inputs.size());
  std::int64_t off = 0;
  for (const auto& t : c.inputs) {
    std::int64_t n = t.shape()[std::size_t(ax)];
    gs.push_back(c.grads[0].slice(ax, off, off + n));
    off += n;
  }
  return gs;
}

// ---- split (a multi-output view: one output per entry of "sizes") ----
std::vector<TensorSpec> split_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const Shape& s = in[0].shape;
  int ax = normalize_axis(a.i("axis"), std::int64_t(s.size()), "split");
  const auto& sizes = a.ints("sizes");
  std::int64_t total = 0;
  for (auto n : sizes) {
    if (n < 0) fail("split", "sizes must be non-negative, got ", shape_str(sizes));
    total += n;
  }
  if (total != s[std::size_t(ax)])
    fail("split", "sizes ", shape_str(sizes), " sum to ", total, " but axis ", ax, " has size ",
         s[std::size_t(ax)], " (shape ", shape_str(s), ")");
  std::vector<TensorSpec> out;
  for (auto n : sizes) {
    Shape o = s;
    o[std::size_t(ax)] = n;
    out.push_back({o, in[0].dtype});
  }
  return out;
}
void split_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& t = in[0];
  int ax = normalize_axis(a.i("axis"), t.rank(), "split");
  std::int64_t off = t.offset();
  for (auto n : a.ints("sizes")) {
    Shape s = t.shape();
    s[std::size_t(ax)] = n;
    out.push_back(Tensor::view_of(t, s, t.strides(), off));
    off += n * t.strides()[std::size_t(ax)];
  }
}
std::vector<Tensor> split_grad(G c) {
  return {concat(c.grads, c.attrs.i("axis"))};
}

// ---- unstack (a multi-output view: one output per index along the axis, the axis dropped) ----
std::vector<TensorSpec> unstack_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const Shape& s = in[0].shape;
  int ax = normalize_axis(a.i("axis"), std::int64_t(s.size()), "unstack");
  Shape o = s;
  o.erase(o.begin() + ax);
  return std::vector<TensorSpec>(std::size_t(s[std::size_t(ax)]), TensorSpec{o, in[0].dtype});
}
void unstack_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& t = in[0];
  int ax = normalize_axis(a.i("axis"), t.rank(), "unstack");
  Shape s = t.shape();
  Strides st = t.strides();
  std::int64_t n = s[std::size_t(ax)], step = st[std::size_t(ax)];
  s.erase(s.begin() + ax);
  st.erase(st.begin() + ax);
  for (std::int64_t i = 0; i < n; ++i) out.push_back(Tensor::view_of(t, s, st, t.offset() + i * step));
}
std::vector<Tensor> unstack_grad(G c) {
  return {stack(c.grads, c.attrs.i("axis"))};
}

// ---- pad ("paddings": before_0, after_0, before_1, after_1, ...) ----
std::vector<TensorSpec> pad_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  const Shape& s = in[0].shape;
  const auto& p = a.ints("paddings");
  if (p.size() != 2 * s.size())
    fail("pad", "got ", p.size() / 2, " {before, after} pairs for a tensor of shape ",
         shape_str(s), " (expected one pair per axis, ", s.size(), ")");
  Shape out = s;
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (p[2 * d] < 0 || p[2 * d + 1] < 0)
      fail("pad", "paddings must be non-negative, got {", p[2 * d], ", ", p[2 * d + 1],
           "} for axis ", d, " of shape ", shape_str(s));
    out[d] += p[2 * d] + p[2 * d + 1];
  }
  return {{out, in[0].dtype}};
}
std::vector<Tensor> pad_grad(G c) {
  const auto& p = c.attrs.ints("paddings");
  const Shape& s = c.inputs[0].shape();
  std::vector<Slice> window(s.size());
  for (std::size_t d = 0; d < s.size(); ++d) window[d] = Slice{p[2 * d], p[2 * d] + s[d], 1};
  return {slice(c.grads[0], window)};
}

// ---- gather / gather_grad (scatter-add of the gradient into zeros) ----
void check_index_dtype(DType t, const char* op) {
  if (t != DType::i32 && t != DType::i64)
    fail(op, "indices must have dtype i32 or i64, got ", dtype_name(t));
}
Shape gathered_shape(const Shape& s, const Shape& idx, int ax) {
  Shape out(s.begin(), s.begin() + ax);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), s.begin() + ax + 1, s.end());
  return out;
}
std::vector<TensorSpec> gather_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  check_index_dtype(in[1].dtype, "gather");
  int ax = normalize_axis(a.i("axis"), std::int64_t(in[0].shape.size()), "gather");
  return {{gathered_shape(in[0].shape, in[1].shape, ax), in[0].dtype}};
}
std::vector<Tensor> gather_grad(G c) {
  static const OpDef& d = get_op("gather_grad");
  Attrs a = c.attrs;
  a.set("input_shape", c.inputs[0].shape());
  return {call_op1(d, {c.grads[0], c.inputs[1]}, a), Tensor()};
}
// gather_grad(g, indices): zeros of "input_shape" with each slice of g added at its index.
std::vector<TensorSpec> gather_grad_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  check_index_dtype(in[1].dtype, "gather_grad");
  const Shape& s = a.ints("input_shape");
  int ax = normalize_axis(a.i("axis"), std::int64_t(s.size()), "gather_grad");
  Shape want = gathered_shape(s, in[1].shape, ax);
  if (in[0].shape != want)
    fail("gather_grad", "gradient has shape ", shape_str(in[0].shape), " but gathering indices of ",
         "shape ", shape_str(in[1].shape), " from ", shape_str(s), " along axis ", ax, " gives ",
         shape_str(want));
  return {{s, in[0].dtype}};
}
std::vector<Tensor> gather_grad_grad(G c) {
  return {gather(c.grads[0], c.inputs[1], c.attrs.i("axis")), Tensor()};
}

// ---- one_hot (not differentiable) ----
std::vector<TensorSpec> one_hot_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  check_index_dtype(in[0].dtype, "one_hot");
  std::int64_t depth = a.i("depth");
  if (depth < 0) fail("one_hot", "depth must be non-negative, got ", depth);
  Shape out = in[0].shape;
  out.push_back(depth);
  return {{out, a.dtype("dtype")}};
}

void register_view(OpDef d) {
  for (int k = 0; k < kNumDeviceKinds; ++k) d.kernels[k] = d.kernels[0];
  register_op(std::move(d));
}

}  // namespace

namespace detail {
void register_shape_ops() {
  using Ints = std::vector<std::int64_t>;
  const DType i64 = DType::i64;
  register_op({.name = "concat", .num_inputs = -1, .infer = concat_infer, .grad = concat_grad,
               .tags = kShapeOnly, .onnx = {.op_type = "Concat", .attrs = {{"axis", "axis"}}},
               .test = {.shapes = {{2, 3}, {2, 1}, {2, 2}}, .attrs = {{"axis", std::int64_t(1)}},
                        .reference = ref::concat}});
  register_view({.name = "split", .num_inputs = 1, .infer = split_infer, .grad = split_grad,
                 .view = true, .kernels = {split_kernel}, .tags = kShapeOnly,
                 .test = {.shapes = {{3, 5}},
                          .attrs = {{"axis", std::int64_t(1)}, {"sizes", Ints{2, 0, 3}}},
                          .reference = ref::split}});
  register_view({.name = "unstack", .num_inputs = 1, .infer = unstack_infer, .grad = unstack_grad,
                 .view = true, .kernels = {unstack_kernel}, .tags = kShapeOnly,
                 .test = {.shapes = {{3, 2, 4}}, .attrs = {{"axis", std::int64_t(1)}},
                          .reference = ref::unstack}});
  register_op({.name = "pad", .num_inputs = 1, .infer = pad_infer, .grad = pad_grad,
               .tags = kShapeOnly,
               .test = {.shapes = {{2, 3}},
                        .attrs = {{"paddings", Ints{1, 0, 2, 1}}, {"value", 0.5}},
                        .reference = ref::pad}});
  register_op({.name = "gather", .num_inputs = 2, .infer = gather_infer, .grad = gather_grad,
               .tags = kShapeOnly, .onnx = {.op_type = "Gather", .attrs = {{"axis", "axis"}}},
               .test = {.shapes = {{4, 3}, {2, 2}}, .attrs = {{"axis", std::int64_t(0)}},
                        .reference = ref::gather,
                        .fixed_inputs = {{1, i64, -4, 3}}}});  // negative: from the end
  register_op({.name = "gather_grad", .num_inputs = 2, .infer = gather_grad_infer,
               .grad = gather_grad_grad,
               .test = {.shapes = {{3, 2, 2}, {2}},
                        .attrs = {{"axis", std::int64_t(1)}, {"input_shape", Ints{3, 4, 2}}},
                        .reference = ref::gather_grad,
                        .fixed_inputs = {{1, i64, 0, 1}}}});  // repeats add up
  register_op({.name = "one_hot", .num_inputs = 1, .infer = one_hot_infer, .grad = nullptr,
               .test = {.shapes = {{2, 3}},
                        .attrs = {{"depth", std::int64_t(4)}, {"dtype", DType::f32},
                                  {"on_value", 2.5}, {"off_value", -0.5}},
                        .reference = ref::one_hot, .gradcheck = false,
                        .fixed_inputs = {{0, i64, -1, 4}}}});  // outside [0, 4): off row
}
}  // namespace detail

// ---- public functions ----
Tensor concat(const std::vector<Tensor>& ts, std::int64_t axis) {
  if (ts.empty()) fail("concat", "needs at least one tensor, got an empty list");
  static const OpDef& d = get_op("concat");
  return call_op1(d, ts, {{"axis", axis}});
}

// expand_dims is a free view, so stack is concat of the expanded inputs.
Tensor stack(const std::vector<Tensor>& ts, std::int64_t axis) {
  if (ts.empty()) fail("stack", "needs at least one tensor, got an empty list");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (!ts[i].defined()) fail("stack", "input ", i, " is an undefined Tensor");
    if (ts[i].dtype() != ts[0].dtype())
      fail("stack", "input ", i, " has dtype ", dtype_name(ts[i].dtype()),
           " but input 0 has dtype ", dtype_name(ts[0].dtype()), " (cast them to one dtype first)");
    if (ts[i].shape() != ts[0].shape())
      fail("stack", "input ", i, " has shape ", shape_str(ts[i].shape()), " but input 0 has shape ",
           shape_str(ts[0].shape()), "; all inputs must have the same shape (stacking on axis ",
           axis, ")");
  }
  int ax = normalize_axis(axis, ts[0].rank() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(ts.size());
  for (const auto& t : ts) parts.push_back(expand_dims(t, ax));
  return concat(parts, ax);
}

std::vector<Tensor> unstack(const Tensor& t, std::int64_t axis) {
  static const OpDef& d = get_op("unstack");
  return call_op(d, {t}, {{"axis", axis}});
}

std::vector<Tensor> split(const Tensor& t, std::int64_t num, std::int64_t axis) {
  int ax = normalize_axis(axis, t.rank(), "split");
  std::int64_t n = t.shape()[std::size_t(ax)];
  if (num <= 0) fail("split", "number of parts must be positive, got ", num);
  if (n % num != 0)
    fail("split", "axis ", ax, " of size ", n, " (shape ", shape_str(t.shape()),
         ") cannot be split into ", num, " equal parts");
  return split(t, std::vector<std::int64_t>(std::size_t(num), n / num), ax);
}

std::vector<Tensor> split(const Tensor& t, const std::vector<std::int64_t>& sizes,
                          std::int64_t axis) {
  int ax = normalize_axis(axis, t.rank(), "split");
  if (sizes.empty()) fail("split", "needs at least one size, got an empty list");
  std::int64_t n = t.shape()[std::size_t(ax)], known = 0;
  int unknown = -1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (unknown >= 0) fail("split", "only one size may be -1, got ", shape_str(sizes));
      unknown = int(i);
    } else if (sizes[i] < 0) {
      fail("split", "sizes must be non-negative (or -1 once), got ", shape_str(sizes));
    } else {
      known += sizes[i];
    }
  }
  std::vector<std::int64_t> resolved = sizes;
  if (unknown >= 0) {
    if (known > n)
      fail("split", "sizes ", shape_str(sizes), " already sum to ", known, " but axis ", ax,
           " has size ", n, " (shape ", shape_str(t.shape()), ")");
    resolved[std::size_t(unknown)] = n - known;
  }
  static const OpDef& d = get_op("split");
  return call_op(d, {t}, {{"axis", std::int64_t(ax)}, {"sizes", resolved}});
}

// Interleave a 1 before every axis, broadcast those to the multiples, then merge the pairs:
// [d0, d1] -> [1, d0, 1, d1] -> [m0, d0, m1, d1] -> [m0*d0, m1*d1]. The gradient (sum_to over
// the broadcast axes) comes with the ops.
Tensor tile(const Tensor& t, const std::vector<std::int64_t>& multiples) {
  if (std::int64_t(multiples.size()) != t.rank())
    fail("tile", "multiples ", shape_str(multiples), " has ", multiples.size(),
         " entries for a tensor of shape ", shape_str(t.shape()), " (expected one per axis, ",
         t.rank(), ")");
  Shape inter, big, out;
  for (std::size_t d = 0; d < multiples.size(); ++d) {
    if (multiples[d] < 0)
      fail("tile", "multiples must be non-negative, got ", shape_str(multiples));
    std::int64_t n = t.shape()[d];
    inter.insert(inter.end(), {1, n});
    big.insert(big.end(), {multiples[d], n});
    out.push_back(multiples[d] * n);
  }
  return reshape(broadcast_to(reshape(t, inter), big), out);
}

Tensor pad(const Tensor& t, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings,
           double value) {
  std::vector<std::int64_t> flat;
  flat.reserve(2 * paddings.size());
  for (auto [b, e] : paddings) flat.insert(flat.end(), {b, e});
  static const OpDef& d = get_op("pad");
  return call_op1(d, {t}, {{"paddings", flat}, {"value", value}});
}

// Indices may be negative (counted from the end, as in Python); out of range is an error.
Tensor gather(const Tensor& t, const Tensor& indices, std::int64_t axis) {
  static const OpDef& d = get_op("gather");
  return call_op1(d, {t, indices}, {{"axis", axis}});
}

// Indices outside [0, depth) give a row of off_value, as in TensorFlow.
Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype, double on_value,
               double off_value) {
  static const OpDef& d = get_op("one_hot");
  return call_op1(d, {indices},
                  {{"depth", depth}, {"dtype", dtype}, {"on_value", on_value},
                   {"off_value", off_value}});
}

}  // namespace soma
