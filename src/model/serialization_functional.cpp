// Functional models in model files: the layer graph as Keras' "Functional" config (each layer
// once, with the calls made of it and which outputs each call consumed), and the model rebuilt
// from it. docs/model-format.md describes the layout.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/serialization_internal.hpp"
#include "model/topo_order.hpp"
#include "soma/error.hpp"
#include "soma/model/functional.hpp"

namespace soma::serialization::internal {

namespace {

using NodePtr = std::shared_ptr<nn::detail::SymbolicNode>;

// A node's layer name now (the layer may have been renamed after it was called).
std::string producer_name(const nn::detail::SymbolicNode& n) {
  return n.layer ? n.layer->name() : n.name;
}

DType dtype_named(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == dtype_name(DType(i))) return DType(i);
  fail("load_model", "unknown dtype '", s, "'");
}

}  // namespace

json functional_config(const nn::Model& model) {
  const auto& ins = model.inputs();
  const auto& outs = model.outputs();
  std::vector<NodePtr> order;
  std::unordered_set<const nn::detail::SymbolicNode*> seen;
  for (auto& o : outs) model::detail::topo_visit(o.node(), seen, order);

  // Files name layers (and the weights' owners) by name, so names must be unique here.
  std::set<std::string> names;
  auto claim = [&](const std::string& n) {
    if (!names.insert(n).second)
      fail("save", "functional model '", model.name(), "' has two layers (or inputs) named '", n,
           "'; the graph refers to layers by name, so give them distinct names with set_name()");
  };

  std::unordered_map<const nn::detail::SymbolicNode*, int> node_index;  // which call of its layer
  auto ref = [&](const nn::SymbolicTensor& t) {
    return json::array({producer_name(*t.node()), node_index.at(t.node().get()), t.index()});
  };

  json layers = json::array();
  for (auto& in : ins) {
    const auto& n = *in.node();
    claim(n.name);
    node_index[in.node().get()] = 0;
    json shape = std::vector<std::int64_t>(n.shapes.at(0).begin(), n.shapes.at(0).end());
    layers.push_back(json{{"class_name", "InputLayer"},
                          {"name", n.name},
                          {"config", {{"batch_shape", shape}, {"dtype", dtype_name(n.dtypes.at(0))}, {"name", n.name}}},
                          {"inbound_nodes", json::array()}});
  }
  std::unordered_map<const nn::Module*, std::size_t> entry_of;  // layer -> index in `layers`
  std::unordered_map<const nn::Module*, int> calls;
  for (auto& n : order) {
    if (!n->layer) continue;  // an Input: Model's constructor checked it is among the inputs
    const nn::Module* layer = n->layer.get();
    auto it = entry_of.find(layer);
    if (it == entry_of.end()) {
      claim(layer->name());
      json e = encode_layer(*layer);
      e["name"] = layer->name();
      e["inbound_nodes"] = json::array();
      it = entry_of.emplace(layer, layers.size()).first;
      layers.push_back(std::move(e));
    }
    node_index[n.get()] = calls[layer]++;
    json args = json::array();
    for (auto& s : n->inputs) args.push_back(ref(s));
    layers[it->second]["inbound_nodes"].push_back(std::move(args));
  }
  json input_layers = json::array(), output_layers = json::array();
  for (auto& in : ins) input_layers.push_back(ref(in));
  for (auto& o : outs) output_layers.push_back(ref(o));
  return json{{"name", model.name()},
              {"layers", layers},
              {"input_layers", input_layers},
              {"output_layers", output_layers}};
}

