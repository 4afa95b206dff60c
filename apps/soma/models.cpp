// Built-in models (--model) and JSON model configs (--config).
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

#ifdef SOMA_CLI_HAVE_JSON
namespace {

using json = nlohmann::json;

// Reads a Keras-style size: 3 or [3, 3].
Size2 size2(const json& v, const std::string& where) {
  if (v.is_number_integer()) return Size2(v.get<std::int64_t>());
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
    return Size2(v[0].get<std::int64_t>(), v[1].get<std::int64_t>());
  throw Error(where + ": expected an integer or a pair of integers, got " + limits::json_excerpt(v));
}

template <class T>
T get(const json& cfg, const char* key, T fallback, const std::string& where) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // get<int>() casts a JSON float unchecked (undefined for 3e81): only integers pass.
      const json& v = cfg[key];
      if (!v.is_number_integer() ||
          (v.is_number_unsigned() ? v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<T>::max())
                                  : (v.get<std::int64_t>() < std::int64_t(std::numeric_limits<T>::min()) ||
                                     (v.get<std::int64_t>() > 0 &&
                                      std::uint64_t(v.get<std::int64_t>()) > std::uint64_t(std::numeric_limits<T>::max())))))
        throw Error(where + ": bad value for \"" + key + "\": expected an integer, got " + limits::json_excerpt(v));
    }
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

