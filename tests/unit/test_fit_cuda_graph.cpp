// fit replaying its training step as a CUDA graph (FitOptions::cuda_graph, issue 23,
// docs/cuda.md "CUDA graphs"), on the CPU stand-in device with the emulated capture of
// tests/support/emulated_capture.hpp: captured work is recorded, not run, and a launch re-runs
// the recorded kernels on the buffers they were recorded with (attributes frozen, buffers read
// anew). fit with cuda_graph on must then give the weights and history of fit with it off, bit
// for bit, while most steps are replays. The real GPU's case is test_cuda_graph.cpp's.
#include <gtest/gtest.h>

#include "../../src/core/device_backend.hpp"
#include "device_testing.hpp"
#include "emulated_capture.hpp"
#include "update_cases.hpp"
#include "soma/optim/loss_scale.hpp"
#include "soma/soma.hpp"

using namespace soma;
using soma::testing::EmulatedCudaGraphs;
using nn::FitOptions;
using nn::History;
using nn::ValidationData;

namespace {

struct Trained {
  Ref<nn::Model> model;
  History history;
};

using Compile = void (*)(nn::Model&);

// Trains a fresh small MLP (the same initial weights for each call: seeded) on the stand-in.
Trained train(Compile compile, bool graph, FitOptions o, std::int64_t n = 130) {
  const auto data = soma::testing::class_data({6}, n, 3);
  set_seed(5);
  Trained r{soma::testing::small_mlp(), {}};
  r.model->to(EmulatedCudaGraphs::device());
  compile(*r.model);
  o.cuda_graph = graph;
  o.verbose = 0;
  r.history = r.model->fit(data.x, data.y, o);
  return r;
}

::testing::AssertionResult same_runs(const Trained& a, const Trained& b) {
  auto pa = a.model->parameters(), pb = b.model->parameters();
  if (pa.size() != pb.size()) return ::testing::AssertionFailure() << "parameter counts differ";
  for (std::size_t i = 0; i < pa.size(); ++i) {
    auto r = soma::testing::all_close(pb[i].value().to(Device::cpu()),
                                      pa[i].value().to(Device::cpu()), 0.0, 0.0);
    if (!r) return r << " (parameter " << i << ")";
  }
  if (a.history.history != b.history.history) {
    auto f = ::testing::AssertionFailure() << "histories differ:";
    for (const auto& [k, v] : a.history.history)
      for (std::size_t e = 0; e < v.size(); ++e)
        f << " " << k << "[" << e << "] " << v[e] << " vs "
          << (b.history.history.count(k) && e < b.history.history.at(k).size()
                  ? b.history.history.at(k)[e]
                  : -1.0);
    return f;
  }
  return ::testing::AssertionSuccess();
}

void sgd(nn::Model& m) {
  m.compile(optim::SGD({.learning_rate = 0.1, .momentum = 0.9}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
}

// Bias corrections, a decaying rate and a weight decay: every per-step scalar changes each step.
void adamw_schedule(nn::Model& m) {
  m.compile(optim::AdamW({.learning_rate = optim::ExponentialDecay({.initial_learning_rate = 0.01,
                                                                    .decay_steps = 3,
                                                                    .decay_rate = 0.9}),
                          .weight_decay = 0.01}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
}

TEST(FitCudaGraph, SgdReplaysGiveTheEagerWeightsAndHistory) {
  EmulatedCudaGraphs gpu;
  // 130 samples in batches of 16: 8 full batches and a last one of 2, per epoch.
  const FitOptions o{.epochs = 4, .batch_size = 16, .shuffle = false};
  const Trained off = train(sgd, false, o), on = train(sgd, true, o);
  EXPECT_TRUE(same_runs(off, on));
  const auto& st = on.model->step_graph_stats();
  // Per epoch: 3 warm-up steps, 1 captured, 4 replayed, the short batch eager.
  EXPECT_EQ(st.captures, 4);
  EXPECT_EQ(st.replays, 16);
  EXPECT_EQ(st.eager_steps, 16);
  EXPECT_EQ(EmulatedCudaGraphs::stats().captures, 4);
  EXPECT_EQ(EmulatedCudaGraphs::stats().launches, 4 + 16);  // each capture is launched once
  EXPECT_EQ(EmulatedCudaGraphs::stats().failed, 0);
  EXPECT_EQ(off.model->step_graph_stats().replays, 0);
}

TEST(FitCudaGraph, AdamWWithAScheduleShuffledAndValidatedReplaysExactly) {
  EmulatedCudaGraphs gpu;
  const auto val = soma::testing::class_data({6}, 20, 9);
  const FitOptions o{.epochs = 3,
                     .batch_size = 16,
                     .shuffle = true,
                     .validation_data = ValidationData(val.x, val.y),
                     .seed = 7};
  const Trained off = train(adamw_schedule, false, o), on = train(adamw_schedule, true, o);
  EXPECT_TRUE(same_runs(off, on));
  EXPECT_EQ(on.model->step_graph_stats().replays, 12);
  EXPECT_EQ(on.model->optimizer().iterations(), off.model->optimizer().iterations());
  EXPECT_EQ(on.model->optimizer().iterations(), 27);
  EXPECT_FALSE(on.model->optimizer().device_step_scalars());  // off again after fit
}

// bf16 autocast: the weights' kept casts (src/ops/autocast_cache.hpp) are made again inside the
// graph and after each replay, so replays cast the weights they change.
TEST(FitCudaGraph, Bf16AutocastReplaysExactly) {
  EmulatedCudaGraphs gpu;
  const Compile bf16 = [](nn::Model& m) {
    m.compile(optim::Adam({.learning_rate = 0.01}),
              nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"},
              {.mixed_precision = "bf16"});
  };
  const FitOptions o{.epochs = 2, .batch_size = 16, .shuffle = false};
  const Trained off = train(bf16, false, o), on = train(bf16, true, o);
  EXPECT_TRUE(same_runs(off, on));
  EXPECT_EQ(on.model->step_graph_stats().replays, 8);
}

// A callback that reads the running logs after every batch (as the progress bar does on a
// terminal, every 50 ms): each replay's read sees the sums with that step in them.
struct BatchLogRecorder : callbacks::Callback {
  std::vector<nn::Logs> logs;
  void on_train_batch_end(std::int64_t, nn::Logs& l) override { logs.push_back(l); }
};

TEST(FitCudaGraph, PerBatchLogsAreThoseOfEagerSteps) {
  EmulatedCudaGraphs gpu;
  auto run = [](bool graph) {
    auto rec = std::make_shared<BatchLogRecorder>();
    FitOptions o{.epochs = 2, .batch_size = 16, .shuffle = false};
    o.callbacks = {rec};
    const Trained t = train(sgd, graph, o);
    return std::pair{rec->logs, t.model->step_graph_stats().replays};
  };
  const auto [off, off_replays] = run(false);
  const auto [on, on_replays] = run(true);
  EXPECT_EQ(off_replays, 0);
  EXPECT_EQ(on_replays, 8);
  ASSERT_EQ(off.size(), 18u);
  EXPECT_EQ(on, off);
  EXPECT_EQ(on[6].count("accuracy"), 1u);
}

// The update ops' step-scalars form on the stand-in device (its composite kernels read the values
// as device tensors): the results of the attributes, bit for bit.
TEST(FitCudaGraph, StepScalarsOnTheDeviceGiveTheAttributesResults) {
  soma::testing::EmulatedCuda gpu;
  for (DType t : {DType::f32, DType::f64})
    EXPECT_TRUE(soma::update_cases::step_scalars_match(gpu.device(), t, true));
}

// Without the device step scalars a replay repeats the captured step's bias correction: the
// emulation shows the difference (the reason fit turns them on).
TEST(FitCudaGraph, AttributesAreFrozenByACaptureStepScalarsAreNot) {
  EmulatedCudaGraphs gpu;
  const detail::DeviceBackend* be = detail::device_backend(DeviceKind::CUDA);
  auto run = [&](bool device_scalars, bool capture) {
    Variable w(soma::testing::rand_tensor({4, 3}, 1, -1, 1, DType::f32).to(gpu.device()));
    const Tensor x = soma::testing::rand_tensor({8, 4}, 2, -1, 1, DType::f32).to(gpu.device());
    optim::Adam opt({.learning_rate = 0.05});
    opt.set_device_step_scalars(device_scalars);
    auto step = [&] {
      GradientTape tape;
      const Tensor loss = mean(square(matmul(x, w.value())));
      opt.apply_gradients(tape.gradient(loss, {w}), {w});
    };
    step();  // makes the slots
    if (!capture) {
      for (int i = 0; i < 4; ++i) step();
    } else {
      opt.defer_step_scalars(true);
      be->begin_capture(0);
      step();
      std::string why;
      void* g = be->end_capture(0, &why);
      EXPECT_NE(g, nullptr) << why;
      opt.defer_step_scalars(false);
      opt.flush_step_scalars();
      be->launch_graph(g, 0);
      for (int i = 0; i < 3; ++i) {
        opt.replay_step();
        be->launch_graph(g, 0);
      }
      be->destroy_graph(g, 0);
    }
    EXPECT_EQ(opt.iterations(), 5);
    return w.value().to(Device::cpu());
  };
  const Tensor eager = run(false, false);
  EXPECT_TRUE(soma::testing::all_close(run(true, false), eager, 0.0, 0.0));
  EXPECT_TRUE(soma::testing::all_close(run(true, true), eager, 0.0, 0.0));
  EXPECT_FALSE(soma::testing::all_close(run(false, true), eager, 1e-6, 1e-6));
}

TEST(FitCudaGraph, AHostReadInTheStepFailsTheCaptureAndTheStepRunsEagerly) {
  EmulatedCudaGraphs gpu;
  // A metric whose device path reads the predictions on the host.
  auto compile = [](nn::Model& m) {
    m.compile(optim::SGD({.learning_rate = 0.1}),
              nn::SparseCategoricalCrossentropy({.from_logits = true}),
              {metrics::MetricRef(metrics::SparseTopKCategoricalAccuracy({.k = 2}))});
  };
  const FitOptions o{.epochs = 2, .batch_size = 16, .shuffle = false};
  const Trained off = train(compile, false, o), on = train(compile, true, o);
  EXPECT_TRUE(same_runs(off, on));
  const auto& st = on.model->step_graph_stats();
  EXPECT_EQ(st.captures, 0);
  EXPECT_EQ(st.replays, 0);
  EXPECT_EQ(st.eager_steps, 18);
  EXPECT_NE(st.reason.find("capture failed"), std::string::npos) << st.reason;
  EXPECT_NE(st.reason.find("a copy to the host during a capture"), std::string::npos) << st.reason;
  EXPECT_EQ(on.model->optimizer().iterations(), 18);
}

// Dropout draws new numbers every step: its launch refuses to be captured (a replay would repeat
// the mask), the capture fails and fit trains eagerly, as without cuda_graph.
TEST(FitCudaGraph, ARandomOpFailsTheCapture) {
  EmulatedCudaGraphs gpu;
  auto train_dropout = [](bool graph) {
    const auto data = soma::testing::class_data({6}, 130, 3);
    set_seed(5);
    Ref<nn::Model> m = std::make_shared<nn::Sequential>(
        nn::Input({6}), nn::Dense(16, nn::relu), nn::Dropout(0.3), nn::Dense(3));
    m->to(EmulatedCudaGraphs::device());
    sgd(*m);
    History h = m->fit(data.x, data.y, {.epochs = 2, .batch_size = 16, .shuffle = false,
                                        .verbose = 0, .cuda_graph = graph});
    return Trained{m, h};
  };
  const Trained off = train_dropout(false), on = train_dropout(true);
  EXPECT_TRUE(same_runs(off, on));
  const auto& st = on.model->step_graph_stats();
  EXPECT_EQ(st.replays, 0);
  EXPECT_NE(st.reason.find("cannot be captured"), std::string::npos) << st.reason;
}

TEST(FitCudaGraph, StepsThatCannotBeCapturedSaySo) {
  EmulatedCudaGraphs gpu;
  const FitOptions o{.epochs = 1, .batch_size = 16, .shuffle = false};
  struct Case {
    Compile compile;
    const char* reason;
  };
  const Case cases[] = {
      {[](nn::Model& m) {
         m.compile(optim::LossScaleOptimizer(optim::SGD({.learning_rate = 0.1})),
                   nn::SparseCategoricalCrossentropy({.from_logits = true}));
       },
       "loss scaling"},
      {[](nn::Model& m) {
         m.compile(optim::Nadam(), nn::SparseCategoricalCrossentropy({.from_logits = true}));
       },
       "Nadam"},
      {[](nn::Model& m) {
         m.compile(optim::RMSprop({.learning_rate = optim::ExponentialDecay(
                                       {.initial_learning_rate = 0.01, .decay_steps = 3,
                                        .decay_rate = 0.9})}),
                   nn::SparseCategoricalCrossentropy({.from_logits = true}));
       },
       "schedule"},
      {[](nn::Model& m) {
         m.compile(optim::SGD({.learning_rate = 0.1, .gradient_accumulation_steps = 2}),
                   nn::SparseCategoricalCrossentropy({.from_logits = true}));
       },
       "accumulates gradients"},
  };
  for (const Case& c : cases) {
    const Trained off = train(c.compile, false, o), on = train(c.compile, true, o);
    EXPECT_TRUE(same_runs(off, on)) << c.reason;
    const auto& st = on.model->step_graph_stats();
    EXPECT_EQ(st.replays, 0) << c.reason;
    EXPECT_NE(st.reason.find(c.reason), std::string::npos) << st.reason;
  }
  // RMSprop with a constant rate: its attributes do not change, so it replays.
  const Compile rms = [](nn::Model& m) {
    m.compile(optim::RMSprop({.learning_rate = 0.01}),
              nn::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  };
  const Trained off = train(rms, false, o), on = train(rms, true, o);
  EXPECT_TRUE(same_runs(off, on));
  EXPECT_EQ(on.model->step_graph_stats().replays, 4);
}

}  // namespace
