// Scan, sort and element-index op definitions: cumsum, cumprod (+ cumprod_grad), sort (values
// and indices), topk, triu, tril, roll, flip, take_along_axis and scatter (reductions none, add,
// mul, max, min), with their f64 references and the public functions (index_add is a composite
// of gather_grad). CPU kernels: src/backend/cpu/sort_scan.cpp; CUDA kernels:
// src/backend/cuda/sort_scan.cu and sort_scan_ops.cpp; the index math both share:
// src/backend/cuda/sort_scan_index.hpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "internal/registration.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {

using G = const GradContext&;
using Ints = std::vector<std::int64_t>;
using Specs = std::vector<TensorSpec>;

std::int64_t prod(const Shape& s, std::size_t b, std::size_t e) {
  std::int64_t n = 1;
  for (std::size_t i = b; i < e; ++i) n *= s[i];
  return n;
}

void check_numeric(DType t, const char* op) {
  if (t == DType::boolean)
    fail(op, "dtype bool is not supported (expected a numeric dtype: f32, f64, f16, bf16, i32, "
             "i64 or u8)");
}
void check_index_dtype(DType t, const char* op) {
  if (t != DType::i32 && t != DType::i64)
    fail(op, "indices must have dtype i32 or i64, got ", dtype_name(t));
}

// ---- cumsum / cumprod (attrs axis, exclusive, reverse: ONNX CumSum's) ----
Specs scan_infer_impl(const Specs& in, const Attrs& a, const char* op) {
  if (in[0].shape.empty()) fail(op, "needs an input of rank >= 1, got a scalar (shape [])");
  check_numeric(in[0].dtype, op);
  normalize_axis(a.i("axis"), std::int64_t(in[0].shape.size()), op);
  return {in[0]};
}
Specs cumsum_infer(const Specs& in, const Attrs& a) { return scan_infer_impl(in, a, "cumsum"); }
Specs cumprod_infer(const Specs& in, const Attrs& a) { return scan_infer_impl(in, a, "cumprod"); }
Specs cumprod_grad_infer(const Specs& in, const Attrs& a) {
  if (in[0].shape != in[1].shape || in[0].dtype != in[1].dtype)
    fail("cumprod_grad", "gradient ", shape_str(in[1].shape), " ", dtype_name(in[1].dtype),
         " does not match the input ", shape_str(in[0].shape), " ", dtype_name(in[0].dtype));
  return scan_infer_impl(in, a, "cumprod_grad");
}

Attrs scan_attrs(std::int64_t axis, bool exclusive, bool reverse) {
  return {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}};
}

// The gradient of a cumulative sum is the cumulative sum the other way (same exclusivity).
std::vector<Tensor> cumsum_grad(G c) {
  return {cumsum(c.grads[0], c.attrs.i("axis"), c.attrs.b("exclusive"), !c.attrs.b("reverse"))};
}
std::vector<Tensor> cumprod_grad(G c) {
  static const OpDef& d = get_op("cumprod_grad");
  return {call_op1(d, {c.inputs[0], c.grads[0]}, c.attrs)};
}

// ---- sort (outputs: values, i64 indices) and topk ----
Specs sort_infer(const Specs& in, const Attrs& a) {
  if (in[0].shape.empty()) fail("sort", "needs an input of rank >= 1, got a scalar (shape [])");
  normalize_axis(a.i("axis"), std::int64_t(in[0].shape.size()), "sort");
  return {in[0], {in[0].shape, DType::i64}};
}
Specs topk_infer(const Specs& in, const Attrs& a) {
  const Shape& s = in[0].shape;
  if (s.empty()) fail("topk", "needs an input of rank >= 1, got a scalar (shape [])");
  const int ax = normalize_axis(a.i("axis"), std::int64_t(s.size()), "topk");
  const std::int64_t k = a.i("k"), n = s[std::size_t(ax)];
  if (k < 0 || k > n)
    fail("topk", "k is ", k, " but axis ", ax, " of shape ", shape_str(s), " has ", n,
         " elements (expected 0 <= k <= ", n, ")");
  Shape o = s;
  o[std::size_t(ax)] = k;
  return {{o, in[0].dtype}, {o, DType::i64}};
}
// The values' gradient goes back to where each value came from.
std::vector<Tensor> sort_grad(G c) {
  return {scatter(zeros_like(c.inputs[0]), c.attrs.i("axis"), c.outputs[1], c.grads[0], "add")};
}

