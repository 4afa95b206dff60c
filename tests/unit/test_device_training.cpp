// Models, optimisers and fit/evaluate/predict on a device (issue 22), tested against the CPU
// stand-in of tests/support/emulated_device.hpp: a Device::cuda(0) in host memory that runs the
// CPU kernels, so that everything here runs without a GPU. The GpuTraining tests at the end
// repeat the key checks on a real GPU and skip when none is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <vector>

#include "device_testing.hpp"
#include "emulated_device.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;

namespace {

using soma::testing::ModelFactory;
using soma::testing::same_weights;
using soma::testing::small_mlp;
using soma::testing::twin_models;
using Data = soma::testing::ClassData;
Data make_data(const Shape& sample, std::int64_t n, std::uint64_t seed) {
  return soma::testing::class_data(sample, n, seed);
}

// (Built by their Input; made in place, since a copied Module is unbuilt.)

Ref<nn::Model> small_cnn() {
  return std::make_shared<nn::Sequential>(
      nn::Input({8, 8, 2}), nn::Conv2D(4, {3, 3}, {.padding = "same", .activation = nn::relu}),
      nn::MaxPool2D(2), nn::BatchNormalization(), nn::Flatten(), nn::Dense(3));
}



optim::OptimizerRef make_optimizer(int which) {
  switch (which) {
    case 0: return optim::SGD({.learning_rate = 0.05, .momentum = 0.9});
    case 1: return optim::Adam({.learning_rate = 1e-2});
    default: return optim::RMSprop({.learning_rate = 1e-2});
  }
}

}  // namespace

// ---- the stand-in itself ----------------------------------------------------------------------

TEST(EmulatedDevice, TensorsLiveOffTheCpuAndCopiesAreCounted) {
  soma::testing::EmulatedCuda gpu;
  Tensor h = constant(std::vector<float>{1, 2, 3}, {3});
  cuda::reset_transfer_stats();
  Tensor d = h.to(gpu.device());
  EXPECT_EQ(d.device(), Device::cuda(0));
  EXPECT_THROW((void)d.to_vector<float>(), Error);  // no implicit host reads
  Tensor back = (d * 2.0 + 1.0).to(Device::cpu());
  EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{3, 5, 7}));
  const auto s = cuda::transfer_stats();
  EXPECT_EQ(s.host_to_device_copies, 1u);  // the scalars are made on the device
  EXPECT_EQ(s.host_to_device_bytes, 12u);
  EXPECT_EQ(s.device_to_host_copies, 1u);
  EXPECT_EQ(s.device_to_host_bytes, 12u);
}

TEST(EmulatedDevice, AnOpMixingCpuAndDeviceTensorsFailsClearly) {
  soma::testing::EmulatedCuda gpu;
  Tensor h = constant(std::vector<float>{1, 2, 3}, {3});
  Tensor d = h.to(gpu.device());
  try {
    (void)(h + d);
    FAIL() << "expected a device mismatch error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

TEST(EmulatedDevice, ModelCalledWithCpuInputAfterMoveFails) {
  soma::testing::EmulatedCuda gpu;
  auto model = small_mlp();
  model->to(gpu.device());
  EXPECT_THROW((void)(*model)(zeros({2, 6})), Error);
}

TEST(EmulatedDevice, ATensorThatOutlivesTheScopeIsFreedByTheStandIn) {
  Tensor kept;
  {
    soma::testing::EmulatedCuda gpu;
    kept = zeros({4}).to(gpu.device());
  }
  // Its memory goes back to the stand-in, not to the real backend's cache (nor leaks: the
  // sanitizer builds would report it).
  kept = Tensor();
  soma::testing::EmulatedCuda again;
  EXPECT_EQ(zeros({4}).to(again.device()).to(Device::cpu()).to_vector<float>(),
            std::vector<float>(4, 0.0f));
}

// ---- Module::to --------------------------------------------------------------------------------

TEST(ModuleTo, MovesEveryWeightAndKeepsTheVariables) {
  soma::testing::EmulatedCuda gpu;
  auto model = small_cnn();  // BatchNormalization: non-trainable moving statistics too
  auto before = model->parameters();
  std::vector<const TensorImpl*> impls;
  std::vector<Tensor> values;
  for (auto& v : before) {
    impls.push_back(v.value().impl_ptr().get());
    values.push_back(copy(v.value()));
  }
  ASSERT_GT(model->non_trainable_parameters().size(), 0u);
  model->to(gpu.device());
  EXPECT_EQ(model->device(), gpu.device());
  auto after = model->parameters();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].value().device(), gpu.device()) << after[i].name();
    EXPECT_EQ(before[i].value().device(), gpu.device()) << "old handle " << after[i].name();
    EXPECT_EQ(after[i].value().impl_ptr().get(), impls[i]) << after[i].name();
    EXPECT_TRUE(soma::testing::all_close(after[i].value().to(Device::cpu()), values[i], 0, 0));
  }
  // state_dict gives host copies; load_state_dict takes them back to the device.
  auto state = model->state_dict();
  for (auto& [k, t] : state) EXPECT_TRUE(t.device().is_cpu()) << k;
  model->load_state_dict(state);
  model->to(Device::cpu());
  for (auto& v : model->parameters()) EXPECT_TRUE(v.value().device().is_cpu());
}

