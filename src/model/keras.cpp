// Keras' model JSON (soma/model/keras.hpp, docs/keras.md): the layer-entry reader that the CLI's
// --config shares, with Keras 3's per-layer fields mapped onto soma's layer configs, and
// from_keras_json over it. Every layer is built through its own field list
// (serialization::layer_fields), so this file names no layer's fields but Keras' extras.
#include "soma/model/keras.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>
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
  static const std::map<std::string, std::string> aliases = {
      {"MaxPooling2D", "MaxPool2D"},
      {"AveragePooling2D", "AvgPool2D"},
      {"GlobalAvgPool2D", "GlobalAveragePooling2D"},
      {"MaxPooling3D", "MaxPool3D"},
      {"AveragePooling3D", "AvgPool3D"},
      {"GlobalAvgPool3D", "GlobalAveragePooling3D"},
      {"GlobalMaxPool2D", "GlobalMaxPooling2D"},
      {"GlobalMaxPool1D", "GlobalMaxPooling1D"},
  };
  auto it = aliases.find(t);
  return it == aliases.end() ? t : it->second;
}

std::string joined(const std::vector<std::string>& names) {
  std::string r;
  for (const auto& n : names) r += (r.empty() ? "" : ", ") + n;
  return r;
}

// The layer types an entry may name: every layer with a config but the model kinds.
std::vector<std::string> layer_types() {
  std::vector<std::string> r;
  static const std::set<std::string> models = {"Sequential", "Functional"};
  for (auto& t : serialization::registered_layers())
    if (!models.count(t)) r.push_back(t);
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
  // soma's own names too: layer_config() writes the Keras form with them.
  static const std::pair<const char*, const char*> names[] = {
      {"float32", "f32"}, {"float64", "f64"}, {"float16", "f16"}, {"bfloat16", "bf16"},
      {"f32", "f32"},     {"f64", "f64"},     {"f16", "f16"},     {"bf16", "bf16"}};
  for (auto& [k, s] : names)
    if (name == k) return std::string(s);
  return std::nullopt;
}

// {"class_name": "L2", "config": {"l2": 0.01}} -> soma's {"l1": 0, "l2": 0.01}.
json soma_regularizer(const std::string& key, const json& v, const std::string& where) {
  if (v.is_null()) return v;
  if (v.is_object() && !v.contains("class_name")) return v;  // soma's own {"l1", "l2"}
  const std::string cls = v.is_object() ? v.value("class_name", std::string()) : std::string();
  const json c = v.is_object() ? v.value("config", json::object()) : json::object();
  static const std::set<std::string> known = {"L1", "L2", "L1L2"};
  if (known.count(cls))
    return json{{"l1", c.value("l1", 0.0)}, {"l2", c.value("l2", 0.0)}};
  bad(where, "field \"" + key + "\": regularizer " + limits::json_excerpt(v) +
                 " is not supported (soma has L1, L2 and L1L2)");
}

// Keras fields that soma's layers lack, accepted with the neutral value Keras writes for them.
const std::map<std::string, json>& neutral_fields() {
  static const std::map<std::string, json> table = {
      {"synchronized", false},            // BatchNormalization across devices
      {"sparse", false},                  // InputLayer
      {"ragged", false},                  // InputLayer
      {"noise_shape", nullptr},           // Dropout
      {"activity_regularizer", nullptr},  // Conv2D and others
      {"optional", false},                // InputLayer (Keras >= 3.13: an optional input)
      {"renorm", false},                  // BatchNormalization (Keras >= 3.14: batch renormalisation)
      {"threshold", 0.0},                 // ReLU
      {"max_value", nullptr},             // ReLU
      {"rms_scaling", false},             // LayerNormalization (Keras 3: RMS instead of mean/var)
      {"mask_zero", false},               // Embedding
      {"use_gate", false},                // MultiHeadAttention
      {"sliding_window", nullptr},        // MultiHeadAttention (Keras >= 3.15)
      {"quantization_config", nullptr},   // Dense and others (Keras >= 3.14)
      {"stateful", false},                // SimpleRNN, LSTM, GRU: states kept across batches
      {"zero_output_for_mask", false},    // SimpleRNN, LSTM, GRU (with masks only)
      {"dropout", 0.0},                   // SimpleRNN, LSTM, GRU (training only)
      {"recurrent_dropout", 0.0},         // SimpleRNN, LSTM, GRU (training only)
      {"seed", nullptr},                  // SimpleRNN, LSTM, GRU (their dropouts' seed)
  };
  return table;
}

