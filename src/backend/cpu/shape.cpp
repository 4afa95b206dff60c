// CPU kernels for shape ops: concat, pad, gather, gather_grad (scatter-add) and one_hot. The
// data-movement kernels work on bytes where the dtype does not matter; strided inputs are packed
// or written through strided windows with copy_into.
#include <cstdint>
#include <cstring>

#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

// `t` itself when packed, else a packed copy (raw, so no tape sees it).
Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor p = Tensor::empty(t.shape(), t.dtype(), t.device());
  copy_into(t, p);
  return p;
}

std::int64_t prod(const Shape& s, std::size_t b, std::size_t e) {
  std::int64_t n = 1;
  for (std::size_t i = b; i < e; ++i) n *= s[i];
  return n;
}

// A view of `out` covering [off, off + shape[axis]) along `axis`.
Tensor window(const Tensor& out, const Shape& shape, int axis, std::int64_t off) {
  return Tensor::view_of(out, shape, out.strides(),
                         out.offset() + off * out.strides()[std::size_t(axis)]);
}

// Runs f.template operator()<U>() with U an unsigned integer as wide as one element, so byte
// copies of any dtype become typed (vectorisable) element copies.
template <class F>
void dispatch_width(std::size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f.template operator()<std::uint8_t>(); return;
    case 2: f.template operator()<std::uint16_t>(); return;
    case 4: f.template operator()<std::uint32_t>(); return;
    case 8: f.template operator()<std::uint64_t>(); return;
  }
  fail("shape", "unsupported element size ", bytes);
}

// ---- concat ----
void concat_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  int ax = normalize_axis(a.i("axis"), o.rank(), "concat");
  if (o.numel() == 0) return;
  const std::int64_t outer = prod(o.shape(), 0, std::size_t(ax));
  bool all_packed = true;
  for (const auto& t : in) all_packed = all_packed && t.is_contiguous();
  if (outer == 1 || !all_packed) {
    // One block per input (axis 0), or strided inputs: copy_into threads each copy itself.
    std::int64_t off = 0;
    for (const auto& t : in) {
      if (t.numel() > 0) copy_into(t, window(o, t.shape(), ax, off));
      off += t.shape()[std::size_t(ax)];
    }
    return;
  }
  // Packed inputs: each output row (one index of the leading axes) is the inputs' rows, in order.
  const std::size_t es = dtype_size(o.dtype());
  const std::int64_t inner = prod(o.shape(), std::size_t(ax) + 1, o.shape().size());
  const std::int64_t row = o.shape()[std::size_t(ax)] * inner;  // elements per output row
  std::vector<const char*> src(in.size());
  std::vector<std::int64_t> len(in.size());  // elements per input row
  for (std::size_t i = 0; i < in.size(); ++i) {
    src[i] = static_cast<const char*>(in[i].raw_data());
    len[i] = in[i].shape()[std::size_t(ax)] * inner;
  }
  char* dst = static_cast<char*>(o.raw_data());
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(row, 1));
  parallel_for(outer, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      char* d = dst + std::size_t(r * row) * es;
      for (std::size_t i = 0; i < in.size(); ++i) {
        std::size_t nb = std::size_t(len[i]) * es;
        std::memcpy(d, src[i] + std::size_t(r) * nb, nb);
        d += nb;
      }
    }
  });
}

// ---- pad ----
void pad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  fill_value(o, a.f("value"));
  if (in[0].numel() == 0) return;
  const auto& p = a.ints("paddings");
  std::int64_t off = o.offset();
  for (std::size_t d = 0; d < p.size() / 2; ++d) off += p[2 * d] * o.strides()[d];
  copy_into(in[0], Tensor::view_of(o, in[0].shape(), o.strides(), off));
}

// ---- index helpers ----
// Indices as i64 in [0, n), negative ones counted from the end. Checked here, before any
// parallel loop, so a bad index is a clean soma::Error.
std::vector<std::int64_t> read_indices(const Tensor& idx, std::int64_t n, int axis,
                                       const char* op) {
  Tensor p = packed(idx);
  std::vector<std::int64_t> ids(std::size_t(p.numel()));
  dispatch_dtype(p.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>) {
      const T* v = static_cast<const T*>(p.raw_data());
      for (std::size_t i = 0; i < ids.size(); ++i) {
        std::int64_t j = std::int64_t(v[i]);
        if (j < -n || j >= n)
          fail(op, "index ", j, " is out of range for axis ", axis, " of size ", n,
               " (expected ", -n, " <= index < ", n, ")");
        ids[i] = j < 0 ? j + n : j;
      }
    } else {
      fail(op, "indices must have dtype i32 or i64, got ", dtype_name(p.dtype()));
    }
  });
  return ids;
}

