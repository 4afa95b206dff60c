// Model files: configs of layers / optimisers / losses as JSON, and the checksummed container
// (docs/model-format.md).
#include "soma/model/serialization.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <typeindex>
#include <typeinfo>

#include "internal/atomic_file.hpp"
#include "model/checkpoint_internal.hpp"
#include "model/serialization_internal.hpp"
#include "soma/error.hpp"
#include "soma/metrics.hpp"
#include "soma/model/input_limits.hpp"
#include "soma/model/merge.hpp"
#include "soma/model/sequential.hpp"
#include "soma/model/weights.hpp"
#include "soma/nn/attention.hpp"
#include "soma/nn/conv.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/nn/normalization.hpp"
#include "soma/nn/preprocessing.hpp"
#include "soma/nn/recurrent.hpp"
#include "soma/nn/transformer.hpp"
#include "soma/optim/loss_scale.hpp"
#include "soma/optim/optimizers.hpp"

namespace soma::serialization {

using json = nlohmann::json;

namespace {

// ---- layer registry -------------------------------------------------------------------------
// A layer type's config: built-in layers go through their field list (visit_config); Sequential,
// Functional and registered custom layers have their own functions.
struct LayerCodec {
  std::function<json(const nn::Module&)> to;
  std::function<nn::ModuleRef(const json&)> from;
  // The built-in model kinds (Sequential, Functional) only: whether a model of this type name is
  // one (else it is a subclassed model that took the name).
  std::function<bool(const nn::Model&)> whole_model;
  // Built-in layers only: the config of a fresh layer (the field list's defaults), and the fields
  // its constructor requires (placeholders in those defaults), for readers of partial configs.
  std::function<json()> defaults;
  std::vector<std::string> required;
};

json sequential_config(const nn::Sequential& s);
std::shared_ptr<nn::Sequential> sequential_from(const json& cfg);

template <class L>
const L& as(const nn::Module& m) {
  auto* p = dynamic_cast<const L*>(&m);
  if (!p) fail("save", "layer '", m.name(), "' of type '", m.type_name(), "' is not the built-in layer of that name");
  return *p;
}

// "layer 'd' (Dense)", for errors while reading a config.
std::string layer_where(const std::string& class_name, const json& c) {
  std::string where = "layer ";
  if (auto it = c.find("name"); it != c.end() && it->is_string()) where.append("'").append(it->get_ref<const std::string&>()).append("' ");
  return where.append("(").append(class_name).append(")");
}

// A built-in layer through its field list: written by visiting it; read by visiting a fresh
// `prototype`, then rebuilt by `remake` (its public constructor, so that its checks run).
template <class L>
LayerCodec schema_codec(const std::string& class_name, L (*prototype)(), nn::ModuleRef (*remake)(const L&),
                        std::vector<std::string> required = {}) {
  return {[](const nn::Module& m) { return internal::fields_json(m); },
          [=](const json& c) {
            L p = prototype();
            internal::read_fields(p, c, layer_where(class_name, c));
            return remake(p);
          },
          nullptr, [=] { return internal::fields_json(prototype()); }, std::move(required)};
}
// A layer without fields.
template <class L>
LayerCodec plain_codec(const std::string& class_name) {
  return schema_codec<L>(class_name, [] { return L(); }, [](const L&) { return nn::ModuleRef(L()); });
}

std::map<std::string, LayerCodec> builtin_codecs() {
  std::map<std::string, LayerCodec> r;
  auto add = [&](const std::string& name, LayerCodec c) { r.emplace(name, std::move(c)); };
  add("Dense", schema_codec<nn::Dense>("Dense", [] { return nn::Dense(1); }, [](const nn::Dense& p) {
        return nn::ModuleRef(nn::Dense(p.units(), p.activation(), p.options()));
      }, {"units"}));
  add("Conv2D", schema_codec<nn::Conv2D>("Conv2D", [] { return nn::Conv2D(1, 1); }, [](const nn::Conv2D& p) {
        return nn::ModuleRef(nn::Conv2D(p.filters(), p.kernel_size(), p.options()));
      }, {"filters", "kernel_size"}));
  add("Conv1D", schema_codec<nn::Conv1D>("Conv1D", [] { return nn::Conv1D(1, 1); }, [](const nn::Conv1D& p) {
        return nn::ModuleRef(nn::Conv1D(p.filters(), p.kernel_size(), p.options()));
      }, {"filters", "kernel_size"}));
  add("Conv2DTranspose",
      schema_codec<nn::Conv2DTranspose>("Conv2DTranspose", [] { return nn::Conv2DTranspose(1, 1); },
                                        [](const nn::Conv2DTranspose& p) {
                                          return nn::ModuleRef(
                                              nn::Conv2DTranspose(p.filters(), p.kernel_size(), p.options()));
                                        }, {"filters", "kernel_size"}));
  add("MaxPool2D", schema_codec<nn::MaxPool2D>("MaxPool2D", [] { return nn::MaxPool2D(); }, [](const nn::MaxPool2D& p) {
        return nn::ModuleRef(nn::MaxPool2D(p.pool_size(), p.strides(), p.padding(), p.data_format()));
      }));
  add("AvgPool2D", schema_codec<nn::AvgPool2D>("AvgPool2D", [] { return nn::AvgPool2D(); }, [](const nn::AvgPool2D& p) {
        return nn::ModuleRef(nn::AvgPool2D(p.pool_size(), p.strides(), p.padding(), p.data_format()));
      }));
  add("GlobalAveragePooling2D",
      schema_codec<nn::GlobalAveragePooling2D>(
          "GlobalAveragePooling2D", [] { return nn::GlobalAveragePooling2D(); },
          [](const nn::GlobalAveragePooling2D& p) { return nn::ModuleRef(nn::GlobalAveragePooling2D(p.keepdims(), p.data_format())); }));
  add("Conv3D", schema_codec<nn::Conv3D>("Conv3D", [] { return nn::Conv3D(1, 1); }, [](const nn::Conv3D& p) {
        return nn::ModuleRef(nn::Conv3D(p.filters(), p.kernel_size(), p.options()));
      }, {"filters", "kernel_size"}));
  add("MaxPool3D", schema_codec<nn::MaxPool3D>("MaxPool3D", [] { return nn::MaxPool3D(); }, [](const nn::MaxPool3D& p) {
        return nn::ModuleRef(nn::MaxPool3D(p.pool_size(), p.strides(), p.padding(), p.data_format()));
      }));
  add("AvgPool3D", schema_codec<nn::AvgPool3D>("AvgPool3D", [] { return nn::AvgPool3D(); }, [](const nn::AvgPool3D& p) {
        return nn::ModuleRef(nn::AvgPool3D(p.pool_size(), p.strides(), p.padding(), p.data_format()));
      }));
  add("GlobalAveragePooling3D",
      schema_codec<nn::GlobalAveragePooling3D>(
          "GlobalAveragePooling3D", [] { return nn::GlobalAveragePooling3D(); },
          [](const nn::GlobalAveragePooling3D& p) { return nn::ModuleRef(nn::GlobalAveragePooling3D(p.keepdims(), p.data_format())); }));
  add("GlobalMaxPooling2D",
      schema_codec<nn::GlobalMaxPooling2D>(
          "GlobalMaxPooling2D", [] { return nn::GlobalMaxPooling2D(); },
          [](const nn::GlobalMaxPooling2D& p) { return nn::ModuleRef(nn::GlobalMaxPooling2D(p.keepdims(), p.data_format())); }));
  add("GlobalMaxPooling1D",
      schema_codec<nn::GlobalMaxPooling1D>(
          "GlobalMaxPooling1D", [] { return nn::GlobalMaxPooling1D(); },
          [](const nn::GlobalMaxPooling1D& p) { return nn::ModuleRef(nn::GlobalMaxPooling1D(p.keepdims(), p.data_format())); }));
  add("Flatten", plain_codec<nn::Flatten>("Flatten"));
  add("Reshape", schema_codec<nn::Reshape>("Reshape", [] { return nn::Reshape(Shape{}); }, [](const nn::Reshape& p) {
        return nn::ModuleRef(nn::Reshape(p.target_shape()));
      }, {"target_shape"}));
  add("Dropout", schema_codec<nn::Dropout>("Dropout", [] { return nn::Dropout(0.0); }, [](const nn::Dropout& p) {
        return nn::ModuleRef(nn::Dropout(p.rate(), p.seed()));
      }, {"rate"}));
  add("Activation", schema_codec<nn::ActivationLayer>(
                        "Activation", [] { return nn::ActivationLayer(nn::Activation()); },
                        [](const nn::ActivationLayer& p) { return nn::ModuleRef(nn::ActivationLayer(p.activation())); }));
  add("ReLU", plain_codec<nn::ReLU>("ReLU"));
  add("Sigmoid", plain_codec<nn::Sigmoid>("Sigmoid"));
  add("Tanh", plain_codec<nn::Tanh>("Tanh"));
  add("Step", plain_codec<nn::Step>("Step"));
  add("LeakyReLU", schema_codec<nn::LeakyReLU>("LeakyReLU", [] { return nn::LeakyReLU(); }, [](const nn::LeakyReLU& p) {
        return nn::ModuleRef(nn::LeakyReLU(p.alpha()));
      }));
  add("ELU", schema_codec<nn::ELU>("ELU", [] { return nn::ELU(); },
                                   [](const nn::ELU& p) { return nn::ModuleRef(nn::ELU(p.alpha())); }));
  add("GELU", schema_codec<nn::GELU>("GELU", [] { return nn::GELU(); },
                                     [](const nn::GELU& p) { return nn::ModuleRef(nn::GELU(p.approximate())); }));
  add("Softmax", schema_codec<nn::Softmax>("Softmax", [] { return nn::Softmax(); },
                                           [](const nn::Softmax& p) { return nn::ModuleRef(nn::Softmax(p.axis())); }));
  add("Embedding", schema_codec<nn::Embedding>("Embedding", [] { return nn::Embedding(1, 1); }, [](const nn::Embedding& p) {
        return nn::ModuleRef(nn::Embedding(p.input_dim(), p.output_dim(), p.options()));
      }, {"input_dim", "output_dim"}));
  add("BatchNormalization",
      schema_codec<nn::BatchNormalization>(
          "BatchNormalization", [] { return nn::BatchNormalization(); },
          [](const nn::BatchNormalization& p) { return nn::ModuleRef(nn::BatchNormalization(p.options())); }));
  add("LayerNormalization",
      schema_codec<nn::LayerNormalization>(
          "LayerNormalization", [] { return nn::LayerNormalization(); },
          [](const nn::LayerNormalization& p) { return nn::ModuleRef(nn::LayerNormalization(p.options())); }));
  add("Normalization",
      schema_codec<nn::Normalization>("Normalization", [] { return nn::Normalization(); }, [](const nn::Normalization& p) {
        return nn::ModuleRef(nn::Normalization(p.options()));
      }));
  add("SimpleRNN", schema_codec<nn::SimpleRNN>("SimpleRNN", [] { return nn::SimpleRNN(1); }, [](const nn::SimpleRNN& p) {
        return nn::ModuleRef(nn::SimpleRNN(p.units(), p.options()));
      }, {"units"}));
  add("LSTM", schema_codec<nn::LSTM>("LSTM", [] { return nn::LSTM(1); },
                                     [](const nn::LSTM& p) { return nn::ModuleRef(nn::LSTM(p.units(), p.options())); }, {"units"}));
  add("GRU", schema_codec<nn::GRU>("GRU", [] { return nn::GRU(1); },
                                   [](const nn::GRU& p) { return nn::ModuleRef(nn::GRU(p.units(), p.options())); }, {"units"}));
  add("MultiHeadAttention", schema_codec<nn::MultiHeadAttention>("MultiHeadAttention", [] { return nn::MultiHeadAttention(1, 1); }, [](const nn::MultiHeadAttention& p) { return nn::ModuleRef(nn::MultiHeadAttention(p.num_heads(), p.key_dim(), p.options())); }, {"num_heads", "key_dim"}));
  add("RMSNormalization", schema_codec<nn::RMSNormalization>("RMSNormalization", [] { return nn::RMSNormalization(); }, [](const nn::RMSNormalization& p) { return nn::ModuleRef(nn::RMSNormalization(p.options())); }));
  add("TransformerEncoderLayer", schema_codec<nn::TransformerEncoderLayer>("TransformerEncoderLayer", [] { return nn::TransformerEncoderLayer(1, 1); }, [](const nn::TransformerEncoderLayer& p) { return nn::ModuleRef(nn::TransformerEncoderLayer(p.d_model(), p.nhead(), p.options())); }, {"d_model", "nhead"}));
  add("TransformerDecoderLayer", schema_codec<nn::TransformerDecoderLayer>("TransformerDecoderLayer", [] { return nn::TransformerDecoderLayer(1, 1); }, [](const nn::TransformerDecoderLayer& p) { return nn::ModuleRef(nn::TransformerDecoderLayer(p.d_model(), p.nhead(), p.options())); }, {"d_model", "nhead"}));
  add("PositionalEmbedding", schema_codec<nn::PositionalEmbedding>("PositionalEmbedding", [] { return nn::PositionalEmbedding(1); }, [](const nn::PositionalEmbedding& p) { return nn::ModuleRef(nn::PositionalEmbedding(p.sequence_length(), p.options())); }, {"sequence_length"}));
  add("SinePositionEncoding", schema_codec<nn::SinePositionEncoding>("SinePositionEncoding", [] { return nn::SinePositionEncoding(); }, [](const nn::SinePositionEncoding& p) { return nn::ModuleRef(nn::SinePositionEncoding(p.max_wavelength(), p.add_to_inputs())); }));
  // Merge layers (functional models).
  add("Add", plain_codec<nn::Add>("Add"));
  add("Multiply", plain_codec<nn::Multiply>("Multiply"));
  add("Average", plain_codec<nn::Average>("Average"));
  add("Concatenate", schema_codec<nn::Concatenate>("Concatenate", [] { return nn::Concatenate(); },
                                                   [](const nn::Concatenate& p) {
                                                     return nn::ModuleRef(nn::Concatenate(p.axis()));
                                                   }));
  // Models inside models, and the built-in model kinds at the top of a file.
  add("Sequential", {[](const nn::Module& m) { return sequential_config(as<nn::Sequential>(m)); },
                     [](const json& c) { return nn::ModuleRef(sequential_from(c)); },
                     [](const nn::Model& m) { return dynamic_cast<const nn::Sequential*>(&m) != nullptr; }});
  add("Functional", {[](const nn::Module& m) { return internal::functional_config(as<nn::Model>(m)); },
                     [](const json& c) { return nn::ModuleRef(internal::functional_from(c)); },
                     [](const nn::Model& m) { return !m.inputs().empty(); }});
  return r;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, LayerCodec>& registry() {
  static std::map<std::string, LayerCodec> r = builtin_codecs();
  return r;
}
LayerCodec find_codec(const std::string& class_name, const char* who) {
  std::lock_guard lock(registry_mutex());
  auto& r = registry();
  auto it = r.find(class_name);
  if (it == r.end())
    fail(who, "layer type '", class_name,
         "' has no config (not a built-in layer; add one with serialization::register_layer)");
  return it->second;
}

json layer_json(const nn::Module& layer) {
  auto codec = find_codec(layer.type_name(), "save");
  json cfg = codec.to(layer);
  cfg["name"] = layer.name();
  if (!layer.trainable()) cfg["trainable"] = false;
  return json{{"class_name", layer.type_name()}, {"config", cfg}};
}

nn::ModuleRef layer_from_json(const json& j) {
  const std::string cls = j.at("class_name").get<std::string>();
  const json& cfg = j.at("config");
  auto codec = find_codec(cls, "load_model");
  nn::ModuleRef m = codec.from(cfg);
  if (cfg.contains("name")) m->set_name(cfg.at("name").get<std::string>());
  return m;
}

json sequential_config(const nn::Sequential& s) {
  json layers = json::array();
  for (auto& l : s.layers()) layers.push_back(layer_json(*l));
  json cfg{{"layers", layers}};
  if (auto in = s.input_shape()) cfg["input_shape"] = json(std::vector<std::int64_t>(in->begin(), in->end()));  // batch axis included (-1)
  else cfg["input_shape"] = nullptr;
  return cfg;
}

std::shared_ptr<nn::Sequential> sequential_from(const json& cfg) {
  auto s = std::make_shared<nn::Sequential>();
  if (!cfg.at("input_shape").is_null()) {
    Shape in = internal::shape_from_json(cfg.at("input_shape"));
    if (in.empty()) fail("load_model", "Sequential input_shape must include the batch axis");
    limits::check_input_shape(Shape(in.begin() + 1, in.end()), "load_model: Sequential input_shape");
    s->add(nn::Input(Shape(in.begin() + 1, in.end())));
  }
  const json& layers = cfg.at("layers");
  if (layers.size() > limits::kMaxLayersFromFile)
    fail("load_model", "Sequential config lists ", layers.size(), " layers, more than the limit of ",
         limits::kMaxLayersFromFile);
  for (auto& l : layers) {
    nn::ModuleRef m = layer_from_json(l);
    s->add(m);
    if (!l.at("config").value("trainable", true)) m->set_trainable(false);
  }
  return s;
}

// ---- optimisers and losses ------------------------------------------------------------------
// Built-in optimisers by class name (== name()): read through a fresh one's field list, then
// rebuilt from its options with the learning rate it read.
using OptimizerFactory = std::function<optim::OptimizerRef(const json&)>;

template <class O>
OptimizerFactory optimizer_factory(const std::string& class_name) {
  return [class_name](const json& c) -> optim::OptimizerRef {
    O p;
    internal::read_fields(p, c, "optimizer " + class_name);
    auto o = p.options();
    o.learning_rate = p.common_options().learning_rate;
    return O(o);
  };
}

const std::map<std::string, OptimizerFactory>& optimizers() {
  static const std::map<std::string, OptimizerFactory> table = {
      {"SGD", optimizer_factory<optim::SGD>("SGD")},
      {"Adam", optimizer_factory<optim::Adam>("Adam")},
      {"AdamW", optimizer_factory<optim::AdamW>("AdamW")},
      {"Nadam", optimizer_factory<optim::Nadam>("Nadam")},
      {"RMSprop", optimizer_factory<optim::RMSprop>("RMSprop")},
      {"Adagrad", optimizer_factory<optim::Adagrad>("Adagrad")},
  };
  return table;
}

json optimizer_json(const optim::Optimizer& opt) {
  const std::string n = opt.name();
  // Keras' layout: the wrapper's fields with the wrapped optimiser's config nested.
  if (const auto* ls = opt.loss_scaler()) {
    json c = internal::fields_json(opt);
    c["inner_optimizer"] = optimizer_json(ls->inner_optimizer());
    return json{{"class_name", n}, {"config", c}};
  }
  if (!optimizers().count(n)) fail("save", "optimizer '", n, "' has no config (not a built-in optimizer)");
  return json{{"class_name", n}, {"config", internal::fields_json(opt)}};
}

optim::OptimizerRef optimizer_from_json(const json& j) {
  const std::string n = j.at("class_name").get<std::string>();
  if (n == "LossScaleOptimizer") {
    json c = j.at("config");
    if (!c.contains("inner_optimizer"))
      fail("load_model", "optimizer LossScaleOptimizer: the config has no 'inner_optimizer'");
    optim::OptimizerRef inner = optimizer_from_json(c.at("inner_optimizer"));
    c.erase("inner_optimizer");
    optim::LossScaleOptimizer p(inner);
    internal::read_fields(p, c, "optimizer LossScaleOptimizer");
    return optim::LossScaleOptimizer(inner, p.options());  // validates the fields read
  }
  auto it = optimizers().find(n);
  if (it == optimizers().end()) fail("load_model", "unknown optimizer '", n, "'");
  return it->second(j.at("config"));
}

// Built-in losses: the class name in files, name() in code.
struct LossCodec {
  const char* class_name;
  const char* loss_name;
  std::function<nn::LossRef(const json&)> from;
};

// Read through a fresh loss's field list, then rebuilt with `remake`.
template <class L>
LossCodec loss_codec(const char* class_name, const char* loss_name, nn::LossRef (*remake)(const L&)) {
  return {class_name, loss_name, [=](const json& c) {
            L p;
            internal::read_fields(p, c, std::string("loss ") + class_name);
            return remake(p);
          }};
}
// A loss built from an options struct with a reduction.
template <class L>
nn::LossRef with_options(const L& p) {
  auto o = p.options();
  o.reduction = p.reduction();
  return L(o);
}

const std::vector<LossCodec>& losses() {
  static const std::vector<LossCodec> table = {
      loss_codec<nn::MeanSquaredError>("MeanSquaredError", "mean_squared_error",
                                       [](const nn::MeanSquaredError& p) {
                                         return nn::LossRef(nn::MeanSquaredError({.reduction = p.reduction()}));
                                       }),
      loss_codec<nn::MeanAbsoluteError>("MeanAbsoluteError", "mean_absolute_error",
                                        [](const nn::MeanAbsoluteError& p) {
                                          return nn::LossRef(nn::MeanAbsoluteError({.reduction = p.reduction()}));
                                        }),
      loss_codec<nn::Huber>("Huber", "huber_loss",
                            [](const nn::Huber& p) {
                              return nn::LossRef(nn::Huber({.delta = p.delta(), .reduction = p.reduction()}));
                            }),
      loss_codec<nn::BinaryCrossentropy>("BinaryCrossentropy", "binary_crossentropy", with_options),
      loss_codec<nn::CategoricalCrossentropy>("CategoricalCrossentropy", "categorical_crossentropy", with_options),
      loss_codec<nn::SparseCategoricalCrossentropy>("SparseCategoricalCrossentropy",
                                                    "sparse_categorical_crossentropy", with_options),
      loss_codec<nn::Crossentropy>("Crossentropy", "crossentropy", with_options),
  };
  return table;
}

json loss_json(const nn::Loss& loss) {
  const std::string n = loss.name();
  for (auto& e : losses())
    if (n == e.loss_name) return json{{"class_name", e.class_name}, {"config", internal::fields_json(loss)}};
  fail("save", "loss '", n, "' has no config (not a built-in loss)");
}

nn::LossRef loss_from_json(const json& j) {
  const std::string n = j.at("class_name").get<std::string>();
  for (auto& e : losses())
    if (n == e.class_name) return e.from(j.at("config"));
  fail("load_model", "unknown loss '", n, "'");
}

// ---- metrics --------------------------------------------------------------------------------
// A compiled metric is written by name when metrics::metric_from_name(name, &loss) rebuilds it
// exactly (as every file before issue 19 held), else as {"class_name", "config"}.
std::mutex& metric_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::function<metrics::MetricRef()>>& custom_metrics() {
  static std::map<std::string, std::function<metrics::MetricRef()>> r;
  return r;
}
std::function<metrics::MetricRef()> custom_metric(const std::string& name) {
  std::lock_guard lock(metric_mutex());
  auto it = custom_metrics().find(name);
  return it == custom_metrics().end() ? nullptr : it->second;
}

// A built-in metric's config: its options struct O (which has a "name") through `fields`, the
// field list of what O holds beyond the name. Keyed by the metric's exact type, so that a
// subclass (a custom metric) is not taken for its base.
struct MetricCodec {
  const std::type_info* type = nullptr;  // the metric's exact class
  std::string class_name;
  std::function<json(const metrics::Metric&)> to;
  std::function<metrics::MetricRef(const json&)> from;
};

template <class M>
MetricCodec of_type(MetricCodec c) {
  c.type = &typeid(M);
  return c;
}
std::map<std::type_index, MetricCodec> by_type(std::vector<MetricCodec> codecs) {
  std::map<std::type_index, MetricCodec> out;
  for (auto& c : codecs) out.emplace(std::type_index(*c.type), std::move(c));
  return out;
}

template <class M, class O>
MetricCodec metric_codec(std::string class_name, void (*fields)(nn::ConfigVisitor&, O&),
                         O (*options_of)(const M&) = nullptr) {
  MetricCodec c;
  c.class_name = class_name;
  c.to = [=](const metrics::Metric& m) {
    O o = options_of ? options_of(static_cast<const M&>(m)) : O{};
    internal::JsonWriter w;
    fields(w, o);
    w.out["name"] = m.name();
    return std::move(w.out);
  };
  c.from = [=](const json& j) -> metrics::MetricRef {
    O o;
    o.name = j.at("name").get<std::string>();
    internal::JsonReader r(j, "metric " + class_name);
    fields(r, o);
    return M(std::move(o));
  };
  return of_type<M>(std::move(c));
}
template <class O>
void no_fields(nn::ConfigVisitor&, O&) {}

// Precision's and Recall's fields.
template <class O>
void threshold_and_class(nn::ConfigVisitor& v, O& o) {
  v.field("threshold", o.threshold);
  v.field("class_id", o.class_id);
}

constexpr const char* kAccuracyModes[] = {"auto", "exact", "binary", "categorical", "sparse_categorical"};

const std::map<std::type_index, MetricCodec>& metric_codecs() {
  namespace M = metrics;
  static const std::map<std::type_index, MetricCodec> table = by_type({
      metric_codec<M::Accuracy, M::AccuracyOptions>(
           "Accuracy",
           [](nn::ConfigVisitor& v, M::AccuracyOptions& o) {
             v.field("mode", o.mode, nn::EnumNames{kAccuracyModes});
             v.field("threshold", o.threshold);
           },
           [](const M::Accuracy& a) {
             auto o = a.options();
             o.mode = a.mode();  // as resolved (by the first batch or the loss)
             return o;
           }),
      metric_codec<M::BinaryAccuracy, M::BinaryAccuracyOptions>(
           "BinaryAccuracy", [](nn::ConfigVisitor& v, M::BinaryAccuracyOptions& o) { v.field("threshold", o.threshold); },
           [](const M::BinaryAccuracy& a) { return a.options(); }),
      metric_codec<M::CategoricalAccuracy, M::CategoricalAccuracyOptions>("CategoricalAccuracy", no_fields),
      metric_codec<M::SparseCategoricalAccuracy, M::SparseCategoricalAccuracyOptions>("SparseCategoricalAccuracy",
                                                                                         no_fields),
      metric_codec<M::TopKCategoricalAccuracy, M::TopKCategoricalAccuracyOptions>(
           "TopKCategoricalAccuracy", [](nn::ConfigVisitor& v, M::TopKCategoricalAccuracyOptions& o) { v.field("k", o.k); },
           [](const M::TopKCategoricalAccuracy& a) { return a.options(); }),
      metric_codec<M::SparseTopKCategoricalAccuracy, M::SparseTopKCategoricalAccuracyOptions>(
           "SparseTopKCategoricalAccuracy",
           [](nn::ConfigVisitor& v, M::SparseTopKCategoricalAccuracyOptions& o) { v.field("k", o.k); },
           [](const M::SparseTopKCategoricalAccuracy& a) { return a.options(); }),
      metric_codec<M::Precision, M::PrecisionOptions>(
           "Precision", [](nn::ConfigVisitor& v, M::PrecisionOptions& o) { threshold_and_class(v, o); },
           [](const M::Precision& p) { return M::PrecisionOptions{p.threshold(), p.class_id(), p.name()}; }),
      metric_codec<M::Recall, M::RecallOptions>(
           "Recall", [](nn::ConfigVisitor& v, M::RecallOptions& o) { threshold_and_class(v, o); },
           [](const M::Recall& p) { return M::RecallOptions{p.threshold(), p.class_id(), p.name()}; }),
      metric_codec<M::MeanSquaredError, M::MeanSquaredErrorOptions>("MeanSquaredError", no_fields),
      metric_codec<M::MeanAbsoluteError, M::MeanAbsoluteErrorOptions>("MeanAbsoluteError", no_fields),
      metric_codec<M::Mean, M::MeanOptions>("Mean", no_fields),
      of_type<M::LossMean>({.class_name = "LossMean",
                            .to = [](const M::Metric& m) {
                              return json{{"name", m.name()},
                                          {"loss", loss_json(*static_cast<const M::LossMean&>(m).loss())}};
                            },
                            .from = [](const json& c) -> M::MetricRef {
                              return M::LossMean(loss_from_json(c.at("loss")), c.at("name").get<std::string>());
                            }}),
  });
  return table;
}

// {"class_name", "config"} of a built-in metric; null for another (a custom) metric.
json metric_json(const metrics::Metric& m) {
  auto it = metric_codecs().find(std::type_index(typeid(m)));
  if (it == metric_codecs().end()) return nullptr;
  return json{{"class_name", it->second.class_name}, {"config", it->second.to(m)}};
}

metrics::MetricRef metric_from_json(const json& j) {
  const std::string cls = j.at("class_name").get<std::string>();
  for (auto& [type, codec] : metric_codecs())
    if (codec.class_name == cls) return codec.from(j.at("config"));
  fail("load_model", "unknown metric class '", cls, "'");
}

// What a file holds for one compiled metric (paired with `loss` by compile()).
json metric_entry(const metrics::Metric& m, const nn::Loss& loss) {
  const std::string n = m.name();
  json full = metric_json(m);
  if (full.is_null()) {
    if (custom_metric(n)) return n;
    fail("save", "metric '", n, "' is not a built-in metric, so a model file cannot rebuild it; "
         "register a factory with serialization::register_metric(\"", n, "\", ...) before saving "
         "(and before load_model)");
  }
  try {
    if (metric_json(*metrics::metric_from_name(n, &loss)) == full) return n;
  } catch (const Error&) {  // not a known name: written whole
  }
  return full;
}

metrics::MetricRef metric_from_entry(const json& e, const nn::Loss* loss) {
  if (e.is_object()) return metric_from_json(e);
  const std::string n = e.get<std::string>();
  if (auto f = custom_metric(n)) return f();
  try {
    return metrics::metric_from_name(n, loss);
  } catch (const Error&) {
    fail("load_model", "unknown metric '", n, "' (neither built in nor registered with "
         "serialization::register_metric)");
  }
}

// ---- weights grouped by layer ---------------------------------------------------------------
// The model's state_dict keys are "<child key>.<param>"; files key them by the child's layer
// *name* instead, so that weights move between models whose layers sit at other positions.
// A subclassed model's layers go by the name they were registered under (their attribute, as
// Keras 3's weight paths): auto-generated layer names ("dense_3") differ between two instances
// of one class in a process, registration names do not.
struct LayerWeights {
  std::string layer;  // layer name ("(model)" for the model's own weights)
  std::string key;    // registration key in the model ("0", "1", ...)
  std::map<std::string, Tensor> params;
};
constexpr const char* kOwnWeights = "(model)";

bool keyed_by_registration(const nn::Model& model) {
  return dynamic_cast<const nn::Sequential*>(&model) == nullptr && model.inputs().empty();
}

std::vector<LayerWeights> group_layers(const nn::Model& model, const char* who, bool by_registration) {
  std::vector<LayerWeights> out;
  std::map<std::string, std::size_t> by_key;
  std::set<std::string> names;
  for (auto& [key, child] : model.named_children()) {
    const std::string id = by_registration ? key : child->name();
    if (!names.insert(id).second)
      fail(who, "model '", model.name(), "' has two layers named '", id,
           "'; weights are matched by layer name, so names must be unique");
    by_key[key] = out.size();
    out.push_back({id, key, {}});
  }
  LayerWeights own{kOwnWeights, "", {}};
  for (auto& [k, t] : model.state_dict()) {
    const auto dot = k.find('.');
    auto it = dot == std::string::npos ? by_key.end() : by_key.find(k.substr(0, dot));
    if (it == by_key.end()) own.params.emplace(k, t);
    else out[it->second].params.emplace(k.substr(dot + 1), t);
  }
  std::vector<LayerWeights> kept;
  for (auto& l : out)
    if (!l.params.empty()) kept.push_back(std::move(l));
  if (!own.params.empty()) kept.push_back(std::move(own));
  return kept;
}

std::vector<LayerWeights> group_by_layer(const nn::Model& model, const char* who) {
  return group_layers(model, who, keyed_by_registration(model));
}

json weights_index(const std::vector<LayerWeights>& groups, std::map<std::string, Tensor>& tensors) {
  json idx = json::array();
  for (auto& g : groups) {
    json names = json::array();
    for (auto& [p, t] : g.params) {
      names.push_back(p);
      tensors.emplace("weights/" + g.layer + "/" + p, t);
    }
    idx.push_back(json{{"layer", g.layer}, {"key", g.key}, {"weights", names}});
  }
  return idx;
}

json parse_header(const FileContents& f, const std::string& path, const char* who) {
  // Depth first: a deeply nested header would overflow the stack of any recursive walk of it.
  limits::check_json_text(f.json, std::string(who) + ": '" + path + "': the header");
  try {
    return json::parse(f.json);
  } catch (const std::exception& e) {
    fail(who, "'", path, "': the header is not valid JSON (", limits::excerpt(e.what(), limits::kMaxDetailChars), ")");
  }
}

// Matches the file's weights to the layers in `groups` by name: the state to load, or in
// `problems` every missing, unexpected or mismatched weight.
std::map<std::string, Tensor> match_weights(const std::vector<LayerWeights>& groups, const json& index,
                                            const std::map<std::string, Tensor>& tensors, const std::string& path,
                                            const char* who, std::string& problems) {
  std::map<std::string, const LayerWeights*> want;
  for (auto& g : groups) want[g.layer] = &g;
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> seen;
  std::map<std::string, Tensor> state;
  for (auto& entry : index) {
    const std::string layer = entry.at("layer").get<std::string>();
    seen.insert(layer);
    auto it = want.find(layer);
    if (it == want.end()) {
      unexpected.push_back("'" + layer + "'");
      continue;
    }
    const LayerWeights& g = *it->second;
    std::set<std::string> file_params;
    for (auto& p : entry.at("weights")) {
      const std::string pn = p.get<std::string>();
      file_params.insert(pn);
      auto t = tensors.find("weights/" + layer + "/" + pn);
      if (t == tensors.end()) fail(who, "'", path, "': weight '", layer, "/", pn, "' is listed but absent");
      auto mine = g.params.find(pn);
      if (mine == g.params.end()) {
        mismatched.push_back("'" + layer + "/" + pn + "' is not a weight of the model's layer");
        continue;
      }
      if (mine->second.shape() != t->second.shape() || mine->second.dtype() != t->second.dtype()) {
        mismatched.push_back("'" + layer + "/" + pn + "': file has " + shape_str(t->second.shape()) + " " +
                             dtype_name(t->second.dtype()) + ", model has " +
                             shape_str(mine->second.shape()) + " " + dtype_name(mine->second.dtype()));
        continue;
      }
      state.emplace(g.key.empty() ? pn : g.key + "." + pn, t->second);
    }
    for (auto& [pn, _] : g.params)
      if (!file_params.count(pn)) mismatched.push_back("'" + layer + "/" + pn + "' is missing from the file");
  }
  for (auto& g : groups)
    if (!seen.count(g.layer)) missing.push_back("'" + g.layer + "'");
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::ostringstream os;
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      os << "; " << what << ": ";
      for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    };
    list("layers missing from the file", missing);
    list("layers in the file but not in the model", unexpected);
    list("mismatched weights", mismatched);
    problems = os.str();
  }
  return state;
}

// Loads the file's weights into the model, matched by layer name; throws naming every missing,
// unexpected or mismatched weight.
void assign_weights(nn::Model& model, const json& index, const std::map<std::string, Tensor>& tensors,
                    const std::string& path, const char* who) {
  if (!model.built())
    fail(who, "model '", model.name(), "' is not built; give it an Input or call it once before loading '",
         path, "'");
  std::string problems;
  auto state = match_weights(group_by_layer(model, who), index, tensors, path, who, problems);
  if (!problems.empty() && keyed_by_registration(model)) {
    // Version 1 named a subclassed model's layers by layer name: accept that when it fits.
    try {
      std::string by_name_problems;
      auto by_name = match_weights(group_layers(model, who, false), index, tensors, path, who, by_name_problems);
      if (by_name_problems.empty()) {
        state = std::move(by_name);
        problems.clear();
      }
    } catch (const Error&) {  // duplicate layer names: no by-name reading exists
    }
  }
  if (!problems.empty()) fail(who, "'", path, "' does not match model '", model.name(), "'", problems);
  model.load_state_dict(state);
}

// ---- the container --------------------------------------------------------------------------
constexpr char kMagic[8] = {'S', 'O', 'M', 'A', 'M', 'D', 'L', '\0'};
constexpr std::size_t kHeaderSize = 8 + 4 + 4 + 8 + 4;  // magic, version, kind, size, crc
// Refuses a declared payload, JSON text, name or tensor beyond these before allocating.
constexpr std::uint64_t kMaxJson = 64ull << 20;
constexpr std::uint32_t kMaxName = 1u << 16;

enum : std::uint32_t { kKindModel = 1, kKindWeights = 2 };
// FileContents::kind by the header's code.
const std::map<std::uint32_t, std::string>& kinds() {
  static const std::map<std::uint32_t, std::string> table = {{kKindModel, "model"}, {kKindWeights, "weights"}};
  return table;
}
// Any kind but "weights" is written as a model (as before the table).
std::uint32_t kind_code(const std::string& kind) {
  for (auto& [code, name] : kinds())
    if (name == kind) return code;
  return kKindModel;
}

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

struct Reader {
  const std::string& buf;
  std::size_t pos;
  const std::string& path;
  const char* who;
  void need(std::uint64_t n, const char* what) const {
    if (n > buf.size() - pos) fail(who, "'", path, "' is corrupt: ", what, " runs past the end of the data");
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, buf.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string bytes(std::uint64_t n, const char* what) {
    need(n, what);
    std::string s = buf.substr(pos, n);
    pos += n;
    return s;
  }
};

std::uint32_t crc_of(const char* p, std::size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = uInt(std::min<std::size_t>(n, 1u << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return std::uint32_t(c);
}

}  // namespace

// ---- public: container ----------------------------------------------------------------------
void write_file(const std::string& path, const FileContents& f) {
  std::string payload;
  put<std::uint64_t>(payload, f.json.size());
  payload += f.json;
  put<std::uint64_t>(payload, f.tensors.size());
  for (auto& [name, t0] : f.tensors) {
    Tensor t = t0.device().is_cpu() ? t0.contiguous() : t0.to(Device::cpu()).contiguous();
    put<std::uint32_t>(payload, std::uint32_t(name.size()));
    payload += name;
    put<std::uint8_t>(payload, std::uint8_t(t.dtype()));
    put<std::uint32_t>(payload, std::uint32_t(t.rank()));
    for (auto d : t.shape()) put<std::int64_t>(payload, d);
    const std::uint64_t nbytes = std::uint64_t(t.numel()) * dtype_size(t.dtype());
    put<std::uint64_t>(payload, nbytes);
    if (nbytes) payload.append(static_cast<const char*>(t.raw_data()), nbytes);
  }
  std::string header(kMagic, sizeof kMagic);
  put<std::uint32_t>(header, kFormatVersion);
  put<std::uint32_t>(header, kind_code(f.kind));
  put<std::uint64_t>(header, payload.size());
  put<std::uint32_t>(header, crc_of(payload.data(), payload.size()));

  // Atomic, durable replace (internal/atomic_file.hpp): a crash leaves the old file or the new one.
  soma::internal::AtomicFile file(path, "save");
  file.write(header);
  file.write(payload);
  file.commit();
}

FileContents read_file(const std::string& path) {
  const char* who = "load_model";
  std::ifstream is(path, std::ios::binary);
  if (!is) fail(who, "cannot open '", path, "'");
  is.seekg(0, std::ios::end);
  const std::streamoff size = is.tellg();
  is.seekg(0);
  if (size < std::streamoff(kHeaderSize)) {
    std::string head(std::size_t(std::max<std::streamoff>(size, 0)), '\0');
    is.read(head.data(), std::streamsize(head.size()));
    if (head.size() >= 8 && std::memcmp(head.data(), kMagic, 8) != 0)
      fail(who, "'", path, "' is not a soma model file (bad magic)");
    fail(who, "'", path, "' is truncated: ", size, " bytes, shorter than the ", kHeaderSize, "-byte header");
  }
  std::string head(kHeaderSize, '\0');
  is.read(head.data(), kHeaderSize);
  if (std::memcmp(head.data(), kMagic, 8) != 0) fail(who, "'", path, "' is not a soma model file (bad magic)");
  Reader h{head, 8, path, who};
  const auto version = h.get<std::uint32_t>("version");
  const auto kind = h.get<std::uint32_t>("kind");
  const auto payload_size = h.get<std::uint64_t>("size");
  const auto crc = h.get<std::uint32_t>("crc");
  if (version < kOldestFormatVersion || version > kFormatVersion)
    fail(who, "'", path, "' has format version ", version, "; this soma reads versions ", kOldestFormatVersion,
         " to ", kFormatVersion);
  if (!kinds().count(kind)) fail(who, "'", path, "' is corrupt: unknown kind ", kind);
  const std::uint64_t have = std::uint64_t(size) - kHeaderSize;
  if (payload_size > have)
    fail(who, "'", path, "' is truncated: the header announces ", payload_size, " bytes of data, the file holds ",
         have);
  if (payload_size < have) fail(who, "'", path, "' is corrupt: ", have - payload_size, " unexpected trailing bytes");
  std::string payload(payload_size, '\0');  // bounded by the real file size, checked above
  if (!is.read(payload.data(), std::streamsize(payload_size))) fail(who, "'", path, "' could not be read");
  const std::uint32_t got = crc_of(payload.data(), payload.size());
  if (got != crc) {
    std::ostringstream os;
    os << std::hex << "checksum mismatch (stored crc32 0x" << crc << ", computed 0x" << got << ")";
    fail(who, "'", path, "' is corrupt: ", os.str());
  }
  FileContents f;
  f.kind = kinds().at(kind);
  Reader r{payload, 0, path, who};
  const auto json_len = r.get<std::uint64_t>("header length");
  if (json_len > kMaxJson) fail(who, "'", path, "' is corrupt: header of ", json_len, " bytes");
  f.json = r.bytes(json_len, "the header");
  const auto count = r.get<std::uint64_t>("tensor count");
  if (count > payload_size) fail(who, "'", path, "' is corrupt: ", count, " tensors");
  for (std::uint64_t i = 0; i < count; ++i) {
    const auto len = r.get<std::uint32_t>("a tensor name length");
    if (len > kMaxName) fail(who, "'", path, "' is corrupt: tensor ", i, " has a name of ", len, " bytes");
    std::string name = r.bytes(len, "a tensor name");
    const auto code = r.get<std::uint8_t>("a dtype");
    if (code >= kNumDTypes) fail(who, "'", path, "' is corrupt: tensor '", name, "' has dtype code ", int(code));
    const auto rank = r.get<std::uint32_t>("a rank");
    if (rank > 32) fail(who, "'", path, "' is corrupt: tensor '", name, "' has rank ", rank);
    Shape s;
    std::uint64_t n = 1;
    for (std::uint32_t d = 0; d < rank; ++d) {
      const auto e = r.get<std::int64_t>("a shape");
      if (e < 0 || (e > 0 && n > payload_size / std::uint64_t(e)))
        fail(who, "'", path, "' is corrupt: tensor '", name, "' has an impossible shape");
      n *= std::uint64_t(e);
      s.push_back(e);
    }
    const auto nbytes = r.get<std::uint64_t>("a byte count");
    if (nbytes != n * dtype_size(DType(code)))
      fail(who, "'", path, "' is corrupt: tensor '", name, "' has ", nbytes, " bytes for shape ", shape_str(s));
    r.need(nbytes, "tensor data");
    Tensor t = Tensor::empty(s, DType(code));
    if (nbytes) std::memcpy(t.raw_data(), payload.data() + r.pos, nbytes);
    r.pos += nbytes;
    f.tensors.emplace(std::move(name), t);
  }
  if (r.pos != payload.size()) fail(who, "'", path, "' is corrupt: unread bytes after the last tensor");
  return f;
}

std::map<std::string, Tensor> read_state_dict(const std::string& path) {
  auto f = read_file(path);
  json doc = parse_header(f, path, "load_weights");
  std::map<std::string, Tensor> out;
  try {
    for (auto& entry : doc.at("weights")) {
      const std::string layer = entry.at("layer").get<std::string>();
      const std::string key = entry.at("key").get<std::string>();
      for (auto& p : entry.at("weights")) {
        const std::string pn = p.get<std::string>();
        auto it = f.tensors.find("weights/" + layer + "/" + pn);
        if (it == f.tensors.end()) fail("load_weights", "'", path, "': weight '", layer, "/", pn, "' is absent");
        out.emplace(key.empty() ? pn : key + "." + pn, it->second);
      }
    }
  } catch (const json::exception& e) {
    fail("load_weights", "'", path, "': malformed header (", limits::excerpt(e.what(), limits::kMaxDetailChars), ")");
  }
  return out;
}

// ---- public: configs ------------------------------------------------------------------------
namespace {
// Config text from a caller (a file, the CLI, a fuzzer): malformed JSON, a missing key or a value
// of the wrong type is a soma::Error, never a json exception escaping the API.
template <class F>
auto from_text(const char* who, const std::string& text, F decode) {
  limits::check_json_text(text, std::string(who) + ": config");
  limits::FileModelScope scope(std::string("the config given to ") + who);
  try {
    return decode(json::parse(text));
  } catch (const json::exception& e) {
    fail(who, "malformed config (", limits::excerpt(e.what(), limits::kMaxDetailChars), ")");
  }
}
}  // namespace

json internal::encode_layer(const nn::Module& layer) { return layer_json(layer); }
nn::ModuleRef internal::decode_layer(const json& j) { return layer_from_json(j); }

std::string layer_config(const nn::Module& layer) { return layer_json(layer).dump(); }
nn::ModuleRef layer_from_config(const std::string& text) {
  return from_text("layer_from_config", text, layer_from_json);
}
std::string optimizer_config(const optim::Optimizer& o) { return optimizer_json(o).dump(); }
optim::OptimizerRef optimizer_from_config(const std::string& text) {
  return from_text("optimizer_from_config", text, optimizer_from_json);
}
std::string loss_config(const nn::Loss& l) { return loss_json(l).dump(); }
nn::LossRef loss_from_config(const std::string& text) {
  return from_text("loss_from_config", text, loss_from_json);
}

namespace {
std::optional<LayerCodec> registered(const std::string& class_name) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(class_name);
  if (it == registry().end()) return std::nullopt;
  return it->second;
}

// A model at the top of a file: a built-in model kind (Sequential, Functional) as its config,
// or a subclassed model through the factory registered for its type.
json model_json(const nn::Model& model) {
  const std::string type = model.type_name();
  auto codec = registered(type);
  if (codec && codec->whole_model && codec->whole_model(model)) {
    json cfg = codec->to(model);
    cfg["name"] = model.name();
    return json{{"class_name", type}, {"config", cfg}};
  }
  // A subclassed model: its architecture is code, which only a registered factory can rebuild.
  if (!codec || codec->whole_model) {
    const bool plain = type == "Model";
    fail("save", "model '", model.name(), "' is a subclassed model (type '", type,
         "'): its architecture is C++ code, which a model file cannot hold. Use save_weights() and "
         "rebuild the model in code before load_weights(), or ",
         plain ? "override type_name() and " : "", "register a factory with serialization::register_model(\"",
         plain ? "<YourType>" : type, "\", to_config, from_config)");
  }
  return layer_json(model);
}
std::shared_ptr<nn::Model> model_from_json(const json& j) {
  const std::string cls = j.at("class_name").get<std::string>();
  const json& cfg = j.at("config");
  auto codec = registered(cls);
  if (!codec)
    fail("load_model", "model class '", cls, "' is neither built in (Sequential, Functional) nor registered; "
         "call serialization::register_model(\"", cls, "\", ...) before load_model");
  if (codec->whole_model) {
    auto model = std::dynamic_pointer_cast<nn::Model>(codec->from(cfg).ptr());
    if (cfg.contains("name")) model->set_name(cfg.at("name").get<std::string>());
    return model;
  }
  auto model = std::dynamic_pointer_cast<nn::Model>(layer_from_json(j).ptr());
  if (!model) fail("load_model", "the factory registered for '", cls, "' did not build an nn::Model");
  if (!model->built())
    fail("load_model", "the factory registered for model class '", cls,
         "' returned an unbuilt model; build it in from_config (run it once on a sample batch) so that "
         "the saved weights can be assigned");
  if (!cfg.value("trainable", true)) model->set_trainable(false);
  return model;
}
}  // namespace

std::optional<LayerFields> layer_fields(const std::string& class_name) {
  auto codec = registered(class_name);
  if (!codec || !codec->defaults) return std::nullopt;
  return LayerFields{codec->defaults().dump(), codec->required};
}

std::string model_config(const nn::Model& model) { return model_json(model).dump(); }
std::shared_ptr<nn::Model> model_from_config(const std::string& text) {
  return from_text("model_from_config", text, model_from_json);
}

void register_model(const std::string& class_name, std::function<std::string(const nn::Model&)> to_config,
                    std::function<std::shared_ptr<nn::Model>(const std::string&)> from_config) {
  register_layer(
      class_name,
      [to = std::move(to_config), class_name](const nn::Module& m) {
        auto* model = dynamic_cast<const nn::Model*>(&m);
        if (!model)
          fail("save", "'", class_name, "' is registered as a model, but layer '", m.name(), "' is not an nn::Model");
        return to(*model);
      },
      [from = std::move(from_config)](const std::string& c) { return nn::ModuleRef(from(c)); });
}

void register_metric(const std::string& name, std::function<metrics::MetricRef()> factory) {
  if (!factory) fail("register_metric", "the factory for metric '", name, "' is empty");
  std::lock_guard lock(metric_mutex());
  custom_metrics()[name] = std::move(factory);
}

std::vector<std::string> registered_layers() {
  std::lock_guard lock(registry_mutex());
  std::vector<std::string> out;
  for (auto& [n, _] : registry()) out.push_back(n);
  return out;
}

void register_layer(const std::string& class_name, std::function<std::string(const nn::Module&)> to_config,
                    std::function<nn::ModuleRef(const std::string&)> from_config) {
  std::lock_guard lock(registry_mutex());
  registry()[class_name] = {
      [to = std::move(to_config)](const nn::Module& m) { return json::parse(to(m)); },
      [from = std::move(from_config)](const json& c) { return from(c.dump()); },
      nullptr};
}

}  // namespace soma::serialization

// ---- Model::save / load_model / weights ------------------------------------------------------
namespace soma {
namespace ser = serialization;
using ser::json;

namespace model {

void Model::save(const std::string& path) const {
  json doc;
  doc["format"] = "soma-model";
  doc["model"] = ser::model_json(*this);
  std::map<std::string, Tensor> tensors;
  if (!built()) fail("save", "model '", name(), "' is not built; give it an Input or call it once before saving");
  doc["weights"] = ser::weights_index(ser::group_by_layer(*this, "save"), tensors);
  if (compiled()) {
    json c;
    c["optimizer"] = ser::optimizer_json(optimizer());
    json losses = json::array();
    for (auto& l : compiled_losses()) losses.push_back(ser::loss_json(*l));
    c["losses"] = losses;
    json metrics = json::array();
    const auto compiled_loss_list = compiled_losses();
    const auto all_metrics = compiled_metrics();
    for (std::size_t i = 0; i < all_metrics.size(); ++i) {
      json names = json::array();
      const nn::Loss& paired = *compiled_loss_list[std::min(i, compiled_loss_list.size() - 1)];
      for (auto& m : all_metrics[i]) names.push_back(ser::metric_entry(*m, paired));
      metrics.push_back(names);
    }
    c["metrics"] = metrics;
    c["loss_weights"] = compiled_loss_weights();
    doc["compile"] = c;
    // Optimiser slots are indexed by position in trainable_parameters(), which a rebuilt model
    // reproduces.
    json keys = json::array();
    for (auto& [k, t] : optimizer().state_dict(trainable_parameters())) {
      keys.push_back(k);
      tensors.emplace("optimizer/" + k, t);
    }
    doc["optimizer_state"] = keys;
  } else {
    doc["compile"] = nullptr;
  }
  // Epoch and RNG state when written by save_checkpoint (src/model/checkpoint.cpp).
  if (auto t = ser::internal::pending_training_state_json(); !t.empty()) doc["training"] = json::parse(t);
  ser::write_file(path, {"model", doc.dump(), std::move(tensors)});
}

void Model::save_weights(const std::string& path) const {
  json doc;
  doc["format"] = "soma-weights";
  std::map<std::string, Tensor> tensors;
  doc["weights"] = ser::weights_index(ser::group_by_layer(*this, "save_weights"), tensors);
  ser::write_file(path, {"weights", doc.dump(), std::move(tensors)});
}

void Model::load_weights(const std::string& path) {
  {
    std::ifstream is(path, std::ios::binary);
    char magic[8] = {};
    if (is.read(magic, 8) && std::memcmp(magic, "SOMAWTS1", 8) == 0) {  // the older format
      load_state_dict(read_weights_file(path));
      return;
    }
  }
  auto f = ser::read_file(path);
  json doc = ser::parse_header(f, path, "load_weights");
  try {
    ser::assign_weights(*this, doc.at("weights"), f.tensors, path, "load_weights");
  } catch (const json::exception& e) {
    fail("load_weights", "'", path, "': malformed header (", limits::excerpt(e.what(), limits::kMaxDetailChars), ")");
  }
}

}  // namespace model

std::shared_ptr<nn::Model> load_model(const std::string& path) {
  auto f = ser::read_file(path);
  if (f.kind != "model")
    fail("load_model", "'", path, "' holds weights only (written by save_weights); use load_weights");
  json doc = ser::parse_header(f, path, "load_model");
  limits::FileModelScope scope("'" + path + "'");
  try {
    auto model = ser::model_from_json(doc.at("model"));
    if (!model->built())
      fail("load_model", "'", path, "': the saved model has no input shape, so it cannot be rebuilt");
    ser::assign_weights(*model, doc.at("weights"), f.tensors, path, "load_model");
    const json& c = doc.at("compile");
    if (!c.is_null()) {
      std::vector<nn::LossRef> losses;
      for (auto& l : c.at("losses")) losses.push_back(ser::loss_from_json(l));
      std::vector<std::vector<metrics::MetricRef>> ms;
      for (auto& per_output : c.at("metrics")) {
        const nn::Loss* paired = losses.empty() ? nullptr : losses[std::min(ms.size(), losses.size() - 1)].get();
        ms.emplace_back();
        for (auto& m : per_output) ms.back().push_back(ser::metric_from_entry(m, paired));
      }
      model->compile(ser::optimizer_from_json(c.at("optimizer")), std::move(losses), std::move(ms),
                     {.loss_weights = c.at("loss_weights").get<std::vector<double>>()});
      std::map<std::string, Tensor> state;
      for (auto& k : doc.at("optimizer_state")) {
        const std::string key = k.get<std::string>();
        auto it = f.tensors.find("optimizer/" + key);
        if (it == f.tensors.end()) fail("load_model", "'", path, "': optimizer state '", key, "' is absent");
        state.emplace(key, it->second);
      }
      model->optimizer().load_state_dict(state, model->trainable_parameters());
    }
    return model;
  } catch (const json::exception& e) {
    fail("load_model", "'", path, "': malformed header (", limits::excerpt(e.what(), limits::kMaxDetailChars), ")");
  } catch (const Error& e) {
    // Errors from the decoders (an unknown metric, loss, optimiser, layer) name the file too.
    const std::string what = e.what();
    if (what.find("'" + path + "'") != std::string::npos) throw;
    const std::string prefix = "load_model: ";
    fail("load_model", "'", path, "': ", what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
  }
}

}  // namespace soma
