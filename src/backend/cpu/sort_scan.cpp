// CPU kernels of the scan, sort and element-index ops (src/ops/sort_scan.cpp): cumsum, cumprod,
// cumprod_grad, sort, topk, triu, tril, roll, flip, take_along_axis, scatter. The index math is
// src/backend/cuda/sort_scan_index.hpp's, the same the CUDA kernels run, so both devices order
// ties, NaN and repeated scatter indices alike.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/cuda/sort_scan_index.hpp"
#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

namespace ss = soma::sort_scan;
using i64 = std::int64_t;

Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor p = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy_into(t, p);
  return p;
}

i64 prod(const Shape& s, std::size_t b, std::size_t e) {
  i64 n = 1;
  for (std::size_t i = b; i < e; ++i) n *= s[i];
  return n;
}

ss::AxisGeom axis_geom(const Shape& s, int ax) {
  ss::AxisGeom g;
  g.outer = prod(s, 0, std::size_t(ax));
  g.n = s[std::size_t(ax)];
  g.inner = prod(s, std::size_t(ax) + 1, s.size());
  return g;
}

template <class F>
void dispatch_width(std::size_t bytes, const char* op, F&& f) {
  switch (bytes) {
    case 1: f.template operator()<std::uint8_t>(); return;
    case 2: f.template operator()<std::uint16_t>(); return;
    case 4: f.template operator()<std::uint32_t>(); return;
    case 8: f.template operator()<std::uint64_t>(); return;
  }
  fail(op, "unsupported element size ", bytes);
}

i64 grain_for(i64 per_item) { return std::max<i64>(1, kParallelGrain / std::max<i64>(per_item, 1)); }

// ---- cumsum / cumprod: one sequential scan per line, in the compute type ----
template <bool Prod>
void scan_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* op = Prod ? "cumprod" : "cumsum";
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const Tensor x = packed(in[0]);
  const ss::AxisGeom g = axis_geom(x.shape(), normalize_axis(a.i("axis"), x.rank(), op));
  const bool excl = a.b("exclusive"), rev = a.b("reverse");
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      fail(op, "dtype bool is not supported (expected a numeric dtype)");
    } else {
      using C = compute_t<T>;
      const T* src = static_cast<const T*>(x.raw_data());
      T* dst = static_cast<T*>(o.raw_data());
      parallel_for(g.lines(), grain_for(g.n), [&](i64 l0, i64 l1) {
        for (i64 l = l0; l < l1; ++l) {
          const i64 base = g.base(l);
          C run = C(Prod ? 1 : 0);
          for (i64 s = 0; s < g.n; ++s) {
            const i64 off = base + ss::scan_pos(s, g.n, rev) * g.inner;
            const C v = C(src[off]);
            if (excl) dst[off] = T(run);
            run = Prod ? C(run * v) : C(run + v);
            if (!excl) dst[off] = T(run);
          }
        }
      });
    }
  });
}

// ---- cumprod_grad(x, g): sort_scan_index.hpp's two passes per line ----
void cumprod_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                         const Attrs& a) {
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const Tensor x = packed(in[0]), gr = packed(in[1]);
  const ss::AxisGeom g = axis_geom(x.shape(), normalize_axis(a.i("axis"), x.rank(), "cumprod_grad"));
  const bool excl = a.b("exclusive"), rev = a.b("reverse");
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      fail("cumprod_grad", "dtype bool is not supported (expected a numeric dtype)");
    } else {
      using C = compute_t<T>;
      const T* xs = static_cast<const T*>(x.raw_data());
      const T* gs = static_cast<const T*>(gr.raw_data());
      T* dst = static_cast<T*>(o.raw_data());
      parallel_for(g.lines(), grain_for(2 * g.n), [&](i64 l0, i64 l1) {
        std::vector<C> s(std::size_t(g.n));
        for (i64 l = l0; l < l1; ++l) {
          const i64 base = g.base(l);
          auto off = [&](i64 k) { return base + ss::scan_pos(k, g.n, rev) * g.inner; };
          for (i64 k = g.n - 1; k >= 0; --k) {
            const bool last = k == g.n - 1;
            s[std::size_t(k)] = ss::cumprod_grad_step<C>(
                excl, last, C(gs[off(k)]), last ? C(0) : C(gs[off(k + 1)]),
                last ? C(0) : C(xs[off(k + 1)]), last ? C(0) : s[std::size_t(k + 1)]);
          }
          C p = C(1);
          for (i64 k = 0; k < g.n; ++k) {
            dst[off(k)] = T(C(p * s[std::size_t(k)]));
            p = C(p * C(xs[off(k)]));
          }
        }
      });
    }
  });
}

