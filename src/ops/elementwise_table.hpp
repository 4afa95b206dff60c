#pragma once
// The elementwise ops, listed once. Every consumer expands this table with its own X macro:
//   src/ops/elementwise.cpp          op definitions (infer, gradient, tags, ONNX, test table)
//                                    and the public functions without attributes
//   src/backend/cpu/elementwise.cpp  the CPU vector loops
//   src/backend/cpu/fused_block.cpp  graph mode's fused f32 chains (block loops, registers)
//   src/backend/cuda/*               the CUDA op enums, names and the device switch
// Adding an elementwise op: one line here, its gradient (written with ops) in
// src/ops/elementwise.cpp, its public function declared in include/soma/ops.hpp (defined from the
// table when it takes no attribute; by hand in src/ops/elementwise.cpp when it does). It then
// has CPU and CUDA kernels, graph-mode fusion, its ONNX mapping and its generated tests.
//
// The scalar formula is a functor callable from host and device code (SOMA_HD), templated on
// the compute type C (float for f32/f16/bf16, double, the integer types, bool). It may use only
// arithmetic, comparisons, select() / clamp() and the math functions of this namespace (exp,
// sqrt, ...), which map to std:: on the host and to CUDA's functions on the device. Formulas
// built from + - * /, comparisons, select, abs and sqrt alone also run on vector registers in
// fused chains (Fuse::Registers): the fused block instantiates them with a vector type.
//
// This header is compiled by nvcc (C++17) too: it includes no soma header and no C++20.
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#define SOMA_HD __host__ __device__
#else
#define SOMA_HD
#endif

