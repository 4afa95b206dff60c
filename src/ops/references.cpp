// Naive f64 references for the op test table (see references.hpp). Every op is written as loops
// over row-major multi-indices of plain std::vector<double> buffers: no kernel, view or
// broadcasting helper of soma is used, only constant()/cast() to wrap the results.
#include "references.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "soma/ops.hpp"

namespace soma::ref {

namespace {

using Ints = std::vector<std::int64_t>;

// A row-major f64 array.
struct Nd {
  Shape shape;
  std::vector<double> v;
};

std::int64_t count(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
Nd nd(const Tensor& t) { return {t.shape(), t.to_vector<double>()}; }
Nd filled(const Shape& s, double value) {
  return {s, std::vector<double>(std::size_t(count(s)), value)};
}
Tensor tensor(const Nd& a, DType dtype = DType::f64) {
  return soma::cast(constant(a.v, a.shape), dtype);
}

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
double& at(Nd& a, const Ints& idx) { return a.v[std::size_t(ravel(idx, a.shape))]; }
double at(const Nd& a, const Ints& idx) { return a.v[std::size_t(ravel(idx, a.shape))]; }

std::int64_t axis_of(std::int64_t axis, std::size_t rank, const char* op) {
  const auto r = std::int64_t(rank);
  if (axis < -r || axis >= r) fail(op, "reference: axis ", axis, " out of range for rank ", r);
  return axis < 0 ? axis + r : axis;
}

// ---- reductions ----
bool reduced(const Ints& axes, std::size_t d) {
  return std::find(axes.begin(), axes.end(), std::int64_t(d)) != axes.end();
}
Shape reduce_shape(const Shape& s, const Ints& axes, bool keepdims) {
  Shape out;
  for (std::size_t d = 0; d < s.size(); ++d)
    if (!reduced(axes, d)) out.push_back(s[d]);
    else if (keepdims) out.push_back(1);
  return out;
}
// out index of input index `idx` (reduced axes dropped, or set to 0 with keepdims)
Ints reduce_index(const Ints& idx, const Ints& axes, bool keepdims) {
  Ints o;
  for (std::size_t d = 0; d < idx.size(); ++d)
    if (!reduced(axes, d)) o.push_back(idx[d]);
    else if (keepdims) o.push_back(0);
  return o;
}

template <class F>
Nd reduce(const Nd& x, const Ints& axes, bool keepdims, double init, F f) {
  Nd out = filled(reduce_shape(x.shape, axes, keepdims), init);
  for (std::int64_t i = 0; i < count(x.shape); ++i) {
    double& o = at(out, reduce_index(unravel(i, x.shape), axes, keepdims));
    o = f(o, x.v[std::size_t(i)]);
  }
  return out;
}

std::int64_t reduced_count(const Shape& s, const Ints& axes) {
  std::int64_t n = 1;
  for (auto a : axes) n *= s[std::size_t(a)];
  return n;
}

void check_identity(const char* op, const Shape& s, const Ints& axes) {
  if (reduced_count(s, axes) == 0 && count(reduce_shape(s, axes, false)) > 0)
    fail(op, "reference: an empty reduction has no identity");
}

Outputs extreme(const Inputs& in, const Attrs& a, const char* op, bool is_max) {
  Nd x = nd(in[0]);
  check_identity(op, x.shape, a.ints("axes"));
  const double inf = std::numeric_limits<double>::infinity();
  return {tensor(reduce(x, a.ints("axes"), a.b("keepdims"), is_max ? -inf : inf,
                        [&](double o, double v) { return is_max ? std::max(o, v) : std::min(o, v); }),
                 in[0].dtype())};
}

Outputs arg_extreme(const Inputs& in, const Attrs& a, const char* op, bool is_max) {
  Nd x = nd(in[0]);
  const Ints axes{axis_of(a.i("axis"), x.shape.size(), op)};
  const bool keep = a.b("keepdims");
  check_identity(op, x.shape, axes);
  const double inf = std::numeric_limits<double>::infinity();
  Nd best = filled(reduce_shape(x.shape, axes, keep), is_max ? -inf : inf);
  Nd arg = filled(best.shape, -1.0);
  for (std::int64_t i = 0; i < count(x.shape); ++i) {
    Ints idx = unravel(i, x.shape);
    Ints o = reduce_index(idx, axes, keep);
    double v = x.v[std::size_t(i)];
    double& b = at(best, o);
    if (at(arg, o) < 0 || (is_max ? v > b : v < b)) {  // first extreme wins ties
      b = v;
      at(arg, o) = double(idx[std::size_t(axes[0])]);
    }
  }
  return {tensor(arg, DType::i64)};
}

Outputs softmax_impl(const Inputs& in, const Attrs& a, bool log) {
  Nd x = nd(in[0]);
  const std::int64_t ax = axis_of(a.i("axis"), x.shape.size(), "softmax");
  const Ints axes{ax};
  const double inf = std::numeric_limits<double>::infinity();
  Nd m = reduce(x, axes, true, -inf, [](double o, double v) { return std::max(o, v); });
  Nd s = filled(m.shape, 0.0);
  for (std::int64_t i = 0; i < count(x.shape); ++i) {
    Ints o = reduce_index(unravel(i, x.shape), axes, true);
    at(s, o) += std::exp(x.v[std::size_t(i)] - at(m, o));
  }
  Nd y = x;
  for (std::int64_t i = 0; i < count(x.shape); ++i) {
    Ints o = reduce_index(unravel(i, x.shape), axes, true);
    const double d = x.v[std::size_t(i)] - at(m, o);
    y.v[std::size_t(i)] = log ? d - std::log(at(s, o)) : std::exp(d) / at(s, o);
  }
  return {tensor(y)};
}

// ---- convolution geometry ----
struct Conv {
  std::int64_t n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, pt, pl, dh, dw, groups;
};
Conv conv_geometry(const Shape& x, const Shape& k, const Attrs& a, const char* op) {
  if (x.size() != 4 || k.size() != 4) fail(op, "reference: expected 4-d input and kernel");
  const Ints &st = a.ints("strides"), &p = a.ints("pads"), &dil = a.ints("dilation");
  Conv g{};
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3], g.o = k[0], g.cg = k[1], g.kh = k[2], g.kw = k[3];
  g.sh = st[0], g.sw = st[1], g.pt = p[0], g.pl = p[2], g.dh = dil[0], g.dw = dil[1];
  g.groups = a.i("groups");
  if (g.groups < 1 || g.c % g.groups || g.o % g.groups || g.cg * g.groups != g.c)
    fail(op, "reference: channels do not match the groups");
  const std::int64_t ph = g.h + p[0] + p[1], pw = g.w + p[2] + p[3];
  const std::int64_t ekh = (g.kh - 1) * g.dh + 1, ekw = (g.kw - 1) * g.dw + 1;
  if (g.kh < 1 || g.kw < 1 || ekh > ph || ekw > pw) fail(op, "reference: window too large");
  g.oh = 1 + (ph - ekh) / g.sh;
  g.ow = 1 + (pw - ekw) / g.sw;
  return g;
}
// Calls f(n, o, oy, ox, ci, c, ky, kx, iy, ix) for every tap that lands inside the input.
template <class F>
void for_each_tap(const Conv& g, F f) {
  const std::int64_t og = g.o / g.groups;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.o; ++o)
      for (std::int64_t oy = 0; oy < g.oh; ++oy)
        for (std::int64_t ox = 0; ox < g.ow; ++ox)
          for (std::int64_t c = 0; c < g.cg; ++c)
            for (std::int64_t ky = 0; ky < g.kh; ++ky)
              for (std::int64_t kx = 0; kx < g.kw; ++kx) {
                const std::int64_t iy = oy * g.sh - g.pt + ky * g.dh;
                const std::int64_t ix = ox * g.sw - g.pl + kx * g.dw;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                f(n, o, oy, ox, (o / og) * g.cg + c, c, ky, kx, iy, ix);
              }
}
Nd conv_forward(const Nd& x, const Nd& k, const Conv& g) {
  Nd y = filled({g.n, g.o, g.oh, g.ow}, 0.0);
  for_each_tap(g, [&](auto n, auto o, auto oy, auto ox, auto ci, auto c, auto ky, auto kx,
                      auto iy, auto ix) {
    at(y, {n, o, oy, ox}) += at(x, {n, ci, iy, ix}) * at(k, {o, c, ky, kx});
  });
  return y;
}
void check_shape(const Shape& got, const Shape& want, const char* op) {
  if (got != want) fail(op, "reference: shape ", shape_str(got), " vs ", shape_str(want));
}

// ---- pooling geometry ----
struct Pool {
  std::int64_t n, c, h, w, ph, pw, sh, sw, pt, pl, oh, ow;
  // the window of (oy, ox) clipped to the input
  void window(std::int64_t oy, std::int64_t ox, std::int64_t& y0, std::int64_t& y1,
              std::int64_t& x0, std::int64_t& x1) const {
    y0 = std::max<std::int64_t>(oy * sh - pt, 0);
    y1 = std::min<std::int64_t>(oy * sh - pt + ph, h);
    x0 = std::max<std::int64_t>(ox * sw - pl, 0);
    x1 = std::min<std::int64_t>(ox * sw - pl + pw, w);
  }
};
Pool pool_geometry(const Shape& x, const Attrs& a, const char* op) {
  if (x.size() != 4) fail(op, "reference: expected a 4-d input");
  const Ints &pool = a.ints("pool"), &st = a.ints("strides"), &p = a.ints("pads");
  if (p[0] >= pool[0] || p[1] >= pool[0] || p[2] >= pool[1] || p[3] >= pool[1])
    fail(op, "reference: padding not smaller than the pool");
  Pool g{x[0], x[1], x[2], x[3], pool[0], pool[1], st[0], st[1], p[0], p[2], 0, 0};
  const std::int64_t hh = g.h + p[0] + p[1], ww = g.w + p[2] + p[3];
  if (g.ph > hh || g.pw > ww) fail(op, "reference: pool window larger than the padded input");
  g.oh = 1 + (hh - g.ph) / g.sh;
  g.ow = 1 + (ww - g.pw) / g.sw;
  return g;
}
// Row-major first maximum of the window of (n, c, oy, ox).
Ints pool_argmax(const Nd& x, const Pool& g, std::int64_t n, std::int64_t c, std::int64_t oy,
                 std::int64_t ox) {
  std::int64_t y0, y1, x0, x1;
  g.window(oy, ox, y0, y1, x0, x1);
  Ints best{n, c, y0, x0};
  for (std::int64_t yy = y0; yy < y1; ++yy)
    for (std::int64_t xx = x0; xx < x1; ++xx)
      if (at(x, {n, c, yy, xx}) > at(x, best)) best = {n, c, yy, xx};
  return best;
}
// The divisor of an average: the real (unpadded) elements of the clipped window, or with attr
// count_include_pad the whole window (every window lies inside the padded input).
double pool_count(const Pool& g, const Attrs& a, std::int64_t y0, std::int64_t y1,
                  std::int64_t x0, std::int64_t x1) {
  if (a.has("count_include_pad") && a.i("count_include_pad")) return double(g.ph * g.pw);
  return double((y1 - y0) * (x1 - x0));
}
template <class F>
void for_each_window(const Pool& g, F f) {
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c)
      for (std::int64_t oy = 0; oy < g.oh; ++oy)
        for (std::int64_t ox = 0; ox < g.ow; ++ox) f(n, c, oy, ox);
}

