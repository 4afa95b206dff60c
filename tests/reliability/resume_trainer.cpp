// A small training run for the kill/resume test (kill_resume.sh, docs/reliability.md).
//
//   resume_trainer --ckpt PATH --out WEIGHTS [--epochs N] [--resume]
//       trains an MLP (with unseeded Dropout and fit()'s unseeded shuffling, so that the result
//       depends on soma's global RNG), checkpointing the whole model at every epoch's end with
//       ModelCheckpoint. --resume: continue from PATH when it exists. At the end the final
//       weights are written to WEIGHTS (raw bytes in state_dict order) for a bitwise compare.
//       --no-restore-rng: resume without the saved RNG state (negative control).
//   resume_trainer --check PATH
//       exits 0 when PATH loads as a checkpoint (or does not exist), 3 when it does not load.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "soma/soma.hpp"

using namespace soma;

namespace {

constexpr int kLoadFailed = 3;

std::shared_ptr<nn::Model> fresh_model() {
  set_seed(42);  // the initialisers draw from the global generator
  auto m = std::make_shared<nn::Sequential>(nn::Sequential{
      nn::Input({16}), nn::Dense(64, nn::relu), nn::Dropout(0.3), nn::Dense(64, nn::relu),
      nn::Dense(4)});
  m->compile(optim::Adam({.learning_rate = 1e-3}),
             nn::SparseCategoricalCrossentropy({.from_logits = true}));
  return m;
}

// Fixed data from per-call seeds, which leave the global generator alone.
void make_data(Tensor& x, Tensor& y) {
  x = random_normal({512, 16}, 0.0, 1.0, DType::f32, /*seed=*/7);
  auto v = x.to_vector<float>();
  y = Tensor::empty({512}, DType::i64);
  auto* p = y.data<std::int64_t>();
  for (int i = 0; i < 512; ++i)
    p[i] = (v[i * 16] + v[i * 16 + 1] > 0 ? 1 : 0) + (v[i * 16 + 2] > 0 ? 2 : 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string ckpt, out, check;
  int epochs = 30;
  bool resume = false;
  bool restore_rng = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ckpt" && i + 1 < argc) ckpt = argv[++i];
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--epochs" && i + 1 < argc) epochs = std::stoi(argv[++i]);
    else if (a == "--check" && i + 1 < argc) check = argv[++i];
    else if (a == "--resume") resume = true;
    else if (a == "--no-restore-rng") restore_rng = false;  // negative control
    else {
      std::fprintf(stderr, "resume_trainer: bad argument '%s'\n", a.c_str());
      return 2;
    }
  }
  set_num_threads(1);  // bitwise equality across runs needs the same reduction order
  if (!check.empty()) {
    if (!std::filesystem::exists(check)) return 0;
    try {
      auto c = load_checkpoint(check, false);
      if (!c.state) throw Error("no training state in '" + check + "'");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "checkpoint does not load: %s\n", e.what());
      return kLoadFailed;
    }
    return 0;
  }
  if (ckpt.empty() || out.empty()) {
    std::fprintf(stderr, "usage: resume_trainer --ckpt PATH --out WEIGHTS [--epochs N] [--resume]\n");
    return 2;
  }

  Tensor x, y;
  make_data(x, y);
  std::shared_ptr<nn::Model> model;
  int initial_epoch = 0;
  if (resume && std::filesystem::exists(ckpt)) {
    try {
      auto c = load_checkpoint(ckpt, restore_rng);  // also restores the global RNG
      if (!c.state) throw Error("no training state in '" + ckpt + "'");
      model = c.model;
      initial_epoch = c.state->epoch;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "checkpoint does not load: %s\n", e.what());
      return kLoadFailed;
    }
  } else {
    model = fresh_model();
  }
  model->fit(x, y, {.epochs = epochs, .batch_size = 32,
                    .callbacks = {callbacks::ModelCheckpoint(ckpt, {.save_weights_only = false})},
                    .verbose = 0, .initial_epoch = initial_epoch});

  std::ofstream os(out + ".tmp", std::ios::binary);
  for (auto& [name, t0] : model->get_weights()) {
    Tensor t = t0.contiguous();
    os << name << '\n';
    os.write(static_cast<const char*>(t.raw_data()), std::streamsize(t.numel() * dtype_size(t.dtype())));
  }
  os.close();
  std::filesystem::rename(out + ".tmp", out);
  return 0;
}
