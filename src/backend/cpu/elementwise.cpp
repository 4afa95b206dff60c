// CPU kernels for elementwise ops: one template loop with three paths (packed, scalar operand,
// general strided with broadcasting), instantiated per op and dtype. 16-bit floats compute in f32.
#include <cmath>

#include "internal/dispatch.hpp"
#include "internal/fast_paths.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "soma/op.hpp"

namespace soma::detail {
namespace {

template <class T> T* base_ptr(const Tensor& t) { return static_cast<T*>(t.storage()->data); }

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

// Output type: the input's own type, or bool for predicates.
template <class T, bool Predicate> using out_t = std::conditional_t<Predicate, bool, T>;

template <class Op, bool Predicate = false>
void binary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Op op(attrs);
  dispatch_dtype(in[0].dtype(), [&]<class T>() {
    if constexpr (Op::template supports<T>()) {
      binary_loop<T, out_t<T, Predicate>>(in[0], in[1], out[0], op);
    } else {
      fail(Op::name, "dtype ", dtype_name(in[0].dtype()), " is not supported");
    }
  });
}

template <class Op, bool Predicate = false>
void unary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Op op(attrs);
  dispatch_dtype(in[0].dtype(), [&]<class T>() {
    if constexpr (Op::template supports<T>()) {
      unary_loop<T, out_t<T, Predicate>>(in[0], out[0], op);
    } else {
      fail(Op::name, "dtype ", dtype_name(in[0].dtype()), " is not supported");
    }
  });
}

template <class T> constexpr bool is_float_v = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Functor families: which storage types each supports.
struct NumericOp {
  explicit NumericOp(const Attrs&) {}
  template <class T> static constexpr bool supports() { return !std::is_same_v<T, bool>; }
};
struct FloatOp {
  explicit FloatOp(const Attrs&) {}
  template <class T> static constexpr bool supports() { return is_float_v<T>; }
};
struct AnyOp {
  explicit AnyOp(const Attrs&) {}
  template <class T> static constexpr bool supports() { return true; }
};
struct BoolOp {
  explicit BoolOp(const Attrs&) {}
  template <class T> static constexpr bool supports() { return std::is_same_v<T, bool>; }
};

#define SOMA_BINARY(NAME, BASE, EXPR)                                     \
  struct NAME : BASE {                                                    \
    static constexpr const char* name = #NAME;                            \
    using BASE::BASE;                                                     \
    template <class C> C operator()(C a, C b) const { return EXPR; }      \
  };
#define SOMA_PREDICATE(NAME, BASE, EXPR)                                  \
  struct NAME : BASE {                                                    \
    static constexpr const char* name = #NAME;                            \
    using BASE::BASE;                                                     \
    template <class C> bool operator()(C a, C b) const { return EXPR; }   \
  };
#define SOMA_UNARY(NAME, BASE, EXPR)                                      \
  struct NAME : BASE {                                                    \
    static constexpr const char* name = #NAME;                            \
    using BASE::BASE;                                                     \
    template <class C> C operator()(C x) const { return EXPR; }           \
  };

// Integer floor_div / mod are defined for every operand (C++'s / and % are not, and x86's idiv
// traps): a zero divisor gives 0 for both (NumPy's result, without its warning), and
// INT_MIN / -1 wraps to INT_MIN with remainder 0 (as NumPy). The divisor is replaced by 1 in
// those cases so that the hardware division never sees them; the results are then selected.
template <class C> C floor_div_impl(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::floor(a / b);
  } else if constexpr (std::is_unsigned_v<C>) {
    return b == 0 ? C(0) : C(a / b);
  } else {
    using U = std::make_unsigned_t<C>;
    const bool zero = b == 0, minus_one = b == C(-1);
    const C d = (zero || minus_one) ? C(1) : b;
    C q = C(a / d);
    q = (a % d != 0 && ((a < 0) != (d < 0))) ? C(q - 1) : q;
    q = minus_one ? C(U(0) - U(a)) : q;  // -a, wrapping for INT_MIN
    return zero ? C(0) : q;
  }
}
template <class C> C mod_impl(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else if constexpr (std::is_unsigned_v<C>) {
    return b == 0 ? C(0) : C(a % b);
  } else {
    const bool zero_rem = b == 0 || b == C(-1);  // x % -1 is 0; x % 0 is defined as 0
    const C d = zero_rem ? C(1) : b;
    C r = C(a % d);
    r = (r != 0 && ((r < 0) != (d < 0))) ? C(r + d) : r;
    return zero_rem ? C(0) : r;
  }
}
template <class C> C pow_impl(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::pow(a, b);
  } else {  // integer power by squaring; negative exponents give 0 except for |a| == 1
    if (b < 0) {
      if constexpr (std::is_signed_v<C>) {
        if (a == 1) return 1;
        if (a == -1) return (b % 2) ? C(-1) : C(1);
      }
      return 0;
    }
    C r = 1, base = a;
    for (auto e = b; e > 0; e >>= 1) {
      if (e & 1) r = C(r * base);
      base = C(base * base);
    }
    return r;
  }
}