// The Keras fields with a rule of their own: each maps its value in place (or adds soma's
// fields to `added`) and returns false when the field is to be dropped; errors name layer and
// field.
struct KerasField {
  std::string type;    // the soma layer type
  const json& fields;  // its full default config
  const std::string& where;
  const json& cfg;     // the whole Keras config (for fields that matter only with another's value)
  [[noreturn]] void unsupported(const std::string& k, const json& v, const std::string& why) const {
    bad(where, "field \"" + k + "\": " + limits::json_excerpt(v) + " is not supported" + why);
  }
};
using FieldRule = bool (*)(const KerasField&, const std::string& key, json& value, json& added);

// The major version of the Keras that wrote the file being read: 2 when its to_json() says
// "keras_version": "2..." (Keras 3 writes none), else 3. Set by from_keras_json for the read.
thread_local int t_keras_major = 3;
struct KerasVersionScope {
  int saved = t_keras_major;
  explicit KerasVersionScope(const json& doc) {
    const json v = doc.value("keras_version", json());
    t_keras_major = v.is_string() && !v.get<std::string>().empty() && v.get<std::string>()[0] < '3' ? 2 : 3;
  }
  ~KerasVersionScope() { t_keras_major = saved; }
  KerasVersionScope(const KerasVersionScope&) = delete;
  KerasVersionScope& operator=(const KerasVersionScope&) = delete;
};

const std::map<std::string, FieldRule>& field_rules() {
  static const std::map<std::string, FieldRule> table = {
      {"dtype",
       [](const KerasField& f, const std::string& k, json& v, json&) {
         auto d = soma_dtype(v, f.where);
         // A layer without weights runs in its input's dtype whatever the policy.
         if (!f.fields.contains(k)) return false;
         if (!d)
           f.unsupported(k, v, " (soma's layers take float32, float64, float16 or bfloat16; for "
                               "mixed precision use compile's mixed_precision)");
         v = *d;
         return true;
       }},
      {"data_format",
       [](const KerasField& f, const std::string& k, json& v, json&) {
         if (f.fields.contains(k)) return true;
         // Flatten's data_format keeps the (h, w, c) order of channels_last, soma's plain
         // reshape; another layer without the field runs in channels_first only.
         const std::string ok = f.type == "Flatten" ? "channels_last" : "channels_first";
         if (!v.is_null() && v != json(ok)) f.unsupported(k, v, " for " + f.type + " (only " + ok + ")");
         return false;
       }},
      // Keras 3's hard_sigmoid is relu6(x + 3) / 6 (PyTorch's Hardsigmoid, soma's
      // "hardsigmoid"); Keras 2's was 0.2 x + 0.5 (ONNX's HardSigmoid, soma's "hard_sigmoid").
      {"activation",
       [](const KerasField&, const std::string&, json& v, json&) {
         if (t_keras_major >= 3 && v == json("hard_sigmoid")) v = "hardsigmoid";
         return true;
       }},
      {"negative_slope",  // Keras 3's LeakyReLU; Keras 2 and soma: alpha. ReLU's: 0 only.
       [](const KerasField& f, const std::string& k, json& v, json& added) {
         if (f.fields.contains(k)) return true;
         if (!f.fields.contains("alpha")) {
           if (!v.is_number() || v.get<double>() != 0.0) f.unsupported(k, v, " (only 0)");
           return false;
         }
         added["alpha"] = v;
         return false;
       }},
      // MultiHeadAttention over the sequence axis of [batch, time, features], soma's only one:
      // null, or the [1] Keras writes for it once built.
      {"attention_axes",
       [](const KerasField& f, const std::string& k, json& v, json&) {
         if (f.fields.contains(k)) return true;
         if (!v.is_null() && v != json::array({1}) && v != json::array({-2}))
           f.unsupported(k, v, " (soma attends over axis 1 of [batch, time, features] only)");
         return false;
       }},
      // How Keras runs a recurrent layer, not what it computes: any value.
      {"unroll", [](const KerasField& f, const std::string& k, json&, json&) { return f.fields.contains(k); }},
      {"use_cudnn", [](const KerasField& f, const std::string& k, json&, json&) { return f.fields.contains(k); }},
      // BatchNormalization's renormalisation settings, read by Keras only when renorm is true
      // (which the neutral table refuses): any value is then neutral.
      {"renorm_clipping",
       [](const KerasField& f, const std::string& k, json&, json&) {
         return f.fields.contains(k) || f.cfg.value("renorm", json(false)) != json(false);
       }},
      {"renorm_momentum",
       [](const KerasField& f, const std::string& k, json&, json&) {
         return f.fields.contains(k) || f.cfg.value("renorm", json(false)) != json(false);
       }},
  };
  return table;
}

