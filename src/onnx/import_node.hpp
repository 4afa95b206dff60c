#pragma once
// The ONNX importer's view of a node (only compiled with SOMA_HAS_ONNX): an operator's attribute
// definitions, a node's checked attributes, what a handler sees (Node), the checks at load and
// the table entry (OnnxOp). import.cpp holds the table, onnx_ops(); handlers too large for it
// live in import_*.cpp files and are declared in import_handlers.hpp.
#include <cctype>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "onnx/onnx_attrs.hpp"
#include "onnx/proto_util.hpp"
#include "soma/error.hpp"
#include "soma/onnx.hpp"
#include "soma/ops.hpp"

namespace soma::onnx::importer {

using namespace soma::onnx_detail;
using ::onnx::AttributeProto;
using ::onnx::NodeProto;
using AP = AttributeProto;

inline constexpr const char* kWho = "onnx::load";

// The default ONNX domain is spelled "" or "ai.onnx".
inline bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

inline std::string node_desc(const NodeProto& n, int index) {
  std::string s = "node ";
  s += n.name().empty() ? "#" + std::to_string(index) : "'" + n.name() + "'";
  return s + " (" + n.op_type() + ")";
}

inline std::int64_t norm_axis(std::int64_t a, std::int64_t rank) { return a < 0 ? a + rank : a; }

inline std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

template <class C>
inline std::string join(const C& items) {
  std::string s;
  for (const auto& i : items) (s += s.empty() ? "" : ", ") += i;
  return s;
}

// A STRING attribute's value as an enum, by a table (the values are checked at load against the
// AttrDef's allowed list, so a miss here is an internal error).
template <class E>
E keyword(const std::string& value, std::initializer_list<std::pair<std::string_view, E>> table,
          const std::string& what) {
  for (const auto& entry : table)
    if (entry.first == value) return entry.second;
  fail(kWho, what, ": internal: unexpected value '", value, "'");
}

// ---- the ONNX side of an operator: its attributes ---------------------------------------------

// One attribute of an ONNX operator (the union over opsets), with ONNX's default.
struct AttrDef {
  std::string_view name;
  OnnxAttrType type;
  double num = 0;                              // INT and FLOAT default
  std::string_view str = {};                   // STRING default
  std::vector<std::string_view> allowed = {};  // STRING: the values soma runs (empty: any)
};
inline AttrDef I(std::string_view n, std::int64_t def = 0) { return {n, AP::INT, double(def)}; }
// Defaults as float: ONNX FLOAT attributes are floats, so a default equals what a file holds.
inline AttrDef F(std::string_view n, float def = 0.0f) { return {n, AP::FLOAT, double(def)}; }
inline AttrDef S(std::string_view n, std::string_view def = {}, std::vector<std::string_view> ok = {}) {
  return {n, AP::STRING, 0, def, std::move(ok)};
}
inline AttrDef Is(std::string_view n) { return {n, AP::INTS}; }
inline AttrDef Fs(std::string_view n) { return {n, AP::FLOATS}; }
inline AttrDef Ss(std::string_view n) { return {n, AP::STRINGS}; }
inline AttrDef T(std::string_view n) { return {n, AP::TENSOR}; }
inline AttrDef G(std::string_view n) { return {n, AP::GRAPH}; }

// A value the import reads on the host (a scalar attribute given as an input, a shape).
inline Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

// `t` on the device of `like` (integer data such as Gather's indices may be a host constant).
inline Tensor on_device_of(const Tensor& like, const Tensor& t) {
  return t.device() == like.device() ? t : t.to(like.device());
}

// A node's attributes, checked at load against the operator's AttrDefs (and, for a mapped op,
// the mapping's names); read by name with ONNX's default where the node leaves one out.
class NodeAttrs {
 public:
  NodeAttrs(const NodeProto& n, const std::vector<AttrDef>& defs, const OnnxMapping* mapping,
            const OpDef* op, const std::string& what)
      : defs_(&defs), what_(what) {
    for (auto& a : n.attribute()) {
      const AttrDef* d = def(a.name());
      const OnnxAttrType have = attr_type_of(a);
      if (d) {
        if (have != d->type && have != AP::UNDEFINED)
          fail(kWho, what, ": attribute '", a.name(), "' has type ", attr_type_name(have),
               ", expected ", attr_type_name(d->type));
        if (!d->allowed.empty() &&
            std::find(d->allowed.begin(), d->allowed.end(), a.s()) == d->allowed.end())
          fail(kWho, what, ": attribute '", a.name(), "' is '", a.s(), "', soma supports ",
               join(quoted(d->allowed)));
      } else if (!mapped(a.name(), mapping)) {
        std::vector<std::string> names;
        for (auto& k : defs) names.emplace_back(k.name);
        if (mapping)
          for (auto& m : mapping->attrs)
            if (!def(m.onnx)) names.push_back(m.onnx);
        fail(kWho, what, ": attribute '", a.name(), "' is not an attribute of ", n.op_type(),
             op ? " (soma op '" + op->name + "')" : std::string(), "; ",
             names.empty() ? std::string("it takes none") : "allowed: " + join(names));
      }
      items_.push_back(&a);
    }
  }

