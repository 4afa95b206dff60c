// bf16 autocast (include/soma/autocast.hpp): the scope's rules, and the CPU kernels of matmul
// and the three convolution ops against references computed on bf16-rounded inputs with wide
// accumulation. Tests that need real bf16 arithmetic skip where the CPU kernels cannot run it
// (no oneDNN, no AVX-512-BF16); the fallback test covers those machines.
#include <atomic>
#include <cmath>
#include <thread>

#include "test_support.hpp"

namespace soma {
namespace {

using testing::all_close;
using testing::rand_tensor;

// The value a bf16 operand holds: round to nearest even, as oneDNN's reorder does.
Tensor bf16_rounded(const Tensor& t) { return cast(cast(t, DType::bf16), DType::f64); }

double max_abs(const Tensor& t) { return max(abs(cast(t, DType::f64))).item<double>(); }
double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(cast(a, DType::f64) - cast(b, DType::f64))).item<double>();
}

class Bf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!autocast_native(DType::bf16))
      GTEST_SKIP() << "the CPU kernels cannot run bf16 here (soma built without oneDNN, or no "
                      "AVX-512-BF16); autocast falls back to f32 (see Fallback test)";
  }
};

// Under autocast: close to f32 (bf16 tolerance), not bit-equal to it (bf16 really ran), and equal
// to the f64 product of the bf16-rounded operands up to f32 accumulation error.
void expect_bf16_result(const Tensor& got, const Tensor& f32, const Tensor& ref_rounded,
                        const std::string& what) {
  EXPECT_EQ(got.dtype(), DType::f32) << what;
  const double scale = max_abs(f32);
  EXPECT_LE(max_diff(got, f32), 1e-2 * scale) << what;
  EXPECT_GT(max_diff(got, f32), 0.0) << what << ": bit-equal to f32, so bf16 did not run";
  EXPECT_LE(max_diff(got, ref_rounded), 2e-6 * scale) << what;
}

TEST(Autocast, OffByDefaultAndScopesNest) {
  EXPECT_EQ(autocast_dtype(), DType::f32);
  {
    AutocastScope outer(DType::bf16);
    EXPECT_EQ(autocast_dtype(), DType::bf16);
    {
      AutocastScope off(DType::f32);
      EXPECT_EQ(autocast_dtype(), DType::f32);
      {
        AutocastScope half(DType::f16);
        EXPECT_EQ(autocast_dtype(), DType::f16);
      }
      EXPECT_EQ(autocast_dtype(), DType::f32);
    }
    EXPECT_EQ(autocast_dtype(), DType::bf16);
  }
  EXPECT_EQ(autocast_dtype(), DType::f32);
}

TEST(Autocast, RejectsNonFloatDtypesWithAMessage) {
  try {
    AutocastScope s(DType::i32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "AutocastScope: dtype i32 is not an autocast dtype (use bf16, f16, or f32 to "
                 "switch autocast off)");
  }
  EXPECT_THROW(AutocastScope scope(DType::f64), Error);
  EXPECT_EQ(autocast_dtype(), DType::f32);  // a failed scope changes nothing
}

TEST(Autocast, ParsesPrecisionNames) {
  EXPECT_EQ(parse_autocast_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_autocast_dtype("BFloat16"), DType::bf16);
  EXPECT_EQ(parse_autocast_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_autocast_dtype(""), DType::f32);
  EXPECT_EQ(parse_autocast_dtype("f32"), DType::f32);
  try {
    parse_autocast_dtype("int8", "compile");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "compile: unknown precision 'int8' (expected f32, bf16 or f16)");
  }
}

TEST(Autocast, IsPerThread) {
  AutocastScope s(DType::bf16);
  std::atomic<int> seen{-1};
  std::thread([&] { seen = int(autocast_dtype()); }).join();
  EXPECT_EQ(seen.load(), int(DType::f32));
  EXPECT_EQ(autocast_dtype(), DType::bf16);
}

TEST_F(Bf16, OtherThreadsComputeInF32) {
  Tensor a = rand_tensor({40, 50}, 1, -1, 1, DType::f32), b = rand_tensor({50, 30}, 2, -1, 1, DType::f32);
  const Tensor f32 = matmul(a, b);
  AutocastScope s(DType::bf16);
  Tensor other;
  std::thread([&] { other = matmul(a, b); }).join();
  EXPECT_EQ(max_diff(other, f32), 0.0);
  EXPECT_GT(max_diff(matmul(a, b), f32), 0.0);
}

