#include "soma/nn/layers.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <typeinfo>

#include "graph/hook.hpp"
#include "internal/dense_chain.hpp"
#include "internal/dense_op.hpp"
#include "internal/fast_paths.hpp"
#include "internal/fused_inference.hpp"
#include "internal/fused_dense.hpp"
#include "internal/runtime_checks.hpp"
#include "internal/tensor_alloc.hpp"
#include "internal/tensor_vector_pool.hpp"
#include "soma/autocast.hpp"
#include "soma/autograd.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"
#include "soma/random_state.hpp"

namespace soma::nn {

namespace {

// Keras casts floating inputs to the layer's dtype; integer inputs are cast too (a Dense layer
// fed u8 pixels computes in its own dtype).
Tensor to_layer_dtype(const Tensor& x, DType t) { return x.dtype() == t ? x : cast(x, t); }

}  // namespace

// ---- Dense ----------------------------------------------------------------------------------

Dense::Dense(std::int64_t units, Activation activation, DenseOptions options)
    : units_(units), activation_(std::move(activation)), opt_(std::move(options)) {
  if (units <= 0) fail("Dense", "units must be positive, got ", units);
  if (!is_floating(opt_.dtype)) fail("Dense", "dtype must be floating, got ", opt_.dtype);
}

Shape Dense::output_shape(const Shape& input_shape) {
  if (input_shape.size() < 2)
    fail("Dense", "layer '", name(), "' needs inputs of rank >= 2 ([batch, ..., features]), got ",
         shape_str(input_shape));
  Shape out = input_shape;
  out.back() = units_;
  return out;
}

void Dense::build(const Shape& input_shape) {
  if (input_shape.size() < 2)
    fail("Dense", "layer '", name(), "' needs inputs of rank >= 2 ([batch, ..., features]), got ",
         shape_str(input_shape));
  std::int64_t in = input_shape.back();
  if (in <= 0)
    fail("Dense", "layer '", name(), "': the last dimension of the input must be known, got ",
         shape_str(input_shape));
  Shape ks{in, units_};
  kernel_ = add_weight("kernel", ks, opt_.kernel_initializer, dense_fans(ks), true, opt_.dtype);
  add_regularizer(kernel_, opt_.kernel_regularizer);
  if (opt_.use_bias) {
    bias_ = add_weight("bias", {units_}, opt_.bias_initializer, dense_fans({units_}), true,
                       opt_.dtype);
    add_regularizer(bias_, opt_.bias_regularizer);
  }
}

namespace {

using fusion::fused_inference_activation;
using fusion::fused_inference_state_ok;
using fusion::is_cpu_f32_packed;

const OpDef& dense_op() {
  static const OpDef& d = get_op("dense_bias_act");
  return d;
}
const OpDef& reshape_op() {
  static const OpDef& d = get_op("reshape");
  return d;
}

// forward() is the class's own, not a subclass's override (a layer reports its op only then):
// the one test C++ has for it.
template <class L>
bool forward_is_own(const L& layer) {
  return typeid(layer) == typeid(L);
}

// dense_bias_act on (x, w [, b]). Eager and unrecorded on the CPU, its CPU kernel runs directly:
// nothing could tell that from the op's dispatch, which would add an attribute check, shape
// inference into a new vector and the output vector, a visible part of batch-1 inference.
Tensor call_dense(const Tensor& x, const Tensor& w, const Tensor* b, const Attrs& attrs) {
  const OpDef& def = dense_op();
  // (The checks the op's shape rule would make, and would report: dtypes and devices.)
  if (fused_inference_state_ok() && x.device().is_cpu() && w.device().is_cpu() &&
      (!b || b->device().is_cpu()) && is_floating(x.dtype()) && w.dtype() == x.dtype() &&
      (!b || b->dtype() == x.dtype()) && !graph_detail::is_symbolic_id(x.id()) &&
      !graph_detail::is_symbolic_id(w.id()) && (!b || !graph_detail::is_symbolic_id(b->id()))) {
    Shape ys = x.shape();
    ys.back() = w.shape()[1];
    std::vector<Tensor> in = detail::take_tensor_vector(), out = detail::take_tensor_vector();
    in.push_back(x);
    in.push_back(w);
    if (b) in.push_back(*b);
    out.push_back(detail::empty_tensor(std::move(ys), x.dtype(), Device::cpu()));
    def.kernels[int(DeviceKind::CPU)](in, out, attrs);
    Tensor y = std::move(out[0]);
    detail::give_back_tensor_vector(std::move(in));
    detail::give_back_tensor_vector(std::move(out));
    return y;
  }
  if (b) return call_op1(def, {x, w, *b}, attrs);
  return call_op1(def, {x, w}, attrs);
}

}  // namespace

// y = act(x W + b) as one op, dense_bias_act, when the activation is linear or the built-in ReLU;
// any other activation is applied to the op's linear output.
Tensor Dense::forward(const Tensor& x) {
  std::int64_t in = kernel_.shape()[0];
  if (x.rank() < 2 || x.shape().back() != in)
    fail("Dense", "layer '", name(), "' expects inputs of shape [batch, ..., ", in,
         "] (it was built for ", in, " features), got ", shape_str(x.shape()));
  bool relu = false;
  const bool in_op = fused_inference_activation(activation_, &relu);
  const Tensor* bias = opt_.use_bias ? &bias_.value() : nullptr;
  Tensor y = call_dense(to_layer_dtype(x, opt_.dtype), kernel_.value(), bias,
                        detail::dense_attrs(in_op && relu));
  return in_op ? y : activation_(y);
}

OpLowering Dense::op_lowering() const {
  bool relu = false;
  if (!forward_is_own(*this) || !built() || !fused_inference_activation(activation_, &relu))
    return {};
  return {&dense_op(), &detail::dense_attrs(relu), {&kernel_, opt_.use_bias ? &bias_ : nullptr}};
}

// ---- Sequential's fused inference chain (internal/dense_chain.hpp) ---------------------------

namespace {

// Intermediate activations of a chain: two per-thread buffers that only grow, up to
// kMaxChainScratch floats each (a chain's rows times its widest inner layer: a few hundred for
// batch-1 inference).
struct ChainScratch {
  std::vector<float> buf[2];
  float* get(int which, std::size_t n) {
    if (buf[which].size() < n) buf[which].resize(n);
    return buf[which].data();
  }
};
thread_local ChainScratch t_chain_scratch;

struct ChainStep {
  const float* w;
  const float* b;
  std::int64_t k, n;
  bool relu;
};
constexpr std::size_t kMaxChainSteps = 16;
constexpr std::int64_t kMaxChainScratch = std::int64_t(1) << 16;

}  // namespace

// The chain reads what each layer is as an op (Module::op_lowering): a reshape (Flatten) first,
// then dense_bias_act steps, each computed by dense_bias_act's small-product kernel.
std::size_t run_fused_dense_chain(const std::vector<ModuleRef>& layers, std::size_t i, Tensor& h) {
  if (i >= layers.size() || !h.defined() || !fused_inference_state_ok() || !is_cpu_f32_packed(h))
    return 0;
  const Shape& xs = h.shape();
  std::size_t j = i;
  Shape ys;  // the chain's output shape: its input's (reshaped) with the last extent replaced
  if (layers[j]->op_lowering().op == &reshape_op()) {  // a reshape (view) of the input
    if (xs.empty() || !layers[j]->built()) return 0;    // a first call builds it
    ys = layers[j]->output_shape(xs);
    ++j;
  } else {
    ys = xs;
  }
  if (ys.size() < 2) return 0;
  const std::int64_t k = ys.back();
  const std::int64_t m = k > 0 ? h.numel() / k : 0;
  std::array<ChainStep, kMaxChainSteps> steps;
  std::size_t n_steps = 0;
  for (std::int64_t in = k; j < layers.size() && n_steps < kMaxChainSteps; ++j) {
    // A wide layer ends the chain: its output, the input of another step, would not fit the
    // scratch buffers.
    if (n_steps > 0 && m * in > kMaxChainScratch) break;
    const OpLowering l = layers[j]->op_lowering();
    if (l.op != &dense_op()) break;
    const Tensor& w = l.weights[0]->value();
    const Tensor* b = l.weights[1] ? &l.weights[1]->value() : nullptr;
    if (!is_cpu_f32_packed(w) || w.rank() != 2 || w.shape()[0] != in ||
        (b && !is_cpu_f32_packed(*b)))
      break;  // a wrong feature count ends the chain here: the layer's own call reports it
    const std::int64_t n = w.shape()[1];
    if (!detail::fused_dense_fits(m, in, n)) break;
    steps[n_steps++] = {w.data<float>(), b ? b->data<float>() : nullptr, in, n,
                        detail::dense_relu(*l.attrs)};
    in = n;
  }
  if (n_steps == 0) return 0;  // a lone Flatten: its own (view) path
  std::int64_t widest = 0;  // of the outputs that go to scratch memory
  for (std::size_t s = 0; s + 1 < n_steps; ++s) widest = std::max(widest, steps[s].n);
  ys.back() = steps[n_steps - 1].n;
  Tensor y = detail::empty_tensor(std::move(ys), DType::f32, Device::cpu());
  const float* src = h.data<float>();
  for (std::size_t s = 0; s < n_steps; ++s) {
    const ChainStep& st = steps[s];
    float* dst = s + 1 == n_steps ? y.data<float>()
                                  : t_chain_scratch.get(int(s % 2), std::size_t(m * widest));
    detail::fused_dense_f32(src, st.w, st.b, dst, m, st.k, st.n, st.relu);
    src = dst;
  }
  h = std::move(y);
  return j - i;
}

// ---- Flatten / Reshape ----------------------------------------------------------------------

Shape Flatten::output_shape(const Shape& s) {
  if (s.empty()) fail("Flatten", "layer '", name(), "' needs a batched input, got a scalar");
  std::int64_t n = 1;
  for (std::size_t i = 1; i < s.size(); ++i) n = (s[i] < 0 || n < 0) ? -1 : n * s[i];
  return {s[0], n};
}

// Flatten is the reshape op (a view of a contiguous input).
Tensor Flatten::forward(const Tensor& x) {
  if (x.rank() == 0) fail("Flatten", "layer '", name(), "' needs a batched input, got a scalar");
  // The batch may be unknown (-1) in a define-and-run graph: then let reshape infer it.
  const Shape& s = x.shape();
  std::int64_t rest = 1;
  for (std::size_t d = 1; d < s.size(); ++d) rest *= s[d];
  return reshape(x, {s[0] >= 0 ? s[0] : -1, rest});
}

OpLowering Flatten::op_lowering() const {
  if (!forward_is_own(*this)) return {};
  return {&reshape_op()};
}

Reshape::Reshape(Shape target_shape) : target_(std::move(target_shape)) {
  int unknown = 0;
  for (auto d : target_) {
    if (d == -1) ++unknown;
    else if (d <= 0)
      fail("Reshape", "target_shape ", shape_str(target_),
           " must hold positive sizes (and at most one -1)");
  }
  if (unknown > 1) fail("Reshape", "target_shape ", shape_str(target_), " has more than one -1");
}

Shape Reshape::resolve(const Shape& s) const {
  if (s.empty()) fail("Reshape", "layer '", name(), "' needs a batched input, got a scalar");
  std::int64_t in = 1;
  bool in_known = true;
  for (std::size_t i = 1; i < s.size(); ++i) {
    if (s[i] < 0) in_known = false;
    else in *= s[i];
  }
  std::int64_t known = 1;
  int hole = -1;
  for (std::size_t i = 0; i < target_.size(); ++i) {
    if (target_[i] == -1) hole = int(i);
    else known *= target_[i];
  }
  Shape out{s[0]};
  out.insert(out.end(), target_.begin(), target_.end());
  if (!in_known) return out;  // symbolic shape: the -1 stays unknown
  if (hole >= 0) {
    if (known == 0 || in % known != 0)
      fail("Reshape", "layer '", name(), "' cannot reshape samples of shape ",
           shape_str(Shape(s.begin() + 1, s.end())), " (", in, " elements) to ",
           shape_str(target_));
    out[std::size_t(hole) + 1] = in / known;
  } else if (known != in) {
    fail("Reshape", "layer '", name(), "' cannot reshape samples of shape ",
         shape_str(Shape(s.begin() + 1, s.end())), " (", in, " elements) to ", shape_str(target_),
         " (", known, " elements)");
  }
  return out;
}

Shape Reshape::output_shape(const Shape& s) { return resolve(s); }

Tensor Reshape::forward(const Tensor& x) { return reshape(x, resolve(x.shape())); }

// ---- Dropout --------------------------------------------------------------------------------

Dropout::Dropout(double rate, std::optional<std::uint64_t> seed) : rate_(rate), seed_(seed) {
  if (!(rate >= 0.0 && rate < 1.0)) fail("Dropout", "rate must be in [0, 1), got ", rate);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!training() || rate_ == 0.0) return x;
  if (!is_floating(x.dtype()))
    fail("Dropout", "layer '", name(), "' needs a floating input, got ", x.dtype());
  // A seeded layer draws a new mask per call from (seed, call number): reproducible, yet not the
  // same mask at every step. The draw is a random op shaped like x, so in a graph or a traced
  // step it draws a new mask at every run (and keeps the eager sequence of masks).
  Tensor u = detail::dropout_uniform(x, seed_, calls_);
  ++calls_;
  // `u >= rate_` makes the 0-d rate on u's device (a fill there), not on the host: no copy per
  // step on a device. u has x's dtype, so the comparison is the one scalar(rate_, x.dtype()) made.
  // The scaled mask in one where() (a cast and a multiply before): one tensor of x's size fewer.
  // Multiplying keeps a NaN in x a NaN where dropped, as PyTorch's dropout.
  auto on_device = [&](double v) {
    return x.device().is_cpu() ? scalar(v, x.dtype())
                               : full_like(Tensor::empty({}, x.dtype(), x.device()), v);
  };
  return x * where(u >= rate_, on_device(1.0 / (1.0 - rate_)), on_device(0.0));
}

