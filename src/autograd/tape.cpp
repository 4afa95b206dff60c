#include <algorithm>
#include <unordered_map>

#include "internal/tensor_vector_pool.hpp"
#include "ops/dispatch_hooks.hpp"
#include "soma/autograd.hpp"
#include "soma/ops.hpp"
#include "soma/variable.hpp"

namespace soma {

namespace {
[[gnu::tls_model("initial-exec")]] thread_local std::vector<GradientTape*> t_tapes;
[[gnu::tls_model("initial-exec")]] thread_local bool t_no_grad = false;

// Tape nodes' input/output copies come from the per-thread tensor-vector pool
// (internal/tensor_vector_pool.hpp): a recorded op then allocates nothing for them, and a tape's
// end frees no small blocks one by one (glibc's consolidation of thousands of them was ~10% of
// recording a tiny op; issue 5).
std::vector<Tensor> copy_into_spare(const std::vector<Tensor>& from) {
  std::vector<Tensor> v = detail::take_tensor_vector();
  v.assign(from.begin(), from.end());
  return v;
}

// Hands every node's vectors back (a template so that it needs no name of the private Node).
template <class Nodes>
void release_nodes(Nodes& nodes) {
  for (auto& n : nodes) {
    detail::give_back_tensor_vector(std::move(n.inputs));
    detail::give_back_tensor_vector(std::move(n.outputs));
  }
  nodes.clear();
}

// A finished tape's node list (emptied) and watched-id table (zeroed, its size kept) go back to
// this thread and the next tape starts with them: a training step's tape then grows nothing
// (growing a thousand-node list page-faulted fresh memory in on every tape, ~10% of recording a
// tiny op). Templates, as release_nodes, and bounded: a huge tape's memory is freed.
inline constexpr std::size_t kMaxSpareNodes = std::size_t(1) << 14;
// Set once this thread's spares are destroyed (a tape outliving them frees its memory).
constinit thread_local bool t_spares_gone = false;
template <class V>
V* spare() {
  struct Holder {
    V v;
    ~Holder() { t_spares_gone = true; }
  };
  if (t_spares_gone) return nullptr;
  static thread_local Holder h;
  return &h.v;
}
template <class V>
void take_spare(V& into) {
  V* s = spare<V>();
  if (s && s->capacity() > into.capacity()) into.swap(*s);
}
template <class V>
void give_spare(V& from, std::size_t max_capacity) {
  V* s = spare<V>();
  if (!s) return;
  if (from.capacity() > s->capacity() && from.capacity() <= max_capacity) s->swap(from);
}
}  // namespace

namespace {
// Dispatch's kTapeRecord bit (ops/dispatch_hooks.hpp) follows t_tapes and t_no_grad: call_op
// hands an op to record_on_tapes only while this thread has a tape and recording is not off.
void sync_dispatch_bit() {
  dispatch::set_active(dispatch::kTapeRecord, !t_tapes.empty() && !t_no_grad);
}
// The tape's hook into op dispatch, registered when libsoma loads.
void record_on_tapes(const OpDef& def, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor>& outputs, const Attrs& attrs) {
  for (GradientTape* tape : t_tapes) tape->record(def, inputs, outputs, attrs);
}
[[maybe_unused]] const bool g_hook_registered = (dispatch::set_observe(&record_on_tapes), true);
}  // namespace

const std::vector<GradientTape*>& active_tapes() { return t_tapes; }
bool grad_recording_disabled() { return t_no_grad; }

NoGradScope::NoGradScope() : was_(t_no_grad) {
  t_no_grad = true;
  sync_dispatch_bit();
}
NoGradScope::~NoGradScope() {
  t_no_grad = was_;
  sync_dispatch_bit();
}

GradientTape::GradientTape(bool persistent) : GradientTape(TapeOptions{.persistent = persistent}) {}

GradientTape::GradientTape(TapeOptions options) : options_(options) {
  take_spare(nodes_);
  t_tapes.push_back(this);
  sync_dispatch_bit();
}

GradientTape::~GradientTape() {
  auto it = std::find(t_tapes.begin(), t_tapes.end(), this);
  if (it != t_tapes.end()) t_tapes.erase(it);
  sync_dispatch_bit();
  release_nodes(nodes_);
  give_spare(nodes_, kMaxSpareNodes);
  // The watched-id table is sized to what was recorded: the next tape starts with it, zeroed.
  if (!watched_.empty() && watched_.size() <= 2 * kMaxSpareNodes) {
    std::fill(watched_.begin(), watched_.end(), 0);
    give_spare(watched_, 2 * kMaxSpareNodes);
  }
}

void GradientTape::reset() {
  release_nodes(nodes_);
  watched_.clear();
  watched_count_ = 0;
  watched_zero_ = false;
  used_ = false;
}

void GradientTape::watch(const Tensor& t) {
  if (!t.defined()) fail("GradientTape.watch", "cannot watch an undefined Tensor");
  watch_id(t.id());
}

namespace {
std::size_t id_slot(std::uint64_t id, std::size_t mask) {
  return std::size_t((id * 0x9E3779B97F4A7C15ull) >> 32) & mask;  // ids are sequential: mix them
}
}  // namespace

void GradientTape::watch_id(std::uint64_t id) {
  if (id == 0) {
    watched_zero_ = true;
    return;
  }
  if (watched_.empty()) take_spare(watched_);  // zeroed by the tape that gave it back
  // Keep the table at most half full.
  if (2 * (watched_count_ + 1) > watched_.size()) {
    std::vector<std::uint64_t> bigger(std::max<std::size_t>(64, 2 * watched_.size()), 0);
    const std::size_t mask = bigger.size() - 1;
    for (std::uint64_t o : watched_) {
      if (o == 0) continue;
      std::size_t i = id_slot(o, mask);
      while (bigger[i] != 0) i = (i + 1) & mask;
      bigger[i] = o;
    }
    watched_.swap(bigger);
  }
  const std::size_t mask = watched_.size() - 1;
  for (std::size_t i = id_slot(id, mask);; i = (i + 1) & mask) {
    if (watched_[i] == id) return;
    if (watched_[i] == 0) {
      watched_[i] = id;
      ++watched_count_;
      return;
    }
  }
}

bool GradientTape::watched_id(std::uint64_t id) const {
  if (id == 0) return watched_zero_;
  if (watched_.empty()) return false;
  const std::size_t mask = watched_.size() - 1;
  for (std::size_t i = id_slot(id, mask);; i = (i + 1) & mask) {
    if (watched_[i] == id) return true;
    if (watched_[i] == 0) return false;
  }
}

void GradientTape::watch(const std::vector<Tensor>& ts) {
  for (const auto& t : ts) watch(t);
}

bool GradientTape::is_watched(const Tensor& t) const {
  if (!is_floating(t.dtype())) return false;
  if (options_.watch_accessed_variables && t.is_trainable_variable()) return true;
  return watched_id(t.id());
}

void GradientTape::record(const OpDef& def, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& outputs, const Attrs& attrs) {
  if (!recording_) return;
  bool any = std::any_of(inputs.begin(), inputs.end(), [&](const Tensor& t) { return is_watched(t); });
  if (!any) return;
  // Filled in place (no temporary Node to move); most ops have no attributes to copy.
  Node& node = nodes_.emplace_back();
  node.def = &def;
  node.inputs = copy_into_spare(inputs);
  node.outputs = copy_into_spare(outputs);
  if (!attrs.items().empty()) node.attrs = attrs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::uint64_t v = inputs[i].storage()->version.load();
    if (i < Node::kInlineVersions) node.versions[i] = v;
    else node.more_versions.push_back(v);
  }
  for (const auto& o : outputs)
    if (is_floating(o.dtype())) watch_id(o.id());
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           UnconnectedGradients unconnected,
                                           const Tensor& output_gradient) {
  const char* op = "GradientTape.gradient";
  if (!target.defined()) fail(op, "the target is an undefined Tensor");
  if (used_ && !options_.persistent)
    fail(op, "this non-persistent tape was already used to compute gradients; a tape can be asked "
             "more than once only when created persistent: GradientTape(/*persistent=*/true)");
  used_ = true;
  if (!is_floating(target.dtype()))
    fail(op, "the target has dtype ", dtype_name(target.dtype()),
         "; gradients need a floating target (f32, f64, f16 or bf16)");
  if (output_gradient.defined() && output_gradient.shape() != target.shape())
    fail(op, "output_gradient has shape ", shape_str(output_gradient.shape()),
         " but the target has shape ", shape_str(target.shape()));

  // The tape does not record its own backward pass; outer tapes do (higher derivatives).
  StopRecording pause(*this);

  // Forward reachability from the sources: only nodes on a path source -> target matter.
  std::unordered_map<std::uint64_t, bool> relevant;
  for (const auto& s : sources) {
    if (!s.defined()) fail(op, "a source is an undefined Tensor");
    if (is_watched(s)) relevant[s.id()] = true;  // an unwatched source gets no gradient
  }
  std::vector<bool> node_relevant(nodes_.size(), false);
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    bool any = std::any_of(node.inputs.begin(), node.inputs.end(),
                           [&](const Tensor& t) { return relevant.count(t.id()) != 0; });
    if (!any) continue;
    node_relevant[n] = true;
    for (const auto& o : node.outputs) relevant[o.id()] = true;
  }

  std::unordered_map<std::uint64_t, Tensor> grads;
  grads[target.id()] = output_gradient.defined() ? output_gradient : ones_like(target);

  // For the ready hook: a source's gradient is final once the walk has replayed the earliest
  // node that takes it as input (only such nodes add to it).
  std::vector<std::vector<std::size_t>> ready_after;  // node -> sources final after it
  std::vector<bool> reported;
  auto final_gradient = [&](std::size_t i) {
    auto it = grads.find(sources[i].id());
    if (it != grads.end()) return it->second;
    return unconnected == UnconnectedGradients::Zero ? zeros_like(sources[i]) : Tensor();
  };
  if (ready_hook_) {
    ready_after.resize(nodes_.size());
    reported.assign(sources.size(), false);
    std::unordered_map<std::uint64_t, std::vector<std::size_t>> waiting;
    for (std::size_t i = 0; i < sources.size(); ++i)
      if (relevant.count(sources[i].id())) waiting[sources[i].id()].push_back(i);
    for (std::size_t n = 0; n < nodes_.size() && !waiting.empty(); ++n) {
      if (!node_relevant[n]) continue;
      for (const auto& in : nodes_[n].inputs) {
        auto it = waiting.find(in.id());
        if (it == waiting.end()) continue;
        ready_after[n].insert(ready_after[n].end(), it->second.begin(), it->second.end());
        waiting.erase(it);
      }
    }
  }
  auto report_ready = [&](std::size_t n) {
    if (!ready_hook_) return;
    for (std::size_t i : ready_after[n]) {
      reported[i] = true;
      ready_hook_(i, final_gradient(i));
    }
  };

  for (std::size_t n = nodes_.size(); n-- > 0;) {
    if (!node_relevant[n]) continue;
    replay(n, grads, relevant);
    report_ready(n);
  }
  if (ready_hook_)
    for (std::size_t i = 0; i < sources.size(); ++i)
      if (!reported[i]) ready_hook_(i, final_gradient(i));

  std::vector<Tensor> out;
  out.reserve(sources.size());
  for (std::size_t i = 0; i < sources.size(); ++i) out.push_back(final_gradient(i));
  return out;
}

