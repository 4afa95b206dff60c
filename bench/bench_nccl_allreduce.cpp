// The reference for soma's NCCL all-reduce figures when NVIDIA's nccl-tests (all_reduce_perf)
// are not installed: a minimal loop of in-place ncclAllReduce (f32 sum) on device buffers, one
// rank per GPU under mpirun, timed as nccl-tests time it (warm-up, `iters` calls queued back to
// back, then one stream synchronisation; the slowest rank's time). No soma code: it is what soma's
// communicator is measured against. Output in bench_dist_allreduce's format:
//   size_bytes=4096 iters=... avg_us=... algbw_GBps=... busbw_GBps=...
// usage: mpirun -np N bench_nccl_allreduce [MAX_BYTES]
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check_cuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "bench_nccl_allreduce: %s: %s\n", call, cudaGetErrorString(e));
  MPI_Abort(MPI_COMM_WORLD, 1);
}
void check_nccl(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return;
  std::fprintf(stderr, "bench_nccl_allreduce: %s: %s\n", call, ncclGetErrorString(r));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long long max_bytes = argc > 1 ? std::atoll(argv[1]) : (1LL << 28);
  // One GPU per rank: the rank among those on this machine picks it.
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (rank == 0) std::printf("# nccl reference: skipped: no CUDA device\n");
    MPI_Finalize();
    return 0;
  }
  check_cuda(cudaSetDevice(local_rank % devices), "cudaSetDevice");
  ncclUniqueId id;
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  cudaStream_t stream;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* buf = nullptr;
  check_cuda(cudaMalloc(&buf, std::size_t(max_bytes)), "cudaMalloc");
  check_cuda(cudaMemset(buf, 0, std::size_t(max_bytes)), "cudaMemset");
  if (rank == 0) std::printf("# raw ncclAllReduce (in place, f32 sum), %d ranks\n", size);
  for (long long bytes = 4; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = std::size_t(bytes / 4);
    const int iters = int(std::clamp<long long>((1LL << 30) / (bytes * 8), 5, 200));
    for (int i = 0; i < 5; ++i)
      check_nccl(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream), "warm-up");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      check_nccl(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, stream),
                 "ncclAllReduce");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    double elapsed = MPI_Wtime() - t0, worst = 0.0;
    MPI_Allreduce(&elapsed, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double avg = worst / iters;
    const double algbw = double(bytes) / avg / 1e9;
    if (rank == 0)
      std::printf("size_bytes=%lld iters=%d avg_us=%.2f algbw_GBps=%.3f busbw_GBps=%.3f\n", bytes,
                  iters, avg * 1e6, algbw, algbw * 2.0 * (size - 1) / size);
  }
  cudaFree(buf);
  cudaStreamDestroy(stream);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
