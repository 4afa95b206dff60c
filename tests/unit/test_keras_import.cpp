// Keras' own files in soma (soma/model/keras.hpp): models written by Keras 3.6's to_json() and
// save_weights() (tests/keras/make_fixtures.py; the files are checked in) give Keras' outputs
// within 1e-5. The weight tests skip when soma was built without HDF5.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "error_testing.hpp"
#include "soma/model/keras.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

namespace soma {
namespace {

using json = nlohmann::json;
using testing::error_of;

std::string fixture(const std::string& name) { return std::string(SOMA_KERAS_FIXTURES) + "/" + name; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// NAME_io.txt: "shape d0 d1 ..." then a line of values, for the input and Keras' output.
std::pair<Tensor, Tensor> read_io(const std::string& name) {
  std::ifstream in(fixture(name + "_io.txt"));
  std::vector<Tensor> ts;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream hs(line);
    std::string word;
    hs >> word;
    Shape shape;
    for (std::int64_t d; hs >> d;) shape.push_back(d);
    std::getline(in, line);
    std::istringstream vs(line);
    std::vector<double> v;
    for (double x; vs >> x;) v.push_back(x);
    ts.push_back(cast(constant(v, shape), DType::f32));
  }
  if (ts.size() != 2) throw std::runtime_error("bad io fixture " + name);
  return {ts[0], ts[1]};
}

void expect_keras_outputs(const std::string& name, const std::string& weights) {
  SCOPED_TRACE(name + " with " + weights);
  auto model = model::Model::from_keras_json(read_text(fixture(name + ".json")));
  model->load_keras_weights(fixture(weights));
  auto [x, y] = read_io(name);
  EXPECT_TRUE(testing::all_close(model->predict(x), y, 1e-5, 1e-5));
}

TEST(KerasImport, SequentialArchitecturesFromToJson) {
  auto mlp = model::from_keras_json(read_text(fixture("mlp.json")));
  auto& seq = dynamic_cast<nn::Sequential&>(*mlp);
  ASSERT_EQ(seq.layers().size(), 4u);
  EXPECT_EQ(mlp->name(), "mlp");
  EXPECT_EQ(seq.layers()[0]->type_name(), "Dense");
  EXPECT_EQ(seq.layers()[0]->name(), "dense");
  EXPECT_EQ(seq.layers()[1]->type_name(), "Dropout");
  // The InputLayer's batch_shape [null, 5] is the input; every layer is built.
  EXPECT_EQ(mlp->count_params(), 5 * 8 + 8 + 8 * 6 + 6 + 6 * 3 + 3);
  // Keras' GlorotUniform / HeNormal objects became soma's initialisers.
  EXPECT_NE(serialization::layer_config(*seq.layers()[2]).find("he_normal"), std::string::npos);

  auto cnn = model::from_keras_json(read_text(fixture("cnn.json")));
  std::ostringstream summary;
  cnn->summary(summary);
  // channels_last shapes, as Keras' summary shows them.
  EXPECT_NE(summary.str().find("(None, 8, 8, 4)"), std::string::npos) << summary.str();
  EXPECT_NE(summary.str().find("MaxPool2D"), std::string::npos) << summary.str();
}

TEST(KerasImport, OutputsMatchKeras) {
  if (!model::keras_weights_available()) GTEST_SKIP() << "soma was built without HDF5";
  expect_keras_outputs("mlp", "mlp.weights.h5");
  expect_keras_outputs("cnn", "cnn.weights.h5");
  expect_keras_outputs("gap", "gap.weights.h5");
  expect_keras_outputs("functional", "functional.weights.h5");
  // Keras 2's HDF5 layout (/model_weights, layer_names, weight_names).
  expect_keras_outputs("cnn", "cnn_legacy.h5");
}

// Models as today's Keras writes them (tests/keras/current, made with the Keras that
// scripts/oracles.lock pins by tests/keras/make_current.py): InputLayer's "optional",
// BatchNormalization's renorm fields, ReLU's negative_slope and threshold, LayerNormalization's
// rms_scaling, and the call arguments a functional model records ({"mask": null} on
// BatchNormalization, {"training": false} on Dropout) load, and predict what Keras predicted.
TEST(KerasImport, ModelsWrittenByTodaysKerasLoadAndMatchIt) {
  if (!model::keras_weights_available()) GTEST_SKIP() << "soma was built without HDF5";
  std::ifstream list(fixture("current/models.txt"));
  ASSERT_TRUE(list) << "no " << fixture("current/models.txt");
  int n = 0;
  for (std::string name; std::getline(list, name);) {
    if (name.empty()) continue;
    SCOPED_TRACE("Keras " + read_text(fixture("current/keras_version.txt")) + " model " + name);
    std::shared_ptr<nn::Model> model;
    try {
      model = model::Model::from_keras_json(read_text(fixture("current/" + name + ".json")));
      model->load_keras_weights(fixture("current/" + name + ".weights.h5"));
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << " does not load: " << e.what();
      continue;
    }
    auto [x, y] = read_io("current/" + name);
    EXPECT_TRUE(testing::all_close(model->predict(x, {.verbose = 0}), y, 1e-5, 1e-5)) << name;
    ++n;
  }
  EXPECT_GE(n, 5);
}

// hard_sigmoid as the file's Keras defines it: Keras 3's relu6(x + 3) / 6, Keras 2's (to_json()
// says "keras_version": "2...") 0.2 x + 0.5.
TEST(KerasImport, HardSigmoidFollowsTheFilesKerasVersion) {
  auto model = [](const std::string& version) {
    return model::from_keras_json(
        R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
          {"class_name": "Activation", "config": {"name": "a", "activation": "hard_sigmoid",
           "batch_input_shape": [null, 5]}}]})" +
        (version.empty() ? std::string() : R"(, "keras_version": ")" + version + "\"") + "}");
  };
  const Tensor x = constant<float>({-4, -1.5f, 0, 1.5f, 4}, Shape{1, 5});
  const Tensor keras3 = constant<float>({0, 0.25f, 0.5f, 0.75f, 1}, Shape{1, 5});
  const Tensor keras2 = constant<float>({0, 0.2f, 0.5f, 0.8f, 1}, Shape{1, 5});
  EXPECT_TRUE(testing::all_close(model("")->predict(x, {.verbose = 0}), keras3, 1e-6, 1e-6));
  EXPECT_TRUE(testing::all_close(model("3.15.1")->predict(x, {.verbose = 0}), keras3, 1e-6, 1e-6));
  EXPECT_TRUE(testing::all_close(model("2.15.0")->predict(x, {.verbose = 0}), keras2, 1e-6, 1e-6));
}

