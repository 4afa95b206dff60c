// CPU kernels for elementwise ops: one template loop with three paths (packed, scalar operand,
// general strided with broadcasting), instantiated per op of the elementwise table
// (src/ops/elementwise_table.hpp) and dtype. 16-bit floats compute in f32.
#include <cmath>
#include <type_traits>

#include "internal/dispatch.hpp"
#include "internal/fast_paths.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "ops/elementwise_table.hpp"
#include "soma/op.hpp"

#define SOMA_ISA_FILE "backend/cpu/elementwise.cpp"
#include "backend/cpu/isa_foreach.hpp"  // this file once per instruction set (runtime dispatch)

namespace soma::detail {
SOMA_ISA_BEGIN
namespace {

template <class T> T* base_ptr(const Tensor& t) { return static_cast<T*>(t.storage()->data); }

// The dtypes each instruction-set pass compiles its own loops for: f32 and the 16-bit floats
// (which compute in f32 and convert with F16C / AVX-512 in the passes). f64, the integers and
// bool run the baseline pass's loops on every machine (g_baseline_kernel, set when the kernels
// are registered). Compiling all nine dtypes in all four passes made this file a third of the
// library's build time (325 s of 1100 on one core, issue 35); these loops gain little from
// the wider vectors in training and inference, where f32 (and bf16/f16 under autocast) is what
// runs elementwise.
// The avx pass (AVX without AVX2: CPUs of 2011-2013) compiles none: the baseline's loops.
template <class T> constexpr bool in_this_pass() {
#if SOMA_ISA_ONCE
  return true;
#elif !SOMA_ISA_AVX2
  return false;
#else
  return computes_in_f32_v<T>;
#endif
}
template <class F> KernelFn g_baseline_kernel = nullptr;

// out = op(a, b) with broadcasting; T is the input type, R the output type.
template <class T, class R, class Op>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, const Op& op) {
  using C = compute_t<T>;
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const T* pa = base_ptr<T>(a);
  const T* pb = base_ptr<T>(b);
  R* po = base_ptr<R>(out) + out.offset();
  const bool a_full = a.is_contiguous() && a.shape() == out.shape();
  const bool b_full = b.is_contiguous() && b.shape() == out.shape();
  if (a_full && b_full) {
    const T* x = pa + a.offset();
    const T* y = pb + b.offset();
    parallel_for(n, kParallelGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) po[i] = R(op(C(x[i]), C(y[i])));
    });
  } else if (a_full && b.numel() == 1) {
    const T* x = pa + a.offset();
    const C y = C(pb[b.offset()]);
    parallel_for(n, kParallelGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) po[i] = R(op(C(x[i]), y));
    });
  } else if (b_full && a.numel() == 1) {
    const C x = C(pa[a.offset()]);
    const T* y = pb + b.offset();
    parallel_for(n, kParallelGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) po[i] = R(op(x, C(y[i])));
    });
  } else {
    Strides sa = broadcast_strides(a.shape(), a.strides(), out.shape());
    Strides sb = broadcast_strides(b.shape(), b.strides(), out.shape());
    R* o0 = base_ptr<R>(out);
    // Rows with unit strides, or one operand repeated along the row (a conv bias [C, 1, 1] over
    // [N, C, H, W], a Dense bias over its batch) get loops the compiler vectorises; the general
    // strided loop stays scalar (issue 5: the conv bias add was 4% of a LeNet step there).
    const bool rows = fast_paths_enabled();
    for_each_row<3>(out.shape(), {&sa, &sb, &out.strides()}, {a.offset(), b.offset(), out.offset()},
                    [&](const std::array<std::int64_t, 3>& off, std::int64_t m,
                        const std::array<std::int64_t, 3>& in) {
                      const T* x = pa + off[0];
                      const T* y = pb + off[1];
                      R* o = o0 + off[2];
                      if (rows && in[2] == 1 && in[0] <= 1 && in[1] <= 1) {
                        if (in[0] == 1 && in[1] == 1) {
                          for (std::int64_t j = 0; j < m; ++j) o[j] = R(op(C(x[j]), C(y[j])));
                          return;
                        }
                        if (in[0] == 1 && in[1] == 0) {
                          const C yv = C(y[0]);
                          for (std::int64_t j = 0; j < m; ++j) o[j] = R(op(C(x[j]), yv));
                          return;
                        }
                        if (in[0] == 0 && in[1] == 1) {
                          const C xv = C(x[0]);
                          for (std::int64_t j = 0; j < m; ++j) o[j] = R(op(xv, C(y[j])));
                          return;
                        }
                      }
                      for (std::int64_t j = 0; j < m; ++j)
                        o[j * in[2]] = R(op(C(x[j * in[0]]), C(y[j * in[1]])));
                    });
  }
}

