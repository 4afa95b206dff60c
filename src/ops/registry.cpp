#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "internal/cpu_isa.hpp"
#include "internal/tensor_vector_pool.hpp"
#include "internal/registration.hpp"
#include "internal/runtime_checks.hpp"
#include "internal/tensor_alloc.hpp"
#include "ops/autocast_cache.hpp"
#include "ops/dispatch_hooks.hpp"
#include "soma/autocast.hpp"
#include "soma/op.hpp"

namespace soma {

// ---- Attrs ------------------------------------------------------------------------------------
Attrs& Attrs::set(std::string key, AttrValue v) {
  for (auto& [k, val] : items_)
    if (k == key) {
      val = std::move(v);
      return *this;
    }
  items_.emplace_back(std::move(key), std::move(v));
  return *this;
}

bool Attrs::has(std::string_view key) const {
  for (auto& kv : items_)
    if (kv.first == key) return true;
  return false;
}

const AttrValue& Attrs::get(std::string_view key) const {
  for (auto& kv : items_)
    if (kv.first == key) return kv.second;
  fail("attrs", "missing attribute '", std::string(key), "'");
}

namespace {
template <class T>
const T& typed(const AttrValue& v, std::string_view key, const char* want) {
  if (auto* p = std::get_if<T>(&v)) return *p;
  fail("attrs", "attribute '", std::string(key), "' is not of type ", want);
}
}  // namespace

std::int64_t Attrs::i(std::string_view k) const {
  const auto& v = get(k);
  if (auto* b = std::get_if<bool>(&v)) return *b;
  return typed<std::int64_t>(v, k, "int");
}
double Attrs::f(std::string_view k) const {
  const auto& v = get(k);
  if (auto* i = std::get_if<std::int64_t>(&v)) return double(*i);
  return typed<double>(v, k, "float");
}
bool Attrs::b(std::string_view k) const { return typed<bool>(get(k), k, "bool"); }
const std::vector<std::int64_t>& Attrs::ints(std::string_view k) const {
  return typed<std::vector<std::int64_t>>(get(k), k, "int list");
}
DType Attrs::dtype(std::string_view k) const { return typed<DType>(get(k), k, "dtype"); }
const std::string& Attrs::s(std::string_view k) const { return typed<std::string>(get(k), k, "string"); }

// ---- registry ---------------------------------------------------------------------------------
#ifdef SOMA_HAS_CUDA
namespace detail {
void register_cuda_kernels();  // src/backend/cuda/ops.cpp
}
#endif
namespace {
struct Registry {
  std::unordered_map<std::string, std::unique_ptr<OpDef>> ops;  // stable addresses
};
Registry& raw_registry() {
  static Registry r;
  return r;
}
void ensure_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The CPU kernels' instruction set, chosen before anything is registered: a bad SOMA_ISA
    // throws here, on every call, and leaves the registry empty.
    (void)detail::active_isa();
    detail::register_elementwise_ops();
    detail::register_reduction_ops();
    detail::register_shape_ops();
    detail::register_linalg_ops();
    detail::register_nn_ops();
    detail::register_random_ops();
    detail::register_layer_ops();
    detail::register_attention_ops();
    detail::register_sort_scan_ops();
    detail::register_quantize_ops();
    detail::register_cpu_elementwise_kernels();
    detail::register_cpu_reduction_kernels();
    detail::register_cpu_shape_kernels();
    detail::register_cpu_linalg_kernels();
    detail::register_cpu_nn_kernels();
    detail::register_cpu_attention_kernels();
    detail::register_cpu_sort_scan_kernels();
    detail::register_cpu_quantize_kernels();
#ifdef SOMA_HAS_CUDA
    detail::register_cuda_kernels();  // registering touches no GPU
#endif
  });
}
}  // namespace

