// Keras' model JSON (soma/model/keras.hpp, docs/keras.md): the layer-entry reader that the CLI's
// --config shares, with Keras 3's per-layer fields mapped onto soma's layer configs, and
// from_keras_json over it. Every layer is built through its own field list
// (serialization::layer_fields), so this file names no layer's fields but Keras' extras.
#include "soma/model/keras.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "model/keras_internal.hpp"
#include "model/serialization_internal.hpp"
#include "soma/error.hpp"
#include "soma/input_limits.hpp"
#include "soma/model/sequential.hpp"
#include "soma/model/serialization.hpp"

namespace soma::model {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw Error(where + ": " + what); }

template <class T>
T get(const json& cfg, const char* key, T fallback, const std::string& where) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  try {
    return cfg[key].get<T>();
  } catch (const json::exception&) {
    bad(where, std::string("bad value for \"") + key + "\": " + limits::json_excerpt(cfg[key]));
  }
}

template <class T>
T required(const json& cfg, const char* key, const std::string& where) {
  if (!cfg.contains(key)) bad(where, std::string("missing \"") + key + "\"");
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

// The layer types an entry may name: every layer with a config but the model kinds.
std::vector<std::string> layer_types() {
  std::vector<std::string> r;
  for (auto& t : serialization::registered_layers())
    if (t != "Sequential" && t != "Functional") r.push_back(t);
  return r;
}

// ---- Keras 3's fields -> soma's ----------------------------------------------------------------

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Keras' dtype names (a string, or a DTypePolicy object) -> soma's; nullopt for a policy soma
// has no layer dtype for (mixed_float16: use compile's mixed_precision instead).
std::optional<std::string> soma_dtype(const json& v, const std::string& where) {
  std::string name;
  if (v.is_string()) {
    name = v.get<std::string>();
  } else if (v.is_object() && v.contains("config") && v["config"].is_object() &&
             v["config"].contains("name") && v["config"]["name"].is_string()) {
    name = v["config"]["name"].get<std::string>();
  } else {
    bad(where, "bad value for \"dtype\": " + limits::json_excerpt(v));
  }
  static const std::pair<const char*, const char*> names[] = {
      {"float32", "f32"}, {"float64", "f64"}, {"float16", "f16"}, {"bfloat16", "bf16"}};
  for (auto& [k, s] : names)
    if (name == k) return std::string(s);
  return std::nullopt;
}

// {"class_name": "L2", "config": {"l2": 0.01}} -> soma's {"l1": 0, "l2": 0.01}.
json soma_regularizer(const std::string& key, const json& v, const std::string& where) {
  if (v.is_null()) return v;
  const std::string cls = v.is_object() ? v.value("class_name", std::string()) : std::string();
  const json c = v.is_object() ? v.value("config", json::object()) : json::object();
  if (cls == "L1" || cls == "L2" || cls == "L1L2")
    return json{{"l1", c.value("l1", 0.0)}, {"l2", c.value("l2", 0.0)}};
  bad(where, "field \"" + key + "\": regularizer " + limits::json_excerpt(v) +
                 " is not supported (soma has L1, L2 and L1L2)");
}

// A Keras entry's config as soma's layer reads it: Keras 3's objects become soma's values, the
// fields Keras writes with a neutral value are dropped, and those soma cannot honour are errors
// naming layer and field. `fields` is the soma layer's full default config.
void map_keras_fields(const std::string& type, json& cfg, const json& fields, const std::string& where) {
  std::vector<std::string> drop;
  for (auto& [k, v] : cfg.items()) {
    if (k == "dtype") {
      auto d = soma_dtype(v, where);
      if (!fields.contains("dtype")) {
        // A layer without weights: any floating policy runs as its input's dtype.
        drop.push_back(k);
      } else if (!d) {
        bad(where, "field \"dtype\": Keras' policy " + limits::json_excerpt(v) +
                       " is not supported (soma's layers take float32, float64, float16 or bfloat16; "
                       "for mixed precision use compile's mixed_precision)");
      } else {
        v = *d;
      }
    } else if (ends_with(k, "_initializer") && v.is_object()) {
      const std::string name = internal::keras_snake_case(v.value("class_name", std::string()));
      if (!serialization::internal::known_initializer(name))
        bad(where, "field \"" + k + "\": initializer " + limits::json_excerpt(v) + " is not supported");
      v = json{{"class_name", name}};
    } else if (ends_with(k, "_regularizer")) {
      if (k == "activity_regularizer" && !fields.contains(k)) {
        if (!v.is_null()) bad(where, "field \"activity_regularizer\" is not supported (got " + limits::json_excerpt(v) + ")");
        drop.push_back(k);
      } else {
        v = soma_regularizer(k, v, where);
      }
    } else if (ends_with(k, "_constraint")) {
      if (!v.is_null()) bad(where, "field \"" + k + "\": constraints are not supported (got " + limits::json_excerpt(v) + ")");
      drop.push_back(k);
    } else if (k == "data_format" && !fields.contains(k)) {
      // Flatten's data_format keeps the (h, w, c) order of channels_last, soma's plain reshape;
      // another layer without the field is one soma runs in channels_first only.
      const std::string f = v.is_string() ? v.get<std::string>() : "";
      const std::string ok = type == "Flatten" ? "channels_last" : "channels_first";
      if (!v.is_null() && f != ok)
        bad(where, "field \"data_format\": " + limits::json_excerpt(v) + " is not supported for " +
                       type + " (only " + ok + ")");
      drop.push_back(k);
    } else if ((k == "synchronized" || k == "sparse" || k == "ragged") && !fields.contains(k)) {
      if (!v.is_boolean() || v.get<bool>()) bad(where, "field \"" + k + "\": " + limits::json_excerpt(v) + " is not supported");
      drop.push_back(k);
    } else if (k == "noise_shape" && !fields.contains(k)) {
      if (!v.is_null()) bad(where, "field \"noise_shape\" is not supported (got " + limits::json_excerpt(v) + ")");
      drop.push_back(k);
    } else if (k == "negative_slope" && fields.contains("alpha") && !fields.contains(k)) {
      cfg["alpha"] = v;  // Keras 3's LeakyReLU; Keras 2 wrote alpha
      drop.push_back(k);
    }
  }
  for (auto& k : drop) cfg.erase(k);
}

// The top-level keys of a Keras entry besides class_name and config.
void check_keras_entry_keys(const json& entry, const std::string& type, const std::string& where) {
  for (auto& [k, v] : entry.items()) {
    if (k == "class_name" || k == "config" || k == "module" || k == "build_config" || k == "name" ||
        k == "inbound_nodes")
      continue;
    if (k == "registered_name") {
      // Keras' own layers write null or their class name; anything else is a custom object.
      if (v.is_null() || (v.is_string() && canonical_type(v.get<std::string>()) == type)) continue;
      bad(where, "registered_name " + limits::json_excerpt(v) + " is a custom Keras object, which soma cannot build");
    }
    bad(where, "unknown key \"" + k + "\" in the entry (expected class_name, config, module, registered_name, build_config)");
  }
  if (entry.contains("module") && entry["module"].is_string()) {
    const std::string m = entry["module"].get<std::string>();
    if (m.rfind("keras", 0) != 0)
      bad(where, "module \"" + m + "\" is not Keras' own: a custom layer soma cannot build");
  }
}

nn::ModuleRef entry_to_layer(const json& entry, const std::string& at) {
  if (!entry.is_object()) bad(at, "expected an object");
  // {"type": "Dense", ...options} or Keras' {"class_name": "Dense", "config": {...}}.
  const bool keras_form = entry.contains("class_name");
  const std::string type = canonical_type(keras_form ? required<std::string>(entry, "class_name", at)
                                                     : required<std::string>(entry, "type", at));
  const std::string where = at + " (" + type + ")";
  json cfg = keras_form ? entry.value("config", json::object()) : entry;
  if (!cfg.is_object()) bad(where, "\"config\" must be an object");
  if (!keras_form) cfg.erase("type");
  const auto types = layer_types();
  if (std::find(types.begin(), types.end(), type) == types.end())
    bad(where, "unknown layer type \"" + type + "\" (known: " + joined(types) + ")");
  if (keras_form) check_keras_entry_keys(entry, type, where);
  auto fields = serialization::layer_fields(type);
  nn::ModuleRef layer;
  if (!fields) {
    // A registered custom layer: its own from_config reads the config as given.
    try {
      layer = serialization::layer_from_config(json{{"class_name", type}, {"config", cfg}}.dump());
    } catch (const std::exception& e) {
      bad(where, e.what());
    }
  } else {
    json full = json::parse(fields->defaults);
    if (keras_form) map_keras_fields(type, cfg, full, where);
    std::vector<std::string> allowed;
    for (auto& [k, v] : full.items()) allowed.push_back(k);
    allowed.push_back("name");
    allowed.push_back("trainable");
    const std::string allowed_list = " (allowed keys: " + joined(allowed) + ")";
    for (auto& [k, v] : cfg.items()) {
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      // Keras' get_config() writes null for what it does not use.
      if (keras_form && v.is_null()) continue;
      bad(where, "unknown key \"" + k + "\"" + allowed_list);
    }
    for (const auto& k : fields->required)
      if (!cfg.contains(k)) bad(where, "missing \"" + k + "\"");
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
        if (auto pos = what.find("field '" + k + wrong); pos != std::string::npos) {
          std::string detail = what.substr(pos + 7 + k.size() + wrong.size());
          if (detail.find("got ") == std::string::npos) detail += ", got " + limits::json_excerpt(v);
          bad(where, "bad value for \"" + k + "\": " + detail + allowed_list);
        }
      bad(where, what + allowed_list);
    }
  }
  if (cfg.contains("trainable")) layer->set_trainable(get<bool>(cfg, "trainable", true, where));
  return layer;
}

