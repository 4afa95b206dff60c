#pragma once
// Recurrent layers with Keras' semantics, defaults and weight layouts: SimpleRNN, LSTM, GRU.
//
//   nn::LSTM lstm(64, {.return_sequences = true});
//   Tensor y = lstm(x);                               // x: [batch, time, features]
//   nn::LSTM enc(64, {.return_state = true});
//   auto outs = enc.call({x, h0, c0});                // {output, h, c}; h0, c0 optional
//
// Input is [batch, time, features]. The output is the last step's output [batch, units], or
// every step's [batch, time, units] with return_sequences. With return_state, call() returns
// the output followed by the final states (SimpleRNN/GRU: h; LSTM: h, c); operator() and
// forward() always return the first output only.
//
// Weights (Keras' names and layouts, gates side by side along the last axis):
//   kernel            [features, k*units]
//   recurrent_kernel  [units, k*units]
//   bias              [k*units]  (GRU with reset_after: [2, 3*units], input bias then recurrent)
// with k = 1 (SimpleRNN), 4 (LSTM: i, f, c, o) or 3 (GRU: z, r, h).
//
// Everything is built from differentiable ops, so backpropagation through time comes from the
// tape. The input projection x @ kernel is computed for all time steps in one matmul.
#include <cstdint>
#include <string>
#include <vector>

#include "soma/nn/activation.hpp"
#include "soma/nn/initializers.hpp"
#include "soma/nn/module.hpp"

namespace soma::nn {

struct SimpleRNNOptions {
  Activation activation = nn::tanh;
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer recurrent_initializer = init::orthogonal();
  Initializer bias_initializer = init::zeros();
  Regularizer kernel_regularizer{}, recurrent_regularizer{}, bias_regularizer{};
  bool return_sequences = false;
  bool return_state = false;
  bool go_backwards = false;  // process the sequence last step first (outputs in that order)
  DType dtype = DType::f32;   // of the weights
};

struct LSTMOptions {
  Activation activation = nn::tanh;
  Activation recurrent_activation = nn::sigmoid;
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer recurrent_initializer = init::orthogonal();
  Initializer bias_initializer = init::zeros();
  bool unit_forget_bias = true;  // forget-gate bias starts at 1 (Jozefowicz et al. 2015)
  Regularizer kernel_regularizer{}, recurrent_regularizer{}, bias_regularizer{};
  bool return_sequences = false;
  bool return_state = false;
  bool go_backwards = false;
  DType dtype = DType::f32;
};

struct GRUOptions {
  Activation activation = nn::tanh;
  Activation recurrent_activation = nn::sigmoid;
  bool use_bias = true;
  Initializer kernel_initializer = init::glorot_uniform();
  Initializer recurrent_initializer = init::orthogonal();
  Initializer bias_initializer = init::zeros();
  // true (Keras 2/3 and cuDNN): the reset gate multiplies (h @ U_h + b_rh); separate input and
  // recurrent biases. false (the original GRU): it multiplies h before the matmul; one bias.
  bool reset_after = true;
  Regularizer kernel_regularizer{}, recurrent_regularizer{}, bias_regularizer{};
  bool return_sequences = false;
  bool return_state = false;
  bool go_backwards = false;
  DType dtype = DType::f32;
};

// What the three layers share: input checks, initial states, the loop over time.
class RecurrentBase : public Module {
 public:
  // inputs[0]: the sequence [batch, time, features]; then optional initial states, each
  // [batch, units] (all of them or none).
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) override;
  Shape output_shape(const Shape& input_shape) override;

  std::int64_t units() const { return units_; }
  bool return_sequences() const { return return_sequences_; }
  bool return_state() const { return return_state_; }
  bool go_backwards() const { return go_backwards_; }
  DType dtype() const { return dtype_; }
  int num_states() const { return num_states_; }

 protected:
  RecurrentBase(std::int64_t units, int num_states, bool return_sequences,
                bool return_state, bool go_backwards, DType dtype, const char* type);

  Tensor forward(const Tensor& x) override;
  void build(const Shape& input_shape) override;

  // The current weights, looked up by name on every call (so that load_state_dict() or to()
  // replacing a parameter is always seen). bias is undefined without use_bias.
  struct Weights {
    Tensor kernel, recurrent_kernel, bias;
  };
  Weights weights() const;
  // x @ kernel (+ input bias) for every step: [batch, time, features] -> [batch, time, k*units].
  virtual Tensor project_inputs(const Weights& w, const Tensor& x) const = 0;
  // One step: the projected input of this step [batch, k*units] and the states -> new states;
  // the step's output is the first new state.
  virtual std::vector<Tensor> step(const Weights& w, const Tensor& x_proj,
                                   const std::vector<Tensor>& states) const = 0;
  // Creates the weights once the number of features is known.
  virtual void build_weights(std::int64_t features) = 0;

  std::string where() const;  // "LSTM 'lstm_1'", for error messages
  void check_input(const Shape& s) const;

  std::int64_t units_;
  int num_states_;
  bool return_sequences_, return_state_, go_backwards_;
  DType dtype_;
  std::int64_t features_ = -1;  // set by build()
};

// h_t = activation(x_t @ kernel + h_{t-1} @ recurrent_kernel + bias)
class SimpleRNN : public RecurrentBase {
 public:
  explicit SimpleRNN(std::int64_t units, SimpleRNNOptions options = {});
  std::string type_name() const override { return "SimpleRNN"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  const SimpleRNNOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor project_inputs(const Weights& w, const Tensor& x) const override;
  std::vector<Tensor> step(const Weights& w, const Tensor& x_proj,
                           const std::vector<Tensor>& states) const override;
  void build_weights(std::int64_t features) override;

 private:
  SimpleRNNOptions opt_;
};

// i, f, o = recurrent_activation(gates), g = activation(gate),
// c_t = f * c_{t-1} + i * g, h_t = o * activation(c_t). States: h, c.
class LSTM : public RecurrentBase {
 public:
  explicit LSTM(std::int64_t units, LSTMOptions options = {});
  std::string type_name() const override { return "LSTM"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  const LSTMOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor project_inputs(const Weights& w, const Tensor& x) const override;
  std::vector<Tensor> step(const Weights& w, const Tensor& x_proj,
                           const std::vector<Tensor>& states) const override;
  void build_weights(std::int64_t features) override;

 private:
  LSTMOptions opt_;
};

// z, r = recurrent_activation(...), hh = activation(x W_h + r * (h U_h + b_rh)) (reset_after)
// or activation(x W_h + (r * h) U_h + b_h); h_t = z * h_{t-1} + (1 - z) * hh.
class GRU : public RecurrentBase {
 public:
  explicit GRU(std::int64_t units, GRUOptions options = {});
  std::string type_name() const override { return "GRU"; }
  std::vector<LoweredValue> lower(Lowering& l, const std::vector<LoweredValue>& inputs) override;
  const GRUOptions& options() const { return opt_; }
  void visit_config(ConfigVisitor& v) override;  // its config fields (soma/nn/config.hpp)

 protected:
  Tensor project_inputs(const Weights& w, const Tensor& x) const override;
  std::vector<Tensor> step(const Weights& w, const Tensor& x_proj,
                           const std::vector<Tensor>& states) const override;
  void build_weights(std::int64_t features) override;

 private:
  GRUOptions opt_;
};

}  // namespace soma::nn