// ---- triu / tril (attr k: the diagonal; 0 main, > 0 above, < 0 below) ----
Specs tri_infer_impl(const Specs& in, const char* op) {
  if (in[0].shape.size() < 2)
    fail(op, "needs an input of rank >= 2 (a matrix or a batch of them), got shape ",
         shape_str(in[0].shape));
  return {in[0]};
}
Specs triu_infer(const Specs& in, const Attrs&) { return tri_infer_impl(in, "triu"); }
Specs tril_infer(const Specs& in, const Attrs&) { return tri_infer_impl(in, "tril"); }
std::vector<Tensor> triu_grad(G c) { return {triu(c.grads[0], c.attrs.i("k"))}; }
std::vector<Tensor> tril_grad(G c) { return {tril(c.grads[0], c.attrs.i("k"))}; }

// ---- roll (shifts, axes: one shift per axis) / flip (axes) ----
Specs roll_infer(const Specs& in, const Attrs& a) {
  const auto& sh = a.ints("shifts");
  const auto& ax = a.ints("axes");
  if (sh.size() != ax.size() || ax.empty())
    fail("roll", "got ", sh.size(), " shifts ", shape_str(sh), " for ", ax.size(), " axes ",
         shape_str(ax), " (expected one shift per axis, at least one)");
  for (auto d : ax) normalize_axis(d, std::int64_t(in[0].shape.size()), "roll");
  return {in[0]};
}
std::vector<Tensor> roll_grad(G c) {
  Ints back = c.attrs.ints("shifts");
  for (auto& s : back) s = -s;
  return {roll(c.grads[0], back, c.attrs.ints("axes"))};
}
Specs flip_infer(const Specs& in, const Attrs& a) {
  normalize_axes(a.ints("axes"), std::int64_t(in[0].shape.size()), "flip");
  return {in[0]};
}
std::vector<Tensor> flip_grad(G c) { return {flip(c.grads[0], c.attrs.ints("axes"))}; }

// ---- take_along_axis (x, indices) / scatter (x, indices, updates) ----
// The indices have x's rank and, off the axis, at most x's sizes (PyTorch's gather/scatter;
// ONNX GatherElements/ScatterElements); the public take_along_axis broadcasts first (NumPy).
void check_element_indices(const Shape& x, const Shape& ids, int ax, const char* op) {
  if (ids.size() != x.size())
    fail(op, "indices of shape ", shape_str(ids), " for data of shape ", shape_str(x),
         " (expected indices of the same rank, ", x.size(), ")");
  for (std::size_t d = 0; d < x.size(); ++d)
    if (int(d) != ax && ids[d] > x[d])
      fail(op, "indices of shape ", shape_str(ids), " for data of shape ", shape_str(x),
           ": dimension ", d, " is ", ids[d], " (expected at most ", x[d],
           " off the axis ", ax, ")");
}
Specs take_along_axis_infer(const Specs& in, const Attrs& a) {
  check_index_dtype(in[1].dtype, "take_along_axis");
  if (in[0].shape.empty()) fail("take_along_axis", "needs data of rank >= 1, got a scalar");
  const int ax = normalize_axis(a.i("axis"), std::int64_t(in[0].shape.size()), "take_along_axis");
  check_element_indices(in[0].shape, in[1].shape, ax, "take_along_axis");
  if (in[0].shape[std::size_t(ax)] == 0 && numel(in[1].shape) > 0)
    fail("take_along_axis", "axis ", ax, " of data ", shape_str(in[0].shape),
         " is empty, so no index of ", shape_str(in[1].shape), " can address it");
  return {{in[1].shape, in[0].dtype}};
}
// The op itself (PyTorch's gather: indices may be smaller than the data off the axis), for the
// gradients, where the public function's NumPy broadcasting does not apply.
Tensor take(const Tensor& t, const Tensor& ids, std::int64_t axis) {
  static const OpDef& d = get_op("take_along_axis");
  return call_op1(d, {t, ids}, {{"axis", axis}});
}
std::vector<Tensor> take_along_axis_grad(G c) {
  return {scatter(zeros_like(c.inputs[0]), c.attrs.i("axis"), c.inputs[1], c.grads[0], "add"),
          Tensor()};
}