std::shared_ptr<nn::Model> functional_from(const json& cfg) {
  const std::string model_name = cfg.value("name", std::string("functional"));
  const std::string who = "load_model";
  auto bad = [&](const auto&... what) -> void { fail(who, "functional model '", model_name, "': ", what...); };

  struct Pending {
    std::string name;
    nn::ModuleRef layer;
    const json* nodes;
    std::size_t next = 0;
    bool frozen = false;
  };
  std::vector<Pending> pending;
  // Outputs of every call made so far, by layer name; calls[name] = the call count to expect.
  std::map<std::string, std::vector<std::vector<nn::SymbolicTensor>>> produced;
  std::map<std::string, std::size_t> expected_calls;

  const json& layer_list = cfg.at("layers");
  if (layer_list.size() > limits::kMaxLayersFromFile)
    bad("the config lists ", layer_list.size(), " layers, more than the limit of ", limits::kMaxLayersFromFile);
  std::size_t total_calls = 0;
  for (auto& e : layer_list) {
    const std::string cls = e.at("class_name").get<std::string>();
    const std::string name =
        e.contains("name") ? e.at("name").get<std::string>() : e.at("config").at("name").get<std::string>();
    if (expected_calls.count(name)) bad("two layers are named '", name, "'");
    if (cls == "InputLayer") {
      const json& c = e.at("config");
      Shape full = shape_from_json(c.at("batch_shape"));
      if (full.empty()) bad("input '", name, "' has an empty batch_shape (it must include the batch axis)");
      limits::check_input_shape(Shape(full.begin() + 1, full.end()),
                                "load_model: functional model '" + model_name + "': input '" + name + "'");
      std::optional<std::int64_t> batch;
      if (full[0] > 0) batch = full[0];
      auto t = nn::Input(Shape(full.begin() + 1, full.end()),
                         {.dtype = dtype_named(c.value("dtype", std::string("f32"))), .name = name, .batch_size = batch});
      produced[name].push_back({t});
      expected_calls[name] = 1;
      continue;
    }
    nn::ModuleRef layer = decode_layer(e);
    layer->set_name(name);
    const json& nodes = e.at("inbound_nodes");
    total_calls += nodes.size();
    if (total_calls > limits::kMaxLayersFromFile)
      bad("the config makes more than ", limits::kMaxLayersFromFile, " layer calls (the limit)");
    expected_calls[name] = nodes.size();
    pending.push_back({name, layer, &nodes, 0, !e.at("config").value("trainable", true)});
  }

  // A reference [layer, call, output]: the tensor if that call was rebuilt already, nullopt if
  // it is still to come; an error if it can never exist.
  auto resolve = [&](const json& r) -> std::optional<nn::SymbolicTensor> {
    if (!r.is_array() || r.size() < 3) bad("malformed tensor reference ", limits::json_excerpt(r));
    const std::string layer = r.at(0).get<std::string>();
    const auto call = int_of(r.at(1));
    const auto index = int_of(r.at(2));
    auto want = expected_calls.find(layer);
    if (want == expected_calls.end()) bad("a reference names layer '", layer, "', which is not in the model");
    if (call < 0 || std::size_t(call) >= want->second)
      bad("a reference asks for call ", call, " of layer '", layer, "', which is called ", want->second, " time(s)");
    auto& done = produced[layer];
    if (std::size_t(call) >= done.size()) return std::nullopt;
    const auto& outs = done[std::size_t(call)];
    if (index < 0 || std::size_t(index) >= outs.size())
      bad("a reference asks for output ", index, " of layer '", layer, "', which has ", outs.size(), " output(s)");
    return outs[std::size_t(index)];
  };

  // Replays the calls: each layer's calls in their order, each as soon as its inputs exist. A call
  // whose input is not computed yet waits for that one call and is woken when it is made, so the
  // replay is linear in the number of references whatever order the file lists the layers in.
  std::map<std::pair<std::string, std::size_t>, std::vector<std::size_t>> waiters;
  std::vector<std::size_t> queue(pending.size());
  for (std::size_t i = 0; i < pending.size(); ++i) queue[i] = i;
  for (std::size_t q = 0; q < queue.size(); ++q) {
    Pending& p = pending[queue[q]];
    while (p.next < p.nodes->size()) {
      std::vector<nn::SymbolicTensor> args;
      bool ready = true;
      for (auto& r : p.nodes->at(p.next)) {
        auto t = resolve(r);
        if (!t) {  // resolve checked r: [layer, call, output] with a call still to come
          waiters[{r.at(0).get<std::string>(), std::size_t(int_of(r.at(1)))}].push_back(queue[q]);
          ready = false;
          break;
        }
        args.push_back(*t);
      }
      if (!ready) break;
      if (args.empty()) bad("call ", p.next, " of layer '", p.name, "' has no inputs");
      produced[p.name].push_back(nn::call(p.layer, args));
      auto w = waiters.find({p.name, p.next});
      if (w != waiters.end()) {
        queue.insert(queue.end(), w->second.begin(), w->second.end());
        waiters.erase(w);
      }
      ++p.next;
    }
  }
  for (auto& p : pending)
    if (p.next < p.nodes->size())
      bad("call ", p.next, " of layer '", p.name, "' waits for an input that is never computed (a cycle in the graph)");

  auto tensors = [&](const char* key) {
    std::vector<nn::SymbolicTensor> out;
    for (auto& r : cfg.at(key)) {
      auto t = resolve(r);
      if (!t) bad(key, " refers to ", limits::json_excerpt(r), ", which is never computed");
      out.push_back(*t);
    }
    return out;
  };
  auto model = std::make_shared<nn::Model>(tensors("input_layers"), tensors("output_layers"));
  model->set_name(model_name);
  for (auto& p : pending)
    if (p.frozen) p.layer->set_trainable(false);
  return model;
}

}  // namespace soma::serialization::internal
