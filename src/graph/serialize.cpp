// Graph files (the format is described in docs/graph.md) and Graphviz output.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "internal/atomic_file.hpp"
#include "graph/internal.hpp"
#include "soma/ops.hpp"

namespace soma {

using namespace graph_detail;

namespace {

std::string dot_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string dot_of(const Graph::Data& g, const std::vector<int>& group,
                   const std::vector<char>* live) {
  std::ostringstream os;
  os << "digraph soma {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n";
  std::map<int, std::vector<int>> groups;
  for (std::size_t id = 0; id < g.nodes.size(); ++id) {
    if (live && !(*live)[id]) continue;
    const GraphNode& n = g.nodes[id];
    std::string label = n.name + "\\n" + n.op_name();
    for (const auto& o : n.outputs) label += "\\n" + shape_str(o.shape) + " " + dtype_name(o.dtype);
    const char* style = n.kind == NodeKind::Placeholder ? ", style=filled, fillcolor=lightblue"
                        : n.kind == NodeKind::Variable  ? ", style=filled, fillcolor=lightyellow"
                        : n.kind == NodeKind::Constant  ? ", style=filled, fillcolor=gray90"
                        : n.kind == NodeKind::Update    ? ", style=filled, fillcolor=salmon"
                                                        : "";
    std::string decl = "n" + std::to_string(id) + " [label=\"" + dot_escape(label) + "\"" + style + "];";
    if (group[id] >= 0) groups[group[id]].push_back(int(id));
    else os << "  " << decl << "\n";
  }
  for (auto& [gi, ms] : groups) {
    os << "  subgraph cluster_fused_" << gi << " {\n    label=\"fused elementwise chain " << gi
       << "\";\n    style=dashed;\n";
    for (int id : ms) {
      const GraphNode& n = g.nodes[std::size_t(id)];
      std::string label = n.name + "\\n" + n.op_name();
      for (const auto& o : n.outputs) label += "\\n" + shape_str(o.shape) + " " + dtype_name(o.dtype);
      os << "    n" << id << " [label=\"" << dot_escape(label) << "\"];\n";
    }
    os << "  }\n";
  }
  for (std::size_t id = 0; id < g.nodes.size(); ++id) {
    if (live && !(*live)[id]) continue;
    for (const auto& e : g.nodes[id].inputs)
      os << "  n" << e.node << " -> n" << id << (e.index ? " [label=\"" + std::to_string(e.index) + "\"]" : "")
         << ";\n";
  }
  os << "}\n";
  return os.str();
}

std::vector<int> static_groups(const Graph::Data& g) {
  std::vector<char> live(g.nodes.size(), 1), fetched(g.nodes.size(), 0);
  std::vector<int> consumers(g.nodes.size(), 0);
  for (const auto& n : g.nodes)
    for (const auto& e : n.inputs) ++consumers[std::size_t(e.node)];
  // A node nobody reads is a likely fetch: it ends a chain.
  for (std::size_t i = 0; i < g.nodes.size(); ++i) fetched[i] = consumers[i] == 0;
  return find_fusion_groups(g, live, consumers, fetched);
}

const char kHex[] = "0123456789abcdef";

void write_value(std::ostream& os, const Tensor& t) {
  Tensor c = t.contiguous();
  os << "value " << dtype_name(c.dtype()) << " " << c.rank();
  for (auto d : c.shape()) os << " " << d;
  os << " ";
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  std::size_t nb = std::size_t(c.numel()) * dtype_size(c.dtype());
  std::string hex(nb * 2, '0');
  for (std::size_t i = 0; i < nb; ++i) {
    hex[2 * i] = kHex[p[i] >> 4];
    hex[2 * i + 1] = kHex[p[i] & 15];
  }
  os << hex << "\n";
}

DType parse_dtype(const std::string& s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (s == dtype_name(DType(i))) return DType(i);
  fail("Graph.load", "unknown dtype '", s, "'");
}

// The first line of a graph file.
constexpr const char* kGraphHeader = "soma-graph 1";

// A flag in a graph file: "1" is true (attributes "b:1", "trainable 1"), anything else false.
bool read_flag(const std::string& s) { return s == "1"; }

AttrValue parse_attr(const std::string& enc) {
  if (enc.size() < 2 || enc[1] != ':') fail("Graph.load", "bad attribute '", enc, "'");
  std::string v = enc.substr(2);
  switch (enc[0]) {
    case 'i': return std::int64_t(std::stoll(v));
    case 'f': return std::strtod(v.c_str(), nullptr);
    case 'b': return read_flag(v);
    case 'd': return parse_dtype(v);
    case 's': return v;
    case 'l': {
      std::vector<std::int64_t> xs;
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ','))
        if (!item.empty()) xs.push_back(std::stoll(item));
      return xs;
    }
  }
  fail("Graph.load", "bad attribute type in '", enc, "'");
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  fail("Graph.load", "bad hex digit in a value");
}