namespace soma::ew {

// Which storage types an op takes (and whether its result is bool).
enum class Family {
  Numeric,    // every dtype but bool
  Float,      // f32, f64, f16, bf16 (tag kFloatOnly)
  Any,        // every dtype
  Bool,       // bool only (logical ops)
  Predicate,  // every dtype; the result is bool
};
// C: the compute type (float for the 16-bit floats).
template <Family F, class C>
constexpr bool supports() {
  if constexpr (F == Family::Numeric) return !std::is_same_v<C, bool>;
  else if constexpr (F == Family::Float) return std::is_floating_point_v<C>;
  else if constexpr (F == Family::Bool) return std::is_same_v<C, bool>;
  else return true;
}
template <Family F, class T> using result_t = std::conditional_t<F == Family::Predicate, bool, T>;

// How graph mode fuses the op into an f32 chain: in vector registers (the formula instantiated
// with a vector type, see above), block by block with its own kernel, or not at all.
enum class Fuse { Registers, Blocks, No };

// The shapes of the generated tests (OpTestSpec::shapes): none, one [3, 4] input, [3, 4] with a
// broadcast [4], or two [3, 4].
enum class TestShapes { None, One, Broadcast, Same };

// ---- math on host and device --------------------------------------------------------------
#if defined(__CUDA_ARCH__)
#define SOMA_EW_MATH1(NAME, FN)                                          \
  SOMA_HD inline float NAME(float x) { return ::FN##f(x); }              \
  SOMA_HD inline double NAME(double x) { return ::FN(x); }
#define SOMA_EW_MATH2(NAME, FN)                                          \
  SOMA_HD inline float NAME(float x, float y) { return ::FN##f(x, y); }  \
  SOMA_HD inline double NAME(double x, double y) { return ::FN(x, y); }
#else
#define SOMA_EW_MATH1(NAME, FN)                                          \
  SOMA_HD inline float NAME(float x) { return std::FN(x); }              \
  SOMA_HD inline double NAME(double x) { return std::FN(x); }
#define SOMA_EW_MATH2(NAME, FN)                                          \
  SOMA_HD inline float NAME(float x, float y) { return std::FN(x, y); }  \
  SOMA_HD inline double NAME(double x, double y) { return std::FN(x, y); }
#endif
SOMA_EW_MATH1(abs, fabs)
SOMA_EW_MATH1(sqrt, sqrt)
SOMA_EW_MATH1(exp, exp)
SOMA_EW_MATH1(log, log)
SOMA_EW_MATH1(log1p, log1p)
SOMA_EW_MATH1(expm1, expm1)
SOMA_EW_MATH1(sin, sin)
SOMA_EW_MATH1(cos, cos)
SOMA_EW_MATH1(tanh, tanh)
SOMA_EW_MATH1(erf, erf)
SOMA_EW_MATH1(floor, floor)
SOMA_EW_MATH1(ceil, ceil)
SOMA_EW_MATH1(nearbyint, nearbyint)  // half to even in the default rounding mode
SOMA_EW_MATH2(fmod, fmod)
SOMA_EW_MATH2(pow, pow)
#undef SOMA_EW_MATH1
#undef SOMA_EW_MATH2

// c ? a : b (vector types overload it with a lane mask).
template <class C>
SOMA_HD inline C select(bool c, C a, C b) {
  return c ? a : b;
}
// v limited to [lo, hi]; NaN stays NaN.
template <class C>
SOMA_HD inline C clamp(C v, C lo, C hi) {
  return select(v < lo, lo, select(v > hi, hi, v));
}

// ---- formulas too long for one table cell ---------------------------------------------------
template <class C>
SOMA_HD inline C absval(C x) {
  if constexpr (std::is_unsigned_v<C>) return x;
  else if constexpr (std::is_integral_v<C>) return C(x < 0 ? -x : x);
  else return abs(x);  // unqualified: vector types bring their own
}
template <class C>
SOMA_HD inline C signum(C x) {
  if constexpr (std::is_unsigned_v<C>) return C(x > 0);
  else return x != x ? x : C((x > 0) - (x < 0));
}
// Integer floor_div / mod are defined for every operand (C++'s / and % are not, and x86's idiv
// traps): a zero divisor gives 0 for both (NumPy's result, without its warning), and
// INT_MIN / -1 wraps to INT_MIN with remainder 0 (as NumPy). The divisor is replaced by 1 in
// those cases so that the hardware division never sees them; the results are then selected.
template <class C>
SOMA_HD inline C floordiv(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return floor(a / b);
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
template <class C>
SOMA_HD inline C modulo(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = fmod(a, b);
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
template <class C>
SOMA_HD inline C power(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return pow(a, b);
  } else {  // integer power by squaring; negative exponents give 0 except for |a| == 1
    if constexpr (std::is_signed_v<C>) {
      if (b < 0) {
        if (a == 1) return 1;
        if (a == -1) return (b % 2) ? C(-1) : C(1);
        return 0;
      }
    }
    C r = 1, base = a;
    for (C e = b; e > 0; e >>= 1) {
      if (e & 1) r = C(r * base);
      base = C(base * base);
    }
    return r;
  }
}
// Stable for large |x|: never exponentiates a large positive number.
template <class C>
SOMA_HD inline C sigmoid(C x) {
  return x >= 0 ? C(1) / (C(1) + exp(-x)) : exp(x) / (C(1) + exp(x));
}

// ---- the table ------------------------------------------------------------------------------
// X(name, family, tags, attrs, fuse, onnx, test, reference, gradient, formula)
//   tags       OpTag bits besides the ones the family and arity give (kActivation), or 0
//   attrs      (count, alpha's default, beta's default): attributes "alpha" then "beta"
//   fuse       Registers / Blocks / No (see Fuse)
//   onnx       (op type, first opset with these semantics); "" where no one-to-one op exists
//   test       (shapes, lo, hi, gradcheck, min_gap, {kinks}) for OpTestSpec
//   reference  the f64 result from doubles x (a, b), alpha, beta; std:: functions, written
//              independently of the formula (read by the registry-driven tests)
//   gradient   the GradFn in src/ops/elementwise.cpp (written with ops), or nullptr
//   formula    the scalar result from x (a, b) of compute type C, alpha and beta (doubles)
// Only src/ops/elementwise.cpp reads tags, onnx, test, reference and gradient.
//
// NaN propagates through relu, maximum, minimum (as PyTorch's); relu(-0) is +0.
#define SOMA_ELEMENTWISE_UNARY(X)                                                                \
  X(abs, Numeric, 0, (0, 0, 0), Registers, ("Abs", 6), (One, -2, 2, true, 0.05, {0}),           \
    std::fabs(x), abs_grad, absval(x))                                                           \
  X(negative, Numeric, 0, (0, 0, 0), Registers, ("Neg", 6), (One, -2, 2, true, 0, {}), -x,      \
    neg_grad, C(-x))                                                                             \
  X(sign, Numeric, 0, (0, 0, 0), Blocks, ("Sign", 9), (One, -2, 2, false, 0.05, {0}),           \
    double((x > 0) - (x < 0)), zero_grad, signum(x))                                             \
  X(square, Numeric, 0, (0, 0, 0), Registers, ("", 1), (One, -2, 2, true, 0, {}), x * x,        \
    square_grad, C(x * x))                                                                       \
  X(reciprocal, Float, 0, (0, 0, 0), Registers, ("Reciprocal", 6),                               \
    (One, -2, 2, true, 0.5, {0}), 1 / x, reciprocal_grad, C(1) / x)                              \
  X(sqrt, Float, 0, (0, 0, 0), Registers, ("Sqrt", 6), (One, 0.1, 3, true, 0, {}),              \
    std::sqrt(x), sqrt_grad, sqrt(x))                                                            \
  X(rsqrt, Float, 0, (0, 0, 0), Registers, ("", 1), (One, 0.1, 3, true, 0, {}),                 \
    1 / std::sqrt(x), rsqrt_grad, C(1) / sqrt(x))                                                \
  X(exp, Float, 0, (0, 0, 0), Blocks, ("Exp", 6), (One, -2, 2, true, 0, {}), std::exp(x),       \
    exp_grad, exp(x))                                                                            \
  X(log, Float, 0, (0, 0, 0), Blocks, ("Log", 6), (One, 0.1, 3, true, 0, {}), std::log(x),      \
    log_grad, log(x))                                                                            \
  X(log1p, Float, 0, (0, 0, 0), Blocks, ("", 1), (One, -0.5, 2, true, 0, {}), std::log1p(x),    \
    log1p_grad, log1p(x))                                                                        \
  X(expm1, Float, 0, (0, 0, 0), Blocks, ("", 1), (One, -2, 2, true, 0, {}), std::expm1(x),      \
    expm1_grad, expm1(x))                                                                        \
  X(sin, Float, 0, (0, 0, 0), Blocks, ("Sin", 7), (One, -3, 3, true, 0, {}), std::sin(x),       \
    sin_grad, sin(x))                                                                            \
  X(cos, Float, 0, (0, 0, 0), Blocks, ("Cos", 7), (One, -3, 3, true, 0, {}), std::cos(x),       \
    cos_grad, cos(x))                                                                            \
  X(asin, Float, 0, (0, 0, 0), Blocks, ("Asin", 7), (One, -0.9, 0.9, true, 0, {}),             \
    std::asin(x), asin_grad, asin(x))                                                            \
  X(acos, Float, 0, (0, 0, 0), Blocks, ("Acos", 7), (One, -0.9, 0.9, true, 0, {}),             \
    std::acos(x), acos_grad, acos(x))                                                            \
  X(atan, Float, 0, (0, 0, 0), Blocks, ("Atan", 7), (One, -3, 3, true, 0, {}), std::atan(x),    \
    atan_grad, atan(x))                                                                          \
  X(tanh, Float, kActivation, (0, 0, 0), Blocks, ("Tanh", 6), (One, -2, 2, true, 0, {}),        \
    std::tanh(x), tanh_grad, tanh(x))                                                            \
  X(erf, Float, 0, (0, 0, 0), Blocks, ("Erf", 9), (One, -2, 2, true, 0, {}), std::erf(x),       \
    erf_grad, erf(x))                                                                            \
  /* gelu(x) (exact, erf form) in one pass: the five-op composition held five activations */    \
  X(gelu_erf, Float, 0, (0, 0, 0), Blocks, ("", 1), (One, -3, 3, true, 0, {}),                  \
    0.5 * x * (1 + std::erf(x * 0.70710678118654752440)), gelu_erf_grad,                        \
    C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440))))                                    \
  X(sigmoid, Float, kActivation, (0, 0, 0), Blocks, ("Sigmoid", 6), (One, -2, 2, true, 0, {}),  \
    1 / (1 + std::exp(-x)), sigmoid_grad, sigmoid(x))                                            \
  X(relu, Numeric, kActivation, (0, 0, 0), Registers, ("Relu", 6),                               \
    (One, -2, 2, true, 0.05, {0}), x > 0 ? x : 0.0, relu_grad, select(x <= C(0), C(0), x))      \
  X(softplus, Float, kActivation, (0, 0, 0), Blocks, ("Softplus", 1),                            \
    (One, -2, 2, true, 0, {}), std::log(1 + std::exp(x)), softplus_grad,                         \
    log1p(exp(-abs(x))) + (x > 0 ? x : C(0)))                                                    \
  X(round, Float, 0, (0, 0, 0), Blocks, ("Round", 11), (One, -2, 2, false, 0, {}),              \
    std::nearbyint(x), zero_grad, nearbyint(x))                                                  \
  X(ceil, Float, 0, (0, 0, 0), Blocks, ("Ceil", 6), (One, -2, 2, false, 0, {}), std::ceil(x),   \
    zero_grad, ceil(x))                                                                          \
  X(floor, Float, 0, (0, 0, 0), Blocks, ("Floor", 6), (One, -2, 2, false, 0, {}),               \
    std::floor(x), zero_grad, floor(x))                                                          \
  X(leaky_relu, Float, kActivation, (1, 0.2, 0), Registers, ("LeakyRelu", 6),                   \
    (One, -2, 2, true, 0.05, {0}), x > 0 ? x : alpha * x, leaky_relu_grad,                       \
    select(x > C(0), x, C(alpha) * x))                                                           \
  X(elu, Float, kActivation, (1, 1.0, 0), Blocks, ("Elu", 6), (One, -2, 2, true, 0.05, {0}),    \
    x > 0 ? x : alpha * (std::exp(x) - 1), elu_grad, x > 0 ? x : C(alpha) * expm1(x))           \
  X(logical_not, Bool, 0, (0, 0, 0), No, ("Not", 1), (None, 0, 1, false, 0, {}), x == 0,        \
    nullptr, !x)                                                                                 \
  X(hardswish, Float, kActivation, (0, 0, 0), Registers, ("HardSwish", 14),                     \
    (One, -4, 4, true, 0.05, {-3, 3}), x * std::min(std::max(x + 3, 0.0), 6.0) / 6,             \
    hardswish_grad, x * clamp(x + C(3), C(0), C(6)) / C(6))                                      \
  X(softsign, Float, kActivation, (0, 0, 0), Registers, ("Softsign", 1),                        \
    (One, -3, 3, true, 0, {}), x / (1 + std::fabs(x)), softsign_grad, x / (C(1) + abs(x)))      \
  /* alpha * x + beta may contract to an FMA differently in two loops: fused by blocks only */   \
  X(hard_sigmoid, Float, kActivation, (2, 0.2, 0.5), Blocks, ("HardSigmoid", 6),                 \
    (One, -4, 4, true, 0.05, {-2.5, 2.5}), std::max(0.0, std::min(1.0, alpha * x + beta)),      \
    hard_sigmoid_grad, clamp(C(alpha) * x + C(beta), C(0), C(1)))

#define SOMA_ELEMENTWISE_BINARY(X)                                                               \
  X(add, Numeric, 0, (0, 0, 0), Registers, ("Add", 7), (Broadcast, -2, 2, true, 0, {}), a + b,  \
    add_grad, C(a + b))                                                                          \
  X(subtract, Numeric, 0, (0, 0, 0), Registers, ("Sub", 7), (Broadcast, -2, 2, true, 0, {}),    \
    a - b, sub_grad, C(a - b))                                                                   \
  X(multiply, Numeric, 0, (0, 0, 0), Registers, ("Mul", 7), (Broadcast, -2, 2, true, 0, {}),    \
    a * b, mul_grad, C(a * b))                                                                   \
  X(divide, Float, 0, (0, 0, 0), Registers, ("Div", 7), (Broadcast, -2, 2, true, 0.5, {0}),     \
    a / b, div_grad, a / b)                                                                      \
  X(floor_div, Numeric, 0, (0, 0, 0), No, ("", 1), (Broadcast, -2, 2, false, 0.5, {0}),         \
    std::floor(a / b), floor_div_grad, floordiv(a, b))                                           \
  X(mod, Numeric, 0, (0, 0, 0), No, ("", 1), (Broadcast, -2, 2, false, 0.5, {0}),               \
    a - b * std::floor(a / b), mod_grad, modulo(a, b))                                           \
  X(pow, Numeric, 0, (0, 0, 0), Blocks, ("Pow", 7), (Broadcast, 0.5, 2, true, 0, {}),           \
    std::pow(a, b), pow_grad, power(a, b))                                                       \
  X(maximum, Numeric, 0, (0, 0, 0), Blocks, ("Max", 8), (Broadcast, -2, 2, true, 0, {}),        \
    a > b ? a : b, maximum_grad, (a >= b || a != a) ? a : b)                                     \
  X(minimum, Numeric, 0, (0, 0, 0), Blocks, ("Min", 8), (Broadcast, -2, 2, true, 0, {}),        \
    a < b ? a : b, minimum_grad, (a <= b || a != a) ? a : b)                                     \
  X(squared_difference, Numeric, 0, (0, 0, 0), Registers, ("", 1),                               \
    (Broadcast, -2, 2, true, 0, {}), (a - b) * (a - b), sqdiff_grad, C((a - b) * (a - b)))      \
  X(equal, Predicate, 0, (0, 0, 0), No, ("Equal", 11), (Broadcast, -2, 2, false, 0, {}),        \
    a == b, nullptr, a == b)                                                                     \
  X(not_equal, Predicate, 0, (0, 0, 0), No, ("", 1), (Broadcast, -2, 2, false, 0, {}), a != b,  \
    nullptr, a != b)                                                                             \
  X(less, Predicate, 0, (0, 0, 0), No, ("Less", 9), (Broadcast, -2, 2, false, 0, {}), a < b,    \
    nullptr, a < b)                                                                              \
  X(less_equal, Predicate, 0, (0, 0, 0), No, ("LessOrEqual", 12),                                \
    (Broadcast, -2, 2, false, 0, {}), a <= b, nullptr, a <= b)                                   \
  X(greater, Predicate, 0, (0, 0, 0), No, ("Greater", 9), (Broadcast, -2, 2, false, 0, {}),     \
    a > b, nullptr, a > b)                                                                       \
  X(greater_equal, Predicate, 0, (0, 0, 0), No, ("GreaterOrEqual", 12),                          \
    (Broadcast, -2, 2, false, 0, {}), a >= b, nullptr, a >= b)                                   \
  X(logical_and, Bool, 0, (0, 0, 0), No, ("And", 7), (None, 0, 1, false, 0, {}),                \
    a != 0 && b != 0, nullptr, a && b)                                                           \
  X(logical_or, Bool, 0, (0, 0, 0), No, ("Or", 7), (None, 0, 1, false, 0, {}),                  \
    a != 0 || b != 0, nullptr, a || b)                                                           \
  /* (x, g): relu's gradient in one pass, PyTorch's threshold_backward: 0 where x <= 0, else g  \
     (so g passes where x is NaN) */                                                             \
  X(relu_grad, Numeric, 0, (0, 0, 0), No, ("", 1), (Same, -2, 2, true, 0.05, {0}),              \
    a > 0 ? b : 0.0, relu_grad_grad, a <= C(0) ? C(0) : b)                                      \
  /* (x, g): gelu_erf's gradient, g * (Phi(x) + x phi(x)), in one pass */                        \
  X(gelu_erf_grad, Float, 0, (0, 0, 0), Blocks, ("", 1), (Same, -3, 3, true, 0, {}),            \
    b * (0.5 * (1 + std::erf(a * 0.70710678118654752440)) +                                      \
         a * 0.39894228040143267794 * std::exp(-0.5 * a * a)),                                   \
    gelu_erf_grad_grad,                                                                          \
    b * (C(0.5) * (C(1) + erf(a * C(0.70710678118654752440))) +                                  \
         a * C(0.39894228040143267794) * exp(C(-0.5) * a * a)))

// ---- the functors: ew::<name>_fn -----------------------------------------------------------
#define SOMA_EW_ATTR_MEMBERS(N, A, B)    \
  static constexpr int num_attrs = N;    \
  double alpha = A, beta = B;
#define SOMA_EW_FUNCTOR(NAME, FAM, FUSE, ATTRS, ARITY)                                          \
  static constexpr const char* name = #NAME;                                                     \
  static constexpr Family family = Family::FAM;                                                  \
  static constexpr Fuse fuse = Fuse::FUSE;                                                       \
  static constexpr int arity = ARITY;                                                            \
  SOMA_EW_ATTR_MEMBERS ATTRS
#define SOMA_EW_UNARY_FUNCTOR(NAME, FAM, TAGS, ATTRS, FUSE, ONNX, TEST, REF, GRAD, EXPR)       \
  struct NAME##_fn {                                                                             \
    SOMA_EW_FUNCTOR(NAME, FAM, FUSE, ATTRS, 1)                                                   \
    template <class C>                                                                           \
    SOMA_HD result_t<Family::FAM, C> operator()(C x) const {                                     \
      return EXPR;                                                                               \
    }                                                                                            \
  };
