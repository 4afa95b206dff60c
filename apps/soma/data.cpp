// --data: the data sets `soma train` and `soma eval` read.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "common.hpp"

namespace soma::cli {

namespace fs = std::filesystem;

const char* const kDataHelp =
    "data set: fashion-mnist (default; Debian's dataset-fashion-mnist package, or\n"
    "fashion-mnist:DIR), mnist:DIR (the four MNIST IDX files), idx:DIR (any IDX set: files\n"
    "named *train-images*, *train-labels*, *t10k-images*/*test-images*, *t10k-labels*/\n"
    "*test-labels*, raw or .gz), cifar10:DIR (the CIFAR-10 binary version) or text:FILE /\n"
    "textT:FILE (a byte-level language model: windows of T bytes, default 128, int64 x and\n"
    "next-byte y [N, T]; the last 10% of the file is the test set)";

namespace {

// The one file in `dir` whose name contains one of `keys`; an error names what is missing.
std::string find_idx_file(const std::string& dir, const std::vector<std::string>& keys) {
  std::vector<std::string> hits;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    for (const auto& k : keys)
      if (name.find(k) != std::string::npos) {
        hits.push_back(entry.path().string());
        break;
      }
  }
  std::string wanted;
  for (const auto& k : keys) wanted += (wanted.empty() ? "*" : " or *") + k + "*";
  if (hits.empty()) throw Error("idx:" + dir + ": no file named " + wanted);
  if (hits.size() > 1) {
    std::sort(hits.begin(), hits.end());
    throw Error("idx:" + dir + ": several files match " + wanted + ": " + hits[0] + ", " +
                hits[1]);
  }
  return hits[0];
}

data::TrainTestData load_idx_dir(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw Error("idx:" + dir + ": not a directory (put the train/test image and label IDX "
                "files there)");
  data::TrainTestData d;
  d.x_train = data::read_idx(find_idx_file(dir, {"train-images"}));
  d.y_train = data::read_idx(find_idx_file(dir, {"train-labels"}));
  d.x_test = data::read_idx(find_idx_file(dir, {"t10k-images", "test-images"}));
  d.y_test = data::read_idx(find_idx_file(dir, {"t10k-labels", "test-labels"}));
  auto check = [&](const Tensor& x, const Tensor& y, const char* split) {
    if (x.rank() < 2 || y.rank() != 1 || x.shape()[0] != y.shape()[0])
      throw Error("idx:" + dir + ": " + split + " images " + shape_str(x.shape()) +
                  " and labels " + shape_str(y.shape()) +
                  " do not match (expected [N, ...] images and [N] labels)");
  };
  check(d.x_train, d.y_train, "train");
  check(d.x_test, d.y_test, "test");
  return d;
}

// The output layer gets one logit per class id up to the largest label, so a label is checked
// before it sizes the model: a label of 3000000 in a file of 100 samples is an error in the file,
// not a request for a 3000001-way classifier.
constexpr std::int64_t kMaxClasses = 65536;

std::int64_t count_classes(const std::string& spec, const Tensor& y_train, const Tensor& y_test) {
  std::int64_t top = 0;
  auto scan = [&](const Tensor& y, const char* split) {
    if (!y.numel()) return;
    const Tensor yd = cast(y, DType::f64).contiguous();  // exact for every label dtype up to 2^53
    const double* p = yd.data<double>();
    for (std::int64_t i = 0; i < yd.numel(); ++i) {
      const double v = p[i];
      auto shown = [&] {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", v);
        return std::string(buf);
      };
      if (!(v >= 0))  // NaN too
        throw Error(spec + ": " + split + " label " + shown() + " at row " + std::to_string(i) +
                    " is not a class id (class ids are integers >= 0)");
      if (v >= double(kMaxClasses))
        throw Error(spec + ": " + split + " label " + shown() + " at row " + std::to_string(i) +
                    " would size the output layer to " +
                    (v < 1e18 ? std::to_string(std::int64_t(v) + 1) : std::string("more than 10^18")) +
                    " classes (limit " + std::to_string(kMaxClasses) + "); class ids must be 0 .. " +
                    std::to_string(kMaxClasses - 1));
      top = std::max(top, std::int64_t(v));
    }
  };
  scan(y_train, "train");
  scan(y_test, "test");
  return std::max<std::int64_t>(10, top + 1);
}

}  // namespace