// slice window: checks that every selected index is inside `s`.
void check_slice(const Shape& s, const Ints& begin, const Ints& step, const Ints& size,
                 const char* op) {
  if (begin.size() != s.size() || step.size() != s.size() || size.size() != s.size())
    fail(op, "reference: attrs do not match the rank");
  for (std::size_t d = 0; d < s.size(); ++d) {
    if (size[d] == 0) continue;
    const std::int64_t last = begin[d] + (size[d] - 1) * step[d];
    if (size[d] < 0 || begin[d] < 0 || begin[d] >= s[d] || last < 0 || last >= s[d])
      fail(op, "reference: slice window outside shape ", shape_str(s));
  }
}
Ints slice_source(const Ints& j, const Ints& begin, const Ints& step) {
  Ints i(j.size());
  for (std::size_t d = 0; d < j.size(); ++d) i[d] = begin[d] + j[d] * step[d];
  return i;
}

Shape resolve_reshape(const Shape& in, const Shape& target) {
  Shape out = target;
  std::int64_t known = 1, unknown = -1;
  for (std::size_t d = 0; d < out.size(); ++d)
    if (out[d] == -1) unknown = std::int64_t(d);
    else known *= out[d];
  if (unknown >= 0) {
    if (known == 0 || count(in) % known) fail("reshape", "reference: cannot reshape");
    out[std::size_t(unknown)] = count(in) / known;
  } else if (known != count(in)) {
    fail("reshape", "reference: cannot reshape");
  }
  return out;
}

}  // namespace

