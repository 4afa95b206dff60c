#pragma once
// A CUDA-graph capture for the CPU stand-in device (tests/support/emulated_device.hpp), so that
// the replay logic of fit (FitOptions::cuda_graph, docs/cuda.md "CUDA graphs") runs on machines
// without a GPU:
//
//   soma::testing::EmulatedCudaGraphs gpu;   // EmulatedCuda(kPinned) plus begin_capture ...
//
// It keeps the contract of the real backend (core/device_backend.hpp, src/backend/cuda/runtime.cpp):
//   - between begin_capture and end_capture the device work is recorded, NOT run: every kernel
//     launched from the host (each op's kernel: the stand-in's CPU kernel, with its inputs,
//     outputs and attributes as they were at capture time) and the backend's device-side copies
//     and fills. View ops run (they only make tensor headers). A kernel's own inner ops and copies
//     are part of the kernel and are not recorded separately;
//   - launch_graph runs the recorded work in order, on the buffers it was recorded with: a value
//     written before a launch into a buffer the graph reads (a batch, step scalars) is seen, an
//     attribute is frozen;
//   - a copy between the host and the device during a capture (a host read such as item(), or a
//     write from host memory) throws, as a pageable copy on a capturing stream fails, and the
//     capture gives no graph; a random op (kRandom) makes the capture fail too (its seed would be
//     frozen: every replay would draw the same numbers);
//   - memory freed during a capture, or allocated by it, is not given back while the graph lives
//     (the graph's private pool).
// What it cannot show: timing, the real stream's ordering, and kernels whose host side reads
// device memory (none may). Counts are in EmulatedCudaGraphs::stats().
#include <array>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "emulated_device.hpp"

namespace soma::testing {

class EmulatedCudaGraphs {
 public:
  struct Stats {
    int captures = 0, failed = 0, launches = 0, destroyed = 0;
    std::size_t recorded = 0;  // work items recorded by the successful captures
    std::string last_failure;
  };
  static Stats& stats() {
    static Stats s;
    return s;
  }

  EmulatedCudaGraphs() {
    stats() = {};
    previous_ = detail::set_device_backend_override(DeviceKind::CUDA, table());
    const std::vector<const OpDef*> ops = all_ops();
    if (ops.size() > kMaxOps) fail("EmulatedCudaGraphs", "more than ", kMaxOps, " ops");
    for (std::size_t i = 0; i < ops.size(); ++i) {
      defs()[i] = ops[i];
      cpu_kernels()[i] = ops[i]->kernels[int(DeviceKind::CPU)];
      if (cpu_kernels()[i]) register_kernel(ops[i]->name, DeviceKind::CUDA, trampolines()[i]);
    }
  }
  // base_'s destructor (after this one) gives the CUDA kernels back.
  ~EmulatedCudaGraphs() { detail::set_device_backend_override(DeviceKind::CUDA, previous_); }
  EmulatedCudaGraphs(const EmulatedCudaGraphs&) = delete;
  EmulatedCudaGraphs& operator=(const EmulatedCudaGraphs&) = delete;

  static constexpr Device device(int index = 0) { return Device::cuda(index); }

 private:
  static constexpr std::size_t kMaxOps = 1024;
  using Work = std::function<void()>;
  struct Graph {
    std::vector<Work> work;
    std::vector<std::pair<void*, std::size_t>> pool;  // freed blocks kept while the graph lives
    std::set<void*> allocs;                          // blocks the capture allocated
  };
  struct State {
    bool capturing = false;
    int depth = 0;  // > 0 inside a kernel or a launch: nothing is recorded
    std::string error;
    std::vector<Work> work;
    std::vector<std::pair<void*, std::size_t>> freed;
    std::set<void*> allocs;
    std::set<Graph*> live;
  };
  static State& state() {
    static State s;
    return s;
  }
  struct Depth {
    Depth() { ++state().depth; }
    ~Depth() { --state().depth; }
  };
  static bool recording() { return state().capturing && state().depth == 0; }