const char* const kReductions[] = {"none", "add", "mul", "max", "min"};
int reduction_of(const std::string& r) {
  for (int i = 0; i < 5; ++i)
    if (r == kReductions[i]) return i;
  fail("scatter", "reduction '", r, "' is not one of none, add, mul, max, min");
}
Specs scatter_infer(const Specs& in, const Attrs& a) {
  check_index_dtype(in[1].dtype, "scatter");
  reduction_of(a.s("reduction"));
  if (in[0].shape.empty()) fail("scatter", "needs data of rank >= 1, got a scalar");
  const int ax = normalize_axis(a.i("axis"), std::int64_t(in[0].shape.size()), "scatter");
  check_element_indices(in[0].shape, in[1].shape, ax, "scatter");
  if (in[2].shape != in[1].shape)
    fail("scatter", "updates of shape ", shape_str(in[2].shape), " for indices of shape ",
         shape_str(in[1].shape), " (expected the same shape)");
  if (in[2].dtype != in[0].dtype)
    fail("scatter", "updates have dtype ", dtype_name(in[2].dtype), " but the data has ",
         dtype_name(in[0].dtype), " (cast them to one dtype first)");
  if (in[0].shape[std::size_t(ax)] == 0 && numel(in[1].shape) > 0)
    fail("scatter", "axis ", ax, " of data ", shape_str(in[0].shape),
         " is empty, so no index of ", shape_str(in[1].shape), " can address it");
  return {in[0]};
}
std::vector<Tensor> scatter_grad(G c) {
  const Tensor& x = c.inputs[0];
  const Tensor& ids = c.inputs[1];
  const Tensor& u = c.inputs[2];
  const Tensor& g = c.grads[0];
  const Tensor& y = c.outputs[0];
  const std::int64_t ax = c.attrs.i("axis");
  const std::string& r = c.attrs.s("reduction");
  const Tensor gu = take(g, ids, ax);
  switch (reduction_of(r)) {
    case 1:  // add
      return {g, Tensor(), gu};
    case 0: {  // none: written places take no gradient from x; of repeats only the last counts
      const Tensor hit = scatter(zeros_like(x), ax, ids, ones_like(u), "none");
      const Tensor pos =
          reshape(arange(0, double(u.numel()), 1, DType::i64), u.shape()).to(u.device());
      const Tensor winner = scatter(cast(zeros_like(x), DType::i64), ax, ids, pos, "none");
      const Tensor won = cast(equal(take(winner, ids, ax), pos), g.dtype());
      return {g * (1.0 - hit), Tensor(), gu * won};
    }
    case 2: {  // mul: y = x * prod(updates there); the updates' gradient divides by the update
      const Tensor others = scatter(ones_like(x), ax, ids, u, "mul");
      return {g * others, Tensor(), take(g * y, ids, ax) / u};
    }
    default: {  // max, min: the gradient goes to every value equal to the result
      const Tensor zero = zeros_like(g);
      const Tensor yu = take(y, ids, ax);
      return {where(equal(x, y), g, zero), Tensor(), where(equal(u, yu), gu, zeros_like(gu))};
    }
  }
}