template <class T, class R, class Op>
void unary_loop(const Tensor& a, const Tensor& out, const Op& op) {
  using C = compute_t<T>;
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const T* pa = base_ptr<T>(a);
  R* po = base_ptr<R>(out);
  if (a.is_contiguous()) {
    const T* x = pa + a.offset();
    R* o = po + out.offset();
    parallel_for(n, kParallelGrain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) o[i] = R(op(C(x[i])));
    });
  } else {
    for_each_row<2>(out.shape(), {&a.strides(), &out.strides()}, {a.offset(), out.offset()},
                    [&](const std::array<std::int64_t, 2>& off, std::int64_t m,
                        const std::array<std::int64_t, 2>& in) {
                      for (std::int64_t j = 0; j < m; ++j)
                        po[off[1] + j * in[1]] = R(op(C(pa[off[0] + j * in[0]])));
                    });
  }
}

// One kernel per table op (src/ops/elementwise_table.hpp): F is the op's functor, its family
// says which dtypes it takes and whether it returns bool.
template <class F>
void binary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const F op = ew::make_functor<F>(attrs);
  dispatch_dtype(in[0].dtype(), [&]<class T>() {
    if constexpr (!in_this_pass<T>()) {
      g_baseline_kernel<F>(in, out, attrs);
    } else if constexpr (ew::supports<F::family, compute_t<T>>()) {
      binary_loop<T, ew::result_t<F::family, T>>(in[0], in[1], out[0], op);
    } else {
      fail(F::name, "dtype ", dtype_name(in[0].dtype()), " is not supported");
    }
  });
}

template <class F>
void unary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const F op = ew::make_functor<F>(attrs);
  dispatch_dtype(in[0].dtype(), [&]<class T>() {
    if constexpr (!in_this_pass<T>()) {
      g_baseline_kernel<F>(in, out, attrs);
    } else if constexpr (ew::supports<F::family, compute_t<T>>()) {
      unary_loop<T, ew::result_t<F::family, T>>(in[0], out[0], op);
    } else {
      fail(F::name, "dtype ", dtype_name(in[0].dtype()), " is not supported");
    }
  });
}

// The table's functors under local names: the loops instantiated for them then have internal
// linkage, as loops over file-local functors, and GCC inlines them as it did.
#define SOMA_EW_LOCAL(NAME, ...) \
  struct NAME : ew::NAME##_fn {};
SOMA_ELEMENTWISE_UNARY(SOMA_EW_LOCAL)
SOMA_ELEMENTWISE_BINARY(SOMA_EW_LOCAL)
#undef SOMA_EW_LOCAL

// where(cond, a, b): a ternary loop, strided with broadcasting.
// The fast case of where (ReLU's gradient, masking): cond and every operand either dense in
// the output's shape or a single element; one branch-free loop per layout. The loop lives in
// its own function so that the pointers stay __restrict (through a lambda's captures they do
// not, and GCC then keeps a mispredicted branch per element).
template <class T, bool kScalarA, bool kScalarB>
void where_rows(const unsigned char* __restrict c, const T* __restrict a, const T* __restrict b,
                T* __restrict o, std::int64_t lo, std::int64_t hi) {
  for (std::int64_t i = lo; i < hi; ++i) {
    const T av = kScalarA ? a[0] : a[i];  // both read unconditionally: a select, no branch
    const T bv = kScalarB ? b[0] : b[i];
    o[i] = c[i] != 0 ? av : bv;  // bools read as bytes: GCC vectorises this form only
  }
}

template <class T, bool kScalarA, bool kScalarB>
void where_dense(const bool* c, const T* a, const T* b, T* o, std::int64_t n) {
  parallel_for(n, kParallelGrain, [&](std::int64_t lo, std::int64_t hi) {
    where_rows<T, kScalarA, kScalarB>(reinterpret_cast<const unsigned char*>(c), a, b, o, lo, hi);
  });
}

bool where_fast(const std::vector<Tensor>& in, const Tensor& o) {
  if (!fast_paths_enabled() || !o.is_contiguous()) return false;
  auto dense = [&](const Tensor& t) { return t.shape() == o.shape() && t.is_contiguous(); };
  if (!dense(in[0])) return false;
  const bool sa = !dense(in[1]), sb = !dense(in[2]);
  if ((sa && in[1].numel() != 1) || (sb && in[2].numel() != 1)) return false;
  const bool* pc = in[0].data<bool>();
  const std::int64_t n = o.numel();
  dispatch_dtype(o.dtype(), [&]<class T>() {
    const T* pa = in[1].data<T>();
    const T* pb = in[2].data<T>();
    T* po = o.data<T>();
    if (sa && sb) where_dense<T, true, true>(pc, pa, pb, po, n);  // a mask of two values
    else if (sa) where_dense<T, true, false>(pc, pa, pb, po, n);
    else if (sb) where_dense<T, false, true>(pc, pa, pb, po, n);
    else where_dense<T, false, false>(pc, pa, pb, po, n);
  });
  return true;
}

