#pragma once
// Model files (docs/model-format.md): one versioned, checksummed file holding a model's
// architecture, compile config, weights and optimiser state.
//
//   model.save("mlp.soma");                       // nn::Model::save
//   nn::ModelRef m = soma::load_model("mlp.soma"); // rebuilt, compiled if it was, same weights
//
// Configs cross this header as JSON text (std::string) so that no JSON library leaks into the
// public API. Every built-in layer has a config; register_layer() adds one for a custom layer.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "soma/model/model.hpp"
#include "soma/nn/metric.hpp"
#include "soma/nn/module.hpp"
#include "soma/optim/optimizer.hpp"
#include "soma/random_state.hpp"
#include "soma/tensor.hpp"

namespace soma {

// Rebuilds the model written by Model::save: the same layers (names included), weights and,
// when it was compiled, the same optimiser (with its state), loss and metrics, so that
// predictions are bit-identical and fit(..., {.initial_epoch = k, .seed = s}) continues the
// uninterrupted run's loss trajectory. Throws soma::Error naming the file and the problem.
std::shared_ptr<nn::Model> load_model(const std::string& path);

namespace serialization {

// A layer's config as Keras' get_config(): {"class_name": "Dense", "config": {...}} in JSON.
std::string layer_config(const nn::Module& layer);
// Builds a fresh (unbuilt) layer from such a config.
nn::ModuleRef layer_from_config(const std::string& json);
// A built-in layer type's config fields: `defaults` is the config of a fresh layer (a JSON
// object), `required` the fields its constructor requires (placeholders in `defaults`). nullopt
// for a type without a field list (Sequential, Functional, registered custom layers) or unknown.
// Readers of partial configs (the CLI's --config) fill absent fields from it.
struct LayerFields {
  std::string defaults;
  std::vector<std::string> required;
};
std::optional<LayerFields> layer_fields(const std::string& class_name);
// Optimiser / loss configs, the same way.
std::string optimizer_config(const optim::Optimizer& optimizer);
optim::OptimizerRef optimizer_from_config(const std::string& json);
std::string loss_config(const nn::Loss& loss);
nn::LossRef loss_from_config(const std::string& json);
// The model's config, and the reverse: {"class_name": "Sequential", "config": {"name",
// "input_shape", "layers": [...]}}, {"class_name": "Functional", "config": {"name", "layers"
// (each with its "inbound_nodes"), "input_layers", "output_layers"}}, or a subclassed model's
// registered config (register_model). An unregistered subclassed model throws, naming it.
std::string model_config(const nn::Model& model);
std::shared_ptr<nn::Model> model_from_config(const std::string& json);

// A custom layer type: `to_config` returns the JSON object of its options (without
// "class_name"/"name"), `from_config` builds the layer from it.
void register_layer(const std::string& class_name,
                    std::function<std::string(const nn::Module&)> to_config,
                    std::function<nn::ModuleRef(const std::string& config_json)> from_config);

// A subclassed model (a C++ class deriving from nn::Model, whose type_name() returns
// `class_name`): its architecture is code, so a file can hold it whole only through a factory.
// `to_config` returns the JSON object of its constructor options; `from_config` builds the model
// from it *built* (run it once on a sample batch), so that the saved weights can be assigned.
// Without registration, save() throws and save_weights()/load_weights() still work.
void register_model(const std::string& class_name,
                    std::function<std::string(const nn::Model&)> to_config,
                    std::function<std::shared_ptr<nn::Model>(const std::string& config_json)> from_config);

// A custom learning-rate schedule (name() == class_name), so that optimisers using it can be
// saved. Built-in schedules (ExponentialDecay, PiecewiseConstantDecay, CosineDecay, StepDecay)
// need none.
void register_schedule(const std::string& class_name,
                       std::function<std::string(const optim::LearningRateSchedule&)> to_config,
                       std::function<optim::ScheduleRef(const std::string& config_json)> from_config);

// A custom metric (one that is not built in, e.g. a MeanMetricWrapper of your function), so
// that models compiled with it can be saved: the file holds its name(), and load_model calls
// `factory` for it. Without registration, save() of such a model throws naming the metric.
// Built-in metrics need none: they are written by name or as their config.
void register_metric(const std::string& name, std::function<metrics::MetricRef()> factory);

// The layer class names a model file can hold (built in and registered), and the built-in and
// registered learning-rate schedules: every one saves and loads (tests/unit/
// test_model_roundtrip_names.cpp goes through them all).
std::vector<std::string> registered_layers();
std::vector<std::string> registered_schedules();

// The container: JSON header + named tensors, magic, version and CRC-32, written atomically
// (temporary file, fsync, rename). Low-level; Model::save / load_model use it.
struct FileContents {
  std::string kind;   // "model" or "weights"
  std::string json;   // the header document
  std::map<std::string, Tensor> tensors;
};
void write_file(const std::string& path, const FileContents& contents);
FileContents read_file(const std::string& path);
// The weights of a file written by save_weights or save, keyed as the saving model's
// state_dict() ("0.kernel"), for code that compares raw weights.
std::map<std::string, Tensor> read_state_dict(const std::string& path);

// Written: kFormatVersion. Read: every version from 1 (docs/model-format.md lists the changes).
inline constexpr std::uint32_t kFormatVersion = 2;
inline constexpr std::uint32_t kOldestFormatVersion = 1;

}  // namespace serialization

// ---- checkpoints that resume training exactly (docs/reliability.md) -------------------------
// What a checkpoint needs beyond the model file to continue a run bit-for-bit.
struct TrainingState {
  int epoch = 0;  // epochs completed: resume with fit(..., {.initial_epoch = epoch})
  RngState rng;   // soma's global generator when the checkpoint was written
};
// model.save(path) with the training state in the header (atomic like save). ModelCheckpoint
// with save_weights_only = false writes these at each epoch's end.
void save_checkpoint(const nn::Model& model, const std::string& path, const TrainingState& state);
struct Checkpoint {
  std::shared_ptr<nn::Model> model;
  std::optional<TrainingState> state;  // absent in a file written by plain save()
};
// load_model plus the training state. restore_rng: also set soma's global generator to the
// saved state, so that unseeded Dropout and fit()'s shuffling continue as in the killed run.
Checkpoint load_checkpoint(const std::string& path, bool restore_rng = true);

}  // namespace soma
