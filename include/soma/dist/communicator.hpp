#pragma once
// dist::Communicator: collective operations on Tensors among the processes (ranks) of a job.
//
// One interface, several engines: MpiCommunicator (CPU tensors, Open MPI / MPICH, built when
// CMake finds MPI), NcclCommunicator (CUDA tensors, one process per GPU, built when CMake also
// finds NCCL; dist::communicator_for(device)); a single-process LocalCommunicator (world size 1,
// any device) everywhere. Data-parallel training
// (dist/data_parallel.hpp) only ever talks to this interface, so a new engine needs no change
// there. soma implements no transport of its own: the engines do the communication.
//
// Every operation is collective: all ranks call it, in the same order, with tensors of the same
// shape and dtype. Operations work in place on contiguous tensors. None waits forever for a rank
// that died or hangs: past the communicator's timeout, Work::wait() throws soma::Error naming the
// operation (the communicator is then broken, and dist::finalize() aborts the whole job instead
// of waiting for the missing rank), and a blocking operation, which cannot be interrupted, ends
// the process with that message on stderr (the launcher then ends the other ranks).
#include <chrono>
#include <memory>
#include <string>

#include "soma/tensor.hpp"

namespace soma::dist {

enum class ReduceOp { Sum, Max, Min };

// An operation in flight (allreduce_async). Its tensor must stay alive and untouched until it
// completes.
class Work {
 public:
  virtual ~Work() = default;
  // Makes progress and tells whether the operation has completed (never blocks).
  virtual bool test() = 0;
  // Blocks until it completes; throws soma::Error after the communicator's timeout.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "local", "mpi", "nccl".
  virtual std::string backend() const = 0;

  // Every rank's `t` becomes the element-wise reduction of all ranks' `t`.
  virtual void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // Starts an all-reduce and returns at once, so that computation can overlap it.
  virtual std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // Every rank's `t` becomes root's `t`.
  virtual void broadcast(Tensor& t, int root = 0) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // How long one collective may take before it is declared failed.
  virtual std::chrono::milliseconds timeout() const = 0;
  // True after a collective failed or timed out: the ranks are no longer in step.
  virtual bool broken() const = 0;
};

using CommunicatorRef = std::shared_ptr<Communicator>;

// The single-process communicator: every operation returns its input unchanged.
CommunicatorRef make_local_communicator();

}  // namespace soma::dist
