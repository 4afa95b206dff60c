// All-reduce bandwidth through soma's communicator (dist::Communicator::allreduce on f32
// tensors), in the format of bench_dist_allreduce_mpi (the raw-MPI reference) so the two can be
// compared size by size:
//   size_bytes=4096 iters=... avg_us=... algbw_GBps=... busbw_GBps=...
// busbw = algbw * 2 (n - 1) / n: the data each rank's links carry in a ring all-reduce.
//   bench_dist_allreduce [MAX_BYTES] [async|nccl]
// nccl: device buffers on each rank's GPU (dist::local_device()) through the NCCL communicator
// (one process per GPU); skipped, with the reason, without NCCL or a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "soma/soma.hpp"

using namespace soma;

constexpr int kReps = 7;

int main(int argc, char** argv) {
  const std::int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (std::int64_t(1) << 26);
  // async: allreduce_async + wait, the path of the gradient buckets (MPI_Iallreduce, polled).
  const bool async = argc > 2 && std::string(argv[2]) == "async";
  const bool nccl = argc > 2 && std::string(argv[2]) == "nccl";
  try {
    dist::init();
    if (nccl && (!dist::built_with_nccl() || !dist::local_device().is_cuda())) {
      if (dist::rank() == 0)
        std::printf("# nccl: skipped: %s\n", !dist::built_with_nccl()
                                                 ? "libsoma was built without NCCL"
                                                 : ("no CUDA device: " +
                                                    cuda::unavailable_reason()).c_str());
      dist::finalize();
      return 0;
    }
    const Device device = nccl ? dist::local_device() : Device::cpu();
    auto& world = dist::world();  // barriers and timings (CPU)
    auto& c = *dist::communicator_for(device);
    const int n = c.size();
    if (c.rank() == 0)
      std::printf("# soma dist::Communicator::allreduce%s (%s), %d ranks\n",
                  async ? "_async" : "", c.backend().c_str(), n);
    auto reduce = [&](Tensor& t) {
      if (async) c.allreduce_async(t)->wait();
      else c.allreduce(t);
    };
    for (std::int64_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
      Tensor t = fill({bytes / 4}, 1.0).to(device);
      const int iters =
          int(std::clamp<std::int64_t>((std::int64_t(1) << 26) / (bytes * 64), 2, 300));
      for (int i = 0; i < std::min(iters, 20); ++i) reduce(t);  // warm-up
      // kReps timed blocks; the slowest rank's time decides each, the median block is reported
      // (the machine is shared: a median resists the other processes' bursts).
      std::vector<double> per_call;
      for (int rep = 0; rep < kReps; ++rep) {
        world.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) reduce(t);
        Tensor worst = Tensor::empty({1}, DType::f64);
        worst.data<double>()[0] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        world.allreduce(worst, dist::ReduceOp::Max);
        per_call.push_back(worst.data<double>()[0] / iters);
      }
      std::sort(per_call.begin(), per_call.end());
      const double avg = per_call[kReps / 2];
      const double algbw = double(bytes) / avg / 1e9;
      if (c.rank() == 0)
        std::printf("size_bytes=%lld iters=%d avg_us=%.2f algbw_GBps=%.3f busbw_GBps=%.3f\n",
                    (long long)bytes, iters, avg * 1e6, algbw, algbw * 2.0 * (n - 1) / n);
    }
    dist::finalize();
    return 0;
  } catch (const std::exception& e) {
    dist::abort(e.what());
  }
}
