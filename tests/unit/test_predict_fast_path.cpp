// The batch-1 inference path (issue 5, workload 4): Model::predict_on_batch without per-call
// heap vectors, Flatten as a metadata-only view, the fused Dense kernel behind them; each against
// the plain ops (fast paths off) and a naive f64 forward pass, plus the errors for bad inputs and
// the allocations per call. Sequential runs [Flatten] Dense Dense ... as one fused chain
// (src/internal/dense_chain.hpp): its intermediate activations never become tensors.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "../../src/internal/cpu_allocator.hpp"
#include "fast_paths_testing.hpp"
#include "error_testing.hpp"
#include "test_support.hpp"
#include <soma/soma.hpp>

// Every operator new in this program (libsoma's included) is counted: the allocation test below.
namespace {
std::atomic<long> g_news{0};
}  // namespace
void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them): a replaced delete must
// match every new, or ASan reports an alloc-dealloc mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace soma {
namespace {

using testing::all_close;
using testing::rand_tensor;

// The CPU allocator's block count (below) needs its cache on; the sanitizer job turns it off
// (SOMA_CPU_CACHE=0), and gets that back after the test.
struct CpuCacheOn {
  CpuCacheOn() { detail::set_cpu_cache_enabled(true); }
  ~CpuCacheOn() {
    const char* env = std::getenv("SOMA_CPU_CACHE");
    detail::set_cpu_cache_enabled(!(env && std::string(env) == "0"));
  }
};

// Under ASan/TSan the tensor handles' shared_ptr blocks are not pooled (src/core/tensor.cpp), so
// each new tensor makes two operator new calls (TensorImpl's and Storage's blocks).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr long kNewsPerTensor = 2;
#else
constexpr long kNewsPerTensor = 0;
#endif

using testing::FastPathsScope;

// The benchmark's MLP (apps/soma/bench.cpp), seeded, with non-zero biases.
nn::Sequential seeded_mlp() {
  auto dense = [](std::int64_t n, const nn::Activation& a, std::uint64_t seed) {
    return nn::Dense(n, a,
                     {.kernel_initializer = nn::init::glorot_uniform(seed),
                      .bias_initializer = nn::init::random_uniform(-0.2, 0.2, seed + 100)});
  };
  return nn::Sequential{nn::Input({1, 28, 28}), nn::Flatten(), dense(128, nn::relu, 1),
                        dense(128, nn::relu, 2), dense(10, nn::linear, 3)};
}

// relu(relu(x W1 + b1) W2 + b2) W3 + b3 in f64, from the model's own weights.
std::vector<double> naive_mlp(const Tensor& x, nn::Sequential& model) {
  const std::vector<Variable> p = model.parameters();
  EXPECT_EQ(p.size(), 6u);
  const std::int64_t m = x.dim(0);
  std::vector<double> h = contiguous(cast(x, DType::f64)).to_vector<double>();
  for (std::size_t l = 0; l < 3; ++l) {
    const std::vector<double> w = p[2 * l].value().to_vector<double>();
    const std::vector<double> b = p[2 * l + 1].value().to_vector<double>();
    const std::int64_t k = p[2 * l].value().dim(0), n = p[2 * l].value().dim(1);
    std::vector<double> out(std::size_t(m * n));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = b[std::size_t(j)];
        for (std::int64_t q = 0; q < k; ++q)
          s += h[std::size_t(i * k + q)] * w[std::size_t(q * n + j)];
        out[std::size_t(i * n + j)] = l < 2 ? std::max(s, 0.0) : s;
      }
    h = std::move(out);
  }
  return h;
}

Tensor input_batch(std::int64_t m, std::uint64_t seed) {
  return cast(rand_tensor({m, 1, 28, 28}, seed, 0.0, 1.0), DType::f32);
}

using soma::testing::error_of;

// ---- predict_on_batch -----------------------------------------------------------------------

