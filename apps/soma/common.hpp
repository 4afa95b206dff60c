#pragma once
// What the subcommands share: loading a data set named by --data, building a model by name or
// from a JSON config, model files, class names and the exit statuses.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <soma/soma.hpp>

#include "args.hpp"

namespace soma::cli {

// Exit statuses: 0 success, 1 a failure while running (a soma::Error, a missing file), 2 a
// mistake on the command line or a feature that is not available in this build.
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// A subcommand that cannot run in this build (a part of the library it needs is missing).
struct NotAvailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A data set ready for a classifier: images as f32 in [0, 1], [N, C, H, W] (IDX images get
// C = 1), labels as integer class ids [N].
struct Dataset {
  std::string name;  // "fashion-mnist", "mnist", "idx", "cifar10"
  Tensor x_train, y_train, x_test, y_test;
  std::int64_t num_classes = 10;
  std::vector<std::string> class_names;
};

// The --data help text and the loader: fashion-mnist[:DIR] | mnist:DIR | idx:DIR | cifar10:DIR.
extern const char* const kDataHelp;
Dataset load_dataset(const std::string& spec);
// Pixels (any integer or float dtype) to f32 in [0, 1] (integers are divided by 255), with a
// channel axis added to [N, H, W] images.
Tensor to_model_input(const Tensor& images);

// Class names for a data set name ("fashion-mnist", "cifar10", "mnist"/"idx": digits).
std::vector<std::string> class_names_for(const std::string& dataset, std::int64_t num_classes);

// Built-in models by name (mlp, cnn, lenet) for inputs of shape `input_shape` (per sample,
// [C, H, W]); the first layer is a Normalization to adapt (adapt_normalization_layers), the last
// gives `num_classes` logits.
std::shared_ptr<nn::Sequential> builtin_model(const std::string& name, const Shape& input_shape,
                                              std::int64_t num_classes);
// Adapts every nn::Normalization layer of `model` without given statistics on the training
// images (a later layer on what the layers before it make of them, in batches).
void adapt_normalization_layers(nn::Sequential& model, const Tensor& x_train,
                                std::int64_t batch_size = 1024);
// A model from a JSON config: {"layers": [{"type": "Dense", "units": 128, "activation": "relu"},
// ...]} or Keras' own form ({"class_name": "Sequential", "config": {"layers": [{"class_name":
// "Dense", "config": {...}}]}}). Throws NotAvailable when built without nlohmann-json.
// input_dtype: the data's (int64 token ids for text:FILE, f32 for images).
std::shared_ptr<nn::Sequential> model_from_config(const std::string& path,
                                                  const Shape& input_shape,
                                                  DType input_dtype = DType::f32);
// One entry of its "layers" (JSON text), built through the layer's config fields
// (serialization::layer_fields); errors start with `where` (e.g. "f.json: layers[2]").
nn::ModuleRef layer_from_cli_config(const std::string& entry, const std::string& where);

// Model files (soma/model/serialization.hpp). model_files_available() is false in a build
// without them; load_model_file then throws NotAvailable.
bool model_files_available();
void save_model_file(nn::Model& model, const std::string& path);
std::shared_ptr<nn::Model> load_model_file(const std::string& path);
// soma::check_weights on a loaded model: prints one "<who>: warning: '<path>': layer ...,
// variable ...: 3 NaN of 7840 values" line per problem on stderr; true when there was any.
bool warn_invalid_weights(const nn::Model& model, const std::string& path, const std::string& who);
// The per-sample input shape a loaded model expects, when it knows it.
std::optional<Shape> model_input_shape(nn::Model& model);
// ONNX files (MODEL arguments ending in .onnx): imported with soma::onnx::load, in inference mode
// (NotAvailable in a build without ONNX); the per-sample input shape the file declares, when its
// dimensions after the batch axis are fixed.
bool is_onnx_path(const std::string& path);
std::shared_ptr<nn::Model> load_onnx_file(const std::string& path);
std::optional<Shape> onnx_input_shape(const std::string& path);

// Throws (exit status 1) unless a file can be written at `path`, given as `option` ("--out"):
// run before the data is loaded, so a missing, read-only or full directory fails at once.
void check_output_path(const std::string& option, const std::string& path);

// --device: cpu, cuda, cuda:N (kDeviceHelp). parse_device is the syntax alone (nullopt when
// malformed); device_option also checks that the device can be used, before any data is
// loaded: UsageError for a malformed value, NotAvailable in a build without CUDA, soma::Error
// naming the reason when CUDA has no usable device or no such index.
extern const char* const kDeviceHelp;
std::optional<Device> parse_device(const std::string& spec);
Device device_option(const Args& a);
// model.to(device) (nothing for the CPU, where models are built).
void move_model(nn::Module& model, Device device);
// The tensor in host memory (a copy when it is on a device).
Tensor to_host(const Tensor& t);

// --precision f32|tf32|bf16|f16 (kPrecisionHelp): sets cuda::allow_tf32 for f32 and tf32 (full
// f32 products / TF32 tensor cores) and returns compile's mixed_precision ("" for f32 and tf32,
// "bf16", "f16"). Unset: TF32 as cuda::allow_tf32() says (on unless SOMA_ALLOW_TF32=0), no
// autocast. UsageError for any other value.
extern const char* const kPrecisionHelp;
std::string precision_option(const Args& a);

// Subcommands: each gets argv after the subcommand name and returns the exit status.
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_predict(int argc, char** argv);
int cmd_summary(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_info(int argc, char** argv);

// Parses with `parser`, printing help (returns true: the caller exits 0) when asked.
bool parse_or_help(const ArgParser& parser, int argc, char** argv, Args& out);

// "x.xxxx": the fixed format of the machine-readable result line.
std::string result_line(double loss, double accuracy);

}  // namespace soma::cli
