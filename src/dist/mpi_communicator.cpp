// The MPI communicator: soma's collectives on CPU tensors through MPI.
// - allreduce_async (the gradient buckets): MPI_Iallreduce, waited for by polling MPI_Test, which
//   also drives MPI's progress, up to the timeout; then soma::Error.
// - allreduce, broadcast, barrier: MPI's blocking collectives (faster than the non-blocking ones
//   for small and medium messages), guarded by a watchdog thread that ends the process with a
//   clear message when one outlasts the timeout; the launcher then ends the other ranks.
// soma uses MPI's C API only; skip the deprecated C++ bindings (and their warnings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dist/backend.hpp"
#include "soma/error.hpp"

namespace soma::dist::detail {

namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, std::size_t(len));
}

MPI_Datatype mpi_type(const char* who, DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: case DType::boolean: return MPI_UINT8_T;
    case DType::i8: return MPI_INT8_T;
    default: break;
  }
  fail(who, "MPI cannot reduce dtype ", dtype_name(t), "; cast to f32 first");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

// Ends this process when a blocking collective outlasts its deadline: the call cannot be
// interrupted, and a rank that exits makes the launcher end the others.
// What a blocking collective is doing, kept as plain values: the message is only built on a
// timeout, so that arming costs nothing measurable.
struct Pending {
  const char* kind = "";  // "all-reduce (sum)", "broadcast", "barrier"
  std::int64_t numel = 0;
  DType dtype = DType::f32;
  int root = -1;
};

std::string describe_pending(const Pending& p) {
  std::string s = p.kind;
  if (p.root >= 0) s += " from rank " + std::to_string(p.root);
  if (p.numel > 0) s += soma::detail::cat(" of ", p.numel, " values of ", dtype_name(p.dtype));
  return s;
}