TEST(ModuleTo, LayersBuiltAfterTheMoveAreCreatedOnTheDevice) {
  soma::testing::EmulatedCuda gpu;
  nn::Sequential model{nn::Dense(4, nn::relu), nn::Dense(2)};  // no Input: built on first call
  model.to(gpu.device());
  Tensor y = model(zeros({3, 5}).to(gpu.device()));
  EXPECT_EQ(y.device(), gpu.device());
  ASSERT_EQ(model.parameters().size(), 4u);
  for (auto& v : model.parameters()) EXPECT_EQ(v.value().device(), gpu.device()) << v.name();
}

TEST(ModuleTo, OptimizerSlotsFollowAMovedModel) {
  soma::testing::EmulatedCuda gpu;
  auto [cpu, dev] = twin_models(small_mlp);
  Data d = make_data({6}, 32, 3);
  for (auto* m : {&cpu, &dev})
    (*m)->compile(optim::Adam({.learning_rate = 1e-2}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}));
  // One step on the CPU (slots made there), then the move, then more steps.
  cpu->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .shuffle = false, .verbose = 0});
  dev->fit(d.x, d.y, {.epochs = 1, .batch_size = 32, .shuffle = false, .verbose = 0});
  dev->to(gpu.device());
  cpu->fit(d.x, d.y, {.epochs = 3, .batch_size = 8, .shuffle = false, .verbose = 0});
  dev->fit(d.x, d.y, {.epochs = 3, .batch_size = 8, .shuffle = false, .verbose = 0});
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
  for (auto& [k, t] : dev->optimizer().state_dict()) EXPECT_TRUE(t.device().is_cpu()) << k;
}

// ---- training parity: the device gives the CPU's weights ----------------------------------------

class DeviceParity : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(DeviceParity, FitGivesTheCpuWeights) {
  const auto [model_kind, opt] = GetParam();
  soma::testing::EmulatedCuda gpu;
  ModelFactory make = model_kind == 0 ? small_mlp : small_cnn;
  Shape sample = model_kind == 0 ? Shape{6} : Shape{8, 8, 2};
  auto [cpu, dev] = twin_models(make);
  dev->to(gpu.device());
  Data d = make_data(sample, 40, 11);
  for (auto* m : {&cpu, &dev})
    (*m)->compile(make_optimizer(opt), nn::SparseCategoricalCrossentropy({.from_logits = true}),
                  {"accuracy"});
  model::FitOptions fo{.epochs = 3, .batch_size = 8, .verbose = 0, .seed = 5};
  auto hc = cpu->fit(d.x, d.y, fo);
  auto hd = dev->fit(d.x, d.y, fo);
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
  for (const char* k : {"loss", "accuracy"})
    for (std::size_t e = 0; e < 3; ++e)
      EXPECT_NEAR(hd.history.at(k).at(e), hc.history.at(k).at(e), 1e-6) << k << " epoch " << e;