TEST_F(Bf16, MatmulMatchesBf16Reference) {
  Tensor a = rand_tensor({64, 96}, 3, -1, 1, DType::f32), b = rand_tensor({96, 48}, 4, -1, 1, DType::f32);
  const Tensor f32 = matmul(a, b);
  const Tensor ref = matmul(bf16_rounded(a), bf16_rounded(b));
  AutocastScope s(DType::bf16);
  expect_bf16_result(matmul(a, b), f32, ref, "matmul [64,96]x[96,48]");
}

TEST_F(Bf16, MatmulTransposedBatchedAndVectorOperands) {
  AutocastScope off(DType::f32);
  Tensor a = rand_tensor({3, 30, 20}, 5, -1, 1, DType::f32);  // transposed per matrix below
  Tensor b = rand_tensor({25, 30}, 6, -1, 1, DType::f32);     // broadcast over the batch
  Tensor v = rand_tensor({30}, 7, -1, 1, DType::f32);
  auto f = [&] {
    return std::vector<Tensor>{matmul(transpose(a, {0, 2, 1}), transpose(b)), matmul(v, transpose(b)),
                               matmul(transpose(a, {0, 2, 1}), v)};
  };
  const auto f32 = f();
  const Tensor ra = bf16_rounded(a), rb = bf16_rounded(b), rv = bf16_rounded(v);
  const std::vector<Tensor> ref{matmul(transpose(ra, {0, 2, 1}), transpose(rb)),
                                matmul(rv, transpose(rb)), matmul(transpose(ra, {0, 2, 1}), rv)};
  AutocastScope s(DType::bf16);
  const auto got = f();
  for (std::size_t i = 0; i < got.size(); ++i)
    expect_bf16_result(got[i], f32[i], ref[i], "product " + std::to_string(i));
}

TEST_F(Bf16, F64AndIntegerMatmulAreUntouched) {
  Tensor a = rand_tensor({32, 40}, 8), b = rand_tensor({40, 24}, 9);
  Tensor ia = cast(rand_tensor({8, 9}, 10, -9, 9), DType::i32), ib = cast(rand_tensor({9, 7}, 11, -9, 9), DType::i32);
  const Tensor f64 = matmul(a, b), i32 = matmul(ia, ib);
  AutocastScope s(DType::bf16);
  EXPECT_EQ(max_diff(matmul(a, b), f64), 0.0);
  EXPECT_EQ(max_diff(matmul(ia, ib), i32), 0.0);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f64);
}

// CIFAR-CNN-like geometry (blocked layouts) and a strided one.
struct ConvCase {
  Shape x, w;
  Size2 strides;
  Padding padding;
};
const ConvCase kConvCases[] = {{{2, 16, 12, 12}, {32, 16, 3, 3}, 1, "same"},
                               {{3, 32, 9, 9}, {16, 32, 3, 3}, 2, "valid"}};

TEST_F(Bf16, ConvolutionsMatchBf16Reference) {
  std::uint64_t seed = 20;
  for (const auto& k : kConvCases) {
    Tensor x = rand_tensor(k.x, seed++, -1, 1, DType::f32), w = rand_tensor(k.w, seed++, -1, 1, DType::f32);
    const Shape ys = conv2d_output_shape(k.x, k.w, k.strides, k.padding);
    Tensor g = rand_tensor(ys, seed++, -1, 1, DType::f32);
    auto f = [&] {
      return std::vector<Tensor>{conv2d(x, w, k.strides, k.padding),
                                 conv2d_backprop_input(g, w, k.x, k.strides, k.padding),
                                 conv2d_backprop_filter(x, g, k.w, k.strides, k.padding)};
    };
    const auto f32 = f();
    const Tensor rx = bf16_rounded(x), rw = bf16_rounded(w), rg = bf16_rounded(g);
    const std::vector<Tensor> ref{conv2d(rx, rw, k.strides, k.padding),
                                  conv2d_backprop_input(rg, rw, k.x, k.strides, k.padding),
                                  conv2d_backprop_filter(rx, rg, k.w, k.strides, k.padding)};
    AutocastScope s(DType::bf16);
    const auto got = f();
    const char* names[] = {"conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"};
    for (int i = 0; i < 3; ++i)
      expect_bf16_result(got[std::size_t(i)], f32[std::size_t(i)], ref[std::size_t(i)],
                         std::string(names[i]) + " x" + shape_str(k.x));
  }
}