// A field or call argument is dropped only with the value that cannot change the result; any
// other value is refused, naming the layer, the field and the value.
TEST(KerasImport, NeutralFieldsOfTodaysKerasAreRefusedWithAnyOtherValue) {
  auto first_layer = [](const std::string& cls, const std::string& config) {
    return R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
      {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "dtype": "float32",
       "name": "in", "optional": false, "sparse": false, "ragged": false}},
      {"class_name": ")" + cls + R"(", "config": )" + config + "}]}}";
  };
  auto refused = [&](const std::string& cls, const std::string& config, const std::string& field) {
    std::string msg = error_of([&] { model::from_keras_json(first_layer(cls, config)); });
    EXPECT_NE(msg.find(field), std::string::npos) << cls << ": " << msg;
  };
  // The neutral values load.
  EXPECT_NO_THROW(model::from_keras_json(first_layer(
      "BatchNormalization", R"({"name": "bn", "renorm": false, "renorm_clipping": null,
                                "renorm_momentum": 0.9})")));
  EXPECT_NO_THROW(model::from_keras_json(first_layer(
      "ReLU", R"({"name": "r", "max_value": null, "negative_slope": 0.0, "threshold": 0.0})")));
  EXPECT_NO_THROW(model::from_keras_json(first_layer(
      "LayerNormalization", R"({"name": "ln", "rms_scaling": false})")));
  // Any other value is an error naming the field.
  refused("BatchNormalization", R"({"name": "bn", "renorm": true})", "renorm");
  refused("ReLU", R"({"name": "r", "negative_slope": 0.1})", "negative_slope");
  refused("ReLU", R"({"name": "r", "threshold": 0.5})", "threshold");
  refused("LayerNormalization", R"({"name": "ln", "rms_scaling": true})", "rms_scaling");
  std::string msg = error_of([&] {
    model::from_keras_json(R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
      {"class_name": "InputLayer", "config": {"batch_shape": [null, 4], "name": "in",
       "optional": true}}]}})");
  });
  EXPECT_NE(msg.find("optional"), std::string::npos) << msg;
  // A call argument with another value: Dropout called with training=True (active at inference).
  json res = json::parse(read_text(fixture("current/residual.json")));
  for (auto& layer : res["config"]["layers"])
    if (layer["class_name"] == "Dropout") layer["inbound_nodes"][0]["kwargs"]["training"] = true;
  msg = error_of([&] { model::from_keras_json(res.dump()); });
  EXPECT_NE(msg.find("call argument \"training\": true"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Dropout"), std::string::npos) << msg;
}

TEST(KerasImport, WeightFileErrorsNameTheLayer) {
  if (!model::keras_weights_available()) {
    auto m = model::from_keras_json(read_text(fixture("mlp.json")));
    auto msg = error_of([&] { m->load_keras_weights(fixture("mlp.weights.h5")); });
    EXPECT_NE(msg.find("not available"), std::string::npos) << msg;
    GTEST_SKIP() << "soma was built without HDF5";
  }
  // The MLP's weights do not fit the CNN: the file's layers are not the model's.
  auto cnn = model::from_keras_json(read_text(fixture("cnn.json")));
  auto msg = error_of([&] { cnn->load_keras_weights(fixture("mlp.weights.h5")); });
  EXPECT_NE(msg.find("layer 'conv2d'"), std::string::npos) << msg;
  auto msg2 = error_of([&] { cnn->load_keras_weights(fixture("cnn.json")); });
  EXPECT_NE(msg2.find("not an HDF5 file"), std::string::npos) << msg2;
  // A shape mismatch names layer and weight, and changes nothing.
  json j = json::parse(read_text(fixture("mlp.json")));
  j["config"]["layers"][1]["config"]["units"] = 9;
  auto mlp = model::from_keras_json(j.dump());
  auto before = mlp->state_dict();
  auto msg3 = error_of([&] { mlp->load_keras_weights(fixture("mlp.weights.h5")); });
  EXPECT_NE(msg3.find("layer 'dense' (Dense): weight 'kernel'"), std::string::npos) << msg3;
  auto after = mlp->state_dict();
  for (auto& [k, v] : before) EXPECT_TRUE(testing::all_close(after.at(k), v, 0.0, 0.0)) << k;
}

TEST(KerasImport, UnsupportedFieldsAreErrorsNamingLayerAndField) {
  const json base = json::parse(read_text(fixture("cnn.json")));
  auto error_with = [&](const std::function<void(json&)>& edit) {
    json j = base;
    edit(j);
    return error_of([&] { (void)model::from_keras_json(j.dump()); });
  };
  auto conv = [](json& j) -> json& { return j["config"]["layers"][1]; };
  std::string m = error_with([&](json& j) { conv(j)["config"]["kernel_constraint"] = {{"class_name", "MaxNorm"}}; });
  EXPECT_NE(m.find("'conv2d' (Conv2D)"), std::string::npos) << m;
  EXPECT_NE(m.find("kernel_constraint"), std::string::npos) << m;
  m = error_with([&](json& j) { conv(j)["class_name"] = "SeparableConv2D"; });
  EXPECT_NE(m.find("unknown layer type \"SeparableConv2D\""), std::string::npos) << m;
  m = error_with([&](json& j) { conv(j)["config"]["lora_rank"] = 4; });
  EXPECT_NE(m.find("unknown key \"lora_rank\""), std::string::npos) << m;
  EXPECT_NE(m.find("'conv2d'"), std::string::npos) << m;
  m = error_with([&](json& j) { conv(j)["config"]["kernel_initializer"]["class_name"] = "Identity"; });
  EXPECT_NE(m.find("kernel_initializer"), std::string::npos) << m;
  m = error_with([&](json& j) {
    conv(j)["config"]["dtype"] = {{"class_name", "DTypePolicy"}, {"config", {{"name", "mixed_float16"}}}};
  });
  EXPECT_NE(m.find("field \"dtype\""), std::string::npos) << m;
  m = error_with([&](json& j) { conv(j)["registered_name"] = "MyPackage>MyConv"; });
  EXPECT_NE(m.find("custom Keras object"), std::string::npos) << m;
  m = error_with([&](json& j) { j["config"]["layers"][7]["config"]["data_format"] = "channels_first"; });
  EXPECT_NE(m.find("(Flatten)"), std::string::npos) << m;
  m = error_with([&](json& j) { j["class_name"] = "MySubclassedModel"; });
  EXPECT_NE(m.find("\"MySubclassedModel\" is not supported"), std::string::npos) << m;
  m = error_with([&](json& j) { j["config"]["layers"][0]["config"]["batch_shape"] = {nullptr, nullptr, 8, 2}; });
  EXPECT_NE(m.find("unknown extent"), std::string::npos) << m;
  // Regularisers map to soma's: L2 becomes {l1: 0, l2: x}.
  json j = base;
  conv(j)["config"]["kernel_regularizer"] = {{"module", "keras.regularizers"}, {"class_name", "L2"},
                                              {"config", {{"l2", 0.25}}}, {"registered_name", nullptr}};
  auto model = model::from_keras_json(j.dump());
  const std::string cfg = serialization::layer_config(*dynamic_cast<nn::Sequential&>(*model).layers()[0]);
  EXPECT_NE(cfg.find("\"kernel_regularizer\":{\"l1\":0.0,\"l2\":0.25}"), std::string::npos) << cfg;
}

TEST(KerasImport, MalformedModelsAreSomaErrors) {
  // Values of unexpected JSON types anywhere: soma::Error, never a JSON library exception.
  for (const char* text : {
           R"({"class_name": "Functional", "config": {"layers": [{"class_name": "Dense"}]}})",
           R"({"class_name": "Functional", "config": {"layers": [{"class_name": "InputLayer", "name": "x",
               "config": {"batch_shape": [null, 2]}}, {"class_name": "Dense", "name": "d",
               "config": {"units": 2}, "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__",
               "config": {"keras_history": ["x", "zero", 0]}}], "kwargs": {}}]}],
               "input_layers": [["x", 0, 0]], "output_layers": [["d", 0, 0]]}})",
           R"({"class_name": "Sequential", "config": {"layers": [{"class_name": "InputLayer",
               "config": {"batch_shape": [null, 2]}}, {"class_name": "Dense", "config": {"units": 2,
               "kernel_regularizer": {"class_name": "L2", "config": {"l2": "much"}}}}]}})",
           R"({"class_name": "Sequential", "config": {"layers": 3}})",
           R"([1, 2])"}) {
    SCOPED_TRACE(text);
    const std::string m = error_of([&] { (void)model::from_keras_json(text); });
    EXPECT_NE(m.find("from_keras_json"), std::string::npos) << m;
  }
}

TEST(KerasImport, Keras2StyleFirstLayerInputShape) {
  // Keras 2 wrote the input shape on the first layer (batch_input_shape), without an InputLayer.
  const std::string text = R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
      {"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": "relu",
       "batch_input_shape": [null, 4], "dtype": "float32",
       "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}},
       "bias_initializer": {"class_name": "Zeros", "config": {}},
       "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
       "kernel_constraint": null, "bias_constraint": null, "use_bias": true, "trainable": true}}]}})";
  auto m = model::from_keras_json(text);
  EXPECT_EQ(m->predict(zeros({2, 4})).shape(), (Shape{2, 3}));
}

}  // namespace
}  // namespace soma