#define SOMA_EW_BINARY_FUNCTOR(NAME, FAM, TAGS, ATTRS, FUSE, ONNX, TEST, REF, GRAD, EXPR)      \
  struct NAME##_fn {                                                                             \
    SOMA_EW_FUNCTOR(NAME, FAM, FUSE, ATTRS, 2)                                                   \
    template <class C>                                                                           \
    SOMA_HD result_t<Family::FAM, C> operator()(C a, C b) const {                                \
      return EXPR;                                                                               \
    }                                                                                            \
  };
SOMA_ELEMENTWISE_UNARY(SOMA_EW_UNARY_FUNCTOR)
SOMA_ELEMENTWISE_BINARY(SOMA_EW_BINARY_FUNCTOR)
#undef SOMA_EW_UNARY_FUNCTOR
#undef SOMA_EW_BINARY_FUNCTOR
#undef SOMA_EW_FUNCTOR
#undef SOMA_EW_ATTR_MEMBERS

// A functor with its attributes read from an attribute map (soma::Attrs on the host; any type
// with has(name) and f(name)); missing ones keep the table's defaults.
template <class F, class A>
F make_functor(const A& attrs) {
  F f;
  if constexpr (F::num_attrs > 0)
    if (attrs.has("alpha")) f.alpha = attrs.f("alpha");
  if constexpr (F::num_attrs > 1)
    if (attrs.has("beta")) f.beta = attrs.f("beta");
  return f;
}

}  // namespace soma::ew