// ---- reductions ----
Outputs sum(const Inputs& in, const Attrs& a) {
  return {tensor(reduce(nd(in[0]), a.ints("axes"), a.b("keepdims"), 0.0,
                        [](double o, double v) { return o + v; }),
                 in[0].dtype())};
}
Outputs mean(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  Nd s = reduce(x, a.ints("axes"), a.b("keepdims"), 0.0, [](double o, double v) { return o + v; });
  const double n = double(reduced_count(x.shape, a.ints("axes")));
  for (auto& v : s.v) v /= n;  // 0/0: NaN for an empty mean
  return {tensor(s)};
}
Outputs prod(const Inputs& in, const Attrs& a) {
  return {tensor(reduce(nd(in[0]), a.ints("axes"), a.b("keepdims"), 1.0,
                        [](double o, double v) { return o * v; }),
                 in[0].dtype())};
}
Outputs max(const Inputs& in, const Attrs& a) { return extreme(in, a, "max", true); }
Outputs min(const Inputs& in, const Attrs& a) { return extreme(in, a, "min", false); }
Outputs all(const Inputs& in, const Attrs& a) {
  return {tensor(reduce(nd(in[0]), a.ints("axes"), a.b("keepdims"), 1.0,
                        [](double o, double v) { return double(o != 0 && v != 0); }),
                 DType::boolean)};
}
Outputs any(const Inputs& in, const Attrs& a) {
  return {tensor(reduce(nd(in[0]), a.ints("axes"), a.b("keepdims"), 0.0,
                        [](double o, double v) { return double(o != 0 || v != 0); }),
                 DType::boolean)};
}
Outputs argmax(const Inputs& in, const Attrs& a) { return arg_extreme(in, a, "argmax", true); }
Outputs argmin(const Inputs& in, const Attrs& a) { return arg_extreme(in, a, "argmin", false); }
Outputs softmax(const Inputs& in, const Attrs& a) { return softmax_impl(in, a, false); }
Outputs log_softmax(const Inputs& in, const Attrs& a) { return softmax_impl(in, a, true); }

