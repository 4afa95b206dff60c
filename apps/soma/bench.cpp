// soma bench: the soma side of the performance issue's benchmark suite, one machine-readable
// line per workload and configuration:
//   bench workload=<name> threads=<n> batch=<b> value=<x> unit=<unit>
// Data is already in memory, so the figures measure the framework alone: Fashion-MNIST's
// training set for mlp_train and lenet_train when Debian's dataset-fashion-mnist is installed
// (as bench/libtorch/bench_torch.cpp reads it), synthetic data otherwise. The same figure over
// process CPU time goes to stderr as "cpu workload=..." (see docs/performance.md).
// --precision bf16 runs the workloads under bf16 autocast (training through compile's
// mixed_precision, the rest inside an AutocastScope); the line then ends in "precision=bf16".
// --device cuda runs them on a GPU (issue 23; bench/gpu_compare.sh puts PyTorch beside it): the
// data is copied to the device once, training runs fit() over it (nothing read back inside an
// epoch), every timed section ends with cuda::synchronize(), and the line ends in
// "device=cuda:0". Precision tf32 there is f32 with TF32 products, f32 is full f32 products.
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "common.hpp"

namespace soma::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Process CPU seconds over the timed section, next to its wall time: the figure recomputed with
// CPU time is what a busy shared machine cannot blur at 1 thread. Printed on stderr as
// "cpu workload=... value=..." (bench/compare.sh reads it).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
struct Timed {
  double cpu = 0, wall = 0;
};
Timed g_timed;
// Times f() in wall and CPU seconds; returns the wall seconds.
template <class F>
double timed(F&& f) {
  const double c0 = cpu_seconds();
  const auto t0 = Clock::now();
  f();
  g_timed = {cpu_seconds() - c0, seconds_since(t0)};
  return g_timed.wall;
}

// --precision: "f32", "tf32" or an autocast dtype name (soma/autocast.hpp).
std::string g_precision = "f32";
// --cuda-graph: device training replays its step as a CUDA graph (FitOptions::cuda_graph).
bool g_cuda_graph = false;
// --device: where the workloads run (the CPU by default).
Device g_device = Device::cpu();
// compile's mixed_precision for g_precision ("" for f32 and tf32).
std::string mixed_precision() { return g_precision == "f32" || g_precision == "tf32" ? "" : g_precision; }
// Waits for the device's queued work (the timed sections end with it).
void sync_device() {
  if (!g_device.is_cpu()) cuda::synchronize(g_device.index);
}

struct Workload {
  const char* name;
  std::vector<std::int64_t> default_batches;
  const char* what;
  // Runs the workload at one batch size; returns {value, unit}.
  std::function<std::pair<double, std::string>(std::int64_t batch, std::int64_t steps)> run;
};

nn::Sequential mlp() {
  return nn::Sequential{nn::Input({1, 28, 28}), nn::Flatten(), nn::Dense(128, nn::relu),
                        nn::Dense(128, nn::relu), nn::Dense(10)};
}
nn::Sequential lenet() {
  return nn::Sequential{nn::Input({1, 28, 28}),
                        nn::Conv2D(32, 5, {.padding = "same", .activation = nn::relu}),
                        nn::MaxPool2D(2),
                        nn::Conv2D(64, 5, {.padding = "same", .activation = nn::relu}),
                        nn::MaxPool2D(2),
                        nn::Flatten(),
                        nn::Dense(128, nn::relu),
                        nn::Dense(10)};
}
nn::Sequential cifar_cnn() {
  return nn::Sequential{nn::Input({3, 32, 32}),
                        nn::Conv2D(32, 3, {.padding = "same", .activation = nn::relu}),
                        nn::Conv2D(32, 3, {.padding = "same", .activation = nn::relu}),
                        nn::MaxPool2D(2),
                        nn::Conv2D(64, 3, {.padding = "same", .activation = nn::relu}),
                        nn::Conv2D(64, 3, {.padding = "same", .activation = nn::relu}),
                        nn::MaxPool2D(2),
                        nn::Flatten(),
                        nn::Dense(512, nn::relu),
                        nn::Dense(10)};
}