void where_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  if (where_fast(in, o)) return;
  Strides sc = broadcast_strides(in[0].shape(), in[0].strides(), o.shape());
  Strides sa = broadcast_strides(in[1].shape(), in[1].strides(), o.shape());
  Strides sb = broadcast_strides(in[2].shape(), in[2].strides(), o.shape());
  const bool* pc = base_ptr<bool>(in[0]);
  dispatch_dtype(o.dtype(), [&]<class T>() {
    const T* pa = base_ptr<T>(in[1]);
    const T* pb = base_ptr<T>(in[2]);
    T* po = base_ptr<T>(o);
    for_each_row<4>(o.shape(), {&sc, &sa, &sb, &o.strides()},
                    {in[0].offset(), in[1].offset(), in[2].offset(), o.offset()},
                    [&](const std::array<std::int64_t, 4>& off, std::int64_t m,
                        const std::array<std::int64_t, 4>& s) {
                      // A broadcast mask row ([T, S] over [B, H, T, S]) with dense or single
                      // values: the vectorised loop of the dense case.
                      if (s[0] == 1 && s[3] == 1 && s[1] <= 1 && s[2] <= 1) {
                        const auto* c = reinterpret_cast<const unsigned char*>(pc + off[0]);
                        const T* a = pa + off[1];
                        const T* b = pb + off[2];
                        T* o = po + off[3];
                        if (s[1] == 1 && s[2] == 1) where_rows<T, false, false>(c, a, b, o, 0, m);
                        else if (s[1] == 1) where_rows<T, false, true>(c, a, b, o, 0, m);
                        else if (s[2] == 1) where_rows<T, true, false>(c, a, b, o, 0, m);
                        else where_rows<T, true, true>(c, a, b, o, 0, m);
                        return;
                      }
                      for (std::int64_t j = 0; j < m; ++j)
                        po[off[3] + j * s[3]] = pc[off[0] + j * s[0]] ? pa[off[1] + j * s[1]]
                                                                       : pb[off[2] + j * s[2]];
                    });
  });
}

}  // namespace

void register_cpu_elementwise_kernels() {
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CPU, fn); };
#define SOMA_EW_REG1(NAME, ...) reg(#NAME, unary_kernel<NAME>);
#define SOMA_EW_REG2(NAME, ...) reg(#NAME, binary_kernel<NAME>);
  SOMA_ELEMENTWISE_UNARY(SOMA_EW_REG1)
  SOMA_ELEMENTWISE_BINARY(SOMA_EW_REG2)
#undef SOMA_EW_REG1
#undef SOMA_EW_REG2
  reg("where", where_kernel);
}
SOMA_ISA_END

#if SOMA_ISA_ONCE
// The kernels of the active instruction set (src/internal/cpu_isa.hpp); the passes' kernels hand
// the dtypes they leave out to the baseline ones (in_this_pass).
void register_cpu_elementwise_kernels() {
#if SOMA_ISA_MULTI
#define SOMA_EW_FALLBACK(NS, KIND, NAME) \
  NS::g_baseline_kernel<NS::NAME> = &isa_baseline::KIND##_kernel<isa_baseline::NAME>;
#define SOMA_EW_FALLBACK1(NAME, ...)             \
  SOMA_EW_FALLBACK(isa_avx, unary, NAME)         \
  SOMA_EW_FALLBACK(isa_avx2, unary, NAME)        \
  SOMA_EW_FALLBACK(isa_avx512, unary, NAME)
#define SOMA_EW_FALLBACK2(NAME, ...)             \
  SOMA_EW_FALLBACK(isa_avx, binary, NAME)        \
  SOMA_EW_FALLBACK(isa_avx2, binary, NAME)       \
  SOMA_EW_FALLBACK(isa_avx512, binary, NAME)
  SOMA_ELEMENTWISE_UNARY(SOMA_EW_FALLBACK1)
  SOMA_ELEMENTWISE_BINARY(SOMA_EW_FALLBACK2)
#undef SOMA_EW_FALLBACK
#undef SOMA_EW_FALLBACK1
#undef SOMA_EW_FALLBACK2
#endif
  SOMA_ISA_SELECT(register_cpu_elementwise_kernels)();
}
#endif

}  // namespace soma::detail
