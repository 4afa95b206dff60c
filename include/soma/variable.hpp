#pragma once
// Variable: named, mutable state. A trainable variable is watched by every tape automatically.
// Assignments write in place (no reallocation); the tape notices if a value it saved for the
// backward pass was overwritten before gradient() was asked.
#include <string>

#include "soma/tensor.hpp"

namespace soma {

class Variable {
 public:
  Variable() = default;
  explicit Variable(const Tensor& initial, std::string name = "", bool trainable = true);

  // The current value (shares storage with the variable: later assignments show through).
  const Tensor& value() const { return value_; }
  operator const Tensor&() const { return value_; }  // NOLINT: use a variable where a tensor goes
  const std::string& name() const { return value_.name(); }
  bool trainable() const { return value_.is_trainable_variable(); }
  const Shape& shape() const { return value_.shape(); }
  DType dtype() const { return value_.dtype(); }
  bool defined() const { return value_.defined(); }

  // The value must have the variable's shape (or broadcast to it); it is cast to its dtype.
  Variable& assign(const Tensor& v);
  Variable& assign_add(const Tensor& v);
  Variable& assign_sub(const Tensor& v);

 private:
  Tensor value_;
};

}  // namespace soma