// Training throughput in samples/s: `steps` Adam steps (after 3 warm-up steps) through the
// in-memory data `x`, `y` in order, one batch after the other (wrapping around).
std::pair<double, std::string> train_rate(nn::Sequential model, const Tensor& x, const Tensor& y,
                                          std::int64_t batch, std::int64_t steps) {
  if (!g_device.is_cpu()) {
    // On a device: the data goes over once and fit() walks it (no read-back inside an epoch),
    // as a PyTorch loop over device-resident batches does.
    model.to(g_device);
    model.compile(optim::Adam(), nn::SparseCategoricalCrossentropy({.from_logits = true}),
                  {metrics::Accuracy()}, {.mixed_precision = mixed_precision()});
    const std::int64_t nb = std::max<std::int64_t>(1, std::min<std::int64_t>(steps, x.shape()[0] / batch));
    const Tensor xd = slice(x, {Slice{0, nb * batch}}).to(g_device);
    const Tensor yd = slice(y, {Slice{0, nb * batch}}).to(g_device);
    const std::int64_t epochs = (steps + nb - 1) / nb;
    const nn::FitOptions opts{.epochs = 1, .batch_size = batch, .shuffle = false, .verbose = 0,
                              .cuda_graph = g_cuda_graph};
    model.fit(slice(xd, {Slice{0, std::min<std::int64_t>(3, nb) * batch}}),
              slice(yd, {Slice{0, std::min<std::int64_t>(3, nb) * batch}}), opts);  // warm-up
    sync_device();
    nn::FitOptions timed_opts = opts;
    timed_opts.epochs = int(epochs);
    const double t = timed([&] {
      model.fit(xd, yd, timed_opts);
      sync_device();
    });
    return {double(epochs * nb * batch) / t, "samples/s"};
  }
  model.compile(optim::Adam(), nn::SparseCategoricalCrossentropy({.from_logits = true}),
                {metrics::Accuracy()}, {.mixed_precision = mixed_precision()});
  const std::int64_t nb = std::max<std::int64_t>(1, x.shape()[0] / batch);
  auto step = [&](std::int64_t i) {
    const std::int64_t b = (i % nb) * batch;
    model.train_on_batch(slice(x, {Slice{b, b + batch}}), slice(y, {Slice{b, b + batch}}));
  };
  for (int i = 0; i < 3; ++i) step(i);
  const double t = timed([&] {
    for (std::int64_t i = 0; i < steps; ++i) step(i);
  });
  return {double(steps * batch) / t, "samples/s"};
}

// Synthetic classification data: a pool of up to 16 batches (at most 8192 samples).
std::pair<Tensor, Tensor> synthetic(const Shape& sample, std::int64_t batch) {
  const std::int64_t pool = std::max<std::int64_t>(1, std::min<std::int64_t>(16, 8192 / batch));
  Shape xs{pool * batch};
  xs.insert(xs.end(), sample.begin(), sample.end());
  return {random_uniform(xs, 0.0, 1.0, DType::f32, 1),
          cast(floor(random_uniform({pool * batch}, 0.0, 10.0, DType::f32, 2)), DType::i64)};
}

// Fashion-MNIST's training set in memory ([60000, 1, 28, 28] f32 in [0, 1]) when Debian's
// dataset-fashion-mnist is installed (as the libtorch twin reads it), else synthetic data.
const std::pair<Tensor, Tensor>& mnist_train() {
  static const std::pair<Tensor, Tensor> d = [] {
    try {
      // Only the training set, converted in one pass (u8 -> f32 / 255) to keep the peak memory
      // at the data itself, as the libtorch twin does.
      const std::string dir = data::kFashionMnistDir;
      const Tensor u8 = data::read_idx(dir + "/train-images-idx3-ubyte.gz");
      const Shape& s = u8.shape();
      Tensor x = Tensor::empty({s[0], 1, s[1], s[2]}, DType::f32);
      const auto* src = u8.data<std::uint8_t>();
      float* dst = x.data<float>();
      for (std::int64_t i = 0, n = x.numel(); i < n; ++i) dst[i] = float(src[i]) / 255.0f;
      return std::pair<Tensor, Tensor>{
          x, cast(data::read_idx(dir + "/train-labels-idx1-ubyte.gz"), DType::i64)};
    } catch (const Error&) {
      return synthetic({1, 28, 28}, 60000 / 16);
    }
  }();
  return d;
}

// Inference: batch 1 reports the latency of one call in microseconds, larger batches the
// throughput in samples/s.
std::pair<double, std::string> infer_rate(nn::Sequential model, const Shape& sample,
                                          std::int64_t batch, std::int64_t steps) {
  Shape xs{batch};
  xs.insert(xs.end(), sample.begin(), sample.end());
  if (!g_device.is_cpu()) model.to(g_device);
  const Tensor x = random_uniform(xs, 0.0, 1.0, DType::f32, 3).to(g_device);
  for (int i = 0; i < 3; ++i) model.predict_on_batch(x);
  sync_device();
  const double t = timed([&] {
    for (std::int64_t i = 0; i < steps; ++i) model.predict_on_batch(x);
    sync_device();
  });
  if (batch == 1) return {1e6 * t / double(steps), "us"};
  return {double(steps * batch) / t, "samples/s"};
}

