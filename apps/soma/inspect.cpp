// soma eval, soma predict and soma summary: the subcommands that read a model file.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>

#include <soma/image.hpp>

#include "common.hpp"

namespace soma::cli {

namespace {

// Data prepared as [N, C, H, W] fed to a model that was built for another layout with the same
// number of values per sample (say Input({28, 28})): reshape to what the model expects.
Tensor fit_to_model(const Tensor& x, nn::Model& model) {
  auto shape = model_input_shape(model);
  if (!shape) return x;
  Shape want{x.shape()[0]};
  want.insert(want.end(), shape->begin(), shape->end());
  if (want == x.shape()) return x;
  if (soma::numel(Shape(want.begin() + 1, want.end())) ==
      soma::numel(Shape(x.shape().begin() + 1, x.shape().end())))
    return reshape(x, want);
  throw Error("the model takes samples of shape " + shape_str(*shape) + " but the data has " +
              shape_str(Shape(x.shape().begin() + 1, x.shape().end())));
}

std::string fit_name(const std::string& s, std::size_t width) {
  return s.size() <= width ? s : s.substr(0, width);
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  ArgParser p("soma eval", "MODEL [options]",
              "Evaluates a model file on a data set's test split: loss, accuracy, per-class\n"
              "accuracy and the confusion matrix. The last line printed is\n"
              "`test_loss=<x> test_accuracy=<y>`. A model whose weights hold NaN or inf, or a\n"
              "batch-norm moving variance below zero, is refused (exit status 1) after one\n"
              "warning per weight on stderr, unless --allow-invalid-weights is given.");
  p.positional("MODEL", "a model file written by soma train or model.save()", 1, 1)
      .option("data", "SPEC", kDataHelp)
      .option("allow-invalid-weights", "",
              "evaluate even when weights hold NaN/inf or a negative batch-norm variance\n"
              "(the warnings are still printed)")
      .option("batch-size", "N", "samples per forward pass (default 256)")
      .option("threads", "N", "CPU threads (default: all cores)")
      .option("device", "DEV", kDeviceHelp);
  Args a;
  if (parse_or_help(p, argc, argv, a)) return 0;
  const std::string data_spec = a.str("data", "fashion-mnist");
  const Device device = device_option(a);
  const std::int64_t batch_size = a.integer("batch-size", 256, 1);
  if (auto t = a.opt_integer("threads", 1, 4096)) set_num_threads(static_cast<int>(*t));

  auto model = load_model_file(a.positional[0]);
  if (warn_invalid_weights(*model, a.positional[0], "soma eval") && !a.has("allow-invalid-weights"))
    throw Error("'" + a.positional[0] +
                "' has invalid weights (listed above): its predictions would be meaningless; "
                "pass --allow-invalid-weights to evaluate it anyway");
  move_model(*model, device);
  Dataset d = load_dataset(data_spec);
  const Tensor x = fit_to_model(d.x_test, *model);
  const Tensor logits =
      cast(to_host(model->predict(x, {.batch_size = batch_size})), DType::f32);
  if (logits.rank() != 2 || logits.shape()[0] != d.y_test.shape()[0])
    throw Error("the model's output " + shape_str(logits.shape()) +
                " is not one row of class scores per test sample");
  const std::int64_t n = logits.shape()[0];
  const std::int64_t k = std::max(logits.shape()[1], d.num_classes);
  const auto names = class_names_for(d.name, k);

  // The loss the model was compiled with when the file has one; otherwise sparse categorical
  // cross-entropy, on logits unless the outputs already look like probabilities.
  double loss = 0.0;
  if (model->compiled()) {
    loss = model->evaluate(x, d.y_test, {.batch_size = batch_size, .verbose = 0}).at("loss");
  } else {
    const bool probabilities =
        soma::min(logits).item<double>() >= 0.0 &&
        soma::max(soma::abs(soma::sum(logits, {1}) - 1.0)).item<double>() < 1e-3;
    loss = nn::SparseCategoricalCrossentropy({.from_logits = !probabilities})(d.y_test, logits)
               .item<double>();
  }
  const auto pred = argmax(logits, 1).to_vector<std::int64_t>();
  const auto truth = cast(d.y_test, DType::i64).to_vector<std::int64_t>();
  std::vector<std::vector<std::int64_t>> cm(k, std::vector<std::int64_t>(k, 0));
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    cm[truth[i]][pred[i]]++;
    correct += truth[i] == pred[i];
  }
  const double accuracy = n ? double(correct) / double(n) : 0.0;