// ---- shape ops ----
Outputs concat(const Inputs& in, const Attrs& a) {
  std::vector<Nd> xs;
  for (const auto& t : in) xs.push_back(nd(t));
  const std::int64_t ax = axis_of(a.i("axis"), xs[0].shape.size(), "concat");
  Shape s = xs[0].shape;
  s[std::size_t(ax)] = 0;
  for (const auto& x : xs) {
    if (x.shape.size() != s.size()) fail("concat", "reference: ranks differ");
    for (std::size_t d = 0; d < s.size(); ++d)
      if (std::int64_t(d) != ax && x.shape[d] != s[d]) fail("concat", "reference: shapes differ");
    s[std::size_t(ax)] += x.shape[std::size_t(ax)];
  }
  Nd out = filled(s, 0.0);
  std::int64_t off = 0;
  for (const auto& x : xs) {
    for (std::int64_t i = 0; i < count(x.shape); ++i) {
      Ints idx = unravel(i, x.shape);
      idx[std::size_t(ax)] += off;
      at(out, idx) = x.v[std::size_t(i)];
    }
    off += x.shape[std::size_t(ax)];
  }
  return {tensor(out, in[0].dtype())};
}

Outputs split(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const std::int64_t ax = axis_of(a.i("axis"), x.shape.size(), "split");
  std::int64_t total = 0;
  for (auto n : a.ints("sizes")) total += n;
  if (total != x.shape[std::size_t(ax)]) fail("split", "reference: sizes do not sum to the axis");
  Outputs outs;
  std::int64_t off = 0;
  for (auto n : a.ints("sizes")) {
    Shape s = x.shape;
    s[std::size_t(ax)] = n;
    Nd o = filled(s, 0.0);
    for (std::int64_t i = 0; i < count(s); ++i) {
      Ints idx = unravel(i, s);
      idx[std::size_t(ax)] += off;
      o.v[std::size_t(i)] = at(x, idx);
    }
    off += n;
    outs.push_back(tensor(o, in[0].dtype()));
  }
  return outs;
}

Outputs unstack(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const std::int64_t ax = axis_of(a.i("axis"), x.shape.size(), "unstack");
  Shape s = x.shape;
  s.erase(s.begin() + ax);
  Outputs outs;
  for (std::int64_t k = 0; k < x.shape[std::size_t(ax)]; ++k) {
    Nd o = filled(s, 0.0);
    for (std::int64_t i = 0; i < count(s); ++i) {
      Ints idx = unravel(i, s);
      idx.insert(idx.begin() + ax, k);
      o.v[std::size_t(i)] = at(x, idx);
    }
    outs.push_back(tensor(o, in[0].dtype()));
  }
  return outs;
}

Outputs pad(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const Ints& p = a.ints("paddings");
  if (p.size() != 2 * x.shape.size()) fail("pad", "reference: one pair per axis expected");
  Shape s = x.shape;
  for (std::size_t d = 0; d < s.size(); ++d) s[d] += p[2 * d] + p[2 * d + 1];
  Nd out = filled(s, a.f("value"));
  for (std::int64_t i = 0; i < count(x.shape); ++i) {
    Ints idx = unravel(i, x.shape);
    for (std::size_t d = 0; d < idx.size(); ++d) idx[d] += p[2 * d];
    at(out, idx) = x.v[std::size_t(i)];
  }
  return {tensor(out, in[0].dtype())};
}

namespace {
// Maps (gathered index) -> (source index) for gather along `ax` with index array `ids`.
Ints gather_source(const Ints& o, const Nd& ids, std::int64_t ax, std::int64_t n) {
  const std::size_t k = ids.shape.size();
  Ints src(o.begin(), o.begin() + ax);
  Ints where(o.begin() + ax, o.begin() + ax + std::int64_t(k));
  std::int64_t j = std::int64_t(at(ids, where));
  if (j < -n || j >= n) fail("gather", "reference: index ", j, " out of range for size ", n);
  src.push_back(j < 0 ? j + n : j);
  src.insert(src.end(), o.begin() + ax + std::int64_t(k), o.end());
  return src;
}
Shape gathered(const Shape& s, const Shape& ids, std::int64_t ax) {
  Shape out(s.begin(), s.begin() + ax);
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), s.begin() + ax + 1, s.end());
  return out;
}
}  // namespace

Outputs gather(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]), ids = nd(in[1]);
  const std::int64_t ax = axis_of(a.i("axis"), x.shape.size(), "gather");
  Nd out = filled(gathered(x.shape, ids.shape, ax), 0.0);
  for (std::int64_t i = 0; i < count(out.shape); ++i)
    out.v[std::size_t(i)] =
        at(x, gather_source(unravel(i, out.shape), ids, ax, x.shape[std::size_t(ax)]));
  return {tensor(out, in[0].dtype())};
}

Outputs gather_grad(const Inputs& in, const Attrs& a) {
  Nd g = nd(in[0]), ids = nd(in[1]);
  const Shape s = a.ints("input_shape");
  const std::int64_t ax = axis_of(a.i("axis"), s.size(), "gather_grad");
  check_shape(g.shape, gathered(s, ids.shape, ax), "gather_grad");
  Nd out = filled(s, 0.0);
  for (std::int64_t i = 0; i < count(g.shape); ++i)
    at(out, gather_source(unravel(i, g.shape), ids, ax, s[std::size_t(ax)])) +=
        g.v[std::size_t(i)];
  return {tensor(out, in[0].dtype())};
}

