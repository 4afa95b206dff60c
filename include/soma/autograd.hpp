#pragma once
// Eager reverse-mode autodiff: a GradientTape records the ops that touch watched tensors (and
// trainable Variables) and replays their gradient definitions backwards. Gradient definitions are
// made of ops themselves, so an outer tape records the inner tape's backward pass: nested tapes
// give higher derivatives.
#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "soma/op.hpp"
#include "soma/tensor.hpp"

namespace soma {

class Variable;

enum class UnconnectedGradients { None, Zero };

struct TapeOptions {
  bool persistent = false;
  bool watch_accessed_variables = true;
};

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false);
  explicit GradientTape(TapeOptions options);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& t);
  void watch(const std::vector<Tensor>& ts);

  // d target / d source. A source the target does not depend on gets an undefined Tensor
  // (or zeros with UnconnectedGradients::Zero). output_gradient seeds the backward pass
  // (default: ones of the target's shape).
  // One source, a Tensor or a Variable (a template so that a braced list, even `{w}` of one
  // element, goes to the list overloads below and returns a vector).
  template <class S>
    requires(std::derived_from<S, Tensor> || std::same_as<S, Variable>)
  Tensor gradient(const Tensor& target, const S& source,
                  UnconnectedGradients unconnected = UnconnectedGradients::None,
                  const Tensor& output_gradient = Tensor()) {
    const Tensor& s = source;  // a Variable is its value
    return gradient(target, std::vector<Tensor>{s}, unconnected, output_gradient)[0];
  }
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               UnconnectedGradients unconnected = UnconnectedGradients::None,
                               const Tensor& output_gradient = Tensor());
  // A std::vector<Variable> (model.trainable_variables()). A braced list, {w, b} or {x, w},
  // goes to the std::vector<Tensor> overload above (a Variable is its value there), so that it
  // is not ambiguous; the gradients come back in the list's order.
  template <class V>
    requires std::same_as<V, Variable>
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<V>& sources,
                               UnconnectedGradients unconnected = UnconnectedGradients::None) {
    return gradient_of_variables(target, sources, unconnected);
  }

  // Stop recording inside the returned scope's lifetime (like TF's tape.stop_recording()).
  class StopRecording {
   public:
    explicit StopRecording(GradientTape& t) : tape_(t), was_(t.recording_) { t.recording_ = false; }
    ~StopRecording() { tape_.recording_ = was_; }
   private:
    GradientTape& tape_;
    bool was_;
  };
  StopRecording stop_recording() { return StopRecording(*this); }

  // Called inside gradient() for each source as soon as its gradient is final (no op left to
  // replay uses the source), with the source's position and gradient (undefined, or zeros with
  // UnconnectedGradients::Zero, when it has none): once per source and call, in the order the
  // backward pass finishes them. Data-parallel training starts all-reducing early gradients here
  // while the rest of the backward pass runs (dist/data_parallel.hpp). Empty: no hook.
  using GradientReadyHook = std::function<void(std::size_t source_index, const Tensor& gradient)>;
  void set_gradient_ready_hook(GradientReadyHook hook) { ready_hook_ = std::move(hook); }

  bool persistent() const { return options_.persistent; }
  std::size_t num_recorded() const { return nodes_.size(); }
  void reset();

  // Called for every op with a gradient run while this tape is active (call_op reaches it
  // through the observe hook of src/ops/dispatch_hooks.hpp, which src/autograd/tape.cpp sets).
  void record(const OpDef& def, const std::vector<Tensor>& inputs,
              const std::vector<Tensor>& outputs, const Attrs& attrs);

 private:
  struct Node {
    const OpDef* def;
    std::vector<Tensor> inputs;
    std::vector<Tensor> outputs;
    Attrs attrs;
    // Storage versions of the inputs when recorded: inline for up to 4 inputs (no allocation;
    // issue 5), the rest in `more_versions`.
    static constexpr std::size_t kInlineVersions = 4;
    std::uint64_t versions[kInlineVersions] = {};
    std::vector<std::uint64_t> more_versions;
    std::uint64_t input_version(std::size_t i) const {
      return i < kInlineVersions ? versions[i] : more_versions[i - kInlineVersions];
    }
  };
  std::vector<Tensor> gradient_of_variables(const Tensor& target,
                                            const std::vector<Variable>& sources,
                                            UnconnectedGradients unconnected);
  bool is_watched(const Tensor& t) const;
  // watched_: an open-addressing set of tensor ids (linear probing, 0 marks a free slot, id 0
  // kept in watched_zero_), so that recording an op's output allocates only when it grows.
  void watch_id(std::uint64_t id);
  bool watched_id(std::uint64_t id) const;
  void replay(std::size_t n, std::unordered_map<std::uint64_t, Tensor>& grads,
              const std::unordered_map<std::uint64_t, bool>& relevant);

  TapeOptions options_;
  bool recording_ = true;
  bool used_ = false;
  std::vector<std::uint64_t> watched_;  // watched ids and ids computed from them (see watch_id)
  std::size_t watched_count_ = 0;
  bool watched_zero_ = false;
  std::vector<Node> nodes_;
  GradientReadyHook ready_hook_;
};

// The tapes currently active on this thread, innermost last.
const std::vector<GradientTape*>& active_tapes();

// While alive, no tape on this thread records anything.
class NoGradScope {
 public:
  NoGradScope();
  ~NoGradScope();
  NoGradScope(const NoGradScope&) = delete;
  NoGradScope& operator=(const NoGradScope&) = delete;
 private:
  bool was_;
};
bool grad_recording_disabled();

}  // namespace soma