  const AttributeProto* find(std::string_view name) const {
    for (auto* a : items_)
      if (a->name() == name) return a;
    return nullptr;
  }
  bool has(std::string_view name) const { return find(name) != nullptr; }
  std::int64_t i(std::string_view name) const {
    auto* a = find(name);
    return a ? a->i() : std::int64_t(known(name).num);
  }
  std::int64_t i(std::string_view name, std::int64_t def) const {  // an opset-dependent default
    auto* a = find(name);
    return a ? a->i() : def;
  }
  double f(std::string_view name) const {
    auto* a = find(name);
    return a ? double(a->f()) : known(name).num;
  }
  std::string s(std::string_view name) const {
    auto* a = find(name);
    return a ? a->s() : std::string(known(name).str);
  }
  std::vector<std::int64_t> ints(std::string_view name) const {
    auto* a = find(name);
    if (!a) return {};
    return {a->ints().begin(), a->ints().end()};
  }
  // The operator's definition of an attribute (nullptr: not listed).
  const AttrDef* def(std::string_view name) const {
    for (auto& d : *defs_)
      if (d.name == name) return &d;
    return nullptr;
  }

 private:
  static std::vector<std::string> quoted(const std::vector<std::string_view>& v) {
    std::vector<std::string> r;
    for (auto s : v) r.push_back(std::string(1, '\'').append(s).append(1, '\''));
    return r;
  }
  static bool mapped(const std::string& name, const OnnxMapping* m) {
    if (m)
      for (auto& a : m->attrs)
        if (a.onnx == name) return true;
    return false;
  }
  const AttrDef& known(std::string_view name) const {
    const AttrDef* d = def(name);
    if (!d) fail(kWho, what_, ": internal: attribute '", std::string(name), "' is not listed");
    return *d;
  }
  const std::vector<AttrDef>* defs_;
  std::string what_;
  std::vector<const AttributeProto*> items_;
};

using soma::onnx::Value;
using Env = std::unordered_map<std::string, Value>;

// The values a sub-graph sees besides its own: the enclosing graphs' (ONNX's outer scope).
struct Scope {
  const Env* env = nullptr;
  const Scope* parent = nullptr;
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (s->env)
        if (auto it = s->env->find(name); it != s->env->end()) return &it->second;
    return nullptr;
  }
};

// A GRAPH attribute (If's branches, Loop's and Scan's body), resolved at load like the main
// graph (every operator and attribute checked) and run by the handler as often as it needs.
class Subgraph {
 public:
  virtual ~Subgraph() = default;
  // Runs the graph with its inputs bound in order; other names come from `outer`.
  virtual std::vector<Value> run(const std::vector<Value>& inputs, const Scope& outer) const = 0;
  virtual std::size_t num_inputs() const = 0;
  virtual std::size_t num_outputs() const = 0;
};
using Subgraphs = std::unordered_map<std::string, std::unique_ptr<Subgraph>>;

