// The NCCL communicator: soma's collectives on CUDA tensors, device memory to device memory (no
// host round trip), one process per GPU. Built with SOMA_HAS_NCCL (CMake found NCCL under the
// CUDA toolkit and MPI; docs/distributed.md, "NCCL").
// - Setup: rank 0's ncclUniqueId travels to the others over the world communicator (MPI), then
//   ncclCommInitRankConfig in NCCL's non-blocking mode, so that even the setup is polled with a
//   deadline instead of waiting forever for a rank that never comes.
// - Every collective runs on the communicator's own stream; an event recorded after it is what
//   Work::test() queries (cudaEventQuery: never blocks) and Work::wait() polls up to the timeout,
//   together with ncclCommGetAsyncError (a peer's failure). Past the deadline the communicator
//   is aborted (ncclCommAbort, which also ends the kernels waiting for the dead peer) and
//   soma::Error names the operation, as MpiCommunicator does for its non-blocking all-reduce.
// - The blocking operations are the asynchronous ones plus wait(): unlike MPI's blocking calls,
//   they can be interrupted, so they throw on a timeout instead of ending the process.
// - Ordering with soma's kernels (which run on soma's one stream per device): the collective's
//   stream waits for an event recorded on soma's stream (no host synchronisation, so the backward
//   pass goes on queuing kernels while NCCL runs); the results are read only after Work::wait()
//   (or test()) has seen the collective complete.
// Uses the CUDA runtime API and NCCL directly; soma::cuda (include/soma/cuda.hpp) for whether a
// device is usable.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/backend.hpp"
#include "soma/cuda.hpp"
#include "soma/error.hpp"
#include "soma/ops.hpp"
#ifdef SOMA_HAS_CUDA
#include "backend/cuda/runtime.hpp"  // soma's stream of a device
#endif

namespace soma::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;
using soma::detail::cat;

