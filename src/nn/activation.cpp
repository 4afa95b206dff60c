#include "soma/nn/activation.hpp"

#include <atomic>
#include <memory>
#include <mutex>

#include "soma/error.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

Tensor heaviside(const Tensor& x) {
  // A comparison has no gradient definition, so nothing flows back through the step (the
  // perceptron rule updates weights without one).
  // `x >= 0.0` makes the 0 on x's device (no host tensor next to a device x).
  return cast(x >= 0.0, x.dtype());
}

namespace {

// An activation name resolves, in order: through kAliases to its canonical name; to a composite
// of kComposites; to a registered op tagged kActivation (a new such op is usable by name, in
// layers and model files, with no edit here).

// Other spellings (Keras' among them) of the canonical names.
struct Alias {
  const char* name;
  const char* canonical;
};
const Alias kAliases[] = {
    {"", "linear"},      {"identity", "linear"},     {"silu", "swish"},
    {"heaviside", "step"}, {"hard_swish", "hardswish"}, {"hard_silu", "hardswish"},
};

// Activations that are not one op. fn == nullptr: the identity (linear).
struct Composite {
  const char* name;
  Tensor (*fn)(const Tensor&);
};
const Composite kComposites[] = {
    {"linear", nullptr},
    {"softmax", [](const Tensor& x) { return soma::softmax(x, -1); }},
    {"log_softmax", [](const Tensor& x) { return soma::log_softmax(x, -1); }},
    {"gelu", [](const Tensor& x) { return soma::gelu(x); }},
    {"swish", [](const Tensor& x) { return x * soma::sigmoid(x); }},
    {"step", heaviside},
    // relu6(x + 3) / 6: PyTorch's Hardsigmoid and Keras 3's hard_sigmoid. soma's "hard_sigmoid"
    // is the op with its defaults, 0.2 x + 0.5 (ONNX's HardSigmoid, Keras 2's hard_sigmoid).
    {"hardsigmoid", [](const Tensor& x) { return soma::hard_sigmoid(x, 1.0 / 6.0, 0.5); }},
};

// The activations whose outputs are probabilities (in [0, 1]; softmax's sum to 1): a
// cross-entropy after them takes from_logits = false.
const char* const kProbabilityActivations[] = {"softmax", "sigmoid"};

const OpDef* activation_op(const std::string& name) {
  for (const OpDef* d : all_ops())
    if (d->name == name && d->has(kActivation)) return d;
  return nullptr;
}

// Calls one registered op with its default attributes. The op is looked up on the first call,
// not at construction: the constants at the end of this file are built during static
// initialisation and must not start the registry.
class OpActivation {
 public:
  explicit OpActivation(std::string op) : s_(std::make_shared<State>()) { s_->op = std::move(op); }
  Tensor operator()(const Tensor& x) const {
    State& s = *s_;
    if (!s.ready.load(std::memory_order_acquire)) resolve(s);
    if (s.float_only && x.defined() && !is_floating(x.dtype()))
      fail(s.op, "dtype ", dtype_name(x.dtype()),
           " is not supported (expected f32, f64, f16 or bf16)");
    return call_op1(*s.def, {x}, s.attrs);
  }

 private:
  struct State {
    std::string op;
    std::mutex mutex;
    std::atomic<bool> ready{false};
    const OpDef* def = nullptr;
    Attrs attrs;
    bool float_only = false;
  };
  static void resolve(State& s) {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.ready.load(std::memory_order_relaxed)) return;
    s.def = &get_op(s.op);
    for (const auto& a : s.def->attrs) s.attrs.set(a.name, a.default_value);
    s.float_only = s.def->has(kFloatOnly);
    s.ready.store(true, std::memory_order_release);
  }
  std::shared_ptr<State> s_;
};

Activation op_activation(const std::string& op) { return {op, OpActivation(op)}; }

std::string known_names() {
  std::string out;
  auto add = [&](const std::string& n) { out += (out.empty() ? "" : ", ") + n; };
  for (const auto& c : kComposites) add(c.name);
  for (const OpDef* d : all_ops())
    if (d->has(kActivation)) add(d->name);
  for (const auto& a : kAliases)
    if (*a.name) add(std::string(a.name) + " (" + a.canonical + ")");
  return out;
}

Activation make(const std::string& given) {
  std::string name = given;
  for (const auto& a : kAliases)
    if (name == a.name) name = a.canonical;
  for (const auto& c : kComposites)
    if (name == c.name) return c.fn ? Activation(name, c.fn) : Activation();
  if (activation_op(name)) return op_activation(name);
  fail("activation", "unknown activation '", given, "'; expected one of ", known_names());
}

}  // namespace

Activation::Activation(const char* n) : Activation(make(n ? std::string(n) : std::string())) {}
Activation::Activation(const std::string& n) : Activation(make(n)) {}

Activation activation(const std::string& name) { return make(name); }

bool is_probability_activation(const std::string& name) {
  for (const char* p : kProbabilityActivations)
    if (name == p) return true;
  return false;
}

const Activation linear = make("linear");
// The op-based constants skip make()'s check against the registry (static initialisation).
const Activation relu = op_activation("relu");
const Activation sigmoid = op_activation("sigmoid");
const Activation tanh = op_activation("tanh");
const Activation softmax = make("softmax");
const Activation log_softmax = make("log_softmax");
const Activation gelu = make("gelu");
const Activation elu = op_activation("elu");
const Activation leaky_relu = op_activation("leaky_relu");
const Activation softplus = op_activation("softplus");
const Activation swish = make("swish");
const Activation step = make("step");

}  // namespace soma::nn
