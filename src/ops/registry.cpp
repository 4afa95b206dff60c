#include <mutex>
#include <unordered_map>

#include "graph/hook.hpp"
#include "internal/registration.hpp"
#include "internal/runtime_checks.hpp"
#include "soma/autograd.hpp"
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
    detail::register_elementwise_ops();
    detail::register_reduction_ops();
    detail::register_shape_ops();
    detail::register_linalg_ops();
    detail::register_nn_ops();
    detail::register_cpu_elementwise_kernels();
    detail::register_cpu_reduction_kernels();
    detail::register_cpu_shape_kernels();
    detail::register_cpu_linalg_kernels();
    detail::register_cpu_nn_kernels();
  });
}
}  // namespace

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

// ---- eager execution --------------------------------------------------------------------------
std::vector<Tensor> call_op(const OpDef& def, const std::vector<Tensor>& inputs,
                            const Attrs& attrs) {
  if (def.num_inputs >= 0 && std::size_t(def.num_inputs) != inputs.size())
    fail(def.name, "expected ", def.num_inputs, " inputs, got ", inputs.size());
  // Graph mode (src/graph): while a GraphScope is open, or for a symbolic input, the op becomes
  // a graph node instead of running. Eager cost: one thread-local read and one bit per input.
  if (graph_detail::t_build_depth > 0) [[unlikely]]
    return graph_detail::add_op_node(def, inputs, attrs);
  Device dev = Device::cpu();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail(def.name, "input ", i, " is an undefined (empty) Tensor");
    if (graph_detail::is_symbolic_id(inputs[i].id())) [[unlikely]]
      return graph_detail::add_op_node(def, inputs, attrs);
    if (i == 0) dev = inputs[0].device();
    else if (inputs[i].device() != dev)
      fail(def.name, "inputs are on different devices: input 0 on ", dev.str(), ", input ", i,
           " on ", inputs[i].device().str(), "; move them with to(device) first");
  }
  KernelFn kernel = def.kernels[int(dev.kind)];
  if (!kernel) fail(def.name, "no kernel for device ", dev.str());

  std::vector<Tensor> outputs;
  if (def.infer) {
    // Input specs go into per-thread buffers (one per input count) that keep their capacity:
    // copying shapes into them allocates nothing after the first calls. A nested call, should an
    // infer rule ever make one, or an op with many inputs gets a fresh vector.
    constexpr std::size_t kSpecBuffers = 5;
    thread_local std::vector<TensorSpec> t_specs[kSpecBuffers];
    thread_local bool t_specs_busy = false;
    std::vector<TensorSpec> fresh;
    const std::size_t n_in = inputs.size();
    std::vector<TensorSpec>& in_specs =
        t_specs_busy || n_in >= kSpecBuffers ? fresh : t_specs[n_in];
    struct Busy {
      bool& flag;
      bool was;
      ~Busy() { flag = was; }
    } busy{t_specs_busy, t_specs_busy};
    t_specs_busy = true;
    in_specs.resize(n_in);
    for (std::size_t i = 0; i < n_in; ++i) {
      in_specs[i].shape = inputs[i].shape();
      in_specs[i].dtype = inputs[i].dtype();
    }
    std::vector<TensorSpec> out_specs = def.infer(in_specs, attrs);
    if (!def.view) {
      outputs.reserve(out_specs.size());
      for (auto& s : out_specs) outputs.push_back(Tensor::empty(s.shape, s.dtype, dev));
    }
  }
  kernel(inputs, outputs, attrs);
  // set_check_numerics(true): name the first op whose output holds inf/nan (one relaxed load
  // when off).
  if (detail::check_numerics_on()) [[unlikely]] detail::check_op_numerics(def, inputs, outputs);

  if (def.grad && !grad_recording_disabled()) {
    for (GradientTape* tape : active_tapes()) tape->record(def, inputs, outputs, attrs);
  }
  return outputs;
}

}  // namespace soma
