// CPU kernels for reductions (sum, mean, prod, max, min, all, any, argmax, argmin) and the
// fused, numerically stable softmax / log_softmax.
//
// Geometry: the input's dims are sorted by stride (largest first) and adjacent dims of the same
// kind (kept/reduced) are merged where memory allows, so a reduction over any axes of any view
// becomes one of two loops:
//  - inner: the smallest-stride dim is reduced; each output element reduces its own rows
//    (a contiguous row is summed pairwise with 8 lanes, which vectorises and stays accurate);
//  - outer: the smallest-stride dim is kept; each task accumulates whole rows into a small
//    vector of accumulators (column chunks), so memory is read in order.
// Float sums accumulate in double above 128-element pairwise leaves; the full reduction splits
// into fixed-size blocks whose partials are combined in order, so results do not depend on the
// thread count.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>

#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "soma/op.hpp"

#define SOMA_ISA_FILE "backend/cpu/reduction.cpp"
#include "backend/cpu/isa_foreach.hpp"  // this file once per instruction set (runtime dispatch)

namespace soma::detail {
#if SOMA_ISA_MULTI
namespace isa_baseline {
// The baseline pass's sum/prod/max/min/argmax/argmin kernel `which` (Which below), called by the
// other passes for the dtypes they do not compile (in_this_pass).
void reduction_fallback(int which, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                        const Attrs& a);
}
#endif
SOMA_ISA_BEGIN
namespace {

// The dtypes an instruction-set pass compiles the numeric reductions and argmax/argmin for: f32
// and the 16-bit floats (summed in f32). f64, the integers and bool run the baseline's loops on
// every machine, which keeps this file's build time down (issue 35). mean and the softmaxes take
// the four floating dtypes in every pass.
template <class T> constexpr bool in_this_pass() {
#if SOMA_ISA_ONCE
  return true;
#else
  return computes_in_f32_v<T>;
#endif
}
enum Which { kSum, kProd, kMax, kMin, kArgmax, kArgmin };

template <class T> constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class T> const T* cbase(const Tensor& t) {
  return static_cast<const T*>(t.storage()->data) + t.offset();
}
template <class T> T* mbase(const Tensor& t) { return static_cast<T*>(t.storage()->data) + t.offset(); }

// ---- geometry ------------------------------------------------------------------------------
struct Dim {
  std::int64_t size, in, out;  // extent, input stride, output stride (0 when reduced)
  bool reduced;
};

struct ReduceGeom {
  std::vector<Dim> kept, red;  // each ordered outer -> inner (by input stride)
  std::int64_t M = 1, N = 1;   // output elements, elements reduced into each
  bool inner = true;           // the smallest-stride dim is reduced
};

ReduceGeom make_geom(const Tensor& x, const std::vector<std::int64_t>& axes) {
  const Shape& s = x.shape();
  const std::size_t r = s.size();
  std::vector<bool> is_red(r, false);
  for (auto a : axes) is_red[std::size_t(a)] = true;
  // Output strides: the output is packed over the kept dims in their original order.
  std::vector<std::int64_t> ostride(r, 0);
  std::int64_t acc = 1;
  for (std::size_t i = r; i-- > 0;)
    if (!is_red[i]) {
      ostride[i] = acc;
      acc *= s[i];
    }
  ReduceGeom g;
  std::vector<Dim> dims;
  for (std::size_t i = 0; i < r; ++i) {
    if (is_red[i]) g.N *= s[i];
    else g.M *= s[i];
    if (s[i] != 1) dims.push_back({s[i], x.strides()[i], ostride[i], bool(is_red[i])});
  }
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return std::abs(a.in) > std::abs(b.in);
  });
  // Merge an outer dim into the next inner one when they walk memory as one dim.
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& p = merged.back();
      if (p.reduced == d.reduced && p.in == d.in * d.size && p.out == d.out * d.size) {
        p = {p.size * d.size, d.in, d.out, d.reduced};
        continue;
      }
    }
    merged.push_back(d);
  }
  g.inner = merged.empty() || merged.back().reduced;
  for (const Dim& d : merged) (d.reduced ? g.red : g.kept).push_back(d);
  if (g.red.empty()) g.red.push_back({1, 0, 0, true});  // nothing reduced: one element each
  return g;
}

