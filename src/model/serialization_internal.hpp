#pragma once
// Shared by src/model/serialization*.cpp: the JSON-level pieces of model files. Private to the
// library, so nlohmann::json stays out of the public headers.
#include <memory>
#include <nlohmann/json.hpp>

#include "soma/model/model.hpp"
#include "soma/nn/module.hpp"
#include "soma/optim/schedules.hpp"

namespace soma::serialization::internal {

using json = nlohmann::json;

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
