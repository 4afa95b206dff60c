// A small GPT on bytes: it learns to continue a licence text one byte at a time, then writes a
// sample of its own. The model is Embedding(256, D) + PositionalEmbedding(T) -> N causal pre-norm
// TransformerEncoderLayers -> LayerNormalization -> Dense(256), trained with AdamW (weight decay
// on the kernels only, a warm-up then a cosine decay of the rate, global clipnorm 1) on windows
// x = bytes[i : i+T], y = bytes[i+1 : i+T+1] (every position predicts its next byte).
//
//   char_transformer [--file PATH] [--extra PATH,PATH] [--epochs N] [--layers N] [--d-model D]
//                    [--heads H] [--context T] [--stride S] [--batch B] [--steps N] [--lr LR]
//                    [--warmup N] [--dropout P] [--accumulate K] [--minutes M]
//                    [--checkpoint PATH] [--onnx PATH] [--generate N] [--temperature X]
//                    [--top-k K] [--seed S] [--no-cache] [--device DEV]
//
// Defaults: issue 26's model (4 layers, 4 heads, D 128, context 128, dropout 0.1), 10 epochs.
// --steps N: N batches per epoch; default one pass over the training windows. --minutes M stops
// training after M minutes (at the end of a batch). --extra: more training text (the held-out
// part stays the tail of --file). --accumulate K: gradient accumulation over K batches (the
// optimiser's gradient_accumulation_steps). --checkpoint PATH: the weights with the best
// validation loss so far, saved after each epoch. --onnx PATH: the trained model as ONNX.
// The validation loss is the mean cross-entropy in nats per byte (ln 256 = 5.55 is a uniform
// guess) over the last 10% of --file, which the model never trains on.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <soma/data/text.hpp>
#include <soma/nn/sampling.hpp>
#include <soma/onnx.hpp>
#include <soma/soma.hpp>
#include <sstream>

#include "example_device.hpp"

namespace nn = soma::nn;
namespace data = soma::data;
using soma::Tensor;