// Odometer over the first `count` dims of a list, tracking input and output offsets. No heap
// allocation below rank 16: it is built once per output element on some paths.
struct Odometer {
  const Dim* dims;
  std::size_t count;
  std::array<std::int64_t, 16> small{};
  std::vector<std::int64_t> big;
  std::int64_t* idx;
  std::int64_t in = 0, out = 0;
  Odometer(const Dim* d, std::size_t n, std::int64_t flat) : dims(d), count(n), idx(small.data()) {
    if (n > small.size()) {
      big.assign(n, 0);
      idx = big.data();
    }
    if (flat == 0) return;  // also keeps a size-0 dim from dividing by zero
    for (std::size_t k = n; k-- > 0;) {
      idx[k] = flat % d[k].size;
      flat /= d[k].size;
      in += idx[k] * d[k].in;
      out += idx[k] * d[k].out;
    }
  }
  Odometer(const std::vector<Dim>& d, std::int64_t flat) : Odometer(d.data(), d.size(), flat) {}
  void next() {
    for (std::size_t k = count; k-- > 0;) {
      const Dim& d = dims[k];
      if (++idx[k] < d.size) {
        in += d.in;
        out += d.out;
        return;
      }
      in -= (d.size - 1) * d.in;
      out -= (d.size - 1) * d.out;
      idx[k] = 0;
    }
  }
};

// ---- reducers ------------------------------------------------------------------------------
template <class T> using float_acc_t =
    std::conditional_t<is_float_v<T>, double,
                       std::conditional_t<std::is_unsigned_v<T>, std::uint64_t, std::int64_t>>;

template <class R> typename R::Acc lanes_row(const typename R::T* p, std::int64_t n, std::int64_t s) {
  using Acc = typename R::Acc;
  using C = compute_t<typename R::T>;
  if (s != 1) {
    Acc a = R::init();
    for (std::int64_t i = 0; i < n; ++i) a = R::step(a, C(p[i * s]));
    return a;
  }
  Acc l[8];
  for (auto& v : l) v = R::init();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) l[j] = R::step(l[j], C(p[i + j]));
  for (; i < n; ++i) l[0] = R::step(l[0], C(p[i]));
  Acc a = l[0];
  for (int j = 1; j < 8; ++j) a = R::merge(a, l[j]);
  return a;
}

// Pairwise summation (as NumPy): 8-lane leaves of up to 128 elements in the compute type,
// combined in a binary tree; error grows like log(n) rather than n.
template <class T> double pairwise_sum(const T* p, std::int64_t n, std::int64_t s) {
  using C = compute_t<T>;
  if (n <= 128) {
    C l[8] = {};
    std::int64_t i = 0;
    if (s == 1) {
      for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) l[j] += C(p[i + j]);
    }
    double a = 0;
    for (; i < n; ++i) a += double(C(p[i * s]));
    return a + double((l[0] + l[1]) + (l[2] + l[3])) + double((l[4] + l[5]) + (l[6] + l[7]));
  }
  std::int64_t h = (n / 2) & ~std::int64_t(7);
  return pairwise_sum(p, h, s) + pairwise_sum(p + h * s, n - h, s);
}

template <class TT> struct SumR {
  using T = TT;
  using C = compute_t<T>;
  using Acc = float_acc_t<T>;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, C x) { return Acc(a + Acc(x)); }
  static Acc merge(Acc a, Acc b) { return Acc(a + b); }
  static Acc row(const T* p, std::int64_t n, std::int64_t s) {
    if constexpr (is_float_v<T>) return pairwise_sum(p, n, s);
    else return lanes_row<SumR>(p, n, s);
  }
  static T finish(Acc a, std::int64_t) { return convert<T>(a); }
};
template <class TT> struct MeanR : SumR<TT> {
  using typename SumR<TT>::Acc;
  static TT finish(Acc a, std::int64_t n) { return convert<TT>(double(a) / double(n)); }
};
template <class TT> struct ProdR {
  using T = TT;
  using C = compute_t<T>;
  using Acc = float_acc_t<T>;
  static Acc init() { return Acc(1); }
  static Acc step(Acc a, C x) { return Acc(a * Acc(x)); }
  static Acc merge(Acc a, Acc b) { return Acc(a * b); }
  static Acc row(const T* p, std::int64_t n, std::int64_t s) { return lanes_row<ProdR>(p, n, s); }
  static T finish(Acc a, std::int64_t) { return convert<T>(a); }
};
// max/min of a contiguous float row: lanes of plain max (vectorises to maxps) and a NaN flag,
// since the NaN-propagating select in step() does not vectorise.
template <class C, bool Max, class T> C float_extreme_row(const T* p, std::int64_t n) {
  C l[8];
  int nan[8] = {};
  const C init = Max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  for (auto& v : l) v = init;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      C x = C(p[i + j]);
      if constexpr (Max) l[j] = x > l[j] ? x : l[j];
      else l[j] = x < l[j] ? x : l[j];
      nan[j] |= x != x;
    }
  for (; i < n; ++i) {
    C x = C(p[i]);
    if constexpr (Max) l[0] = x > l[0] ? x : l[0];
    else l[0] = x < l[0] ? x : l[0];
    nan[0] |= x != x;
  }
  C a = l[0];
  for (int j = 1; j < 8; ++j) {
    if constexpr (Max) a = l[j] > a ? l[j] : a;
    else a = l[j] < a ? l[j] : a;
    if (nan[j]) nan[0] = 1;
  }
  return nan[0] ? std::numeric_limits<C>::quiet_NaN() : a;
}