  std::printf("%lld test samples, %lld classes\n\nper-class accuracy:\n", (long long)n,
              (long long)k);
  for (std::int64_t c = 0; c < k; ++c) {
    const std::int64_t total = std::accumulate(cm[c].begin(), cm[c].end(), std::int64_t(0));
    if (total == 0)
      std::printf("  %2lld %-12s       -  (no samples)\n", (long long)c, names[c].c_str());
    else
      std::printf("  %2lld %-12s  %6.4f  (%lld/%lld)\n", (long long)c, names[c].c_str(),
                  double(cm[c][c]) / double(total), (long long)cm[c][c], (long long)total);
  }
  std::printf("\nconfusion matrix (rows: true class, columns: predicted class id):\n");
  std::printf("  %-12s", "");
  for (std::int64_t c = 0; c < k; ++c) std::printf(" %6lld", (long long)c);
  std::printf("\n");
  for (std::int64_t r = 0; r < k; ++r) {
    std::printf("  %-12s", fit_name(names[r], 12).c_str());
    for (std::int64_t c = 0; c < k; ++c) std::printf(" %6lld", (long long)cm[r][c]);
    std::printf("\n");
  }
  std::printf("\nloss %.4f  accuracy %.4f\n", loss, accuracy);
  std::printf("%s\n", result_line(loss, accuracy).c_str());
  return 0;
}

int cmd_predict(int argc, char** argv) {
  ArgParser p("soma predict", "MODEL IMAGE... [options]",
              "Classifies PNG images with a model file and prints the top classes with their\n"
              "probabilities (the model's outputs when it ends with a softmax or sigmoid, else\n"
              "their softmax). Images of any size and colour are resized to the model's input;\n"
              "grey models invert light-background photos, as Fashion-MNIST was made. MODEL may\n"
              "be an ONNX file (*.onnx, imported with soma::onnx::load); images go through it\n"
              "--batch-size at a time.");
  p.positional("MODEL IMAGE...", "a model file or an ONNX file, then one or more PNG files", 2,
               1 << 20)
      .option("top", "K", "how many classes to show per image (default 3)")
      .option("classes", "NAME",
              "class names: fashion-mnist, cifar10, mnist (digits), or a text file with one\n"
              "name per line (default: cifar10 for 3-channel models, else fashion-mnist)")
      .option("batch-size", "N", "images per forward pass (default 32)")
      .option("device", "DEV", kDeviceHelp);
  Args a;
  if (parse_or_help(p, argc, argv, a)) return 0;
  const std::int64_t top = a.integer("top", 3, 1);
  const std::int64_t batch_size = a.integer("batch-size", 32, 1);
  const Device device = device_option(a);

  const bool imported = is_onnx_path(a.positional[0]);
  auto model = imported ? load_onnx_file(a.positional[0]) : load_model_file(a.positional[0]);
  warn_invalid_weights(*model, a.positional[0], "soma predict");
  move_model(*model, device);
  // Outputs that are probabilities already (a softmax or sigmoid last layer) are shown as they
  // are; logits go through a softmax.
  const bool probabilities = nn::outputs_probabilities(*model);
  auto shape = (imported ? onnx_input_shape(a.positional[0]) : model_input_shape(*model))
                   .value_or(Shape{1, 28, 28});
  const bool colour = shape.size() == 3 && shape[0] == 3;
  if (shape.size() < 2)
    throw Error("the model's input " + shape_str(shape) + " is not an image shape");
  const std::int64_t h = shape[shape.size() - 2], w = shape[shape.size() - 1];

  std::vector<std::string> names;
  const std::string classes = a.str("classes", colour ? "cifar10" : "fashion-mnist");
  if (classes == "fashion-mnist" || classes == "cifar10" || classes == "mnist") {
    names = class_names_for(classes, 10);
  } else {
    std::ifstream in(classes);
    if (!in) throw UsageError("bad value for --classes: '" + classes +
                              "' (expected fashion-mnist, cifar10, mnist or a readable file)");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) names.push_back(line);
  }

  auto read_image = [&](const std::string& path) {
    if (colour) {
      Tensor img = image::read_png(path, {.channels = 3});
      img = image::resize(image::convert_image_dtype(img, DType::f32), {h, w});
      return image::to_chw_f32(img).expand_dims(0);
    }
    return image::load_model_input(path, {.height = h, .width = w,
                                          .channel_axis = shape.size() == 3});
  };
  // --batch-size images at a time: read on the host, one forward pass (on the device with
  // --device), the probabilities back in one copy.
  const std::size_t n_images = a.positional.size() - 1;
  for (std::size_t first = 0; first < n_images; first += std::size_t(batch_size)) {
    const std::size_t last = std::min(n_images, first + std::size_t(batch_size));
    std::vector<Tensor> xs;
    for (std::size_t i = first; i < last; ++i) xs.push_back(read_image(a.positional[1 + i]));
    const Tensor x = xs.size() == 1 ? xs[0] : concat(xs, 0);
    const Tensor out = cast(to_host(model->predict(x, {.batch_size = batch_size})), DType::f32);
    const Tensor probs = probabilities ? out : softmax(out, -1);
    const std::int64_t k = probs.numel() / std::int64_t(xs.size());
    const auto all = probs.to_vector<float>();
    for (std::size_t i = first; i < last; ++i) {
      const std::vector<float> pv(all.begin() + std::int64_t(i - first) * k,
                                  all.begin() + std::int64_t(i - first + 1) * k);
      std::vector<std::int64_t> order(pv.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](auto l, auto r) { return pv[l] > pv[r]; });
      std::printf("%s:\n", a.positional[1 + i].c_str());
      for (std::int64_t j = 0; j < std::min<std::int64_t>(top, std::int64_t(order.size())); ++j) {
        const auto c = order[j];
        const std::string name =
            c < std::int64_t(names.size()) ? names[c] : "class " + std::to_string(c);
        std::printf("  %-12s %6.2f%%  (class %lld)\n", name.c_str(), 100.0 * pv[c], (long long)c);
      }
    }
  }
  return 0;
}

int cmd_summary(int argc, char** argv) {
  ArgParser p("soma summary", "MODEL",
              "Prints the layer table of a model file (Keras' summary). Weights holding NaN or\n"
              "inf, or a batch-norm moving variance below zero, get one warning each on stderr.");
  p.positional("MODEL", "a model file written by soma train or model.save()", 1, 1);
  Args a;
  if (parse_or_help(p, argc, argv, a)) return 0;
  auto model = load_model_file(a.positional[0]);
  model->summary(std::cout);
  std::cout.flush();
  warn_invalid_weights(*model, a.positional[0], "soma summary");
  return 0;
}

}  // namespace soma::cli