// A Keras entry's config as soma's layer reads it: Keras 3's objects become soma's values, the
// fields Keras writes with a neutral value are dropped, and those soma cannot honour are errors
// naming layer and field. `fields` is the soma layer's full default config.
void map_keras_fields(const std::string& type, json& cfg, const json& fields, const std::string& where) {
  const json whole = cfg;
  const KerasField f{type, fields, where, whole};
  std::vector<std::string> drop;
  json added = json::object();
  for (auto& [k, v] : cfg.items()) {
    if (auto rule = field_rules().find(k); rule != field_rules().end()) {
      if (!rule->second(f, k, v, added)) drop.push_back(k);
    } else if (auto n = neutral_fields().find(k); n != neutral_fields().end() && !fields.contains(k)) {
      if (v != n->second) f.unsupported(k, v, "");
      drop.push_back(k);
    } else if (ends_with(k, "_initializer") && v.is_object()) {
      const std::string name = internal::keras_snake_case(v.value("class_name", std::string()));
      if (!serialization::internal::known_initializer(name)) f.unsupported(k, v, " (an unknown initializer)");
      v = json{{"class_name", name}};
    } else if (ends_with(k, "_regularizer")) {
      v = soma_regularizer(k, v, where);
    } else if (ends_with(k, "_constraint")) {
      if (!v.is_null()) f.unsupported(k, v, " (soma has no constraints)");
      drop.push_back(k);
    }
  }
  for (auto& k : drop) cfg.erase(k);
  for (auto& [k, v] : added.items()) cfg[k] = v;
}