// max/min propagate NaN (as NumPy): once the accumulator is NaN it stays NaN.
template <class TT> struct MaxR {
  using T = TT;
  using C = compute_t<T>;
  using Acc = C;
  static Acc init() {
    if constexpr (std::numeric_limits<C>::has_infinity) return -std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::lowest();
  }
  static Acc step(Acc a, C x) { return (x > a || x != x) ? x : a; }
  static Acc merge(Acc a, Acc b) { return step(a, b); }
  static Acc row(const T* p, std::int64_t n, std::int64_t s) {
    if constexpr (std::is_floating_point_v<C>)
      if (s == 1) return float_extreme_row<C, true>(p, n);
    return lanes_row<MaxR>(p, n, s);
  }
  static T finish(Acc a, std::int64_t) { return T(a); }
};
template <class TT> struct MinR {
  using T = TT;
  using C = compute_t<T>;
  using Acc = C;
  static Acc init() {
    if constexpr (std::numeric_limits<C>::has_infinity) return std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::max();
  }
  static Acc step(Acc a, C x) { return (x < a || x != x) ? x : a; }
  static Acc merge(Acc a, Acc b) { return step(a, b); }
  static Acc row(const T* p, std::int64_t n, std::int64_t s) {
    if constexpr (std::is_floating_point_v<C>)
      if (s == 1) return float_extreme_row<C, false>(p, n);
    return lanes_row<MinR>(p, n, s);
  }
  static T finish(Acc a, std::int64_t) { return T(a); }
};
struct AllR {
  using T = bool;
  using Acc = bool;
  static Acc init() { return true; }
  static Acc step(Acc a, bool x) { return a && x; }
  static Acc merge(Acc a, Acc b) { return a && b; }
  static Acc row(const bool* p, std::int64_t n, std::int64_t s) { return lanes_row<AllR>(p, n, s); }
  static bool finish(Acc a, std::int64_t) { return a; }
};
struct AnyR {
  using T = bool;
  using Acc = bool;
  static Acc init() { return false; }
  static Acc step(Acc a, bool x) { return a || x; }
  static Acc merge(Acc a, Acc b) { return a || b; }
  static Acc row(const bool* p, std::int64_t n, std::int64_t s) { return lanes_row<AnyR>(p, n, s); }
  static bool finish(Acc a, std::int64_t) { return a; }
};

// Reduces the reduced elements with flat indices [r0, r1) starting at input element `base`.
template <class R>
typename R::Acc reduce_span(const typename R::T* base, const std::vector<Dim>& red, std::int64_t r0,
                            std::int64_t r1) {
  using Acc = typename R::Acc;
  Acc a = R::init();
  if (r0 >= r1) return a;
  const Dim& last = red.back();
  if (red.size() == 1) {
    const auto* p = base + r0 * last.in;
    const std::int64_t n = r1 - r0;
    if (n > 8) return R::row(p, n, last.in);
    // Short rows: a plain loop beats the lane set-up (the result is exact enough at this size).
    for (std::int64_t i = 0; i < n; ++i) a = R::step(a, compute_t<typename R::T>(p[i * last.in]));
    return a;
  }
  const std::int64_t row = last.size;
  // Odometer over all but the innermost reduced dim.
  std::int64_t r = r0;
  Odometer od(red.data(), red.size() - 1, r0 / row);
  std::int64_t j = r0 % row;
  bool first = true;
  while (r < r1) {
    std::int64_t n = std::min(row - j, r1 - r);
    Acc part = R::row(base + od.in + j * last.in, n, last.in);
    a = first ? part : R::merge(a, part);
    first = false;
    r += n;
    j = 0;
    od.next();
  }
  return a;
}

