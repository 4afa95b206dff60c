// The libtorch side of soma's benchmark suite (issue 5): the same workloads as `soma bench`,
// written as a C++ libtorch user would, printing the same machine-readable line:
//   bench workload=<name> threads=<n> batch=<b> value=<x> unit=<unit>
// Same models, initialisation (Keras' glorot-uniform weights, zero biases), optimiser (Adam,
// lr 1e-3, Keras' epsilon 1e-7), batch sizes and thread counts as soma's side; data in memory
// (Fashion-MNIST when its IDX files are found, else synthetic; CIFAR-shaped data is synthetic).
//
//   bench_torch --workload NAME [--threads N] [--batch B] [--steps S] [--data DIR]
//               [--precision f32|bf16]
//   bench_torch --accuracy [--seeds 1,2,3,4,5] [--init keras|torch] [--eps 1e-7] [--epochs 5]
//
// One file on purpose: <torch/torch.h> takes 40-55 s to compile here.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Process CPU seconds (all threads). Next to the wall time, the rate per CPU-second is what a
// busy shared machine cannot blur at 1 thread; the programs print it on stderr ("cpu ...").
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
double g_cpu_start = 0, g_cpu_used = 0, g_wall_used = 0;
Clock::time_point g_wall_start;
void cpu_begin() {
  g_cpu_start = cpu_seconds();
  g_wall_start = Clock::now();
}
void cpu_end() {
  g_cpu_used = cpu_seconds() - g_cpu_start;
  g_wall_used = seconds_since(g_wall_start);
}

// ---- data -------------------------------------------------------------------------------------
std::vector<unsigned char> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<unsigned char> out;
  unsigned char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(f);
  return out;
}

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

// Images as [n, 1, 28, 28] f32 scaled to [0, 1] (as soma's IDX reader and Keras' examples do).
torch::Tensor idx_images(const std::string& path) {
  auto raw = read_gz(path);
  const std::int64_t n = be32(&raw[4]), h = be32(&raw[8]), w = be32(&raw[12]);
  auto t = torch::from_blob(raw.data() + 16, {n, 1, h, w}, torch::kUInt8).to(torch::kFloat32);
  return t.div_(255.0);
}
torch::Tensor idx_labels(const std::string& path) {
  auto raw = read_gz(path);
  const std::int64_t n = be32(&raw[4]);
  return torch::from_blob(raw.data() + 8, {n}, torch::kUInt8).to(torch::kInt64);
}

struct Data {
  torch::Tensor x_train, y_train, x_test, y_test;
};

bool have_fashion(const std::string& dir) {
  std::FILE* f = std::fopen((dir + "/train-images-idx3-ubyte.gz").c_str(), "rb");
  if (f) std::fclose(f);
  return f != nullptr;
}

Data fashion(const std::string& dir, bool with_test) {
  Data d{idx_images(dir + "/train-images-idx3-ubyte.gz"),
         idx_labels(dir + "/train-labels-idx1-ubyte.gz"),
         {},
         {}};
  if (with_test) {
    d.x_test = idx_images(dir + "/t10k-images-idx3-ubyte.gz");
    d.y_test = idx_labels(dir + "/t10k-labels-idx1-ubyte.gz");
  }
  return d;
}

Data synthetic(std::int64_t n, std::vector<std::int64_t> sample) {
  std::vector<std::int64_t> s{n};
  s.insert(s.end(), sample.begin(), sample.end());
  torch::manual_seed(1);
  return {torch::rand(s), torch::randint(0, 10, {n}, torch::kInt64), {}, {}};
}

// ---- models -----------------------------------------------------------------------------------
// Keras' glorot_uniform (fan_in/fan_out of a dense [in, out] or a conv [out, in, kh, kw] kernel)
// and zero biases; `torch_init` keeps libtorch's own default (kaiming-uniform a=sqrt(5)).
void keras_init(torch::nn::Module& m) {
  torch::NoGradGuard g;
  for (auto& p : m.named_parameters()) {
    auto& t = p.value();
    if (p.key().find("bias") != std::string::npos) {
      t.zero_();
    } else {
      double receptive = 1;
      for (int64_t i = 2; i < t.dim(); ++i) receptive *= double(t.size(i));
      const double fan_in = double(t.size(1)) * receptive, fan_out = double(t.size(0)) * receptive;
      const double limit = std::sqrt(6.0 / (fan_in + fan_out));
      t.uniform_(-limit, limit);
    }
  }
}

