#pragma once
// The public op functions. NumPy broadcasting everywhere; axes may be negative.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "soma/tensor.hpp"

namespace soma {

using Axes = std::vector<std::int64_t>;  // empty: all axes

// ---- creation -------------------------------------------------------------------------------
// The C++ element type picks the dtype (float -> f32, double -> f64, int -> i32, ...), unless
// a dtype is given, in which case the values are converted.
template <class T> Tensor constant(T value);
template <class T> Tensor constant(T value, DType dtype);
template <class T> Tensor constant(std::initializer_list<T> values);
template <class T> Tensor constant(std::initializer_list<std::initializer_list<T>> values);
template <class T>
Tensor constant(std::initializer_list<std::initializer_list<std::initializer_list<T>>> values);
template <class T> Tensor constant(const std::vector<T>& data, const Shape& shape);
Tensor scalar(double value, DType dtype = DType::f32);
Tensor zeros(const Shape& shape, DType dtype = DType::f32);
Tensor ones(const Shape& shape, DType dtype = DType::f32);
Tensor fill(const Shape& shape, double value, DType dtype = DType::f32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor eye(std::int64_t n, std::optional<std::int64_t> m = std::nullopt, DType dtype = DType::f32);
Tensor linspace(double start, double stop, std::int64_t num, DType dtype = DType::f32);
Tensor arange(double start, double stop, double step = 1.0, DType dtype = DType::f32);
Tensor arange(double stop, DType dtype = DType::f32);
inline Tensor range(double start, double stop, double step = 1.0, DType dtype = DType::f32) {
  return arange(start, stop, step, dtype);
}

// ---- random (counter-based: same seed, same numbers, on every run and any thread count) -----
void set_seed(std::uint64_t seed);  // the global seed; also restarts the global op counter
// seed: per-call seed; without one, the global seed and a per-call counter are used.
Tensor random_normal(const Shape& shape, double mean = 0.0, double stddev = 1.0,
                     DType dtype = DType::f32, std::optional<std::uint64_t> seed = std::nullopt);
Tensor random_uniform(const Shape& shape, double minval = 0.0, double maxval = 1.0,
                      DType dtype = DType::f32, std::optional<std::uint64_t> seed = std::nullopt);
// Normal values redrawn until within two standard deviations of the mean.
Tensor truncated_normal(const Shape& shape, double mean = 0.0, double stddev = 1.0,
                        DType dtype = DType::f32,
                        std::optional<std::uint64_t> seed = std::nullopt);
// Shuffles along axis 0.
Tensor random_shuffle(const Tensor& t, std::optional<std::uint64_t> seed = std::nullopt);

// ---- elementwise, binary (broadcasting; mixed dtypes promote) -------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor subtract(const Tensor& a, const Tensor& b);
Tensor multiply(const Tensor& a, const Tensor& b);
Tensor divide(const Tensor& a, const Tensor& b);
Tensor floor_div(const Tensor& a, const Tensor& b);
Tensor mod(const Tensor& a, const Tensor& b);  // sign follows the divisor, as in Python
Tensor pow(const Tensor& a, const Tensor& b);
// With a C++ number (pow(x, 3), pow(2.0, x)) the number becomes a scalar of the tensor's dtype,
// as for x * 2.0; an integer tensor with a number that is not whole (pow(i, 0.5)) computes in
// f32 instead of truncating it. Integer tensors to a negative power give 0 (except 1 and -1).
Tensor pow(const Tensor& a, double b);
Tensor pow(double a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor squared_difference(const Tensor& a, const Tensor& b);
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor clip(const Tensor& t, double lo, double hi);

// ---- elementwise, unary ---------------------------------------------------------------------
Tensor abs(const Tensor& t);
Tensor negative(const Tensor& t);
Tensor sign(const Tensor& t);
Tensor reciprocal(const Tensor& t);
Tensor square(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
Tensor log1p(const Tensor& t);
Tensor expm1(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor asin(const Tensor& t);
Tensor acos(const Tensor& t);
Tensor atan(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor erf(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor relu(const Tensor& t);
Tensor leaky_relu(const Tensor& t, double alpha = 0.2);
Tensor elu(const Tensor& t, double alpha = 1.0);
Tensor gelu(const Tensor& t, bool approximate = false);
Tensor softplus(const Tensor& t);
Tensor hardswish(const Tensor& t);  // x * relu6(x + 3) / 6
Tensor softsign(const Tensor& t);   // x / (1 + |x|)
// max(0, min(1, alpha * x + beta)), Keras' and ONNX's defaults
Tensor hard_sigmoid(const Tensor& t, double alpha = 0.2, double beta = 0.5);
Tensor round(const Tensor& t);  // half to even
Tensor ceil(const Tensor& t);
Tensor floor(const Tensor& t);
Tensor cast(const Tensor& t, DType dtype);
Tensor stop_gradient(const Tensor& t);  // identity that blocks gradients

// ---- reductions -----------------------------------------------------------------------------
Tensor sum(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor mean(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor max(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor min(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor prod(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor logsumexp(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor variance(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor stddev(const Tensor& t, const Axes& axes = {}, bool keepdims = false);  // std is taken by C++
// ord: 2 (Euclidean), 1, or infinity
Tensor norm(const Tensor& t, const Axes& axes = {}, bool keepdims = false, double ord = 2.0);
Tensor all(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor any(const Tensor& t, const Axes& axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& t, std::int64_t axis, bool keepdims = false);  // i64
Tensor argmin(const Tensor& t, std::int64_t axis, bool keepdims = false);  // i64
Tensor softmax(const Tensor& t, std::int64_t axis = -1);
Tensor log_softmax(const Tensor& t, std::int64_t axis = -1);
// Sums `t` down to `shape` (the inverse of broadcasting `shape` up to t's shape).
Tensor sum_to(const Tensor& t, const Shape& shape);

// ---- shape ops ------------------------------------------------------------------------------
Tensor reshape(const Tensor& t, const Shape& shape);  // one dimension may be -1
Tensor transpose(const Tensor& t, const std::vector<std::int64_t>& perm = {});
Tensor broadcast_to(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t, const Axes& axes = {});
Tensor expand_dims(const Tensor& t, std::int64_t axis);
Tensor slice(const Tensor& t, const std::vector<Slice>& slices);
Tensor contiguous(const Tensor& t);  // t itself when already contiguous, else a packed copy
Tensor copy(const Tensor& t);        // always a packed copy with its own storage
Tensor concat(const std::vector<Tensor>& ts, std::int64_t axis = 0);
Tensor stack(const std::vector<Tensor>& ts, std::int64_t axis = 0);
std::vector<Tensor> unstack(const Tensor& t, std::int64_t axis = 0);
std::vector<Tensor> split(const Tensor& t, std::int64_t num, std::int64_t axis = 0);
std::vector<Tensor> split(const Tensor& t, const std::vector<std::int64_t>& sizes,
                          std::int64_t axis = 0);
Tensor tile(const Tensor& t, const std::vector<std::int64_t>& multiples);
// paddings: one {before, after} pair per axis
Tensor pad(const Tensor& t, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings,
           double value = 0.0);
Tensor gather(const Tensor& t, const Tensor& indices, std::int64_t axis = 0);
Tensor one_hot(const Tensor& indices, std::int64_t depth, DType dtype = DType::f32,
               double on_value = 1.0, double off_value = 0.0);

// ---- scans, sorting, triangles, element indexing (src/ops/sort_scan.cpp) ---------------------
// Cumulative sum / product along an axis (ONNX CumSum's exclusive and reverse); O(n).
Tensor cumsum(const Tensor& t, std::int64_t axis = 0, bool exclusive = false, bool reverse = false);
Tensor cumprod(const Tensor& t, std::int64_t axis = 0, bool exclusive = false, bool reverse = false);
// Always stable (ties keep their order; `stable` is accepted for PyTorch's spelling). NaN sorts
// after everything ascending and first descending, as the largest value.
Tensor sort(const Tensor& t, std::int64_t axis = -1, bool descending = false, bool stable = true);
Tensor argsort(const Tensor& t, std::int64_t axis = -1, bool descending = false,
               bool stable = true);  // i64
// The k largest (or smallest) along the axis, in order, and their i64 indices; 0 <= k <= size.
std::pair<Tensor, Tensor> topk(const Tensor& t, std::int64_t k, std::int64_t axis = -1,
                               bool largest = true, bool sorted = true);
// Zeros below (triu) / above (tril) the k-th diagonal of the last two axes.
Tensor triu(const Tensor& t, std::int64_t k = 0);
Tensor tril(const Tensor& t, std::int64_t k = 0);
// One shift per axis; no axes: the flattened tensor rolled by one shift (NumPy).
Tensor roll(const Tensor& t, const std::vector<std::int64_t>& shifts, const Axes& axes = {});
Tensor flip(const Tensor& t, const Axes& axes = {});  // empty: every axis
// NumPy's take_along_axis (indices broadcast against t off the axis); ONNX GatherElements.
Tensor take_along_axis(const Tensor& t, const Tensor& indices, std::int64_t axis);
// PyTorch's scatter / scatter_reduce (ONNX ScatterElements): t with updates[i] written (or
// combined by reduction "add", "mul", "max", "min") where indices[i] points along the axis.
// Repeated indices with reduction "none": the last update in row-major order wins.
Tensor scatter(const Tensor& t, std::int64_t axis, const Tensor& indices, const Tensor& updates,
               const std::string& reduction = "none");
Tensor scatter_add(const Tensor& t, std::int64_t axis, const Tensor& indices,
                   const Tensor& updates);
// PyTorch's index_add: t + alpha * source's slices added at index (1-d) along the axis.
Tensor index_add(const Tensor& t, std::int64_t axis, const Tensor& index, const Tensor& source,
                 double alpha = 1.0);

// ---- linear algebra -------------------------------------------------------------------------
// NumPy's matmul: 1-d operands are promoted and the added dims removed; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor tensordot(const Tensor& a, const Tensor& b, std::int64_t axes = 2);
Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<std::int64_t>& axes_a,
                 const std::vector<std::int64_t>& axes_b);
// General einsum: "ij,jk->ik", "bij,bjk->bik", "ii->i", "ii", "i,i", "...ij,...jk->...ik".
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
Tensor diag(const Tensor& t);  // 1-d -> square matrix; 2-d -> its main diagonal
Tensor trace(const Tensor& t);

// ---- quantization (ONNX QuantizeLinear / DequantizeLinear) -----------------------------------
// q = saturate(round_half_even(x / scale) + zero_point), in zero_point's dtype (u8 or i8).
// scale (x's float dtype) and zero_point are scalars (per tensor) or 1-d of x.shape[axis]
// (per channel). Not differentiable.
Tensor quantize_linear(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                       std::int64_t axis = 1);
// x = (q - zero_point) * scale, in scale's dtype; q is u8, i8 or i32 (zero_point q's dtype).
Tensor dequantize_linear(const Tensor& q, const Tensor& scale, const Tensor& zero_point,
                         std::int64_t axis = 1);
// ONNX MatMulInteger: (a - a_zero_point) @ (b - b_zero_point) accumulated in i32; a's zero point
// is a scalar or one per row of a, b's a scalar or one per column of b.
Tensor matmul_integer(const Tensor& a, const Tensor& b, const Tensor& a_zero_point,
                      const Tensor& b_zero_point);

// ---- operators ------------------------------------------------------------------------------
// A C++ number next to a tensor becomes a scalar of the tensor's dtype.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& a);
// Compound assignment rebinds the handle to a new tensor, t = t + b (as `t += b` does in
// TensorFlow): nothing is written in place, other handles to the old value keep it, and a tape
// records the op. In-place updates are for Variables (variable.hpp: w -= lr * g).
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return a = a + b; }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return a = a - b; }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return a = a * b; }
inline Tensor& operator/=(Tensor& a, const Tensor& b) { return a = a / b; }
inline Tensor& operator+=(Tensor& a, double b) { return a = a + b; }
inline Tensor& operator-=(Tensor& a, double b) { return a = a - b; }
inline Tensor& operator*=(Tensor& a, double b) { return a = a * b; }
inline Tensor& operator/=(Tensor& a, double b) { return a = a / b; }
// There is no `@` in C++: `a % b` is not matmul (it is mod); use matmul(a, b) or this helper.
inline Tensor operator%(const Tensor& a, const Tensor& b) { return mod(a, b); }

}  // namespace soma