constexpr std::int64_t kBlock = 1 << 15;  // fixed block of a split reduction (thread-count free)
constexpr std::int64_t kCols = 256;       // accumulator columns per task in the outer loop

template <class R>
void reduce_into(const Tensor& x, const Tensor& out, const std::vector<std::int64_t>& axes) {
  using T = typename R::T;
  using Acc = typename R::Acc;
  using C = compute_t<T>;
  ReduceGeom g = make_geom(x, axes);
  if (g.M == 0) return;
  const T* px = cbase<T>(x);
  T* po = mbase<T>(out);
  const std::int64_t N = g.N;
  if (g.inner) {
    if (g.M < 64 && N > kBlock) {
      // Few outputs, long reductions: split each into fixed blocks, combine partials in order.
      const std::int64_t nb = (N + kBlock - 1) / kBlock;
      // Not std::vector: vector<bool> packs bits, and threads write neighbouring partials.
      std::unique_ptr<Acc[]> part(new Acc[std::size_t(nb)]);
      Odometer ko(g.kept, 0);
      for (std::int64_t m = 0; m < g.M; ++m, ko.next()) {
        const T* b = px + ko.in;
        parallel_for(nb, 1, [&](std::int64_t b0, std::int64_t b1) {
          for (std::int64_t k = b0; k < b1; ++k)
            part[std::size_t(k)] =
                reduce_span<R>(b, g.red, k * kBlock, std::min(N, (k + 1) * kBlock));
        });
        Acc a = part[0];
        for (std::int64_t k = 1; k < nb; ++k) a = R::merge(a, part[std::size_t(k)]);
        po[ko.out] = R::finish(a, N);
      }
      return;
    }
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(N, 1));
    if (g.kept.size() == 1 && g.red.size() == 1) {
      // A 2-d problem (rows of one reduced dim): no odometer, just two strides.
      const Dim k = g.kept[0], r = g.red[0];
      parallel_for(g.M, grain, [&](std::int64_t m0, std::int64_t m1) {
        for (std::int64_t m = m0; m < m1; ++m) {
          const T* p = px + m * k.in;
          Acc a;
          if (N <= 8) {
            a = R::init();
            for (std::int64_t i = 0; i < N; ++i) a = R::step(a, C(p[i * r.in]));
          } else {
            a = R::row(p, N, r.in);
          }
          po[m * k.out] = R::finish(a, N);
        }
      });
      return;
    }
    parallel_for(g.M, grain, [&](std::int64_t m0, std::int64_t m1) {
      Odometer ko(g.kept, m0);
      for (std::int64_t m = m0; m < m1; ++m, ko.next())
        po[ko.out] = R::finish(reduce_span<R>(px + ko.in, g.red, 0, N), N);
    });
    return;
  }
  // Outer: the innermost dim is kept; accumulate rows into column chunks.
  const Dim col = g.kept.back();
  std::vector<Dim> okept(g.kept.begin(), g.kept.end() - 1);
  const std::int64_t chunks = (col.size + kCols - 1) / kCols;
  const std::int64_t tasks = (g.M / col.size) * chunks;
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, N * std::min(col.size, kCols)));
  parallel_for(tasks, grain, [&](std::int64_t t0, std::int64_t t1) {
    Acc acc[kCols];
    Odometer ko(okept, t0 / chunks);
    for (std::int64_t t = t0; t < t1; ++t) {
      if (t != t0 && t % chunks == 0) ko.next();
      const std::int64_t c0 = (t % chunks) * kCols;
      const std::int64_t nc = std::min(kCols, col.size - c0);
      for (std::int64_t c = 0; c < nc; ++c) acc[c] = R::init();
      const T* b = px + ko.in + c0 * col.in;
      Odometer ro(g.red, 0);
      for (std::int64_t r = 0; r < N; ++r, ro.next()) {
        const T* p = b + ro.in;
        if (col.in == 1) {
          for (std::int64_t c = 0; c < nc; ++c) acc[c] = R::step(acc[c], C(p[c]));
        } else {
          for (std::int64_t c = 0; c < nc; ++c) acc[c] = R::step(acc[c], C(p[c * col.in]));
        }
      }
      T* o = po + ko.out + c0 * col.out;
      for (std::int64_t c = 0; c < nc; ++c) o[c * col.out] = R::finish(acc[c], N);
    }
  });
}