// ---- f64 references: naive loops over row-major multi-indices ----
namespace ref {
struct Nd {
  Shape shape;
  std::vector<double> v;
};
Nd nd(const Tensor& t) { return {t.shape(), t.to_vector<double>()}; }
Tensor tensor(const Nd& a, DType dtype) { return cast(constant(a.v, a.shape), dtype); }
Ints unravel(std::int64_t i, const Shape& s) {
  Ints idx(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}
std::int64_t ravel(const Ints& idx, const Shape& s) {
  std::int64_t i = 0;
  for (std::size_t d = 0; d < s.size(); ++d) i = i * s[d] + idx[d];
  return i;
}
// Every line along `ax`: the flat positions of its elements, in order.
std::vector<Ints> lines(const Shape& s, int ax) {
  std::vector<Ints> out;
  for (std::int64_t i = 0; i < numel(s); ++i) {
    Ints idx = unravel(i, s);
    if (idx[std::size_t(ax)] != 0) continue;
    Ints line;
    for (std::int64_t j = 0; j < s[std::size_t(ax)]; ++j) {
      idx[std::size_t(ax)] = j;
      line.push_back(ravel(idx, s));
    }
    out.push_back(line);
  }
  if (s[std::size_t(ax)] == 0) out.clear();
  return out;
}

template <bool Prod>
std::vector<Tensor> scan(const std::vector<Tensor>& in, const Attrs& a) {
  Nd x = nd(in[0]), y = x;
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "cumsum");
  const bool excl = a.b("exclusive"), rev = a.b("reverse");
  for (const Ints& line : lines(x.shape, ax)) {
    const std::int64_t n = std::int64_t(line.size());
    for (std::int64_t i = 0; i < n; ++i) {
      double acc = Prod ? 1.0 : 0.0;
      for (std::int64_t j = 0; j < n; ++j) {
        const bool in_range = rev ? (excl ? j > i : j >= i) : (excl ? j < i : j <= i);
        if (in_range) acc = Prod ? acc * x.v[std::size_t(line[std::size_t(j)])]
                                 : acc + x.v[std::size_t(line[std::size_t(j)])];
      }
      y.v[std::size_t(line[std::size_t(i)])] = acc;
    }
  }
  return {tensor(y, in[0].dtype())};
}
// dx_k = sum_i g_i * d y_i / d x_k, the product over the range of i without x_k (no division).
std::vector<Tensor> cumprod_grad(const std::vector<Tensor>& in, const Attrs& a) {
  Nd x = nd(in[0]), g = nd(in[1]), dx = x;
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "cumprod_grad");
  const bool excl = a.b("exclusive"), rev = a.b("reverse");
  auto covers = [&](std::int64_t i, std::int64_t j) {
    return rev ? (excl ? j > i : j >= i) : (excl ? j < i : j <= i);
  };
  for (const Ints& line : lines(x.shape, ax)) {
    const std::int64_t n = std::int64_t(line.size());
    auto X = [&](std::int64_t j) { return x.v[std::size_t(line[std::size_t(j)])]; };
    for (std::int64_t k = 0; k < n; ++k) {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        if (!covers(i, k)) continue;
        double p = g.v[std::size_t(line[std::size_t(i)])];
        for (std::int64_t j = 0; j < n; ++j)
          if (j != k && covers(i, j)) p *= X(j);
        s += p;
      }
      dx.v[std::size_t(line[std::size_t(k)])] = s;
    }
  }
  return {tensor(dx, in[0].dtype())};
}

