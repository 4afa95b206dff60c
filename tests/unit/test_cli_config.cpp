// The CLI's JSON model config (`soma train --config`, apps/soma/models.cpp) builds every layer
// through the layer's own config fields (serialization::layer_fields): each layer type with a
// config is tested here from the registry, so a new layer is covered with no test of its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../apps/soma/models.cpp"  // the CLI is an executable: its config reader, compiled in
#include "soma/model/serialization.hpp"

namespace {

using json = nlohmann::json;
using soma::cli::layer_from_cli_config;
namespace ser = soma::serialization;

// A layer's config without its name (generated names differ between two layers).
json config_of(const soma::nn::Module& layer) {
  json j = json::parse(ser::layer_config(layer));
  j["config"].erase("name");
  return j;
}

std::string error_of(const std::string& entry) {
  try {
    layer_from_cli_config(entry, "m.json: layers[3]");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CliConfig, EveryLayerTypeBuildsFromItsRequiredFieldsInBothForms) {
  int tested = 0;
  for (const auto& type : ser::registered_layers()) {
    auto fields = ser::layer_fields(type);
    if (!fields) continue;  // the model kinds (Sequential, Functional)
    SCOPED_TRACE(type);
    const json defaults = json::parse(fields->defaults);
    json short_form{{"type", type}}, keras_cfg = json::object();
    for (const auto& k : fields->required) {
      ASSERT_TRUE(defaults.contains(k)) << k;
      short_form[k] = defaults[k];
      keras_cfg[k] = defaults[k];
    }
    const auto expected = config_of(*ser::layer_from_config(json{{"class_name", type}, {"config", defaults}}.dump()));
    EXPECT_EQ(config_of(*layer_from_cli_config(short_form.dump(), "t")), expected);
    EXPECT_EQ(config_of(*layer_from_cli_config(json{{"class_name", type}, {"config", keras_cfg}}.dump(), "t")),
              expected);
    // A typo is refused, naming the layer, the key and the allowed keys.
    json typo = short_form;
    typo["no_such_key"] = 1;
    const std::string e = error_of(typo.dump());
    EXPECT_NE(e.find("m.json: layers[3] (" + type + "): unknown key \"no_such_key\" (allowed keys: "), std::string::npos) << e;
    for (const auto& [k, v] : defaults.items()) EXPECT_NE(e.find(k), std::string::npos) << k;
    // A required field left out is named.
    for (const auto& k : fields->required) {
      json missing = short_form;
      missing.erase(k);
      EXPECT_EQ(error_of(missing.dump()), "m.json: layers[3] (" + type + "): missing \"" + k + "\"");
    }
    ++tested;
  }
  EXPECT_GE(tested, 20);
}

TEST(CliConfig, WrongTypeNamesTheLayerAndTheKey) {
  const std::string e = error_of(R"({"type": "Dense", "units": "ten"})");
  EXPECT_EQ(e.rfind("m.json: layers[3] (Dense): ", 0), 0u) << e;
  EXPECT_EQ(e.find("m.json: layers[3] (Dense): bad value for \"units\": expected an integer"), 0u) << e;
  EXPECT_NE(e.find("\"ten\""), std::string::npos) << e;
  EXPECT_NE(e.find("(allowed keys: activation, bias_initializer, "), std::string::npos) << e;
  const std::string f = error_of(R"({"type": "Dense", "units": 3e81})");
  EXPECT_NE(f.find("bad value for \"units\": expected an integer"), std::string::npos) << f;
}

TEST(CliConfig, UnknownTypeListsTheKnownOnes) {
  const std::string e = error_of(R"({"type": "Dense2"})");
  EXPECT_EQ(e.rfind("m.json: layers[3] (Dense2): unknown layer type \"Dense2\" (known: ", 0), 0u) << e;
  EXPECT_NE(e.find("LSTM"), std::string::npos) << e;
}

TEST(CliConfig, DefaultsAreTheLayersOwn) {
  // Pooling strides follow the pool size given (Keras' strides=None); Keras' names are aliases.
  auto pool = std::dynamic_pointer_cast<soma::nn::MaxPool2D>((
      layer_from_cli_config(R"({"type": "MaxPooling2D", "pool_size": 3})", "t")).ptr());
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->strides().h, 3);
  EXPECT_EQ(pool->strides().w, 3);
  auto avg = std::dynamic_pointer_cast<soma::nn::AvgPool2D>((
      layer_from_cli_config(R"({"type": "AveragePooling2D", "pool_size": [3, 2], "strides": 1})", "t")).ptr());
  ASSERT_TRUE(avg);
  EXPECT_EQ(avg->strides().h, 1);
  // BatchNormalization: the layer's (Keras') axis -1, no longer the CLI's own 1.
  auto bn = std::dynamic_pointer_cast<soma::nn::BatchNormalization>((
      layer_from_cli_config(R"({"type": "BatchNormalization"})", "t")).ptr());
  ASSERT_TRUE(bn);
  EXPECT_EQ(bn->options().axis, -1);
  // name and trainable are every layer's.
  auto d = layer_from_cli_config(R"({"type": "Dense", "units": 4, "name": "head", "trainable": false})", "t");
  EXPECT_EQ(d->name(), "head");
  EXPECT_FALSE(d->trainable());
  // Keras' get_config() writes null for what it does not use: ignored in its form only.
  EXPECT_NO_THROW(layer_from_cli_config(
      R"({"class_name": "Dense", "config": {"units": 4, "kernel_constraint": null}})", "t"));
  EXPECT_NE(error_of(R"({"type": "Dense", "units": 4, "kernel_constraint": null})").find("unknown key"),
            std::string::npos);
}

TEST(CliConfig, KerasThreeEntriesAndChannelsLast) {
  // Keras 3's to_json() entry as is: module, registered_name, build_config, a dtype policy and
  // initializer objects, data_format channels_last (the library's reader, shared with
  // model::from_keras_json).
  auto conv = std::dynamic_pointer_cast<soma::nn::Conv2D>((layer_from_cli_config(R"({
      "module": "keras.layers", "class_name": "Conv2D", "registered_name": null,
      "build_config": {"input_shape": [null, 8, 8, 2]},
      "config": {"name": "c", "trainable": true, "filters": 4, "kernel_size": [3, 3],
        "strides": [1, 1], "padding": "same", "data_format": "channels_last",
        "dilation_rate": [1, 1], "groups": 1, "activation": "relu", "use_bias": true,
        "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
                  "registered_name": null},
        "kernel_initializer": {"module": "keras.initializers", "class_name": "HeNormal",
                               "config": {"seed": null}, "registered_name": null},
        "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros",
                             "config": {}, "registered_name": null},
        "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
        "kernel_constraint": null, "bias_constraint": null}})", "t")).ptr());
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->options().data_format, soma::nn::DataFormat::channels_last);
  EXPECT_EQ(conv->options().kernel_initializer.name, "he_normal");
  EXPECT_EQ((*conv)(soma::zeros({1, 8, 8, 2})).shape(), (soma::Shape{1, 8, 8, 4}));
  // soma's short form takes the field too.
  auto pool = std::dynamic_pointer_cast<soma::nn::MaxPool2D>((
      layer_from_cli_config(R"({"type": "MaxPooling2D", "data_format": "channels_last"})", "t")).ptr());
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->data_format(), soma::nn::DataFormat::channels_last);
  EXPECT_NE(error_of(R"({"type": "Conv2D", "filters": 2, "kernel_size": 3, "data_format": "NHWC"})")
                .find("'data_format' is 'NHWC', not one of channels_first, channels_last"),
            std::string::npos)
      << error_of(R"({"type": "Conv2D", "filters": 2, "kernel_size": 3, "data_format": "NHWC"})");
  // soma's own layer_config() output is Keras' form with soma's values: it reads back as is.
  soma::nn::Dense dense(3, {.kernel_regularizer = {0.0, 0.5}, .dtype = soma::DType::f64});
  auto again = layer_from_cli_config(ser::layer_config(dense), "t");
  EXPECT_EQ(config_of(*again), config_of(dense));
  EXPECT_NE(error_of(R"({"class_name": "Dense", "config": {"units": 2, "kernel_constraint": {"class_name": "NonNeg"}}})")
                .find("kernel_constraint"),
            std::string::npos);
}

}  // namespace

