// Creation functions: tensors built from C++ values, constants and ranges. These take no tensor
// inputs and so are not ops on the tape.
#include <cmath>

#include "internal/copy.hpp"
#include "internal/dispatch.hpp"
#include "soma/ops.hpp"

namespace soma {

namespace {
template <class Values>
Tensor from_values(const Values& values, const Shape& shape) {
  using T = std::decay_t<decltype(*std::begin(values))>;
  Tensor t = Tensor::empty(shape, dtype_v<T>);
  T* p = t.data<T>();
  std::int64_t i = 0;
  for (const auto& v : values) p[i++] = v;
  return t;
}

template <class T>
void flatten_nested(std::initializer_list<std::initializer_list<T>> v, std::vector<T>& out,
                    Shape& shape, const char* op) {
  std::int64_t inner = -1;
  for (auto& row : v) {
    if (inner >= 0 && std::int64_t(row.size()) != inner)
      fail(op, "ragged nested list: rows of length ", inner, " and ", row.size());
    inner = std::int64_t(row.size());
    out.insert(out.end(), row.begin(), row.end());
  }
  shape = {std::int64_t(v.size()), inner < 0 ? 0 : inner};
}
}  // namespace

template <class T> Tensor constant(T value) { return from_values(std::vector<T>{value}, {}); }
template <class T> Tensor constant(T value, DType dtype) { return cast(constant(value), dtype); }
template <class T> Tensor constant(std::initializer_list<T> values) {
  std::vector<T> v(values);
  return from_values(v, {std::int64_t(v.size())});
}
template <class T> Tensor constant(std::initializer_list<std::initializer_list<T>> values) {
  std::vector<T> v;
  Shape s;
  flatten_nested(values, v, s, "constant");
  return from_values(v, s);
}
template <class T>
Tensor constant(std::initializer_list<std::initializer_list<std::initializer_list<T>>> values) {
  std::vector<T> v;
  Shape s{std::int64_t(values.size()), 0, 0};
  bool first = true;
  for (auto& m : values) {
    std::vector<T> part;
    Shape ps;
    flatten_nested(m, part, ps, "constant");
    if (!first && (ps[0] != s[1] || ps[1] != s[2]))
      fail("constant", "ragged nested list: blocks of shape ", shape_str({s[1], s[2]}), " and ",
           shape_str(ps));
    s[1] = ps[0];
    s[2] = ps[1];
    first = false;
    v.insert(v.end(), part.begin(), part.end());
  }
  return from_values(v, s);
}
template <class T> Tensor constant(const std::vector<T>& data, const Shape& shape) {
  for (auto d : shape)
    if (d < 0) fail("constant", "negative dimension in shape ", shape_str(shape));
  if (std::int64_t(data.size()) != numel(shape))
    fail("constant", data.size(), " values cannot fill shape ", shape_str(shape), " (",
         numel(shape), " elements expected)");
  return from_values(data, shape);
}

#define SOMA_CONSTANT(T)                                                                    \
  template Tensor constant<T>(T);                                                           \
  template Tensor constant<T>(T, DType);                                                    \
  template Tensor constant<T>(std::initializer_list<T>);                                    \
  template Tensor constant<T>(std::initializer_list<std::initializer_list<T>>);             \
  template Tensor constant<T>(                                                              \
      std::initializer_list<std::initializer_list<std::initializer_list<T>>>);              \
  template Tensor constant<T>(const std::vector<T>&, const Shape&);
SOMA_CONSTANT(float)
SOMA_CONSTANT(double)
SOMA_CONSTANT(Half)
SOMA_CONSTANT(BFloat16)
SOMA_CONSTANT(std::int32_t)
SOMA_CONSTANT(std::int64_t)
SOMA_CONSTANT(std::uint8_t)
SOMA_CONSTANT(std::int8_t)
SOMA_CONSTANT(bool)
#undef SOMA_CONSTANT

Tensor fill(const Shape& shape, double value, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  detail::fill_value(t, value);
  return t;
}
Tensor scalar(double value, DType dtype) { return fill({}, value, dtype); }
Tensor zeros(const Shape& shape, DType dtype) { return fill(shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return fill(shape, 1.0, dtype); }
// *_like keep the tensor's device (gradients of device tensors are made of these).
Tensor full_like(const Tensor& t, double value) {
  if (t.device().is_cpu()) return fill(t.shape(), value, t.dtype());
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  detail::fill_value(out, value);
  return out;
}
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }

Tensor eye(std::int64_t n, std::optional<std::int64_t> m, DType dtype) {
  std::int64_t cols = m.value_or(n);
  if (n < 0 || cols < 0) fail("eye", "negative size ", n, " x ", cols);
  Tensor t = zeros({n, cols}, dtype);
  detail::dispatch_dtype(dtype, [&]<class T>() {
    T* p = t.data<T>();
    for (std::int64_t i = 0; i < std::min(n, cols); ++i) p[i * cols + i] = detail::convert<T>(1.0);
  });
  return t;
}

Tensor linspace(double start, double stop, std::int64_t num, DType dtype) {
  if (num < 0) fail("linspace", "num must be non-negative, got ", num);
  if (num > (std::int64_t(1) << 48)) fail("linspace", "num ", num, " is too large");
  // Computed in f64 straight into a tensor (its allocator reports failure as soma::Error).
  Tensor t = Tensor::empty({num}, DType::f64);
  double* v = t.data<double>();
  for (std::int64_t i = 0; i < num; ++i)
    v[i] = num == 1 ? start : start + (stop - start) * double(i) / double(num - 1);
  if (num > 1) v[num - 1] = stop;
  return cast(t, dtype);
}

Tensor arange(double start, double stop, double step, DType dtype) {
  if (!std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    fail("arange", "start, stop and step must be finite, got ", start, ", ", stop, ", ", step);
  if (step == 0) fail("arange", "step must not be zero");
  double span = std::ceil((stop - start) / step);
  // Checked before converting: a double past the i64 range has no defined conversion.
  if (span > double(std::int64_t(1) << 48))
    fail("arange", "[", start, ", ", stop, ") with step ", step, " has too many values (", span,
         ")");
  std::int64_t n = span > 0 ? std::int64_t(span) : 0;
  Tensor t = Tensor::empty({n}, DType::f64);
  double* v = t.data<double>();
  for (std::int64_t i = 0; i < n; ++i) v[i] = start + double(i) * step;
  return cast(t, dtype);
}

Tensor arange(double stop, DType dtype) { return arange(0.0, stop, 1.0, dtype); }

}  // namespace soma
