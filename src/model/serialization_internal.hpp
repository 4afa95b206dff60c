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

// serialization.cpp: a layer as {"class_name", "config"} (registry lookup by type_name()), and
// back. The decoder sets the name but not "trainable" (callers freeze after building).
json encode_layer(const nn::Module& layer);
nn::ModuleRef decode_layer(const json& j);
Shape shape_from_json(const json& j);

// serialization_functional.cpp: a functional model's config (Keras' "Functional": layers with
// their inbound nodes, input_layers, output_layers), and the model rebuilt from it.
json functional_config(const nn::Model& model);
std::shared_ptr<nn::Model> functional_from(const json& config);

// serialization_schedules.cpp: a learning-rate schedule as {"class_name", "config"}.
json schedule_json(const optim::LearningRateSchedule& schedule);
optim::ScheduleRef schedule_from_json(const json& j);

}  // namespace soma::serialization::internal
