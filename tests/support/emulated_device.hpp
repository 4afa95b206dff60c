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
#include <string>
#include <utility>
#include <vector>

#include "../../src/core/device_backend.hpp"
#include "soma/op.hpp"
#include "soma/soma.hpp"

namespace soma::testing {

class EmulatedCuda {
 public:
  EmulatedCuda() {
    previous_ = detail::set_device_backend_override(DeviceKind::CUDA,
                                                    detail::emulated_device_backend());
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
  const detail::DeviceBackend* previous_ = nullptr;
  std::vector<std::pair<std::string, KernelFn>> saved_;
};

}  // namespace soma::testing
