#pragma once
// soma::dist: the process group of a data-parallel job (docs/distributed.md).
//
//   int main(int argc, char** argv) {
//     soma::dist::init();              // MPI_Init under mpirun; world size 1 otherwise
//     ... model.fit(x, y, {.batch_size = 64, .distributed = true}); ...
//     soma::dist::finalize();          // also runs at exit if forgotten
//   }
//   $ mpirun -np 4 ./train
//
// Without MPI in the build, init() gives a world of one process; started by mpirun as one of
// several ranks, it throws instead of silently training N unrelated copies. CUDA tensors go
// through NCCL (one process per GPU; communicator_for, InitOptions::backend).
#include <chrono>
#include <optional>
#include <string>

#include "soma/dist/communicator.hpp"

namespace soma::dist {

struct InitOptions {
  // Longest a collective may wait for the other ranks before the job is declared failed (a rank
  // died or hangs). Unset: $SOMA_DIST_TIMEOUT seconds, else 300 s.
  std::optional<std::chrono::milliseconds> timeout;
  // The engine for CUDA tensors (CPU tensors always go through MPI):
  //   "auto": NCCL, created on the first collective on a CUDA tensor (data-parallel fit does this
  //           when the model is on a GPU), when libsoma has NCCL; else such tensors are refused;
  //   "nccl": create the NCCL communicator now on local_device(); an error without NCCL in the
  //           build or without a usable GPU;
  //   "mpi":  never NCCL (CUDA tensors are refused).
  // Unset: $SOMA_DIST_BACKEND, else "auto".
  std::string backend;
};

// Joins the job: MPI_Init when libsoma has MPI and MPI is not initialised yet (a program that
// initialised MPI itself keeps it). Calling it again does nothing.
void init(const InitOptions& options = {});
// Leaves the job (MPI_Finalize for an MPI soma initialised). After a failed collective it aborts
// the whole job (MPI_Abort) instead, since the other ranks can no longer finish in step.
void finalize();
bool initialized();

int rank();        // 0 before init()
int world_size();  // 1 before init()
bool is_main();    // rank() == 0: the rank that prints and writes files

// The world communicator; init() must have been called.
Communicator& world();
CommunicatorRef world_ref();

// Whether libsoma was built with MPI (SOMA_HAS_MPI).
bool built_with_mpi();
// Whether libsoma was built with the NCCL communicator (SOMA_HAS_NCCL; needs MPI and CUDA).
bool built_with_nccl();
// This process's rank among the ranks on its machine (the launcher's OMPI_COMM_WORLD_LOCAL_RANK
// and friends; else MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) in init()); 0 before init().
int local_rank();
// The number of ranks on this machine (the launcher's OMPI_COMM_WORLD_LOCAL_SIZE and friends, else
// MPI_Comm_split_type); 1 before init().
int local_size();
// The GPU of this rank with one process per GPU: cuda(local_rank() % cuda::device_count()), or
// the CPU when no CUDA device is usable. Put the model there before a distributed fit.
Device local_device();
// The communicator for collectives on tensors on `device`: world() for the CPU; for a CUDA
// device, the NCCL communicator on that device (created by the first call, which is collective:
// every rank calls it), or world() when it is a single process. Throws soma::Error saying why
// when NCCL is not built, not wanted (backend "mpi") or the device is not usable.
CommunicatorRef communicator_for(Device device);
// The number of ranks the launcher (mpirun, srun, hydra) says this job has, from its environment;
// 1 when not started by one.
int launcher_world_size();

// Ends every rank of the job now, with `message` on stderr (MPI_Abort; std::abort alone when
// single-process). For unrecoverable errors in one rank.
[[noreturn]] void abort(const std::string& message, int exit_code = 1);

}  // namespace soma::dist