// ---- sort / topk: a stable order of the keys of each line, its first k written ----
template <class T>
std::uint64_t key_of(T v, bool desc) {
  if constexpr (std::is_same_v<T, bool>) return ss::int_key(v ? 1 : 0, desc);
  else if constexpr (std::is_integral_v<T>) return ss::int_key(i64(v), desc);
  else return ss::float_key(double(compute_t<T>(v)), desc);
}

void sorted_prefix(const Tensor& xin, const Tensor& vals, const Tensor& ids, int ax, i64 k,
                   bool desc) {
  if (vals.numel() == 0) return;
  const Tensor x = packed(xin);
  const ss::AxisGeom g = axis_geom(x.shape(), ax);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    const T* src = static_cast<const T*>(x.raw_data());
    T* dv = static_cast<T*>(vals.raw_data());
    i64* di = static_cast<i64*>(ids.raw_data());
    parallel_for(g.lines(), grain_for(4 * g.n), [&](i64 l0, i64 l1) {
      std::vector<std::uint64_t> key(std::size_t(g.n));
      std::vector<i64> order(std::size_t(g.n));
      for (i64 l = l0; l < l1; ++l) {
        const i64 base = g.base(l), obase = ss::base_with_len(g, l, k);
        for (i64 s = 0; s < g.n; ++s) key[std::size_t(s)] = key_of(src[base + s * g.inner], desc);
        std::iota(order.begin(), order.end(), i64(0));
        // Ties by position: the stable order, also for a partial sort.
        auto before = [&](i64 p, i64 q) {
          const auto kp = key[std::size_t(p)], kq = key[std::size_t(q)];
          return kp < kq || (kp == kq && p < q);
        };
        if (k < g.n) std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        else std::sort(order.begin(), order.end(), before);
        for (i64 j = 0; j < k; ++j) {
          const i64 p = order[std::size_t(j)];
          dv[obase + j * g.inner] = src[base + p * g.inner];
          di[obase + j * g.inner] = p;
        }
      }
    });
  });
}

void sort_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "sort");
  sorted_prefix(in[0], out[0], out[1], ax, in[0].shape()[std::size_t(ax)], a.b("descending"));
}
void topk_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "topk");
  sorted_prefix(in[0], out[0], out[1], ax, a.i("k"), a.b("largest"));
}

// ---- triu / tril ----
template <bool Upper>
void tri_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const Tensor x = packed(in[0]);
  const i64 rows = x.shape()[std::size_t(x.rank() - 2)], cols = x.shape().back();
  const i64 k = a.i("k");
  dispatch_width(dtype_size(x.dtype()), Upper ? "triu" : "tril", [&]<class U>() {
    const U* src = static_cast<const U*>(x.raw_data());
    U* dst = static_cast<U*>(o.raw_data());
    parallel_for(o.numel(), kParallelGrain, [&](i64 i0, i64 i1) {
      for (i64 i = i0; i < i1; ++i) dst[i] = ss::tri_keep(i, rows, cols, k, Upper) ? src[i] : U(0);
    });
  });
}

// ---- roll / flip: out[c] = x[move_source(c)], x read through its strides ----
ss::MoveGeom move_geom(const Tensor& x, const char* op) {
  if (x.rank() > ss::kMaxDims)
    fail(op, "tensors of rank ", x.rank(), " (shape ", shape_str(x.shape()),
         ") are not supported (at most ", ss::kMaxDims, " dimensions)");
  ss::MoveGeom g;
  g.rank = int(x.rank());
  g.numel = x.numel();
  for (int d = 0; d < g.rank; ++d) {
    g.shape[d] = x.shape()[std::size_t(d)];
    g.in_stride[d] = x.strides()[std::size_t(d)];
  }
  return g;
}
void roll_geom(ss::MoveGeom& g, const Attrs& a) {
  const auto& sh = a.ints("shifts");
  const auto& axes = a.ints("axes");
  for (std::size_t j = 0; j < axes.size(); ++j) {
    const int d = normalize_axis(axes[j], g.rank, "roll");
    const i64 n = g.shape[d];
    if (n > 0) g.shift[d] = ((g.shift[d] + sh[j]) % n + n) % n;  // repeated axes add up
  }
}
void flip_geom(ss::MoveGeom& g, const Attrs& a) {
  for (int d : normalize_axes(a.ints("axes"), g.rank, "flip")) g.flip[d] = true;
}
template <bool Roll>
void move_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* op = Roll ? "roll" : "flip";
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const Tensor& x = in[0];
  ss::MoveGeom g = move_geom(x, op);
  if (Roll) roll_geom(g, a);
  else flip_geom(g, a);
  dispatch_width(dtype_size(x.dtype()), op, [&]<class U>() {
    const U* src = static_cast<const U*>(x.raw_data());
    U* dst = static_cast<U*>(o.raw_data());
    parallel_for(o.numel(), kParallelGrain, [&](i64 i0, i64 i1) {
      for (i64 i = i0; i < i1; ++i) dst[i] = src[ss::move_source(g, i)];
    });
  });
}

