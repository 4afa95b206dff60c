// ONNX control flow and the values it carries, kept out of import.cpp's table file: If, Loop
// and Scan run their GRAPH attributes (resolved at load as sub-graphs, import.cpp's GraphBody)
// once per branch taken or iteration, with the enclosing graph's values in scope.
#ifdef SOMA_HAS_ONNX
#include <algorithm>

#include "onnx/import_handlers.hpp"

namespace soma::onnx::importer {

namespace {
bool truth(const Node& n, const Value& v, const char* what) {
  if (!v.is_tensor() || v.tensor.numel() != 1)
    fail(kWho, n.what, ": ", what, " must be a tensor of one element");
  return cast(v.tensor, DType::f64).item<double>() != 0.0;
}
// Per-iteration outputs stacked along `axis` (in reverse for `reverse`).
Tensor stack_outputs(const Node& n, std::vector<Tensor> parts, std::int64_t axis, bool reverse) {
  if (parts.empty()) fail(kWho, n.what, ": a scan output of no iterations has no known shape");
  if (reverse) std::reverse(parts.begin(), parts.end());
  return stack(parts, norm_axis(axis, parts[0].rank() + 1));
}
}  // namespace

// If: the outputs of then_branch or else_branch.
std::vector<Value> if_(const Node& n) {
  const bool c = truth(n, n.values.at(0), "the condition");
  return n.graph(c ? "then_branch" : "else_branch").run({}, *n.scope);
}

// Loop: body(iteration, condition, carried...) -> (condition, carried..., scan outputs...),
// while the iteration is below M (if given) and the condition holds (if given). Outputs: the
// final carried values, then each scan output stacked over the iterations.
std::vector<Value> loop(const Node& n) {
  const Subgraph& body = n.graph("body");
  const std::size_t carried = n.values.size() >= 2 ? n.values.size() - 2 : 0;
  if (body.num_inputs() != carried + 2 || body.num_outputs() < carried + 1)
    fail(kWho, n.what, ": the body takes ", body.num_inputs(), " inputs and gives ",
         body.num_outputs(), " outputs; with ", carried, " carried values it must take ",
         carried + 2, " and give at least ", carried + 1);
  const bool bounded = n.values.size() > 0 && n.values[0].kind != Value::Kind::none;
  const std::int64_t trips =
      bounded ? std::int64_t(cast(n.values[0].tensor, DType::f64).item<double>()) : 0;
  bool cond = n.values.size() > 1 && n.values[1].kind != Value::Kind::none
                  ? truth(n, n.values[1], "the condition")
                  : true;
  std::vector<Value> vals(n.values.begin() + 2, n.values.end());
  const std::size_t scans = body.num_outputs() - 1 - carried;
  std::vector<std::vector<Tensor>> parts(scans);
  for (std::int64_t i = 0; (!bounded || i < trips) && cond; ++i) {
    std::vector<Value> in{Value(constant(std::vector<std::int64_t>{i}, Shape{})),
                          Value(constant(std::vector<std::uint8_t>{cond}, Shape{}).cast(DType::boolean))};
    in.insert(in.end(), vals.begin(), vals.end());
    auto out = body.run(in, *n.scope);
    cond = truth(n, out[0], "the body's condition");
    for (std::size_t k = 0; k < carried; ++k) vals[k] = out[1 + k];
    for (std::size_t k = 0; k < scans; ++k) {
      if (!out[1 + carried + k].is_tensor())
        fail(kWho, n.what, ": scan output ", k, " is not a tensor");
      parts[k].push_back(out[1 + carried + k].tensor);
    }
  }
  for (auto& p : parts) vals.push_back(stack_outputs(n, p, 0, false));
  return vals;
}

// Scan (opset 9 on): body(state..., slices...) -> (state..., slices...), one iteration per
// position along each scan input's axis (forward or reverse); the scan outputs are the slices
// stacked along their axes.
std::vector<Tensor> scan(const Node& n) {
  const Subgraph& body = n.graph("body");
  const std::int64_t m = n.attr.i("num_scan_inputs");
  const std::int64_t states = std::int64_t(n.in.size()) - m;
  if (m <= 0 || states < 0)
    fail(kWho, n.what, ": num_scan_inputs ", m, " does not fit ", n.in.size(), " inputs");
  if (body.num_inputs() != n.in.size() || std::int64_t(body.num_outputs()) < states)
    fail(kWho, n.what, ": the body takes ", body.num_inputs(), " inputs and gives ",
         body.num_outputs(), " outputs for ", states, " states and ", m, " scan inputs");
  const std::int64_t k_out = std::int64_t(body.num_outputs()) - states;
  auto per = [&](std::string_view name, std::int64_t count) {
    auto v = n.attr.ints(name);
    if (v.empty()) v.assign(std::size_t(count), 0);
    if (std::int64_t(v.size()) != count)
      fail(kWho, n.what, ": ", std::string(name), " has ", v.size(), " values, expected ", count);
    return v;
  };
  const auto in_axes = per("scan_input_axes", m), in_dirs = per("scan_input_directions", m);
  const auto out_axes = per("scan_output_axes", k_out), out_dirs = per("scan_output_directions", k_out);
  std::vector<Tensor> xs;
  std::int64_t len = -1;
  for (std::int64_t j = 0; j < m; ++j) {
    const Tensor& x = n.arg(std::size_t(states + j));
    const std::int64_t axis = norm_axis(in_axes[std::size_t(j)], x.rank());
    Tensor moved = axis == 0 ? x : [&] {
      std::vector<std::int64_t> perm{axis};
      for (std::int64_t d = 0; d < x.rank(); ++d)
        if (d != axis) perm.push_back(d);
      return transpose(x, perm);
    }();
    if (len >= 0 && moved.dim(0) != len)
      fail(kWho, n.what, ": scan inputs have lengths ", len, " and ", moved.dim(0));
    len = moved.dim(0);
    xs.push_back(moved);
  }
  std::vector<Value> state(n.values.begin(), n.values.begin() + states);
  std::vector<std::vector<Tensor>> parts(static_cast<std::size_t>(k_out));
  for (std::int64_t t = 0; t < len; ++t) {
    std::vector<Value> in = state;
    for (std::int64_t j = 0; j < m; ++j) {
      const std::int64_t at = in_dirs[std::size_t(j)] ? len - 1 - t : t;
      std::vector<Slice> s(std::size_t(xs[std::size_t(j)].rank()));
      s[0] = Slice{at, at + 1};
      in.push_back(squeeze(slice(xs[std::size_t(j)], s), {0}));
    }
    auto out = body.run(in, *n.scope);
    for (std::int64_t k = 0; k < states; ++k) state[std::size_t(k)] = out[std::size_t(k)];
    for (std::int64_t k = 0; k < k_out; ++k) {
      const Value& o = out[std::size_t(states + k)];
      if (!o.is_tensor()) fail(kWho, n.what, ": scan output ", k, " is not a tensor");
      parts[std::size_t(k)].push_back(o.tensor);
    }
  }
  std::vector<Tensor> result;
  for (auto& s : state) {
    if (!s.is_tensor()) fail(kWho, n.what, ": a scan state is not a tensor");
    result.push_back(s.tensor);
  }
  for (std::int64_t k = 0; k < k_out; ++k)
    result.push_back(stack_outputs(n, parts[std::size_t(k)], out_axes[std::size_t(k)],
                                   out_dirs[std::size_t(k)] != 0));
  return result;
}

void check_scan(const LoadCheck& c) {
  if (c.opset < 9)
    fail(kWho, c.what, ": Scan before opset 9 (batched, with sequence_lens) is not supported (the "
         "model imports opset ", c.opset, ")");
}

// ---- sequences and optionals ---------------------------------------------------------------------

namespace {
const std::vector<Tensor>& seq_arg(const Node& n, std::size_t i) {
  if (i >= n.values.size() || !n.values[i].is_sequence())
    fail(kWho, n.what, ": input ", i, " must be a sequence");
  return n.values[i].items;
}
// A position in a sequence of `size` (negative: from the end), checked against [-size, hi].
std::int64_t seq_position(const Node& n, std::size_t i, std::int64_t size, std::int64_t hi) {
  std::int64_t p = std::int64_t(n.number(i));
  if (p < -size || p > hi)
    fail(kWho, n.what, ": position ", p, " is outside [", -size, ", ", hi, "]");
  return p < 0 ? p + size : p;
}
}  // namespace

std::vector<Value> sequence_empty(const Node& n) {
  (void)soma_dtype(int(n.attr.i("dtype")), n.what + " dtype");  // a dtype soma holds
  return {Value::sequence({})};
}
std::vector<Value> sequence_construct(const Node& n) {
  std::vector<Tensor> items;
  for (std::size_t i = 0; i < n.values.size(); ++i) items.push_back(n.arg(i));
  return {Value::sequence(std::move(items))};
}
std::vector<Value> sequence_insert(const Node& n) {
  std::vector<Tensor> items = seq_arg(n, 0);
  const std::int64_t size = std::int64_t(items.size());
  const std::int64_t at = n.has(2) ? seq_position(n, 2, size, size) : size;
  items.insert(items.begin() + at, n.arg(1));
  return {Value::sequence(std::move(items))};
}
std::vector<Value> sequence_at(const Node& n) {
  const auto& items = seq_arg(n, 0);
  const std::int64_t size = std::int64_t(items.size());
  return {items[std::size_t(seq_position(n, 1, size, size - 1))]};
}
std::vector<Value> sequence_erase(const Node& n) {
  std::vector<Tensor> items = seq_arg(n, 0);
  const std::int64_t size = std::int64_t(items.size());
  const std::int64_t at = n.has(1) ? seq_position(n, 1, size, size - 1) : size - 1;
  if (at < 0) fail(kWho, n.what, ": the sequence is empty");
  items.erase(items.begin() + at);
  return {Value::sequence(std::move(items))};
}
std::vector<Value> sequence_length(const Node& n) {
  return {constant(std::vector<std::int64_t>{std::int64_t(seq_arg(n, 0).size())}, Shape{})};
}
std::vector<Value> concat_from_sequence(const Node& n) {
  const auto& items = seq_arg(n, 0);
  if (items.empty()) fail(kWho, n.what, ": the sequence is empty");
  const std::int64_t axis = n.attr.i("axis");
  if (n.attr.i("new_axis")) return {stack(items, norm_axis(axis, items[0].rank() + 1))};
  return {concat(items, norm_axis(axis, items[0].rank()))};
}
// SplitToSequence: parts of `split` sizes (a scalar: equal parts, the last smaller), else one
// per position (the axis dropped unless keepdims).
std::vector<Value> split_to_sequence(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t axis = norm_axis(n.attr.i("axis"), x.rank());
  const std::int64_t len = x.dim(axis);
  std::vector<std::int64_t> sizes;
  if (!n.has(1)) {
    sizes.assign(std::size_t(len), 1);
  } else if (n.arg(1).rank() == 0) {
    const std::int64_t k = std::int64_t(n.number(1));
    if (k <= 0) fail(kWho, n.what, ": split must be positive, got ", k);
    for (std::int64_t at = 0; at < len; at += k) sizes.push_back(std::min(k, len - at));
  } else {
    sizes = ints_of(n.arg(1));
  }
  std::vector<Tensor> parts;
  std::int64_t at = 0;
  for (auto sz : sizes) {
    std::vector<Slice> sl(std::size_t(x.rank()));
    sl[std::size_t(axis)] = Slice{at, at + sz};
    at += sz;
    Tensor p = slice(x, sl);
    if (!n.has(1) && !n.attr.i("keepdims")) p = squeeze(p, {axis});
    parts.push_back(p);
  }
  if (at != len) fail(kWho, n.what, ": split sizes add up to ", at, ", the axis has ", len);
  return {Value::sequence(std::move(parts))};
}
// SequenceMap: the body on each position of the sequence inputs (tensor inputs as they are);
// each body output collected into a sequence.
std::vector<Value> sequence_map(const Node& n) {
  const Subgraph& body = n.graph("body");
  const std::size_t len = seq_arg(n, 0).size();
  for (auto& v : n.values)
    if (v.is_sequence() && v.items.size() != len)
      fail(kWho, n.what, ": the sequences have lengths ", len, " and ", v.items.size());
  std::vector<std::vector<Tensor>> outs(body.num_outputs());
  for (std::size_t i = 0; i < len; ++i) {
    std::vector<Value> in;
    for (auto& v : n.values) in.push_back(v.is_sequence() ? Value(v.items[i]) : v);
    auto out = body.run(in, *n.scope);
    for (std::size_t k = 0; k < out.size(); ++k) {
      if (!out[k].is_tensor()) fail(kWho, n.what, ": body output ", k, " is not a tensor");
      outs[k].push_back(out[k].tensor);
    }
  }
  std::vector<Value> result;
  for (auto& o : outs) result.push_back(Value::sequence(std::move(o)));
  return result;
}
// Optional: its input, or an empty optional.
std::vector<Value> optional(const Node& n) {
  return {n.values.empty() ? Value() : n.values[0]};
}
std::vector<Value> optional_has_element(const Node& n) {
  const bool has = !n.values.empty() && n.values[0].kind != Value::Kind::none;
  return {constant(std::vector<std::uint8_t>{has}, Shape{}).cast(DType::boolean)};
}
std::vector<Value> optional_get_element(const Node& n) {
  if (n.values.empty() || n.values[0].kind == Value::Kind::none)
    fail(kWho, n.what, ": the optional is empty");
  return {n.values[0]};
}
// Identity passes any value (a tensor, a sequence, an optional).
std::vector<Value> identity_value(const Node& n) {
  if (n.values.empty()) fail(kWho, n.what, ": input 0 is missing");
  return {n.values[0]};
}

}  // namespace soma::onnx::importer
#endif