Tensor to_model_input(const Tensor& images) {
  Tensor x = is_floating(images.dtype()) ? cast(images, DType::f32)
                                         : cast(images, DType::f32) / 255.0;
  if (x.rank() == 3) x = reshape(x, {x.shape()[0], 1, x.shape()[1], x.shape()[2]});
  return x;
}

std::vector<std::string> class_names_for(const std::string& dataset, std::int64_t num_classes) {
  std::vector<std::string> names;
  if (dataset == "fashion-mnist")
    names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
             "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  else if (dataset == "cifar10")
    names = {"airplane", "automobile", "bird",  "cat",  "deer",
             "dog",      "frog",       "horse", "ship", "truck"};
  for (auto i = static_cast<std::int64_t>(names.size()); i < num_classes; ++i)
    names.push_back(std::to_string(i));
  names.resize(static_cast<std::size_t>(num_classes));
  return names;
}

// text:FILE / textT:FILE: next-byte windows (data::text_windows) over the first 90% of the
// file (stride T/4 + 1, as examples/char_transformer) and the last 10% (stride T).
Dataset load_text(const std::string& spec, const std::string& kind, const std::string& file) {
  std::int64_t context = 128;
  if (kind.size() > 4) {
    const std::string digits = kind.substr(4);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6 ||
        (context = std::stoll(digits)) < 1)
      throw UsageError("bad value for --data: '" + spec +
                       "' (expected text:FILE or textT:FILE with a context T >= 1)");
  }
  if (file.empty())
    throw UsageError("bad value for --data: '" + spec + "' (text needs a file: --data text:FILE)");
  const std::vector<std::int64_t> ids = data::ByteTokenizer().encode(data::read_text_file(file));
  const std::size_t split = ids.size() * 9 / 10;
  if (std::int64_t(split) <= context || std::int64_t(ids.size() - split) <= context)
    throw Error("--data " + spec + ": " + std::to_string(ids.size()) +
                " bytes are too few for windows of " + std::to_string(context) +
                " in both the training 90% and the test 10%");
  auto train = data::text_windows(std::vector<std::int64_t>(ids.begin(), ids.begin() + std::ptrdiff_t(split)),
                                  {.context = context, .stride = context / 4 + 1});
  auto test = data::text_windows(std::vector<std::int64_t>(ids.begin() + std::ptrdiff_t(split), ids.end()),
                                 {.context = context, .stride = context});
  Dataset out;
  out.name = "text";
  out.x_train = train.x;
  out.y_train = train.y;
  out.x_test = test.x;
  out.y_test = test.y;
  out.num_classes = 256;
  out.class_names = class_names_for("text", 256);
  return out;
}

Dataset load_dataset(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string dir = colon == std::string::npos ? "" : spec.substr(colon + 1);
  data::TrainTestData d;
  if (kind.rfind("text", 0) == 0) return load_text(spec, kind, dir);
  if (kind == "fashion-mnist") {
    d = data::load_fashion_mnist(dir.empty() ? data::kFashionMnistDir : dir);
  } else if (kind == "mnist" || kind == "idx" || kind == "cifar10") {
    if (dir.empty())
      throw UsageError("bad value for --data: '" + spec + "' (" + kind +
                       " needs a directory: --data " + kind + ":DIR)");
    d = kind == "mnist" ? data::load_mnist(dir)
        : kind == "idx" ? load_idx_dir(dir)
                        : data::load_cifar10(dir);
  } else {
    throw UsageError("bad value for --data: '" + spec +
                     "' (expected fashion-mnist, mnist:DIR, idx:DIR or cifar10:DIR)");
  }
  Dataset out;
  out.name = kind;
  out.x_train = to_model_input(d.x_train);
  out.x_test = to_model_input(d.x_test);
  out.y_train = d.y_train;
  out.y_test = d.y_test;
  out.num_classes = count_classes(spec, d.y_train, d.y_test);
  out.class_names = class_names_for(kind, out.num_classes);
  return out;
}

std::string result_line(double loss, double accuracy) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "test_loss=%.4f test_accuracy=%.4f", loss, accuracy);
  return buf;
}

bool parse_or_help(const ArgParser& parser, int argc, char** argv, Args& out) {
  out = parser.parse(argc, argv, 0);
  if (out.help) {
    std::fputs(parser.help().c_str(), stdout);
    return true;
  }
  return false;
}

}  // namespace soma::cli
