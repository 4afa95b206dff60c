#pragma once
// Lowering: a layer describes itself as ops, for a consumer that rebuilds the model in another
// form (the ONNX exporter, src/onnx/export.cpp, implements it; nn knows nothing of ONNX).
//
// Module::lower(l, inputs) emits ops on `l` by name and returns its outputs. An op name is a
// registered op's (OpDef::name: "relu", "softmax", "conv2d", "cast", "gather", ...) or one of
// the lowering ops below, which soma runs as several kernels or a view but a consumer may hold as
// one op. Attributes use soma's names and types; the consumer converts them.
//
//   lowering op          inputs                       attributes
//   dense                x [N, K], kernel [, bias]    -            (x @ kernel + bias)
//   conv2d               x, kernel [, bias]           kernel_size, strides, dilation,
//                                                     pads {top, bottom, left, right}, groups
//   conv2d_transpose     x, kernel [, bias]           the same + output_padding
//   max_pool2d           x                            pool, strides, pads {t, b, l, r}
//   avg_pool2d           x                            the same (divides by unpadded elements)
//   global_avg_pool2d    x [N, C, H, W]               - (-> [N, C, 1, 1])
//   flatten              x                            axis
//   reshape              x                            shape (0 copies the extent of the input)
//   dropout              x                            rate (inference: the identity)
//   batch_norm           x, gamma, beta, mean, var    epsilon (features on axis 1)
//   layer_norm           x, gamma, beta               axis (first normalised; trailing), epsilon
//   squeeze, expand_dims x                            axes
//   reverse              x                            axis
//   reduce_mean          x                            axes (keepdims)
//   add_n, mean_n        x1, x2, ...                  -
//   lstm, gru, rnn       x [time, batch, f], W, R [, B [, "", h0 [, c0]]]   hidden_size,
//                        activations ("sigmoid,tanh,tanh": activation names), and for gru
//                        linear_before_reset; weights in the standard gate order (lstm i, o, f,
//                        c; gru z, r, h): W [1, gates*units, f], R [1, gates*units, units],
//                        B [1, 2*gates*units] (input bias, then recurrent bias); outputs
//                        Y [time, 1, batch, units], Y_h [1, batch, units] (, Y_c for lstm)
#include <cstdint>
#include <string>
#include <vector>

#include "soma/op.hpp"
#include "soma/tensor.hpp"

namespace soma::nn {

class Module;
struct Activation;

// A value of the lowered graph: its name there and its shape (batch axis -1, -1 where unknown).
struct LoweredValue {
  std::string name;
  Shape shape;
};

class Lowering {
 public:
  virtual ~Lowering() = default;

  // Whether the consumer can take `op` (with these attributes' names) as it stands.
  virtual bool supports(const std::string& op) const = 0;
  // Emits `op` over `inputs` (names; "" for an absent optional input); returns the names of its
  // `num_outputs` outputs. An op the consumer cannot take is a soma::Error naming it.
  virtual std::vector<std::string> emit(const std::string& op,
                                        const std::vector<std::string>& inputs,
                                        const Attrs& attrs = {}, int num_outputs = 1) = 0;
  std::string emit1(const std::string& op, const std::vector<std::string>& inputs,
                    const Attrs& attrs = {}) {
    return emit(op, inputs, attrs, 1).at(0);
  }
  // A constant from a weight ("<layer>.<name>"); floating values in the graph's float dtype.
  virtual std::string weight(const std::string& name, const Tensor& value) = 0;
  // An i64 vector constant.
  virtual std::string ints(const std::string& name, const std::vector<std::int64_t>& values) = 0;
  // A floating scalar constant (shared by every op that uses the same number).
  virtual std::string scalar(double value) = 0;
  // The graph's floating dtype (f32, or f64 when the weights are f64).
  virtual DType float_dtype() const = 0;
  // Lowers a submodule (containers); `out_shapes`, when known, are its outputs' shapes.
  virtual std::vector<LoweredValue> lower(Module& m, const std::vector<LoweredValue>& inputs,
                                          const std::vector<Shape>* out_shapes = nullptr) = 0;
  // Throws soma::Error with the consumer's name in front of `message`.
  [[noreturn]] virtual void fail(const std::string& message) const = 0;
  // Throws soma::Error saying that the layer being lowered (with `what`: "activation 'cube'",
  // or "" for the layer itself) has no mapping in the consumer.
  [[noreturn]] virtual void unsupported(const std::string& what) const = 0;
};

// "layer 'dense' (Dense)", for messages.
std::string describe(const Module& m);

// Lowers activation `a` applied to `x` (the op of that name, or its composition of ops);
// `attrs` override the activation's own (a LeakyReLU layer's alpha, a Softmax layer's axis).
// An activation with neither is Lowering::unsupported("activation 'x'").
std::string lower_activation(Lowering& l, const Activation& a, const std::string& x,
                             const Attrs& attrs = {});

}  // namespace soma::nn