struct MLPImpl : torch::nn::Module {
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
  MLPImpl() {
    l1 = register_module("l1", torch::nn::Linear(784, 128));
    l2 = register_module("l2", torch::nn::Linear(128, 128));
    l3 = register_module("l3", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x.flatten(1);
    x = torch::relu(l1(x));
    x = torch::relu(l2(x));
    return l3(x);
  }
};
TORCH_MODULE(MLP);

struct LeNetImpl : torch::nn::Module {
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::Linear f1{nullptr}, f2{nullptr};
  LeNetImpl() {
    c1 = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 5).padding(2)));
    c2 = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 5).padding(2)));
    f1 = register_module("f1", torch::nn::Linear(64 * 7 * 7, 128));
    f2 = register_module("f2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(c1(x)), 2);
    x = torch::max_pool2d(torch::relu(c2(x)), 2);
    x = torch::relu(f1(x.flatten(1)));
    return f2(x);
  }
};
TORCH_MODULE(LeNet);

struct CifarCNNImpl : torch::nn::Module {
  torch::nn::Conv2d c1{nullptr}, c2{nullptr}, c3{nullptr}, c4{nullptr};
  torch::nn::Linear f1{nullptr}, f2{nullptr};
  CifarCNNImpl() {
    using O = torch::nn::Conv2dOptions;
    c1 = register_module("c1", torch::nn::Conv2d(O(3, 32, 3).padding(1)));
    c2 = register_module("c2", torch::nn::Conv2d(O(32, 32, 3).padding(1)));
    c3 = register_module("c3", torch::nn::Conv2d(O(32, 64, 3).padding(1)));
    c4 = register_module("c4", torch::nn::Conv2d(O(64, 64, 3).padding(1)));
    f1 = register_module("f1", torch::nn::Linear(64 * 8 * 8, 512));
    f2 = register_module("f2", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(c2(torch::relu(c1(x))));
    x = torch::max_pool2d(x, 2);
    x = torch::relu(c4(torch::relu(c3(x))));
    x = torch::max_pool2d(x, 2);
    x = torch::relu(f1(x.flatten(1)));
    return f2(x);
  }
};
TORCH_MODULE(CifarCNN);

// ---- workloads --------------------------------------------------------------------------------
struct Result {
  double value;
  const char* unit;
};

// One training step as a libtorch user writes it, with the loss and accuracy that Keras' fit
// (and soma's train_on_batch with an Accuracy metric) computes for its progress bar.
template <class M>
double train_step(M& model, torch::optim::Adam& opt, const torch::Tensor& x,
                  const torch::Tensor& y) {
  opt.zero_grad();
  torch::Tensor logits = model->forward(x);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  loss.backward();
  opt.step();
  torch::Tensor correct = logits.argmax(1).eq(y).sum();
  return loss.item<double>() + 0.0 * correct.item<double>();
}

torch::optim::Adam adam(torch::nn::Module& m, double eps = 1e-7) {
  return torch::optim::Adam(m.parameters(), torch::optim::AdamOptions(1e-3).eps(eps));
}

// Samples/s over `steps` steps through in-memory data in order (wrapping around), after 3 warm-up
// steps.
template <class M>
Result train_rate(M model, const torch::Tensor& x, const torch::Tensor& y, std::int64_t batch,
                  std::int64_t steps) {
  keras_init(*model);
  auto opt = adam(*model);
  const std::int64_t nb = std::max<std::int64_t>(1, x.size(0) / batch);
  auto step = [&](std::int64_t i) {
    const std::int64_t b = (i % nb) * batch;
    train_step(model, opt, x.slice(0, b, b + batch), y.slice(0, b, b + batch));
  };
  for (int i = 0; i < 3; ++i) step(i);
  cpu_begin();
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < steps; ++i) step(i);
  const double t = seconds_since(t0);
  cpu_end();
  return {double(steps * batch) / t, "samples/s"};
}

template <class M>
Result infer_rate(M model, std::vector<std::int64_t> sample, std::int64_t batch,
                  std::int64_t steps) {
  keras_init(*model);
  model->eval();
  std::vector<std::int64_t> s{batch};
  s.insert(s.end(), sample.begin(), sample.end());
  auto x = torch::rand(s);
  torch::InferenceMode guard;
  for (int i = 0; i < 3; ++i) model->forward(x);
  cpu_begin();
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < steps; ++i) model->forward(x);
  const double t = seconds_since(t0);
  cpu_end();
  if (batch == 1) return {1e6 * t / double(steps), "us"};
  return {double(steps * batch) / t, "samples/s"};
}