  // evaluate and predict: the CPU's numbers; predictions come back on the host.
  auto ec = cpu->evaluate(d.x, d.y, {.batch_size = 16, .verbose = 0});
  auto ed = dev->evaluate(d.x, d.y, {.batch_size = 16, .verbose = 0});
  for (auto& [k, v] : ec) EXPECT_NEAR(ed.at(k), v, 1e-6) << k;
  Tensor pc = cpu->predict(d.x, {.batch_size = 16});
  Tensor pd = dev->predict(d.x, {.batch_size = 16});
  EXPECT_TRUE(pd.device().is_cpu());
  EXPECT_TRUE(soma::testing::all_close(pd, pc, 1e-6, 1e-6));
  // Device inputs give device outputs.
  Tensor pdd = dev->predict_on_batch(d.x.slice(0, 0, 4).to(gpu.device()));
  EXPECT_EQ(pdd.device(), gpu.device());
  EXPECT_TRUE(soma::testing::all_close(pdd.to(Device::cpu()), pc.slice(0, 0, 4), 1e-6, 1e-6));
}

std::string parity_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  static const char* const models[] = {"Mlp", "Cnn"};
  static const char* const opts[] = {"SGD", "Adam", "RMSprop"};
  return std::string(models[std::get<0>(info.param)]) + opts[std::get<1>(info.param)];
}
INSTANTIATE_TEST_SUITE_P(ModelsAndOptimizers, DeviceParity,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(0, 1, 2)),
                         parity_name);

TEST(DeviceTraining, MetricsAndWeightedLossesMatchTheCpu) {
  soma::testing::EmulatedCuda gpu;
  auto [cpu, dev] = twin_models(small_mlp);
  dev->to(gpu.device());
  Data d = make_data({6}, 24, 4);
  Tensor sw = soma::testing::rand_tensor({24}, 9, 0.1, 2.0).cast(DType::f32);
  for (auto* m : {&cpu, &dev})
    (*m)->compile(optim::SGD({.learning_rate = 0.1}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}),
                  {"accuracy", "sparse_top_k_categorical_accuracy"});
  // (Precision and Recall are checked with one-hot targets below.)
  model::FitOptions fo{.epochs = 2, .batch_size = 8, .shuffle = false, .sample_weight = sw,
                       .verbose = 0};
  auto hc = cpu->fit(d.x, d.y, fo);
  auto hd = dev->fit(d.x, d.y, fo);
  for (auto& [k, v] : hc.history)
    for (std::size_t e = 0; e < v.size(); ++e)
      EXPECT_NEAR(hd.history.at(k).at(e), v[e], 1e-6) << k;
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
}

TEST(DeviceTraining, PrecisionRecallAndRegressionMetricsMatchTheCpu) {
  soma::testing::EmulatedCuda gpu;
  auto [cpu, dev] = twin_models(small_mlp);
  dev->to(gpu.device());
  Data d = make_data({6}, 24, 5);
  Tensor y = one_hot(d.y, 3);
  Tensor sw = soma::testing::rand_tensor({24}, 10, 0.1, 2.0).cast(DType::f32);
  for (auto* m : {&cpu, &dev})
    (*m)->compile(optim::SGD({.learning_rate = 0.1}),
                  nn::CategoricalCrossentropy({.from_logits = true}),
                  {metrics::Precision(), metrics::Recall({.class_id = 1}), "mse", "mae",
                   "categorical_accuracy"});
  model::FitOptions fo{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0};
  auto hc = cpu->fit(d.x, y, fo);
  auto hd = dev->fit(d.x, y, fo);
  for (auto& [k, v] : hc.history)
    for (std::size_t e = 0; e < v.size(); ++e)
      EXPECT_NEAR(hd.history.at(k).at(e), v[e], 1e-6) << k;
  auto ec = cpu->evaluate(d.x, y, {.batch_size = 8, .verbose = 0, .sample_weight = sw});
  cuda::reset_transfer_stats();
  auto ed = dev->evaluate(d.x, y, {.batch_size = 8, .verbose = 0, .sample_weight = sw});
  // In: x, y and the weights of 3 batches. Out: the loss and each of the 5 metrics, once.
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 9u);
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 6u);
  for (auto& [k, x] : ec) EXPECT_NEAR(ed.at(k), x, 1e-6) << k;
}