template <template <class> class R, int W>
void numeric_kernel_impl(const char* op, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                         const Attrs& a) {
  dispatch_dtype(in[0].dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) fail(op, "dtype bool is not supported");
#if !SOMA_ISA_ONCE
    else if constexpr (!in_this_pass<T>()) isa_baseline::reduction_fallback(W, in, out, a);
#endif
    else reduce_into<R<T>>(in[0], out[0], a.ints("axes"));
  });
}
template <template <class> class R>
void float_kernel_impl(const char* op, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                       const Attrs& a) {
  dispatch_floating(in[0].dtype(), op, [&]<class T>() {
    reduce_into<R<T>>(in[0], out[0], a.ints("axes"));
  });
}

void sum_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  numeric_kernel_impl<SumR, kSum>("sum", in, out, a);
}
void mean_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  float_kernel_impl<MeanR>("mean", in, out, a);
}
void prod_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  numeric_kernel_impl<ProdR, kProd>("prod", in, out, a);
}
void max_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  numeric_kernel_impl<MaxR, kMax>("max", in, out, a);
}
void min_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  numeric_kernel_impl<MinR, kMin>("min", in, out, a);
}
void all_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  if (in[0].dtype() != DType::boolean) fail("all", "expected dtype bool, got ", dtype_name(in[0].dtype()));
  reduce_into<AllR>(in[0], out[0], a.ints("axes"));
}
void any_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  if (in[0].dtype() != DType::boolean) fail("any", "expected dtype bool, got ", dtype_name(in[0].dtype()));
  reduce_into<AnyR>(in[0], out[0], a.ints("axes"));
}

// ---- argmax / argmin: the first extreme element wins; a NaN counts as the extreme ----------
template <class T, bool Max>
void arg_into(const Tensor& x, const Tensor& out, std::int64_t axis) {
  using C = compute_t<T>;
  ReduceGeom g = make_geom(x, {axis});
  if (g.M == 0) return;
  const T* px = cbase<T>(x);
  std::int64_t* po = mbase<std::int64_t>(out);
  const Dim red = g.red.back();  // the single reduced dim (or a size-1 stand-in)
  const std::int64_t N = red.size;
  auto better = [](C v, C best) {
    if constexpr (Max) return v > best || (v != v && best == best);
    else return v < best || (v != v && best == best);
  };
  if (g.inner) {
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(N, 1));
    parallel_for(g.M, grain, [&](std::int64_t m0, std::int64_t m1) {
      Odometer ko(g.kept, m0);
      for (std::int64_t m = m0; m < m1; ++m, ko.next()) {
        const T* p = px + ko.in;
        if constexpr (!std::is_same_v<T, bool>) {
          if (red.in == 1) {  // two passes: a vectorised extreme, then its first position
            using R = std::conditional_t<Max, MaxR<T>, MinR<T>>;
            const C best = R::row(p, N, 1);
            std::int64_t i = 0;
            if (best == best) {
              while (C(p[i]) != best) ++i;
            } else {
              while (C(p[i]) == C(p[i])) ++i;
            }
            po[ko.out] = i;
            continue;
          }
        }
        C best = C(p[0]);
        std::int64_t bi = 0;
        for (std::int64_t i = 1; i < N; ++i) {
          C v = C(p[i * red.in]);
          if (better(v, best)) {
            best = v;
            bi = i;
          }
        }
        po[ko.out] = bi;
      }
    });
    return;
  }
  const Dim col = g.kept.back();
  std::vector<Dim> okept(g.kept.begin(), g.kept.end() - 1);
  const std::int64_t chunks = (col.size + kCols - 1) / kCols;
  const std::int64_t tasks = (g.M / col.size) * chunks;
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, N * std::min(col.size, kCols)));
  parallel_for(tasks, grain, [&](std::int64_t t0, std::int64_t t1) {
    C best[kCols];
    std::int64_t bi[kCols];
    Odometer ko(okept, t0 / chunks);
    for (std::int64_t t = t0; t < t1; ++t) {
      if (t != t0 && t % chunks == 0) ko.next();
      const std::int64_t c0 = (t % chunks) * kCols;
      const std::int64_t nc = std::min(kCols, col.size - c0);
      const T* b = px + ko.in + c0 * col.in;
      for (std::int64_t c = 0; c < nc; ++c) {
        best[c] = C(b[c * col.in]);
        bi[c] = 0;
      }
      for (std::int64_t i = 1; i < N; ++i) {
        const T* p = b + i * red.in;
        for (std::int64_t c = 0; c < nc; ++c) {
          C v = C(p[c * col.in]);
          if (better(v, best[c])) {
            best[c] = v;
            bi[c] = i;
          }
        }
      }
      std::int64_t* o = po + ko.out + c0 * col.out;
      for (std::int64_t c = 0; c < nc; ++c) o[c * col.out] = bi[c];
    }
  });
}