// ---- activation layers ----------------------------------------------------------------------

ReLU::ReLU() : ActivationLayer("ReLU", nn::relu) {}
LeakyReLU::LeakyReLU(double alpha)
    : ActivationLayer("LeakyReLU",
                      Activation("leaky_relu",
                                 [alpha](const Tensor& x) { return soma::leaky_relu(x, alpha); })),
      alpha_(alpha) {}
ELU::ELU(double alpha)
    : ActivationLayer("ELU", Activation("elu",
                                        [alpha](const Tensor& x) { return soma::elu(x, alpha); })),
      alpha_(alpha) {}
GELU::GELU(bool approximate)
    : ActivationLayer("GELU", Activation("gelu", [approximate](const Tensor& x) {
                        return soma::gelu(x, approximate);
                      })),
      approximate_(approximate) {}
Sigmoid::Sigmoid() : ActivationLayer("Sigmoid", nn::sigmoid) {}
Tanh::Tanh() : ActivationLayer("Tanh", nn::tanh) {}
Softmax::Softmax(std::int64_t axis)
    : ActivationLayer("Softmax", Activation("softmax",
                                            [axis](const Tensor& x) {
                                              return soma::softmax(x, axis);
                                            })),
      axis_(axis) {}
Step::Step() : ActivationLayer("Step", nn::step) {}

