#include "soma/variable.hpp"

#include "internal/copy.hpp"
#include "soma/autograd.hpp"
#include "soma/ops.hpp"

namespace soma {

Variable::Variable(const Tensor& initial, std::string name, bool trainable) {
  if (!initial.defined()) fail("Variable", "initial value is an undefined Tensor");
  NoGradScope no_grad;
  value_ = copy(initial);
  value_.impl().trainable = trainable && is_floating(initial.dtype());
  value_.impl().name = std::move(name);
}

Variable& Variable::assign(const Tensor& v) {
  if (!defined()) fail("Variable.assign", "the variable was never initialised");
  if (!v.defined()) fail("Variable.assign", "value is an undefined Tensor");
  // Same broadcasting rule as everywhere, but the result must keep the variable's shape.
  if (broadcast_shapes(v.shape(), shape(), "Variable.assign") != shape())
    fail("Variable.assign", "value of shape ", shape_str(v.shape()),
         " does not fit variable '", name(), "' of shape ", shape_str(shape()));
  detail::copy_into(v, value_);
  value_.storage()->version.fetch_add(1);
  return *this;
}

namespace {
// An update (w += v, w.assign_sub(v), ...) needs a variable and a value that broadcasts to its
// shape; checked before the arithmetic so that the message names the variable, not `add`.
void check_update(const char* who, const Tensor& value, const Tensor& v) {
  if (!value.defined()) fail(who, "the variable was never initialised");
  if (!v.defined()) fail(who, "value is an undefined Tensor");
  bool fits = v.rank() <= value.rank();
  for (std::int64_t i = 1; fits && i <= v.rank(); ++i) {
    const std::int64_t d = v.shape()[std::size_t(v.rank() - i)];
    fits = d == 1 || d == value.shape()[std::size_t(value.rank() - i)];
  }
  if (!fits)
    fail(who, "value of shape ", shape_str(v.shape()), " does not fit variable '", value.name(),
         "' of shape ", shape_str(value.shape()));
}
}  // namespace

Variable& Variable::assign_add(const Tensor& v) {
  check_update("Variable.assign_add", value_, v);
  NoGradScope no_grad;
  return assign(add(value_, v.cast(dtype())));
}

Variable& Variable::assign_sub(const Tensor& v) {
  check_update("Variable.assign_sub", value_, v);
  NoGradScope no_grad;
  return assign(subtract(value_, v.cast(dtype())));
}

Variable& Variable::operator*=(const Tensor& v) {
  check_update("Variable *=", value_, v);
  NoGradScope no_grad;
  return assign(multiply(value_, v.cast(dtype())));
}

Variable& Variable::operator/=(const Tensor& v) {
  check_update("Variable /=", value_, v);
  NoGradScope no_grad;
  return assign(divide(value_, v.cast(dtype())).cast(dtype()));
}

// A number becomes a scalar of the variable's dtype (as for x * 2.0).
Variable& Variable::operator+=(double v) { return *this += scalar(v, defined() ? dtype() : DType::f32); }
Variable& Variable::operator-=(double v) { return *this -= scalar(v, defined() ? dtype() : DType::f32); }
Variable& Variable::operator*=(double v) { return *this *= scalar(v, defined() ? dtype() : DType::f32); }
Variable& Variable::operator/=(double v) { return *this /= scalar(v, defined() ? dtype() : DType::f32); }

}  // namespace soma
