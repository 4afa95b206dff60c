#include "soma/model/merge.hpp"

#include "soma/ops.hpp"

namespace soma::nn {

namespace {
void check_inputs(const Module& m, const std::vector<Tensor>& xs, std::size_t min) {
  if (xs.size() < min)
    fail(m.type_name(), "layer '", m.name(), "' needs at least ", min, " inputs, got ", xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].defined()) fail(m.type_name(), "layer '", m.name(), "': input ", i, " is undefined");
}

void check_same_shapes(const Module& m, const std::vector<Tensor>& xs) {
  for (std::size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape() != xs[0].shape())
      fail(m.type_name(), "layer '", m.name(), "': inputs must have one shape; input 0 is ",
           shape_str(xs[0].shape()), ", input ", i, " is ", shape_str(xs[i].shape()));
}
}  // namespace

std::vector<Tensor> Add::call(const std::vector<Tensor>& xs) {
  check_inputs(*this, xs, 2);
  check_same_shapes(*this, xs);
  Tensor out = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) out = out + xs[i];
  return {out};
}

std::vector<Tensor> Multiply::call(const std::vector<Tensor>& xs) {
  check_inputs(*this, xs, 2);
  check_same_shapes(*this, xs);
  Tensor out = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) out = out * xs[i];
  return {out};
}

std::vector<Tensor> Average::call(const std::vector<Tensor>& xs) {
  check_inputs(*this, xs, 2);
  check_same_shapes(*this, xs);
  Tensor out = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) out = out + xs[i];
  return {out / double(xs.size())};
}

std::vector<Tensor> Concatenate::call(const std::vector<Tensor>& xs) {
  check_inputs(*this, xs, 2);
  const auto rank = xs[0].rank();
  const int axis = normalize_axis(axis_, rank, "Concatenate");
  for (std::size_t i = 1; i < xs.size(); ++i) {
    bool ok = xs[i].rank() == rank;
    for (std::int64_t d = 0; ok && d < rank; ++d)
      if (d != axis && xs[i].shape()[d] != xs[0].shape()[d]) ok = false;
    if (!ok)
      fail("Concatenate", "layer '", name(), "': inputs must agree except on axis ", axis_,
           "; input 0 is ", shape_str(xs[0].shape()), ", input ", i, " is ",
           shape_str(xs[i].shape()));
  }
  return {concat(xs, axis)};
}

}  // namespace soma::nn