// What a handler sees.
struct Node {
  const NodeProto& proto;
  const std::string& what;
  const NodeAttrs& attr;
  const std::vector<Tensor>& in;  // the inputs that are tensors (undefined: omitted or not one)
  std::int64_t opset;
  bool training;
  const std::vector<Value>& values;  // every input as it is (sequences, empty optionals)
  const Scope* scope = nullptr;      // the values the node's graph sees, for its sub-graphs
  const Subgraphs* graphs = nullptr;
  bool relu = false;  // Conv: a Relu that only reads its output is fused in (Program)
  const Tensor& arg(std::size_t i) const {
    if (i >= in.size() || !in[i].defined()) fail(kWho, what, ": input ", i, " is missing");
    return in[i];
  }
  bool has(std::size_t i) const { return i < in.size() && in[i].defined(); }
  const Tensor& x() const { return arg(0); }
  double number(std::size_t i) const { return on_host(cast(in[i], DType::f64)).item<double>(); }
  const Subgraph& graph(const std::string& name) const {
    if (graphs)
      if (auto it = graphs->find(name); it != graphs->end()) return *it->second;
    fail(kWho, what, ": the graph attribute '", name, "' is missing");
  }
};
using Handler = std::vector<Tensor> (*)(const Node&);
using ValueHandler = std::vector<Value> (*)(const Node&);  // sequences, optionals, control flow

// A handler of either kind.
struct Run {
  Handler tensors = nullptr;
  ValueHandler values = nullptr;
  Run(std::nullptr_t = nullptr) {}  // NOLINT: the table's "no handler"
  Run(Handler h) : tensors(h) {}  // NOLINT
  Run(ValueHandler h) : values(h) {}  // NOLINT
  explicit operator bool() const { return tensors || values; }
  std::vector<Value> operator()(const Node& n) const {
    if (values) return values(n);
    auto t = tensors(n);
    return {t.begin(), t.end()};
  }
};

// Reads an integer tensor's values (Reshape's shape, Slice's starts, ...). Such values are
// constants or Shape outputs, kept in host memory (Program::place_inputs); one computed on a
// device is copied back.
inline std::vector<std::int64_t> ints_of(const Tensor& t) {
  if (!t.defined()) return {};
  return on_host(cast(t, DType::i64)).to_vector<std::int64_t>();
}

// ---- checks at load ---------------------------------------------------------------------------

// What the file declares about a value: rank (-1: unknown) and ONNX element type (0: unknown).
struct Declared {
  std::int64_t rank = -1;
  int elem = 0;
};
struct LoadCheck {
  const NodeProto& proto;
  const NodeAttrs& attr;
  const std::string& what;
  const std::unordered_map<std::string, Declared>& declared;
  std::int64_t opset;
  const std::unordered_map<std::string, Tensor>& constants;  // initialisers and Constant outputs
  Declared input(int i) const {
    if (i >= proto.input_size()) return {};
    auto it = declared.find(proto.input(i));
    return it == declared.end() ? Declared{} : it->second;
  }
  bool has_input(int i) const { return i < proto.input_size() && !proto.input(i).empty(); }
  bool has_output(int i) const { return i < proto.output_size() && !proto.output(i).empty(); }
};
using Check = void (*)(const LoadCheck&);

inline bool floating_elem(int e) {
  using TP = ::onnx::TensorProto;
  return e == TP::FLOAT || e == TP::DOUBLE || e == TP::FLOAT16 || e == TP::BFLOAT16;
}

// An ONNX operator soma knows: its attributes (the union over opsets, with ONNX's defaults) and
// a handler, or none where an op definition maps to it one-to-one (OpDef::onnx).
struct OnnxOp {
  Run run = nullptr;
  std::vector<AttrDef> attrs = {};
  std::vector<int> statistics = {};  // inputs holding running statistics: weights not trained
  bool at_load = false;              // no inputs: evaluated once at load, its outputs constants
  Check check = nullptr;             // refuses at load what the handler cannot run
  std::string_view domain = {};      // another domain than ONNX's default (ai.onnx.ml, ...)
};

}  // namespace soma::onnx::importer
