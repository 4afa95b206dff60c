#pragma once
// Shared by src/model/serialization*.cpp: the JSON-level pieces of model files. Private to the
// library, so nlohmann::json stays out of the public headers.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>


#include "soma/model/input_limits.hpp"
#include "soma/model/model.hpp"
#include "soma/nn/config.hpp"
#include "soma/nn/module.hpp"
#include "soma/optim/schedules.hpp"

namespace soma::serialization::internal {

using json = nlohmann::json;

// An integer field of a config or file header. nlohmann's get<std::int64_t>() converts a JSON
// float with a plain cast, which is undefined behaviour for 3e81 and silently truncates 2.5;
// soma writes integers, so a float is accepted only when it is integral and in range.
template <class I = std::int64_t>
I int_of(const json& j) {
  static_assert(std::is_integral_v<I>);
  using L = std::numeric_limits<I>;
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v <= static_cast<std::uint64_t>(L::max())) return static_cast<I>(v);
  } else if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if ((L::is_signed || v >= 0) && v >= static_cast<std::int64_t>(L::min()) &&
        (v < 0 || static_cast<std::uint64_t>(v) <= static_cast<std::uint64_t>(L::max())))
      return static_cast<I>(v);
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    // Bounds as doubles: 2^63 (or the type's max + 1) itself is out of range.
    const double hi = std::ldexp(1.0, L::digits), lo = L::is_signed ? -hi : 0.0;
    if (std::isfinite(d) && d == std::trunc(d) && d >= lo && d < hi) return static_cast<I>(d);
  }
  // A JSON type error, so that each reader wraps it with its own context, as for a string.
  throw json::type_error::create(302,
                                 std::string("expected an integer") + (L::is_signed ? "" : " >= 0") +
                                     " that fits in " + std::to_string(sizeof(I) * 8) + " bits, got " + limits::json_excerpt(j),
                                 &j);
}

// serialization_config.cpp: whether a config may name this initialiser (an unknown one reads as
// zeros, for custom initialisers in soma's own files; Keras' import refuses it instead).
bool known_initializer(const std::string& name);

// serialization_config.cpp: a config's fields (soma/nn/config.hpp) as a JSON object, and back.
// The writer only reads the fields it visits.
class JsonWriter final : public nn::ConfigVisitor {
 public:
  json out = json::object();
  void field(const char* name, bool& value, nn::FieldRule rule) override;
  void field(const char* name, int& value, nn::FieldRule rule) override;
  void field(const char* name, std::int64_t& value, nn::FieldRule rule) override;
  void field(const char* name, double& value, nn::FieldRule rule) override;
  void field(const char* name, std::string& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<double>& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<std::int64_t>& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<std::uint64_t>& value, nn::FieldRule rule) override;
  void field(const char* name, std::vector<double>& value, nn::FieldRule rule) override;
  void field(const char* name, std::vector<std::int64_t>& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<std::vector<std::int64_t>>& value, nn::FieldRule rule) override;
  void field(const char* name, Dims& value, nn::FieldRule rule) override;
  void field(const char* name, Size2& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<Size2>& value, nn::FieldRule rule) override;
  void field(const char* name, Padding& value, nn::FieldRule rule) override;
  void field(const char* name, DType& value, nn::FieldRule rule) override;
  void field(const char* name, nn::Activation& value, nn::FieldRule rule) override;
  void field(const char* name, nn::Initializer& value, nn::FieldRule rule) override;
  void field(const char* name, nn::Regularizer& value, nn::FieldRule rule) override;
  void field(const char* name, optim::LearningRate& value, nn::FieldRule rule) override;
  void enum_field(const char* name, int& value, const nn::EnumNames& names, nn::FieldRule rule) override;
  using nn::ConfigVisitor::field;
};

// Reads the fields from `config`. A field absent from it is an error unless its rule makes it
// optional (or its type can be empty: std::optional, a regulariser); errors name `where` (e.g.
// "layer 'd' (Dense)") and the field.
class JsonReader final : public nn::ConfigVisitor {
 public:
  JsonReader(const json& config, std::string where) : c_(config), where_(std::move(where)) {}
  void field(const char* name, bool& value, nn::FieldRule rule) override;
  void field(const char* name, int& value, nn::FieldRule rule) override;
  void field(const char* name, std::int64_t& value, nn::FieldRule rule) override;
  void field(const char* name, double& value, nn::FieldRule rule) override;
  void field(const char* name, std::string& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<double>& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<std::int64_t>& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<std::uint64_t>& value, nn::FieldRule rule) override;
  void field(const char* name, std::vector<double>& value, nn::FieldRule rule) override;
  void field(const char* name, std::vector<std::int64_t>& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<std::vector<std::int64_t>>& value, nn::FieldRule rule) override;
  void field(const char* name, Dims& value, nn::FieldRule rule) override;
  void field(const char* name, Size2& value, nn::FieldRule rule) override;
  void field(const char* name, std::optional<Size2>& value, nn::FieldRule rule) override;
  void field(const char* name, Padding& value, nn::FieldRule rule) override;
  void field(const char* name, DType& value, nn::FieldRule rule) override;
  void field(const char* name, nn::Activation& value, nn::FieldRule rule) override;
  void field(const char* name, nn::Initializer& value, nn::FieldRule rule) override;
  void field(const char* name, nn::Regularizer& value, nn::FieldRule rule) override;
  void field(const char* name, optim::LearningRate& value, nn::FieldRule rule) override;
  void enum_field(const char* name, int& value, const nn::EnumNames& names, nn::FieldRule rule) override;
  using nn::ConfigVisitor::field;

 private:
  // The field's value; nullptr when it is absent or null and `rule` lets it be.
  const json* value(const char* name, nn::FieldRule rule) const;
  // For the types that can be empty: nullptr when absent (kept); `null` reads as empty.
  const json* nullable(const char* name) const;
  const json* list(const char* name, nn::FieldRule rule) const;
  // Runs `read`, naming the field in any error it throws.
  template <class F>
  void convert(const char* name, F&& read) const;
  [[noreturn]] void bad(const char* name, const std::string& what) const;

  const json& c_;
  std::string where_;
};

// An object's config fields as a JSON object.
template <class T>
json fields_json(const T& object) {
  JsonWriter w;
  nn::visit_const(object, w);
  return std::move(w.out);
}
// Reads `config` into an object's fields (a fresh object, rebuilt by the caller).
template <class T>
void read_fields(T& object, const json& config, std::string where) {
  JsonReader r(config, std::move(where));
  object.visit_config(r);
}

Shape shape_from_json(const json& j);
DType dtype_from_name(const std::string& name);

// serialization.cpp: a layer as {"class_name", "config"} (registry lookup by type_name()), and
// back. The decoder sets the name but not "trainable" (callers freeze after building).
json encode_layer(const nn::Module& layer);
nn::ModuleRef decode_layer(const json& j);

// serialization_functional.cpp: a functional model's config (Keras' "Functional": layers with
// their inbound nodes, input_layers, output_layers), and the model rebuilt from it.
json functional_config(const nn::Model& model);
std::shared_ptr<nn::Model> functional_from(const json& config);

// serialization_schedules.cpp: a learning-rate schedule as {"class_name", "config"}.
json schedule_json(const optim::LearningRateSchedule& schedule);
optim::ScheduleRef schedule_from_json(const json& j);

}  // namespace soma::serialization::internal
