// Graph mode: an 8-op elementwise chain, eager (8 passes over memory) and as a fused graph
// (block by block, one pass), both against one `copy`; and a training step of the MLP
// 784-128-128-10 at batch 32, eager against compile(..., {.jit = true}).
// GB/s counts one read of the input and one write of the output per iteration for every
// variant, so the chain's figure next to copy's says how close it comes to one pass. (copy is a
// memcpy that stores through the cache, so it also reads each output line before writing it;
// the fused chain writes outputs this large with streaming stores. See docs/graph.md.)
#include <benchmark/benchmark.h>

#include <soma/soma.hpp>

namespace {

using benchmark::Counter;
constexpr std::int64_t kN = std::int64_t(1) << 24;  // 16M floats, 64 MB: far beyond the caches

void report_pass(benchmark::State& state, std::int64_t n) {
  state.counters["GB"] =
      Counter(double(n) * 4.0 * 2.0 * double(state.iterations()) / 1e9, Counter::kIsRate);
}

// Eight cheap ops, so memory traffic (not arithmetic) decides the time.
soma::Tensor chain(const soma::Tensor& x) {
  return soma::relu(soma::negative(soma::sqrt(soma::abs(x * 0.5 + 1.0)) * 2.0 - 0.5));
}

void BM_Copy(benchmark::State& state) {
  soma::Tensor x = soma::random_uniform({kN}, -1, 1, soma::DType::f32, 1);
  for (auto _ : state) benchmark::DoNotOptimize(soma::copy(x).raw_data());
  report_pass(state, kN);
}

void BM_Chain8Eager(benchmark::State& state) {
  soma::Tensor x = soma::random_uniform({kN}, -1, 1, soma::DType::f32, 1);
  for (auto _ : state) benchmark::DoNotOptimize(chain(x).raw_data());
  report_pass(state, kN);
}

void BM_Chain8Graph(benchmark::State& state) {
  soma::Tensor x = soma::random_uniform({kN}, -1, 1, soma::DType::f32, 1);
  soma::Graph g;
  soma::Tensor px = g.placeholder(soma::DType::f32, {-1}, "x");
  soma::Tensor y = chain(px);
  soma::Session sess(g, {.optimize = state.range(0) != 0});
  for (auto _ : state) benchmark::DoNotOptimize(sess.run(y, {{px, x}}).raw_data());
  state.counters["fused_ops"] = double(sess.stats().fused_nodes) / double(sess.stats().plans);
  report_pass(state, kN);
}

void BM_MlpTrainStep(benchmark::State& state) {
  const bool jit = state.range(0) != 0;
  soma::set_seed(1);
  soma::nn::Sequential model{soma::nn::Dense(128, soma::nn::relu),
                             soma::nn::Dense(128, soma::nn::relu), soma::nn::Dense(10)};
  model.compile(soma::optim::Adam({.learning_rate = 1e-3}),
                soma::nn::SparseCategoricalCrossentropy({.from_logits = true}), {},
                {.jit = jit});
  soma::Tensor x = soma::random_uniform({32, 784}, 0, 1, soma::DType::f32, 2);
  soma::Tensor y = soma::cast(soma::random_uniform({32}, 0, 10, soma::DType::f32, 3), soma::DType::i64);
  for (int i = 0; i < 3; ++i) model.train_on_batch(x, y);  // build, trace, plan
  for (auto _ : state) model.train_on_batch(x, y);
  state.counters["steps"] = Counter(double(state.iterations()), Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_Copy)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Chain8Eager)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Chain8Graph)->Arg(1)->Arg(0)->ArgName("optimize")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MlpTrainStep)->Arg(0)->Arg(1)->ArgName("jit")->UseRealTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