// Time per call of a tiny op (two 1-element tensors), optionally while a tape records. Tapes
// are renewed every 1000 ops so that the recording does not grow without bound.
std::pair<double, std::string> op_overhead(bool tape, std::int64_t steps) {
  const Tensor a = constant<float>({1.0f}), b = constant<float>({2.0f});
  const std::int64_t block = 1000, blocks = std::max<std::int64_t>(1, steps / block);
  auto run_block = [&] {
    std::optional<GradientTape> t;
    if (tape) {
      t.emplace();
      t->watch(a);
    }
    for (std::int64_t i = 0; i < block; ++i) {
      Tensor c = add(a, b);
      (void)c;
    }
  };
  run_block();
  const double t = timed([&] {
    for (std::int64_t k = 0; k < blocks; ++k) run_block();
  });
  return {1e9 * t / double(blocks * block), "ns"};
}

// GFLOP/s of an n x n x n matmul (2 n^3 flops) in `dtype`, for at least `steps` calls and
// 0.3 s (on a device: calls are queued in blocks of 10 between synchronisations).
std::pair<double, std::string> gemm(std::int64_t n, std::int64_t steps, DType dtype) {
  const Tensor a = random_uniform({n, n}, -1.0, 1.0, DType::f32, 4).cast(dtype).to(g_device);
  const Tensor b = random_uniform({n, n}, -1.0, 1.0, DType::f32, 5).cast(dtype).to(g_device);
  matmul(a, b);
  sync_device();
  const std::int64_t block = g_device.is_cpu() ? 1 : 10;
  std::int64_t calls = 0;
  const double t = timed([&] {
    const auto t0 = Clock::now();
    while (calls < steps || seconds_since(t0) < 0.3) {
      for (std::int64_t i = 0; i < block; ++i) matmul(a, b);
      calls += block;
      sync_device();
    }
  });
  return {2.0 * double(n) * double(n) * double(n) * double(calls) / t / 1e9, "GFLOP/s"};
}

std::vector<Workload> workloads() {
  const Shape mnist{1, 28, 28}, cifar{3, 32, 32};
  return {
      {"mlp_train", {32, 128}, "MLP 784-128-128-10 training, Adam (default: one 60000-sample epoch)",
       [=](std::int64_t b, std::int64_t s) {
         return train_rate(mlp(), mnist_train().first, mnist_train().second, b,
                           s ? s : 60000 / b);
       }},
      {"lenet_train", {64}, "LeNet-style CNN training, Adam (default 50 steps)",
       [=](std::int64_t b, std::int64_t s) {
         return train_rate(lenet(), mnist_train().first, mnist_train().second, b, s ? s : 50);
       }},
      {"cifar_cnn_train", {64}, "CIFAR-10-shaped CNN training, Adam (default 20 steps)",
       [=](std::int64_t b, std::int64_t s) {
         const auto [x, y] = synthetic(cifar, b);
         return train_rate(cifar_cnn(), x, y, b, s ? s : 20);
       }},
      {"mlp_infer", {1, 256}, "MLP inference: batch 1 latency (us), else samples/s",
       [=](std::int64_t b, std::int64_t s) {
         return infer_rate(mlp(), mnist, b, s ? s : (b == 1 ? 2000 : 200));
       }},
      {"cnn_infer", {1, 256}, "LeNet-style CNN inference: batch 1 latency (us), else samples/s",
       [=](std::int64_t b, std::int64_t s) {
         return infer_rate(lenet(), mnist, b, s ? s : (b == 1 ? 200 : 10));
       }},
      {"op_overhead", {1}, "time per call of a tiny op (ns)",
       [](std::int64_t, std::int64_t s) { return op_overhead(false, s ? s : 200000); }},
      {"op_overhead_tape", {1}, "time per call of a tiny op while a tape records (ns)",
       [](std::int64_t, std::int64_t s) { return op_overhead(true, s ? s : 200000); }},
      {"sgemm", {256, 512, 1024, 2048}, "f32 matmul GFLOP/s; batch is the matrix size N",
       [](std::int64_t n, std::int64_t s) { return gemm(n, s ? s : 3, DType::f32); }},
      {"bf16_gemm", {1024, 4096}, "bf16 matmul GFLOP/s (f32 accumulation); batch is N",
       [](std::int64_t n, std::int64_t s) { return gemm(n, s ? s : 3, DType::bf16); }},
  };
}