TEST_F(Bf16, F64ConvolutionIsUntouched) {
  Tensor x = rand_tensor({2, 4, 8, 8}, 30), w = rand_tensor({8, 4, 3, 3}, 31);
  const Tensor f64 = conv2d(x, w, 1, "same");
  AutocastScope s(DType::bf16);
  EXPECT_EQ(max_diff(conv2d(x, w, 1, "same"), f64), 0.0);
}

// Gradients through the tape (their matmuls and convolutions run under the scope too) stay
// close to f32's, and stay f32.
TEST_F(Bf16, TapeGradientsAreCloseToF32) {
  Variable w1(rand_tensor({4, 3, 3, 3}, 40, -0.5, 0.5, DType::f32));
  Variable w2(rand_tensor({4 * 8 * 8, 10}, 41, -0.1, 0.1, DType::f32));
  Tensor x = rand_tensor({5, 3, 8, 8}, 42, -1, 1, DType::f32);
  auto grads = [&] {
    GradientTape tape;
    Tensor h = relu(conv2d(x, w1, 1, "same"));
    Tensor y = matmul(reshape(h, {5, 4 * 8 * 8}), w2);
    Tensor loss = sum(square(y));
    return tape.gradient(loss, std::vector<Variable>{w1, w2});
  };
  const auto f32 = grads();
  AutocastScope s(DType::bf16);
  const auto bf = grads();
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(bf[i].dtype(), DType::f32);
    EXPECT_LE(max_diff(bf[i], f32[i]), 2e-2 * max_abs(f32[i])) << "gradient " << i;
    EXPECT_GT(max_diff(bf[i], f32[i]), 0.0) << "gradient " << i;
  }
}

// Graph mode: the kernels read the flag of the thread that runs the session.
TEST_F(Bf16, TracedFunctionFollowsTheCallersScope) {
  Tensor a = rand_tensor({32, 48}, 50, -1, 1, DType::f32), b = rand_tensor({48, 16}, 51, -1, 1, DType::f32);
  auto f = function([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); });
  const Tensor f32 = f({a, b})[0];
  EXPECT_EQ(max_diff(f32, matmul(a, b)), 0.0);
  AutocastScope s(DType::bf16);
  const Tensor got = f({a, b})[0];
  expect_bf16_result(got, f32, matmul(bf16_rounded(a), bf16_rounded(b)), "traced matmul");
}

// Inter-op threads run some steps on worker threads: they take the caller's scope too.
TEST_F(Bf16, SessionInterOpWorkersFollowTheCallersScope) {
  Tensor a = rand_tensor({32, 48}, 52, -1, 1, DType::f32), b = rand_tensor({48, 16}, 53, -1, 1, DType::f32);
  Graph g;
  Tensor x, y, outs[4];
  {
    GraphScope scope(g);
    x = g.placeholder(DType::f32, {32, 48}, "x");
    y = g.placeholder(DType::f32, {48, 16}, "y");
    // Four independent products: with 4 inter-op threads, some run off the calling thread.
    for (int i = 0; i < 4; ++i) outs[i] = matmul(x * double(i + 1), y);
  }
  Session sess(g, {.inter_op_threads = 4, .optimize = false});
  AutocastScope s(DType::bf16);
  for (int rep = 0; rep < 3; ++rep) {
    auto got = sess.run({outs[0], outs[1], outs[2], outs[3]}, {{x, a}, {y, b}});
    for (int i = 0; i < 4; ++i) {
      Tensor ai = a * double(i + 1);
      Tensor f32;
      {
        AutocastScope off(DType::f32);
        f32 = matmul(ai, b);
      }
      expect_bf16_result(got[std::size_t(i)], f32, matmul(bf16_rounded(ai), bf16_rounded(b)),
                         "session product " + std::to_string(i));
    }
  }
}

// f16 has no CPU kernels: the scope is accepted and the CPU computes in f32.
TEST(Autocast, F16FallsBackToF32OnTheCpu) {
  EXPECT_FALSE(autocast_native(DType::f16));
  Tensor a = rand_tensor({20, 30}, 60, -1, 1, DType::f32), b = rand_tensor({30, 10}, 61, -1, 1, DType::f32);
  const Tensor f32 = matmul(a, b);
  AutocastScope s(DType::f16);
  EXPECT_EQ(max_diff(matmul(a, b), f32), 0.0);
}

