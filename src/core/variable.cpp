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

Variable& Variable::assign_add(const Tensor& v) {
  NoGradScope no_grad;
  return assign(add(value_, v.cast(dtype())));
}

Variable& Variable::assign_sub(const Tensor& v) {
  NoGradScope no_grad;
  return assign(subtract(value_, v.cast(dtype())));
}

}  // namespace soma
