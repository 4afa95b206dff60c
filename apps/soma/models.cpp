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
#if __has_include(<soma/model/serialization.hpp>)
#include <soma/model/serialization.hpp>
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

template <class T>
T get(const json& cfg, const char* key, T fallback, const std::string& where) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  try {
    return cfg[key].get<T>();
  } catch (const json::exception&) {
    throw Error(where + ": bad value for \"" + key + "\": " + limits::json_excerpt(cfg[key]));
  }
}

template <class T>
T required(const json& cfg, const char* key, const std::string& where) {
  if (!cfg.contains(key)) throw Error(where + ": missing \"" + key + "\"");
  return get<T>(cfg, key, T{}, where);
}

// Keras' other names for soma's layer types.
std::string canonical_type(const std::string& t) {
  if (t == "MaxPooling2D") return "MaxPool2D";
  if (t == "AveragePooling2D") return "AvgPool2D";
  if (t == "GlobalAvgPool2D") return "GlobalAveragePooling2D";
  return t;
}

std::string joined(const std::vector<std::string>& names) {
  std::string r;
  for (const auto& n : names) r += (r.empty() ? "" : ", ") + n;
  return r;
}

// The layer types a config may name: every layer with a config but the model kinds.
std::vector<std::string> layer_types() {
  std::vector<std::string> r;
  for (auto& t : serialization::registered_layers())
    if (t != "Sequential" && t != "Functional") r.push_back(t);
  return r;
}

// One entry of "layers", built through the layer's own field list (serialization::layer_fields:
// the same schema model files, layer_config and layer_from_config read), so every layer with a
// config is available here with no code of its own. Absent fields take the layer's defaults, as
// Keras' from_config; the constructor's required fields must be given; unknown keys are errors.
nn::ModuleRef layer_from_entry(const json& entry, const std::string& at) {
  if (!entry.is_object()) throw Error(at + ": expected an object");
  // {"type": "Dense", ...options} or Keras' {"class_name": "Dense", "config": {...}}.
  const bool keras_form = entry.contains("class_name");
  const std::string type =
      canonical_type(keras_form ? required<std::string>(entry, "class_name", at)
                                : required<std::string>(entry, "type", at));
  const std::string where = at + " (" + type + ")";
  json cfg = keras_form ? entry.value("config", json::object()) : entry;
  if (!cfg.is_object()) throw Error(where + ": \"config\" must be an object");
  if (!keras_form) cfg.erase("type");
  const auto types = layer_types();
  if (std::find(types.begin(), types.end(), type) == types.end())
    throw Error(where + ": unknown layer type \"" + type + "\" (known: " + joined(types) + ")");
  auto fields = serialization::layer_fields(type);
  nn::ModuleRef layer;
  if (!fields) {
    // A registered custom layer: its own from_config reads the config as given.
    try {
      layer = serialization::layer_from_config(json{{"class_name", type}, {"config", cfg}}.dump());
    } catch (const std::exception& e) {
      throw Error(where + ": " + e.what());
    }
  } else {
    json full = json::parse(fields->defaults);
    std::vector<std::string> allowed;
    for (auto& [k, v] : full.items()) allowed.push_back(k);
    allowed.push_back("name");
    allowed.push_back("trainable");
    const std::string allowed_list = " (allowed keys: " + joined(allowed) + ")";
    for (auto& [k, v] : cfg.items()) {
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      // Keras' get_config() writes null for what it does not use (constraints, regularisers).
      if (keras_form && v.is_null()) continue;
      throw Error(where + ": unknown key \"" + k + "\"" + allowed_list);
    }
    for (const auto& k : fields->required)
      if (!cfg.contains(k)) throw Error(where + ": missing \"" + k + "\"");
    // Pooling strides default to the pool size (Keras' strides=None), whatever size is given.
    if (full.contains("pool_size") && full.contains("strides") && cfg.contains("pool_size") &&
        (!cfg.contains("strides") || cfg["strides"].is_null()))
      cfg["strides"] = cfg["pool_size"];
    for (auto& [k, v] : cfg.items())
      if (k != "trainable" && (full.contains(k) || k == "name")) full[k] = v;
    try {
      layer = serialization::layer_from_config(json{{"class_name", type}, {"config", full}}.dump());
    } catch (const std::exception& e) {
      // The field reader names the field ("field 'units' is wrong: ..."): say which key it was.
      const std::string what = e.what();
      const std::string wrong = "' is wrong: ";
      for (auto& [k, v] : cfg.items())
        if (auto at = what.find("field '" + k + wrong); at != std::string::npos) {
          std::string detail = what.substr(at + 7 + k.size() + wrong.size());
          if (detail.find("got ") == std::string::npos) detail += ", got " + limits::json_excerpt(v);
          throw Error(where + ": bad value for \"" + k + "\": " + detail + allowed_list);
        }
      throw Error(where + ": " + what + allowed_list);
    }
  }
  if (cfg.contains("trainable")) layer->set_trainable(get<bool>(cfg, "trainable", true, where));
  return layer;
}

}  // namespace

nn::ModuleRef layer_from_cli_config(const std::string& entry, const std::string& where) {
  json j;
  try {
    j = json::parse(entry);
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON: " + limits::excerpt(e.what(), limits::kMaxDetailChars));
  }
  return layer_from_entry(j, where);
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