TEST(Autocast, Fallback) {
  if (autocast_native(DType::bf16)) GTEST_SKIP() << "bf16 runs natively here (see Bf16 tests)";
  Tensor a = rand_tensor({20, 30}, 62, -1, 1, DType::f32), b = rand_tensor({30, 10}, 63, -1, 1, DType::f32);
  const Tensor f32 = matmul(a, b);
  AutocastScope s(DType::bf16);
  EXPECT_EQ(max_diff(matmul(a, b), f32), 0.0);
}

// ---- training: compile(..., {.mixed_precision = "bf16"}) ----

// A learnable synthetic task: the label is the argmax of a fixed linear map of the input.
std::pair<Tensor, Tensor> task(const Shape& sample, std::int64_t n, std::uint64_t seed) {
  Shape xs{n};
  xs.insert(xs.end(), sample.begin(), sample.end());
  Tensor x = rand_tensor(xs, seed, -1, 1, DType::f32);
  std::int64_t d = 1;
  for (auto v : sample) d *= v;
  Tensor proj = rand_tensor({d, 4}, seed + 1, -1, 1, DType::f32);
  Tensor y = argmax(matmul(reshape(x, {n, d}), proj), -1);
  return {x, cast(y, DType::i64)};
}

double final_loss(nn::Sequential model, const std::string& precision, const Tensor& x,
                  const Tensor& y, int steps, std::int64_t batch) {
  // One thread: tiny primitives on a busy 2-core CI machine spend their time in OpenMP barriers.
  const int threads = get_num_threads();
  set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{threads};
  set_seed(7);
  model.compile(optim::Adam({.learning_rate = 3e-3}),
                nn::SparseCategoricalCrossentropy({.from_logits = true}), {},
                {.mixed_precision = precision});
  const std::int64_t nb = x.shape()[0] / batch;
  for (int i = 0; i < steps; ++i) {
    const std::int64_t b = (i % nb) * batch;
    model.train_on_batch(slice(x, {Slice{b, b + batch}}), slice(y, {Slice{b, b + batch}}));
  }
  return model.evaluate(x, y, {.verbose = 0}).at("loss");
}

TEST_F(Bf16, MlpTrainsToNearlyTheF32Loss) {
  const auto [x, y] = task({32}, 512, 70);
  auto make = [] {
    set_seed(3);
    return nn::Sequential{nn::Input({32}), nn::Dense(64, nn::relu), nn::Dense(64, nn::relu),
                          nn::Dense(4)};
  };
  const double f32 = final_loss(make(), "", x, y, 100, 32);
  const double bf16 = final_loss(make(), "bf16", x, y, 100, 32);
  EXPECT_LT(f32, 0.8);  // it learned (chance is ln 4 = 1.39)
  EXPECT_NEAR(bf16, f32, 0.05 + 0.1 * f32);
  EXPECT_NE(bf16, f32);  // bf16 ran
}

TEST_F(Bf16, SmallCnnTrainsToNearlyTheF32Loss) {
  const auto [x, y] = task({3, 8, 8}, 256, 80);
  auto make = [] {
    set_seed(4);
    return nn::Sequential{nn::Input({3, 8, 8}),
                          nn::Conv2D(16, 3, {.padding = "same", .activation = nn::relu}),
                          nn::MaxPool2D(2), nn::Flatten(), nn::Dense(4)};
  };
  const double f32 = final_loss(make(), "", x, y, 100, 32);
  const double bf16 = final_loss(make(), "bf16", x, y, 100, 32);
  EXPECT_LT(f32, 0.8);
  EXPECT_NEAR(bf16, f32, 0.05 + 0.1 * f32);
  EXPECT_NE(bf16, f32);
}

TEST(Autocast, CompileRejectsAnUnknownPrecision) {
  nn::Sequential m{nn::Input({4}), nn::Dense(2)};
  try {
    m.compile(optim::SGD(), nn::MeanSquaredError(), {}, {.mixed_precision = "int8"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "compile: unknown precision 'int8' (expected f32, bf16 or f16)");
  }
}

}  // namespace
}  // namespace soma
