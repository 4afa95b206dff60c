// Times the main ops at a few sizes and reports the bandwidth (GB/s, bytes read + written) or
// the arithmetic rate (GFLOP/s), next to naive loops over std::vector doing the same work:
// no op should be slower than the straightforward loop on a large input.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <soma/soma.hpp>

namespace {

using benchmark::Counter;

// Elementwise sizes: 1e3, 1e5, 1e7 elements.
void elementwise_sizes(benchmark::internal::Benchmark* b) {
  b->Arg(1000)->Arg(100000)->Arg(10000000);
}

// Every benchmark measures wall time: the ops run on several threads, and a rate over the
// calling thread's CPU time alone would flatter them.

// Reports `bytes` moved (or `flops` done) per iteration as a rate in units of 1e9 per second;
// Google Benchmark prints it as `GB=12.3/s` or `GFLOP=45.6/s`.
void report_bytes(benchmark::State& state, double bytes) {
  state.counters["GB"] = Counter(bytes * double(state.iterations()) / 1e9, Counter::kIsRate);
}
void report_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP"] = Counter(flops * double(state.iterations()) / 1e9, Counter::kIsRate);
}

soma::Tensor input(const soma::Shape& shape, std::uint64_t seed = 1) {
  return soma::random_uniform(shape, -1.0, 1.0, soma::DType::f32, seed);
}

std::vector<float> input_vector(std::int64_t n, std::uint64_t seed = 1) {
  return input({n}, seed).to_vector<float>();
}

// A [n / 1000, 1000] matrix (rows of 1000), the shape used by the row-wise ops.
soma::Shape matrix_of(std::int64_t n) { return {n / 1000, 1000}; }

// ---- soma ops ---------------------------------------------------------------------------------