namespace detail {
Isa select_cpu_isa(Isa isa) {
  ensure_initialized();
  const Isa chosen = set_active_isa(isa);
  // The files compiled once per instruction set (src/backend/cpu/isa_foreach.hpp) register the
  // kernels of the active one; the others (copy, fused blocks, the fused Dense) choose per call.
  register_cpu_elementwise_kernels();
  register_cpu_reduction_kernels();
  register_cpu_nn_kernels();  // with the optimiser updates
  register_cpu_attention_kernels();
  return chosen;
}
}  // namespace detail

void register_op(OpDef def) {
  auto& r = raw_registry();
  if (r.ops.count(def.name)) fail("register_op", "an op named '", def.name, "' already exists");
  std::string name = def.name;
  r.ops.emplace(std::move(name), std::make_unique<OpDef>(std::move(def)));
}

void register_kernel(std::string_view op, DeviceKind device, KernelFn fn) {
  auto& r = raw_registry();
  auto it = r.ops.find(std::string(op));
  if (it == r.ops.end())
    fail("register_kernel", "no op named '", std::string(op), "' is registered");
  it->second->kernels[int(device)] = fn;
}

const OpDef& get_op(std::string_view name) {
  ensure_initialized();
  auto& r = raw_registry();
  auto it = r.ops.find(std::string(name));
  if (it == r.ops.end()) fail("get_op", "no op named '", std::string(name), "' is registered");
  return *it->second;
}

std::vector<std::string> registered_ops() {
  ensure_initialized();
  std::vector<std::string> names;
  for (auto& kv : raw_registry().ops) names.push_back(kv.first);
  return names;
}

std::vector<const OpDef*> all_ops() {
  ensure_initialized();
  std::vector<const OpDef*> defs;
  for (auto& kv : raw_registry().ops) defs.push_back(kv.second.get());
  std::sort(defs.begin(), defs.end(),
            [](const OpDef* a, const OpDef* b) { return a->name < b->name; });
  return defs;
}

// ---- dispatch hooks (ops/dispatch_hooks.hpp) ----------------------------------------------------
namespace dispatch {
[[gnu::tls_model("initial-exec")]] thread_local constinit std::uint32_t t_active = 0;
namespace {
constinit InterceptFn g_intercept = nullptr;
constinit ObserveFn g_observe = nullptr;
}  // namespace
void set_intercept(InterceptFn fn) { g_intercept = fn; }
void set_observe(ObserveFn fn) { g_observe = fn; }
}  // namespace dispatch

namespace detail {
void check_op_numerics(const OpDef& def, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& outputs) {
  check_op_numerics(std::string_view(def.name), inputs, outputs);
}
}  // namespace detail

// ---- eager execution --------------------------------------------------------------------------
namespace {
// The hooks' calls, out of run_op's fast path. A bit is set only by the layer that registered
// the hook, so a missing one is a build without that layer's object.
[[gnu::noinline]] void intercept(const OpDef& def, const std::vector<Tensor>& inputs,
                                 const Attrs& attrs, std::vector<Tensor>& outputs) {
  if (!dispatch::g_intercept)
    fail(def.name, "a symbolic input or an open graph scope, but graph mode is not linked in");
  dispatch::g_intercept(def, inputs, attrs, outputs);
}
[[gnu::noinline]] void observe(const OpDef& def, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& outputs, const Attrs& attrs) {
  if (dispatch::g_observe) dispatch::g_observe(def, inputs, outputs, attrs);
}

// Inputs on different devices. A 0-d CPU tensor is a value (like `x * 2.0`'s scalar, or a
// constant in a gradient) and follows the others to their device (PyTorch's rule for CPU
// scalars); any other mix is an error. Returns the device and, in `moved`, the inputs to use.
[[gnu::noinline]] Device resolve_mixed_devices(const OpDef& def, const std::vector<Tensor>& inputs,
                                               std::vector<Tensor>& moved) {
  auto is_host_scalar = [](const Tensor& t) { return t.device().is_cpu() && t.rank() == 0; };
  std::size_t first = inputs.size();
  for (std::size_t i = 0; i < inputs.size() && first == inputs.size(); ++i)
    if (!is_host_scalar(inputs[i])) first = i;
  const Device dev = first < inputs.size() ? inputs[first].device() : Device::cpu();
  moved = inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].device() == dev) continue;
    if (!is_host_scalar(inputs[i]))
      fail(def.name, "inputs are on different devices: input ", first, " on ", dev.str(),
           ", input ", i, " on ", inputs[i].device().str(),
           "; move them with to(device) first");
    moved[i] = inputs[i].to(dev);
  }
  return dev;
}
}  // namespace