class PredictOnBatch : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(PredictOnBatch, MlpMatchesThePlainOpsAndANaiveF64Forward) {
  nn::Sequential model = seeded_mlp();
  const Tensor x = input_batch(GetParam(), 21);
  const Tensor fast = model.predict_on_batch(x);
  Tensor generic;
  {
    FastPathsScope off(false);
    generic = model.predict_on_batch(x);
  }
  ASSERT_EQ(fast.shape(), (Shape{GetParam(), 10}));
  EXPECT_TRUE(all_close(fast, generic, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(fast, naive_mlp(x, model), 1e-5, 1e-5));
}

// 1-8 rows take the fused kernel, 20 the plain ops.
INSTANTIATE_TEST_SUITE_P(Batches, PredictOnBatch, ::testing::Values(1, 3, 8, 20));

TEST(PredictOnBatchPath, GivesBitForBitWhatTheLayersGiveCalledOneByOne) {
  nn::Sequential model = seeded_mlp();
  const Tensor x = input_batch(1, 22);
  const Tensor y = model.predict_on_batch(x);
  NoGradScope no_grad;
  model.eval();
  Tensor h = reshape(x, {1, 784});
  for (std::int64_t i = 1; i < 4; ++i) h = (*model.layer(i))(h);
  ASSERT_EQ(y.shape(), h.shape());
  const std::vector<float> a = y.to_vector<float>(), b = h.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "output " << i;
}

TEST(PredictOnBatchPath, EarlierResultsStayIntactAndEachCallGetsItsOwnTensor) {
  nn::Sequential model = seeded_mlp();
  const Tensor x1 = input_batch(1, 23), x2 = input_batch(1, 24);
  const Tensor y1 = model.predict_on_batch(x1);
  const std::vector<float> before = y1.to_vector<float>();
  Tensor y2 = model.predict_on_batch(x2);
  EXPECT_NE(y1.data<float>(), y2.data<float>());
  EXPECT_NE(y1.id(), y2.id());
  EXPECT_EQ(y1.to_vector<float>(), before) << "a later call wrote into an earlier result";
  y2.data<float>()[0] = 1e6f;  // the caller owns its result
  const Tensor y3 = model.predict_on_batch(x2);
  EXPECT_TRUE(all_close(y3, naive_mlp(x2, model), 1e-5, 1e-5));
  EXPECT_EQ(y1.to_vector<float>(), before);
}

TEST(PredictOnBatchPath, LeavesTheTrainingModeAndARecordingTapeAsTheyWere) {
  nn::Sequential model = seeded_mlp();
  model.train();
  const Tensor x = input_batch(1, 25);
  GradientTape tape(/*persistent=*/true);
  const Tensor y = model.predict_on_batch(x);
  EXPECT_TRUE(model.training());
  EXPECT_TRUE(model.layer(1)->training());
  // predict runs without recording: no gradient reaches the weights through its output ...
  EXPECT_FALSE(tape.gradient(sum(y), model.parameters()[0].value()).defined());
  // ... while ops after it still record.
  const Tensor w = model.parameters()[4].value();
  EXPECT_TRUE(tape.gradient(sum(matmul(ones({1, 128}), w)), w).defined());
}

// After the first calls a batch-1 prediction makes no heap allocation through operator new (the
// vectors come from a per-thread pool, tensor handles from per-thread free lists) and takes one
// block from the CPU allocator: the output. Three blocks would mean the layers ran one by one.
TEST(PredictOnBatchPath, BatchOneAllocatesOnlyItsOutput) {
  CpuCacheOn cache;
  nn::Sequential model = seeded_mlp();
  const Tensor x = input_batch(1, 26);
  for (int i = 0; i < 10; ++i) model.predict_on_batch(x);
  const long news_before = g_news.load();
  const detail::CpuCacheStats blocks_before = detail::cpu_cache_stats();
  constexpr int kCalls = 100;
  for (int i = 0; i < kCalls; ++i) model.predict_on_batch(x);
  const long news = g_news.load() - news_before;
  const detail::CpuCacheStats blocks_after = detail::cpu_cache_stats();
  EXPECT_EQ(news, kCalls * kNewsPerTensor)
      << double(news) / kCalls << " operator new calls per prediction";
  EXPECT_EQ((blocks_after.hits + blocks_after.misses) - (blocks_before.hits + blocks_before.misses),
            std::uint64_t(kCalls))
      << "CPU blocks per prediction: the fused chain should allocate only the output";
}

// Calling a layer wraps its input and output in one-element vectors (Module::call): they come from
// the same per-thread pool.
TEST(PredictOnBatchPath, CallingALayerAllocatesNoVectors) {
  nn::ModuleRef d = nn::Dense(8, nn::relu, {.kernel_initializer = nn::init::glorot_uniform(27)});
  const Tensor x = cast(rand_tensor({1, 5}, 28), DType::f32);
  NoGradScope no_grad;
  for (int i = 0; i < 10; ++i) (*d)(x);
  const long before = g_news.load();
  for (int i = 0; i < 100; ++i) (*d)(x);
  EXPECT_EQ(g_news.load() - before, 100 * kNewsPerTensor);
}

// ---- the fused chain --------------------------------------------------------------------------

// Doubles Dense's output: a subclass overriding forward() must be called, not fused.
class DoubledDense : public nn::Dense {
 public:
  using nn::Dense::Dense;

