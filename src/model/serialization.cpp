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
#include "soma/nn/conv.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/nn/normalization.hpp"
#include "soma/nn/preprocessing.hpp"
#include "soma/nn/recurrent.hpp"
#include "soma/optim/optimizers.hpp"

namespace soma::serialization {

using json = nlohmann::json;
using internal::int_of;

namespace {

// ---- small value conversions ----------------------------------------------------------------
DType dtype_from(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == dtype_name(DType(i))) return DType(i);
  fail("load_model", "unknown dtype '", s, "'");
}

json size2(Size2 s) { return json::array({s.h, s.w}); }
Size2 size2_from(const json& j) {
  if (j.is_number_integer()) return Size2(int_of(j));
  return Size2(int_of(j.at(0)), int_of(j.at(1)));
}

json padding(const Padding& p) {
  if (p.mode() == Padding::Mode::explicit_) {
    auto& a = p.pads();
    return json::array({a[0], a[1], a[2], a[3]});
  }
  return p.str();
}
Padding padding_from(const json& j) {
  if (j.is_string()) return Padding(j.get<std::string>());
  return Padding(int_of(j.at(0)), int_of(j.at(1)),
                 int_of(j.at(2)), int_of(j.at(3)));
}

json shape(const Shape& s) { return json(std::vector<std::int64_t>(s.begin(), s.end())); }
Shape shape_from(const json& j) {
  Shape s;
  for (auto& d : j) s.push_back(int_of(d));
  return s;
}

// Initialisers keep only their name: the weights are restored from the file, so their
// parameters matter only if the layer is re-initialised (documented in model-format.md).
json initializer(const nn::Initializer& i) { return json{{"class_name", i.name}}; }
nn::Initializer initializer_from(const json& j) {
  const std::string n = j.is_string() ? j.get<std::string>() : j.at("class_name").get<std::string>();
  namespace I = nn::init;
  if (n == "zeros") return I::zeros();
  if (n == "ones") return I::ones();
  if (n == "constant") return I::constant(0.0);
  if (n == "random_normal") return I::random_normal();
  if (n == "random_uniform") return I::random_uniform();
  if (n == "truncated_normal") return I::truncated_normal();
  if (n == "glorot_uniform") return I::glorot_uniform();
  if (n == "glorot_normal") return I::glorot_normal();
  if (n == "he_uniform") return I::he_uniform();
  if (n == "he_normal") return I::he_normal();
  if (n == "lecun_uniform") return I::lecun_uniform();
  if (n == "lecun_normal") return I::lecun_normal();
  if (n == "orthogonal") return I::orthogonal();
  return I::zeros();  // unknown (custom) initialiser: the loaded weights replace its values
}

json regularizer(const nn::Regularizer& r) {
  if (!r.active()) return nullptr;
  return json{{"l1", r.l1}, {"l2", r.l2}};
}
nn::Regularizer regularizer_from(const json& j) {
  if (j.is_null()) return {};
  return {j.value("l1", 0.0), j.value("l2", 0.0)};
}

json activation(const nn::Activation& a) { return a.is_linear() ? std::string("linear") : a.name; }
nn::Activation activation_from(const json& j) { return nn::Activation(j.get<std::string>()); }

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
template <class T>
std::optional<T> opt_from(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return internal::int_of<T>(j.at(key));
  else return j.at(key).get<T>();
}

// ---- layer registry -------------------------------------------------------------------------
struct LayerCodec {
  std::function<json(const nn::Module&)> to;
  std::function<nn::ModuleRef(const json&)> from;
};

json sequential_config(const nn::Sequential& s);
std::shared_ptr<nn::Sequential> sequential_from(const json& cfg);

template <class L>
const L& as(const nn::Module& m) {
  return dynamic_cast<const L&>(m);
}

std::map<std::string, LayerCodec> builtin_codecs() {
  std::map<std::string, LayerCodec> r;
  r["Dense"] = {[](const nn::Module& m) {
                  auto& l = as<nn::Dense>(m);
                  auto& o = l.options();
                  return json{{"units", l.units()},
                              {"activation", activation(l.activation())},
                              {"use_bias", o.use_bias},
                              {"kernel_initializer", initializer(o.kernel_initializer)},
                              {"bias_initializer", initializer(o.bias_initializer)},
                              {"kernel_regularizer", regularizer(o.kernel_regularizer)},
                              {"bias_regularizer", regularizer(o.bias_regularizer)},
                              {"dtype", dtype_name(o.dtype)}};
                },
                [](const json& c) -> nn::ModuleRef {
                  return nn::Dense(int_of(c.at("units")), activation_from(c.at("activation")),
                                   {.use_bias = c.at("use_bias").get<bool>(),
                                    .kernel_initializer = initializer_from(c.at("kernel_initializer")),
                                    .bias_initializer = initializer_from(c.at("bias_initializer")),
                                    .kernel_regularizer = regularizer_from(c.at("kernel_regularizer")),
                                    .bias_regularizer = regularizer_from(c.at("bias_regularizer")),
                                    .dtype = dtype_from(c.at("dtype"))});
                }};
  r["Conv2D"] = {[](const nn::Module& m) {
                   auto& l = as<nn::Conv2D>(m);
                   auto& o = l.options();
                   return json{{"filters", l.filters()},
                               {"kernel_size", size2(l.kernel_size())},
                               {"strides", size2(o.strides)},
                               {"padding", padding(o.padding)},
                               {"dilation_rate", size2(o.dilation_rate)},
                               {"groups", o.groups},
                               {"activation", activation(o.activation)},
                               {"use_bias", o.use_bias},
                               {"kernel_initializer", initializer(o.kernel_initializer)},
                               {"bias_initializer", initializer(o.bias_initializer)},
                               {"kernel_regularizer", regularizer(o.kernel_regularizer)},
                               {"bias_regularizer", regularizer(o.bias_regularizer)},
                               {"dtype", dtype_name(o.dtype)}};
                 },
                 [](const json& c) -> nn::ModuleRef {
                   return nn::Conv2D(int_of(c.at("filters")), size2_from(c.at("kernel_size")),
                                     {.strides = size2_from(c.at("strides")),
                                      .padding = padding_from(c.at("padding")),
                                      .dilation_rate = size2_from(c.at("dilation_rate")),
                                      .groups = int_of(c.at("groups")),
                                      .activation = activation_from(c.at("activation")),
                                      .use_bias = c.at("use_bias").get<bool>(),
                                      .kernel_initializer = initializer_from(c.at("kernel_initializer")),
                                      .bias_initializer = initializer_from(c.at("bias_initializer")),
                                      .kernel_regularizer = regularizer_from(c.at("kernel_regularizer")),
                                      .bias_regularizer = regularizer_from(c.at("bias_regularizer")),
                                      .dtype = dtype_from(c.at("dtype"))});
                 }};
  r["Conv2DTranspose"] = {
      [](const nn::Module& m) {
        auto& l = as<nn::Conv2DTranspose>(m);
        auto& o = l.options();
        return json{{"filters", l.filters()},
                    {"kernel_size", size2(l.kernel_size())},
                    {"strides", size2(o.strides)},
                    {"padding", padding(o.padding)},
                    {"output_padding", o.output_padding ? size2(*o.output_padding) : json(nullptr)},
                    {"dilation_rate", size2(o.dilation_rate)},
                    {"groups", o.groups},
                    {"activation", activation(o.activation)},
                    {"use_bias", o.use_bias},
                    {"kernel_initializer", initializer(o.kernel_initializer)},
                    {"bias_initializer", initializer(o.bias_initializer)},
                    {"kernel_regularizer", regularizer(o.kernel_regularizer)},
                    {"bias_regularizer", regularizer(o.bias_regularizer)},
                    {"dtype", dtype_name(o.dtype)}};
      },
      [](const json& c) -> nn::ModuleRef {
        std::optional<Size2> op;
        if (!c.at("output_padding").is_null()) op = size2_from(c.at("output_padding"));
        return nn::Conv2DTranspose(int_of(c.at("filters")), size2_from(c.at("kernel_size")),
                                   {.strides = size2_from(c.at("strides")),
                                    .padding = padding_from(c.at("padding")),
                                    .output_padding = op,
                                    .dilation_rate = size2_from(c.at("dilation_rate")),
                                    .groups = int_of(c.at("groups")),
                                    .activation = activation_from(c.at("activation")),
                                    .use_bias = c.at("use_bias").get<bool>(),
                                    .kernel_initializer = initializer_from(c.at("kernel_initializer")),
                                    .bias_initializer = initializer_from(c.at("bias_initializer")),
                                    .kernel_regularizer = regularizer_from(c.at("kernel_regularizer")),
                                    .bias_regularizer = regularizer_from(c.at("bias_regularizer")),
                                    .dtype = dtype_from(c.at("dtype"))});
      }};
  auto pool_to = [](auto* tag) {
    return [](const nn::Module& m) {
      auto& l = as<std::remove_pointer_t<decltype(tag)>>(m);
      return json{{"pool_size", size2(l.pool_size())},
                  {"strides", size2(l.strides())},
                  {"padding", padding(l.padding())}};
    };
  };
  r["MaxPool2D"] = {pool_to((nn::MaxPool2D*)nullptr), [](const json& c) -> nn::ModuleRef {
                      return nn::MaxPool2D(size2_from(c.at("pool_size")), size2_from(c.at("strides")),
                                           padding_from(c.at("padding")));
                    }};
  r["AvgPool2D"] = {pool_to((nn::AvgPool2D*)nullptr), [](const json& c) -> nn::ModuleRef {
                      return nn::AvgPool2D(size2_from(c.at("pool_size")), size2_from(c.at("strides")),
                                           padding_from(c.at("padding")));
                    }};
  r["GlobalAveragePooling2D"] = {
      [](const nn::Module& m) { return json{{"keepdims", as<nn::GlobalAveragePooling2D>(m).keepdims()}}; },
      [](const json& c) -> nn::ModuleRef { return nn::GlobalAveragePooling2D(c.value("keepdims", false)); }};
  r["Flatten"] = {[](const nn::Module&) { return json::object(); },
                  [](const json&) -> nn::ModuleRef { return nn::Flatten(); }};
  r["Reshape"] = {[](const nn::Module& m) { return json{{"target_shape", shape(as<nn::Reshape>(m).target_shape())}}; },
                  [](const json& c) -> nn::ModuleRef { return nn::Reshape(shape_from(c.at("target_shape"))); }};
  r["Dropout"] = {[](const nn::Module& m) {
                    auto& l = as<nn::Dropout>(m);
                    return json{{"rate", l.rate()}, {"seed", opt(l.seed())}};
                  },
                  [](const json& c) -> nn::ModuleRef {
                    return nn::Dropout(c.at("rate").get<double>(), opt_from<std::uint64_t>(c, "seed"));
                  }};
  r["Activation"] = {[](const nn::Module& m) { return json{{"activation", activation(as<nn::ActivationLayer>(m).activation())}}; },
                     [](const json& c) -> nn::ModuleRef { return nn::ActivationLayer(activation_from(c.at("activation"))); }};
  auto empty = [](const nn::Module&) { return json::object(); };
  r["ReLU"] = {empty, [](const json&) -> nn::ModuleRef { return nn::ReLU(); }};
  r["Sigmoid"] = {empty, [](const json&) -> nn::ModuleRef { return nn::Sigmoid(); }};
  r["Tanh"] = {empty, [](const json&) -> nn::ModuleRef { return nn::Tanh(); }};
  r["Step"] = {empty, [](const json&) -> nn::ModuleRef { return nn::Step(); }};
  r["LeakyReLU"] = {[](const nn::Module& m) { return json{{"alpha", as<nn::LeakyReLU>(m).alpha()}}; },
                    [](const json& c) -> nn::ModuleRef { return nn::LeakyReLU(c.at("alpha").get<double>()); }};
  r["ELU"] = {[](const nn::Module& m) { return json{{"alpha", as<nn::ELU>(m).alpha()}}; },
              [](const json& c) -> nn::ModuleRef { return nn::ELU(c.at("alpha").get<double>()); }};
  r["GELU"] = {[](const nn::Module& m) { return json{{"approximate", as<nn::GELU>(m).approximate()}}; },
               [](const json& c) -> nn::ModuleRef { return nn::GELU(c.at("approximate").get<bool>()); }};
  r["Softmax"] = {[](const nn::Module& m) { return json{{"axis", as<nn::Softmax>(m).axis()}}; },
                  [](const json& c) -> nn::ModuleRef { return nn::Softmax(int_of(c.at("axis"))); }};
  r["Embedding"] = {[](const nn::Module& m) {
                      auto& l = as<nn::Embedding>(m);
                      auto& o = l.options();
                      return json{{"input_dim", l.input_dim()},
                                  {"output_dim", l.output_dim()},
                                  {"embeddings_initializer", initializer(o.embeddings_initializer)},
                                  {"embeddings_regularizer", regularizer(o.embeddings_regularizer)},
                                  {"dtype", dtype_name(o.dtype)}};
                    },
                    [](const json& c) -> nn::ModuleRef {
                      return nn::Embedding(
                          int_of(c.at("input_dim")), int_of(c.at("output_dim")),
                          {.embeddings_initializer = initializer_from(c.at("embeddings_initializer")),
                           .embeddings_regularizer = regularizer_from(c.at("embeddings_regularizer")),
                           .dtype = dtype_from(c.at("dtype"))});
                    }};
  r["BatchNormalization"] = {
      [](const nn::Module& m) {
        auto& o = as<nn::BatchNormalization>(m).options();
        return json{{"axis", o.axis},
                    {"momentum", o.momentum},
                    {"epsilon", o.epsilon},
                    {"center", o.center},
                    {"scale", o.scale},
                    {"beta_initializer", initializer(o.beta_initializer)},
                    {"gamma_initializer", initializer(o.gamma_initializer)},
                    {"moving_mean_initializer", initializer(o.moving_mean_initializer)},
                    {"moving_variance_initializer", initializer(o.moving_variance_initializer)},
                    {"beta_regularizer", regularizer(o.beta_regularizer)},
                    {"gamma_regularizer", regularizer(o.gamma_regularizer)},
                    {"dtype", dtype_name(o.dtype)}};
      },
      [](const json& c) -> nn::ModuleRef {
        return nn::BatchNormalization(
            {.axis = int_of(c.at("axis")),
             .momentum = c.at("momentum").get<double>(),
             .epsilon = c.at("epsilon").get<double>(),
             .center = c.at("center").get<bool>(),
             .scale = c.at("scale").get<bool>(),
             .beta_initializer = initializer_from(c.at("beta_initializer")),
             .gamma_initializer = initializer_from(c.at("gamma_initializer")),
             .moving_mean_initializer = initializer_from(c.at("moving_mean_initializer")),
             .moving_variance_initializer = initializer_from(c.at("moving_variance_initializer")),
             .beta_regularizer = regularizer_from(c.at("beta_regularizer")),
             .gamma_regularizer = regularizer_from(c.at("gamma_regularizer")),
             .dtype = dtype_from(c.at("dtype"))});
      }};
  r["LayerNormalization"] = {
      [](const nn::Module& m) {
        auto& o = as<nn::LayerNormalization>(m).options();
        return json{{"axis", std::vector<std::int64_t>(o.axis.begin(), o.axis.end())},
                    {"epsilon", o.epsilon},
                    {"center", o.center},
                    {"scale", o.scale},
                    {"beta_initializer", initializer(o.beta_initializer)},
                    {"gamma_initializer", initializer(o.gamma_initializer)},
                    {"beta_regularizer", regularizer(o.beta_regularizer)},
                    {"gamma_regularizer", regularizer(o.gamma_regularizer)},
                    {"dtype", dtype_name(o.dtype)}};
      },
      [](const json& c) -> nn::ModuleRef {
        nn::LayerNormOptions o;
        o.axis.clear();
        for (auto& a : c.at("axis")) o.axis.push_back(int_of(a));
        o.epsilon = c.at("epsilon").get<double>();
        o.center = c.at("center").get<bool>();
        o.scale = c.at("scale").get<bool>();
        o.beta_initializer = initializer_from(c.at("beta_initializer"));
        o.gamma_initializer = initializer_from(c.at("gamma_initializer"));
        o.beta_regularizer = regularizer_from(c.at("beta_regularizer"));
        o.gamma_regularizer = regularizer_from(c.at("gamma_regularizer"));
        o.dtype = dtype_from(c.at("dtype"));
        return nn::LayerNormalization(std::move(o));
      }};
  // Adapted statistics are weights (in the weights section); given ones are configuration.
  r["Normalization"] = {
      [](const nn::Module& m) {
        auto& o = as<nn::Normalization>(m).options();
        json axis = o.axis ? json(std::vector<std::int64_t>(o.axis->begin(), o.axis->end()))
                           : json(nullptr);
        return json{{"axis", axis},
                    {"mean", o.mean.empty() ? json(nullptr) : json(o.mean)},
                    {"variance", o.variance.empty() ? json(nullptr) : json(o.variance)},
                    {"invert", o.invert},
                    {"dtype", dtype_name(o.dtype)}};
      },
      [](const json& c) -> nn::ModuleRef {
        nn::NormalizationOptions o;
        const json& axis = c.at("axis");  // Keras writes an int, a list or null
        if (axis.is_null()) o.axis = std::nullopt;
        else if (axis.is_array()) {
          o.axis = Axes{};
          for (auto& a : axis) o.axis->push_back(int_of(a));
        } else {
          o.axis = Axes{int_of(axis)};
        }
        if (c.contains("mean") && !c.at("mean").is_null())
          o.mean = c.at("mean").get<std::vector<double>>();
        if (c.contains("variance") && !c.at("variance").is_null())
          o.variance = c.at("variance").get<std::vector<double>>();
        o.invert = c.value("invert", false);
        if (c.contains("dtype") && c.at("dtype").is_string()) o.dtype = dtype_from(c.at("dtype"));
        return nn::Normalization(std::move(o));
      }};
  // Recurrent layers share most fields.
  auto rnn_common = [](const auto& o, std::int64_t units) {
    return json{{"units", units},
                {"activation", activation(o.activation)},
                {"use_bias", o.use_bias},
                {"kernel_initializer", initializer(o.kernel_initializer)},
                {"recurrent_initializer", initializer(o.recurrent_initializer)},
                {"bias_initializer", initializer(o.bias_initializer)},
                {"kernel_regularizer", regularizer(o.kernel_regularizer)},
                {"recurrent_regularizer", regularizer(o.recurrent_regularizer)},
                {"bias_regularizer", regularizer(o.bias_regularizer)},
                {"return_sequences", o.return_sequences},
                {"return_state", o.return_state},
                {"go_backwards", o.go_backwards},
                {"dtype", dtype_name(o.dtype)}};
  };
  auto rnn_common_from = [](auto& o, const json& c) {
    o.activation = activation_from(c.at("activation"));
    o.use_bias = c.at("use_bias").get<bool>();
    o.kernel_initializer = initializer_from(c.at("kernel_initializer"));
    o.recurrent_initializer = initializer_from(c.at("recurrent_initializer"));
    o.bias_initializer = initializer_from(c.at("bias_initializer"));
    o.kernel_regularizer = regularizer_from(c.at("kernel_regularizer"));
    o.recurrent_regularizer = regularizer_from(c.at("recurrent_regularizer"));
    o.bias_regularizer = regularizer_from(c.at("bias_regularizer"));
    o.return_sequences = c.at("return_sequences").get<bool>();
    o.return_state = c.at("return_state").get<bool>();
    o.go_backwards = c.at("go_backwards").get<bool>();
    o.dtype = dtype_from(c.at("dtype"));
  };
  r["SimpleRNN"] = {[=](const nn::Module& m) {
                      auto& l = as<nn::SimpleRNN>(m);
                      return rnn_common(l.options(), l.units());
                    },
                    [=](const json& c) -> nn::ModuleRef {
                      nn::SimpleRNNOptions o;
                      rnn_common_from(o, c);
                      return nn::SimpleRNN(int_of(c.at("units")), std::move(o));
                    }};
  r["LSTM"] = {[=](const nn::Module& m) {
                 auto& l = as<nn::LSTM>(m);
                 json j = rnn_common(l.options(), l.units());
                 j["recurrent_activation"] = activation(l.options().recurrent_activation);
                 j["unit_forget_bias"] = l.options().unit_forget_bias;
                 return j;
               },
               [=](const json& c) -> nn::ModuleRef {
                 nn::LSTMOptions o;
                 rnn_common_from(o, c);
                 o.recurrent_activation = activation_from(c.at("recurrent_activation"));
                 o.unit_forget_bias = c.at("unit_forget_bias").get<bool>();
                 return nn::LSTM(int_of(c.at("units")), std::move(o));
               }};
  r["GRU"] = {[=](const nn::Module& m) {
                auto& l = as<nn::GRU>(m);
                json j = rnn_common(l.options(), l.units());
                j["recurrent_activation"] = activation(l.options().recurrent_activation);
                j["reset_after"] = l.options().reset_after;
                return j;
              },
              [=](const json& c) -> nn::ModuleRef {
                nn::GRUOptions o;
                rnn_common_from(o, c);
                o.recurrent_activation = activation_from(c.at("recurrent_activation"));
                o.reset_after = c.at("reset_after").get<bool>();
                return nn::GRU(int_of(c.at("units")), std::move(o));
              }};
  r["Sequential"] = {[](const nn::Module& m) { return sequential_config(as<nn::Sequential>(m)); },
                     [](const json& c) -> nn::ModuleRef { return nn::ModuleRef(sequential_from(c)); }};
  // Merge layers (functional models).
  r["Add"] = {empty, [](const json&) -> nn::ModuleRef { return nn::Add(); }};
  r["Multiply"] = {empty, [](const json&) -> nn::ModuleRef { return nn::Multiply(); }};
  r["Average"] = {empty, [](const json&) -> nn::ModuleRef { return nn::Average(); }};
  r["Concatenate"] = {[](const nn::Module& m) { return json{{"axis", as<nn::Concatenate>(m).axis()}}; },
                      [](const json& c) -> nn::ModuleRef { return nn::Concatenate(c.contains("axis") ? int_of(c.at("axis")) : std::int64_t(-1)); }};
  r["Functional"] = {[](const nn::Module& m) { return internal::functional_config(as<nn::Model>(m)); },
                     [](const json& c) -> nn::ModuleRef { return nn::ModuleRef(internal::functional_from(c)); }};
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
  if (s.input_shape()) cfg["input_shape"] = shape(*s.input_shape());  // batch axis included (-1)
  else cfg["input_shape"] = nullptr;
  return cfg;
}

std::shared_ptr<nn::Sequential> sequential_from(const json& cfg) {
  auto s = std::make_shared<nn::Sequential>();
  if (!cfg.at("input_shape").is_null()) {
    Shape in = shape_from(cfg.at("input_shape"));
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
template <class O>
json common_opt(const O& o, const optim::Optimizer& optimizer) {
  json j;
  // The optimiser's own rate (set_schedule / set_learning_rate may have replaced the options'):
  // a schedule as its config (it follows the saved "iterations"), else the constant.
  const optim::LearningRate& lr = optimizer.common_options().learning_rate;
  if (lr.is_schedule()) j["learning_rate"] = internal::schedule_json(*lr.schedule());
  else j["learning_rate"] = optimizer.learning_rate();
  j["weight_decay"] = o.weight_decay;
  j["clipnorm"] = opt(o.clipnorm);
  j["clipvalue"] = opt(o.clipvalue);
  j["global_clipnorm"] = opt(o.global_clipnorm);
  return j;
}
template <class O>
void common_from(O& o, const json& c) {
  // Version 1 stored a schedule as its value at save time (with "learning_rate_was_schedule").
  const json& lr = c.at("learning_rate");
  if (lr.is_object()) o.learning_rate = internal::schedule_from_json(lr);
  else o.learning_rate = lr.get<double>();
  o.weight_decay = c.at("weight_decay").get<double>();
  o.clipnorm = opt_from<double>(c, "clipnorm");
  o.clipvalue = opt_from<double>(c, "clipvalue");
  o.global_clipnorm = opt_from<double>(c, "global_clipnorm");
}

json optimizer_json(const optim::Optimizer& opt) {
  const std::string n = opt.name();
  json c;
  if (n == "SGD") {
    auto& o = dynamic_cast<const optim::SGD&>(opt).options();
    c = common_opt(o, opt);
    c["momentum"] = o.momentum;
    c["nesterov"] = o.nesterov;
  } else if (n == "AdamW") {
    auto& o = dynamic_cast<const optim::AdamW&>(opt).options();
    c = common_opt(o, opt);
    c["beta_1"] = o.beta_1;
    c["beta_2"] = o.beta_2;
    c["epsilon"] = o.epsilon;
    c["amsgrad"] = o.amsgrad;
  } else if (n == "Adam") {
    auto& o = dynamic_cast<const optim::Adam&>(opt).options();
    c = common_opt(o, opt);
    c["beta_1"] = o.beta_1;
    c["beta_2"] = o.beta_2;
    c["epsilon"] = o.epsilon;
    c["amsgrad"] = o.amsgrad;
  } else if (n == "Nadam") {
    auto& o = dynamic_cast<const optim::Nadam&>(opt).options();
    c = common_opt(o, opt);
    c["beta_1"] = o.beta_1;
    c["beta_2"] = o.beta_2;
    c["epsilon"] = o.epsilon;
  } else if (n == "RMSprop") {
    auto& o = dynamic_cast<const optim::RMSprop&>(opt).options();
    c = common_opt(o, opt);
    c["rho"] = o.rho;
    c["momentum"] = o.momentum;
    c["epsilon"] = o.epsilon;
    c["centered"] = o.centered;
  } else if (n == "Adagrad") {
    auto& o = dynamic_cast<const optim::Adagrad&>(opt).options();
    c = common_opt(o, opt);
    c["initial_accumulator_value"] = o.initial_accumulator_value;
    c["epsilon"] = o.epsilon;
  } else {
    fail("save", "optimizer '", n, "' has no config (not a built-in optimizer)");
  }
  return json{{"class_name", n}, {"config", c}};
}

optim::OptimizerRef optimizer_from_json(const json& j) {
  const std::string n = j.at("class_name").get<std::string>();
  const json& c = j.at("config");
  if (n == "SGD") {
    optim::SGDOptions o;
    common_from(o, c);
    o.momentum = c.at("momentum").get<double>();
    o.nesterov = c.at("nesterov").get<bool>();
    return optim::SGD(o);
  }
  if (n == "Adam" || n == "AdamW") {
    auto fill = [&](auto& o) {
      common_from(o, c);
      o.beta_1 = c.at("beta_1").get<double>();
      o.beta_2 = c.at("beta_2").get<double>();
      o.epsilon = c.at("epsilon").get<double>();
      o.amsgrad = c.at("amsgrad").get<bool>();
    };
    if (n == "Adam") {
      optim::AdamOptions o;
      fill(o);
      return optim::Adam(o);
    }
    optim::AdamWOptions o;
    fill(o);
    return optim::AdamW(o);
  }
  if (n == "Nadam") {
    optim::NadamOptions o;
    common_from(o, c);
    o.beta_1 = c.at("beta_1").get<double>();
    o.beta_2 = c.at("beta_2").get<double>();
    o.epsilon = c.at("epsilon").get<double>();
    return optim::Nadam(o);
  }
  if (n == "RMSprop") {
    optim::RMSpropOptions o;
    common_from(o, c);
    o.rho = c.at("rho").get<double>();
    o.momentum = c.at("momentum").get<double>();
    o.epsilon = c.at("epsilon").get<double>();
    o.centered = c.at("centered").get<bool>();
    return optim::RMSprop(o);
  }
  if (n == "Adagrad") {
    optim::AdagradOptions o;
    common_from(o, c);
    o.initial_accumulator_value = c.at("initial_accumulator_value").get<double>();
    o.epsilon = c.at("epsilon").get<double>();
    return optim::Adagrad(o);
  }
  fail("load_model", "unknown optimizer '", n, "'");
}

const char* reduction_name(nn::Reduction r) {
  switch (r) {
    case nn::Reduction::Sum: return "sum";
    case nn::Reduction::None: return "none";
    default: return "sum_over_batch_size";
  }
}
nn::Reduction reduction_from(const json& c) {
  const std::string s = c.value("reduction", std::string("sum_over_batch_size"));
  if (s == "sum") return nn::Reduction::Sum;
  if (s == "none") return nn::Reduction::None;
  return nn::Reduction::SumOverBatchSize;
}

json loss_json(const nn::Loss& loss) {
  const std::string n = loss.name();
  json c{{"reduction", reduction_name(loss.reduction())}};
  std::string cls;
  if (n == "mean_squared_error") {
    cls = "MeanSquaredError";
  } else if (n == "mean_absolute_error") {
    cls = "MeanAbsoluteError";
  } else if (n == "huber_loss") {
    cls = "Huber";
    c["delta"] = dynamic_cast<const nn::Huber&>(loss).delta();
  } else if (n == "binary_crossentropy") {
    cls = "BinaryCrossentropy";
    auto& o = dynamic_cast<const nn::BinaryCrossentropy&>(loss).options();
    c["from_logits"] = o.from_logits;
    c["label_smoothing"] = o.label_smoothing;
  } else if (n == "categorical_crossentropy") {
    cls = "CategoricalCrossentropy";
    auto& o = dynamic_cast<const nn::CategoricalCrossentropy&>(loss).options();
    c["from_logits"] = o.from_logits;
    c["label_smoothing"] = o.label_smoothing;
    c["axis"] = o.axis;
  } else if (n == "sparse_categorical_crossentropy") {
    cls = "SparseCategoricalCrossentropy";
    c["from_logits"] = dynamic_cast<const nn::SparseCategoricalCrossentropy&>(loss).options().from_logits;
  } else if (n == "crossentropy") {
    cls = "Crossentropy";
    c["from_logits"] = dynamic_cast<const nn::Crossentropy&>(loss).options().from_logits;
  } else {
    fail("save", "loss '", n, "' has no config (not a built-in loss)");
  }
  return json{{"class_name", cls}, {"config", c}};
}

nn::LossRef loss_from_json(const json& j) {
  const std::string n = j.at("class_name").get<std::string>();
  const json& c = j.at("config");
  const nn::Reduction r = reduction_from(c);
  if (n == "MeanSquaredError") return nn::MeanSquaredError({.reduction = r});
  if (n == "MeanAbsoluteError") return nn::MeanAbsoluteError({.reduction = r});
  if (n == "Huber") return nn::Huber({.delta = c.at("delta").get<double>(), .reduction = r});
  if (n == "BinaryCrossentropy")
    return nn::BinaryCrossentropy({.from_logits = c.at("from_logits").get<bool>(),
                                   .label_smoothing = c.at("label_smoothing").get<double>(),
                                   .reduction = r});
  if (n == "CategoricalCrossentropy")
    return nn::CategoricalCrossentropy({.from_logits = c.at("from_logits").get<bool>(),
                                        .label_smoothing = c.at("label_smoothing").get<double>(),
                                        .axis = int_of(c.at("axis")),
                                        .reduction = r});
  if (n == "SparseCategoricalCrossentropy")
    return nn::SparseCategoricalCrossentropy({.from_logits = c.at("from_logits").get<bool>(), .reduction = r});
  if (n == "Crossentropy") return nn::Crossentropy({.from_logits = c.at("from_logits").get<bool>(), .reduction = r});
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

const char* accuracy_mode_name(metrics::AccuracyMode m) {
  switch (m) {
    case metrics::AccuracyMode::Exact: return "exact";
    case metrics::AccuracyMode::Binary: return "binary";
    case metrics::AccuracyMode::Categorical: return "categorical";
    case metrics::AccuracyMode::SparseCategorical: return "sparse_categorical";
    default: return "auto";
  }
}
metrics::AccuracyMode accuracy_mode_from(const std::string& s) {
  if (s == "exact") return metrics::AccuracyMode::Exact;
  if (s == "binary") return metrics::AccuracyMode::Binary;
  if (s == "categorical") return metrics::AccuracyMode::Categorical;
  if (s == "sparse_categorical") return metrics::AccuracyMode::SparseCategorical;
  if (s == "auto") return metrics::AccuracyMode::Auto;
  fail("load_model", "unknown accuracy mode '", s, "'");
}

// {"class_name", "config"} of a built-in metric; null for another (a custom) metric.
json metric_json(const metrics::Metric& m) {
  namespace M = metrics;
  const auto& t = typeid(m);
  json c{{"name", m.name()}};
  std::string cls;
  if (t == typeid(M::Accuracy)) {
    auto& a = dynamic_cast<const M::Accuracy&>(m);
    cls = "Accuracy";
    c["mode"] = accuracy_mode_name(a.mode());
    c["threshold"] = a.options().threshold;
  } else if (t == typeid(M::BinaryAccuracy)) {
    cls = "BinaryAccuracy";
    c["threshold"] = dynamic_cast<const M::BinaryAccuracy&>(m).options().threshold;
  } else if (t == typeid(M::CategoricalAccuracy)) {
    cls = "CategoricalAccuracy";
  } else if (t == typeid(M::SparseCategoricalAccuracy)) {
    cls = "SparseCategoricalAccuracy";
  } else if (t == typeid(M::TopKCategoricalAccuracy)) {
    cls = "TopKCategoricalAccuracy";
    c["k"] = dynamic_cast<const M::TopKCategoricalAccuracy&>(m).options().k;
  } else if (t == typeid(M::SparseTopKCategoricalAccuracy)) {
    cls = "SparseTopKCategoricalAccuracy";
    c["k"] = dynamic_cast<const M::SparseTopKCategoricalAccuracy&>(m).options().k;
  } else if (t == typeid(M::Precision) || t == typeid(M::Recall)) {
    auto& p = dynamic_cast<const M::ConfusionCounts&>(m);
    cls = t == typeid(M::Precision) ? "Precision" : "Recall";
    c["threshold"] = p.threshold();
    c["class_id"] = opt(p.class_id());
  } else if (t == typeid(M::MeanSquaredError)) {
    cls = "MeanSquaredError";
  } else if (t == typeid(M::MeanAbsoluteError)) {
    cls = "MeanAbsoluteError";
  } else if (t == typeid(M::Mean)) {
    cls = "Mean";
  } else if (t == typeid(M::LossMean)) {
    cls = "LossMean";
    c["loss"] = loss_json(*dynamic_cast<const M::LossMean&>(m).loss());
  } else {
    return nullptr;
  }
  return json{{"class_name", cls}, {"config", c}};
}

metrics::MetricRef metric_from_json(const json& j) {
  namespace M = metrics;
  const std::string cls = j.at("class_name").get<std::string>();
  const json& c = j.at("config");
  const std::string name = c.at("name").get<std::string>();
  if (cls == "Accuracy")
    return M::Accuracy({.mode = accuracy_mode_from(c.at("mode").get<std::string>()),
                        .threshold = c.at("threshold").get<double>(),
                        .name = name});
  if (cls == "BinaryAccuracy") return M::BinaryAccuracy({.threshold = c.at("threshold").get<double>(), .name = name});
  if (cls == "CategoricalAccuracy") return M::CategoricalAccuracy({.name = name});
  if (cls == "SparseCategoricalAccuracy") return M::SparseCategoricalAccuracy({.name = name});
  if (cls == "TopKCategoricalAccuracy") return M::TopKCategoricalAccuracy({.k = int_of<int>(c.at("k")), .name = name});
  if (cls == "SparseTopKCategoricalAccuracy")
    return M::SparseTopKCategoricalAccuracy({.k = int_of<int>(c.at("k")), .name = name});
  if (cls == "Precision")
    return M::Precision({.threshold = c.at("threshold").get<double>(),
                         .class_id = opt_from<std::int64_t>(c, "class_id"),
                         .name = name});
  if (cls == "Recall")
    return M::Recall({.threshold = c.at("threshold").get<double>(),
                      .class_id = opt_from<std::int64_t>(c, "class_id"),
                      .name = name});
  if (cls == "MeanSquaredError") return M::MeanSquaredError({.name = name});
  if (cls == "MeanAbsoluteError") return M::MeanAbsoluteError({.name = name});
  if (cls == "Mean") return M::Mean({.name = name});
  if (cls == "LossMean") return M::LossMean(loss_from_json(c.at("loss")), name);
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
  put<std::uint32_t>(header, f.kind == "weights" ? kKindWeights : kKindModel);
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
  if (kind != kKindModel && kind != kKindWeights) fail(who, "'", path, "' is corrupt: unknown kind ", kind);
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
  f.kind = kind == kKindWeights ? "weights" : "model";
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
Shape internal::shape_from_json(const json& j) { return shape_from(j); }

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

json model_json(const nn::Model& model) {
  const std::string type = model.type_name();
  if (auto* seq = dynamic_cast<const nn::Sequential*>(&model); seq && type == "Sequential") {
    json cfg = sequential_config(*seq);
    cfg["name"] = model.name();
    return json{{"class_name", "Sequential"}, {"config", cfg}};
  }
  if (!model.inputs().empty() && type == "Functional")
    return json{{"class_name", "Functional"}, {"config", internal::functional_config(model)}};
  // A subclassed model: its architecture is code, which only a registered factory can rebuild.
  if (type == "Sequential" || type == "Functional" || !registered(type)) {
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
  if (cls == "Sequential") {
    auto s = sequential_from(cfg);
    if (cfg.contains("name")) s->set_name(cfg.at("name").get<std::string>());
    return s;
  }
  if (cls == "Functional") return internal::functional_from(cfg);
  if (!registered(cls))
    fail("load_model", "model class '", cls, "' is neither built in (Sequential, Functional) nor registered; "
         "call serialization::register_model(\"", cls, "\", ...) before load_model");
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
      [from = std::move(from_config)](const json& c) { return from(c.dump()); }};
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