namespace {
// The weight cast cache (ops/autocast_cache.hpp).
std::atomic<bool> g_cast_cache_on{true};
std::atomic<std::uint64_t> g_cast_generation{0};
struct CastEntry {
  std::weak_ptr<Storage> storage;
  std::uint64_t version = 0, generation = 0;
  DType low = DType::f32;
  Tensor copy;  // the whole storage, cast: 1-D, one element per f32 element
};
std::unordered_map<const Storage*, CastEntry>& cast_cache() {
  thread_local std::unordered_map<const Storage*, CastEntry> cache;
  return cache;
}

// A kept low-precision view of `t` (f32, on a device), made now for a trainable Variable's value
// or reused; undefined when `t` is not cached (an activation: cast per op).
template <class CastInto>
Tensor cached_cast(const Tensor& t, DType low, Device dev, CastInto&& cast_into) {
  const std::shared_ptr<Storage>& st = t.storage();
  if (!st || !g_cast_cache_on.load(std::memory_order_relaxed)) return Tensor();
  auto& cache = cast_cache();
  const std::uint64_t gen = g_cast_generation.load(std::memory_order_relaxed);
  const std::uint64_t version = st->version.load(std::memory_order_relaxed);
  auto view = [&](const Tensor& copy) {
    return Tensor::view_of(copy, Shape(t.shape()), Strides(t.strides()), t.offset());
  };
  auto it = cache.find(st.get());
  if (it != cache.end() && it->second.storage.lock() == st && it->second.version == version &&
      it->second.generation == gen && it->second.low == low) {
    ++detail::autocast_cache_stats().hits;
    return view(it->second.copy);
  }
  if (!t.impl_ptr()->trainable) return Tensor();
  ++detail::autocast_cache_stats().misses;
  if (cache.size() > 64)  // drop the copies of freed storages
    std::erase_if(cache, [](const auto& kv) { return kv.second.storage.expired(); });
  const auto n = std::int64_t(st->nbytes / sizeof(float));
  Tensor whole = Tensor::view_of(t, Shape{n}, Strides{1}, 0);
  Tensor copy = detail::empty_tensor(Shape{n}, low, dev);
  cast_into(whole, copy);
  cache[st.get()] = CastEntry{st, version, gen, low, copy};
  return view(copy);
}

// Autocast on a device (soma/autocast.hpp; the CPU kernels round inside themselves instead): an
// op whose definition says kAutocastLow, with f32 floating inputs, runs its own kernel on copies
// of them cast to the scope's dtype, and its low-precision outputs are cast back into the f32
// outputs the infer rule made. So weights stay f32 (master weights), everything downstream sees
// f32, and ops tagged kAutocastF32 or untagged run as without autocast. The casts call the cast
// kernel directly: they are not ops on the tape (the op is recorded with its f32 inputs and
// outputs; its gradient is written with ops that autocast in turn). Returns false (nothing done)
// when the op's floating inputs are not all f32 (f64 work is never lowered).
bool run_autocast(const OpDef& def, KernelFn kernel, const std::vector<Tensor>& inputs,
                  std::vector<Tensor>& outputs, const Attrs& attrs, DType low, Device dev) {
  bool any_f32 = false;
  for (const Tensor& t : inputs) {
    if (t.dtype() == DType::f32) any_f32 = true;
    else if (is_floating(t.dtype())) return false;
  }
  if (!any_f32 || def.view || !def.infer) return false;
  static const OpDef& cast_def = get_op("cast");
  const KernelFn cast_kernel = cast_def.kernels[int(dev.kind)];
  if (!cast_kernel) return false;
  auto cast_into = [&](const Tensor& from, Tensor& to) {
    std::vector<Tensor> in{from}, out{to};
    cast_kernel(in, out, Attrs{{"dtype", to.dtype()}});
  };
  std::vector<Tensor> low_in;
  std::vector<TensorSpec> specs;
  low_in.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (t.dtype() == DType::f32) {
      Tensor c = cached_cast(t, low, dev, cast_into);
      if (!c.defined()) {
        c = detail::empty_tensor(Shape(t.shape()), low, dev);
        cast_into(t, c);
      }
      low_in.push_back(std::move(c));
    } else {
      low_in.push_back(t);
    }
    specs.push_back({low_in.back().shape(), low_in.back().dtype()});
  }
  std::vector<Tensor> low_out;
  for (auto& s : def.infer(specs, attrs))
    low_out.push_back(detail::empty_tensor(std::move(s.shape), s.dtype, dev));
  kernel(low_in, low_out, attrs);
  if (low_out.size() != outputs.size())
    fail(def.name, "autocast: ", low_out.size(), " outputs in ", dtype_name(low), ", ",
         outputs.size(), " in f32");
  for (std::size_t i = 0; i < outputs.size(); ++i) cast_into(low_out[i], outputs[i]);
  return true;
}

}  // namespace