// Stable order of a line: NaN after everything ascending, before everything descending.
Ints order(const std::vector<double>& v, bool desc) {
  Ints idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto less = [&](std::int64_t i, std::int64_t j) {
    const double a = v[std::size_t(i)], b = v[std::size_t(j)];
    if (std::isnan(a) || std::isnan(b)) return desc ? std::isnan(a) && !std::isnan(b)
                                                    : !std::isnan(a) && std::isnan(b);
    return desc ? a > b : a < b;
  };
  std::stable_sort(idx.begin(), idx.end(), less);
  return idx;
}
std::vector<Tensor> sorted_prefix(const Tensor& t, int ax, std::int64_t k, bool desc) {
  Nd x = nd(t);
  Shape os = x.shape;
  os[std::size_t(ax)] = k;
  Nd vals{os, std::vector<double>(std::size_t(numel(os)))}, ids = vals;
  const auto in_lines = lines(x.shape, ax);
  const auto out_lines = lines(os, ax);
  for (std::size_t l = 0; l < out_lines.size(); ++l) {
    std::vector<double> v;
    for (auto p : in_lines[l]) v.push_back(x.v[std::size_t(p)]);
    Ints o = order(v, desc);
    for (std::int64_t j = 0; j < k; ++j) {
      vals.v[std::size_t(out_lines[l][std::size_t(j)])] = v[std::size_t(o[std::size_t(j)])];
      ids.v[std::size_t(out_lines[l][std::size_t(j)])] = double(o[std::size_t(j)]);
    }
  }
  return {tensor(vals, t.dtype()), tensor(ids, DType::i64)};
}
std::vector<Tensor> sort(const std::vector<Tensor>& in, const Attrs& a) {
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "sort");
  return sorted_prefix(in[0], ax, in[0].shape()[std::size_t(ax)], a.b("descending"));
}
std::vector<Tensor> topk(const std::vector<Tensor>& in, const Attrs& a) {
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "topk");
  const std::int64_t k = a.i("k");
  if (k < 0 || k > in[0].shape()[std::size_t(ax)]) fail("topk", "reference: k out of range");
  return sorted_prefix(in[0], ax, k, a.b("largest"));
}

template <bool Upper>
std::vector<Tensor> tri(const std::vector<Tensor>& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const std::int64_t k = a.i("k");
  for (std::int64_t i = 0; i < numel(x.shape); ++i) {
    Ints idx = unravel(i, x.shape);
    const std::int64_t r = idx[idx.size() - 2], c = idx.back();
    if (Upper ? c - r < k : c - r > k) x.v[std::size_t(i)] = 0;
  }
  return {tensor(x, in[0].dtype())};
}

std::vector<Tensor> roll(const std::vector<Tensor>& in, const Attrs& a) {
  Nd x = nd(in[0]), y = x;
  const auto& sh = a.ints("shifts");
  const auto& axes = a.ints("axes");
  for (std::int64_t i = 0; i < numel(x.shape); ++i) {
    Ints idx = unravel(i, x.shape);
    for (std::size_t j = 0; j < axes.size(); ++j) {
      const auto d = std::size_t(normalize_axis(axes[j], in[0].rank(), "roll"));
      const std::int64_t n = x.shape[d];
      idx[d] = ((idx[d] + sh[j]) % n + n) % n;
    }
    y.v[std::size_t(ravel(idx, x.shape))] = x.v[std::size_t(i)];
  }
  return {tensor(y, in[0].dtype())};
}

std::vector<Tensor> flip(const std::vector<Tensor>& in, const Attrs& a) {
  Nd x = nd(in[0]), y = x;
  const auto axes = normalize_axes(a.ints("axes"), in[0].rank(), "flip");
  for (std::int64_t i = 0; i < numel(x.shape); ++i) {
    Ints idx = unravel(i, x.shape);
    for (int d : axes) idx[std::size_t(d)] = x.shape[std::size_t(d)] - 1 - idx[std::size_t(d)];
    y.v[std::size_t(ravel(idx, x.shape))] = x.v[std::size_t(i)];
  }
  return {tensor(y, in[0].dtype())};
}

