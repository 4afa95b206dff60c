// The process group: init/finalize, rank and size, the world communicator, and the
// single-process communicator used without MPI (or without a launcher).
#include "soma/dist/dist.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/backend.hpp"
#include "soma/error.hpp"

namespace soma::dist {

namespace detail {

void check_collective_tensor(const char* who, const Tensor& t) {
  if (!t.defined()) fail(who, "the tensor is undefined");
  if (t.device() != Device::cpu())
    fail(who, "the tensor is on ", t.device().str(),
         "; this build's communicator (MPI) works on CPU tensors (device tensors need the NCCL "
         "communicator)");
  if (!t.is_contiguous())
    fail(who, "the tensor (shape ", shape_str(t.shape()),
         ") is not contiguous; collectives work in place on contiguous tensors (.contiguous())");
}

std::string describe(const Tensor& t) {
  return soma::detail::cat(t.numel(), " values of ", dtype_name(t.dtype()));
}

}  // namespace detail

namespace {

class LocalWork : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// World size 1: every collective leaves its tensor as it is.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  void allreduce(Tensor& t, ReduceOp) override {
    detail::check_collective_tensor("dist.allreduce", t);
  }
  std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp) override {
    detail::check_collective_tensor("dist.allreduce", t);
    return std::make_unique<LocalWork>();
  }
  void broadcast(Tensor& t, int root) override {
    detail::check_collective_tensor("dist.broadcast", t);
    if (root != 0) fail("dist.broadcast", "root must be in [0, 1), got ", root);
  }
  void barrier() override {}
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(0); }
  bool broken() const override { return false; }
};

struct State {
  CommunicatorRef world;
  bool owns_mpi = false;
  bool uses_mpi = false;
};
State g_state;

std::chrono::milliseconds default_timeout() {
  if (const char* env = std::getenv("SOMA_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double s = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(s > 0.0))
      fail("dist.init", "SOMA_DIST_TIMEOUT must be a positive number of seconds, got '", env, "'");
    return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0));
  }
  return std::chrono::seconds(300);
}

// Whether a launcher (mpirun/mpiexec of Open MPI, MPICH's hydra, MVAPICH) started this process.
bool started_by_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

void finalize_at_exit() { finalize(); }

}  // namespace

CommunicatorRef make_local_communicator() { return std::make_shared<LocalCommunicator>(); }

int launcher_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (const char* s = std::getenv(v)) {
      const int n = std::atoi(s);
      if (n > 0) return n;
    }
  return 1;
}

bool built_with_mpi() {
#ifdef SOMA_HAS_MPI
  return true;
#else
  return false;
#endif
}

void init(const InitOptions& options) {
  if (g_state.world) return;
  const auto timeout = options.timeout ? *options.timeout : default_timeout();
  if (timeout.count() <= 0) fail("dist.init", "the timeout must be positive");
#ifdef SOMA_HAS_MPI
  // Without a launcher MPI is not started: a plain run is world size 1 and needs no MPI runtime.
  if (started_by_launcher()) {
    g_state.world = detail::mpi_init(timeout, g_state.owns_mpi);
    g_state.uses_mpi = true;
    static bool registered = false;
    if (!registered) std::atexit(finalize_at_exit);  // MPI wants MPI_Finalize before exit
    registered = true;
    return;
  }
#else
  if (launcher_world_size() > 1)
    fail("dist.init", "this process is one of ", launcher_world_size(),
         " ranks started by mpirun, but libsoma was built without MPI, so the ranks cannot "
         "communicate; install MPI (Debian: apt-get install libopenmpi-dev) and rebuild soma "
         "(CMake then finds MPI and defines SOMA_HAS_MPI), or run a single process");
#endif
  (void)started_by_launcher;
  g_state.world = make_local_communicator();
}

void finalize() {
  if (!g_state.world) return;
  const bool broken = g_state.world->broken();
  const int my_rank = g_state.world->rank();
  const bool uses_mpi = g_state.uses_mpi;
  g_state.world.reset();
  g_state.uses_mpi = false;
#ifdef SOMA_HAS_MPI
  if (uses_mpi) {
    // After a failed collective the other ranks wait for this one forever: end them all.
    if (broken && detail::mpi_running()) {
      std::fprintf(stderr, "soma::dist: rank %d: a collective failed or timed out; aborting the "
                   "job\n", my_rank);
      std::fflush(stderr);
      detail::mpi_abort(1);
    }
    detail::mpi_finalize(g_state.owns_mpi);
  }
#else
  (void)broken;
  (void)uses_mpi;
  (void)my_rank;
#endif
}

bool initialized() { return g_state.world != nullptr; }
int rank() { return g_state.world ? g_state.world->rank() : 0; }
int world_size() { return g_state.world ? g_state.world->size() : 1; }
bool is_main() { return rank() == 0; }

Communicator& world() { return *world_ref(); }

CommunicatorRef world_ref() {
  if (!g_state.world)
    fail("dist.world", "soma::dist::init() has not been called (call it at the start of main)");
  return g_state.world;
}

void abort(const std::string& message, int exit_code) {
  std::fflush(stdout);
  std::fprintf(stderr, "soma::dist: rank %d: %s\n", rank(), message.c_str());
  std::fflush(stderr);
#ifdef SOMA_HAS_MPI
  if (g_state.uses_mpi && detail::mpi_running()) detail::mpi_abort(exit_code);
#endif
  std::_Exit(exit_code);
}

}  // namespace soma::dist
