// Data-parallel training throughput: a dense MLP (784-512-512-10, as on Fashion-MNIST) trained
// with fit({.distributed = true}) on synthetic data. Run it under mpirun with 1, 2, ... ranks;
// rank 0 prints one machine-readable line:
//   bench_dist_train ranks=2 threads=1 global_batch=256 steps=40 samples_per_s=...
// Usage: mpirun -np N bench_dist_train [global_batch] [steps] [bucket_bytes] [loop]
// With `loop`, a hand-written training loop over the same model measures the gradient reducer
// with and without overlap (buckets started during the backward pass vs after it):
//   bench_dist_loop ranks=2 ... overlap=1 samples_per_s=...
// (bench/bench_dist.sh runs the whole comparison.)
// Environment: BENCH_MODEL=mlp (default) or cnn (the CIFAR-shaped CNN of examples/cnn_cifar10:
// two Conv2D + MaxPool2D, Dense; 32x32x3 inputs); BENCH_DEVICE=cpu (default) or cuda: the model
// and the data on dist::local_device() (one GPU per rank, gradients over NCCL); without a usable
// GPU rank 0 prints "# skipped: ..." and the run succeeds.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "soma/soma.hpp"

using namespace soma;

int main(int argc, char** argv) {
  const std::int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256;
  const std::int64_t steps = argc > 2 ? std::atoll(argv[2]) : 40;
  const std::int64_t bucket = argc > 3 ? std::atoll(argv[3]) : (1 << 20);
  try {
    dist::init();
    const int threads =
        std::getenv("OMP_NUM_THREADS") ? std::atoi(std::getenv("OMP_NUM_THREADS")) : 1;
    set_num_threads(threads);
    set_seed(1);
    const std::int64_t n = batch * steps;
    const std::string model_name = std::getenv("BENCH_MODEL") ? std::getenv("BENCH_MODEL") : "mlp";
    const std::string device_name = std::getenv("BENCH_DEVICE") ? std::getenv("BENCH_DEVICE") : "cpu";
    const bool cnn = model_name == "cnn";
    Device device = Device::cpu();
    if (device_name == "cuda") {
      device = dist::local_device();
      if (!device.is_cuda()) {
        if (dist::is_main())
          std::printf("# skipped: BENCH_DEVICE=cuda but no usable GPU: %s\n",
                      cuda::unavailable_reason().c_str());
        dist::finalize();
        return 0;
      }
    }
    const Shape sample = cnn ? Shape{3, 32, 32} : Shape{784};
    Shape xs{n};
    xs.insert(xs.end(), sample.begin(), sample.end());
    Tensor x = random_normal(xs, 0.0, 1.0, DType::f32, 3);
    Tensor y = argmax(matmul(reshape(x, {n, -1}),
                             random_normal({soma::numel(sample), 10}, 0.0, 1.0, DType::f32, 4)),
                      -1);
    auto model_ref =
        cnn ? std::make_shared<nn::Sequential>(
                  nn::Conv2D(32, 3, {.padding = "same", .activation = nn::relu}), nn::MaxPool2D(2),
                  nn::Conv2D(64, 3, {.padding = "same", .activation = nn::relu}), nn::MaxPool2D(2),
                  nn::Flatten(), nn::Dense(128, nn::relu), nn::Dense(10))
            : std::make_shared<nn::Sequential>(nn::Dense(512, nn::relu), nn::Dense(512, nn::relu),
                                               nn::Dense(10));
    nn::Sequential& model = *model_ref;
    if (device.is_cuda()) {
      Shape in{-1};
      in.insert(in.end(), sample.begin(), sample.end());
      model.build_for(in);
      model.to(device);
      x = x.to(device);  // fit cuts device data on the device (no copy per batch)
      y = y.to(device);
    }
    model.compile(optim::SGD({.learning_rate = 0.01}),
                  nn::SparseCategoricalCrossentropy({.from_logits = true}));
    nn::FitOptions o{.epochs = 1, .batch_size = batch, .shuffle = false};
    o.verbose = 0;
    o.distributed = true;
    o.distributed_bucket_bytes = bucket;
    if (argc > 4 && std::string(argv[4]) == "loop") {
      if (!device.is_cpu()) {
        if (dist::is_main()) std::printf("# loop: CPU only\n");
        dist::finalize();
        return 0;
      }
      model.build_for({-1, 784});
      std::vector<Variable> vars = model.trainable_parameters();
      std::vector<Tensor> values;
      for (auto& v : vars) values.push_back(v.value());
      dist::broadcast_parameters(dist::world(), values);
      auto opt = optim::SGD({.learning_rate = 0.01});
      nn::SparseCategoricalCrossentropy loss_fn({.from_logits = true});
      const auto [lo, hi] = dist::shard_range(batch, dist::rank(), dist::world_size());
      for (bool overlap : {true, false, true, false}) {
        dist::GradientReducer reducer(dist::world_ref(), vars,
                                      {.bucket_bytes = bucket, .overlap = overlap});
        auto step = [&](std::int64_t k) {
          const std::int64_t start = (k % steps) * batch;
          Tensor xb = x.slice(0, start + lo, start + hi), yb = y.slice(0, start + lo, start + hi);
          GradientTape tape;
          Tensor l = loss_fn(yb, model(xb));
          reducer.begin_step(double(hi - lo) / double(batch));
          tape.set_gradient_ready_hook(reducer.hook());
          tape.gradient(l, vars);
          opt.apply_gradients(reducer.finish_step(), vars);
        };
        for (int k = 0; k < 3; ++k) step(k);
        dist::world().barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (std::int64_t k = 0; k < steps; ++k) step(k);
        dist::world().barrier();
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (dist::is_main())
          std::printf("bench_dist_loop ranks=%d global_batch=%lld steps=%lld bucket_bytes=%lld "
                      "buckets=%lld overlap=%d seconds=%.3f samples_per_s=%.1f\n",
                      dist::world_size(), (long long)batch, (long long)steps, (long long)bucket,
                      (long long)reducer.num_buckets(), int(overlap), s,
                      double(batch * steps) / s);
      }
      dist::finalize();
      return 0;
    }
    // Warm-up: allocations, the weight broadcast, MPI connections.
    model.fit(x.slice(0, 0, batch * 3), y.slice(0, 0, batch * 3), o);
    dist::world().barrier();
    const auto t0 = std::chrono::steady_clock::now();
    model.fit(x, y, o);
    dist::world().barrier();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dist::is_main())
      std::printf("bench_dist_train ranks=%d threads=%d model=%s device=%s global_batch=%lld "
                  "steps=%lld bucket_bytes=%lld seconds=%.3f samples_per_s=%.1f\n",
                  dist::world_size(), threads, model_name.c_str(), device.str().c_str(),
                  (long long)batch, (long long)steps, (long long)bucket, s, double(n) / s);
    dist::finalize();
    return 0;
  } catch (const std::exception& e) {
    dist::abort(e.what());
  }
}
