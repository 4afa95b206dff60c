#pragma once
// A CPU stand-in for a CUDA device, so that the device code paths (moving models, optimiser state
// and batches, the host/device rules of ops) are tested on machines without a GPU:
//
//   soma::testing::EmulatedCuda gpu;     // for this scope, Device::cuda(0) is the stand-in
//   model.to(gpu.device());
//
// Tensors on Device::cuda(i) then live in host memory (core's emulated_device_backend()) and run
// the CPU kernels, but they are not on Device::cpu(): item() and to_vector() refuse them, ops
// refuse to mix them with CPU tensors (a 0-d CPU scalar follows them, as on a real device) and
// copies to and from them are counted by soma::cuda::transfer_stats(). At the end of the scope
// the real CUDA backend and kernels (if built) come back; a stand-in tensor that outlives the
// scope may only be freed (its memory goes back to the stand-in).
// cuda::is_available() is not changed, so model code must decide by Device values only.
//
// EmulatedCuda gpu(EmulatedCuda::kPinned) also offers pinned host memory (malloc), async copies
// (memcpy) and events (flags), so that fit's batch staging (model/batch_stager) runs; the calls
// are counted in EmulatedCuda::pinned_stats().
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../src/core/device_backend.hpp"
#include "soma/op.hpp"
#include "soma/soma.hpp"

namespace soma::testing {

class EmulatedCuda {
 public:
  struct PinnedStats {
    int allocations = 0, frees = 0, live = 0;  // pinned blocks
    int async_copies = 0, records = 0, waits = 0, unrecorded_waits = 0;
    int events_created = 0, events_destroyed = 0;
  };
  static PinnedStats& pinned_stats() {
    static PinnedStats s;
    return s;
  }
  enum Options { kPlain = 0, kPinned = 1 };

  explicit EmulatedCuda(Options options = kPlain) {
    previous_ = detail::set_device_backend_override(
        DeviceKind::CUDA,
        options == kPinned ? pinned_backend() : detail::emulated_device_backend());
    for (const OpDef* d : all_ops()) {
      saved_.emplace_back(d->name, d->kernels[int(DeviceKind::CUDA)]);
      register_kernel(d->name, DeviceKind::CUDA, d->kernels[int(DeviceKind::CPU)]);
    }
  }
  ~EmulatedCuda() {
    for (auto& [name, fn] : saved_) register_kernel(name, DeviceKind::CUDA, fn);
    detail::set_device_backend_override(DeviceKind::CUDA, previous_);
  }
  EmulatedCuda(const EmulatedCuda&) = delete;
  EmulatedCuda& operator=(const EmulatedCuda&) = delete;

  static constexpr Device device(int index = 0) { return Device::cuda(index); }

 private:
  struct Event {
    bool recorded = false;
  };
  static const detail::DeviceBackend* pinned_backend() {
    static const detail::DeviceBackend table = [] {
      detail::DeviceBackend t = *detail::emulated_device_backend();
      t.allocate_pinned = [](std::size_t n) -> void* {
        ++pinned_stats().allocations;
        ++pinned_stats().live;
        return std::malloc(n > 0 ? n : 1);
      };
      t.free_pinned = [](void* p, std::size_t) {
        ++pinned_stats().frees;
        --pinned_stats().live;
        std::free(p);
      };
      t.copy_to_device_async = [](void* dst, Device, const void* src, std::size_t n) {
        ++pinned_stats().async_copies;
        std::memcpy(dst, src, n);
      };
      t.create_event = [](int) -> void* {
        ++pinned_stats().events_created;
        return new Event();
      };
      t.record_event = [](void* e, int) {
        ++pinned_stats().records;
        static_cast<Event*>(e)->recorded = true;
      };
      t.wait_event = [](void* e, int) {
        ++pinned_stats().waits;
        if (!static_cast<Event*>(e)->recorded) ++pinned_stats().unrecorded_waits;
      };
      t.destroy_event = [](void* e, int) {
        ++pinned_stats().events_destroyed;
        delete static_cast<Event*>(e);
      };
      return t;
    }();
    return &table;
  }

  const detail::DeviceBackend* previous_ = nullptr;
  std::vector<std::pair<std::string, KernelFn>> saved_;
};

}  // namespace soma::testing
