// The reference for bench_dist_allreduce: the same measurement with nothing but MPI
// (MPI_Allreduce in place on floats, MPI_COMM_WORLD), in the manner of the OSU / Intel MPI
// benchmarks' allreduce test, which Debian does not package. Same sizes, iteration counts,
// median of 7 timed blocks and output format as bench_dist_allreduce, so the two compare line by
// line.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int kReps = 7;  // timed blocks per size; the median is reported

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (std::int64_t(1) << 26);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rank == 0)
    std::printf("# raw MPI_Allreduce (MPI_IN_PLACE, MPI_FLOAT, MPI_SUM), %d ranks\n", n);
  for (std::int64_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
    std::vector<float> buf(std::size_t(bytes / 4), 1.0f);
    const int count = int(bytes / 4);
    const int iters = int(std::clamp<std::int64_t>((std::int64_t(1) << 26) / (bytes * 64), 2, 300));
    for (int i = 0; i < std::min(iters, 20); ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::vector<double> per_call;
    for (int rep = 0; rep < kReps; ++rep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i)
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double s = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      per_call.push_back(s / iters);
    }
    std::sort(per_call.begin(), per_call.end());
    const double avg = per_call[kReps / 2], algbw = double(bytes) / avg / 1e9;
    if (rank == 0)
      std::printf("size_bytes=%lld iters=%d avg_us=%.2f algbw_GBps=%.3f busbw_GBps=%.3f\n",
                  (long long)bytes, iters, avg * 1e6, algbw, algbw * 2.0 * (n - 1) / n);
  }
  MPI_Finalize();
  return 0;
}