SOMA_BINARY(add, NumericOp, C(a + b))
SOMA_BINARY(subtract, NumericOp, C(a - b))
SOMA_BINARY(multiply, NumericOp, C(a * b))
SOMA_BINARY(divide, FloatOp, a / b)
SOMA_BINARY(floor_div, NumericOp, floor_div_impl<C>(a, b))
SOMA_BINARY(mod, NumericOp, mod_impl<C>(a, b))
SOMA_BINARY(pow, NumericOp, pow_impl<C>(a, b))
SOMA_BINARY(maximum, NumericOp, (a >= b || a != a) ? a : b)
SOMA_BINARY(minimum, NumericOp, (a <= b || a != a) ? a : b)
SOMA_BINARY(squared_difference, NumericOp, C((a - b) * (a - b)))
// (x, g): relu's gradient in one pass, PyTorch's threshold_backward: 0 where x <= 0, else g (so
// g passes where x is NaN).
SOMA_BINARY(relu_grad, NumericOp, a <= C(0) ? C(0) : b)
SOMA_PREDICATE(equal, AnyOp, a == b)
SOMA_PREDICATE(not_equal, AnyOp, a != b)
SOMA_PREDICATE(less, AnyOp, a < b)
SOMA_PREDICATE(less_equal, AnyOp, a <= b)
SOMA_PREDICATE(greater, AnyOp, a > b)
SOMA_PREDICATE(greater_equal, AnyOp, a >= b)
SOMA_BINARY(logical_and, BoolOp, a && b)
SOMA_BINARY(logical_or, BoolOp, a || b)

template <class C> C sign_impl(C x) {
  if constexpr (std::is_unsigned_v<C>) return C(x > 0);
  else return x != x ? x : C((x > 0) - (x < 0));
}
template <class C> C abs_impl(C x) {
  if constexpr (std::is_unsigned_v<C>) return x;
  else if constexpr (std::is_floating_point_v<C>) return std::abs(x);
  else return C(x < 0 ? -x : x);
}

SOMA_UNARY(abs, NumericOp, abs_impl<C>(x))
SOMA_UNARY(negative, NumericOp, C(-x))
SOMA_UNARY(sign, NumericOp, sign_impl<C>(x))
SOMA_UNARY(square, NumericOp, C(x * x))
SOMA_UNARY(reciprocal, FloatOp, C(1) / x)
SOMA_UNARY(sqrt, FloatOp, std::sqrt(x))
SOMA_UNARY(rsqrt, FloatOp, C(1) / std::sqrt(x))
SOMA_UNARY(exp, FloatOp, std::exp(x))
SOMA_UNARY(log, FloatOp, std::log(x))
SOMA_UNARY(log1p, FloatOp, std::log1p(x))
SOMA_UNARY(expm1, FloatOp, std::expm1(x))
SOMA_UNARY(sin, FloatOp, std::sin(x))
SOMA_UNARY(cos, FloatOp, std::cos(x))
SOMA_UNARY(tanh, FloatOp, std::tanh(x))
SOMA_UNARY(erf, FloatOp, std::erf(x))
// Stable for large |x|: never exponentiates a large positive number.
SOMA_UNARY(sigmoid, FloatOp, x >= 0 ? C(1) / (C(1) + std::exp(-x)) : std::exp(x) / (C(1) + std::exp(x)))
// NaN propagates (as PyTorch's relu): NaN <= 0 is false. relu(-0) is +0.
SOMA_UNARY(relu, NumericOp, x <= C(0) ? C(0) : x)
SOMA_UNARY(softplus, FloatOp, std::log1p(std::exp(-std::abs(x))) + (x > 0 ? x : C(0)))
SOMA_UNARY(round, FloatOp, std::nearbyint(x))
SOMA_UNARY(ceil, FloatOp, std::ceil(x))
SOMA_UNARY(floor, FloatOp, std::floor(x))
SOMA_UNARY(logical_not, BoolOp, !x)