// `soma train --config` builds examples/char_transformer's GPT (issue 26): int64 token inputs,
// Embedding, PositionalEmbedding, causal TransformerEncoderLayers, LayerNormalization, Dense.
TEST(CliConfig, BuildsTheCharTransformerGpt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("soma_cli_gpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  json layers = json::array({{{"type", "Embedding"}, {"input_dim", 256}, {"output_dim", 32}},
                             {{"type", "PositionalEmbedding"}, {"sequence_length", 16},
                              {"add_to_inputs", true}}});
  for (int i = 0; i < 2; ++i)
    layers.push_back({{"type", "TransformerEncoderLayer"}, {"d_model", 32}, {"nhead", 4},
                      {"dim_feedforward", 64}, {"dropout", 0.1}, {"activation", "gelu"},
                      {"norm_first", true}, {"causal", true}});
  layers.push_back({{"type", "LayerNormalization"}});
  layers.push_back({{"type", "Dense"}, {"units", 256}});
  const fs::path path = dir / "gpt.json";
  std::ofstream(path) << json{{"layers", layers}}.dump();
  auto m = soma::cli::model_from_config(path.string(), {16}, soma::DType::i64);
  EXPECT_EQ(m->layers().size(), 6u);
  soma::Tensor x = soma::cast(soma::floor(soma::random_uniform({2, 16}, 0.0, 255.0)), soma::DType::i64);
  EXPECT_EQ(m->predict(x, {.verbose = 0}).shape(), (soma::Shape{2, 16, 256}));
  // The causal mask reached the layers: a later token does not change earlier outputs.
  m->eval();
  soma::Tensor y1 = (*m)(x);
  std::vector<std::int64_t> v = x.to_vector<std::int64_t>();
  v[15] = (v[15] + 1) % 256;
  soma::Tensor y2 = (*m)(soma::constant(v, {2, 16}));
  const soma::Tensor d = soma::slice(y1, {soma::Slice{0, 1}, soma::Slice{0, 15}}) -
                        soma::slice(y2, {soma::Slice{0, 1}, soma::Slice{0, 15}});
  EXPECT_LT(soma::max(soma::abs(d)).item<double>(), 1e-6);
  // The shipped config (examples/char_transformer/gpt.json) too, when the source tree is here.
  const fs::path shipped = fs::path(__FILE__).parent_path() / "../../examples/char_transformer/gpt.json";
  if (fs::exists(shipped)) {
    auto g = soma::cli::model_from_config(shipped.string(), {128}, soma::DType::i64);
    EXPECT_EQ(g->layers().size(), 8u);
    EXPECT_GT(g->count_params(), 800000);
  }
  fs::remove_all(dir);
}