// "1,2" -> {1, 2}; each a positive integer.
std::vector<std::int64_t> int_list(const Args& a, const std::string& name) {
  std::vector<std::int64_t> out;
  std::stringstream ss(a.str(name));
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1)
      throw UsageError("bad value for --" + name + ": '" + a.str(name) +
                       "' (expected positive integers separated by commas)");
    out.push_back(v);
  }
  return out;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const auto all = workloads();
  std::string names;
  for (const auto& w : all) names += std::string("\n  ") + w.name + ": " + w.what;
  ArgParser p("soma bench", "[options]",
              "Runs soma's benchmark workloads on synthetic in-memory data and prints one line\n"
              "per workload and configuration:\n"
              "  bench workload=<name> threads=<n> batch=<b> value=<x> unit=<unit>\n"
              "Workloads:" + names);
  p.option("workload", "NAME", "run only this workload (default: all)")
      .option("threads", "N[,N...]", "thread counts to run at (default: the current one)")
      .option("batch", "B[,B...]", "batch sizes (default: each workload's own)")
      .option("steps", "N", "timed steps or calls (default: each workload's own)")
      .option("precision", "P[,P...]",
              "f32 (default), tf32, bf16 or f16: tf32 is f32 with TF32 products (cuda);\n"
              "bf16/f16 the autocast dtype of matrix and convolution work")
      .option("device", "DEV", "cpu (default), cuda or cuda:N: where the workloads run")
      .option("cuda-graph", "",
              "device training replays its step as a CUDA graph (fit's cuda_graph); the\n"
              "lines end in cuda_graph=on");
  Args a;
  if (parse_or_help(p, argc, argv, a)) return 0;
  std::vector<std::string> choices;
  for (const auto& w : all) choices.push_back(w.name);
  const std::string only = a.choice("workload", choices, "");
  const auto threads = a.has("threads") ? int_list(a, "threads")
                                        : std::vector<std::int64_t>{get_num_threads()};
  const auto batches = a.has("batch") ? int_list(a, "batch") : std::vector<std::int64_t>{};
  const std::int64_t steps = a.integer("steps", 0, 1);
  g_device = device_option(a);
  g_cuda_graph = a.has("cuda-graph");
  std::vector<std::string> precisions;
  {
    std::stringstream ss(a.has("precision") ? a.str("precision") : std::string("f32"));
    for (std::string item; std::getline(ss, item, ',');) {
      try {
        if (item != "tf32") parse_autocast_dtype(item, "soma bench");
      } catch (const Error&) {
        throw UsageError("bad value for --precision: '" + item +
                         "' (expected f32, tf32, bf16 or f16)");
      }
      precisions.push_back(item);
    }
  }

  set_seed(1);
  for (const auto& w : all) {
    if (!only.empty() && only != w.name) continue;
    for (auto t : threads) {
      set_num_threads(static_cast<int>(t));
      for (auto b : batches.empty() ? w.default_batches : batches)
        for (const auto& prec : precisions) {
          g_precision = prec;
          const DType dt = prec == "tf32" ? DType::f32 : parse_autocast_dtype(prec, "soma bench");
          // f32 / tf32 on a device: full f32 or TF32 products (cuda::set_allow_tf32).
          if (!g_device.is_cpu() && (prec == "f32" || prec == "tf32"))
            cuda::set_allow_tf32(prec == "tf32");
          // f32 CPU lines keep the original format (bench/compare.sh parses them).
          std::string tag = prec == "f32" ? "" : " precision=" + prec;
          if (!g_device.is_cpu()) tag += " device=" + g_device.str();
          if (g_cuda_graph) tag += " cuda_graph=on";
          const auto [value, unit] = [&] {
            AutocastScope autocast(dt);
            return w.run(b, steps);
          }();
          std::printf("bench workload=%s threads=%lld batch=%lld value=%.6g unit=%s%s\n", w.name,
                      (long long)t, (long long)b, value, unit.c_str(), tag.c_str());
          std::fflush(stdout);
          if (g_timed.cpu > 0 && g_timed.wall > 0) {
            const bool rate = unit == "samples/s" || unit == "GFLOP/s";
            const double r = g_timed.wall / g_timed.cpu;
            std::fprintf(stderr,
                         "cpu workload=%s threads=%lld batch=%lld value=%.6g unit=%s%s\n", w.name,
                         (long long)t, (long long)b, rate ? value * r : value / r, unit.c_str(),
                         tag.c_str());
            g_timed = {};
          }
        }
    }
  }
  return 0;
}

}  // namespace soma::cli
