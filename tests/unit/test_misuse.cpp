// API misuse (docs/errors.md): each case throws a soma::Error that names what was wrong and,
// where there is one, the fix. The table in docs/errors.md lists these and the cases tested in
// other suites (test_errors, test_model, test_model_file, test_graph, ...).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "soma/soma.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace soma;

namespace {

// Runs f and returns the soma::Error's message ("" when nothing was thrown; another exception
// type is reported as such, which fails the message checks). Prints it, for docs/errors.md.
template <class F>
std::string error_of(F&& f) {
  std::string m;
  try {
    f();
  } catch (const Error& e) {
    m = e.what();
  } catch (const std::exception& e) {
    m = std::string("not a soma::Error: ") + e.what();
  }
  std::printf("  message: %s\n", m.c_str());
  return m;
}
#define EXPECT_CONTAINS(msg, part) \
  EXPECT_NE((msg).find(part), std::string::npos) << "message: '" << (msg) << "' lacks '" << (part) << "'"

std::string temp_path(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("soma_misuse_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

nn::Sequential classifier() {
  return nn::Sequential{nn::Input({4}), nn::Dense(8, nn::relu), nn::Dense(3)};
}

void compile(nn::Model& m) {
  m.compile(optim::Adam(), nn::SparseCategoricalCrossentropy({.from_logits = true}));
}

Tensor labels(std::int64_t n) { return zeros({n}, DType::i64); }

}  // namespace

// ---- devices ----------------------------------------------------------------------------------
TEST(Misuse, TensorOnAnAbsentDevice) {
  if (cuda::is_available()) GTEST_SKIP() << "cuda:0 is present on this machine";
  std::string m = error_of([] { constant({1.0f, 2.0f}).to(Device::cuda(0)); });
  EXPECT_CONTAINS(m, "cuda:0");
  // "not available in this build" without the CUDA backend; with it, on a machine without a
  // GPU, "not available: no CUDA device: ..." (test_cuda covers both).
  EXPECT_CONTAINS(m, "not available");
}

// ---- shapes -----------------------------------------------------------------------------------
TEST(Misuse, FitOnFeaturesOfTheWrongWidth) {
  auto m = classifier();
  compile(m);
  std::string e = error_of([&] { m.fit(zeros({8, 5}), labels(8), {.verbose = 0}); });
  EXPECT_CONTAINS(e, "[8, 5]");
  EXPECT_CONTAINS(e, "4");
}

TEST(Misuse, PredictOnInputsOfTheWrongRank) {
  auto m = classifier();
  std::string e = error_of([&] { m.predict(zeros({2, 2, 2})); });
  EXPECT_CONTAINS(e, "[2, 2, 2]");
}

TEST(Misuse, Conv2DOnAnImageWithoutBatchOrChannelAxes) {
  nn::Conv2D conv(4, 3);
  std::string e = error_of([&] { conv(zeros({28, 28})); });
  EXPECT_CONTAINS(e, "[28, 28]");
}

TEST(Misuse, SetWeightsOfTheWrongShape) {
  auto m = classifier();
  auto w = m.get_weights();
  const std::string key = w.begin()->first;
  w[key] = zeros({7, 7});
  std::string e = error_of([&] { m.set_weights(w); });
  EXPECT_CONTAINS(e, key);
  EXPECT_CONTAINS(e, "[7, 7]");
}

TEST(Misuse, GradientsThatDoNotMatchTheVariables) {
  Variable v(zeros({3}));
  optim::SGD sgd;
  std::string e = error_of([&] { sgd.apply_gradients({zeros({4})}, {v}); });
  EXPECT_CONTAINS(e, "[4]");
  EXPECT_CONTAINS(e, "[3]");
  e = error_of([&] { sgd.apply_gradients({zeros({3}), zeros({3})}, {v}); });
  EXPECT_CONTAINS(e, "2");
}

// ---- dtypes and values ------------------------------------------------------------------------
TEST(Misuse, FloatLabelsForASparseLoss) {
  auto m = classifier();
  compile(m);
  std::string e = error_of([&] { m.fit(zeros({4, 4}), fill({4}, 0.5), {.verbose = 0}); });
  EXPECT_CONTAINS(e, "sparse_categorical_crossentropy: label 0.5 is not an integer class id");
}

TEST(Misuse, ClassIdOutsideTheModelsOutputs) {
  auto m = classifier();  // 3 classes
  compile(m);
  std::string e = error_of([&] { m.fit(zeros({4, 4}), fill({4}, 7, DType::i64), {.verbose = 0}); });
  EXPECT_CONTAINS(e, "7");
  EXPECT_CONTAINS(e, "3");
}

TEST(Misuse, EmbeddingIndexOutOfRange) {
  nn::Embedding emb(10, 4);
  std::string e = error_of([&] { emb(constant({1, 12})); });
  EXPECT_CONTAINS(e, "12");
}

TEST(Misuse, ImageOpOnTheWrongDtype) {
  std::string e = error_of([] { image::encode_png(zeros({4, 4, 3})); });
  EXPECT_CONTAINS(e, "expected dtype u8, got f32");
}

// ---- training lifecycle -----------------------------------------------------------------------
TEST(Misuse, TrainOnBatchBeforeCompile) {
  auto m = classifier();
  std::string e = error_of([&] { m.train_on_batch(zeros({4, 4}), labels(4)); });
  EXPECT_CONTAINS(e, "not compiled");
}

TEST(Misuse, SavingAModelThatIsNotBuilt) {
  nn::Sequential m{nn::Dense(3)};
  std::string e = error_of([&] { m.save(temp_path("unbuilt.soma")); });
  EXPECT_CONTAINS(e, "not built");
}

TEST(Misuse, LoadingWeightsIntoADifferentArchitecture) {
  const std::string path = temp_path("arch.soma");
  auto a = classifier();
  a.save_weights(path);
  nn::Sequential b{nn::Input({4}), nn::Dense(8, nn::relu), nn::Dense(8, nn::relu), nn::Dense(3)};
  std::string e = error_of([&] { b.load_weights(path); });
  EXPECT_CONTAINS(e, "does not match model");
}

TEST(Misuse, LoadModelOnAFileThatIsNotAModel) {
  const std::string path = temp_path("notes.txt");
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("these are not weights\n", f);
  std::fclose(f);
  std::string e = error_of([&] { load_model(path); });
  EXPECT_CONTAINS(e, "not a soma model file");
  e = error_of([&] { load_model(temp_path("missing.soma")); });
  EXPECT_CONTAINS(e, "cannot open");
}

TEST(Misuse, ResumingFromAFileWithoutTrainingState) {
  const std::string path = temp_path("plain.soma");
  auto m = classifier();
  m.save(path);
  auto c = load_checkpoint(path);  // not an error: the state is optional, and absent
  EXPECT_FALSE(c.state.has_value());
}

// ---- data -------------------------------------------------------------------------------------
TEST(Misuse, DatasetBatchOfZero) {
  auto ds = data::Dataset::from_tensor_slices({zeros({4, 2})});
  std::string e = error_of([&] { ds.batch(0); });
  EXPECT_CONTAINS(e, "batch");
}

TEST(Misuse, ReadingAMissingDataFile) {
  std::string e = error_of([] { data::read_idx("/nonexistent/train-images-idx3-ubyte"); });
  EXPECT_CONTAINS(e, "read_idx: cannot open '/nonexistent/train-images-idx3-ubyte'");
}
