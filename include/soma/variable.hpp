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
  // The variable holds a copy of `initial`.
  explicit Variable(const Tensor& initial, std::string name = "", bool trainable = true);
  // `Variable w = soma::zeros({3});`: implicit from a temporary only. A named tensor converts
  // explicitly (Variable w(t)), so that passing one where a Variable is expected (an optimiser's
  // variable list, say) does not silently update a copy.
  Variable(Tensor&& initial) : Variable(initial, "", true) {}  // NOLINT: implicit by design
  Variable(const Variable&) = default;
  Variable(Variable&&) = default;
  Variable& operator=(const Variable&) = default;
  Variable& operator=(Variable&&) = default;
  // `w = tensor` would rebind the handle to a new variable that the model and optimiser do not
  // hold: refused. Write the value in place with w.assign(tensor).
  Variable& operator=(const Tensor&) = delete;

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
  // In place, like assign_add / assign_sub (w -= lr * g). As in TensorFlow, an update is not
  // differentiated: no tape records it (a tape that saved the old value notices the write).
  Variable& operator+=(const Tensor& v) { return assign_add(v); }
  Variable& operator-=(const Tensor& v) { return assign_sub(v); }
  Variable& operator*=(const Tensor& v);
  Variable& operator/=(const Tensor& v);
  Variable& operator+=(double v);
  Variable& operator-=(double v);
  Variable& operator*=(double v);
  Variable& operator/=(double v);

 private:
  Tensor value_;
};

}  // namespace soma
