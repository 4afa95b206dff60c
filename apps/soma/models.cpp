// Built-in models (--model) and JSON model configs (--config).
#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>
#include <vector>

#include "common.hpp"

#if __has_include(<nlohmann/json.hpp>)
#include <nlohmann/json.hpp>

#include "soma/model/input_limits.hpp"
#define SOMA_CLI_HAVE_JSON 1
#endif
#if __has_include(<soma/model/keras.hpp>)
#include <soma/model/keras.hpp>
#define SOMA_CLI_HAVE_LAYER_CONFIGS 1
#endif

namespace soma::cli {

void adapt_normalization_layers(nn::Sequential& model, const Tensor& x_train,
                                std::int64_t batch_size) {
  const auto& layers = model.layers();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    auto* norm = dynamic_cast<nn::Normalization*>(layers[i].get());
    if (!norm || !norm->options().mean.empty()) continue;  // given statistics stay
    if (i == 0) {
      norm->adapt(x_train);
      continue;
    }
    // A later layer sees the training data through the layers before it (in inference mode).
    const bool was_training = model.training();
    model.eval();
    std::int64_t row = 0;
    const std::int64_t n = x_train.shape()[0];
    auto prefix = data::Dataset::from_generator(
        [&, i]() -> std::optional<data::Element> {
          if (row >= n) return std::nullopt;
          NoGradScope no_grad;
          Tensor h = x_train.slice(0, row, std::min(n, row + batch_size));
          row += batch_size;
          for (std::size_t j = 0; j < i; ++j) h = (*layers[j])(h);
          return data::Element{h};
        });
    try {
      norm->adapt(prefix);
    } catch (...) {
      model.train(was_training);
      throw;
    }
    model.train(was_training);
  }
}

std::shared_ptr<nn::Sequential> builtin_model(const std::string& name, const Shape& input_shape,
                                              std::int64_t num_classes) {
  auto m = std::make_shared<nn::Sequential>();
  m->add(nn::Input(input_shape));
  // Standardises the [0, 1] pixels with one mean and variance that `soma train` adapts on the
  // training images (adapt_normalization_layers); the model file carries them, so eval and
  // predict on raw images need nothing else. Worth ~0.4% test accuracy to the MLP.
  if (name == "mlp" || name == "cnn" || name == "lenet")
    m->add(nn::Normalization({.axis = std::nullopt}));
  if (name == "mlp") {
    // The classic 784-128-128-10 of the README and the benchmarks.
    m->add(nn::Flatten());
    m->add(nn::Dense(128, nn::relu));
    m->add(nn::Dense(128, nn::relu));
  } else if (name == "cnn") {
    m->add(nn::Conv2D(32, 3, {.activation = nn::relu}));
    m->add(nn::MaxPool2D(2));
    m->add(nn::Conv2D(64, 3, {.activation = nn::relu}));
    m->add(nn::MaxPool2D(2));
    m->add(nn::Flatten());
    m->add(nn::Dense(128, nn::relu));
  } else if (name == "lenet") {
    // The performance issue's LeNet-style network; "same" padding keeps 28 -> 14 -> 7.
    m->add(nn::Conv2D(32, 5, {.padding = "same", .activation = nn::relu}));
    m->add(nn::MaxPool2D(2));
    m->add(nn::Conv2D(64, 5, {.padding = "same", .activation = nn::relu}));
    m->add(nn::MaxPool2D(2));
    m->add(nn::Flatten());
    m->add(nn::Dense(128, nn::relu));
  } else {
    throw UsageError("bad value for --model: '" + name + "' (expected one of mlp, cnn, lenet)");
  }
  m->add(nn::Dense(num_classes));  // logits; the loss applies the softmax
  return m;
}

#if defined(SOMA_CLI_HAVE_JSON) && defined(SOMA_CLI_HAVE_LAYER_CONFIGS)
namespace {

using json = nlohmann::json;

// One entry of "layers": the library's layer reader (soma/model/keras.hpp), shared with
// model::from_keras_json, builds it through the layer's own field list (the schema model files,
// layer_config and layer_from_config read), so every layer with a config is available here.
nn::ModuleRef layer_from_entry(const json& entry, const std::string& at) {
  return model::layer_from_entry(entry.dump(), at);
}

}  // namespace

nn::ModuleRef layer_from_cli_config(const std::string& entry, const std::string& where) {
  return model::layer_from_entry(entry, where);
}

std::shared_ptr<nn::Sequential> model_from_config(const std::string& path,
                                                  const Shape& input_shape, DType input_dtype) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open model config " + path);
  // Read at most one byte past the limit, then refuse deep nesting before the parser (and every
  // recursive walk after it) sees the text.
  std::string text;
  {
    std::vector<char> buf(1 << 16);
    while (in && text.size() <= limits::kMaxJsonBytes) {
      in.read(buf.data(), std::streamsize(buf.size()));
      text.append(buf.data(), std::size_t(in.gcount()));
    }
  }
  limits::check_json_text(text, path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw Error(path + ": not valid JSON: " + limits::excerpt(e.what(), limits::kMaxDetailChars));
  }
  // Keras' model.get_config() form wraps the layer list in {"class_name", "config"}.
  const json* root = &doc;
  if (doc.is_object() && doc.contains("config") && doc["config"].is_object()) root = &doc["config"];
  if (!root->is_object() || !root->contains("layers") || !(*root)["layers"].is_array())
    throw Error(path + ": expected an object with a \"layers\" array, e.g. {\"layers\": "
                "[{\"type\": \"Dense\", \"units\": 10}]}");
  if ((*root)["layers"].size() > limits::kMaxLayersFromFile)
    throw Error(path + ": the \"layers\" array lists " + std::to_string((*root)["layers"].size()) +
                " layers, more than the limit of " + std::to_string(limits::kMaxLayersFromFile));
  auto m = std::make_shared<nn::Sequential>();
  m->add(nn::Input(input_shape, {.dtype = input_dtype}));
  limits::FileModelScope scope(path);  // layers are built as they are added: refuse absurd weights
  int i = 0;
  for (const json& entry : (*root)["layers"]) {
    const std::string where = path + ": layers[" + std::to_string(i++) + "]";
    if (entry.is_object() && (entry.value("class_name", json()) == "InputLayer" ||
                              entry.value("type", json()) == "InputLayer"))
      continue;  // the data set fixes the input shape
    m->add(layer_from_entry(entry, where));
  }
  if (i == 0) throw Error(path + ": the \"layers\" array is empty");
  return m;
}

#else

std::shared_ptr<nn::Sequential> model_from_config(const std::string&, const Shape&, DType) {
  throw NotAvailable("--config is not available: this soma was built without nlohmann-json "
                     "(apt-get install nlohmann-json3-dev and rebuild)");
}
nn::ModuleRef layer_from_cli_config(const std::string&, const std::string&) {
  throw NotAvailable("--config is not available: this soma was built without nlohmann-json");
}

#endif

}  // namespace soma::cli