TEST(DeviceTraining, OutOfRangeLabelsAreRefusedFromTheHostCopy) {
  soma::testing::EmulatedCuda gpu;
  auto model = small_mlp();
  model->to(gpu.device());
  model->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}));
  Data d = make_data({6}, 8, 1);
  Tensor bad = constant(std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 0}, {8});
  cuda::reset_transfer_stats();
  try {
    model->fit(d.x, bad, {.epochs = 1, .batch_size = 8, .verbose = 0});
    FAIL() << "expected a label range error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 0u);
}

TEST(DeviceTraining, DatasetFitAndValidationMatchTheCpu) {
  soma::testing::EmulatedCuda gpu;
  auto [cpu, dev] = twin_models(small_mlp);
  dev->to(gpu.device());
  Data d = make_data({6}, 32, 8), v = make_data({6}, 12, 9);
  auto train = data::Dataset::from_tensor_slices({d.x, d.y}).batch(8);
  for (auto* m : {&cpu, &dev})
    (*m)->compile(optim::Adam({.learning_rate = 1e-2}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  model::FitOptions fo{.epochs = 2, .validation_data = model::ValidationData(v.x, v.y),
                       .verbose = 0};
  auto hc = cpu->fit(train, fo);
  auto hd = dev->fit(train, fo);
  for (auto& [k, vals] : hc.history)
    for (std::size_t e = 0; e < vals.size(); ++e)
      EXPECT_NEAR(hd.history.at(k).at(e), vals[e], 1e-6) << k;
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
  auto ec = cpu->evaluate(train, {.verbose = 0});
  auto ed = dev->evaluate(train, {.verbose = 0});
  for (auto& [k, x] : ec) EXPECT_NEAR(ed.at(k), x, 1e-6) << k;
}

TEST(DeviceTraining, GradientClippingAndWeightDecayMatchTheCpu) {
  soma::testing::EmulatedCuda gpu;
  const optim::SGDOptions options[] = {
      {.learning_rate = 0.5, .weight_decay = 0.01, .clipnorm = 0.05},
      {.learning_rate = 0.5, .global_clipnorm = 0.05},
      {.learning_rate = 0.5, .clipvalue = 0.01}};
  for (const auto& o : options) {
    auto [cpu, dev] = twin_models(small_mlp);
    dev->to(gpu.device());
    Data d = make_data({6}, 16, 12);
    for (auto* m : {&cpu, &dev})
      (*m)->compile(optim::SGD(o), nn::SparseCategoricalCrossentropy({.from_logits = true}));
    cpu->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
    cuda::reset_transfer_stats();
    dev->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
    EXPECT_EQ(cuda::transfer_stats().device_to_host_copies, 2u);  // the loss, once per epoch
    EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
  }
}

TEST(DeviceTraining, DropoutDrawsItsMaskOnTheDevice) {
  soma::testing::EmulatedCuda gpu;
  auto make = []() -> Ref<nn::Model> {
    return std::make_shared<nn::Sequential>(nn::Input({6}), nn::Dense(16, nn::relu),
                                            nn::Dropout(0.5), nn::Dense(3));
  };
  auto [cpu, dev] = twin_models(make);
  dev->to(gpu.device());
  Data d = make_data({6}, 16, 13);
  for (auto* m : {&cpu, &dev})
    (*m)->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}));
  set_seed(21);
  cpu->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  set_seed(21);
  cuda::reset_transfer_stats();
  dev->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  // x and y of 4 steps, nothing else: Dropout::forward makes its rate on the device.
  EXPECT_EQ(cuda::transfer_stats().host_to_device_copies, 8u);
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
}

