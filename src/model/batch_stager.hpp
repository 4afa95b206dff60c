#pragma once
// Internal: fit/evaluate/predict's batches on a device, staged through pinned host memory.
// The rows of the next batch are gathered on the host straight into one of two page-locked
// buffers and their copy is queued on the device's stream without waiting (double buffering):
// while the device runs the kernels of batch i, the host gathers batch i+1 and queues its copy.
// All work of a device runs on its one stream, so the copy lands in stream order before the next
// step's kernels; before a buffer is written again the host waits for the event recorded after
// its last copy (two batches ago, long finished in a steady loop).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_backend.hpp"
#include "soma/tensor.hpp"

namespace soma::detail {

struct StagedBatch {
  std::vector<Tensor> x, y;  // on the device
  Tensor sw;                 // on the device; undefined without sample weights
};

class BatchStager {
 public:
  // A stager for batches of at most max_rows rows of x, y and sw (all host tensors with the same
  // number of rows), or null when staging does not apply: the device is the CPU, its backend has
  // no pinned memory / async copies / events, or a source is not a contiguous host tensor. The
  // callers then copy as before (Tensor::to).
  static std::unique_ptr<BatchStager> make(Device device, const std::vector<Tensor>& x,
                                           const std::vector<Tensor>& y, const Tensor& sw,
                                           std::int64_t max_rows);
  ~BatchStager();  // waits for pending copies, then gives the buffers back
  BatchStager(const BatchStager&) = delete;
  BatchStager& operator=(const BatchStager&) = delete;

  // Queues rows [start, stop) of the sources, or with `perm` (an i64 host vector) the rows
  // perm[start..stop), into the next buffer. At most two batches may wait to be taken.
  void stage(std::int64_t start, std::int64_t stop, const Tensor& perm = Tensor());
  // The oldest staged batch (its copies are queued; the device's stream orders them before any
  // kernel queued after this).
  StagedBatch take();
  // Drops batches staged but not taken (a loop that stopped early).
  void clear() { pending_ = 0; }

 private:
  struct Source {
    const std::uint8_t* data;
    std::size_t row_bytes;
    Shape shape;  // per-row shape is shape[1:]
    DType dtype;
    std::size_t offset;  // in a slot's buffer
  };
  struct Slot {
    void* host = nullptr;
    void* event = nullptr;
    bool recorded = false;
    StagedBatch batch;
  };
  BatchStager(Device device, const DeviceBackend* b) : device_(device), b_(b) {}

  Device device_;
  const DeviceBackend* b_;
  std::vector<Source> sources_;  // x..., y..., then sw when defined
  std::size_t nx_ = 0, ny_ = 0;
  std::size_t slot_bytes_ = 0;
  Slot slots_[2];
  int next_ = 0;     // the slot stage() writes next
  int pending_ = 0;  // staged, not taken
};

}  // namespace soma::detail
