// The process group: init/finalize, rank and size, the world communicator, and the
// single-process communicator used without MPI (or without a launcher).
#include "soma/dist/dist.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/backend.hpp"
#include "soma/cuda.hpp"
#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::dist {

namespace detail {

void check_collective_tensor(const char* who, const Tensor& t) {
  if (!t.defined()) fail(who, "the tensor is undefined");
  if (t.device() != Device::cpu())
    fail(who, "the tensor is on ", t.device().str(),
         "; the MPI communicator works on CPU tensors (CUDA tensors go through NCCL: "
         "dist::communicator_for(tensor.device()), which a distributed fit uses by itself)");
  if (!t.is_contiguous())
    fail(who, "the tensor (shape ", shape_str(t.shape()),
         ") is not contiguous; collectives work in place on contiguous tensors (.contiguous())");
}

std::string describe(const Tensor& t) {
  return soma::detail::cat(t.numel(), " values of ", dtype_name(t.dtype()));
}

int rank_sharing_gpu(const std::vector<std::array<std::int64_t, 2>>& ids, int rank) {
  if (rank < 0 || std::size_t(rank) >= ids.size()) return -1;
  const auto& mine = ids[std::size_t(rank)];
  if (mine[0] == 0 && mine[1] == 0) return -1;  // no GPU: said otherwise
  for (std::size_t r = 0; r < ids.size(); ++r)
    if (int(r) != rank && ids[r] == mine) return int(r);
  return -1;
}

}  // namespace detail

namespace {

class LocalWork : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// World size 1: every collective leaves its tensor as it is, on any device.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  void allreduce(Tensor& t, ReduceOp) override { check("dist.allreduce", t); }
  std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp) override {
    check("dist.allreduce", t);
    return std::make_unique<LocalWork>();
  }
  void broadcast(Tensor& t, int root) override {
    check("dist.broadcast", t);
    if (root != 0) fail("dist.broadcast", "root must be in [0, 1), got ", root);
  }
  void barrier() override {}
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(0); }
  bool broken() const override { return false; }

 private:
  static void check(const char* who, const Tensor& t) {
    if (t.defined() && t.device().is_cpu()) return detail::check_collective_tensor(who, t);
    if (!t.defined()) fail(who, "the tensor is undefined");
    if (!t.is_contiguous())
      fail(who, "the tensor (shape ", shape_str(t.shape()),
           ") is not contiguous; collectives work in place on contiguous tensors (.contiguous())");
  }
};

// InitOptions::backend, parsed once by backend_option().
enum class Backend { Auto, Mpi, Nccl };
struct BackendName {
  const char* name;
  Backend backend;
};
const BackendName kBackendNames[] = {
    {"auto", Backend::Auto}, {"mpi", Backend::Mpi}, {"nccl", Backend::Nccl}};