// ---- reading a graph file: one reader per entry of a node ----------------------------------
struct LoadState {
  const std::shared_ptr<Graph::Data>& d;
  GraphNode cur{};
  bool in_node = false, trainable = true;
  int lineno = 1;
};

Shape read_shape(std::istringstream& ls, std::string& dtype) {
  std::size_t rank;
  ls >> dtype >> rank;
  Shape s(rank);
  for (auto& x : s) ls >> x;
  return s;
}

void read_node(LoadState& st, const std::string& rest) {
  st.cur = GraphNode{};
  st.trainable = true;
  st.in_node = true;
  int id = std::stoi(rest);
  if (id != int(st.d->nodes.size()))
    fail("Graph.load", "line ", st.lineno, ": node ", id, " out of order");
}

void read_kind(LoadState& st, const std::string& rest) {
  for (int k = 0; k <= int(NodeKind::Update); ++k)
    if (rest == node_kind_name(NodeKind(k))) {
      st.cur.kind = NodeKind(k);
      return;
    }
  fail("Graph.load", "line ", st.lineno, ": unknown node kind '", rest, "'");
}

void read_inputs(LoadState& st, const std::string& rest) {
  std::istringstream ls(rest);
  std::string item;
  while (ls >> item) {
    auto c = item.find(':');
    Endpoint e{std::stoi(item.substr(0, c)), std::stoi(item.substr(c + 1))};
    if (e.node < 0 || e.node >= int(st.d->nodes.size()) ||
        e.index >= int(st.d->nodes[std::size_t(e.node)].outputs.size()))
      fail("Graph.load", "line ", st.lineno, ": input ", item, " does not exist");
    st.cur.inputs.push_back(e);
  }
}

void read_output(LoadState& st, const std::string& rest) {
  std::istringstream ls(rest);
  std::string dt;
  Shape s = read_shape(ls, dt);
  st.cur.outputs.push_back({s, parse_dtype(dt)});
}

void read_value(LoadState& st, const std::string& rest) {
  std::istringstream ls(rest);
  std::string dt, hex;
  Shape s = read_shape(ls, dt);
  ls >> hex;
  Tensor t = Tensor::empty(s, parse_dtype(dt));
  std::size_t nb = std::size_t(t.numel()) * dtype_size(t.dtype());
  if (hex.size() != nb * 2) fail("Graph.load", "line ", st.lineno, ": value has the wrong size");
  auto* p = static_cast<unsigned char*>(t.raw_data());
  for (std::size_t i = 0; i < nb; ++i)
    p[i] = (unsigned char)(hexval(hex[2 * i]) * 16 + hexval(hex[2 * i + 1]));
  st.cur.value = t;
}

void read_end(LoadState& st, const std::string&) {
  st.in_node = false;
  GraphNode& cur = st.cur;
  if (cur.kind == NodeKind::Op && !cur.op) fail("Graph.load", "line ", st.lineno, ": op node without op");
  if (cur.kind == NodeKind::Update) fail("Graph.load", "update nodes cannot be loaded");
  if (cur.kind == NodeKind::Variable) {
    EagerScope eager;
    cur.variable = Variable(cur.value, cur.name, st.trainable);
    cur.value = cur.variable.value();
  }
  Tensor captured = cur.value;
  int id = add_node(st.d, std::move(cur));
  if (captured.defined()) st.d->captures[captured.impl_ptr().get()] = id;
}