// The data position ids element i addresses.
std::int64_t element_pos(const Nd& ids, std::int64_t i, const Shape& s, int ax, const char* op) {
  Ints idx = unravel(i, ids.shape);
  const std::int64_t n = s[std::size_t(ax)];
  std::int64_t j = std::int64_t(ids.v[std::size_t(i)]);
  if (j < -n || j >= n) fail(op, "reference: index ", j, " out of range for size ", n);
  idx[std::size_t(ax)] = j < 0 ? j + n : j;
  return ravel(idx, s);
}
std::vector<Tensor> take_along_axis(const std::vector<Tensor>& in, const Attrs& a) {
  Nd x = nd(in[0]), ids = nd(in[1]);
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "take_along_axis");
  Nd y{ids.shape, std::vector<double>(ids.v.size())};
  for (std::int64_t i = 0; i < numel(ids.shape); ++i)
    y.v[std::size_t(i)] = x.v[std::size_t(element_pos(ids, i, x.shape, ax, "take_along_axis"))];
  return {tensor(y, in[0].dtype())};
}
std::vector<Tensor> scatter(const std::vector<Tensor>& in, const Attrs& a) {
  Nd x = nd(in[0]), ids = nd(in[1]), u = nd(in[2]);
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "scatter");
  const int r = reduction_of(a.s("reduction"));
  for (std::int64_t i = 0; i < numel(ids.shape); ++i) {  // in order: the last write wins
    double& o = x.v[std::size_t(element_pos(ids, i, x.shape, ax, "scatter"))];
    const double v = u.v[std::size_t(i)];
    o = r == 0 ? v : r == 1 ? o + v : r == 2 ? o * v
        : r == 3 ? (std::isnan(v) || v > o ? v : o) : (std::isnan(v) || v < o ? v : o);
  }
  return {tensor(x, in[0].dtype())};
}
}  // namespace ref

}  // namespace