namespace detail {
AutocastCacheStats& autocast_cache_stats() {
  thread_local AutocastCacheStats s;
  return s;
}
void set_autocast_weight_cache(bool on) { g_cast_cache_on = on; }
bool autocast_weight_cache() { return g_cast_cache_on; }
void autocast_cache_new_generation() { g_cast_generation.fetch_add(1); }
}  // namespace detail

namespace {

// Runs an op eagerly into `outputs` (empty on entry); call_op and call_op1 wrap it.
void run_op(const OpDef& def, const std::vector<Tensor>& inputs, const Attrs& attrs,
            std::vector<Tensor>& outputs) {
  if (def.num_inputs >= 0 && std::size_t(def.num_inputs) != inputs.size())
    fail(def.name, "expected ", def.num_inputs, " inputs, got ", inputs.size());
  // Graph mode (src/graph, through ops/dispatch_hooks.hpp): while a GraphScope is open, or for a
  // symbolic input, the op becomes a graph node instead of running. Eager cost: one thread-local
  // read and one bit per input.
  if (dispatch::t_active & dispatch::kGraphBuild) [[unlikely]] {
    intercept(def, inputs, attrs, outputs);
    return;
  }
  // The fields are read through the impl pointers (no undefined-handle check per accessor).
  Device dev = Device::cpu();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorImpl* t = inputs[i].impl_ptr().get();
    if (!t) fail(def.name, "input ", i, " is an undefined (empty) Tensor");
    if (dispatch::is_symbolic_id(t->id)) [[unlikely]] {
      intercept(def, inputs, attrs, outputs);
      return;
    }
    if (i == 0) dev = t->device;
    else if (t->device != dev) [[unlikely]] {
      std::vector<Tensor> moved;
      resolve_mixed_devices(def, inputs, moved);
      run_op(def, moved, attrs, outputs);
      return;
    }
  }
  KernelFn kernel = def.kernels[int(dev.kind)];
  if (!kernel) fail(def.name, "op '", def.name, "' has no kernel for ", dev.str());

