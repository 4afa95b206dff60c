// Tensor's op methods (t.reshape(...), t.cast(...), t[i], ...): declared with Tensor in core
// (soma/tensor.hpp), defined here over the public op functions, so that core does not call up
// into ops (scripts/check-layering.sh).
#include "soma/ops.hpp"
#include "soma/tensor.hpp"

namespace soma {

Tensor Tensor::contiguous() const { return soma::contiguous(*this); }
Tensor Tensor::clone() const { return soma::copy(*this); }
Tensor Tensor::cast(DType t) const { return soma::cast(*this, t); }
Tensor Tensor::reshape(const Shape& s) const { return soma::reshape(*this, s); }
Tensor Tensor::transpose() const { return soma::transpose(*this); }
Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int64_t(i);
  std::swap(perm[std::size_t(normalize_axis(a, rank(), "transpose"))],
            perm[std::size_t(normalize_axis(b, rank(), "transpose"))]);
  return soma::transpose(*this, perm);
}
Tensor Tensor::permute(const std::vector<std::int64_t>& p) const { return soma::transpose(*this, p); }
Tensor Tensor::slice(const std::vector<Slice>& s) const { return soma::slice(*this, s); }
Tensor Tensor::slice(std::int64_t axis, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> stop, std::int64_t step) const {
  int ax = normalize_axis(axis, rank(), "slice");
  std::vector<Slice> s(std::size_t(ax) + 1);
  s[std::size_t(ax)] = Slice{start, stop, step};
  return soma::slice(*this, s);
}
Tensor Tensor::squeeze(const std::vector<std::int64_t>& axes) const { return soma::squeeze(*this, axes); }
Tensor Tensor::expand_dims(std::int64_t axis) const { return soma::expand_dims(*this, axis); }
Tensor Tensor::broadcast_to(const Shape& s) const { return soma::broadcast_to(*this, s); }
Tensor Tensor::operator[](std::int64_t i) const {
  if (rank() == 0) fail("index", "cannot index a scalar (shape [])");
  std::int64_t n = shape()[0];
  std::int64_t j = i < 0 ? i + n : i;
  if (j < 0 || j >= n)
    fail("index", "index ", i, " is out of range for axis 0 of size ", n, " (shape ",
         shape_str(shape()), ")");
  return soma::squeeze(soma::slice(*this, {Slice{j, j + 1, 1}}), {0});
}

}  // namespace soma