 protected:
  Tensor forward(const Tensor& x) override { return nn::Dense::forward(x) * 2.0; }
};

nn::DenseOptions seeded(std::uint64_t seed) {
  return {.kernel_initializer = nn::init::glorot_uniform(seed)};
}

TEST(DenseChain, StopsAtLayersItCannotRunAndResumesAfterThem) {
  const nn::Activation custom("relu", [](const Tensor& t) { return t * 0.5; });  // not the ReLU
  nn::Sequential model{nn::Input({6, 5}),
                       nn::Flatten(),
                       nn::Dense(16, nn::relu, seeded(51)),
                       nn::Dropout(0.5),
                       nn::Dense(12, custom, seeded(52)),
                       nn::Dense(9, nn::relu, seeded(53)),
                       DoubledDense(7, nn::linear, seeded(54)),
                       nn::Dense(3, nn::linear, seeded(55))};
  const Tensor x = cast(rand_tensor({2, 6, 5}, 56), DType::f32);
  const Tensor fast = model.predict_on_batch(x);
  // The same layers, called one by one with f64 ops.
  const std::vector<Variable> p = model.parameters();
  ASSERT_EQ(p.size(), 10u);
  auto layer = [&](const Tensor& h, std::size_t l) {
    return matmul(h, cast(p[2 * l].value(), DType::f64)) + cast(p[2 * l + 1].value(), DType::f64);
  };
  Tensor h = reshape(cast(x, DType::f64), {2, 30});
  h = relu(layer(h, 0));
  h = layer(h, 1) * 0.5;
  h = relu(layer(h, 2));
  h = layer(h, 3) * 2.0;
  h = layer(h, 4);
  EXPECT_TRUE(all_close(fast, h.to_vector<double>(), 1e-5, 1e-5));
  FastPathsScope off(false);
  EXPECT_TRUE(all_close(fast, model.predict_on_batch(x), 1e-5, 1e-5));
}

// An inner activation wider than the scratch buffers (2^16 floats) ends the chain: the wide
// layer's output becomes a tensor (two CPU blocks per call instead of one), the rest runs after.
TEST(DenseChain, AWideInnerLayerEndsTheChain) {
  CpuCacheOn cache;
  nn::Sequential model{nn::Input({4}), nn::Dense(70000, nn::relu, seeded(57)),
                       nn::Dense(3, nn::linear, seeded(58))};
  const Tensor x = cast(rand_tensor({1, 4}, 59), DType::f32);
  const Tensor fast = model.predict_on_batch(x);
  const detail::CpuCacheStats before = detail::cpu_cache_stats();
  model.predict_on_batch(x);
  const detail::CpuCacheStats after = detail::cpu_cache_stats();
  EXPECT_EQ((after.hits + after.misses) - (before.hits + before.misses), 2u);
  const std::vector<Variable> p = model.parameters();
  Tensor h = relu(matmul(cast(x, DType::f64), cast(p[0].value(), DType::f64)) +
                  cast(p[1].value(), DType::f64));
  h = matmul(h, cast(p[2].value(), DType::f64)) + cast(p[3].value(), DType::f64);
  EXPECT_TRUE(all_close(fast, h.to_vector<double>(), 1e-5, 1e-5));
}

TEST(DenseChain, InputsOfRankThreeWithoutFlattenKeepTheirLeadingAxesAndNoBiasWorks) {
  nn::DenseOptions no_bias = seeded(62);
  no_bias.use_bias = false;
  nn::Sequential model{nn::Input({3, 5}), nn::Dense(4, nn::relu, seeded(61)),
                       nn::Dense(2, nn::linear, no_bias)};
  const Tensor x = cast(rand_tensor({2, 3, 5}, 63), DType::f32);
  const Tensor fast = model.predict_on_batch(x);
  ASSERT_EQ(fast.shape(), (Shape{2, 3, 2}));
  FastPathsScope off(false);
  EXPECT_TRUE(all_close(fast, model.predict_on_batch(x), 1e-5, 1e-5));
}

TEST(DenseChain, CallingTheModelUnderARecordingTapeRecordsEveryLayer) {
  nn::Sequential model = seeded_mlp();
  const Tensor x = input_batch(1, 64);
  GradientTape tape(/*persistent=*/true);
  const Tensor y = model(x);
  for (const Variable& v : model.parameters())
    EXPECT_TRUE(tape.gradient(sum(y), v.value()).defined()) << v.name();
}

TEST(DenseChain, ThreadsUseTheirOwnScratchMemory) {
  nn::Sequential a = seeded_mlp(), b = seeded_mlp();
  const Tensor xa = input_batch(2, 65), xb = input_batch(2, 66);
  const Tensor want_a = a.predict_on_batch(xa), want_b = b.predict_on_batch(xb);
  bool ok_a = true, ok_b = true;
  auto run = [](nn::Sequential& m, const Tensor& x, const Tensor& want, bool& ok) {
    for (int i = 0; i < 300 && ok; ++i)
      ok = m.predict_on_batch(x).to_vector<float>() == want.to_vector<float>();
  };
  std::thread ta(run, std::ref(a), std::cref(xa), std::cref(want_a), std::ref(ok_a));
  run(b, xb, want_b, ok_b);
  ta.join();
  EXPECT_TRUE(ok_a);
  EXPECT_TRUE(ok_b);
}

// ---- Flatten --------------------------------------------------------------------------------

Tensor flatten(const Tensor& x) {
  nn::ModuleRef f = nn::Flatten();
  return (*f)(x);
}

TEST(FlattenView, AContiguousInputGivesTheReshapeOpsView) {
  const Tensor big = rand_tensor({4, 3, 5}, 31);
  for (const Tensor& x : {big, big.slice(0, 1, 3)}) {  // the slice: contiguous, offset 15
    NoGradScope no_grad;
    const Tensor fast = flatten(x);
    Tensor generic;
    {
      FastPathsScope off(false);
      generic = flatten(x);
    }
    EXPECT_EQ(fast.shape(), (Shape{x.dim(0), 15}));
    EXPECT_EQ(fast.shape(), generic.shape());
    EXPECT_EQ(fast.strides(), generic.strides());
    EXPECT_EQ(fast.offset(), generic.offset());
    EXPECT_EQ(fast.offset(), x.offset());
    EXPECT_EQ(fast.storage(), x.storage()) << "not a view";
    EXPECT_NE(fast.id(), x.id());
    EXPECT_TRUE(all_close(fast, reshape(contiguous(x), {x.dim(0), 15}).to_vector<double>(), 0, 0));
  }
}

TEST(FlattenView, ANonContiguousInputIsCopiedAsBefore) {
  const Tensor x = transpose(rand_tensor({5, 2, 3}, 32), {1, 0, 2});  // [2, 5, 3]
  ASSERT_FALSE(x.is_contiguous());
  NoGradScope no_grad;
  const Tensor y = flatten(x);
  EXPECT_EQ(y.shape(), (Shape{2, 15}));
  EXPECT_NE(y.storage(), x.storage());
  EXPECT_TRUE(all_close(y, reshape(contiguous(x), {2, 15}).to_vector<double>(), 0, 0));
}

TEST(FlattenView, UnderARecordingTapeTheGradientFlowsBackInTheInputsShape) {
  Tensor x = rand_tensor({2, 3, 4}, 33);
  GradientTape tape;
  tape.watch(x);
  const Tensor y = flatten(x);
  const Tensor g = tape.gradient(sum(y * y), x);
  ASSERT_TRUE(g.defined()) << "Flatten did not record under the tape";
  EXPECT_EQ(g.shape(), x.shape());
  EXPECT_TRUE(all_close(g, (x * 2.0).to_vector<double>(), 1e-12, 1e-12));
}

// ---- errors ---------------------------------------------------------------------------------

TEST(PredictErrors, AWrongFeatureCountNamesTheLayerAndTheShapes) {
  auto head = std::make_shared<nn::Dense>(4);
  head->set_name("head");
  nn::Sequential model{nn::Flatten(), nn::ModuleRef(head)};
  model.set_name("net");
  model.predict_on_batch(cast(rand_tensor({1, 2, 3}, 41), DType::f32));  // built for 6 features
  EXPECT_EQ(error_of([&] { model.predict_on_batch(cast(rand_tensor({1, 7}, 42), DType::f32)); }),
            "Sequential: model 'net' expects inputs of shape (None, 2, 3), got [1, 7]");
  NoGradScope no_grad;  // the layer alone, under the fused path's conditions
  EXPECT_EQ(error_of([&] { (*head)(cast(rand_tensor({1, 7}, 42), DType::f32)); }),
            "Dense: layer 'head' expects inputs of shape [batch, ..., 6] (it was built for 6 "
            "features), got [1, 7]");
}

// A Sequential without an input shape checks nothing itself: the Dense layer that meets the
// wrong width reports it, also from inside a fused chain.
TEST(PredictErrors, AWrongWidthInsideAChainIsReportedByItsLayer) {
  auto second = std::make_shared<nn::Dense>(3);
  second->set_name("second");
  nn::Sequential model{nn::Dense(5, nn::relu), nn::ModuleRef(second)};
  model.predict_on_batch(cast(rand_tensor({1, 4}, 44), DType::f32));  // builds 4 -> 5 -> 3
  // 'second' after a 6-wide layer: the chain runs the first layer and stops before 'second'.
  nn::Sequential other{nn::Dense(6, nn::relu)};
  other.predict_on_batch(cast(rand_tensor({1, 4}, 45), DType::f32));
  nn::Sequential wrong{other.layer(0), nn::ModuleRef(second)};
  EXPECT_EQ(error_of([&] { wrong.predict_on_batch(cast(rand_tensor({1, 4}, 47), DType::f32)); }),
            "Dense: layer 'second' expects inputs of shape [batch, ..., 5] (it was built for 5 "
            "features), got [1, 6]");
}

TEST(PredictErrors, AnInputOfTheWrongShapeNamesTheModelAndTheShapes) {
  nn::Sequential model = seeded_mlp();
  const std::string e = error_of(
      [&] { model.predict_on_batch(cast(rand_tensor({1, 1, 28, 27}, 43), DType::f32)); });
  EXPECT_NE(e.find("expects inputs of shape"), std::string::npos) << e;
  EXPECT_NE(e.find("[1, 1, 28, 27]"), std::string::npos) << e;
}

TEST(PredictErrors, UndefinedAndScalarInputs) {
  nn::Sequential model = seeded_mlp();
  EXPECT_EQ(error_of([&] { model.predict_on_batch(Tensor()); }),
            "predict_on_batch: input 0 is undefined");
  EXPECT_EQ(error_of([&] { model.predict_on_batch(scalar(1.0, DType::f32)); }),
            "predict_on_batch: input 0 is a scalar; axis 0 must be the batch");
}

}  // namespace
}  // namespace soma
