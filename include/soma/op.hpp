#pragma once
// The op registry. Every op is defined once: its name, its shape/dtype rule, its gradient
// (written with other ops) and one kernel per device. Eager execution, the gradient tape and
// (later) graph mode all read this one definition.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "soma/tensor.hpp"

namespace soma {

struct TensorSpec {
  Shape shape;
  DType dtype;
};

using AttrValue =
    std::variant<std::int64_t, double, bool, std::vector<std::int64_t>, DType, std::string>;

// Named, typed op attributes (axis lists, keepdims, alpha, ...).
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}
  Attrs& set(std::string key, AttrValue v);
  bool has(std::string_view key) const;
  std::int64_t i(std::string_view key) const;
  double f(std::string_view key) const;
  bool b(std::string_view key) const;
  const std::vector<std::int64_t>& ints(std::string_view key) const;
  DType dtype(std::string_view key) const;
  const std::string& s(std::string_view key) const;
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }

 private:
  const AttrValue& get(std::string_view key) const;
  std::vector<std::pair<std::string, AttrValue>> items_;
};

// What a gradient definition sees.
struct GradContext {
  const std::vector<Tensor>& inputs;
  const std::vector<Tensor>& outputs;
  const std::vector<Tensor>& grads;  // dTarget/dOutput[i]; zeros where nothing flowed
  const Attrs& attrs;
  // Bit i set: some gradient request wants input i's gradient. A gradient definition may return
  // an undefined Tensor for an input whose bit is clear (e.g. matmul skips dx = g W^T for a
  // layer's data input); the tape and graph mode fill it, everything else gets "all needed".
  std::uint64_t needs_mask = ~std::uint64_t(0);
  bool needs(std::size_t i) const { return i >= 64 || ((needs_mask >> i) & 1u) != 0; }
};

using InferFn = std::vector<TensorSpec> (*)(const std::vector<TensorSpec>& inputs, const Attrs&);
// Non-view kernels write into `outputs`, preallocated from the infer rule; view kernels
// (OpDef::view) push their outputs, which share the inputs' storage.
using KernelFn = void (*)(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                          const Attrs&);
// Returns one gradient per input: an undefined Tensor where the input gets none.
using GradFn = std::vector<Tensor> (*)(const GradContext&);

struct OpDef {
  std::string name;
  int num_inputs = -1;  // -1: variadic
  InferFn infer = nullptr;
  GradFn grad = nullptr;  // nullptr: not differentiable (outputs carry no gradient)
  bool view = false;
  KernelFn kernels[kNumDeviceKinds] = {};
};

// Adds an op definition; throws if the name is taken.
void register_op(OpDef def);
// Attaches a kernel for a device to an already registered op.
void register_kernel(std::string_view op, DeviceKind device, KernelFn fn);
// The definition of an op by name; throws soma::Error for an unknown name.
const OpDef& get_op(std::string_view name);
std::vector<std::string> registered_ops();

// Runs an op eagerly: checks devices, infers output specs, allocates, runs the kernel for the
// inputs' device, and records a node on every recording tape that watches an input.
std::vector<Tensor> call_op(const OpDef& def, const std::vector<Tensor>& inputs,
                            const Attrs& attrs = {});
// The same for a braced list of inputs (`call_op(def, {a, b})`): the list goes into a reused
// per-thread vector instead of a new one (issue 5: one heap allocation fewer per op).
std::vector<Tensor> call_op(const OpDef& def, std::initializer_list<Tensor> inputs,
                            const Attrs& attrs = {});
// The first output only; the outputs vector is a reused per-thread one.
Tensor call_op1(const OpDef& def, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
Tensor call_op1(const OpDef& def, std::initializer_list<Tensor> inputs, const Attrs& attrs = {});

}  // namespace soma
