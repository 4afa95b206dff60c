// The input pipeline alone: one epoch of Fashion-MNIST-shaped data (60000 x 28x28 u8, the real
// files when installed, else synthetic) through shuffle(60000) / batch(32) / map(u8 -> f32 / 255)
// / prefetch(2). Reported as batches/s and samples/s, to compare with the MLP's training speed.
#include <benchmark/benchmark.h>

#include "soma/data/dataset.hpp"
#include "soma/data/idx.hpp"
#include "soma/ops.hpp"

namespace {
using soma::data::Dataset;
using soma::data::Element;

struct Data {
  soma::Tensor x, y;
};

const Data& fashion_mnist() {
  static const Data d = [] {
    try {
      auto tt = soma::data::load_fashion_mnist();
      return Data{tt.x_train, tt.y_train};
    } catch (const soma::Error&) {
      soma::set_seed(1);
      return Data{soma::random_uniform({60000, 28, 28}, 0, 256).cast(soma::DType::u8),
                  soma::random_uniform({60000}, 0, 10).cast(soma::DType::u8)};
    }
  }();
  return d;
}

void run_epoch(benchmark::State& state, const Dataset& ds) {
  std::int64_t batches = 0, samples = 0;
  for (auto _ : state) {
    for (auto& b : ds) {
      benchmark::DoNotOptimize(b[0].raw_data());
      ++batches;
      samples += b[0].shape()[0];
    }
  }
  state.counters["batches/s"] = benchmark::Counter(double(batches), benchmark::Counter::kIsRate);
  state.counters["samples/s"] = benchmark::Counter(double(samples), benchmark::Counter::kIsRate);
}

Element scale(Element e) {
  e[0] = e[0].cast(soma::DType::f32) / 255.0;
  return e;
}

// shuffle / batch / map / prefetch, as a training loop would use it.
void BM_FashionMnistEpoch(benchmark::State& state) {
  const Data& d = fashion_mnist();
  const auto threads = int(state.range(0));
  Dataset ds = Dataset::from_tensor_slices({d.x, d.y})
                   .shuffle(60000, 1)
                   .batch(32)
                   .map(scale, threads)
                   .prefetch(2);
  run_epoch(state, ds);
}
BENCHMARK(BM_FashionMnistEpoch)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same without shuffling (contiguous batches are slices, not gathers).
void BM_FashionMnistEpochNoShuffle(benchmark::State& state) {
  const Data& d = fashion_mnist();
  Dataset ds = Dataset::from_tensor_slices({d.x, d.y}).batch(32).map(scale).prefetch(2);
  run_epoch(state, ds);
}
BENCHMARK(BM_FashionMnistEpochNoShuffle)->Unit(benchmark::kMillisecond)->UseRealTime();

// Per-element map before batching: the slow path (60000 tiny tensors stacked 32 at a time).
void BM_FashionMnistEpochMapThenBatch(benchmark::State& state) {
  const Data& d = fashion_mnist();
  Dataset ds = Dataset::from_tensor_slices({d.x, d.y})
                   .shuffle(60000, 1)
                   .map(scale)
                   .batch(32)
                   .prefetch(2);
  run_epoch(state, ds);
}
BENCHMARK(BM_FashionMnistEpochMapThenBatch)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