// Time per call of a tiny op; with `record`, an input requires grad so autograd records a node.
Result op_overhead(bool record, std::int64_t steps) {
  auto a = torch::ones({1}), b = torch::full({1}, 2.0f);
  if (record) a.requires_grad_(true);
  for (int i = 0; i < 1000; ++i) {
    auto c = torch::add(a, b);
    (void)c;
  }
  cpu_begin();
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < steps; ++i) {
    auto c = torch::add(a, b);
    (void)c;
  }
  const double t = seconds_since(t0);
  cpu_end();
  return {1e9 * t / double(steps), "ns"};
}

Result sgemm(std::int64_t n, std::int64_t steps) {
  auto a = torch::rand({n, n}) * 2 - 1, b = torch::rand({n, n}) * 2 - 1;
  torch::mm(a, b);
  std::int64_t calls = 0;
  cpu_begin();
  const auto t0 = Clock::now();
  while (calls < steps || seconds_since(t0) < 0.3) {
    torch::mm(a, b);
    ++calls;
  }
  const double t = seconds_since(t0);
  cpu_end();
  return {2.0 * double(n) * double(n) * double(n) * double(calls) / t / 1e9, "GFLOP/s"};
}

// ---- accuracy mode ----------------------------------------------------------------------------
// The MLP trained as the main job (Adam 1e-3, batch 32, 5 epochs, shuffled each epoch),
// test accuracy per seed.
void accuracy(const Data& d, const std::vector<std::int64_t>& seeds, bool keras, double eps,
              int epochs, std::int64_t batch) {
  std::vector<double> accs;
  for (auto seed : seeds) {
    torch::manual_seed(seed);
    MLP model;
    if (keras) keras_init(*model);
    auto opt = adam(*model, eps);
    const std::int64_t n = d.x_train.size(0);
    for (int e = 0; e < epochs; ++e) {
      auto perm = torch::randperm(n, torch::kInt64);
      auto xs = d.x_train.index_select(0, perm), ys = d.y_train.index_select(0, perm);
      for (std::int64_t b = 0; b < n; b += batch) {
        const std::int64_t end = std::min(n, b + batch);
        opt.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model->forward(xs.slice(0, b, end)),
                                                         ys.slice(0, b, end));
        loss.backward();
        opt.step();
      }
    }
    torch::NoGradGuard g;
    const double acc =
        model->forward(d.x_test).argmax(1).eq(d.y_test).to(torch::kFloat64).mean().item<double>();
    accs.push_back(acc);
    std::printf("accuracy init=%s eps=%g seed=%lld test_accuracy=%.4f\n", keras ? "keras" : "torch",
                eps, (long long)seed, acc);
    std::fflush(stdout);
  }
  std::sort(accs.begin(), accs.end());
  std::printf("accuracy init=%s eps=%g median=%.4f min=%.4f max=%.4f\n", keras ? "keras" : "torch",
              eps, accs[accs.size() / 2], accs.front(), accs.back());
}

// "cpu workload=... value=..." on stderr: the workload's figure with CPU time in place of wall
// time (rates scale by wall/cpu, times by cpu/wall).
void print_cpu_line(const std::string& w, std::int64_t t, std::int64_t b, const Result& r) {
  if (g_cpu_used <= 0 || g_wall_used <= 0) return;
  const bool rate = std::string(r.unit) == "samples/s" || std::string(r.unit) == "GFLOP/s";
  const double v = rate ? r.value * g_wall_used / g_cpu_used : r.value * g_cpu_used / g_wall_used;
  std::fprintf(stderr, "cpu workload=%s threads=%lld batch=%lld value=%.6g unit=%s\n", w.c_str(),
               (long long)t, (long long)b, v, r.unit);
}