class Watchdog {
 public:
  explicit Watchdog(std::function<std::string(const std::string&)> message)
      : message_fn_(std::move(message)), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void arm(const Pending& what, std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = what;
    deadline_ = Clock::now() + timeout;
    armed_ = true;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (armed_ && Clock::now() > deadline_) {
        std::fflush(stdout);
        std::fprintf(stderr, "soma::dist: %s; ending this process\n",
                     message_fn_(describe_pending(pending_)).c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  Clock::time_point deadline_;
  Pending pending_;
  std::function<std::string(const std::string&)> message_fn_;
  std::thread thread_;  // last: starts once the members above exist
};

class MpiCommunicator;

class MpiWork : public Work {
 public:
  MpiWork(MpiCommunicator& comm, MPI_Request req, std::string what, Tensor keep)
      : comm_(comm), req_(req), what_(std::move(what)), keep_(std::move(keep)) {}
  ~MpiWork() override;
  bool test() override;
  void wait() override;

 private:
  MpiCommunicator& comm_;
  MPI_Request req_;
  std::string what_;
  Tensor keep_;  // the buffer MPI writes into stays alive until completion
  bool done_ = false;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::chrono::milliseconds timeout)
      : comm_(comm), timeout_(timeout) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Errors come back as codes (turned into soma::Error) instead of killing the process.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  void release() {
    if (comm_ != MPI_COMM_NULL && !broken_) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  bool broken() const override { return broken_; }

  void allreduce(Tensor& t, ReduceOp op) override {
    const char* who = "dist.allreduce";
    check_usable(who);
    check_collective_tensor(who, t);
    guard({op == ReduceOp::Sum   ? "all-reduce (sum)"
           : op == ReduceOp::Max ? "all-reduce (max)"
                                 : "all-reduce (min)",
           t.numel(), t.dtype()});
    const int rc = MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), int(t.numel()),
                                 mpi_type(who, t.dtype()), mpi_op(op), comm_);
    watchdog_.disarm();
    t.storage()->version.fetch_add(1);  // written in place
    check(who, rc);
  }

  std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op) override {
    const char* who = "dist.allreduce";
    check_usable(who);
    check_collective_tensor(who, t);
    MPI_Request req;
    check(who, MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), int(t.numel()), mpi_type(who, t.dtype()),
                              mpi_op(op), comm_, &req));
    t.storage()->version.fetch_add(1);  // written in place
    return std::make_unique<MpiWork>(*this, req,
                                     std::string("all-reduce (") + op_name(op) + ") of " +
                                         describe(t), t);
  }

  void broadcast(Tensor& t, int root) override {
    const char* who = "dist.broadcast";
    check_usable(who);
    check_collective_tensor(who, t);
    if (root < 0 || root >= size_)
      fail(who, "root must be in [0, ", size_, "), got ", root);
    guard({"broadcast", t.numel(), t.dtype(), root});
    const int rc =
        MPI_Bcast(t.raw_data(), int(t.numel()), mpi_type(who, t.dtype()), root, comm_);
    watchdog_.disarm();
    t.storage()->version.fetch_add(1);
    check(who, rc);
  }

  void barrier() override {
    check_usable("dist.barrier");
    guard({"barrier"});
    const int rc = MPI_Barrier(comm_);
    watchdog_.disarm();
    check("dist.barrier", rc);
  }

  std::string timeout_message(const std::string& what) const {
    const double s = std::chrono::duration<double>(timeout_).count();
    return cat("rank ", rank_, " of ", size_, " waited ", s, " s for the ", what,
               " to complete; another rank has died, hangs or runs a different collective. The "
               "job cannot continue (the limit is InitOptions::timeout or $SOMA_DIST_TIMEOUT)");
  }

  // Polls until `req` completes: back to back first (lowest latency; MPI_Wait spins too), then
  // every 200 us so that a long wait leaves the core to others.
  void wait_request(MPI_Request& req, const std::string& what) {
    const auto start = Clock::now();
    const auto spin = std::chrono::milliseconds(20);
    for (;;) {
      if (test_request(req, what)) return;
      const auto waited = Clock::now() - start;
      if (waited > timeout_) {
        broken_ = true;
        fail("dist", timeout_message(what));
      }
      if (waited > spin) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  bool test_request(MPI_Request& req, const std::string& what) {
    int flag = 0;
    int rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      broken_ = true;
      fail("dist", "rank ", rank_, " of ", size_, ": ", what, " failed: ", mpi_error_string(rc));
    }
    return flag != 0;
  }

 private:
  template <class... A>
  static std::string cat(const A&... a) {
    return soma::detail::cat(a...);
  }
  void guard(const Pending& what) { watchdog_.arm(what, timeout_); }
  void check_usable(const char* who) const {
    if (comm_ == MPI_COMM_NULL) fail(who, "the communicator was finalized (dist::finalize())");
    if (broken_)
      fail(who, "an earlier collective failed or timed out: the ranks are out of step and the job "
                "cannot continue");
  }
  void check(const char* who, int rc) {
    if (rc != MPI_SUCCESS) {
      broken_ = true;
      fail(who, "rank ", rank_, " of ", size_, ": ", mpi_error_string(rc));
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  bool broken_ = false;
  Watchdog watchdog_{[this](const std::string& what) { return timeout_message(what); }};
};

MpiWork::~MpiWork() {
  // Never leave a request behind that could still write into a freed buffer: finish it, unless
  // the job is failing anyway.
  if (!done_ && !comm_.broken()) {
    try {
      wait();
    } catch (...) {
    }
  }
}

bool MpiWork::test() {
  if (!done_) done_ = comm_.test_request(req_, what_);
  return done_;
}

void MpiWork::wait() {
  if (!done_) comm_.wait_request(req_, what_);
  done_ = true;
}

std::shared_ptr<MpiCommunicator> g_world;

}  // namespace

CommunicatorRef mpi_init(std::chrono::milliseconds timeout, bool& owns_mpi) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  owns_mpi = !initialized;
  if (!initialized) {
    int provided = 0;
    // Only the thread that calls soma::dist uses MPI (data-loading threads never do).
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) fail("dist.init", "MPI_Init_thread failed: ", mpi_error_string(rc));
  }
  MPI_Comm comm;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);  // soma's traffic never mixes with the user's
  if (rc != MPI_SUCCESS) fail("dist.init", "MPI_Comm_dup failed: ", mpi_error_string(rc));
  g_world = std::make_shared<MpiCommunicator>(comm, timeout);
  return g_world;
}

void mpi_local_rank_size(int& local_rank, int& local_size) {
  // The ranks that share memory with this one are on its machine (MPI-3): a collective over
  // MPI_COMM_WORLD, which every rank makes in init().
  MPI_Comm local;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS)
    fail("dist.init", "MPI_Comm_split_type (the ranks on this machine) failed: ",
         mpi_error_string(rc));
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
}

void mpi_finalize(bool owns_mpi) {
  if (g_world) g_world->release();
  g_world.reset();
  if (owns_mpi && mpi_running()) MPI_Finalize();
}

bool mpi_running() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void mpi_abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; keep the compiler sure of it
}

}  // namespace soma::dist::detail