void BM_add(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input({n}, 1), b = input({n}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(soma::add(a, b));
  report_bytes(state, 3.0 * 4 * double(n));
}
BENCHMARK(BM_add)->Apply(elementwise_sizes)->UseRealTime();

// [rows, 1000] * [1000]: the row vector is broadcast down the rows.
void BM_multiply_broadcast(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input(matrix_of(n), 1), b = input({1000}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(soma::multiply(a, b));
  report_bytes(state, 4.0 * (2.0 * double(n) + 1000));
}
BENCHMARK(BM_multiply_broadcast)->Apply(elementwise_sizes)->UseRealTime();

void BM_exp(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input({n});
  for (auto _ : state) benchmark::DoNotOptimize(soma::exp(a));
  report_bytes(state, 2.0 * 4 * double(n));
}
BENCHMARK(BM_exp)->Apply(elementwise_sizes)->UseRealTime();

void BM_relu(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input({n});
  for (auto _ : state) benchmark::DoNotOptimize(soma::relu(a));
  report_bytes(state, 2.0 * 4 * double(n));
}
BENCHMARK(BM_relu)->Apply(elementwise_sizes)->UseRealTime();

void BM_sum_all(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input({n});
  for (auto _ : state) benchmark::DoNotOptimize(soma::sum(a));
  report_bytes(state, 4.0 * double(n));
}
BENCHMARK(BM_sum_all)->Apply(elementwise_sizes)->UseRealTime();

// Along the rows (axis 1, contiguous) and down the columns (axis 0, strided): two kernel paths.
void BM_sum_axis1(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input(matrix_of(n));
  for (auto _ : state) benchmark::DoNotOptimize(soma::sum(a, {1}));
  report_bytes(state, 4.0 * double(n));
}
BENCHMARK(BM_sum_axis1)->Apply(elementwise_sizes)->UseRealTime();

void BM_sum_axis0(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input(matrix_of(n));
  for (auto _ : state) benchmark::DoNotOptimize(soma::sum(a, {0}));
  report_bytes(state, 4.0 * double(n));
}
BENCHMARK(BM_sum_axis0)->Apply(elementwise_sizes)->UseRealTime();

void BM_softmax(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input(matrix_of(n));
  for (auto _ : state) benchmark::DoNotOptimize(soma::softmax(a, -1));
  report_bytes(state, 2.0 * 4 * double(n));
}
BENCHMARK(BM_softmax)->Apply(elementwise_sizes)->UseRealTime();

void BM_matmul_f32(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input({n, n}, 1), b = input({n, n}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(soma::matmul(a, b));
  report_flops(state, 2.0 * double(n) * double(n) * double(n));
}
BENCHMARK(BM_matmul_f32)->Arg(64)->Arg(256)->Arg(1024)->UseRealTime();

// A strided view packed into new memory: the copy kernel's general path. Square sides close to
// the elementwise sizes (32^2, 320^2, 3200^2).
void BM_transpose_contiguous(benchmark::State& state) {
  const std::int64_t side = state.range(0);
  soma::Tensor a = input({side, side});
  for (auto _ : state) benchmark::DoNotOptimize(soma::contiguous(soma::transpose(a)));
  report_bytes(state, 2.0 * 4 * double(side) * double(side));
}
BENCHMARK(BM_transpose_contiguous)->Arg(32)->Arg(320)->Arg(3200)->UseRealTime();

void BM_cast_f32_to_f16(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  soma::Tensor a = input({n});
  for (auto _ : state) benchmark::DoNotOptimize(soma::cast(a, soma::DType::f16));
  report_bytes(state, (4.0 + 2.0) * double(n));
}
BENCHMARK(BM_cast_f32_to_f16)->Apply(elementwise_sizes)->UseRealTime();

// ---- naive baselines: the loop a user would write over std::vector -----------------------------

void BM_naive_add(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<float> a = input_vector(n, 1), b = input_vector(n, 2);
  for (auto _ : state) {
    std::vector<float> c(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = a[i] + b[i];
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 3.0 * 4 * double(n));
}
BENCHMARK(BM_naive_add)->Apply(elementwise_sizes)->UseRealTime();

void BM_naive_exp(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<float> a = input_vector(n);
  for (auto _ : state) {
    std::vector<float> c(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = std::exp(a[i]);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * 4 * double(n));
}
BENCHMARK(BM_naive_exp)->Apply(elementwise_sizes)->UseRealTime();

void BM_naive_sum(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<float> a = input_vector(n);
  for (auto _ : state) {
    float s = 0.0f;
    for (float v : a) s += v;
    benchmark::DoNotOptimize(s);
  }
  report_bytes(state, 4.0 * double(n));
}
BENCHMARK(BM_naive_sum)->Apply(elementwise_sizes)->UseRealTime();

void BM_naive_matmul_f32(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const std::size_t un = static_cast<std::size_t>(n);
  std::vector<float> a = input_vector(n * n, 1), b = input_vector(n * n, 2);
  for (auto _ : state) {
    std::vector<float> c(un * un);
    for (std::size_t i = 0; i < un; ++i)
      for (std::size_t j = 0; j < un; ++j) {
        float s = 0.0f;
        for (std::size_t k = 0; k < un; ++k) s += a[i * un + k] * b[k * un + j];
        c[i * un + j] = s;
      }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  report_flops(state, 2.0 * double(n) * double(n) * double(n));
}
BENCHMARK(BM_naive_matmul_f32)->Arg(256)->UseRealTime();

// ---- eager overhead: one tiny op on one-element tensors ----------------------------------------

void BM_eager_add_scalar(benchmark::State& state) {
  soma::Tensor a = soma::constant(1.0f), b = soma::constant(2.0f);
  for (auto _ : state) benchmark::DoNotOptimize(a + b);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_eager_add_scalar)->UseRealTime();

// The same op recorded on a tape that watches its input (the tape is reset now and then so its
// record does not grow without bound; the reset is part of the per-op cost).
void BM_eager_add_scalar_on_tape(benchmark::State& state) {
  soma::Tensor a = soma::constant(1.0f), b = soma::constant(2.0f);
  soma::GradientTape tape;
  tape.watch(a);
  int recorded = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(a + b);
    if (++recorded == 1024) {
      tape.reset();
      tape.watch(a);
      recorded = 0;
    }
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_eager_add_scalar_on_tape)->UseRealTime();

// A whole tiny training-style step: new tape, forward y = x * x, backward dy/dx.
void BM_eager_scalar_forward_backward(benchmark::State& state) {
  soma::Tensor x = soma::constant(3.0f);
  for (auto _ : state) {
    soma::GradientTape tape;
    tape.watch(x);
    soma::Tensor y = x * x;
    benchmark::DoNotOptimize(tape.gradient(y, x));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_eager_scalar_forward_backward)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