namespace {
// When the licence file is not there (not a Debian system), a short stand-in keeps the example
// runnable.
const char* kFallbackText =
    "Everyone is permitted to copy and distribute verbatim copies of this license document, "
    "but changing it is not allowed. The licenses for most software and other practical works "
    "are designed to take away your freedom to share and change the works. By contrast, the "
    "GNU General Public License is intended to guarantee your freedom to share and change all "
    "versions of a program--to make sure it remains free software for all its users. ";
}  // namespace

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  std::string file = "/usr/share/common-licenses/GPL-3", extra, checkpoint, onnx_path;
  int epochs = 10, layers = 4, d_model = 128, heads = 4, context = 128, stride = 0, batch = 32;
  int steps = 0, generate = 300, top_k = 0, warmup = 100, accumulate = 1;
  double lr = 2e-3, temperature = 0.8, dropout = 0.1, minutes = 0.0;
  unsigned long seed = 1;
  bool use_cache = true;
  const char* usage =
      "usage: char_transformer [--file PATH] [--extra PATH,PATH] [--epochs N] [--layers N] "
      "[--d-model D] [--heads H] [--context T] [--stride S] [--batch B] [--steps N] [--lr LR] "
      "[--warmup N] [--dropout P] [--accumulate K] [--minutes M] [--checkpoint PATH] "
      "[--onnx PATH] [--generate N] [--temperature X] [--top-k K] [--seed S] [--no-cache] "
      "[--device DEV]\n";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-cache") {  // a flag: no value follows
      use_cache = false;
      continue;
    }
    auto next = [&] { return argv[++i]; };
    if (i + 1 >= argc) a = "?";
    if (a == "--file") file = next();
    else if (a == "--extra") extra = next();
    else if (a == "--epochs") epochs = std::atoi(next());
    else if (a == "--layers") layers = std::atoi(next());
    else if (a == "--d-model") d_model = std::atoi(next());
    else if (a == "--heads") heads = std::atoi(next());
    else if (a == "--context") context = std::atoi(next());
    else if (a == "--stride") stride = std::atoi(next());
    else if (a == "--batch") batch = std::atoi(next());
    else if (a == "--steps") steps = std::atoi(next());
    else if (a == "--lr") lr = std::atof(next());
    else if (a == "--warmup") warmup = std::atoi(next());
    else if (a == "--dropout") dropout = std::atof(next());
    else if (a == "--accumulate") accumulate = std::atoi(next());
    else if (a == "--minutes") minutes = std::atof(next());
    else if (a == "--checkpoint") checkpoint = next();
    else if (a == "--onnx") onnx_path = next();
    else if (a == "--generate") generate = std::atoi(next());
    else if (a == "--temperature") temperature = std::atof(next());
    else if (a == "--top-k") top_k = std::atoi(next());
    else if (a == "--seed") seed = std::strtoul(next(), nullptr, 10);
    else {
      std::fprintf(stderr, "%s", usage);
      return 2;
    }
  }
  if (layers < 1 || context < 1 || d_model < 1 || heads < 1 || d_model % heads != 0 ||
      batch < 1 || accumulate < 1 || warmup < 0 || !(dropout >= 0.0 && dropout < 1.0)) {
    std::fprintf(stderr, "char_transformer: need layers, context, batch, accumulate >= 1, "
                         "d-model a multiple of heads, warmup >= 0 and dropout in [0, 1)\n");
    return 2;
  }
  soma::set_seed(seed);

  std::string text;
  if (std::filesystem::exists(file)) {
    text = data::read_text_file(file);
  } else {
    std::printf("%s not found: training on a built-in paragraph\n", file.c_str());
    for (int r = 0; r < 8; ++r) text += kFallbackText;
  }
  data::ByteTokenizer tok;
  const std::vector<std::int64_t> ids = tok.encode(text);
  const std::size_t split = ids.size() * 9 / 10;
  std::vector<std::int64_t> train_ids(ids.begin(), ids.begin() + std::ptrdiff_t(split));
  if (!extra.empty()) {  // more training text; the held-out tail stays --file's
    std::stringstream list(extra);
    for (std::string f; std::getline(list, f, ',');) {
      const std::vector<std::int64_t> more = tok.encode(data::read_text_file(f));
      train_ids.insert(train_ids.end(), more.begin(), more.end());
      std::printf("extra training text: %s, %zu bytes\n", f.c_str(), more.size());
    }
  }
  const std::vector<std::int64_t> val_ids(ids.begin() + std::ptrdiff_t(split), ids.end());
  auto train = data::text_windows(train_ids, {.context = context, .stride = stride ? stride : context / 4 + 1});
  auto val = data::text_windows(val_ids, {.context = context, .stride = context});
  const std::int64_t n_train = train.x.dim(0);
  std::printf("text: %s, %zu bytes; %lld training windows of %d, %lld validation windows\n",
              file.c_str(), text.size(), static_cast<long long>(n_train), context,
              static_cast<long long>(val.x.dim(0)));

  nn::Sequential model{nn::Input({context}, {.dtype = soma::DType::i64}),
                       nn::Embedding(256, d_model),
                       nn::PositionalEmbedding(context, {.add_to_inputs = true})};
  for (int l = 0; l < layers; ++l)
    model.add(nn::TransformerEncoderLayer(d_model, heads,
                                          {.dim_feedforward = 4 * d_model,
                                           .dropout = dropout,
                                           .activation = nn::gelu,
                                           .norm_first = true,
                                           .causal = true}));
  model.add(nn::LayerNormalization());
  model.add(nn::Dense(256));
  model.to(device);

  const std::int64_t per_epoch = steps > 0 ? steps : std::max<std::int64_t>(1, n_train / batch);
  // The rate: a linear warm-up to lr, then a cosine decay to lr / 10 over the remaining updates.
  const std::int64_t updates = std::max<std::int64_t>(1, std::int64_t(epochs) * per_epoch / accumulate);
  const std::int64_t warm = std::min<std::int64_t>(warmup, updates / 2);
  soma::optim::OptimizerRef opt = soma::optim::AdamW(
      {.learning_rate = soma::optim::CosineDecay({.initial_learning_rate = lr / 10.0,
                                                  .decay_steps = std::max<std::int64_t>(1, updates - warm),
                                                  .alpha = 0.1,
                                                  .warmup_target = lr,
                                                  .warmup_steps = warm}),
       .weight_decay = 0.1,
       .global_clipnorm = 1.0,
       .gradient_accumulation_steps = accumulate});
  // GPT-2's rule: no weight decay on biases, norms and the position table.
  opt->exclude_from_weight_decay({}, {"bias$", "gamma$", "beta$", "/embeddings$"});
  model.compile(opt, nn::SparseCategoricalCrossentropy({.from_logits = true}));
  model.summary();

  auto ds = data::Dataset::from_tensor_slices({train.x, train.y})
                .shuffle(n_train, seed)
                .batch(batch, /*drop_remainder=*/n_train >= batch)
                .repeat();
  std::vector<soma::callbacks::CallbackRef> cbs;
  if (!checkpoint.empty())
    cbs.push_back(soma::callbacks::ModelCheckpoint(checkpoint, {.monitor = "val_loss",
                                                                .save_best_only = true}));
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::int64_t batches_done = 0;
  // Training steps only, from the end of the first (warm-up: allocations) to the end of the
  // last, without validation: what bench/char_transformer_torch.py times.
  double first_end = 0.0, last_end = 0.0;
  cbs.push_back(soma::callbacks::LambdaCallback{
      .on_train_batch_end_fn = [&](std::int64_t, nn::Logs&) {
        ++batches_done;
        last_end = elapsed();
        if (batches_done == 1) first_end = last_end;
        if (minutes > 0.0 && elapsed() > minutes * 60.0) model.stop_training = true;
      }});
  model.fit(ds, {.epochs = epochs, .validation_data = nn::ValidationData(val.x, val.y),
                 .callbacks = cbs, .verbose = 1, .validation_batch_size = batch,
                 .steps_per_epoch = per_epoch});
  const double seconds = elapsed();
  const double tokens = double(batches_done) * double(std::min<std::int64_t>(batch, n_train)) * context;
  std::printf("trained %lld batches in %.1f s: %.0f tokens/s (training, validation included)\n",
              static_cast<long long>(batches_done), seconds, tokens / seconds);
  if (batches_done > 1)
    std::printf("training steps 2..%lld: %.0f tokens/s (as bench/char_transformer_torch.py)\n",
                static_cast<long long>(batches_done),
                tokens * double(batches_done - 1) / double(batches_done) / (last_end - first_end));

  const double val_loss =
      model.evaluate(val.x, val.y, {.batch_size = batch, .verbose = 0}).at("loss");
  std::printf("validation loss: %.3f nats/char (%.3f bits/char; uniform guess %.3f nats)\n",
              val_loss, val_loss / std::log(2.0), std::log(256.0));

  // Generation from the first validation window: each sampled byte is fed back. With the KV
  // cache (default) one step projects the new byte's keys and values, appends them and attends
  // over the cache (O(n)); the learned positions end at the context, so when the cache is full it
  // restarts from the last context/2 bytes. --no-cache re-runs the whole window per byte.
  model.eval();
  std::vector<std::int64_t> seq(val_ids.begin(), val_ids.begin() + context);
  std::vector<std::int64_t> out;
  nn::DecodeCache cache;
  const auto g0 = std::chrono::steady_clock::now();
  for (int k = 0; k < generate; ++k) {
    Tensor last;  // [1, 256]
    if (use_cache) {
      std::vector<std::int64_t> feed(seq.end() - 1, seq.end());
      if (cache.length() == 0)
        feed.assign(seq.end() - std::max(1, context / 2), seq.end());
      Tensor in = soma::constant(feed, {1, std::int64_t(feed.size())}).to(device);
      Tensor logits = nn::decode_step(model.layers(), in, cache);  // [1, n, 256]
      const std::int64_t n = logits.dim(1);
      last = logits.slice(1, n - 1, n).squeeze({1});
      if (cache.length() >= context) cache.reset();
    } else {
      std::vector<std::int64_t> window(seq.end() - context, seq.end());
      Tensor logits = model.predict(soma::constant(window, {1, context}), {.verbose = 0});
      last = logits.slice(1, context - 1, context).squeeze({1});
    }
    const std::int64_t id =
        nn::sample_next(last, {.temperature = temperature, .top_k = top_k,
                               .seed = std::uint64_t(seed) * 1000003u + std::uint64_t(k)})
            .to_vector<std::int64_t>()[0];
    out.push_back(id);
    seq.push_back(id);
  }
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();
  std::printf("generated %d bytes in %.2f s: %.0f tokens/s (%s)\n", generate, gen_s,
              double(generate) / std::max(gen_s, 1e-9),
              use_cache ? "KV cache" : "re-running the window");
  if (!onnx_path.empty() && !soma::onnx::available()) {
    std::printf("ONNX: not available in this build; --onnx skipped\n");
  } else if (!onnx_path.empty()) {
    soma::onnx::export_model(model, onnx_path, {.opset = 17});
    auto back = soma::onnx::load(onnx_path);
    Tensor probe = val.x.slice(0, 0, std::min<std::int64_t>(2, val.x.dim(0)));
    const double diff = soma::max(soma::abs(back->predict(probe, {.verbose = 0}) -
                                            model.predict(probe, {.verbose = 0})))
                            .item<double>();
    std::printf("ONNX: %s, re-imported, largest difference %.2e\n", onnx_path.c_str(), diff);
  }
  std::printf("prompt: \"%s\"\n", tok.decode(std::vector<std::int64_t>(
                                      val_ids.begin(), val_ids.begin() + context)).c_str());
  std::printf("sample: \"%s\"\n", tok.decode(out).c_str());
  return 0;
}
