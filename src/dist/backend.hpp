#pragma once
// Between dist.cpp (always built) and the MPI communicator (src/dist/mpi_communicator.cpp, built
// only with SOMA_HAS_MPI) and the NCCL one (src/dist/nccl_communicator.cpp, SOMA_HAS_NCCL):
// dist.cpp never sees mpi.h, nccl.h or the CUDA runtime.
#include <chrono>
#include <cstdint>
#include <array>
#include <string>
#include <vector>

#include "soma/dist/communicator.hpp"

namespace soma::dist::detail {

// Checks that `t` can take part in a collective: defined, contiguous, on the CPU.
void check_collective_tensor(const char* who, const Tensor& t);
// "7 values of f32"
std::string describe(const Tensor& t);

#ifdef SOMA_HAS_MPI
// MPI_Init (unless MPI is initialised already; then owns_mpi is false) and a communicator over a
// duplicate of MPI_COMM_WORLD.
CommunicatorRef mpi_init(std::chrono::milliseconds timeout, bool& owns_mpi);
// This rank among the ranks on its machine and their number, from MPI_Comm_split_type
// (MPI_COMM_TYPE_SHARED); collective over MPI_COMM_WORLD.
void mpi_local_rank_size(int& local_rank, int& local_size);
// Frees the communicator's resources and calls MPI_Finalize when owns_mpi.
void mpi_finalize(bool owns_mpi);
bool mpi_running();  // initialised and not finalised
[[noreturn]] void mpi_abort(int exit_code);
#endif

// NCCL refuses two ranks on one GPU, with an error that does not say which ranks: before its
// setup the ranks exchange their GPUs' UUIDs (`ids`: one per rank, {0, 0} for a rank without
// a GPU) and this finds, for `rank`, the lowest other rank with the same GPU (-1: none).
int rank_sharing_gpu(const std::vector<std::array<std::int64_t, 2>>& ids, int rank);

// A test seam: makes the communicator for tensors on a CUDA device instead of NCCL (nullptr:
// NCCL again). The tests' CPU stand-in device (tests/support/emulated_device.hpp) has no NCCL;
// tests/dist gives one that stages through the host, so that a distributed fit of a device
// model runs under mpirun without a GPU. Takes effect for the next communicator_for.
using DeviceCommunicatorFactory = CommunicatorRef (*)(Communicator& world, Device device);
void set_device_communicator_factory(DeviceCommunicatorFactory factory);

#ifdef SOMA_HAS_NCCL
// The NCCL communicator on CUDA device `device` (src/dist/nccl_communicator.cpp): `world` (MPI,
// or the local communicator for one process) carries rank 0's ncclUniqueId to the others. A
// collective over `world`: every rank calls it. Throws soma::Error, on every rank, when a rank
// has no usable device or NCCL fails; never waits longer than `timeout`.
CommunicatorRef nccl_create(Communicator& world, int device, std::chrono::milliseconds timeout);
#endif

}  // namespace soma::dist::detail
