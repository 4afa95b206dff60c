#include "soma/nn/layers.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <typeinfo>

#include "graph/hook.hpp"
#include "internal/dense_chain.hpp"
#include "internal/fast_paths.hpp"
#include "internal/fused_inference.hpp"
#include "internal/fused_dense.hpp"
#include "internal/runtime_checks.hpp"
#include "internal/tensor_alloc.hpp"
#include "soma/autocast.hpp"
#include "soma/autograd.hpp"
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

// Products up to this many multiply-adds (batch-1 and small-batch inference) take the fused
// kernel: their time is mostly the three op dispatches and two temporaries it skips.
constexpr std::int64_t kFusedDenseMaxWork = std::int64_t(1) << 20;
constexpr std::int64_t kFusedDenseMaxRows = 8;

using fusion::fused_inference_activation;
using fusion::fused_inference_state_ok;
using fusion::is_cpu_f32_packed;

bool fused_dense_fits(std::int64_t m, std::int64_t k, std::int64_t n) {
  return k > 0 && m > 0 && m <= kFusedDenseMaxRows && m * k * n <= kFusedDenseMaxWork;
}

// y = act(x W + b) in one kernel (internal/fused_dense.hpp) when nothing can tell it from
// matmul + add + relu: no tape records, no graph is being built, no autocast, no numerics check,
// small f32 CPU operands, a linear or the built-in ReLU activation. Undefined Tensor otherwise.
Tensor fused_dense_inference(const Tensor& x, const Tensor& w, const Tensor* b,
                             const Activation& act) {
  bool relu_act = false;
  if (!fused_inference_state_ok() || !fused_inference_activation(act, &relu_act)) return {};
  if (!is_cpu_f32_packed(x) || !is_cpu_f32_packed(w) || (b && !is_cpu_f32_packed(*b))) return {};
  const std::int64_t k = w.shape()[0], n = w.shape()[1];
  const std::int64_t m = k > 0 ? x.numel() / k : 0;
  if (!fused_dense_fits(m, k, n)) return {};
  Shape ys = x.shape();
  ys.back() = n;
  Tensor y = detail::empty_tensor(std::move(ys), DType::f32, Device::cpu());
  detail::fused_dense_f32(x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr,
                          y.data<float>(), m, k, n, relu_act);
  return y;
}

}  // namespace

