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
#include <string>

#include "soma/model/model.hpp"
#include "soma/nn/module.hpp"
#include "soma/optim/optimizer.hpp"
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
// Optimiser / loss configs, the same way.
std::string optimizer_config(const optim::Optimizer& optimizer);
optim::OptimizerRef optimizer_from_config(const std::string& json);
std::string loss_config(const nn::Loss& loss);
nn::LossRef loss_from_config(const std::string& json);
// The model's config ({"class_name": "Sequential", "config": {"name", "input_shape",
// "layers": [...]}}), and the reverse. Only Sequential models (nested ones included) have one;
// functional and subclassed models throw, naming the model.
std::string model_config(const nn::Model& model);
std::shared_ptr<nn::Model> model_from_config(const std::string& json);

// A custom layer type: `to_config` returns the JSON object of its options (without
// "class_name"/"name"), `from_config` builds the layer from it.
void register_layer(const std::string& class_name,
                    std::function<std::string(const nn::Module&)> to_config,
                    std::function<nn::ModuleRef(const std::string& config_json)> from_config);

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

inline constexpr std::uint32_t kFormatVersion = 1;

}  // namespace serialization
}  // namespace soma
