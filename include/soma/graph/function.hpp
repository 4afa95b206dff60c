#pragma once
// Tracing: soma::function(f) wraps an eager function. Its first call with given input shapes and
// dtypes runs f once on symbolic inputs, which records a Graph; later calls with the same
// signature run that graph through a Session (planned once, optimised, buffers reused).
//
//   auto step = soma::function([&](const std::vector<soma::Tensor>& in) {
//     soma::GradientTape tape;
//     auto loss = soma::mean(soma::square(soma::matmul(in[0], w) - in[1]));
//     return std::vector<soma::Tensor>{loss, tape.gradient(loss, w)};
//   });
//   auto out = step({x, y});   // traces; the next call with these shapes runs the graph
//
// What f does besides calling ops happens once, at tracing: Python-style side effects (printing,
// assigning to variables, random draws through soma::random_*) are not repeated. Variables f
// reads are read live on every call. Ops whose inputs are all constants run at tracing time.
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "soma/graph/graph.hpp"

namespace soma {

class Function {
 public:
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  explicit Function(Fn f, SessionConfig config = {});

  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);
  // f({x, y}) picks this one (a braced list prefers initializer_list), f(x) the next.
  std::vector<Tensor> operator()(std::initializer_list<Tensor> inputs) {
    return (*this)(std::vector<Tensor>(inputs));
  }
  Tensor operator()(const Tensor& x) { return (*this)(std::vector<Tensor>{x})[0]; }

  std::size_t num_traces() const;  // signatures traced so far
  // The graph traced for these inputs' signature (traces it if needed).
  Graph graph_for(const std::vector<Tensor>& inputs);
  const SessionStats& last_stats() const;  // of the session that ran the last call

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Wraps f: std::vector<Tensor>(const std::vector<Tensor>&), or Tensor(const Tensor&), or
// Tensor(const std::vector<Tensor>&), or std::vector<Tensor>(const Tensor&).
template <class F>
Function function(F f, SessionConfig config = {}) {
  using V = std::vector<Tensor>;
  if constexpr (std::is_invocable_v<F&, const V&>) {
    using R = std::invoke_result_t<F&, const V&>;
    if constexpr (std::is_convertible_v<R, Tensor>)
      return Function([f](const V& in) mutable { return V{Tensor(f(in))}; }, config);
    else
      return Function([f](const V& in) mutable { return V(f(in)); }, config);
  } else {
    using R = std::invoke_result_t<F&, const Tensor&>;
    if constexpr (std::is_convertible_v<R, Tensor>)
      return Function([f](const V& in) mutable { return V{Tensor(f(in.at(0)))}; }, config);
    else
      return Function([f](const V& in) mutable { return V(f(in.at(0))); }, config);
  }
}

}  // namespace soma