// The top-level keys of a Keras entry besides class_name and config.
void check_keras_entry_keys(const json& entry, const std::string& type, const std::string& where) {
  static const std::set<std::string> ignored = {"class_name", "config", "module", "build_config",
                                                "name", "inbound_nodes"};
  for (auto& [k, v] : entry.items()) {
    if (ignored.count(k)) continue;
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
  try {
    return entry_to_layer(j, where);
  } catch (const json::exception& e) {
    bad(where, "malformed entry: " + limits::excerpt(e.what(), limits::kMaxDetailChars));
  }
}

namespace {

// "from_keras_json: layers[3] 'dense'": where an entry's messages start.
std::string entry_where(const std::string& W, std::size_t i, const json& e) {
  std::string where = W + ": layers[" + std::to_string(i) + "]";
  if (e.is_object() && e.contains("config") && e["config"].is_object() &&
      e["config"].contains("name") && e["config"]["name"].is_string())
    where += " '" + e["config"]["name"].get<std::string>() + "'";
  if (!e.is_object()) bad(where, "expected an object");
  return where;
}

bool is_input_layer(const json& e) { return e.value("class_name", json()) == "InputLayer"; }

// The call arguments Keras records on a functional model's every call, with their neutral
// values: no mask (null); `training` false or null, which the model's own call replaces (Keras
// passes its training flag down, as soma's fit and predict do); no causal mask. Any other value
// or argument is refused, naming it.
void check_call_arguments(const json& kwargs, const std::string& where) {
  if (kwargs.is_null()) return;
  if (!kwargs.is_object()) bad(where, "call arguments " + limits::json_excerpt(kwargs) + " are not an object");
  static const std::map<std::string, std::vector<json>> neutral = {
      {"mask", {nullptr}},
      {"training", {false, nullptr}},
      {"use_causal_mask", {false}},
  };
  for (auto& [k, v] : kwargs.items()) {
    auto n = neutral.find(k);
    if (n == neutral.end())
      bad(where, "call argument \"" + k + "\" (" + limits::json_excerpt(v) + ") is not supported");
    if (std::find(n->second.begin(), n->second.end(), v) == n->second.end())
      bad(where, "call argument \"" + k + "\": " + limits::json_excerpt(v) +
                     " is not supported (soma reads " + limits::json_excerpt(n->second.front()) + ")");
  }
}

// An InputLayer's per-sample shape: batch_shape (Keras 3) or batch_input_shape (Keras 2).
std::optional<Shape> input_layer_shape(const json& c, const std::string& at) {
  const std::string where = at + " (InputLayer)";
  if (!c.is_object()) bad(where, "\"config\" must be an object");
  std::optional<Shape> input;
  for (auto& [k, v] : c.items()) {
    if (k == "batch_shape" || k == "batch_input_shape") {
      if (!v.is_array()) bad(where, "\"" + k + "\" must be a list");
      input = input_shape_of(v, where);
    } else if (k == "dtype") {
      if (soma_dtype(v, where) != std::string("f32"))
        bad(where, "field \"dtype\": only float32 inputs are supported, got " + limits::json_excerpt(v));
    } else if (auto n = neutral_fields().find(k); n != neutral_fields().end()) {
      if (v != n->second) bad(where, "field \"" + k + "\": " + limits::json_excerpt(v) + " is not supported");
    } else if (k != "name" && k != "input_shape") {
      bad(where, "unknown key \"" + k + "\"");
    }
  }
  return input;
}

void check_model_keys(const json& root, const std::set<std::string>& keys, const std::string& W) {
  for (auto& [k, v] : root.items())
    if (!keys.count(k)) bad(W, "unknown key \"" + k + "\" in the model's config");
}

std::shared_ptr<Model> sequential_from_keras(const json& root, const std::string& W) {
  check_model_keys(root, {"name", "trainable", "dtype", "layers", "build_input_shape"}, W);
  const json& layers = root["layers"];
  // The input shape: InputLayer's batch_shape (Keras 3) or batch_input_shape (Keras 2), a first
  // layer's batch_input_shape (Keras 2), or the model's build_input_shape.
  std::optional<Shape> input;
  std::vector<std::pair<json, std::string>> entries;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    json e = layers[i];
    const std::string where = entry_where(W, i, e);
    json& c = e["config"];
    if (is_input_layer(e)) {
      if (auto s = input_layer_shape(c, where)) input = s;
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

// A functional model: every layer called, in the file's order, on the outputs its inbound nodes
// name ([layer, node, tensor]: Keras 3's keras_history, or Keras 2's lists); a layer with several
// nodes is shared.
std::shared_ptr<Model> functional_from_keras(const json& root, const std::string& W) {
  check_model_keys(root, {"name", "trainable", "layers", "input_layers", "output_layers"}, W);
  std::map<std::string, std::vector<std::vector<SymbolicTensor>>> outputs;  // per layer, per node
  auto tensor_at = [&](const json& ref, const std::string& where) -> SymbolicTensor {
    if (!ref.is_array() || ref.size() < 3 || !ref[0].is_string())
      bad(where, "bad tensor reference " + limits::json_excerpt(ref) + " (expected [layer, node, tensor])");
    const std::string name = ref[0].get<std::string>();
    const auto node = serialization::internal::int_of(ref[1]), index = serialization::internal::int_of(ref[2]);
    auto it = outputs.find(name);
    if (it == outputs.end() || node < 0 || std::size_t(node) >= it->second.size() || index < 0 ||
        std::size_t(index) >= it->second[std::size_t(node)].size())
      bad(where, "tensor " + limits::json_excerpt(ref) + " names no earlier layer's output");
    return it->second[std::size_t(node)][std::size_t(index)];
  };
  // Keras 3: the __keras_tensor__ objects anywhere in a node's args, in order.
  std::function<void(const json&, std::vector<SymbolicTensor>&, const std::string&)> collect =
      [&](const json& j, std::vector<SymbolicTensor>& xs, const std::string& where) {
        if (j.is_object() && j.value("class_name", json()) == "__keras_tensor__") {
          xs.push_back(tensor_at(j.at("config").at("keras_history"), where));
        } else if (j.is_array()) {
          for (auto& x : j) collect(x, xs, where);
        }
      };
  limits::FileModelScope scope(W);
  const json& layers = root["layers"];
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const json& e = layers[i];
    const std::string where = entry_where(W, i, e);
    const std::string name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>()
                                                                         : e.at("config").value("name", std::string());
    if (is_input_layer(e)) {
      auto shape = input_layer_shape(e.value("config", json::object()), where);
      if (!shape) bad(where, "the InputLayer has no batch_shape");
      outputs[name] = {{nn::Input(*shape, {.name = name})}};
      continue;
    }
    nn::ModuleRef layer = entry_to_layer(e, where);
    const json nodes = e.value("inbound_nodes", json::array());
    if (!nodes.is_array() || nodes.empty()) bad(where, "the layer has no inbound_nodes");
    for (auto& node : nodes) {
      std::vector<SymbolicTensor> xs;
      if (node.is_object()) {  // Keras 3: {"args": [...], "kwargs": {...}}
        if (node.contains("kwargs"))
          check_call_arguments(node["kwargs"], where + " (" + e.value("class_name", std::string()) + ")");
        collect(node.value("args", json::array()), xs, where);
      } else if (node.is_array()) {  // Keras 2: [[layer, node, tensor, kwargs], ...]
        for (auto& ref : node) xs.push_back(tensor_at(ref, where));
      }
      if (xs.empty()) bad(where, "an inbound node names no input tensor");
      outputs[name].push_back(call(layer, xs));
    }
  }
  auto refs = [&](const char* key) {
    std::vector<SymbolicTensor> r;
    const json list = root.value(key, json::array());
    // One tensor may be written as [name, node, tensor] instead of a list of them.
    if (list.is_array() && !list.empty() && list[0].is_string()) r.push_back(tensor_at(list, W + ": " + key));
    else
      for (auto& ref : list) r.push_back(tensor_at(ref, W + ": " + key));
    if (r.empty()) bad(W, std::string("the model has no ") + key);
    return r;
  };
  auto m = std::make_shared<Model>(refs("input_layers"), refs("output_layers"));
  if (root.contains("name") && root["name"].is_string()) m->set_name(root["name"].get<std::string>());
  return m;
}

}  // namespace

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
  const json& root = doc["config"];
  if (!root.contains("layers") || !root["layers"].is_array())
    bad(W, "the model's config has no \"layers\" array");
  if (root["layers"].size() > limits::kMaxLayersFromFile)
    bad(W, "the model lists " + std::to_string(root["layers"].size()) +
               " layers, more than the limit of " + std::to_string(limits::kMaxLayersFromFile));
  const KerasVersionScope version(doc);
  using Reader = std::shared_ptr<Model> (*)(const json&, const std::string&);
  static const std::map<std::string, Reader> readers = {
      {"Sequential", sequential_from_keras},
      {"Functional", functional_from_keras},
      {"Model", functional_from_keras},  // Keras 2's name for a functional model
  };
  auto it = readers.find(kind);
  if (it == readers.end())
    bad(W, "model class \"" + kind + "\" is not supported (soma reads Keras' Sequential and Functional models)");
  try {
    return it->second(root, W);
  } catch (const json::exception& e) {  // a value of an unexpected JSON type somewhere
    bad(W, "malformed model: " + limits::excerpt(e.what(), limits::kMaxDetailChars));
  }
}

std::shared_ptr<Model> Model::from_keras_json(const std::string& json) { return model::from_keras_json(json); }
void Model::load_keras_weights(const std::string& path) { model::load_keras_weights(*this, path); }

}  // namespace soma::model
