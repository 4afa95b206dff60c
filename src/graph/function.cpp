// soma::function: trace once per input signature, then run the graph.
#include "soma/graph/function.hpp"

#include "graph/internal.hpp"

namespace soma {

using namespace graph_detail;

namespace {
struct Trace {
  Graph graph;
  std::vector<Tensor> placeholders;
  std::vector<Tensor> fetches;
  std::vector<int> slot;  // output position -> fetch index, -1: undefined output
  std::unique_ptr<Session> session;
};
}  // namespace

struct Function::Impl {
  Fn f;
  SessionConfig config;
  std::map<std::string, std::unique_ptr<Trace>> traces;
  Trace* last = nullptr;

  Trace& trace_for(const std::vector<Tensor>& inputs) {
    std::string key;
    for (const auto& t : inputs) {
      if (!t.defined()) fail("function", "an input is an undefined Tensor");
      if (is_symbolic(t)) fail("function", "inputs must be concrete tensors");
      key += std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + t.device().str() + ";";
    }
    auto it = traces.find(key);
    if (it != traces.end()) return *it->second;
    auto tr = std::make_unique<Trace>();
    std::vector<Tensor> outs;
    {
      GraphScope scope(tr->graph);
      for (std::size_t i = 0; i < inputs.size(); ++i)
        tr->placeholders.push_back(tr->graph.placeholder(inputs[i].dtype(), inputs[i].shape(),
                                                         "input_" + std::to_string(i),
                                                         inputs[i].device()));
      outs = f(tr->placeholders);
    }
    for (const auto& o : outs) {
      if (!o.defined()) {
        tr->slot.push_back(-1);
        continue;
      }
      tr->slot.push_back(int(tr->fetches.size()));
      if (tr->graph.owns(o)) tr->fetches.push_back(o);
      else if (is_symbolic(o)) fail("function", "an output belongs to another graph");
      else {  // a concrete output (a constant or a variable's value): captured, read live
        Endpoint e = endpoint_in(tr->graph.data(), o);
        tr->fetches.push_back(tr->graph.node(e.node).output(e.index));
      }
    }
    tr->session = std::make_unique<Session>(tr->graph, config);
    return *traces.emplace(key, std::move(tr)).first->second;
  }
};

Function::Function(Fn f, SessionConfig config) : impl_(std::make_shared<Impl>()) {
  if (!f) fail("function", "the function is empty");
  impl_->f = std::move(f);
  impl_->config = config;
}

std::vector<Tensor> Function::operator()(const std::vector<Tensor>& inputs) {
  Trace& tr = impl_->trace_for(inputs);
  impl_->last = &tr;
  Feeds feeds;
  for (std::size_t i = 0; i < inputs.size(); ++i) feeds.emplace_back(tr.placeholders[i], inputs[i]);
  std::vector<Tensor> res = tr.fetches.empty() ? std::vector<Tensor>{}
                                               : tr.session->run(tr.fetches, feeds);
  std::vector<Tensor> out;
  for (int s : tr.slot) out.push_back(s < 0 ? Tensor() : res[std::size_t(s)]);
  return out;
}

std::size_t Function::num_traces() const { return impl_->traces.size(); }
Graph Function::graph_for(const std::vector<Tensor>& inputs) { return impl_->trace_for(inputs).graph; }
const SessionStats& Function::last_stats() const {
  if (!impl_->last) fail("function", "not called yet");
  return impl_->last->session->stats();
}

}  // namespace soma