// Replays node n's gradient definition: adds its input gradients into `grads`.
void GradientTape::replay(std::size_t n, std::unordered_map<std::uint64_t, Tensor>& grads,
                          const std::unordered_map<std::uint64_t, bool>& relevant) {
  const char* op = "GradientTape.gradient";
  {
    const Node& node = nodes_[n];
    std::vector<Tensor> gouts(node.outputs.size());
    bool any = false;
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      auto it = grads.find(node.outputs[i].id());
      if (it != grads.end()) {
        gouts[i] = it->second;
        any = true;
      }
    }
    if (!any) return;
    for (std::size_t i = 0; i < gouts.size(); ++i)
      if (!gouts[i].defined()) gouts[i] = zeros_like(node.outputs[i]);
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const Tensor& in = node.inputs[i];
      if (in.storage()->version.load() != node.input_version(i))
        fail(op, "input ", i, " of '", node.def->name, "' (shape ", shape_str(in.shape()),
             in.name().empty() ? std::string() : ", variable '" + in.name() + "'",
             ") was modified in place after it was recorded; compute the gradient before "
             "assigning to it");
    }
    // Only inputs reachable from a source get their gradient kept; tell the gradient definition
    // so that it can skip the others (the first layer's dx = g W^T, a conv's backprop-input).
    std::uint64_t needs = 0;
    for (std::size_t i = 0; i < node.inputs.size() && i < 64; ++i) {
      const Tensor& in = node.inputs[i];
      if (is_floating(in.dtype()) && relevant.count(in.id())) needs |= std::uint64_t(1) << i;
    }
    std::vector<Tensor> gins =
        node.def->grad(GradContext{node.inputs, node.outputs, gouts, node.attrs, needs});
    for (std::size_t i = 0; i < node.inputs.size() && i < gins.size(); ++i) {
      const Tensor& in = node.inputs[i];
      if (!gins[i].defined() || !relevant.count(in.id()) || !is_floating(in.dtype())) continue;
      auto it = grads.find(in.id());
      if (it == grads.end()) grads.emplace(in.id(), gins[i]);
      else it->second = add(it->second, gins[i]);
    }
  }
}

std::vector<Tensor> GradientTape::gradient_of_variables(const Tensor& target,
                                                        const std::vector<Variable>& sources,
                                                        UnconnectedGradients unconnected) {
  std::vector<Tensor> ts;
  ts.reserve(sources.size());
  for (const auto& v : sources) ts.push_back(v.value());
  return gradient(target, ts, unconnected);
}

}  // namespace soma
