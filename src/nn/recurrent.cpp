#include "soma/nn/recurrent.hpp"

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::nn {

// ---- RecurrentBase --------------------------------------------------------------------------

RecurrentBase::RecurrentBase(std::int64_t units, int num_states, bool return_sequences,
                             bool return_state, bool go_backwards, DType dtype, const char* type)
    : units_(units),
      num_states_(num_states),
      return_sequences_(return_sequences),
      return_state_(return_state),
      go_backwards_(go_backwards),
      dtype_(dtype) {
  if (units <= 0) fail(type, "units must be positive, got ", units);
  if (!is_floating(dtype)) fail(type, "dtype must be a floating type, got ", dtype_name(dtype));
}

std::string RecurrentBase::where() const { return type_name() + " '" + name() + "'"; }

void RecurrentBase::check_input(const Shape& s) const {
  if (s.size() != 3)
    fail(where(), "expected input of rank 3 [batch, time, features], got shape ", shape_str(s));
  if (built() && s[2] != features_)
    fail(where(), "input has ", s[2], " features but the layer was built for ", features_,
         ": got shape ", shape_str(s), ", expected [batch, time, ", features_, "]");
}

void RecurrentBase::build(const Shape& input_shape) {
  check_input(input_shape);
  features_ = input_shape[2];
  build_weights(features_);
}

Shape RecurrentBase::output_shape(const Shape& input_shape) {
  check_input(input_shape);
  if (return_sequences_) return {input_shape[0], input_shape[1], units_};
  return {input_shape[0], units_};
}

RecurrentBase::Weights RecurrentBase::weights() const {
  // The parameter names build_weights() gives, and where each goes.
  struct Slot {
    const char* name;
    Tensor Weights::*field;
  };
  static constexpr Slot kSlots[] = {{"kernel", &Weights::kernel},
                                    {"recurrent_kernel", &Weights::recurrent_kernel},
                                    {"bias", &Weights::bias}};
  Weights w;
  for (const auto& [name, v] : named_parameters(/*recurse=*/false))
    for (const auto& s : kSlots)
      if (name == s.name) w.*s.field = v.value();
  if (!w.kernel.defined() || !w.recurrent_kernel.defined())
    fail(where(), "the layer has no kernel/recurrent_kernel parameters (not built?)");
  return w;
}

Tensor RecurrentBase::forward(const Tensor& x) { return call({x})[0]; }

std::vector<Tensor> RecurrentBase::call(const std::vector<Tensor>& inputs) {
  if (inputs.empty()) fail(where(), "expected the input sequence, got no inputs");
  if (!inputs[0].defined()) fail(where(), "the input sequence is undefined");
  check_input(inputs[0].shape());
  build_for(inputs[0].shape());
  check_input(inputs[0].shape());  // again, now that the number of features is known

  // Inputs follow the layer's dtype, as Keras casts inputs to the layer's compute dtype.
  Tensor x = inputs[0].dtype() == dtype_ ? inputs[0] : cast(inputs[0], dtype_);
  const std::int64_t batch = x.dim(0), time = x.dim(1);
  if (time == 0)
    fail(where(), "the input sequence has no time steps: got shape ", shape_str(x.shape()));

  std::vector<Tensor> states;
  if (inputs.size() == 1) {
    // Zero states where the input is: made on the host they would not mix with a device input.
    const bool on_cpu = x.device().is_cpu();
    for (int i = 0; i < num_states_; ++i)
      states.push_back(on_cpu ? zeros({batch, units_}, dtype_)
                              : zeros_like(Tensor::empty({batch, units_}, dtype_, x.device())));
  } else if (inputs.size() == std::size_t(num_states_) + 1) {
    for (std::size_t i = 1; i < inputs.size(); ++i) {
      const Tensor& s = inputs[i];
      if (!s.defined() || s.shape() != Shape{batch, units_})
        fail(where(), "initial state ", i - 1, " must have shape ", shape_str({batch, units_}),
             " [batch, units], got ",
             s.defined() ? shape_str(s.shape()) : std::string("an undefined tensor"));
      states.push_back(s.dtype() == dtype_ ? s : cast(s, dtype_));
    }
  } else {
    fail(where(), "expected the sequence and ", num_states_, " initial state",
         num_states_ == 1 ? "" : "s", " (or none), got ", inputs.size(), " inputs");
  }

  const Weights w = weights();
  // One GEMM for the input projection of every step; only h @ recurrent_kernel stays in the loop.
  std::vector<Tensor> proj = unstack(project_inputs(w, x), 1);
  std::vector<Tensor> outputs;
  if (return_sequences_) outputs.reserve(std::size_t(time));
  for (std::int64_t i = 0; i < time; ++i) {
    std::int64_t t = go_backwards_ ? time - 1 - i : i;
    states = step(w, proj[std::size_t(t)], states);
    if (return_sequences_) outputs.push_back(states[0]);
  }

  std::vector<Tensor> result;
  result.push_back(return_sequences_ ? stack(outputs, 1) : states[0]);
  if (return_state_) result.insert(result.end(), states.begin(), states.end());
  return result;
}

// ---- SimpleRNN ------------------------------------------------------------------------------

SimpleRNN::SimpleRNN(std::int64_t units, SimpleRNNOptions options)
    : RecurrentBase(units, 1, options.return_sequences, options.return_state, options.go_backwards,
                    options.dtype, "SimpleRNN"),
      opt_(std::move(options)) {}

void SimpleRNN::build_weights(std::int64_t features) {
  Shape ks{features, units_}, rs{units_, units_};
  add_regularizer(add_weight("kernel", ks, opt_.kernel_initializer, dense_fans(ks), true, dtype_),
                  opt_.kernel_regularizer);
  add_regularizer(
      add_weight("recurrent_kernel", rs, opt_.recurrent_initializer, dense_fans(rs), true, dtype_),
      opt_.recurrent_regularizer);
  if (opt_.use_bias)
    add_regularizer(
        add_weight("bias", {units_}, opt_.bias_initializer, dense_fans(ks), true, dtype_),
        opt_.bias_regularizer);
}

Tensor SimpleRNN::project_inputs(const Weights& w, const Tensor& x) const {
  Tensor y = matmul(x, w.kernel);
  return w.bias.defined() ? y + w.bias : y;
}

std::vector<Tensor> SimpleRNN::step(const Weights& w, const Tensor& x_proj,
                                    const std::vector<Tensor>& states) const {
  return {opt_.activation(x_proj + matmul(states[0], w.recurrent_kernel))};
}

// ---- LSTM -----------------------------------------------------------------------------------

LSTM::LSTM(std::int64_t units, LSTMOptions options)
    : RecurrentBase(units, 2, options.return_sequences, options.return_state, options.go_backwards,
                    options.dtype, "LSTM"),
      opt_(std::move(options)) {}

void LSTM::build_weights(std::int64_t features) {
  const std::int64_t n = 4 * units_;
  Shape ks{features, n}, rs{units_, n};
  add_regularizer(add_weight("kernel", ks, opt_.kernel_initializer, dense_fans(ks), true, dtype_),
                  opt_.kernel_regularizer);
  add_regularizer(
      add_weight("recurrent_kernel", rs, opt_.recurrent_initializer, dense_fans(rs), true, dtype_),
      opt_.recurrent_regularizer);
  if (!opt_.use_bias) return;
  Variable b;
  if (opt_.unit_forget_bias) {
    // Keras: [init(units), ones(units), init(2 * units)] -- the forget gate starts open.
    const Initializer& bi = opt_.bias_initializer;
    Tensor value = concat({bi({units_}, dtype_, dense_fans(ks)), ones({units_}, dtype_),
                           bi({2 * units_}, dtype_, dense_fans(ks))},
                          0);
    b = add_weight("bias", value, true);
  } else {
    b = add_weight("bias", {n}, opt_.bias_initializer, dense_fans(ks), true, dtype_);
  }
  add_regularizer(b, opt_.bias_regularizer);
}

Tensor LSTM::project_inputs(const Weights& w, const Tensor& x) const {
  Tensor y = matmul(x, w.kernel);
  return w.bias.defined() ? y + w.bias : y;
}

std::vector<Tensor> LSTM::step(const Weights& w, const Tensor& x_proj,
                               const std::vector<Tensor>& states) const {
  const Tensor& h = states[0];
  const Tensor& c = states[1];
  std::vector<Tensor> z = split(x_proj + matmul(h, w.recurrent_kernel), 4, 1);  // i, f, c, o
  Tensor i = opt_.recurrent_activation(z[0]);
  Tensor f = opt_.recurrent_activation(z[1]);
  Tensor g = opt_.activation(z[2]);
  Tensor o = opt_.recurrent_activation(z[3]);
  Tensor c_new = f * c + i * g;
  Tensor h_new = o * opt_.activation(c_new);
  return {h_new, c_new};
}

// ---- GRU ------------------------------------------------------------------------------------

GRU::GRU(std::int64_t units, GRUOptions options)
    : RecurrentBase(units, 1, options.return_sequences, options.return_state, options.go_backwards,
                    options.dtype, "GRU"),
      opt_(std::move(options)) {}

void GRU::build_weights(std::int64_t features) {
  const std::int64_t n = 3 * units_;
  Shape ks{features, n}, rs{units_, n};
  add_regularizer(add_weight("kernel", ks, opt_.kernel_initializer, dense_fans(ks), true, dtype_),
                  opt_.kernel_regularizer);
  add_regularizer(
      add_weight("recurrent_kernel", rs, opt_.recurrent_initializer, dense_fans(rs), true, dtype_),
      opt_.recurrent_regularizer);
  if (!opt_.use_bias) return;
  // reset_after keeps the input and recurrent biases apart (rows 0 and 1), as cuDNN does.
  Shape bs = opt_.reset_after ? Shape{2, n} : Shape{n};
  add_regularizer(add_weight("bias", bs, opt_.bias_initializer, dense_fans(ks), true, dtype_),
                  opt_.bias_regularizer);
}

Tensor GRU::project_inputs(const Weights& w, const Tensor& x) const {
  Tensor y = matmul(x, w.kernel);
  if (!w.bias.defined()) return y;
  return y + (opt_.reset_after ? unstack(w.bias, 0)[0] : w.bias);
}

std::vector<Tensor> GRU::step(const Weights& w, const Tensor& x_proj,
                              const std::vector<Tensor>& states) const {
  const Tensor& h = states[0];
  const std::int64_t u = units_;
  std::vector<Tensor> x = split(x_proj, 3, 1);  // z, r, h
  Tensor z, r, hh;
  if (opt_.reset_after) {
    Tensor inner = matmul(h, w.recurrent_kernel);
    if (w.bias.defined()) inner = inner + unstack(w.bias, 0)[1];
    std::vector<Tensor> in = split(inner, 3, 1);
    z = opt_.recurrent_activation(x[0] + in[0]);
    r = opt_.recurrent_activation(x[1] + in[1]);
    hh = opt_.activation(x[2] + r * in[2]);
  } else {
    Tensor u_zr = slice(w.recurrent_kernel, {Slice{}, Slice{0, 2 * u}});
    Tensor u_h = slice(w.recurrent_kernel, {Slice{}, Slice{2 * u, 3 * u}});
    std::vector<Tensor> in = split(matmul(h, u_zr), 2, 1);
    z = opt_.recurrent_activation(x[0] + in[0]);
    r = opt_.recurrent_activation(x[1] + in[1]);
    hh = opt_.activation(x[2] + matmul(r * h, u_h));
  }
  return {z * h + (1.0 - z) * hh};
}

}  // namespace soma::nn