Outputs one_hot(const Inputs& in, const Attrs& a) {
  Nd ids = nd(in[0]);
  const std::int64_t depth = a.i("depth");
  Shape s = ids.shape;
  s.push_back(depth);
  Nd out = filled(s, a.f("off_value"));
  for (std::int64_t i = 0; i < count(ids.shape); ++i) {
    const double j = ids.v[std::size_t(i)];
    if (j >= 0 && j < double(depth)) out.v[std::size_t(i * depth + std::int64_t(j))] = a.f("on_value");
  }
  return {tensor(out, a.dtype("dtype"))};
}

// ---- views and copies ----
Outputs reshape(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  x.shape = resolve_reshape(x.shape, a.ints("shape"));
  return {tensor(x, in[0].dtype())};
}

Outputs transpose(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const Ints& p = a.ints("perm");
  if (p.size() != x.shape.size()) fail("transpose", "reference: perm does not match the rank");
  Shape s(p.size());
  for (std::size_t d = 0; d < p.size(); ++d) s[d] = x.shape[std::size_t(p[d])];
  Nd out = filled(s, 0.0);
  for (std::int64_t i = 0; i < count(s); ++i) {
    Ints j = unravel(i, s), src(p.size());
    for (std::size_t d = 0; d < p.size(); ++d) src[std::size_t(p[d])] = j[d];
    out.v[std::size_t(i)] = at(x, src);
  }
  return {tensor(out, in[0].dtype())};
}

Outputs broadcast_to(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const Shape s = a.ints("shape");
  if (x.shape.size() > s.size()) fail("broadcast_to", "reference: rank too large");
  const std::size_t lead = s.size() - x.shape.size();
  for (std::size_t d = 0; d < x.shape.size(); ++d)
    if (x.shape[d] != 1 && x.shape[d] != s[lead + d])
      fail("broadcast_to", "reference: cannot broadcast");
  Nd out = filled(s, 0.0);
  for (std::int64_t i = 0; i < count(s); ++i) {
    Ints j = unravel(i, s);
    Ints src(j.begin() + std::int64_t(lead), j.end());
    for (std::size_t d = 0; d < src.size(); ++d)
      if (x.shape[d] == 1) src[d] = 0;
    out.v[std::size_t(i)] = at(x, src);
  }
  return {tensor(out, in[0].dtype())};
}

Outputs slice(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const Ints &b = a.ints("begin"), &st = a.ints("step"), &sz = a.ints("size");
  check_slice(x.shape, b, st, sz, "slice");
  Nd out = filled(sz, 0.0);
  for (std::int64_t i = 0; i < count(sz); ++i)
    out.v[std::size_t(i)] = at(x, slice_source(unravel(i, sz), b, st));
  return {tensor(out, in[0].dtype())};
}

Outputs slice_grad(const Inputs& in, const Attrs& a) {
  Nd g = nd(in[0]);
  const Shape s = a.ints("input_shape");
  const Ints &b = a.ints("begin"), &st = a.ints("step"), &sz = a.ints("size");
  check_slice(s, b, st, sz, "slice_grad");
  check_shape(g.shape, sz, "slice_grad");
  Nd out = filled(s, 0.0);
  for (std::int64_t i = 0; i < count(sz); ++i)
    at(out, slice_source(unravel(i, sz), b, st)) = g.v[std::size_t(i)];
  return {tensor(out, in[0].dtype())};
}

Outputs identity(const Inputs& in, const Attrs&) { return {tensor(nd(in[0]), in[0].dtype())}; }
Outputs cast(const Inputs& in, const Attrs& a) { return {tensor(nd(in[0]), a.dtype("dtype"))}; }

// ---- linear algebra ----
Outputs matmul(const Inputs& in, const Attrs&) {
  Nd x = nd(in[0]), y = nd(in[1]);
  if (x.shape.empty() || y.shape.empty()) fail("matmul", "reference: scalar operand");
  const bool vec_a = x.shape.size() == 1, vec_b = y.shape.size() == 1;
  if (vec_a) x.shape.insert(x.shape.begin(), 1);
  if (vec_b) y.shape.push_back(1);
  const std::int64_t m = x.shape[x.shape.size() - 2], k = x.shape.back(), n = y.shape.back();
  if (y.shape[y.shape.size() - 2] != k) fail("matmul", "reference: inner dimensions differ");
  // batch dims, right-aligned with broadcasting
  Shape ba(x.shape.begin(), x.shape.end() - 2), bb(y.shape.begin(), y.shape.end() - 2);
  const std::size_t r = std::max(ba.size(), bb.size());
  ba.insert(ba.begin(), r - ba.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  Shape batch(r);
  for (std::size_t d = 0; d < r; ++d) {
    if (ba[d] != bb[d] && ba[d] != 1 && bb[d] != 1) fail("matmul", "reference: batch mismatch");
    batch[d] = ba[d] == 1 ? bb[d] : ba[d];
  }
  Shape os = batch;
  os.insert(os.end(), {m, n});
  Nd out = filled(os, 0.0);
  for (std::int64_t bi = 0; bi < count(batch); ++bi) {
    Ints bidx = unravel(bi, batch);
    Ints ia(r), ib(r);
    for (std::size_t d = 0; d < r; ++d) {
      ia[d] = ba[d] == 1 ? 0 : bidx[d];
      ib[d] = bb[d] == 1 ? 0 : bidx[d];
    }
    const std::int64_t oa = ravel(ia, ba) * m * k, ob = ravel(ib, bb) * k * n;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t l = 0; l < k; ++l)
          s += x.v[std::size_t(oa + i * k + l)] * y.v[std::size_t(ob + l * n + j)];
        out.v[std::size_t((bi * m + i) * n + j)] = s;
      }
  }
  // drop the promoted dimensions
  Shape final_shape = batch;
  if (!vec_a) final_shape.push_back(m);
  if (!vec_b) final_shape.push_back(n);
  out.shape = final_shape;
  return {tensor(out, in[0].dtype())};
}