// The input shape (without the batch axis) of a Keras InputLayer entry or of a first layer's
// Keras 2 batch_input_shape.
Shape input_shape_of(const json& list, const std::string& where) {
  Shape s;
  try {
    for (std::size_t i = 1; i < list.size(); ++i) {
      if (list[i].is_null()) bad(where, "the input shape " + limits::json_excerpt(list) +
                                            " has an unknown extent past the batch axis; soma needs them all");
      s.push_back(serialization::internal::int_of(list[i]));
    }
  } catch (const json::exception&) {
    bad(where, "bad input shape " + limits::json_excerpt(list));
  }
  return s;
}

}  // namespace

// Keras' two rules, in order: "(.)([A-Z][a-z]+)" -> "\1_\2", then "([a-z])([A-Z])" -> "\1_\2";
// then lower case.
std::string internal::keras_snake_case(const std::string& name) {
  auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  std::string a;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (i > 0 && upper(name[i]) && i + 1 < name.size() && lower(name[i + 1])) a += '_';
    a += name[i];
  }
  std::string b;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (i > 0 && upper(a[i]) && lower(a[i - 1])) b += '_';
    b += a[i];
  }
  for (auto& c : b) c = char(std::tolower(static_cast<unsigned char>(c)));
  return b;
}

nn::ModuleRef layer_from_entry(const std::string& entry_json, const std::string& where) {
  json j;
  try {
    j = json::parse(entry_json);
  } catch (const json::exception& e) {
    bad(where, std::string("not valid JSON: ") + limits::excerpt(e.what(), limits::kMaxDetailChars));
  }
  return entry_to_layer(j, where);
}