// ---- Embedding ------------------------------------------------------------------------------

Embedding::Embedding(std::int64_t input_dim, std::int64_t output_dim, EmbeddingOptions options)
    : input_dim_(input_dim), output_dim_(output_dim), opt_(std::move(options)) {
  if (input_dim <= 0 || output_dim <= 0)
    fail("Embedding", "input_dim and output_dim must be positive, got ", input_dim, " and ",
         output_dim);
  if (!is_floating(opt_.dtype)) fail("Embedding", "dtype must be floating, got ", opt_.dtype);
}

Shape Embedding::output_shape(const Shape& input_shape) {
  Shape out = input_shape;
  out.push_back(output_dim_);
  return out;
}

void Embedding::build(const Shape&) {
  Shape s{input_dim_, output_dim_};
  table_ = add_weight("embeddings", s, opt_.embeddings_initializer, dense_fans(s), true, opt_.dtype);
  add_regularizer(table_, opt_.embeddings_regularizer);
}

Tensor Embedding::forward(const Tensor& x) {
  Tensor idx = x;
  if (is_floating(x.dtype())) idx = cast(x, DType::i64);
  else if (x.dtype() != DType::i32 && x.dtype() != DType::i64) idx = cast(x, DType::i64);
  if (idx.numel() > 0) {
    auto lo = min(idx).item<std::int64_t>(), hi = max(idx).item<std::int64_t>();
    if (lo < 0 || hi >= input_dim_)
      fail("Embedding", "layer '", name(), "': index ", lo < 0 ? lo : hi,
           " is out of range for input_dim ", input_dim_, " (indices must be in [0, ", input_dim_,
           "))");
  }
  return gather(table_.value(), idx, 0);
}