Outputs diagonal(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  const std::int64_t a1 = a.i("axis1"), a2 = a.i("axis2");
  const auto r = std::int64_t(x.shape.size());
  if (a1 < 0 || a2 < 0 || a1 >= r || a2 >= r || a1 == a2) fail("diagonal", "reference: bad axes");
  Shape s;
  for (std::int64_t d = 0; d < r; ++d)
    if (d != a1 && d != a2) s.push_back(x.shape[std::size_t(d)]);
  s.push_back(std::min(x.shape[std::size_t(a1)], x.shape[std::size_t(a2)]));
  Nd out = filled(s, 0.0);
  for (std::int64_t i = 0; i < count(s); ++i) {
    Ints j = unravel(i, s);
    Ints src(static_cast<std::size_t>(r));
    std::size_t next = 0;
    for (std::int64_t d = 0; d < r; ++d)
      src[std::size_t(d)] = (d == a1 || d == a2) ? j.back() : j[next++];
    out.v[std::size_t(i)] = at(x, src);
  }
  return {tensor(out, in[0].dtype())};
}

// ---- convolution and pooling ----
Outputs conv2d(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]), k = nd(in[1]);
  return {tensor(conv_forward(x, k, conv_geometry(x.shape, k.shape, a, "conv2d")), in[0].dtype())};
}

Outputs conv2d_bias_act(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]), k = nd(in[1]), b = nd(in[2]);
  Conv g = conv_geometry(x.shape, k.shape, a, "conv2d_bias_act");
  check_shape(b.shape, {g.o}, "conv2d_bias_act");
  Nd y = conv_forward(x, k, g);
  for (std::int64_t i = 0; i < count(y.shape); ++i) {
    double& v = y.v[std::size_t(i)];
    v += b.v[std::size_t(unravel(i, y.shape)[1])];
    if (a.i("relu") != 0 && v < 0) v = 0;
  }
  return {tensor(y, in[0].dtype())};
}

Outputs conv2d_backprop_input(const Inputs& in, const Attrs& a) {
  Nd g = nd(in[0]), k = nd(in[1]);
  const Shape xs = a.ints("input_shape");
  Conv c = conv_geometry(xs, k.shape, a, "conv2d_backprop_input");
  check_shape(g.shape, {c.n, c.o, c.oh, c.ow}, "conv2d_backprop_input");
  Nd dx = filled(xs, 0.0);
  for_each_tap(c, [&](auto n, auto o, auto oy, auto ox, auto ci, auto ch, auto ky, auto kx,
                      auto iy, auto ix) {
    at(dx, {n, ci, iy, ix}) += at(g, {n, o, oy, ox}) * at(k, {o, ch, ky, kx});
  });
  return {tensor(dx, in[0].dtype())};
}

Outputs conv2d_backprop_filter(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]), g = nd(in[1]);
  const Shape ks = a.ints("filter_shape");
  Conv c = conv_geometry(x.shape, ks, a, "conv2d_backprop_filter");
  check_shape(g.shape, {c.n, c.o, c.oh, c.ow}, "conv2d_backprop_filter");
  Nd dk = filled(ks, 0.0);
  for_each_tap(c, [&](auto n, auto o, auto oy, auto ox, auto ci, auto ch, auto ky, auto kx,
                      auto iy, auto ix) {
    at(dk, {o, ch, ky, kx}) += at(g, {n, o, oy, ox}) * at(x, {n, ci, iy, ix});
  });
  return {tensor(dk, in[0].dtype())};
}

Outputs max_pool2d(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  Pool p = pool_geometry(x.shape, a, "max_pool2d");
  Nd y = filled({p.n, p.c, p.oh, p.ow}, 0.0);
  for_each_window(p, [&](auto n, auto c, auto oy, auto ox) {
    at(y, {n, c, oy, ox}) = at(x, pool_argmax(x, p, n, c, oy, ox));
  });
  return {tensor(y, in[0].dtype())};
}