// The entries of a node, as Graph::serialize writes them (docs/graph.md).
struct EntryReader {
  const char* word;
  void (*read)(LoadState&, const std::string& rest);
  bool opens_node = false;  // allowed outside a node
};
const EntryReader kEntryReaders[] = {
    {"node", read_node, true},
    {"kind", read_kind},
    {"name", [](LoadState& st, const std::string& rest) { st.cur.name = rest; }},
    {"op", [](LoadState& st, const std::string& rest) { st.cur.op = &get_op(rest); }},
    {"in", read_inputs},
    {"num_ys", [](LoadState& st, const std::string& rest) { st.cur.num_ys = std::stoi(rest); }},
    {"attr",
     [](LoadState& st, const std::string& rest) {
       auto sp = rest.find(' ');
       st.cur.attrs.set(rest.substr(0, sp), parse_attr(rest.substr(sp + 1)));
     }},
    {"out", read_output},
    {"trainable", [](LoadState& st, const std::string& rest) { st.trainable = read_flag(rest); }},
    {"value", read_value},
    {"end", read_end},
};

}  // namespace

std::string plan_dot_of(const Graph::Data& g) {
  std::vector<int> group(g.nodes.size(), -1);
  std::vector<char> live(g.nodes.size(), 0);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) group[i] = g.nodes[i].fused_group;
  // Show what runs: nodes some other node or a fetch needs (constants folded away are dropped).
  std::vector<int> consumers(g.nodes.size(), 0);
  for (const auto& n : g.nodes)
    for (const auto& e : n.inputs) ++consumers[std::size_t(e.node)];
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    live[i] = consumers[i] > 0 || g.nodes[i].kind == NodeKind::Op || g.nodes[i].kind == NodeKind::Update;
  return dot_of(g, group, &live);
}

std::string Graph::to_dot() const { return dot_of(*d_, static_groups(*d_), nullptr); }

std::string Graph::serialize() const {
  std::ostringstream os;
  os << kGraphHeader << "\n";
  for (const auto& n : d_->nodes) {
    if (n.kind == NodeKind::Update)
      fail("Graph.save", "node '", n.name,
           "' applies an optimiser; optimiser state cannot go into a graph file (save the graph "
           "before adding minimize, and the optimiser with the model)");
    os << "node " << n.id << "\nkind " << node_kind_name(n.kind) << "\nname " << n.name << "\n";
    if (n.op) os << "op " << n.op->name << "\n";
    if (!n.inputs.empty()) {
      os << "in";
      for (const auto& e : n.inputs) os << " " << e.node << ":" << e.index;
      os << "\n";
    }
    if (n.kind == NodeKind::Gradients) os << "num_ys " << n.num_ys << "\n";
    for (const auto& [k, v] : n.attrs.items()) os << "attr " << k << " " << attr_str(v) << "\n";
    for (const auto& o : n.outputs) {
      os << "out " << dtype_name(o.dtype) << " " << o.shape.size();
      for (auto d : o.shape) os << " " << d;
      os << "\n";
    }
    if (n.kind == NodeKind::Constant || n.kind == NodeKind::Variable) {
      if (n.kind == NodeKind::Variable) os << "trainable " << (n.value.is_trainable_variable() ? 1 : 0) << "\n";
      write_value(os, n.value);
    }
    os << "end\n";
  }
  return os.str();
}

Graph Graph::deserialize(const std::string& text) {
  std::istringstream is(text);
  std::string line;
  if (!std::getline(is, line) || line != kGraphHeader)
    fail("Graph.load", "not a soma graph file (expected the header '", kGraphHeader, "')");
  Graph g;
  LoadState st{g.d_};
  while (std::getline(is, line)) {
    ++st.lineno;
    if (line.empty()) continue;
    std::string word = line.substr(0, line.find(' '));
    std::string rest = line.size() > word.size() ? line.substr(word.size() + 1) : "";
    const EntryReader* entry = nullptr;
    for (const auto& e : kEntryReaders)
      if (word == e.word) entry = &e;
    try {
      if (!(entry && entry->opens_node) && !st.in_node)
        fail("Graph.load", "line ", st.lineno, ": '", word, "' outside a node");
      if (!entry) fail("Graph.load", "line ", st.lineno, ": unknown entry '", word, "'");
      entry->read(st, rest);
    } catch (const std::invalid_argument&) {
      fail("Graph.load", "line ", st.lineno, ": bad number in '", line, "'");
    } catch (const std::out_of_range&) {
      fail("Graph.load", "line ", st.lineno, ": number out of range in '", line, "'");
    }
  }
  if (st.in_node) fail("Graph.load", "the file ends inside a node (truncated?)");
  return g;
}

void Graph::save(const std::string& path) const {
  soma::internal::write_file_atomically(path, serialize(), "Graph.save");
}

Graph Graph::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("Graph.load", "cannot open '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return deserialize(ss.str());
}

}  // namespace soma
