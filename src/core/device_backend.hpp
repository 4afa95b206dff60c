#pragma once
// Internal: what the core needs from a non-CPU device backend (memory, copies, fills), as a
// table of plain functions. tensor.cpp and the CPU copy routines call through it, so they never
// include a device runtime's headers. The CUDA backend (src/backend/cuda) provides its table when
// built with SOMA_HAS_CUDA; without it device_backend(DeviceKind::CUDA) is null.
#include <cstddef>
#include <memory>
#include <string>

#include "soma/tensor.hpp"

namespace soma::detail {

struct DeviceBackend {
  // Device memory (never null for nbytes > 0; throws soma::Error naming the device on failure).
  void* (*allocate)(std::size_t nbytes, int index);
  // Gives memory back (never throws: called from Storage's destructor).
  void (*free)(void* p, std::size_t nbytes, int index);
  // Copies nbytes between packed buffers; either side may be the host (Device::cpu()).
  // Returns after the copy when the destination is the host.
  void (*copy_bytes)(void* dst, Device dst_device, const void* src, Device src_device,
                     std::size_t nbytes);
  // dst[...] = convert(src broadcast to dst's shape); both on this backend's same device.
  void (*copy_strided)(const Tensor& src, const Tensor& dst);
  // Every element of dst (any strides) = value.
  void (*fill)(const Tensor& dst, double value);
  // Empty when a device is usable, else why not.
  std::string (*unavailable_reason)();
  // Optional (null: not offered). Page-locked host memory, from which host -> device copies run
  // asynchronously (fit's batches, staged on the host); and that copy, queued on the device's
  // stream without waiting for it (the caller keeps `src` alive and unchanged until the device's
  // stream has passed the copy). Backends without them get pageable memory and copy_bytes.
  void* (*allocate_pinned)(std::size_t nbytes) = nullptr;
  void (*free_pinned)(void* p, std::size_t nbytes) = nullptr;
  void (*copy_to_device_async)(void* dst, Device dst_device, const void* src,
                               std::size_t nbytes) = nullptr;
  // Optional, offered with the three above: markers in the device's stream, so that the host can
  // wait until an async copy has read its pinned source before writing that buffer again.
  // record_event marks the point the stream has reached (the work queued so far); wait_event
  // blocks the host until the stream has passed the last mark (at once when never recorded).
  void* (*create_event)(int index) = nullptr;
  void (*record_event)(void* event, int index) = nullptr;
  void (*wait_event)(void* event, int index) = nullptr;
  void (*destroy_event)(void* event, int index) = nullptr;  // never throws
  // Optional (null: not offered), all four together: graph capture of the work queued on the
  // device's stream (FitOptions::cuda_graph, model/step_graph.hpp). begin_capture starts it and
  // sends the device's allocations to a pool private to the coming graph (its addresses stay
  // reserved while the graph lives, so a replay writes nowhere else); end_capture ends it and
  // returns the executable graph, or null with `why` set (the captured work did not run: launch
  // the graph once to run it); launch_graph queues a replay on the stream; destroy_graph frees the
  // graph, its pool's blocks going back to the allocator as their tensors are freed.
  void (*begin_capture)(int index) = nullptr;
  void* (*end_capture)(int index, std::string* why) = nullptr;
  void (*launch_graph)(void* graph, int index) = nullptr;
  void (*destroy_graph)(void* graph, int index) = nullptr;  // never throws
};
// Whether a backend can capture and replay graphs.
inline bool has_graph_capture(const DeviceBackend* b) {
  return b && b->begin_capture && b->end_capture && b->launch_graph && b->destroy_graph;
}

// Whether a backend offers pinned host memory, async copies and events (all of them).
inline bool has_async_copies(const DeviceBackend* b) {
  return b && b->allocate_pinned && b->free_pinned && b->copy_to_device_async &&
         b->create_event && b->record_event && b->wait_event && b->destroy_event;
}

// The table for a device kind; null for the CPU and for kinds not built in.
const DeviceBackend* device_backend(DeviceKind kind);

// Tests: replaces the table of a device kind (nullptr gives the built-in one back) and returns
// the override it replaces. tests/support/emulated_device.hpp installs emulated_device_backend()
// for DeviceKind::CUDA, so that device code paths run on machines without a GPU.
const DeviceBackend* set_device_backend_override(DeviceKind kind, const DeviceBackend* table);
// A stand-in device: 64-byte aligned host memory, memcpy for copies, the CPU routines for strided
// copies and fills. Tensors on it are not on Device::cpu(): every host/device rule (item() and
// to_vector() refuse them, ops refuse to mix them with CPU tensors, transfers are counted) holds
// as on a real device.
const DeviceBackend* emulated_device_backend();

// Counts a copy between the host and a device (soma::cuda::transfer_stats, soma/cuda.hpp). The core
// copy path (to_device) calls it; a backend that copies by other means calls it too.
void count_transfer(bool to_device, std::size_t nbytes) noexcept;

// Storage on a non-CPU device, from its backend (a clear soma::Error when there is none).
std::shared_ptr<Storage> device_storage(std::size_t nbytes, Device device);
void device_free(void* p, std::size_t nbytes, Device device) noexcept;
// Tensor::to(device) between different devices: explicit host/device copies.
Tensor to_device(const Tensor& t, Device device);
// copy_into / fill_value for tensors that are not on the CPU.
void device_copy_into(const Tensor& src, const Tensor& dst);
void device_fill(const Tensor& dst, double value);

}  // namespace soma::detail