// ---- take_along_axis / scatter ----
ss::ElementGeom element_geom(const Tensor& data, const Tensor& ids, int ax, const char* op) {
  if (data.rank() > ss::kMaxDims)
    fail(op, "tensors of rank ", data.rank(), " (shape ", shape_str(data.shape()),
         ") are not supported (at most ", ss::kMaxDims, " dimensions)");
  ss::ElementGeom g;
  g.rank = int(data.rank());
  g.axis = ax;
  g.count = ids.numel();
  g.n = data.shape()[std::size_t(ax)];
  const Strides st = contiguous_strides(data.shape());
  for (int d = 0; d < g.rank; ++d) {
    g.ids_shape[d] = ids.shape()[std::size_t(d)];
    g.data_stride[d] = st[std::size_t(d)];
  }
  return g;
}
// The indices as i64, normalised into [0, n); one out of range is an error naming it.
std::vector<i64> element_ids(const Tensor& t, i64 n, int ax, const char* op) {
  const Tensor p = packed(t);
  std::vector<i64> ids(std::size_t(p.numel()));
  if (p.dtype() == DType::i32) {
    const auto* s = static_cast<const std::int32_t*>(p.raw_data());
    for (std::size_t j = 0; j < ids.size(); ++j) ids[j] = s[j];
  } else {
    const auto* s = static_cast<const i64*>(p.raw_data());
    std::copy(s, s + ids.size(), ids.begin());
  }
  for (auto& j : ids) {
    const i64 v = ss::normalize_element_index(j, n);
    if (v < 0)
      fail(op, "index ", j, " is out of range for axis ", ax, " of size ", n, " (expected ", -n,
           " <= index < ", n, ")");
    j = v;
  }
  return ids;
}

void take_along_axis_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  const Tensor& o = out[0];
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "take_along_axis");
  const ss::ElementGeom g = element_geom(in[0], in[1], ax, "take_along_axis");
  const std::vector<i64> ids = element_ids(in[1], g.n, ax, "take_along_axis");
  if (o.numel() == 0) return;
  const Tensor x = packed(in[0]);
  dispatch_width(dtype_size(x.dtype()), "take_along_axis", [&]<class U>() {
    const U* src = static_cast<const U*>(x.raw_data());
    U* dst = static_cast<U*>(o.raw_data());
    parallel_for(g.count, kParallelGrain, [&](i64 i0, i64 i1) {
      for (i64 i = i0; i < i1; ++i) dst[i] = src[ss::element_offset(g, i, ids[std::size_t(i)])];
    });
  });
}

// Updates are applied in row-major order (the last of repeated indices wins for "none"), one
// thread: the result must not depend on the thread count.
void scatter_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "scatter");
  const ss::ElementGeom g = element_geom(in[0], in[1], ax, "scatter");
  const std::vector<i64> ids = element_ids(in[1], g.n, ax, "scatter");
  const std::string& rs = a.s("reduction");
  const char* names[] = {"none", "add", "mul", "max", "min"};
  int r = 0;
  while (r < 5 && rs != names[r]) ++r;
  if (r == 5) fail("scatter", "reduction '", rs, "' is not one of none, add, mul, max, min");
  const auto red = ss::ScatterReduce(r);
  copy_into(in[0], o);
  if (g.count == 0) return;
  const Tensor u = packed(in[2]);
  dispatch_dtype(o.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      if (red != ss::ScatterReduce::none)
        fail("scatter", "reduction '", rs, "' is not supported for dtype bool (only none)");
    }
    using C = std::conditional_t<std::is_same_v<T, bool>, int, compute_t<T>>;
    const T* us = static_cast<const T*>(u.raw_data());
    T* dst = static_cast<T*>(o.raw_data());
    for (i64 i = 0; i < g.count; ++i) {
      T& d = dst[ss::element_offset(g, i, ids[std::size_t(i)])];
      d = T(ss::scatter_combine<C>(red, C(d), C(us[i])));
    }
  });
}

}  // namespace

void register_cpu_sort_scan_kernels() {
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CPU, fn); };
  reg("cumsum", scan_kernel<false>);
  reg("cumprod", scan_kernel<true>);
  reg("cumprod_grad", cumprod_grad_kernel);
  reg("sort", sort_kernel);
  reg("topk", topk_kernel);
  reg("triu", tri_kernel<true>);
  reg("tril", tri_kernel<false>);
  reg("roll", move_kernel<true>);
  reg("flip", move_kernel<false>);
  reg("take_along_axis", take_along_axis_kernel);
  reg("scatter", scatter_kernel);
}

}  // namespace soma::detail