namespace detail {
void register_sort_scan_ops() {
  const DType i64 = DType::i64;
  const std::vector<AttrSpec> scan = {
      {"axis", std::int64_t(0)}, {"exclusive", false}, {"reverse", false}};
  const Attrs scan_test = scan_attrs(1, false, true);
  register_op({.name = "cumsum", .num_inputs = 1, .infer = cumsum_infer, .grad = cumsum_grad,
               .attrs = scan,
               .test = {.shapes = {{3, 4}}, .attrs = scan_test, .reference = ref::scan<false>}});
  register_op({.name = "cumprod", .num_inputs = 1, .infer = cumprod_infer, .grad = cumprod_grad,
               .attrs = scan,
               .test = {.shapes = {{4, 3}}, .attrs = scan_attrs(0, true, false),
                        .reference = ref::scan<true>}});
  register_op({.name = "cumprod_grad", .num_inputs = 2, .infer = cumprod_grad_infer,
               .attrs = scan,
               .test = {.shapes = {{3, 4}, {3, 4}}, .attrs = scan_test,
                        .reference = ref::cumprod_grad, .gradcheck = false}});
  register_op({.name = "sort", .num_inputs = 1, .infer = sort_infer, .grad = sort_grad,
               .attrs = {{"axis", std::int64_t(-1)}, {"descending", false}, {"stable", true}},
               .test = {.shapes = {{3, 5}},
                        .attrs = {{"axis", std::int64_t(1)}, {"descending", true},
                                  {"stable", true}},
                        .reference = ref::sort}});
  register_op({.name = "topk", .num_inputs = 1, .infer = topk_infer, .grad = sort_grad,
               .attrs = {{"k", std::int64_t(1)}, {"axis", std::int64_t(-1)}, {"largest", true},
                         {"sorted", true}},
               .test = {.shapes = {{4, 6}},
                        .attrs = {{"k", std::int64_t(3)}, {"axis", std::int64_t(0)},
                                  {"largest", false}, {"sorted", true}},
                        .reference = ref::topk}});
  register_op({.name = "triu", .num_inputs = 1, .infer = triu_infer, .grad = triu_grad,
               .tags = kShapeOnly, .attrs = {{"k", std::int64_t(0)}},
               .test = {.shapes = {{2, 3, 4}}, .attrs = {{"k", std::int64_t(1)}},
                        .reference = ref::tri<true>}});
  register_op({.name = "tril", .num_inputs = 1, .infer = tril_infer, .grad = tril_grad,
               .tags = kShapeOnly, .attrs = {{"k", std::int64_t(0)}},
               .test = {.shapes = {{4, 3}}, .attrs = {{"k", std::int64_t(-1)}},
                        .reference = ref::tri<false>}});
  register_op({.name = "roll", .num_inputs = 1, .infer = roll_infer, .grad = roll_grad,
               .tags = kShapeOnly, .attrs = {{"shifts", Ints{}}, {"axes", Ints{}}},
               .test = {.shapes = {{3, 4, 2}},
                        .attrs = {{"shifts", Ints{1, -5}}, {"axes", Ints{0, -2}}},
                        .reference = ref::roll}});
  register_op({.name = "flip", .num_inputs = 1, .infer = flip_infer, .grad = flip_grad,
               .tags = kShapeOnly, .attrs = {{"axes", Ints{}}},
               .test = {.shapes = {{3, 4, 2}}, .attrs = {{"axes", Ints{0, 2}}},
                        .reference = ref::flip}});
  register_op({.name = "take_along_axis", .num_inputs = 2, .infer = take_along_axis_infer,
               .grad = take_along_axis_grad, .tags = kShapeOnly,
               .attrs = {{"axis", std::int64_t(0)}},
               .onnx = {.op_type = "GatherElements", .min_opset = 11, .attrs = {{"axis", "axis"}}},
               .test = {.shapes = {{4, 3}, {5, 2}}, .attrs = {{"axis", std::int64_t(0)}},
                        .reference = ref::take_along_axis,
                        .fixed_inputs = {{1, i64, -4, 3}}}});  // negative: from the end
  register_op({.name = "scatter", .num_inputs = 3, .infer = scatter_infer, .grad = scatter_grad,
               .attrs = {{"axis", std::int64_t(0)}, {"reduction", std::string("none")}},
               .onnx = {.op_type = "ScatterElements", .min_opset = 16,
                        .attrs = {{"axis", "axis"}, {"reduction", "reduction"}}},
               .test = {.shapes = {{4, 3}, {3, 2}, {3, 2}},
                        .attrs = {{"axis", std::int64_t(0)}, {"reduction", std::string("none")}},
                        .reference = ref::scatter,
                        .fixed_inputs = {{1, i64, -4, 3}}}});  // repeats: the last one wins
}
}  // namespace detail