  static std::array<const OpDef*, kMaxOps>& defs() {
    static std::array<const OpDef*, kMaxOps> d{};
    return d;
  }
  static std::array<KernelFn, kMaxOps>& cpu_kernels() {
    static std::array<KernelFn, kMaxOps> k{};
    return k;
  }
  static void run_kernel(std::size_t i, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                         const Attrs& a) {
    const KernelFn fn = cpu_kernels()[i];
    const OpDef& def = *defs()[i];
    if (!recording() || def.view) {
      Depth d;
      fn(in, out, a);
      return;
    }
    if (def.tags & kRandom) {  // as the CUDA random kernels: refused before drawing
      if (state().error.empty())
        state().error = "random op '" + def.name + "' in the captured step (its seed would be frozen)";
      fail(def.name, "cannot be captured in a CUDA graph (emulated)");
    }
    state().work.push_back([fn, in, out, a] {
      std::vector<Tensor> o = out;
      fn(in, o, a);
    });
  }
  template <std::size_t I>
  static void trampoline(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
    run_kernel(I, in, out, a);
  }
  template <std::size_t... I>
  static std::array<KernelFn, kMaxOps> make_trampolines(std::index_sequence<I...>) {
    return {&trampoline<I>...};
  }
  static const std::array<KernelFn, kMaxOps>& trampolines() {
    static const auto t = make_trampolines(std::make_index_sequence<kMaxOps>());
    return t;
  }

  static const detail::DeviceBackend*& base() {
    static const detail::DeviceBackend* b = nullptr;
    return b;
  }
  static const detail::DeviceBackend* table() {
    static const detail::DeviceBackend t = [] {
      base() = detail::device_backend(DeviceKind::CUDA);  // EmulatedCuda(kPinned)'s table
      detail::DeviceBackend t = *base();
      t.allocate = [](std::size_t n, int index) -> void* {
        void* p = base()->allocate(n, index);
        if (state().capturing) state().allocs.insert(p);
        return p;
      };
      t.free = [](void* p, std::size_t n, int index) {
        State& s = state();
        if (s.capturing) {
          s.freed.emplace_back(p, n);
          return;
        }
        for (Graph* g : s.live)
          if (g->allocs.count(p)) {
            g->pool.emplace_back(p, n);
            return;
          }
        base()->free(p, n, index);
      };
      t.copy_bytes = [](void* dst, Device dd, const void* src, Device sd, std::size_t n) {
        if (!recording()) return base()->copy_bytes(dst, dd, src, sd, n);
        if (dd.is_cpu() || sd.is_cpu()) {
          const std::string what = std::string("a copy ") +
                                   (dd.is_cpu() ? "to" : "from") +
                                   " the host during a capture (a host read or write inside the "
                                   "captured step)";
          if (state().error.empty()) state().error = what;
          fail("cuda_graph (emulated)", what);
        }
        state().work.push_back([dst, dd, src, sd, n] { base()->copy_bytes(dst, dd, src, sd, n); });
      };
      t.copy_strided = [](const Tensor& src, const Tensor& dst) {
        if (!recording()) return base()->copy_strided(src, dst);
        state().work.push_back([src, dst] { base()->copy_strided(src, dst); });
      };
      t.fill = [](const Tensor& dst, double value) {
        if (!recording()) return base()->fill(dst, value);
        state().work.push_back([dst, value] { base()->fill(dst, value); });
      };
      t.copy_to_device_async = [](void* dst, Device dd, const void* src, std::size_t n) {
        if (!recording()) return base()->copy_to_device_async(dst, dd, src, n);
        state().work.push_back([dst, dd, src, n] { base()->copy_to_device_async(dst, dd, src, n); });
      };
      t.begin_capture = [](int) {
        State& s = state();
        if (s.capturing) fail("cuda_graph", "a capture is already under way (emulated)");
        s.capturing = true;
        s.error.clear();
        s.work.clear();
        s.freed.clear();
        s.allocs.clear();
      };
      t.end_capture = [](int index, std::string* why) -> void* {
        State& s = state();
        s.capturing = false;
        auto* g = new Graph{std::move(s.work), std::move(s.freed), std::move(s.allocs)};
        s.work.clear();
        s.freed.clear();
        s.allocs.clear();
        if (!s.error.empty()) {
          ++stats().failed;
          stats().last_failure = s.error;
          if (why) *why = "cuda_graph (emulated): " + s.error;
          s.live.insert(g);
          destroy(g, index);
          return nullptr;
        }
        ++stats().captures;
        stats().recorded += g->work.size();
        s.live.insert(g);
        return g;
      };
      t.launch_graph = [](void* graph, int) {
        ++stats().launches;
        Depth d;
        for (auto& w : static_cast<Graph*>(graph)->work) w();
      };
      t.destroy_graph = [](void* graph, int index) {
        ++stats().destroyed;
        destroy(static_cast<Graph*>(graph), index);
      };
      return t;
    }();
    return &t;
  }
  static void destroy(Graph* g, int index) {
    g->work.clear();  // frees the tensors it held: their blocks go to g->pool
    state().live.erase(g);
    for (auto& [p, n] : g->pool) base()->free(p, n, index);
    delete g;
  }

  EmulatedCuda base_{EmulatedCuda::kPinned};
  const detail::DeviceBackend* previous_ = nullptr;
};

}  // namespace soma::testing