// ---- gather: out[o, k, i] = t[o, ids[k], i] ----
void gather_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& t = in[0];
  int ax = normalize_axis(a.i("axis"), t.rank(), "gather");
  const std::int64_t n = t.shape()[std::size_t(ax)];
  std::vector<std::int64_t> ids = read_indices(in[1], n, ax, "gather");
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  Tensor src = packed(t);
  const std::int64_t outer = prod(t.shape(), 0, std::size_t(ax));
  const std::int64_t inner = prod(t.shape(), std::size_t(ax) + 1, t.shape().size());
  const std::int64_t k = std::int64_t(ids.size());
  dispatch_width(dtype_size(t.dtype()), [&]<class U>() {
    const U* s = static_cast<const U*>(src.raw_data());
    U* d = static_cast<U*>(o.raw_data());
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / inner);
    parallel_for(outer * k, grain, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const U* from = s + ((r / k) * n + ids[std::size_t(r % k)]) * inner;
        U* to = d + r * inner;
        for (std::int64_t i = 0; i < inner; ++i) to[i] = from[i];
      }
    });
  });
}

// ---- gather_grad: out = zeros(input_shape); out[o, ids[k], i] += g[o, k, i] ----
void gather_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  int ax = normalize_axis(a.i("axis"), o.rank(), "gather_grad");
  const std::int64_t n = o.shape()[std::size_t(ax)];
  std::vector<std::int64_t> ids = read_indices(in[1], n, ax, "gather_grad");
  if (o.dtype() == DType::boolean)
    fail("gather_grad", "dtype bool is not supported (expected a numeric dtype)");
  fill_value(o, 0.0);
  if (in[0].numel() == 0) return;
  Tensor g = packed(in[0]);
  const std::int64_t outer = prod(o.shape(), 0, std::size_t(ax));
  const std::int64_t inner = prod(o.shape(), std::size_t(ax) + 1, o.shape().size());
  const std::int64_t k = std::int64_t(ids.size());
  // Repeated indices add into the same row, so each task owns a range of destination rows and
  // walks all k indices in order: no races, and the sum order does not depend on the threads.
  // Few leading rows (e.g. an embedding table, axis 0) split the destination rows instead.
  const std::int64_t threads = omp_get_max_threads();
  const std::int64_t chunks =
      outer >= threads || k * inner < kParallelGrain ? 1 : std::min<std::int64_t>(n, threads);
  const std::int64_t per = (n + chunks - 1) / chunks;
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain * chunks / (k * inner));
  dispatch_dtype(o.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      using C = compute_t<T>;
      const T* gs = static_cast<const T*>(g.raw_data());
      T* d = static_cast<T*>(o.raw_data());
      parallel_for(outer * chunks, grain, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t b = b0; b < b1; ++b) {
          const std::int64_t ob = b / chunks, lo = (b % chunks) * per, hi = lo + per;
          for (std::int64_t j = 0; j < k; ++j) {
            const std::int64_t r = ids[std::size_t(j)];
            if (r < lo || r >= hi) continue;
            const T* from = gs + (ob * k + j) * inner;
            T* to = d + (ob * n + r) * inner;
            for (std::int64_t i = 0; i < inner; ++i) to[i] = T(C(to[i]) + C(from[i]));
          }
        }
      });
    }
  });
}

// ---- one_hot ----
void one_hot_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  const std::int64_t depth = a.i("depth");
  fill_value(o, a.f("off_value"));
  if (o.numel() == 0) return;
  Tensor idx = packed(in[0]);
  dispatch_dtype(o.dtype(), [&]<class T>() {
    const T on = convert<T>(a.f("on_value"));
    T* d = static_cast<T*>(o.raw_data());
    dispatch_dtype(idx.dtype(), [&]<class I>() {
      if constexpr (std::is_same_v<I, std::int32_t> || std::is_same_v<I, std::int64_t>) {
        const I* v = static_cast<const I*>(idx.raw_data());
        parallel_for(idx.numel(), kParallelGrain, [&](std::int64_t i0, std::int64_t i1) {
          for (std::int64_t i = i0; i < i1; ++i) {
            std::int64_t j = std::int64_t(v[i]);
            if (j >= 0 && j < depth) d[i * depth + j] = on;
          }
        });
      } else {
        fail("one_hot", "indices must have dtype i32 or i64, got ", dtype_name(idx.dtype()));
      }
    });
  });
}

}  // namespace

void register_cpu_shape_kernels() {
  register_kernel("concat", DeviceKind::CPU, concat_kernel);
  register_kernel("pad", DeviceKind::CPU, pad_kernel);
  register_kernel("gather", DeviceKind::CPU, gather_kernel);
  register_kernel("gather_grad", DeviceKind::CPU, gather_grad_kernel);
  register_kernel("one_hot", DeviceKind::CPU, one_hot_kernel);
}

}  // namespace soma::detail