template <bool Max>
void arg_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  dispatch_dtype(in[0].dtype(), [&]<class T>() {
#if !SOMA_ISA_ONCE
    if constexpr (!in_this_pass<T>()) {
      isa_baseline::reduction_fallback(Max ? kArgmax : kArgmin, in, out, a);
      return;
    } else
#endif
      arg_into<T, Max>(in[0], out[0], a.i("axis"));
  });
}

// ---- softmax / log_softmax over one axis -----------------------------------------------------
// exp for arguments <= 0 (softmax shifts by the max first), written without calls or branches so
// the loops around it vectorise: exp(x) = 2^n exp(r), |r| <= ln2/2, with Cephes' degree-6
// polynomial (within 1.5 ulp). Below -87.3 (where f32 goes subnormal) it returns 0; NaN stays NaN.
inline float exp_nonpositive(float x) {
  // NaN and large x are clamped too: int32_t(fn) below is undefined behaviour for NaN or inf
  // (found by fuzzing a model file with NaN weights, UBSan); the final select fixes their value.
  const float xc = !(x >= -87.3f) ? -87.3f : (x > 88.0f ? 88.0f : x);
  // Round to nearest by adding and removing 1.5 * 2^23 (std::floor would block vectorising).
  const float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const float scale = std::bit_cast<float>((std::int32_t(fn) + 127) << 23);
  const float e = y * scale;
  return x != x ? x : (x < -87.3f ? 0.0f : (x > 88.0f ? std::numeric_limits<float>::infinity() : e));
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// The input is viewed as [outer, n, inner] (packed first if it is a strided view). Rows
// (inner == 1) are handled one at a time; otherwise each task takes a chunk of columns, so every
// loop runs over contiguous memory. Passes: the max, the sum of exp(x - max), the output.
template <class T, bool Log>
void softmax_into(const Tensor& x0, const Tensor& out, std::int64_t axis) {
  using C = compute_t<T>;
  Tensor x = x0;
  if (!x0.is_contiguous()) {
    x = Tensor::empty(x0.shape(), x0.dtype(), x0.device());
    copy_into(x0, x);
  }
  const Shape& s = x.shape();
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < axis; ++i) outer *= s[std::size_t(i)];
  for (std::size_t i = std::size_t(axis) + 1; i < s.size(); ++i) inner *= s[i];
  const std::int64_t n = s[std::size_t(axis)];
  if (outer * n * inner == 0) return;
  const T* px = cbase<T>(x);
  T* po = mbase<T>(out);
  // A slice of -inf (or with +inf) would give inf - inf; shift by 0 instead.
  auto shift_of = [](C m) { return std::isinf(m) ? C(0) : m; };
  if (inner == 1) {
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / n);
    parallel_for(outer, grain, [&](std::int64_t o0, std::int64_t o1) {
      for (std::int64_t o = o0; o < o1; ++o) {
        const T* xr = px + o * n;
        T* orow = po + o * n;
        const C m = shift_of(MaxR<T>::row(xr, n, 1));
        // exp(x - m) a block at a time into a buffer (a loop that vectorises), then summed in
        // 8 lanes; f32/f64 also keep it in the output, 16-bit types recompute it later.
        constexpr bool store = !Log && std::is_same_v<T, C>;
        C l[8] = {};
        C buf[kCols];
        for (std::int64_t i0 = 0; i0 < n; i0 += kCols) {
          const std::int64_t nb = std::min(kCols, n - i0);
          for (std::int64_t k = 0; k < nb; ++k) buf[k] = exp_nonpositive(C(xr[i0 + k]) - m);
          if constexpr (store)
            for (std::int64_t k = 0; k < nb; ++k) orow[i0 + k] = buf[k];
          std::int64_t k = 0;
          for (; k + 8 <= nb; k += 8)
            for (int j = 0; j < 8; ++j) l[j] += buf[k + j];
          for (; k < nb; ++k) l[0] += buf[k];
        }
        const C sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        if constexpr (Log) {
          // (x - max) - log(sum): x - max is exact, so large inputs lose no digits.
          const C ls = std::log(sum);
          for (std::int64_t k = 0; k < n; ++k) orow[k] = T((C(xr[k]) - m) - ls);
        } else {
          const C inv = C(1) / sum;
          if constexpr (store) {
            for (std::int64_t k = 0; k < n; ++k) orow[k] = orow[k] * inv;
          } else {
            for (std::int64_t k = 0; k < n; ++k) orow[k] = T(exp_nonpositive(C(xr[k]) - m) * inv);
          }
        }
      }
    });
    return;
  }
  const std::int64_t cols = std::min(inner, kCols);
  const std::int64_t chunks = (inner + cols - 1) / cols;
  const std::int64_t tasks = outer * chunks;
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(1, n * cols));
  parallel_for(tasks, grain, [&](std::int64_t t0, std::int64_t t1) {
    C mx[kCols];
    C sm[kCols];
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t o = t / chunks, c0 = (t % chunks) * cols;
      const std::int64_t nc = std::min(cols, inner - c0);
      const T* xb = px + o * n * inner + c0;
      T* ob = po + o * n * inner + c0;
      for (std::int64_t c = 0; c < nc; ++c) {
        mx[c] = -std::numeric_limits<C>::infinity();
        sm[c] = 0;
      }
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < nc; ++c) {
          C v = C(xb[i * inner + c]);
          mx[c] = (v > mx[c] || v != v) ? v : mx[c];
        }
      for (std::int64_t c = 0; c < nc; ++c) mx[c] = shift_of(mx[c]);
      constexpr bool store = !Log && std::is_same_v<T, C>;
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < nc; ++c) {
          C e = exp_nonpositive(C(xb[i * inner + c]) - mx[c]);
          sm[c] += e;
          if constexpr (store) ob[i * inner + c] = e;
        }
      if constexpr (Log) {
        for (std::int64_t c = 0; c < nc; ++c) sm[c] = std::log(sm[c]);
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t c = 0; c < nc; ++c)
            ob[i * inner + c] = T((C(xb[i * inner + c]) - mx[c]) - sm[c]);
      } else {
        for (std::int64_t c = 0; c < nc; ++c) sm[c] = C(1) / sm[c];
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t c = 0; c < nc; ++c) {
            if constexpr (store) ob[i * inner + c] = T(C(ob[i * inner + c]) * sm[c]);
            else ob[i * inner + c] = T(exp_nonpositive(C(xb[i * inner + c]) - mx[c]) * sm[c]);
          }
      }
    }
  });
}