std::shared_ptr<Model> from_keras_json(const std::string& text) {
  const std::string W = "from_keras_json";
  limits::check_json_text(text, W);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    bad(W, std::string("not valid JSON: ") + limits::excerpt(e.what(), limits::kMaxDetailChars));
  }
  if (!doc.is_object() || !doc.contains("class_name") || !doc["class_name"].is_string() ||
      !doc.contains("config") || !doc["config"].is_object())
    bad(W, "expected Keras' model.to_json() form {\"class_name\": \"Sequential\", \"config\": {...}}");
  const std::string kind = doc["class_name"].get<std::string>();
  if (kind != "Sequential")
    bad(W, "model class \"" + kind + "\" is not supported (soma reads Keras' Sequential models)");
  const json& root = doc["config"];
  if (!root.contains("layers") || !root["layers"].is_array())
    bad(W, "the Sequential config has no \"layers\" array");
  const json& layers = root["layers"];
  if (layers.size() > limits::kMaxLayersFromFile)
    bad(W, "the model lists " + std::to_string(layers.size()) + " layers, more than the limit of " +
               std::to_string(limits::kMaxLayersFromFile));
  for (auto& [k, v] : root.items())
    if (k != "name" && k != "trainable" && k != "dtype" && k != "layers" && k != "build_input_shape")
      bad(W, "unknown key \"" + k + "\" in the Sequential config");

  // The input shape: InputLayer's batch_shape (Keras 3) or batch_input_shape (Keras 2), a first
  // layer's batch_input_shape (Keras 2), or the model's build_input_shape.
  std::optional<Shape> input;
  std::vector<std::pair<json, std::string>> entries;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    json e = layers[i];
    std::string where = W + ": layers[" + std::to_string(i) + "]";
    if (e.is_object() && e.contains("config") && e["config"].is_object() &&
        e["config"].contains("name") && e["config"]["name"].is_string())
      where += " '" + e["config"]["name"].get<std::string>() + "'";
    if (!e.is_object()) bad(where, "expected an object");
    json& c = e["config"];
    if (e.value("class_name", json()) == "InputLayer") {
      if (!c.is_object()) bad(where + " (InputLayer)", "\"config\" must be an object");
      for (auto& [k, v] : c.items()) {
        if (k == "batch_shape" || k == "batch_input_shape") {
          if (!v.is_array()) bad(where + " (InputLayer)", "\"" + k + "\" must be a list");
          input = input_shape_of(v, where + " (InputLayer)");
        } else if (k == "dtype") {
          if (soma_dtype(v, where) != std::string("f32"))
            bad(where + " (InputLayer)", "field \"dtype\": only float32 inputs are supported, got " + limits::json_excerpt(v));
        } else if (k == "sparse" || k == "ragged") {
          if (!v.is_boolean() || v.get<bool>()) bad(where + " (InputLayer)", "field \"" + k + "\" is not supported");
        } else if (k != "name" && k != "input_shape") {
          bad(where + " (InputLayer)", "unknown key \"" + k + "\"");
        }
      }
      continue;
    }
    if (c.is_object()) {
      for (const char* k : {"batch_input_shape", "batch_shape"})
        if (c.contains(k)) {
          if (!input && c[k].is_array()) input = input_shape_of(c[k], where);
          c.erase(k);
        }
    }
    entries.emplace_back(std::move(e), where);
  }
  if (!input && root.contains("build_input_shape") && root["build_input_shape"].is_array())
    input = input_shape_of(root["build_input_shape"], W + ": build_input_shape");
  if (!input)
    bad(W, "the model has no input shape (no InputLayer, batch_input_shape or build_input_shape)");
  if (entries.empty()) bad(W, "the model has no layers");

  auto m = std::make_shared<nn::Sequential>();
  if (root.contains("name") && root["name"].is_string()) m->set_name(root["name"].get<std::string>());
  m->add(nn::Input(*input));
  limits::FileModelScope scope(W);  // layers are built as they are added: refuse absurd weights
  for (auto& [e, where] : entries) m->add(entry_to_layer(e, where));
  return m;
}

std::shared_ptr<Model> Model::from_keras_json(const std::string& json) { return model::from_keras_json(json); }
void Model::load_keras_weights(const std::string& path) { model::load_keras_weights(*this, path); }

}  // namespace soma::model