// ---- public functions ----
Tensor cumsum(const Tensor& t, std::int64_t axis, bool exclusive, bool reverse) {
  static const OpDef& d = get_op("cumsum");
  return call_op1(d, {t}, scan_attrs(axis, exclusive, reverse));
}
Tensor cumprod(const Tensor& t, std::int64_t axis, bool exclusive, bool reverse) {
  static const OpDef& d = get_op("cumprod");
  return call_op1(d, {t}, scan_attrs(axis, exclusive, reverse));
}
Tensor sort(const Tensor& t, std::int64_t axis, bool descending, bool stable) {
  static const OpDef& d = get_op("sort");
  return call_op(d, {t}, {{"axis", axis}, {"descending", descending}, {"stable", stable}})[0];
}
Tensor argsort(const Tensor& t, std::int64_t axis, bool descending, bool stable) {
  static const OpDef& d = get_op("sort");
  return call_op(d, {t}, {{"axis", axis}, {"descending", descending}, {"stable", stable}})[1];
}
std::pair<Tensor, Tensor> topk(const Tensor& t, std::int64_t k, std::int64_t axis, bool largest,
                               bool sorted) {
  static const OpDef& d = get_op("topk");
  auto out = call_op(d, {t}, {{"k", k}, {"axis", axis}, {"largest", largest}, {"sorted", sorted}});
  return {out[0], out[1]};
}
Tensor triu(const Tensor& t, std::int64_t k) {
  static const OpDef& d = get_op("triu");
  return call_op1(d, {t}, {{"k", k}});
}
Tensor tril(const Tensor& t, std::int64_t k) {
  static const OpDef& d = get_op("tril");
  return call_op1(d, {t}, {{"k", k}});
}
// No axes: NumPy's roll of the flattened tensor.
Tensor roll(const Tensor& t, const std::vector<std::int64_t>& shifts, const Axes& axes) {
  static const OpDef& d = get_op("roll");
  if (axes.empty()) {
    if (shifts.size() != 1)
      fail("roll", "without axes the tensor is rolled flat and takes one shift, got ",
           shifts.size(), " shifts ", shape_str(shifts));
    if (t.numel() == 0) return t;
    return reshape(call_op1(d, {reshape(t, {-1})}, {{"shifts", shifts}, {"axes", Ints{0}}}),
                   t.shape());
  }
  return call_op1(d, {t}, {{"shifts", shifts}, {"axes", axes}});
}
Tensor flip(const Tensor& t, const Axes& axes) {
  static const OpDef& d = get_op("flip");
  return call_op1(d, {t}, {{"axes", axes}});
}
// NumPy: the indices and the data broadcast against each other off the axis (a size-1 dim
// stretches); indices smaller than the data there are taken as they are (PyTorch's gather).
Tensor take_along_axis(const Tensor& t, const Tensor& indices, std::int64_t axis) {
  if (indices.rank() != t.rank() || t.rank() == 0)
    return take(t, indices, axis);  // the shape rule names the problem
  const int ax = normalize_axis(axis, t.rank(), "take_along_axis");
  Shape ts = t.shape(), is = indices.shape();
  bool same = true;
  for (std::size_t k = 0; k < ts.size(); ++k) {
    if (int(k) == ax || ts[k] == is[k] || (ts[k] != 1 && is[k] != 1)) continue;
    same = false;
    ts[k] = is[k] = std::max(ts[k], is[k]);
  }
  if (same) return take(t, indices, axis);
  return take(broadcast_to(t, ts), broadcast_to(indices, is), axis);
}
Tensor scatter(const Tensor& t, std::int64_t axis, const Tensor& indices, const Tensor& updates,
               const std::string& reduction) {
  static const OpDef& d = get_op("scatter");
  return call_op1(d, {t, indices, updates}, {{"axis", axis}, {"reduction", reduction}});
}
Tensor scatter_add(const Tensor& t, std::int64_t axis, const Tensor& indices,
                   const Tensor& updates) {
  return scatter(t, axis, indices, updates, "add");
}
// t + alpha * (source's slices added at their indices along the axis): gather's gradient op.
Tensor index_add(const Tensor& t, std::int64_t axis, const Tensor& index, const Tensor& source,
                 double alpha) {
  static const OpDef& d = get_op("gather_grad");
  if (t.rank() == 0) fail("index_add", "needs a tensor of rank >= 1, got a scalar");
  const int ax = normalize_axis(axis, t.rank(), "index_add");
  if (index.rank() != 1)
    fail("index_add", "index must be 1-d, got shape ", shape_str(index.shape()));
  Shape want = t.shape();
  want[std::size_t(ax)] = index.numel();
  if (source.shape() != want)
    fail("index_add", "source has shape ", shape_str(source.shape()), " for data of shape ",
         shape_str(t.shape()), " and ", index.numel(), " indices on axis ", ax, " (expected ",
         shape_str(want), ")");
  Attrs a;
  a.set("axis", std::int64_t(ax));
  a.set("input_shape", t.shape());
  Tensor added = call_op1(d, {source, index}, a);
  return alpha == 1.0 ? t + added : t + added * alpha;
}

}  // namespace soma