TEST(DeviceTraining, FunctionalModelsMoveAndTrain) {
  soma::testing::EmulatedCuda gpu;
  auto make = []() -> Ref<nn::Model> {
    auto in = nn::Input({6});
    auto h = nn::call(nn::Dense(8, nn::relu), in);
    return std::make_shared<nn::Model>(in, nn::call(nn::Dense(3), h));
  };
  auto [cpu, dev] = twin_models(make);
  dev->to(gpu.device());
  for (auto& v : dev->parameters()) EXPECT_EQ(v.value().device(), gpu.device()) << v.name();
  Data d = make_data({6}, 16, 14);
  for (auto* m : {&cpu, &dev})
    (*m)->compile(optim::Adam({.learning_rate = 1e-2}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  cpu->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  dev->fit(d.x, d.y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  EXPECT_TRUE(same_weights(*cpu, *dev, 1e-6));
}

// ---- what a step copies ----------------------------------------------------------------------

TEST(DeviceTraining, AStepCopiesItsBatchInAndNothingOut) {
  soma::testing::EmulatedCuda gpu;
  auto model = small_mlp();
  model->to(gpu.device());
  model->compile(optim::Adam({.learning_rate = 1e-3}),
                 nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  Data d = make_data({6}, 64, 2);
  // A first step makes the optimiser's slots (on the device: no copies either).
  model->fit(d.x.slice(0, 0, 8), d.y.slice(0, 0, 8), {.epochs = 1, .batch_size = 8, .verbose = 0});

  std::vector<cuda::TransferStats> at_batch_begin;
  auto probe = std::make_shared<callbacks::LambdaCallback>();
  probe->on_train_batch_begin_fn = [&](std::int64_t, model::Logs&) {
    at_batch_begin.push_back(cuda::transfer_stats());
  };
  cuda::reset_transfer_stats();
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .callbacks = {probe}, .verbose = 0});
  const auto end = cuda::transfer_stats();
  ASSERT_EQ(at_batch_begin.size(), 4u);
  const std::uint64_t batch_bytes = 16 * 6 * 4 + 16 * 8;  // x f32, y i64
  for (std::size_t i = 1; i < at_batch_begin.size(); ++i) {
    const auto &now = at_batch_begin[i], &before = at_batch_begin[i - 1];
    EXPECT_EQ(now.host_to_device_copies - before.host_to_device_copies, 2u) << "step " << i - 1;
    EXPECT_EQ(now.host_to_device_bytes - before.host_to_device_bytes, batch_bytes);
    EXPECT_EQ(at_batch_begin[i].device_to_host_copies, 0u) << "a read back inside the epoch";
  }
  EXPECT_EQ(end.host_to_device_copies, 8u);
  // At the epoch's end: the loss sum and the accuracy's sum, one read each.
  EXPECT_EQ(end.device_to_host_copies, 2u);
}

TEST(DeviceTraining, EpochLevelCallbacksReadNothingInsideTheEpoch) {
  soma::testing::EmulatedCuda gpu;
  auto model = small_mlp();
  model->to(gpu.device());
  model->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}));
  Data d = make_data({6}, 32, 16);
  std::vector<std::uint64_t> reads;
  auto probe = std::make_shared<callbacks::LambdaCallback>();
  probe->on_train_batch_begin_fn = [&](std::int64_t, model::Logs&) {
    reads.push_back(cuda::transfer_stats().device_to_host_copies);
  };
  cuda::reset_transfer_stats();
  model->fit(d.x, d.y,
             {.epochs = 2, .batch_size = 8,
              .callbacks = {callbacks::EarlyStopping({.monitor = "loss", .patience = 5}),
                            callbacks::ReduceLROnPlateau({.monitor = "loss"}), probe},
              .verbose = 0});
  ASSERT_EQ(reads.size(), 8u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(reads[i], 0u) << "batch " << i;
  for (std::size_t i = 4; i < 8; ++i) EXPECT_EQ(reads[i], 1u) << "batch " << i;  // epoch 1's
}