// ---- command line -----------------------------------------------------------------------------
std::vector<std::int64_t> int_list(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string workload, data_dir = "/usr/share/datasets/fashion-mnist", init = "keras";
  std::vector<std::int64_t> threads, batches, seeds{1, 2, 3, 4, 5};
  std::int64_t steps = 0;
  bool acc_mode = false;
  std::string precision = "f32";
  double eps = 1e-7;
  int epochs = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value for " + a);
      return argv[++i];
    };
    if (a == "--workload") workload = next();
    else if (a == "--threads") threads = int_list(next());
    else if (a == "--batch") batches = int_list(next());
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--data") data_dir = next();
    else if (a == "--accuracy") acc_mode = true;
    else if (a == "--seeds") seeds = int_list(next());
    else if (a == "--init") init = next();
    else if (a == "--eps") eps = std::stod(next());
    else if (a == "--epochs") epochs = std::stoi(next());
    else if (a == "--precision") precision = next();
    else {
      std::fprintf(stderr, "bench_torch: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (threads.empty()) threads = {torch::get_num_threads()};
  // --precision bf16: libtorch's CPU autocast (linear, conv, matmul in bf16; soma's workload 8).
  std::string tag;
  if (precision == "bf16") {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    tag = " precision=bf16";
  } else if (precision != "f32") {
    std::fprintf(stderr, "bench_torch: unknown precision %s (f32 or bf16)\n", precision.c_str());
    return 2;
  }

  if (acc_mode) {
    torch::set_num_threads(int(threads[0]));
    if (!have_fashion(data_dir)) {
      std::fprintf(stderr, "bench_torch: no Fashion-MNIST in %s\n", data_dir.c_str());
      return 1;
    }
    accuracy(fashion(data_dir, true), seeds, init == "keras", eps, epochs,
             batches.empty() ? 32 : batches[0]);
    return 0;
  }

  const std::vector<std::string> names{"mlp_train", "lenet_train", "cifar_cnn_train",
                                       "mlp_infer", "cnn_infer",   "op_overhead",
                                       "op_overhead_tape", "sgemm"};
  if (!workload.empty() && std::find(names.begin(), names.end(), workload) == names.end()) {
    std::fprintf(stderr, "bench_torch: unknown workload %s\n", workload.c_str());
    return 2;
  }
  Data mnist;
  auto need_mnist = [&] {
    if (mnist.x_train.defined()) return;
    mnist = have_fashion(data_dir) ? fashion(data_dir, false) : synthetic(60000, {1, 28, 28});
  };
  for (const auto& w : names) {
    if (!workload.empty() && w != workload) continue;
    for (auto t : threads) {
      torch::set_num_threads(int(t));
      std::vector<std::int64_t> bs = batches;
      if (bs.empty()) {
        if (w == "mlp_train") bs = {32, 128};
        else if (w == "lenet_train" || w == "cifar_cnn_train") bs = {64};
        else if (w == "mlp_infer" || w == "cnn_infer") bs = {1, 256};
        else if (w == "sgemm") bs = {256, 512, 1024, 2048};
        else bs = {1};
      }
      for (auto b : bs) {
        torch::manual_seed(1);
        Result r{};
        if (w == "mlp_train") {
          need_mnist();
          r = train_rate(MLP(), mnist.x_train, mnist.y_train, b, steps ? steps : 60000 / b);
        } else if (w == "lenet_train") {
          need_mnist();
          r = train_rate(LeNet(), mnist.x_train, mnist.y_train, b, steps ? steps : 50);
        } else if (w == "cifar_cnn_train") {
          auto d = synthetic(std::max<std::int64_t>(1, std::min<std::int64_t>(16, 8192 / b)) * b,
                             {3, 32, 32});
          r = train_rate(CifarCNN(), d.x_train, d.y_train, b, steps ? steps : 20);
        } else if (w == "mlp_infer") {
          r = infer_rate(MLP(), {1, 28, 28}, b, steps ? steps : (b == 1 ? 2000 : 200));
        } else if (w == "cnn_infer") {
          r = infer_rate(LeNet(), {1, 28, 28}, b, steps ? steps : (b == 1 ? 200 : 10));
        } else if (w == "op_overhead") {
          r = op_overhead(false, steps ? steps : 200000);
        } else if (w == "op_overhead_tape") {
          r = op_overhead(true, steps ? steps : 200000);
        } else {
          r = sgemm(b, steps ? steps : 3);
        }
        std::printf("bench workload=%s threads=%lld batch=%lld value=%.6g unit=%s%s\n", w.c_str(),
                    (long long)t, (long long)b, r.value, r.unit, tag.c_str());
        std::fflush(stdout);
        print_cpu_line(w, t, b, r);
      }
    }
  }
  return 0;
}
