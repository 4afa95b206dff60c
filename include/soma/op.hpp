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

// What kind of op this is: read by the graph fuser and planner, the CUDA launcher, the ONNX
// tables and the registry-driven test suite (tests/ops). A bit set.
enum OpTag : std::uint32_t {
  kTagNone = 0,
  kElementwiseUnary = 1u << 0,   // out[i] = f(x[i]); output shape = input shape
  kElementwiseBinary = 1u << 1,  // out[i] = f(a[i], b[i]) with NumPy broadcasting
  kPredicate = 1u << 2,          // an elementwise op whose output is bool
  kReduction = 1u << 3,          // reduces over attribute "axes" (keepdims)
  kShapeOnly = 1u << 4,          // moves, reshapes or selects data; no arithmetic
  kRandom = 1u << 5,             // output depends on the random state
  kInplace = 1u << 6,            // writes into an input (optimiser updates)
  kActivation = 1u << 7,         // usable as a layer activation (nn::Activation by name)
  kFloatOnly = 1u << 8,          // floating dtypes only (f32, f64, f16, bf16)
  kNoGraph = 1u << 9,            // not recorded in graph mode (internal helper ops)
  // Autocast (soma/autocast.hpp) reads these two: an op tagged kAutocastLow runs its f32 work in
  // the scope's dtype (bf16/f16, f32 accumulation, f32 outputs): matmul, convolutions, dense.
  // An op tagged kAutocastF32 always runs in f32, whatever the scope (softmax, losses,
  // reductions, norms: sums and exponentials lose too much in 8 mantissa bits). Untagged ops run
  // in their inputs' dtype. autocast_policy() below is the one reader.
  kAutocastLow = 1u << 10,
  kAutocastF32 = 1u << 11,
};
constexpr std::uint32_t operator|(OpTag a, OpTag b) { return std::uint32_t(a) | std::uint32_t(b); }

// An attribute the op takes, with its default (the type of the default is the attribute's type).
struct AttrSpec {
  std::string name;
  AttrValue default_value;
};

// How an op maps to ONNX, read by the import and export tables (src/onnx/). A one-to-one
// mapping: op_type with attributes renamed and converted by type (int64 <-> INT, double <->
// FLOAT, bool <-> INT 0/1, int list <-> INTS, DType <-> INT (TensorProto.DataType), string <->
// STRING). Ops with no one-to-one ONNX op leave op_type empty; the ONNX tables then name a
// handler for the op (a table entry keyed by this op's name).
struct OnnxAttr {
  std::string soma;  // attribute name in soma
  std::string onnx;  // attribute name in ONNX
};
struct OnnxMapping {
  std::string op_type{};      // empty: no one-to-one ONNX op
  int min_opset = 1;          // first opset with these semantics
  int max_opset = 0;          // last one (0: still current)
  std::vector<OnnxAttr> attrs{};
};

// The test table entry: sample inputs and a reference, read by the registry-driven suite
// (tests/ops/test_op_registry.cpp), which runs for every op with shapes set: forward vs the
// reference, gradient vs finite differences in f64, graph == eager, ONNX round trip, and
// CPU == CUDA where a GPU is present. A new op gets all of them by filling this in.
// Reference: computes the outputs in f64 from f64 inputs, independently of the kernels.
// (Inputs listed in OpTestSpec::fixed_inputs arrive in their own dtype: i64 indices, bools.)
using ReferenceFn = std::vector<Tensor> (*)(const std::vector<Tensor>& inputs, const Attrs&);
// An input drawn in its own dtype instead of the dtype under test (indices, conditions): integers
// uniform in [lo, hi] (inclusive), cast to `dtype` (bool: true where > 0). Not gradient-checked.
struct TestInputSpec {
  int input = 0;
  DType dtype = DType::i64;
  double lo = 0.0, hi = 1.0;
};
struct OpTestSpec {
  std::vector<Shape> shapes{};  // one per input; empty: no generated tests
  double lo = -2.0, hi = 2.0;  // uniform input values in [lo, hi]
  Attrs attrs{};               // attributes for the sample call
  ReferenceFn reference = nullptr;
  bool gradcheck = true;       // false: non-smooth or integer-valued
  double min_gap = 0.0;        // keep inputs at least this far from kinks at `kinks`
  std::vector<double> kinks{};  // points where the op is not differentiable (e.g. 0 for relu)
  std::vector<TestInputSpec> fixed_inputs{};  // inputs not in the dtype under test (indices, ...)
};

struct OpDef {
  std::string name;
  int num_inputs = -1;  // -1: variadic
  InferFn infer = nullptr;
  GradFn grad = nullptr;  // nullptr: not differentiable (outputs carry no gradient)
  bool view = false;
  KernelFn kernels[kNumDeviceKinds] = {};
  std::uint32_t tags = kTagNone;  // OpTag bits
  std::vector<AttrSpec> attrs{};  // the attributes it takes (empty: none or not declared)
  OnnxMapping onnx{};
  OpTestSpec test{};
  bool has(OpTag t) const { return (tags & t) != 0; }
};

// What an op does under autocast, from its tags (kAutocastLow / kAutocastF32).
enum class AutocastPolicy { kFollow, kLow, kF32 };
inline AutocastPolicy autocast_policy(const OpDef& def) {
  if (def.has(kAutocastF32)) return AutocastPolicy::kF32;
  if (def.has(kAutocastLow)) return AutocastPolicy::kLow;
  return AutocastPolicy::kFollow;
}
// The dtype an op's f32 work runs in under an autocast scope of `scope` (f32: off).
inline DType autocast_dtype_for(const OpDef& def, DType scope) {
  return autocast_policy(def) == AutocastPolicy::kLow ? scope : DType::f32;
}

// Adds an op definition; throws if the name is taken.
void register_op(OpDef def);
// Attaches a kernel for a device to an already registered op.
void register_kernel(std::string_view op, DeviceKind device, KernelFn fn);
// The definition of an op by name; throws soma::Error for an unknown name.
const OpDef& get_op(std::string_view name);
std::vector<std::string> registered_ops();
// Every registered definition, sorted by name (the list the ONNX tables, the graph passes and
// the test suite walk).
std::vector<const OpDef*> all_ops();

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