Outputs max_pool2d_grad(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]), g = nd(in[1]);
  Pool p = pool_geometry(x.shape, a, "max_pool2d_grad");
  check_shape(g.shape, {p.n, p.c, p.oh, p.ow}, "max_pool2d_grad");
  Nd dx = filled(x.shape, 0.0);
  for_each_window(p, [&](auto n, auto c, auto oy, auto ox) {
    at(dx, pool_argmax(x, p, n, c, oy, ox)) += at(g, {n, c, oy, ox});
  });
  return {tensor(dx, in[0].dtype())};
}

Outputs max_pool2d_grad_grad(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]), h = nd(in[1]);
  Pool p = pool_geometry(x.shape, a, "max_pool2d_grad_grad");
  check_shape(h.shape, x.shape, "max_pool2d_grad_grad");
  Nd y = filled({p.n, p.c, p.oh, p.ow}, 0.0);
  for_each_window(p, [&](auto n, auto c, auto oy, auto ox) {
    at(y, {n, c, oy, ox}) = at(h, pool_argmax(x, p, n, c, oy, ox));
  });
  return {tensor(y, in[0].dtype())};
}

// -> (y, indices): indices are flat offsets within each (n, c) plane of x (PyTorch's), as i64.
Outputs max_pool2d_with_indices(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  Pool p = pool_geometry(x.shape, a, "max_pool2d_with_indices");
  Nd y = filled({p.n, p.c, p.oh, p.ow}, 0.0), idx = filled({p.n, p.c, p.oh, p.ow}, 0.0);
  for_each_window(p, [&](auto n, auto c, auto oy, auto ox) {
    const Ints best = pool_argmax(x, p, n, c, oy, ox);
    at(y, {n, c, oy, ox}) = at(x, best);
    at(idx, {n, c, oy, ox}) = double(best[2] * p.w + best[3]);
  });
  return {tensor(y, in[0].dtype()), tensor(idx, DType::i64)};
}

// (x, indices) -> zeros of attr output_size [N, C, H, W] with x written at each plane offset.
Outputs max_unpool2d(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]), idx = nd(in[1]);
  const Shape os = a.ints("output_size");
  check_shape(idx.shape, x.shape, "max_unpool2d");
  Nd y = filled(os, 0.0);
  const std::int64_t hw = os[2] * os[3];
  for (std::int64_t n = 0; n < x.shape[0]; ++n)
    for (std::int64_t c = 0; c < x.shape[1]; ++c)
      for (std::int64_t i = 0; i < x.shape[2]; ++i)
        for (std::int64_t j = 0; j < x.shape[3]; ++j) {
          const auto k = std::int64_t(at(idx, {n, c, i, j}));
          if (k < 0 || k >= hw) fail("max_unpool2d", "reference: index out of range");
          at(y, {n, c, k / os[3], k % os[3]}) = at(x, {n, c, i, j});
        }
  return {tensor(y, in[0].dtype())};
}

Outputs avg_pool2d(const Inputs& in, const Attrs& a) {
  Nd x = nd(in[0]);
  Pool p = pool_geometry(x.shape, a, "avg_pool2d");
  Nd y = filled({p.n, p.c, p.oh, p.ow}, 0.0);
  for_each_window(p, [&](auto n, auto c, auto oy, auto ox) {
    std::int64_t y0, y1, x0, x1;
    p.window(oy, ox, y0, y1, x0, x1);
    double s = 0;
    for (std::int64_t yy = y0; yy < y1; ++yy)
      for (std::int64_t xx = x0; xx < x1; ++xx) s += at(x, {n, c, yy, xx});
    at(y, {n, c, oy, ox}) = s / pool_count(p, a, y0, y1, x0, x1);
  });
  return {tensor(y, in[0].dtype())};
}

Outputs avg_pool2d_grad(const Inputs& in, const Attrs& a) {
  Nd g = nd(in[0]);
  const Shape xs = a.ints("input_shape");
  Pool p = pool_geometry(xs, a, "avg_pool2d_grad");
  check_shape(g.shape, {p.n, p.c, p.oh, p.ow}, "avg_pool2d_grad");
  Nd dx = filled(xs, 0.0);
  for_each_window(p, [&](auto n, auto c, auto oy, auto ox) {
    std::int64_t y0, y1, x0, x1;
    p.window(oy, ox, y0, y1, x0, x1);
    const double v = at(g, {n, c, oy, ox}) / pool_count(p, a, y0, y1, x0, x1);
    for (std::int64_t yy = y0; yy < y1; ++yy)
      for (std::int64_t xx = x0; xx < x1; ++xx) at(dx, {n, c, yy, xx}) += v;
  });
  return {tensor(dx, in[0].dtype())};
}

// ---- attention ----
namespace {
// Logits of one (b, h) row i over every key: scale * q.k + mask, causal and boolean masks as
// -inf. Shapes as src/ops/attention.cpp checks them.
struct Attention {
  Nd q, k, v, mask;
  bool has_mask = false, bool_mask = false, causal = false;
  double scale = 1.0;
  std::int64_t B = 0, H = 0, Sq = 0, Sk = 0, D = 0, Dv = 0;