struct State {
  CommunicatorRef world;
  CommunicatorRef nccl;  // CUDA tensors' communicator, created by communicator_for
  int nccl_device = -1;
  Backend backend = Backend::Auto;
  std::chrono::milliseconds timeout{0};
  int local_rank = 0, local_size = 1;
  detail::DeviceCommunicatorFactory device_factory = nullptr;  // tests only
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

Backend backend_option(const InitOptions& options) {
  std::string name = options.backend;
  if (name.empty())
    if (const char* env = std::getenv("SOMA_DIST_BACKEND")) name = env;
  if (name.empty()) return Backend::Auto;
  const BackendName* found = nullptr;
  for (const auto& e : kBackendNames)
    if (name == e.name) found = &e;
  if (!found)
    fail("dist.init", "backend must be \"auto\", \"mpi\" or \"nccl\" (InitOptions::backend or "
         "$SOMA_DIST_BACKEND), got \"", name, "\"");
  const Backend b = found->backend;
  if (b == Backend::Nccl && !built_with_nccl())
    fail("dist.init", "backend \"nccl\" was asked for, but libsoma was built without NCCL (CMake "
         "builds the NCCL communicator when it finds MPI, the CUDA toolkit and NCCL: nccl.h and "
         "libnccl.so under the toolkit); use \"mpi\" (CPU tensors) or rebuild");
  return b;
}

#ifdef SOMA_HAS_MPI
// This rank among those on its machine, and their number: from the launcher when it says both
// (Open MPI, MPICH's hydra, MVAPICH), else from MPI's shared-memory split (collective: every rank
// asks in init(); the launcher's variables are there on all ranks or on none).
void find_local_rank(int& local_rank, int& local_size) {
  struct Names {
    const char *rank, *size;
  };
  for (const Names& n : {Names{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                         Names{"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
                         Names{"MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"}}) {
    const char* r = std::getenv(n.rank);
    const char* s = std::getenv(n.size);
    if (r && s && std::atoi(s) > 0) {
      local_rank = std::atoi(r);
      local_size = std::atoi(s);
      return;
    }
  }
  detail::mpi_local_rank_size(local_rank, local_size);
}
#endif

}  // namespace

CommunicatorRef make_local_communicator() { return std::make_shared<LocalCommunicator>(); }

namespace detail {
void set_device_communicator_factory(DeviceCommunicatorFactory factory) {
  g_state.device_factory = factory;
  g_state.nccl.reset();
  g_state.nccl_device = -1;
}
}  // namespace detail

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

bool built_with_nccl() {
#ifdef SOMA_HAS_NCCL
  return true;
#else
  return false;
#endif
}

int local_rank() { return g_state.world ? g_state.local_rank : 0; }
int local_size() { return g_state.world ? g_state.local_size : 1; }

Device local_device() {
  if (!cuda::is_available() || cuda::device_count() <= 0) return Device::cpu();
  return Device::cuda(local_rank() % cuda::device_count());
}

CommunicatorRef communicator_for(Device device) {
  const char* who = "dist.communicator_for";
  CommunicatorRef w = world_ref();
  if (device.is_cpu()) return w;
  if (g_state.nccl) {
    if (device.index != g_state.nccl_device)
      fail(who, "this rank's NCCL communicator is on cuda:", g_state.nccl_device, ", not on ",
           device.str(), "; data parallelism uses one GPU per rank (dist::local_device())");
    return g_state.nccl;
  }
  // One process: nothing to exchange, any device will do.
  if (w->size() == 1 && g_state.backend != Backend::Nccl) return w;
  if (g_state.backend == Backend::Mpi)
    fail(who, "collectives on ", device.str(), " tensors need NCCL, but dist::init was asked for "
         "backend \"mpi\"; use backend \"auto\" or \"nccl\", or move the tensors to the CPU");
  if (g_state.device_factory) {
    g_state.nccl = g_state.device_factory(*w, device);
    g_state.nccl_device = device.index;
    return g_state.nccl;
  }
#ifdef SOMA_HAS_NCCL
  g_state.nccl = detail::nccl_create(*w, device.index, g_state.timeout);
  g_state.nccl_device = device.index;
  return g_state.nccl;
#else
  fail(who, "collectives on ", device.str(), " tensors need NCCL, but libsoma was built without "
       "it (CMake builds the NCCL communicator when it finds MPI, the CUDA toolkit and NCCL: "
       "nccl.h and libnccl.so); move the tensors to the CPU (MPI) or rebuild");
#endif
}

void init(const InitOptions& options) {
  if (g_state.world) return;
  const auto timeout = options.timeout ? *options.timeout : default_timeout();
  if (timeout.count() <= 0) fail("dist.init", "the timeout must be positive");
  const Backend backend = backend_option(options);
  // "nccl" now: a GPU must be there (one process per GPU).
  if (backend == Backend::Nccl && !cuda::is_available())
    fail("dist.init", "backend \"nccl\" needs a usable CUDA device on every rank: ",
         cuda::unavailable_reason());
  g_state.backend = backend;
  g_state.timeout = timeout;
  g_state.nccl.reset();
  g_state.nccl_device = -1;
#ifdef SOMA_HAS_MPI
  // Without a launcher MPI is not started: a plain run is world size 1 and needs no MPI runtime.
  if (started_by_launcher()) {
    g_state.world = detail::mpi_init(timeout, g_state.owns_mpi);
    g_state.uses_mpi = true;
    static bool registered = false;
    if (!registered) std::atexit(finalize_at_exit);  // MPI wants MPI_Finalize before exit
    registered = true;
    find_local_rank(g_state.local_rank, g_state.local_size);
    if (backend == Backend::Nccl) communicator_for(local_device());
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
  g_state.local_rank = 0;
  g_state.local_size = 1;
  if (backend == Backend::Nccl) communicator_for(local_device());
}

void finalize() {
  if (!g_state.world) return;
  const bool broken = g_state.world->broken() || (g_state.nccl && g_state.nccl->broken());
  const int my_rank = g_state.world->rank();
  const bool uses_mpi = g_state.uses_mpi;
  g_state.nccl.reset();  // before MPI goes: NCCL's teardown must not wait for anything
  g_state.nccl_device = -1;
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
  // Before init() (a failing init) the launcher's environment knows the rank.
  int r = rank();
  if (!g_state.world)
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK"})
      if (const char* s = std::getenv(v)) {
        r = std::atoi(s);
        break;
      }
  std::fprintf(stderr, "soma::dist: rank %d: %s\n", r, message.c_str());
  std::fflush(stderr);
#ifdef SOMA_HAS_MPI
  if (g_state.uses_mpi && detail::mpi_running()) detail::mpi_abort(exit_code);
#endif
  std::_Exit(exit_code);
}

}  // namespace soma::dist