Tensor Dense::forward(const Tensor& x) {
  std::int64_t in = kernel_.shape()[0];
  if (x.rank() < 2 || x.shape().back() != in)
    fail("Dense", "layer '", name(), "' expects inputs of shape [batch, ..., ", in,
         "] (it was built for ", in, " features), got ", shape_str(x.shape()));
  const Tensor* bias = opt_.use_bias ? &bias_.value() : nullptr;
  if (Tensor y = fused_dense_inference(x, kernel_.value(), bias, activation_); y.defined())
    return y;
  Tensor y = matmul(to_layer_dtype(x, opt_.dtype), kernel_.value());
  if (opt_.use_bias) y = y + bias_.value();
  return activation_(y);
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

std::size_t run_fused_dense_chain(const std::vector<ModuleRef>& layers, std::size_t i, Tensor& h) {
  if (i >= layers.size() || !h.defined() || !fused_inference_state_ok() || !is_cpu_f32_packed(h))
    return 0;
  const Shape& xs = h.shape();
  std::size_t j = i;
  std::int64_t m = 0, k = 0;
  const bool flatten = typeid(*layers[j]) == typeid(Flatten);
  if (flatten) {  // Flatten::forward's shape: [batch, the product of the other extents]
    if (xs.empty() || !layers[j]->built()) return 0;  // a first call builds it
    m = xs[0];
    k = 1;
    for (std::size_t d = 1; d < xs.size(); ++d) k *= xs[d];
    ++j;
  } else {
    if (xs.size() < 2) return 0;
    k = xs.back();
    m = k > 0 ? h.numel() / k : 0;
  }
  std::array<ChainStep, kMaxChainSteps> steps;
  std::size_t n_steps = 0;
  for (std::int64_t in = k; j < layers.size() && n_steps < kMaxChainSteps; ++j) {
    // A wide layer ends the chain: its output, the input of another step, would not fit the
    // scratch buffers.
    if (n_steps > 0 && m * in > kMaxChainScratch) break;
    // Exactly Dense: a subclass may override forward().
    if (typeid(*layers[j]) != typeid(Dense)) break;
    const auto& d = static_cast<const Dense&>(*layers[j]);
    if (!d.built()) break;
    const Tensor& w = d.kernel().value();
    const Tensor* b = d.options().use_bias ? &d.bias().value() : nullptr;
    bool relu = false;
    if (!fused_inference_activation(d.activation(), &relu) || !is_cpu_f32_packed(w) ||
        w.rank() != 2 || w.shape()[0] != in || (b && !is_cpu_f32_packed(*b)))
      break;  // a wrong feature count ends the chain here: the layer's own call reports it
    const std::int64_t n = w.shape()[1];
    if (!fused_dense_fits(m, in, n)) break;
    steps[n_steps++] = {w.data<float>(), b ? b->data<float>() : nullptr, in, n, relu};
    in = n;
  }
  if (n_steps == 0) return 0;  // a lone Flatten: its own (view) path
  std::int64_t widest = 0;  // of the outputs that go to scratch memory
  for (std::size_t s = 0; s + 1 < n_steps; ++s) widest = std::max(widest, steps[s].n);
  Shape ys;
  if (flatten) {
    ys = Shape{m, steps[n_steps - 1].n};
  } else {
    ys = xs;
    ys.back() = steps[n_steps - 1].n;
  }
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

namespace {

// Eager and unrecorded, a contiguous input's flattened form is a new handle over the same memory,
// exactly what the reshape op's kernel makes (src/ops/views.cpp); skipping the op's dispatch
// (attribute list, shape inference, output vector) is a visible part of batch-1 inference.
// Undefined Tensor when the op must run: graph building, a recording tape, a numerics check.
Tensor flat_view(const Tensor& x, std::int64_t batch, std::int64_t rest) {
  if (!detail::fast_paths_enabled() || graph_detail::t_build_depth > 0 ||
      graph_detail::is_symbolic_id(x.id()) || detail::check_numerics_on() || batch < 0 ||
      !x.device().is_cpu() || !x.is_contiguous())
    return {};
  if (!active_tapes().empty() && !grad_recording_disabled()) return {};
  // contiguous_strides' rule (a zero-size extent counts as 1).
  return Tensor::view_of(x, Shape{batch, rest}, Strides{std::max<std::int64_t>(rest, 1), 1},
                         x.offset());
}

}  // namespace

Tensor Flatten::forward(const Tensor& x) {
  if (x.rank() == 0) fail("Flatten", "layer '", name(), "' needs a batched input, got a scalar");
  // The batch may be unknown (-1) in a define-and-run graph: then let reshape infer it.
  const Shape& s = x.shape();
  std::int64_t rest = 1;
  for (std::size_t d = 1; d < s.size(); ++d) rest *= s[d];
  if (Tensor v = flat_view(x, s[0], rest); v.defined()) return v;
  return reshape(x, {s[0] >= 0 ? s[0] : -1, rest});
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
  Tensor keep = cast(greater_equal(u, scalar(rate_, x.dtype())), x.dtype());
  return x * (keep * (1.0 / (1.0 - rate_)));
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
  return !*relu || (act.name == "relu" && act.fn.target_type() == nn::relu.fn.target_type());
}

bool is_cpu_f32_packed(const Tensor& t) {
  return t.device().is_cpu() && t.dtype() == DType::f32 && t.is_contiguous() &&
         !graph_detail::is_symbolic_id(t.id());
}

}  // namespace fusion

}  // namespace soma::nn