  Attention(const Inputs& in, std::size_t mask_input, const Attrs& a)
      : q(nd(in[0])), k(nd(in[1])), v(nd(in[2])) {
    if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4)
      fail("scaled_dot_product_attention", "reference: q, k, v must be 4-d");
    B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
    Sk = k.shape[2], Dv = v.shape[3];
    causal = a.has("causal") && a.b("causal");
    scale = a.has("scale") && a.f("scale") > 0 ? a.f("scale")
                                                : (D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0);
    if (in.size() > mask_input) {
      has_mask = true;
      bool_mask = in[mask_input].dtype() == DType::boolean;
      mask = nd(in[mask_input]);
    }
  }
  double mask_at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const Ints full{b, h, i, j};
    const std::size_t lead = 4 - mask.shape.size();
    Ints idx;
    for (std::size_t d = 0; d < mask.shape.size(); ++d)
      idx.push_back(mask.shape[d] == 1 ? 0 : full[lead + d]);
    return at(mask, idx);
  }
  std::vector<double> logits(std::int64_t b, std::int64_t h, std::int64_t i) const {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> s(static_cast<std::size_t>(Sk));
    for (std::int64_t j = 0; j < Sk; ++j) {
      double dot = 0;
      for (std::int64_t c = 0; c < D; ++c) dot += at(q, {b, h, i, c}) * at(k, {b, h, j, c});
      double x = scale * dot;
      if (has_mask) {
        const double m = mask_at(b, h, i, j);
        if (bool_mask) x = m != 0 ? x : -inf;
        else x += m;
      }
      if (causal && j > i) x = -inf;
      s[std::size_t(j)] = x;
    }
    return s;
  }
};
}  // namespace

Outputs scaled_dot_product_attention(const Inputs& in, const Attrs& a) {
  const Attention t(in, 3, a);
  const double inf = std::numeric_limits<double>::infinity();
  Nd out = filled({t.B, t.H, t.Sq, t.Dv}, 0.0), lse = filled({t.B, t.H, t.Sq}, -inf);
  for (std::int64_t b = 0; b < t.B; ++b)
    for (std::int64_t h = 0; h < t.H; ++h)
      for (std::int64_t i = 0; i < t.Sq; ++i) {
        const std::vector<double> s = t.logits(b, h, i);
        double m = -inf;
        for (double x : s) m = std::max(m, x);
        if (m == -inf) continue;  // every key masked out: zeros, lse -inf
        double z = 0;
        for (double x : s) z += std::exp(x - m);
        for (std::int64_t j = 0; j < t.Sk; ++j) {
          const double p = std::exp(s[std::size_t(j)] - m) / z;
          for (std::int64_t c = 0; c < t.Dv; ++c) at(out, {b, h, i, c}) += p * at(t.v, {b, h, j, c});
        }
        at(lse, {b, h, i}) = m + std::log(z);
      }
  return {tensor(out, in[0].dtype()), tensor(lse, in[0].dtype())};
}

// P = exp(logits - lse), dS = P * (dout . v - sum(dout * out) + dlse).
Outputs scaled_dot_product_attention_grad(const Inputs& in, const Attrs& a) {
  const Attention t(in, 7, a);
  const double inf = std::numeric_limits<double>::infinity();
  const Nd out = nd(in[3]), lse = nd(in[4]), dout = nd(in[5]), dlse = nd(in[6]);
  Nd dq = filled(t.q.shape, 0.0), dk = filled(t.k.shape, 0.0), dv = filled(t.v.shape, 0.0);
  Nd dl = filled({t.B, t.H, t.Sq, t.Sk}, 0.0);
  for (std::int64_t b = 0; b < t.B; ++b)
    for (std::int64_t h = 0; h < t.H; ++h)
      for (std::int64_t i = 0; i < t.Sq; ++i) {
        const double l = at(lse, {b, h, i});
        if (l == -inf) continue;
        const std::vector<double> s = t.logits(b, h, i);
        double di = 0;
        for (std::int64_t c = 0; c < t.Dv; ++c) di += at(dout, {b, h, i, c}) * at(out, {b, h, i, c});
        for (std::int64_t j = 0; j < t.Sk; ++j) {
          const double p = std::exp(s[std::size_t(j)] - l);
          double dp = 0;
          for (std::int64_t c = 0; c < t.Dv; ++c) {
            dp += at(dout, {b, h, i, c}) * at(t.v, {b, h, j, c});
            at(dv, {b, h, j, c}) += p * at(dout, {b, h, i, c});
          }
          const double ds = p * (dp - di + at(dlse, {b, h, i}));
          at(dl, {b, h, i, j}) = ds;
          for (std::int64_t c = 0; c < t.D; ++c) {
            at(dq, {b, h, i, c}) += t.scale * ds * at(t.k, {b, h, j, c});
            at(dk, {b, h, j, c}) += t.scale * ds * at(t.q, {b, h, i, c});
          }
        }
      }
  const DType dt = in[0].dtype();
  Outputs r = {tensor(dq, dt), tensor(dk, dt), tensor(dv, dt)};
  if (a.has("mask_grad") && a.b("mask_grad")) r.push_back(tensor(dl, dt));
  return r;
}

}  // namespace soma::ref