  if (def.infer) {
    // Input specs go into per-thread buffers (one per input count) that keep their capacity:
    // copying shapes into them allocates nothing after the first calls. A nested call, should an
    // infer rule ever make one, or an op with many inputs gets a fresh vector.
    constexpr std::size_t kSpecBuffers = 5;
    struct SpecBuffers {
      std::vector<TensorSpec> specs[kSpecBuffers];
      bool busy = false;
    };
    // One thread-local lookup per call (initial-exec: see VectorPool below).
    [[gnu::tls_model("initial-exec")]] thread_local SpecBuffers t_buf;
    SpecBuffers& buf = t_buf;
    std::vector<TensorSpec> fresh;
    const std::size_t n_in = inputs.size();
    std::vector<TensorSpec>& in_specs = buf.busy || n_in >= kSpecBuffers ? fresh : buf.specs[n_in];
    struct Busy {
      bool& flag;
      bool was;
      ~Busy() { flag = was; }
    } busy{buf.busy, buf.busy};
    buf.busy = true;
    in_specs.resize(n_in);
    for (std::size_t i = 0; i < n_in; ++i) {
      const TensorImpl& t = *inputs[i].impl_ptr();
      in_specs[i].shape = t.shape;
      in_specs[i].dtype = t.dtype;
    }
    std::vector<TensorSpec> out_specs = def.infer(in_specs, attrs);
    if (!def.view) {
      outputs.reserve(out_specs.size());
      for (auto& s : out_specs)
        outputs.push_back(detail::empty_tensor(std::move(s.shape), s.dtype, dev));
    }
  }
  // Autocast (soma/autocast.hpp), read from the definition's tags: one bit test per call when
  // the op has no kAutocastLow tag.
  const bool lowered = (def.tags & kAutocastLow) && dev.kind != DeviceKind::CPU &&
                       autocast_dtype() != DType::f32 &&
                       run_autocast(def, kernel, inputs, outputs, attrs, autocast_dtype(), dev);
  if (!lowered) kernel(inputs, outputs, attrs);
  // set_check_numerics(true): name the first op whose output holds inf/nan (one relaxed load
  // when off).
  if (detail::check_numerics_on()) [[unlikely]] detail::check_op_numerics(def, inputs, outputs);

  // The tape (src/autograd, through ops/dispatch_hooks.hpp): one thread-local read when off.
  if ((dispatch::t_active & dispatch::kTapeRecord) && def.grad) [[unlikely]]
    observe(def, inputs, outputs, attrs);
}

// The braced-list inputs and call_op1's outputs come from the per-thread tensor-vector pool
// (internal/tensor_vector_pool.hpp): after the first calls, building them allocates nothing
// (issue 5). Nested calls (a kernel or gradient that calls ops) take further vectors.
// The per-thread variables here and in core/tensor.cpp and the pool use the initial-exec TLS
// model: a plain %fs-relative load instead of a __tls_get_addr call (9% of a tiny op). They take
// a few dozen bytes of the static TLS block, which glibc reserves room for even when libsoma is
// dlopen'ed.
class PooledVector {
 public:
  PooledVector() : v_(detail::take_tensor_vector()) {}
  ~PooledVector() { detail::give_back_tensor_vector(std::move(v_)); }
  PooledVector(const PooledVector&) = delete;
  PooledVector& operator=(const PooledVector&) = delete;
  std::vector<Tensor>& get() { return v_; }

 private:
  std::vector<Tensor> v_;
};

Tensor first_output(const OpDef& def, std::vector<Tensor>& outputs) {
  if (outputs.empty()) fail(def.name, "the op returned no output");
  return std::move(outputs[0]);
}
}  // namespace

std::vector<Tensor> call_op(const OpDef& def, const std::vector<Tensor>& inputs,
                            const Attrs& attrs) {
  std::vector<Tensor> outputs;
  run_op(def, inputs, attrs, outputs);
  return outputs;
}

std::vector<Tensor> call_op(const OpDef& def, std::initializer_list<Tensor> inputs,
                            const Attrs& attrs) {
  PooledVector in;
  in.get().assign(inputs);
  std::vector<Tensor> outputs;
  run_op(def, in.get(), attrs, outputs);
  return outputs;
}

Tensor call_op1(const OpDef& def, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  PooledVector out;
  run_op(def, inputs, attrs, out.get());
  return first_output(def, out.get());
}

Tensor call_op1(const OpDef& def, std::initializer_list<Tensor> inputs, const Attrs& attrs) {
  PooledVector in, out;
  in.get().assign(inputs);
  run_op(def, in.get(), attrs, out.get());
  return first_output(def, out.get());
}

}  // namespace soma