// ---- When fused inference kernels may run (internal/fused_inference.hpp) --------------------

namespace fusion {

bool fused_op_state_ok() {
  return detail::fast_paths_enabled() && graph_detail::t_build_depth == 0 &&
         !detail::check_numerics_on();
}

bool fused_forward_state_ok() { return fused_op_state_ok() && autocast_dtype() == DType::f32; }

bool fused_inference_state_ok() {
  return fused_forward_state_ok() && (active_tapes().empty() || grad_recording_disabled());
}

bool fused_inference_activation(const Activation& act, bool* relu) {
  *relu = !act.is_linear();
  if (!*relu) return true;
  // The built-in ReLU: relu's name with the op-activation closure type (a custom function, even
  // one named "relu", has another; every activation op shares that type). The name first: it
  // rejects most activations without the std::function type queries (Dense and Sequential's
  // chain ask on every call).
  static const std::type_info& op_activation_type = nn::relu.fn.target_type();
  return act.name == nn::relu.name && act.fn.target_type() == op_activation_type;
}

bool is_cpu_f32_packed(const Tensor& t) {
  return t.device().is_cpu() && t.dtype() == DType::f32 && t.is_contiguous() &&
         !graph_detail::is_symbolic_id(t.id());
}

}  // namespace fusion

}  // namespace soma::nn