std::string cuda_text(cudaError_t e) {
  return cat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

void check_cuda(const char* who, const char* call, cudaError_t e) {
  if (e != cudaSuccess) fail(who, call, " failed: ", cuda_text(e));
}

ncclDataType_t nccl_type(const char* who, DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: case DType::boolean: return ncclUint8;
    case DType::i8: return ncclInt8;
  }
  fail(who, "NCCL cannot reduce dtype ", dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

// Makes `device` current for a scope and gives the caller's current device back after it:
// soma's CUDA backend and the user may have another device current.
class DeviceScope {
 public:
  DeviceScope(const char* who, int device) : device_(device) {
    check_cuda(who, "cudaGetDevice", cudaGetDevice(&previous_));
    if (previous_ != device_) check_cuda(who, "cudaSetDevice", cudaSetDevice(device_));
  }
  ~DeviceScope() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int device_ = 0, previous_ = 0;
};

class NcclCommunicator;

class NcclWork : public Work {
 public:
  NcclWork(NcclCommunicator& comm, cudaEvent_t event, std::string what, Tensor keep)
      : comm_(comm), event_(event), what_(std::move(what)), keep_(std::move(keep)) {}
  ~NcclWork() override;
  bool test() override;
  void wait() override;

 private:
  NcclCommunicator& comm_;
  cudaEvent_t event_;
  std::string what_;
  Tensor keep_;  // NCCL writes into it until the event completes
  bool done_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int size, int device, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), device_(device), timeout_(timeout) {}

  // Collective: creates the stream, the barrier's scratch word and the NCCL communicator.
  void setup(const ncclUniqueId& id) {
    const char* who = "dist.nccl";
    DeviceScope scope(who, device_);
    check_cuda(who, "cudaStreamCreateWithFlags",
               cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    check_cuda(who, "cudaMalloc", cudaMalloc(&scratch_, sizeof(std::int32_t)));
    check_cuda(who, "cudaMemsetAsync", cudaMemsetAsync(scratch_, 0, sizeof(std::int32_t), stream_));
    check_cuda(who, "cudaEventCreateWithFlags",
               cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every NCCL call returns at once; soma polls with its deadline
    ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      const std::string last = comm_ ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
      abort_comm();
      fail(who, "ncclCommInitRankConfig failed on rank ", rank_, " of ", size_, " (cuda:", device_,
           "): ", ncclGetErrorString(rc), last.empty() ? "" : ": " + last);
    }
    settle("ncclCommInitRankConfig", "communicator setup");
  }

  ~NcclCommunicator() override {
    // At exit the CUDA runtime may already be gone (its atexit handler can run before ours): then
    // there is nothing left to free.
    int current = 0;
    if (cudaGetDevice(&current) == cudaErrorCudartUnloading) return;
    if (current != device_) (void)cudaSetDevice(device_);
    if (comm_ && !aborted_) {
      if (broken_) {
        (void)ncclCommAbort(comm_);
      } else {
        // Flushes what is still queued; bounded like every other wait.
        ncclResult_t rc = ncclCommFinalize(comm_);
        const auto deadline = Clock::now() + timeout_;
        ncclResult_t state = rc;
        while (rc == ncclSuccess || rc == ncclInProgress) {
          if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) {
            state = ncclInternalError;
            break;
          }
          if (state != ncclInProgress || Clock::now() > deadline) break;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        if (state == ncclSuccess) (void)ncclCommDestroy(comm_);
        else (void)ncclCommAbort(comm_);
      }
    }
    if (inputs_ready_) (void)cudaEventDestroy(inputs_ready_);
    if (scratch_) (void)cudaFree(scratch_);
    if (stream_) (void)cudaStreamDestroy(stream_);
    if (current != device_) (void)cudaSetDevice(current);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  bool broken() const override { return broken_; }

  std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op) override {
    const char* who = "dist.allreduce";
    check_usable(who);
    check_tensor(who, t);
    const ncclDataType_t type = nccl_type(who, t.dtype());
    std::string what = cat("all-reduce (", op_name(op), ") of ", describe(t), " on cuda:", device_);
    return enqueue(who, "ncclAllReduce", std::move(what), t, [&] {
      return ncclAllReduce(t.raw_data(), t.raw_data(), std::size_t(t.numel()), type, nccl_op(op),
                           comm_, stream_);
    });
  }

  void allreduce(Tensor& t, ReduceOp op) override { allreduce_async(t, op)->wait(); }

  void broadcast(Tensor& t, int root) override {
    const char* who = "dist.broadcast";
    check_usable(who);
    check_tensor(who, t);
    if (root < 0 || root >= size_) fail(who, "root must be in [0, ", size_, "), got ", root);
    const ncclDataType_t type = nccl_type(who, t.dtype());
    std::string what =
        cat("broadcast from rank ", root, " of ", describe(t), " on cuda:", device_);
    enqueue(who, "ncclBroadcast", std::move(what), t, [&] {
      return ncclBroadcast(t.raw_data(), t.raw_data(), std::size_t(t.numel()), type, root, comm_,
                           stream_);
    })->wait();
  }

  // NCCL has no barrier: an all-reduce of one word completes only once every rank has joined.
  void barrier() override {
    const char* who = "dist.barrier";
    check_usable(who);
    enqueue(who, "ncclAllReduce", cat("barrier on cuda:", device_), Tensor(), [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_);
    })->wait();
  }

  // True once the operation behind `event` has completed; throws (and aborts the communicator)
  // when CUDA or NCCL report an error. Never blocks.
  bool poll(cudaEvent_t event, const std::string& what) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      abort_comm();
      fail("dist", "rank ", rank_, " of ", size_, ": the ", what, " failed: cudaEventQuery: ",
           cuda_text(e));
    }
    check_async_error(what);
    return false;
  }

  // Polls until `event` completes: back to back first (lowest latency), then every 50 us so that
  // a long wait leaves the core to others; throws after the timeout.
  void wait_event(cudaEvent_t event, const std::string& what) {
    const auto start = Clock::now();
    const auto spin = std::chrono::milliseconds(20);
    for (;;) {
      if (poll(event, what)) return;
      const auto waited = Clock::now() - start;
      if (waited > timeout_) {
        abort_comm();
        fail("dist", timeout_message(what));
      }
      if (waited > spin) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::string timeout_message(const std::string& what) const {
    const double s = std::chrono::duration<double>(timeout_).count();
    return cat("rank ", rank_, " of ", size_, " waited ", s, " s for the ", what,
               " (NCCL) to complete; another rank has died, hangs or runs a different "
               "collective. The job cannot continue (the limit is InitOptions::timeout or "
               "$SOMA_DIST_TIMEOUT)");
  }

  void check_usable(const char* who) const {
    if (broken_)
      fail(who, "an earlier collective failed or timed out: the ranks are out of step and the job "
                "cannot continue");
  }

  void check_tensor(const char* who, const Tensor& t) const {
    if (!t.defined()) fail(who, "the tensor is undefined");
    if (!t.device().is_cuda())
      fail(who, "the tensor is on ", t.device().str(), "; the NCCL communicator works on CUDA "
           "tensors (CPU tensors go through dist::world(), MPI)");
    if (t.device().index != device_)
      fail(who, "the tensor is on ", t.device().str(), " but this rank's NCCL communicator uses "
           "cuda:", device_, "; keep the model on one device per rank (dist::local_device())");
    if (!t.is_contiguous())
      fail(who, "the tensor (shape ", shape_str(t.shape()),
           ") is not contiguous; collectives work in place on contiguous tensors (.contiguous())");
  }

  // NCCL's stream waits for the work soma queued before this call (it wrote the tensor);
  // without soma's stream at hand (no CUDA backend in this build), the host waits for it.
  void after_soma_work(const char* who) {
#ifdef SOMA_HAS_CUDA
    cudaStream_t soma_stream = soma::cuda_detail::stream(device_);
    check_cuda(who, "cudaEventRecord", cudaEventRecord(inputs_ready_, soma_stream));
    check_cuda(who, "cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, inputs_ready_, 0));
#else
    (void)who;
    soma::cuda::synchronize(device_);
#endif
  }

  // The collective on NCCL's stream after soma's pending work, then an event after it.
  template <class F>
  std::unique_ptr<Work> enqueue(const char* who, const char* call, std::string what,
                                const Tensor& t, F&& launch) {
    DeviceScope scope(who, device_);
    after_soma_work(who);
    const ncclResult_t rc = launch();
    if (rc != ncclSuccess && rc != ncclInProgress) {
      const std::string last = ncclGetLastError(comm_);
      abort_comm();
      fail(who, "rank ", rank_, " of ", size_, ": ", call, " for the ", what, " failed: ",
           ncclGetErrorString(rc), last.empty() ? "" : ": " + last);
    }
    if (rc == ncclInProgress) settle(call, what);
    if (t.defined()) t.storage()->version.fetch_add(1);  // written in place
    cudaEvent_t event = nullptr;
    check_cuda(who, "cudaEventCreateWithFlags",
               cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    const cudaError_t e = cudaEventRecord(event, stream_);
    if (e != cudaSuccess) {
      (void)cudaEventDestroy(event);
      abort_comm();
      fail(who, "cudaEventRecord after ", call, " failed: ", cuda_text(e));
    }
    return std::make_unique<NcclWork>(*this, event, std::move(what), t);
  }

  // Non-blocking mode: a call may return ncclInProgress; the communicator's state says when it
  // has been carried out. Bounded by the timeout.
  void settle(const char* call, const std::string& what) {
    const auto start = Clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
      if (rc != ncclSuccess) state = rc;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        const std::string last = ncclGetLastError(comm_);
        abort_comm();
        fail("dist", "rank ", rank_, " of ", size_, ": ", call, " for the ", what, " failed: ",
             ncclGetErrorString(state), last.empty() ? "" : ": " + last);
      }
      if (Clock::now() - start > timeout_) {
        abort_comm();
        fail("dist", timeout_message(what));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void check_async_error(const std::string& what) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) state = rc;
    if (state == ncclSuccess || state == ncclInProgress) return;
    const std::string last = ncclGetLastError(comm_);
    abort_comm();
    fail("dist", "rank ", rank_, " of ", size_, ": the ", what, " failed: NCCL reports ",
         ncclGetErrorString(state), last.empty() ? "" : ": " + last,
         " (a peer died or the network failed)");
  }

  // After a failure or a timeout: ncclCommAbort stops the kernels that wait for a dead peer, and
  // the communicator is broken (dist::finalize() then aborts the whole job).
  void abort_comm() {
    broken_ = true;
    if (comm_ && !aborted_) {
      (void)ncclCommAbort(comm_);
      aborted_ = true;
    }
  }

  int rank_, size_, device_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;  // recorded on soma's stream before each collective
  void* scratch_ = nullptr;
  bool broken_ = false, aborted_ = false;
};

NcclWork::~NcclWork() {
  // Never leave NCCL writing into a buffer that may be freed: finish, unless the job is failing.
  if (!done_ && !comm_.broken()) {
    try {
      wait();
    } catch (...) {
    }
  }
  if (event_) (void)cudaEventDestroy(event_);
}

bool NcclWork::test() {
  if (!done_) done_ = comm_.poll(event_, what_);
  return done_;
}

void NcclWork::wait() {
  if (!done_) comm_.wait_event(event_, what_);
  done_ = true;
}

// Why this rank cannot use `device` ("" when it can).
std::string device_problem(int device) {
  if (!soma::cuda::is_available()) return soma::cuda::unavailable_reason();
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return cat("no CUDA device: cudaGetDeviceCount failed: ", cuda_text(e));
  if (device < 0 || device >= count)
    return cat("cuda:", device, " does not exist (", count, " CUDA device", count == 1 ? "" : "s",
               " visible)");
  return "";
}

}  // namespace

CommunicatorRef nccl_create(Communicator& world, int device, std::chrono::milliseconds timeout) {
  const char* who = "dist.nccl";
  const int rank = world.rank(), size = world.size();
  std::string problem = device_problem(device);
  // One GPU per rank: the ranks compare their GPUs' UUIDs, so that two ranks on one GPU (more
  // ranks on a machine than GPUs, or CUDA_VISIBLE_DEVICES set alike) are named before NCCL's
  // setup fails with "duplicate GPU" on some ranks only.
  {
    Tensor ids = zeros({size, 2}, DType::i64);
    if (problem.empty()) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        std::memcpy(ids.data<std::int64_t>() + 2 * rank, prop.uuid.bytes, 16);
    }
    world.allreduce(ids, ReduceOp::Sum);
    std::vector<std::array<std::int64_t, 2>> all(static_cast<std::size_t>(size));
    std::memcpy(all.data(), ids.data<std::int64_t>(), all.size() * sizeof(all[0]));
    const int other = rank_sharing_gpu(all, rank);
    if (problem.empty() && other >= 0)
      problem = cat("rank ", other, " uses the same GPU (cuda:", device, " here, ",
                    soma::cuda::device_count(), " visible); NCCL needs a GPU of its own for every "
                    "rank: start at most as many ranks per machine as it has GPUs (mpirun "
                    "--map-by ppr:<GPUs>:node, or slots=<GPUs> in the hostfile), or give each rank "
                    "its own with CUDA_VISIBLE_DEVICES");
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (problem.empty() && rank == 0) {
    DeviceScope scope(who, device);
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) problem = cat("ncclGetUniqueId failed: ", ncclGetErrorString(rc));
  }
  // Every rank learns whether all can go on, so that they all throw together instead of the
  // healthy ones waiting for a rank that gave up. The smallest failing rank is reported.
  Tensor verdict = Tensor::empty({1}, DType::i32);
  verdict.data<std::int32_t>()[0] = problem.empty() ? size : rank;
  world.allreduce(verdict, ReduceOp::Min);
  const int failed = verdict.data<std::int32_t>()[0];
  if (failed < size) {
    if (!problem.empty())
      fail(who, "rank ", rank, " of ", size, " cannot use NCCL on cuda:", device, ": ", problem);
    fail(who, "rank ", failed, " of ", size, " cannot use NCCL (it has no usable CUDA device or "
         "NCCL failed there; its own error says why); every rank needs a GPU of its own");
  }
  Tensor id_bytes = Tensor::empty({std::int64_t(sizeof id)}, DType::u8);
  std::memcpy(id_bytes.raw_data(), &id, sizeof id);
  world.broadcast(id_bytes, 0);
  std::memcpy(&id, id_bytes.raw_data(), sizeof id);
  auto comm = std::make_shared<NcclCommunicator>(rank, size, device, timeout);
  comm->setup(id);
  return comm;
}

}  // namespace soma::dist::detail