struct leaky_relu : FloatOp {
  static constexpr const char* name = "leaky_relu";
  double alpha;
  explicit leaky_relu(const Attrs& a) : FloatOp(a), alpha(a.f("alpha")) {}
  template <class C> C operator()(C x) const { return x > 0 ? x : C(alpha) * x; }
};
struct elu : FloatOp {
  static constexpr const char* name = "elu";
  double alpha;
  explicit elu(const Attrs& a) : FloatOp(a), alpha(a.f("alpha")) {}
  template <class C> C operator()(C x) const { return x > 0 ? x : C(alpha) * std::expm1(x); }
};

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
  if ((sa && in[1].numel() != 1) || (sb && in[2].numel() != 1) || (sa && sb)) return false;
  const bool* pc = in[0].data<bool>();
  const std::int64_t n = o.numel();
  dispatch_dtype(o.dtype(), [&]<class T>() {
    const T* pa = in[1].data<T>();
    const T* pb = in[2].data<T>();
    T* po = o.data<T>();
    if (sa) where_dense<T, true, false>(pc, pa, pb, po, n);
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
                      for (std::int64_t j = 0; j < m; ++j)
                        po[off[3] + j * s[3]] = pc[off[0] + j * s[0]] ? pa[off[1] + j * s[1]]
                                                                       : pb[off[2] + j * s[2]];
                    });
  });
}

}  // namespace

void register_cpu_elementwise_kernels() {
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CPU, fn); };
  reg("add", binary_kernel<add>);
  reg("subtract", binary_kernel<subtract>);
  reg("multiply", binary_kernel<multiply>);
  reg("divide", binary_kernel<divide>);
  reg("floor_div", binary_kernel<floor_div>);
  reg("mod", binary_kernel<mod>);
  reg("pow", binary_kernel<pow>);
  reg("maximum", binary_kernel<maximum>);
  reg("minimum", binary_kernel<minimum>);
  reg("squared_difference", binary_kernel<squared_difference>);
  reg("relu_grad", binary_kernel<relu_grad>);
  reg("equal", binary_kernel<equal, true>);
  reg("not_equal", binary_kernel<not_equal, true>);
  reg("less", binary_kernel<less, true>);
  reg("less_equal", binary_kernel<less_equal, true>);
  reg("greater", binary_kernel<greater, true>);
  reg("greater_equal", binary_kernel<greater_equal, true>);
  reg("logical_and", binary_kernel<logical_and>);
  reg("logical_or", binary_kernel<logical_or>);
  reg("abs", unary_kernel<abs>);
  reg("negative", unary_kernel<negative>);
  reg("sign", unary_kernel<sign>);
  reg("square", unary_kernel<square>);
  reg("reciprocal", unary_kernel<reciprocal>);
  reg("sqrt", unary_kernel<sqrt>);
  reg("rsqrt", unary_kernel<rsqrt>);
  reg("exp", unary_kernel<exp>);
  reg("log", unary_kernel<log>);
  reg("log1p", unary_kernel<log1p>);
  reg("expm1", unary_kernel<expm1>);
  reg("sin", unary_kernel<sin>);
  reg("cos", unary_kernel<cos>);
  reg("tanh", unary_kernel<tanh>);
  reg("erf", unary_kernel<erf>);
  reg("sigmoid", unary_kernel<sigmoid>);
  reg("relu", unary_kernel<relu>);
  reg("softplus", unary_kernel<softplus>);
  reg("round", unary_kernel<round>);
  reg("ceil", unary_kernel<ceil>);
  reg("floor", unary_kernel<floor>);
  reg("logical_not", unary_kernel<logical_not>);
  reg("leaky_relu", unary_kernel<leaky_relu>);
  reg("elu", unary_kernel<elu>);
  reg("where", where_kernel);
}

}  // namespace soma::detail
