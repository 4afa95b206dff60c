#pragma once
// A configurable class (a layer, optimiser, loss or learning-rate schedule) lists its config
// fields once, in one method:
//
//   void Dense::visit_config(ConfigVisitor& v) {
//     v.field("units", units_);
//     v.field("activation", activation_);
//     v.field("use_bias", opt_.use_bias);
//     ...
//   }
//
// Every reader of a config is a visitor over that list: model files, layer_config(),
// optimizer_config() and loss_config() write the fields as JSON; load_model() and the
// *_from_config() functions read them back into a fresh object (from a table of built-in types
// keyed by class name, src/model/serialization.cpp), which is then rebuilt through its public
// constructor so that the constructor's checks run. A field's default is the value the fresh
// object holds.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "soma/dtype.hpp"

namespace soma {
class Dims;
struct Size2;
class Padding;
namespace optim {
class LearningRate;
}
}  // namespace soma

namespace soma::nn {

struct Activation;
struct Initializer;
struct Regularizer;

// How a field is read and written, beyond its type.
struct FieldRule {
  bool optional = false;       // may be absent or null in a config: the value is kept (its default)
  bool empty_is_null = false;  // a list written as null when empty (and null read as empty)
  bool other_types_ignored = false;  // a value of another JSON type is ignored (Keras' dtype policies)
};

// The names of an enum's values, in the order of their numeric values. `fallback` >= 0: an
// unknown name reads as that value instead of being an error.
struct EnumNames {
  std::span<const char* const> names;
  int fallback = -1;
};

class ConfigVisitor {
 public:
  virtual ~ConfigVisitor() = default;

  virtual void field(const char* name, bool& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, int& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::int64_t& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, double& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::string& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::optional<double>& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::optional<std::int64_t>& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::optional<std::uint64_t>& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::vector<double>& value, FieldRule rule = {}) = 0;
  // A list of integers (axes, boundaries); a lone integer reads as a list of one.
  virtual void field(const char* name, std::vector<std::int64_t>& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::optional<std::vector<std::int64_t>>& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, Dims& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, Size2& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, std::optional<Size2>& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, Padding& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, DType& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, Activation& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, Initializer& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, Regularizer& value, FieldRule rule = {}) = 0;
  virtual void field(const char* name, optim::LearningRate& value, FieldRule rule = {}) = 0;
  // An enum by name: value is the enum's numeric value, names[value] its name.
  virtual void enum_field(const char* name, int& value, const EnumNames& names, FieldRule rule = {}) = 0;

  template <class E>
    requires std::is_enum_v<E>
  void field(const char* name, E& value, const EnumNames& names, FieldRule rule = {}) {
    int v = static_cast<int>(value);
    enum_field(name, v, names, rule);
    value = static_cast<E>(v);
  }
};

// Runs `visit` (a method that lists fields) on an object that is only read: visitors that write
// a config never modify the fields they are given.
template <class T, class V>
void visit_const(const T& object, V& visitor) {
  const_cast<T&>(object).visit_config(visitor);
}

}  // namespace soma::nn