nn::Activation activation_of(const json& cfg, const std::string& where) {
  const auto name = get<std::string>(cfg, "activation", "linear", where);
  try {
    return nn::Activation(name);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

bool known_type(const std::string& t) {
  for (const char* k : {"Dense", "Conv2D", "MaxPool2D", "MaxPooling2D", "AvgPool2D",
                        "AveragePooling2D", "GlobalAveragePooling2D", "GlobalAvgPool2D", "Flatten",
                        "Dropout", "Reshape", "BatchNormalization", "Normalization",
                        "Activation", "ReLU", "Softmax"})
    if (t == k) return true;
  return false;
}

nn::ModuleRef make_layer(const std::string& type, const json& cfg, const std::string& where) {
  const std::string padding = get<std::string>(cfg, "padding", "valid", where);
  if (type == "Dense")
    return nn::Dense(required<std::int64_t>(cfg, "units", where), activation_of(cfg, where),
                     {.use_bias = get<bool>(cfg, "use_bias", true, where)});
  if (type == "Conv2D") {
    if (!cfg.contains("kernel_size")) throw Error(where + ": missing \"kernel_size\"");
    nn::Conv2DOptions o;
    if (cfg.contains("strides")) o.strides = size2(cfg["strides"], where + ".strides");
    o.padding = padding;
    o.activation = activation_of(cfg, where);
    o.use_bias = get<bool>(cfg, "use_bias", true, where);
    return nn::Conv2D(required<std::int64_t>(cfg, "filters", where),
                      size2(cfg["kernel_size"], where + ".kernel_size"), o);
  }
  if (type == "MaxPool2D" || type == "MaxPooling2D" || type == "AvgPool2D" ||
      type == "AveragePooling2D") {
    Size2 pool = cfg.contains("pool_size") ? size2(cfg["pool_size"], where + ".pool_size") : 2;
    std::optional<Size2> strides;
    if (cfg.contains("strides") && !cfg["strides"].is_null())
      strides = size2(cfg["strides"], where + ".strides");
    if (type.rfind("Max", 0) == 0) return nn::MaxPool2D(pool, strides, padding);
    return nn::AvgPool2D(pool, strides, padding);
  }
  if (type == "GlobalAveragePooling2D" || type == "GlobalAvgPool2D")
    return nn::GlobalAveragePooling2D();
  if (type == "Flatten") return nn::Flatten();
  if (type == "Dropout") return nn::Dropout(required<double>(cfg, "rate", where));
  if (type == "Reshape") {
    auto t = required<std::vector<std::int64_t>>(cfg, "target_shape", where);
    return nn::Reshape(Shape(t.begin(), t.end()));
  }
  if (type == "BatchNormalization")
    return nn::BatchNormalization({.axis = get<std::int64_t>(cfg, "axis", 1, where),
                                   .momentum = get<double>(cfg, "momentum", 0.99, where),
                                   .epsilon = get<double>(cfg, "epsilon", 1e-3, where)});
  if (type == "Normalization") {
    // Keras' preprocessing layer; `soma train` adapts it on the training data unless mean and
    // variance are given. "axis": null (one mean/variance for all values), an int or a list.
    nn::NormalizationOptions o;
    if (cfg.contains("axis")) {
      const json& ax = cfg["axis"];
      if (ax.is_null()) {
        o.axis = std::nullopt;
      } else if (ax.is_array()) {
        o.axis = Axes{};
        for (const json& a : ax)  // each checked as an integer, as a lone "axis" would be
          o.axis->push_back(required<std::int64_t>(json{{"axis", a}}, "axis", where));
      } else {
        o.axis = Axes{required<std::int64_t>(cfg, "axis", where)};
      }
    }
    o.mean = get<std::vector<double>>(cfg, "mean", {}, where);
    o.variance = get<std::vector<double>>(cfg, "variance", {}, where);
    o.invert = get<bool>(cfg, "invert", false, where);
    try {
      return nn::Normalization(std::move(o));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  }
  if (type == "Activation") return nn::ActivationLayer(activation_of(cfg, where));
  if (type == "ReLU") return nn::ReLU();
  if (type == "Softmax") return nn::ActivationLayer(nn::softmax);
  throw Error(where + ": unknown layer type \"" + type +
              "\" (known: Dense, Conv2D, MaxPool2D, AvgPool2D, GlobalAveragePooling2D, "
              "Flatten, Dropout, Reshape, BatchNormalization, Normalization, Activation, ReLU, "
              "Softmax)");
}

}  // namespace

std::shared_ptr<nn::Sequential> model_from_config(const std::string& path,
                                                  const Shape& input_shape) {
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
  m->add(nn::Input(input_shape));
  limits::FileModelScope scope(path);  // layers are built as they are added: refuse absurd weights
  int i = 0;
  for (const json& entry : (*root)["layers"]) {
    const std::string where = path + ": layers[" + std::to_string(i++) + "]";
    if (!entry.is_object()) throw Error(where + ": expected an object");
    // {"type": "Dense", ...options} or Keras' {"class_name": "Dense", "config": {...}}.
    std::string type;
    const json* cfg = &entry;
    if (entry.contains("class_name")) {
      type = get<std::string>(entry, "class_name", "", where);
      if (entry.contains("config")) cfg = &entry["config"];
    } else {
      type = required<std::string>(entry, "type", where);
    }
    if (type == "InputLayer") continue;  // the data set fixes the input shape
    nn::ModuleRef layer;
#ifdef SOMA_CLI_HAVE_LAYER_CONFIGS
    // Keras' form of a type this file does not know goes through the model-file layer registry
    // (which wants complete configs, as model.save writes them).
    if (entry.contains("class_name") && !known_type(type)) {
      try {
        layer = serialization::layer_from_config(entry.dump());
      } catch (const std::exception& e) {
        throw Error(where + " (" + type + "): " + e.what());
      }
    }
#endif
    if (!layer) layer = make_layer(type, *cfg, where + " (" + type + ")");
    if (cfg->contains("name") && (*cfg)["name"].is_string())
      layer->set_name((*cfg)["name"].get<std::string>());
    m->add(layer);
  }
  if (i == 0) throw Error(path + ": the \"layers\" array is empty");
  return m;
}

#else

std::shared_ptr<nn::Sequential> model_from_config(const std::string&, const Shape&) {
  throw NotAvailable("--config is not available: this soma was built without nlohmann-json "
                     "(apt-get install nlohmann-json3-dev and rebuild)");
}

#endif

}  // namespace soma::cli