TEST(DeviceTraining, ACallbackThatReadsBatchLogsGetsThem) {
  soma::testing::EmulatedCuda gpu;
  auto [cpu, dev] = twin_models(small_mlp);
  dev->to(gpu.device());
  Data d = make_data({6}, 32, 6);
  std::vector<double> lc, ld;
  auto record = [](std::vector<double>& out) {
    auto cb = std::make_shared<callbacks::LambdaCallback>();
    cb->on_train_batch_end_fn = [&out](std::int64_t, model::Logs& logs) {
      out.push_back(logs.at("loss"));
    };
    return cb;
  };
  for (auto* m : {&cpu, &dev})
    (*m)->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}));
  cpu->fit(d.x, d.y,
           {.epochs = 1, .batch_size = 8, .shuffle = false, .callbacks = {record(lc)}, .verbose = 0});
  dev->fit(d.x, d.y,
           {.epochs = 1, .batch_size = 8, .shuffle = false, .callbacks = {record(ld)}, .verbose = 0});
  ASSERT_EQ(ld.size(), 4u);
  for (std::size_t i = 0; i < lc.size(); ++i) EXPECT_NEAR(ld[i], lc[i], 1e-6);
}

TEST(DeviceTraining, TheProgressBarOnATerminalShowsTheLogs) {
  soma::testing::EmulatedCuda gpu;
  auto model = small_mlp();
  model->to(gpu.device());
  model->compile("sgd", nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  Data d = make_data({6}, 64, 15);
  std::ostringstream out;
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 8, .verbose = 1, .output = &out,
                        .is_terminal = true});
  const std::string s = out.str();
  EXPECT_NE(s.find("8/8"), std::string::npos) << s;
  EXPECT_NE(s.find("loss: "), std::string::npos) << s;
  EXPECT_NE(s.find("accuracy: "), std::string::npos) << s;
}

// ---- on a real GPU ---------------------------------------------------------------------------

TEST(GpuTraining, FitOnTheGpuGivesTheCpuWeights) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  const bool tf32 = cuda::allow_tf32();
  cuda::set_allow_tf32(false);
  for (ModelFactory make : {small_mlp, small_cnn}) {
    Shape sample = make == small_mlp ? Shape{6} : Shape{8, 8, 2};
    auto [cpu, dev] = twin_models(make);
    dev->to(Device::cuda(0));
    Data d = make_data(sample, 40, 11);
    for (auto* m : {&cpu, &dev})
      (*m)->compile(optim::Adam({.learning_rate = 1e-2}),
                    nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    model::FitOptions fo{.epochs = 2, .batch_size = 8, .verbose = 0, .seed = 5};
    auto hc = cpu->fit(d.x, d.y, fo);
    auto hd = dev->fit(d.x, d.y, fo);
    EXPECT_TRUE(same_weights(*cpu, *dev, 1e-4));
    EXPECT_NEAR(hd.history.at("loss").back(), hc.history.at("loss").back(), 1e-4);
    Tensor pd = dev->predict(d.x);
    EXPECT_TRUE(pd.device().is_cpu());
    EXPECT_TRUE(soma::testing::all_close(pd, cpu->predict(d.x), 1e-4, 1e-4));
  }
  cuda::set_allow_tf32(tf32);
}

TEST(GpuTraining, AStepCopiesItsBatchInAndNothingOut) {
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason();
  auto model = small_mlp();
  model->to(Device::cuda(0));
  model->compile(optim::Adam({.learning_rate = 1e-3}),
                 nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  Data d = make_data({6}, 64, 2);
  model->fit(d.x.slice(0, 0, 8), d.y.slice(0, 0, 8), {.epochs = 1, .batch_size = 8, .verbose = 0});
  cuda::reset_transfer_stats();
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .verbose = 0});
  const auto s = cuda::transfer_stats();
  EXPECT_EQ(s.host_to_device_copies, 8u);
  EXPECT_EQ(s.device_to_host_copies, 2u);
}
