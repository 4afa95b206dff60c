// Model files for functional and subclassed models, and learning-rate schedules in saved
// optimisers (docs/model-format.md, format version 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "soma/model/serialization.hpp"
#include "soma/soma.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace soma;
using soma::testing::rand_tensor;
using json = nlohmann::json;

namespace {

std::string temp_file(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("soma_model_file_functional_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

Tensor randf(const Shape& shape, std::uint64_t seed) { return rand_tensor(shape, seed, -1.0, 1.0, DType::f32); }

bool same_bits(const Tensor& a0, const Tensor& b0) {
  if (a0.shape() != b0.shape() || a0.dtype() != b0.dtype()) return false;
  Tensor a = a0.contiguous(), b = b0.contiguous();
  return std::memcmp(a.raw_data(), b.raw_data(), std::size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

void expect_same_weights(const nn::Model& a, const nn::Model& b) {
  auto wa = a.get_weights(), wb = b.get_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (auto& [k, t] : wa) {
    ASSERT_TRUE(wb.count(k)) << k;
    EXPECT_TRUE(same_bits(t, wb.at(k))) << k;
  }
}

using soma::testing::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Tensor labels(std::int64_t n, int classes, std::uint64_t seed) {
  return soma::floor(rand_tensor({n}, seed, 0.0, classes - 1e-3)).cast(DType::i64);
}

// Trains `model` a little, saves it, loads it, and checks: the same config, bit-identical
// predictions and weights, the same optimiser step count; then one more step of fit() and of
// train_on_batch() on both gives bit-identical losses and weights.
void check_round_trip(nn::Model& model, const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                      const std::string& file) {
  nn::FitOptions fo{.epochs = 1, .batch_size = 4, .verbose = 0, .seed = 3};
  model.fit(x, y, fo);
  const std::string path = temp_file(file);
  model.save(path);
  auto loaded = load_model(path);
  fs::remove(path);

  EXPECT_EQ(serialization::model_config(model), serialization::model_config(*loaded));
  EXPECT_EQ(model.trainable_parameters().size(), loaded->trainable_parameters().size());
  expect_same_weights(model, *loaded);
  auto p0 = model.predict(x), p1 = loaded->predict(x);
  ASSERT_EQ(p0.size(), p1.size());
  for (std::size_t i = 0; i < p0.size(); ++i) EXPECT_TRUE(same_bits(p0[i], p1[i])) << "output " << i;
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer().iterations(), model.optimizer().iterations());

  // Continue: one epoch of one step (the whole set as one batch), then a train_on_batch.
  fo.batch_size = x[0].shape()[0];
  fo.initial_epoch = 1;
  fo.epochs = 2;
  auto ha = model.fit(x, y, fo), hb = loaded->fit(x, y, fo);
  EXPECT_EQ(ha["loss"], hb["loss"]);
  auto la = model.train_on_batch(x, y), lb = loaded->train_on_batch(x, y);
  EXPECT_EQ(la.at("loss"), lb.at("loss"));
  expect_same_weights(model, *loaded);
  p0 = model.predict(x);
  p1 = loaded->predict(x);
  for (std::size_t i = 0; i < p0.size(); ++i) EXPECT_TRUE(same_bits(p0[i], p1[i])) << "output " << i;
}

// ---- functional models ------------------------------------------------------------------------

TEST(FunctionalFile, TwoBranchesJoinedByConcatenate) {
  auto in = nn::Input({6});
  auto a = nn::call(nn::Dense(8, nn::relu), in);
  auto b = nn::call(nn::Dense(4, nn::tanh), in);
  b = nn::call(nn::BatchNormalization(), b);
  auto h = nn::call(nn::Concatenate(), {a, b}).at(0);
  auto out = nn::call(nn::Dense(3), h);
  nn::Model model(in, out);
  model.compile(optim::Adam({.learning_rate = 0.01}), nn::SparseCategoricalCrossentropy({.from_logits = true}),
                {metrics::get("accuracy")});
  check_round_trip(model, {randf({12, 6}, 1)}, {labels(12, 3, 2)}, "concat.soma");
}

TEST(FunctionalFile, TwoBranchesJoinedByAddWithAFrozenLayer) {
  auto in = nn::Input({5});
  nn::ModuleRef frozen = nn::Dense(4);
  auto a = nn::call(frozen, in);
  auto b = nn::call(nn::Dense(4, nn::relu), in);
  auto sum = nn::call(nn::Add(), {a, b}).at(0);
  auto out = nn::call(nn::Dense(2), sum);
  nn::Model model(in, out);
  frozen->set_trainable(false);
  model.compile(optim::SGD({.learning_rate = 0.05, .momentum = 0.9}), nn::MeanSquaredError());
  check_round_trip(model, {randf({8, 5}, 3)}, {randf({8, 2}, 4)}, "add.soma");
  auto loaded_cfg = json::parse(serialization::model_config(model));
  EXPECT_EQ(loaded_cfg["config"]["layers"][1]["config"]["trainable"], false) << loaded_cfg.dump();
}

TEST(FunctionalFile, TwoInputsAndTwoOutputs) {
  auto in1 = nn::Input({4}, {.name = "numbers"});
  auto in2 = nn::Input({3}, {.name = "extras"});
  auto h = nn::call(nn::Dense(6, nn::relu), in1);
  auto joined = nn::call(nn::Concatenate(), {h, in2}).at(0);
  auto regression = nn::call(nn::Dense(2), joined);
  auto classes = nn::call(nn::Dense(3), joined);
  // Outputs listed in another order than created, inputs too: the file must keep both orders.
  nn::Model model({in2, in1}, {classes, regression});
  model.compile(optim::RMSprop({.learning_rate = 0.01}),
                std::vector<nn::LossRef>{nn::SparseCategoricalCrossentropy({.from_logits = true}),
                                         nn::MeanSquaredError()},
                {{metrics::get("accuracy")}, {}}, {.loss_weights = {1.0, 0.5}});
  std::vector<Tensor> x{randf({8, 3}, 5), randf({8, 4}, 6)};
  std::vector<Tensor> y{labels(8, 3, 7), randf({8, 2}, 8)};
  check_round_trip(model, x, y, "two_in_two_out.soma");

  const std::string path = temp_file("two_io_names.soma");
  model.save(path);
  auto loaded = load_model(path);
  fs::remove(path);
  ASSERT_EQ(loaded->inputs().size(), 2u);
  EXPECT_EQ(loaded->inputs()[0].name(), "extras");
  EXPECT_EQ(loaded->inputs()[1].name(), "numbers");
  ASSERT_EQ(loaded->outputs().size(), 2u);
  EXPECT_EQ(loaded->outputs()[0].shape(), (Shape{-1, 3}));
  EXPECT_EQ(loaded->outputs()[1].shape(), (Shape{-1, 2}));
  EXPECT_EQ(loaded->compiled_loss_weights(), (std::vector<double>{1.0, 0.5}));
}

TEST(FunctionalFile, SharedLayerUsedTwiceKeepsOneSetOfWeights) {
  auto left = nn::Input({5});
  auto right = nn::Input({5});
  nn::ModuleRef shared = nn::Dense(4, nn::tanh);
  auto a = nn::call(shared, left);
  auto b = nn::call(shared, right);
  auto diff = nn::call(nn::Concatenate(), {a, b}).at(0);
  auto out = nn::call(nn::Dense(1), diff);
  nn::Model model({left, right}, {out});
  model.compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
  std::vector<Tensor> x{randf({8, 5}, 9), randf({8, 5}, 10)};
  check_round_trip(model, x, {randf({8, 1}, 11)}, "shared.soma");

  const std::string path = temp_file("shared2.soma");
  model.save(path);
  auto loaded = load_model(path);
  fs::remove(path);
  EXPECT_EQ(loaded->count_params(), model.count_params());
  EXPECT_EQ(loaded->named_children().size(), 3u);  // shared dense, concatenate, output dense
  auto cfg = json::parse(serialization::model_config(*loaded));
  const json& shared_entry = cfg["config"]["layers"][2];
  EXPECT_EQ(shared_entry["name"], shared->name());
  EXPECT_EQ(shared_entry["inbound_nodes"].size(), 2u) << cfg.dump();
}

TEST(FunctionalFile, SharedLayerCalledOnItsOwnOutputKeepsCallOrder) {
  // x -> S -> T -> S -> out: the second call of S consumes T's output, so rebuilding must replay
  // S's calls in order, interleaved with T.
  auto in = nn::Input({4});
  nn::ModuleRef s = nn::Dense(4, nn::tanh);
  auto h1 = nn::call(s, in);
  auto h2 = nn::call(nn::Dense(4, nn::relu), h1);
  auto h3 = nn::call(s, h2);
  auto both = nn::call(nn::Add(), {h1, h3}).at(0);
  nn::Model model(in, both);
  model.compile(optim::SGD({.learning_rate = 0.1}), nn::MeanSquaredError());
  check_round_trip(model, {randf({8, 4}, 12)}, {randf({8, 4}, 13)}, "shared_chain.soma");
  auto cfg = json::parse(serialization::model_config(model));
  // The Add layer consumes call 0 and call 1 of the shared layer.
  const json& add = cfg["config"]["layers"].back();
  EXPECT_EQ(add["inbound_nodes"][0][0][1], 0) << add.dump();
  EXPECT_EQ(add["inbound_nodes"][0][1][1], 1) << add.dump();
}

TEST(FunctionalFile, LayerWithSeveralOutputsKeepsTheOutputIndex) {
  auto in = nn::Input({5, 3});
  auto outs = nn::call(nn::LSTM(4, {.return_state = true}), std::vector<nn::SymbolicTensor>{in});
  ASSERT_EQ(outs.size(), 3u);
  auto out = nn::call(nn::Dense(2), outs[2]);  // the cell state
  nn::Model model(in, out);
  model.compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
  check_round_trip(model, {randf({8, 5, 3}, 14)}, {randf({8, 2}, 15)}, "lstm_state.soma");
}

TEST(FunctionalFile, IntegerInputKeepsItsDtypeAndFixedBatch) {
  auto in = nn::Input({5}, {.dtype = DType::i64, .name = "tokens"});
  auto out = nn::call(nn::Dense(2), nn::call(nn::Flatten(), nn::call(nn::Embedding(10, 3), in)));
  nn::Model model(in, out);
  model.compile(optim::Adam({.learning_rate = 0.01}), nn::MeanSquaredError());
  Tensor tokens = soma::floor(rand_tensor({8, 5}, 23, 0.0, 9.99)).cast(DType::i64);
  check_round_trip(model, {tokens}, {randf({8, 2}, 24)}, "tokens.soma");
  auto cfg = json::parse(serialization::model_config(model));
  EXPECT_EQ(cfg["config"]["layers"][0]["config"]["dtype"], "i64");

  auto fixed = nn::Input({3}, {.batch_size = 8});
  nn::Model fixed_model(fixed, nn::call(nn::Dense(2), fixed));
  auto fixed_cfg = serialization::model_config(fixed_model);
  EXPECT_EQ(json::parse(fixed_cfg)["config"]["layers"][0]["config"]["batch_shape"], json::parse("[8, 3]"));
  auto back = serialization::model_from_config(fixed_cfg);
  EXPECT_EQ(back->inputs()[0].shape(), (Shape{8, 3}));
}

TEST(FunctionalFile, FunctionalModelNestedInSequentialAndFunctional) {
  auto in = nn::Input({4});
  auto inner = std::make_shared<nn::Model>(in, nn::call(nn::Dense(3, nn::relu), in));
  inner->set_name("encoder");
  nn::Sequential seq{nn::Input({4}), nn::ModuleRef(inner), nn::Dense(2)};
  seq.compile(optim::SGD({.learning_rate = 0.1}), nn::MeanSquaredError());
  check_round_trip(seq, {randf({8, 4}, 16)}, {randf({8, 2}, 17)}, "nested_seq.soma");

  auto in2 = nn::Input({4});
  auto inner2 = std::make_shared<nn::Model>(in2, nn::call(nn::Dense(3, nn::relu), in2));
  auto outer_in = nn::Input({4});
  auto out = nn::call(nn::Dense(2), nn::call(nn::ModuleRef(inner2), outer_in));
  nn::Model outer(outer_in, out);
  outer.compile(optim::SGD({.learning_rate = 0.1}), nn::MeanSquaredError());
  check_round_trip(outer, {randf({8, 4}, 18)}, {randf({8, 2}, 19)}, "nested_functional.soma");
}

TEST(FunctionalFile, ConfigReadsLikeKerasFunctional) {
  auto in = nn::Input({3}, {.name = "features"});
  auto d = nn::Dense(2);
  d.set_name("head");
  nn::Model model(in, nn::call(std::move(d), in));
  model.set_name("tiny");
  auto cfg = json::parse(serialization::model_config(model));
  EXPECT_EQ(cfg["class_name"], "Functional");
  EXPECT_EQ(cfg["config"]["name"], "tiny");
  EXPECT_EQ(cfg["config"]["layers"][0]["class_name"], "InputLayer");
  EXPECT_EQ(cfg["config"]["layers"][0]["config"]["batch_shape"], json::parse("[-1, 3]"));
  EXPECT_EQ(cfg["config"]["layers"][1]["inbound_nodes"], json::parse(R"([[["features", 0, 0]]])"));
  EXPECT_EQ(cfg["config"]["input_layers"], json::parse(R"([["features", 0, 0]])"));
  EXPECT_EQ(cfg["config"]["output_layers"], json::parse(R"([["head", 0, 0]])"));
  auto back = serialization::model_from_config(cfg.dump());
  EXPECT_EQ(serialization::model_config(*back), cfg.dump());
}

TEST(FunctionalFile, MergeLayerConfigsRoundTrip) {
  for (nn::ModuleRef m : {nn::ModuleRef(nn::Add()), nn::ModuleRef(nn::Multiply()), nn::ModuleRef(nn::Average()),
                          nn::ModuleRef(nn::Concatenate(1))}) {
    const std::string cfg = serialization::layer_config(*m);
    auto back = serialization::layer_from_config(cfg);
    EXPECT_EQ(back->type_name(), m->type_name());
    EXPECT_EQ(serialization::layer_config(*back), cfg);
  }
  EXPECT_TRUE(contains(serialization::layer_config(nn::Concatenate(1)), "\"axis\":1"));
}

TEST(FunctionalFile, DuplicateLayerNamesAreAClearSaveError) {
  auto in = nn::Input({3}, {.name = "x"});
  auto d = nn::Dense(2);
  d.set_name("x");
  nn::Model model(in, nn::call(std::move(d), in));
  const std::string e = error_of([&] { model.save(temp_file("dup.soma")); });
  EXPECT_TRUE(contains(e, "two layers (or inputs) named 'x'")) << e;
}

TEST(FunctionalFile, BrokenGraphReferencesAreClearLoadErrors) {
  auto in = nn::Input({3}, {.name = "x"});
  auto d = nn::Dense(2);
  d.set_name("head");
  nn::Model model(in, nn::call(std::move(d), in));
  const auto cfg = json::parse(serialization::model_config(model));

  auto missing = cfg;
  missing["config"]["layers"][1]["inbound_nodes"][0][0][0] = "nowhere";
  auto e = error_of([&] { serialization::model_from_config(missing.dump()); });
  EXPECT_TRUE(contains(e, "names layer 'nowhere', which is not in the model")) << e;

  auto bad_call = cfg;
  bad_call["config"]["output_layers"][0][1] = 3;
  e = error_of([&] { serialization::model_from_config(bad_call.dump()); });
  EXPECT_TRUE(contains(e, "asks for call 3 of layer 'head', which is called 1 time(s)")) << e;

  auto bad_output = cfg;
  bad_output["config"]["output_layers"][0][2] = 1;
  e = error_of([&] { serialization::model_from_config(bad_output.dump()); });
  EXPECT_TRUE(contains(e, "asks for output 1 of layer 'head', which has 1 output(s)")) << e;

  auto cycle = cfg;  // head consumes its own output
  cycle["config"]["layers"][1]["inbound_nodes"][0][0] = json::parse(R"(["head", 0, 0])");
  e = error_of([&] { serialization::model_from_config(cycle.dump()); });
  EXPECT_TRUE(contains(e, "never computed (a cycle in the graph)")) << e;
}

// ---- subclassed models ------------------------------------------------------------------------

class TinyNet : public nn::Model {
 public:
  explicit TinyNet(std::int64_t hidden = 8) : hidden_(hidden) {
    fc1_ = register_module("fc1", nn::Dense(hidden, nn::relu));
    fc2_ = register_module("fc2", nn::Dense(3));
  }
  std::string type_name() const override { return "TinyNet"; }
  std::int64_t hidden() const { return hidden_; }

 protected:
  Tensor forward(const Tensor& x) override { return (*fc2_)((*fc1_)(x)); }

 private:
  std::int64_t hidden_;
  nn::ModuleRef fc1_, fc2_;
};

// Keeps Model's type_name() ("Model").
class PlainNet : public nn::Model {
 public:
  PlainNet() { fc_ = register_module("fc", nn::Dense(2)); }

 protected:
  Tensor forward(const Tensor& x) override { return (*fc_)(x); }

 private:
  nn::ModuleRef fc_;
};

std::shared_ptr<TinyNet> built_tiny(std::int64_t hidden) {
  auto m = std::make_shared<TinyNet>(hidden);
  (void)(*m)(zeros({1, 5}));
  return m;
}

// TinyNet under a name only the registration test registers (registrations are process-wide).
class RegisteredNet : public TinyNet {
 public:
  using TinyNet::TinyNet;
  std::string type_name() const override { return "RegisteredNet"; }
};
std::shared_ptr<RegisteredNet> built_registered(std::int64_t hidden) {
  auto m = std::make_shared<RegisteredNet>(hidden);
  (void)(*m)(zeros({1, 5}));
  return m;
}

TEST(SubclassedFile, SavingWholeIsAClearErrorNamingTheWayOut) {
  auto m = built_tiny(8);
  auto e = error_of([&] { m->save(temp_file("tiny.soma")); });
  EXPECT_TRUE(contains(e, "is a subclassed model (type 'TinyNet')")) << e;
  EXPECT_TRUE(contains(e, "save_weights()")) << e;
  EXPECT_TRUE(contains(e, "serialization::register_model(\"TinyNet\"")) << e;

  PlainNet p;
  (void)p(zeros({1, 3}));
  e = error_of([&] { p.save(temp_file("plain.soma")); });
  EXPECT_TRUE(contains(e, "override type_name() and register a factory")) << e;
}

TEST(SubclassedFile, WeightsMoveBetweenInstancesByRegistrationName) {
  // Two instances: their layers get different automatic names ("dense_3" vs "dense_5"), yet the
  // weights match by the names the class registered them under.
  auto a = built_tiny(8);
  auto b = built_tiny(8);
  ASSERT_NE(a->named_children()[0].second->name(), b->named_children()[0].second->name());
  const std::string path = temp_file("tiny.weights.soma");
  a->save_weights(path);
  b->load_weights(path);
  fs::remove(path);
  Tensor x = randf({4, 5}, 20);
  EXPECT_TRUE(same_bits(a->predict(x), b->predict(x)));
  expect_same_weights(*a, *b);
}

TEST(SubclassedFile, ArchitectureMismatchIsAClearErrorNamingTheWeights) {
  auto a = built_tiny(8);
  auto b = built_tiny(16);
  const std::string path = temp_file("tiny8.weights.soma");
  a->save_weights(path);
  auto e = error_of([&] { b->load_weights(path); });
  EXPECT_TRUE(contains(e, "does not match model")) << e;
  EXPECT_TRUE(contains(e, "'fc1/kernel': file has [5, 8] f32, model has [5, 16] f32")) << e;
  EXPECT_TRUE(contains(e, "'fc2/kernel': file has [8, 3] f32, model has [16, 3] f32")) << e;

  PlainNet p;  // another class: its layer 'fc' is not in the file, 'fc1' and 'fc2' are not in it
  (void)p(zeros({1, 5}));
  e = error_of([&] { p.load_weights(path); });
  EXPECT_TRUE(contains(e, "layers missing from the file: 'fc'")) << e;
  EXPECT_TRUE(contains(e, "layers in the file but not in the model: 'fc1', 'fc2'")) << e;
  fs::remove(path);
}

TEST(SubclassedFile, Version1WeightsKeyedByLayerNameStillLoad) {
  // Version 1 keyed a subclassed model's layers by their layer names ("dense_7"); such a file
  // still loads into the model whose layers carry those names.
  auto a = built_tiny(4);
  const std::string path = temp_file("tiny_v1.weights.soma");
  a->save_weights(path);
  auto f = serialization::read_file(path);
  auto doc = json::parse(f.json);
  std::map<std::string, Tensor> renamed;
  for (auto& entry : doc["weights"]) {
    const std::string key = entry["layer"];
    std::string layer_name;
    for (auto& [k, child] : a->named_children())
      if (k == key) layer_name = child->name();
    ASSERT_FALSE(layer_name.empty()) << key;
    for (auto& w : entry["weights"]) renamed["weights/" + layer_name + "/" + w.get<std::string>()] =
        f.tensors.at("weights/" + key + "/" + w.get<std::string>());
    entry["layer"] = layer_name;
  }
  f.json = doc.dump();
  f.tensors = renamed;
  serialization::write_file(path, f);
  auto before = a->get_weights();
  auto b = built_tiny(4);
  a->set_weights(b->get_weights());  // overwritten: the load must bring the saved values back
  a->load_weights(path);
  fs::remove(path);
  for (auto& [k, t] : before) EXPECT_TRUE(same_bits(t, a->get_weights().at(k))) << k;
}

TEST(SubclassedFile, RegisteredFactorySavesAndLoadsWhole) {
  serialization::register_model(
      "RegisteredNet",
      [](const nn::Model& m) { return json{{"hidden", dynamic_cast<const RegisteredNet&>(m).hidden()}}.dump(); },
      [](const std::string& c) -> std::shared_ptr<nn::Model> {
        return built_registered(json::parse(c).at("hidden").get<std::int64_t>());
      });
  auto m = built_registered(6);
  m->set_name("my_tiny");
  m->compile(optim::Adam({.learning_rate = 0.01}), nn::SparseCategoricalCrossentropy({.from_logits = true}));
  check_round_trip(*m, {randf({12, 5}, 21)}, {labels(12, 3, 22)}, "tiny_whole.soma");

  const std::string path = temp_file("tiny_whole2.soma");
  m->save(path);
  auto loaded = load_model(path);
  fs::remove(path);
  EXPECT_EQ(loaded->name(), "my_tiny");
  ASSERT_NE(dynamic_cast<RegisteredNet*>(loaded.get()), nullptr);
  EXPECT_EQ(dynamic_cast<RegisteredNet&>(*loaded).hidden(), 6);
}

TEST(SubclassedFile, UnregisteredClassInAFileIsAClearLoadError) {
  auto e = error_of([] { serialization::model_from_config(R"({"class_name": "Mystery", "config": {}})"); });
  EXPECT_TRUE(contains(e, "model class 'Mystery' is neither built in (Sequential, Functional) nor registered")) << e;
}

// ---- learning-rate schedules ------------------------------------------------------------------

struct ScheduleCase {
  std::string name;
  std::function<optim::ScheduleRef()> make;
};
void PrintTo(const ScheduleCase& c, std::ostream* os) { *os << c.name; }

class ScheduleResume : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(ScheduleResume, LoadedOptimizerContinuesTheSameRateSequence) {
  const auto& c = GetParam();
  auto make = [] { return nn::Sequential{nn::Input({4}), nn::Dense(5, nn::relu), nn::Dense(2)}; };
  auto a = make();
  a.compile(optim::SGD({.learning_rate = c.make(), .momentum = 0.5}), nn::MeanSquaredError());
  Tensor x = randf({6, 4}, 30), y = randf({6, 2}, 31);
  for (int i = 0; i < 7; ++i) a.train_on_batch(x, y);  // past the first boundaries / decay steps

  const std::string path = temp_file("sched_" + c.name + ".soma");
  a.save(path);
  auto r = load_model(path);
  fs::remove(path);
  ASSERT_TRUE(r->optimizer().has_schedule());
  EXPECT_EQ(r->optimizer().common_options().learning_rate.schedule()->name(),
            a.optimizer().common_options().learning_rate.schedule()->name());
  EXPECT_EQ(r->optimizer().iterations(), 7);
  EXPECT_EQ(serialization::optimizer_config(r->optimizer()), serialization::optimizer_config(a.optimizer()));
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(r->optimizer().learning_rate(), a.optimizer().learning_rate()) << "step " << 7 + i;
    auto la = a.train_on_batch(x, y), lr = r->train_on_batch(x, y);
    ASSERT_EQ(la.at("loss"), lr.at("loss")) << "step " << 7 + i;
  }
  expect_same_weights(a, *r);
  // The schedule itself, far beyond the steps taken.
  auto& sa = *a.optimizer().common_options().learning_rate.schedule();
  auto& sr = *r->optimizer().common_options().learning_rate.schedule();
  for (std::int64_t s : {0, 1, 5, 10, 50, 1000, 100000}) EXPECT_EQ(sa(s), sr(s)) << s;
}

INSTANTIATE_TEST_SUITE_P(
    EverySchedule, ScheduleResume,
    ::testing::Values(
        ScheduleCase{"ExponentialDecay", [] {
                       return optim::ScheduleRef(optim::ExponentialDecay(
                           {.initial_learning_rate = 0.1, .decay_steps = 3, .decay_rate = 0.7}));
                     }},
        ScheduleCase{"ExponentialDecayStaircase", [] {
                       return optim::ScheduleRef(optim::ExponentialDecay(
                           {.initial_learning_rate = 0.1, .decay_steps = 4, .decay_rate = 0.5, .staircase = true}));
                     }},
        ScheduleCase{"PiecewiseConstantDecay", [] {
                       return optim::ScheduleRef(optim::PiecewiseConstantDecay({3, 8, 12}, {0.1, 0.05, 0.02, 0.01}));
                     }},
        ScheduleCase{"CosineDecay", [] {
                       return optim::ScheduleRef(
                           optim::CosineDecay({.initial_learning_rate = 0.1, .decay_steps = 15, .alpha = 0.1}));
                     }},
        ScheduleCase{"CosineDecayWarmup", [] {
                       return optim::ScheduleRef(optim::CosineDecay({.initial_learning_rate = 0.01,
                                                                     .decay_steps = 10,
                                                                     .warmup_target = 0.1,
                                                                     .warmup_steps = 9}));
                     }},
        ScheduleCase{"StepDecay", [] {
                       return optim::ScheduleRef(
                           optim::StepDecay({.initial_learning_rate = 0.1, .step_size = 5, .gamma = 0.5}));
                     }}),
    [](const auto& info) { return info.param.name; });

TEST(ScheduleFile, ScheduleConfigReadsLikeKeras) {
  optim::SGD sgd({.learning_rate = optim::ExponentialDecay(
                      {.initial_learning_rate = 0.1, .decay_steps = 100, .decay_rate = 0.96, .staircase = true})});
  auto cfg = json::parse(serialization::optimizer_config(sgd));
  EXPECT_EQ(cfg["config"]["learning_rate"]["class_name"], "ExponentialDecay") << cfg.dump();
  EXPECT_EQ(cfg["config"]["learning_rate"]["config"]["decay_rate"], 0.96) << cfg.dump();
  EXPECT_EQ(cfg["config"]["learning_rate"]["config"]["staircase"], true) << cfg.dump();
}

TEST(ScheduleFile, ScheduleSetAfterConstructionIsSaved) {
  optim::Adam adam({.learning_rate = 0.01});
  adam.set_schedule(optim::PiecewiseConstantDecay({2}, {0.5, 0.25}));
  auto back = serialization::optimizer_from_config(serialization::optimizer_config(adam));
  ASSERT_TRUE(back->has_schedule());
  EXPECT_EQ(back->learning_rate(), 0.5);
}

class Halving : public optim::LearningRateSchedule {
 public:
  explicit Halving(double start) : start_(start) {}
  double operator()(std::int64_t step) const override { return start_ / double(1 + step); }
  std::string name() const override { return "Halving"; }
  double start() const { return start_; }

 private:
  double start_;
};

TEST(ScheduleFile, CustomScheduleNeedsRegistration) {
  nn::Sequential m{nn::Input({2}), nn::Dense(1)};
  m.compile(optim::SGD({.learning_rate = Halving(0.2)}), nn::MeanSquaredError());
  m.train_on_batch(randf({4, 2}, 40), randf({4, 1}, 41));
  const std::string path = temp_file("custom_sched.soma");
  auto e = error_of([&] { m.save(path); });
  EXPECT_TRUE(contains(e, "learning-rate schedule 'Halving' has no config")) << e;
  EXPECT_TRUE(contains(e, "serialization::register_schedule")) << e;

  serialization::register_schedule(
      "Halving", [](const optim::LearningRateSchedule& s) { return json{{"start", dynamic_cast<const Halving&>(s).start()}}.dump(); },
      [](const std::string& c) { return optim::ScheduleRef(Halving(json::parse(c).at("start").get<double>())); });
  m.save(path);
  auto r = load_model(path);
  fs::remove(path);
  ASSERT_TRUE(r->optimizer().has_schedule());
  EXPECT_EQ(r->optimizer().iterations(), 1);
  EXPECT_DOUBLE_EQ(r->optimizer().learning_rate(), 0.1);
}

TEST(ScheduleFile, Version1ScheduleValueLoadsAsAConstant) {
  // Version 1 stored a schedule as its value at save time; such files still load, with that
  // constant rate.
  nn::Sequential m{nn::Input({2}), nn::Dense(1)};
  m.compile(optim::SGD({.learning_rate = 0.05}), nn::MeanSquaredError());
  const std::string path = temp_file("v1_sched.soma");
  m.save(path);
  auto f = serialization::read_file(path);
  auto doc = json::parse(f.json);
  doc["compile"]["optimizer"]["config"]["learning_rate"] = 0.025;
  doc["compile"]["optimizer"]["config"]["learning_rate_was_schedule"] = true;
  f.json = doc.dump();
  f.tensors.erase("optimizer/learning_rate");
  auto& keys = doc["optimizer_state"];
  keys.erase(std::remove(keys.begin(), keys.end(), json("learning_rate")), keys.end());
  f.json = doc.dump();
  serialization::write_file(path, f);
  std::string b;
  {
    std::ifstream is(path, std::ios::binary);
    b.assign(std::istreambuf_iterator<char>(is), {});
  }
  const std::uint32_t v1 = 1;
  std::memcpy(b.data() + 8, &v1, 4);
  {
    std::ofstream os(path, std::ios::binary | std::ios::trunc);
    os.write(b.data(), std::streamsize(b.size()));
  }
  auto r = load_model(path);
  fs::remove(path);
  EXPECT_FALSE(r->optimizer().has_schedule());
  EXPECT_EQ(r->optimizer().learning_rate(), 0.025);
}

}  // namespace

// nlohmann's get<std::int64_t>() casts a JSON float unchecked: 3e81 for "units" was undefined
// behaviour (found by fuzz_model_config; the input is in fuzz/regressions/model_config/).
TEST(ConfigIntegers, FloatsWhereIntegersBelongAreClearLoadErrors) {
  auto dense = [](const std::string& units) {
    return R"({"class_name": "Sequential", "config": {"input_shape": [-1, 4], "layers": [)"
           R"({"class_name": "Dense", "config": {"units": )" + units +
           R"(, "activation": "linear", "use_bias": true, "kernel_initializer": {"class_name": "zeros"},)"
           R"( "bias_initializer": {"class_name": "zeros"}, "kernel_regularizer": null,)"
           R"( "bias_regularizer": null, "dtype": "f32", "name": "d"}}]}})";
  };
  auto ok = serialization::model_from_config(dense("3"));
  EXPECT_EQ(ok->predict_on_batch(zeros({2, 4})).shape(), (Shape{2, 3}));
  // An integral float written by another tool still reads.
  EXPECT_EQ(serialization::model_from_config(dense("3.0"))->predict_on_batch(zeros({2, 4})).shape(),
            (Shape{2, 3}));
  for (const char* bad : {"3e81", "2.5", "-9.3e18", "9223372036854775808.0", "18446744073709551615"}) {
    auto e = error_of([&] { serialization::model_from_config(dense(bad)); });
    EXPECT_NE(e.find("expected an integer"), std::string::npos) << bad << ": " << e;
  }
}