template <bool Log>
void softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  dispatch_floating(in[0].dtype(), Log ? "log_softmax" : "softmax",
                    [&]<class T>() { softmax_into<T, Log>(in[0], out[0], a.i("axis")); });
}

}  // namespace

void register_cpu_reduction_kernels() {
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CPU, fn); };
  reg("sum", sum_kernel);
  reg("mean", mean_kernel);
  reg("prod", prod_kernel);
  reg("max", max_kernel);
  reg("min", min_kernel);
  reg("all", all_kernel);
  reg("any", any_kernel);
  reg("argmax", arg_kernel<true>);
  reg("argmin", arg_kernel<false>);
  reg("softmax", softmax_kernel<false>);
  reg("log_softmax", softmax_kernel<true>);
}
#if SOMA_ISA_ONCE && SOMA_ISA_MULTI
void reduction_fallback(int which, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                        const Attrs& a) {
  switch (which) {
    case kSum: return sum_kernel(in, out, a);
    case kProd: return prod_kernel(in, out, a);
    case kMax: return max_kernel(in, out, a);
    case kMin: return min_kernel(in, out, a);
    case kArgmax: return arg_kernel<true>(in, out, a);
    case kArgmin: return arg_kernel<false>(in, out, a);
  }
}
#endif
SOMA_ISA_END

#if SOMA_ISA_ONCE
// The kernels of the active instruction set (src/internal/cpu_isa.hpp).
void register_cpu_reduction_kernels() { SOMA_ISA_SELECT(register_cpu_reduction_kernels)(); }
#endif

}  // namespace soma::detail
