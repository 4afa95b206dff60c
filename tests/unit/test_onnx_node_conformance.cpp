// The ONNX backend node tests (issue 25): every node test of the installed onnx package
// (onnx/backend/test/data/node/<test>/model.onnx with test_data_set_*/input_*.pb and
// output_*.pb) is loaded with soma::onnx::load, run, and compared with ONNX's expected outputs
// (numpy's assert_allclose with ONNX's node-test tolerances: rtol 1e-3, atol 1e-7; integers and
// bools exactly). Each test is one of
//   pass         the outputs match
//   wrong        soma ran it and gave other numbers, dtypes or shapes: never acceptable
//   error        loaded, then failed while running: should be refused at load instead
//   unsupported  refused at load (an operator, attribute, dtype or opset soma does not run)
//   bad data     the test's own data does not fit its model (onnx 1.12's castlike bfloat16
//                tests feed [1] to an input declared [3, 4]; its test_adam_multiple expects an
//                epsilon its node does not set): not counted against soma
// tests/onnx/node_expected.txt lists the result each test had when the list was last written;
// a test listed `pass` that no longer passes fails this suite, and so does any `wrong` result.
// The data: $SOMA_ONNX_NODE_DIR, else tests/onnx/node_data.py finds it in the onnx package or
// generates it from the package's generators (newer wheels ship no data); without an onnx
// package the suite skips.
//   SOMA_ONNX_NODE_REPORT=file  writes one line per test: name, result, operators, message
//   SOMA_ONNX_NODE_UPDATE=1     rewrites tests/onnx/node_expected.txt from this run
#include <gtest/gtest.h>

#ifndef SOMA_ONNX_NODE_EXPECTED  // a build without ONNX (tests/CMakeLists.txt)
TEST(OnnxNodeConformance, EveryNodeTestPassesOrIsRefusedAtLoad) {
  GTEST_SKIP() << "soma was built without ONNX";
}
#else
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "onnx/proto_util.hpp"  // onnx_pb.h first: it defines what onnx-data.pb.h needs
#include <onnx/onnx-data.pb.h>
#include "soma/onnx.hpp"
#include "soma/soma.hpp"

using namespace soma;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// The node-test directory: $SOMA_ONNX_NODE_DIR, else what node_data.py prints ("" if none).
std::string node_dir() {
  if (const char* d = std::getenv("SOMA_ONNX_NODE_DIR")) return d;
  const std::string cmd = std::string("\"") + SOMA_ONNX_NODE_PYTHON + "\" \"" +
                          SOMA_ONNX_SCRIPTS + "/node_data.py\" \"" + SOMA_ONNX_NODE_WORKDIR +
                          "\" 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return trim(out);
}

enum class Result { pass, wrong, error, unsupported, bad_data };
const char* name_of(Result r) {
  switch (r) {
    case Result::pass: return "pass";
    case Result::wrong: return "wrong";
    case Result::error: return "error";
    case Result::unsupported: return "unsupported";
    case Result::bad_data: return "bad-data";
  }
  return "?";
}
// Worse results rank higher (a regression is a result that ranks above the expected one).
int rank_of(const std::string& r) {
  return r == "pass" || r == "bad-data" ? 0 : r == "unsupported" ? 1 : r == "error" ? 2 : 3;
}

struct Outcome {
  Result result = Result::pass;
  std::string ops;      // the graph's operator types
  std::string message;  // why it is not a pass
};

// A graph value's type: its tensors' element type (0: unknown), and whether it is a sequence or
// an optional (an optional of a sequence is both).
struct Kind {
  int elem = 0;
  bool sequence = false, optional = false;
};
Kind kind_of(const ::onnx::ValueInfoProto& vi) {
  Kind k;
  const ::onnx::TypeProto* t = &vi.type();
  if (t->has_optional_type()) {
    k.optional = true;
    t = &t->optional_type().elem_type();
  }
  if (t->has_sequence_type()) {
    k.sequence = true;
    t = &t->sequence_type().elem_type();
  }
  if (t->has_tensor_type()) k.elem = t->tensor_type().elem_type();
  return k;
}
// `declared`: the element type the model gives the value (0: unknown). onnx 1.12 wrote
// bfloat16 test data with data_type UINT16 (the same bits): read it as the model declares.
Tensor tensor_of(::onnx::TensorProto tp, int declared) {
  if (tp.data_type() == ::onnx::TensorProto::UINT16 && declared == ::onnx::TensorProto::BFLOAT16)
    tp.set_data_type(::onnx::TensorProto::BFLOAT16);
  return onnx_detail::from_proto(tp);
}
soma::onnx::Value sequence_of(const ::onnx::SequenceProto& sp, int declared) {
  std::vector<Tensor> items;
  for (auto& t : sp.tensor_values()) items.push_back(tensor_of(t, declared));
  return soma::onnx::Value::sequence(std::move(items));
}
// A data file as the graph declares the value: a TensorProto, SequenceProto or OptionalProto.
soma::onnx::Value read_value(const fs::path& p, const Kind& k) {
  const std::string bytes = read_file(p);
  if (k.optional) {
    ::onnx::OptionalProto op;
    if (!op.ParseFromString(bytes)) fail("node test", "cannot parse ", p.string());
    if (op.has_tensor_value()) return tensor_of(op.tensor_value(), k.elem);
    if (op.has_sequence_value()) return sequence_of(op.sequence_value(), k.elem);
    return {};
  }
  if (k.sequence) {
    ::onnx::SequenceProto sp;
    if (!sp.ParseFromString(bytes)) fail("node test", "cannot parse ", p.string());
    return sequence_of(sp, k.elem);
  }
  ::onnx::TensorProto tp;
  if (!tp.ParseFromString(bytes)) fail("node test", "cannot parse ", p.string());
  return tensor_of(tp, k.elem);
}

// Elements whose value the ONNX specification leaves undefined, which no result can get wrong.
// Cast's rule (operators.md, Cast): "Casting from floating point to fixed point: undefined if
// OOR (out of range)". The node tests of Cast and CastLike from FLOAT / FLOAT16 to INT4, UINT4,
// INT2 and UINT2 feed -9..15 (and -3..3); the expected values of the out-of-range ones come from
// ml_dtypes' astype, which changed between versions (0.5 kept the low bits, 0.7 writes 0). So
// for a graph of Cast / CastLike nodes from a floating type to one of those, the elements whose
// input is NaN, infinite or outside the target's range after truncation are not compared; the
// rest must match. soma's own rule for them (low bits, as for integer sources) is stated by
// OnnxImportTable.CastToSubByteIntegersFollowsTheOnnxRule.
std::vector<bool> undefined_by_spec(const ::onnx::ModelProto& proto, const std::vector<Kind>& in,
                                    const std::vector<Kind>& out, const Tensor& x) {
  using TP = ::onnx::TensorProto;
  if (proto.graph().node_size() == 0 || in.empty() || out.size() != 1) return {};
  for (auto& n : proto.graph().node())
    if (n.op_type() != "Cast" && n.op_type() != "CastLike") return {};
  const int from = in[0].elem, to = out[0].elem;
  const bool floating = from == TP::FLOAT || from == TP::FLOAT16 || from == TP::DOUBLE ||
                        from == TP::BFLOAT16;
  // onnx.proto's UINT4 21, INT4 22, UINT2 25, INT2 26 (newer than Debian's libonnx headers)
  double lo = 0, hi = 0;
  if (to == 22) lo = -8, hi = 7;
  else if (to == 21) hi = 15;
  else if (to == 26) lo = -2, hi = 1;
  else if (to == 25) hi = 3;
  else return {};
  if (!floating) return {};
  std::vector<bool> undefined;
  for (double v : cast(x, DType::f64).to_vector<double>())
    undefined.push_back(!std::isfinite(v) || std::trunc(v) < lo || std::trunc(v) > hi);
  return undefined;
}

// numpy.testing.assert_allclose(actual, expected, rtol, atol), NaN equal to NaN; "" if equal.
// Elements marked in `skip` (undefined_by_spec) are not compared.
std::string compare(const Tensor& got, const Tensor& want, std::size_t k,
                    const std::vector<bool>& skip = {}) {
  std::ostringstream why;
  if (got.dtype() != want.dtype()) {
    why << "output " << k << " has dtype " << got.dtype() << ", expected " << want.dtype();
    return why.str();
  }
  if (got.shape() != want.shape()) {
    why << "output " << k << " has shape " << shape_str(got.shape()) << ", expected "
        << shape_str(want.shape());
    return why.str();
  }
  const bool exact = !is_floating(want.dtype());
  // Half-precision graphs run op by op in their dtype, where the reference rounds once at the
  // end: a few units in the last place apart (2^-10 for f16, 2^-7 for bf16).
  const double rtol = want.dtype() == DType::bf16 ? 2e-2 : want.dtype() == DType::f16 ? 4e-3 : 1e-3;
  const double atol = want.dtype() == DType::bf16 || want.dtype() == DType::f16 ? 1e-3 : 1e-7;
  auto g = cast(got, DType::f64).to_vector<double>();
  auto w = cast(want, DType::f64).to_vector<double>();
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (i < skip.size() && skip[i]) continue;
    const double a = g[i], b = w[i];
    bool ok;
    if (std::isnan(b)) ok = std::isnan(a);
    else if (std::isinf(b)) ok = a == b;
    else if (exact) ok = a == b;
    else ok = std::fabs(a - b) <= atol + rtol * std::fabs(b);
    if (!ok) {
      why << "output " << k << " element " << i << " is " << a << ", expected " << b;
      return why.str();
    }
  }
  return "";
}

std::string compare_values(const soma::onnx::Value& got, const soma::onnx::Value& want,
                           std::size_t k, const std::vector<bool>& skip = {}) {
  using K = soma::onnx::Value::Kind;
  auto name = [](K x) { return x == K::tensor ? "a tensor" : x == K::sequence ? "a sequence" : "empty"; };
  if (got.kind != want.kind)
    return "output " + std::to_string(k) + " is " + name(got.kind) + ", expected " + name(want.kind);
  if (want.kind == K::tensor) return compare(got.tensor, want.tensor, k, skip);
  if (want.kind == K::sequence) {
    if (got.items.size() != want.items.size())
      return "output " + std::to_string(k) + " has " + std::to_string(got.items.size()) +
             " items, expected " + std::to_string(want.items.size());
    for (std::size_t i = 0; i < want.items.size(); ++i)
      if (auto why = compare(got.items[i], want.items[i], k); !why.empty())
        return why + " (item " + std::to_string(i) + ")";
  }
  return "";
}

Outcome run_one(const fs::path& dir) {
  Outcome o;
  ::onnx::ModelProto proto;
  const std::string bytes = read_file(dir / "model.onnx");
  if (proto.ParseFromString(bytes)) {
    std::set<std::string> ops;
    for (auto& n : proto.graph().node()) ops.insert(n.op_type());
    for (auto& op : ops) o.ops += (o.ops.empty() ? "" : "+") + op;
  }
  // The graph's inputs that are not initialisers, in order (as the data sets feed them).
  std::vector<Kind> in_kinds, out_kinds;
  std::vector<std::vector<std::int64_t>> in_dims;  // -1: symbolic
  {
    std::set<std::string> inits;
    for (auto& t : proto.graph().initializer()) inits.insert(t.name());
    for (auto& vi : proto.graph().input())
      if (!inits.count(vi.name())) {
        in_kinds.push_back(kind_of(vi));
        std::vector<std::int64_t> d;
        if (vi.type().has_tensor_type() && vi.type().tensor_type().has_shape())
          for (auto& e : vi.type().tensor_type().shape().dim())
            d.push_back(e.has_dim_value() ? e.dim_value() : -1);
        in_dims.push_back(d);
      }
    for (auto& vi : proto.graph().output()) out_kinds.push_back(kind_of(vi));
  }
  auto kind = [](const std::vector<Kind>& v, int i) { return i < int(v.size()) ? v[std::size_t(i)] : Kind{}; };
  // onnx 1.12's test_adam_multiple computes its outputs with epsilon 1e-2 but leaves the
  // attribute out of its node (the default is 1e-6); newer versions set it.
  if (dir.filename() == "test_adam_multiple" && proto.graph().node_size() == 1 &&
      std::none_of(proto.graph().node(0).attribute().begin(), proto.graph().node(0).attribute().end(),
                   [](const ::onnx::AttributeProto& a) { return a.name() == "epsilon"; }))
    return {Result::bad_data, o.ops, "the expected outputs use epsilon 1e-2, the node the default"};
  std::shared_ptr<nn::Model> model;
  try {
    model = soma::onnx::load_from_bytes(bytes, {.trainable = false});
  } catch (const std::exception& e) {
    return {Result::unsupported, o.ops, e.what()};
  }
  model->eval();  // inference: Dropout is the identity, as in ONNX without training_mode
  std::vector<fs::path> sets;
  for (auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  for (auto& set : sets) {
    std::vector<soma::onnx::Value> in, want;
    try {
      for (int i = 0; fs::exists(set / ("input_" + std::to_string(i) + ".pb")); ++i)
        in.push_back(read_value(set / ("input_" + std::to_string(i) + ".pb"), kind(in_kinds, i)));
      for (int i = 0; fs::exists(set / ("output_" + std::to_string(i) + ".pb")); ++i)
        want.push_back(read_value(set / ("output_" + std::to_string(i) + ".pb"), kind(out_kinds, i)));
    } catch (const std::exception& e) {
      // Data soma cannot hold although the model loaded: the load should have refused it.
      return {Result::error, o.ops, std::string("test data: ") + e.what()};
    }
    for (std::size_t i = 0; i < in.size() && i < in_dims.size(); ++i) {
      if (!in[i].is_tensor()) continue;
      const auto& d = in_dims[i];
      bool fits = d.empty() || std::int64_t(d.size()) == in[i].tensor.rank();
      for (std::size_t k = 0; fits && k < d.size(); ++k)
        fits = d[k] < 0 || d[k] == in[i].tensor.shape()[k];
      if (!fits)
        return {Result::bad_data, o.ops, "input " + std::to_string(i) + " has shape " +
                                             shape_str(in[i].tensor.shape()) + ", unlike the model's"};
    }
    std::vector<soma::onnx::Value> got;
    try {
      got = soma::onnx::run(*model, in);
    } catch (const std::exception& e) {
      return {Result::error, o.ops, e.what()};
    }
    if (got.size() != want.size())
      return {Result::wrong, o.ops,
              std::to_string(got.size()) + " outputs, expected " + std::to_string(want.size())};
    std::vector<bool> skip;
    if (!in.empty() && in[0].is_tensor()) skip = undefined_by_spec(proto, in_kinds, out_kinds, in[0].tensor);
    for (std::size_t k = 0; k < want.size(); ++k) {
      std::string why;
      try {
        why = compare_values(got[k], want[k], k, skip);
      } catch (const std::exception& e) {
        return {Result::error, o.ops, e.what()};
      }
      if (!why.empty()) return {Result::wrong, o.ops, why};
    }
  }
  return o;
}

std::map<std::string, std::string> read_expected(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, result;
    if (ls >> name >> result) m[name] = result;
  }
  return m;
}

// The operator a load refusal names ("operator 'X' is not supported"), for the missing-op list.
std::string missing_op(const std::string& msg) {
  const std::string key = "operator '";
  auto p = msg.find(key);
  if (p == std::string::npos || msg.find("is not supported", p) == std::string::npos)
    return "";
  auto e = msg.find('\'', p + key.size());
  return msg.substr(p + key.size(), e - p - key.size());
}

}  // namespace

TEST(OnnxNodeConformance, EveryNodeTestPassesOrIsRefusedAtLoad) {
  if (!soma::onnx::available()) GTEST_SKIP() << "soma was built without ONNX";
  const std::string root = node_dir();
  if (root.empty() || !fs::is_directory(root))
    GTEST_SKIP() << "no onnx package with backend node tests (pip install onnx)";
  std::vector<fs::path> tests;
  for (auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
  std::sort(tests.begin(), tests.end());
  ASSERT_FALSE(tests.empty()) << root;

  const auto start = std::chrono::steady_clock::now();
  const auto expected = read_expected(SOMA_ONNX_NODE_EXPECTED);
  std::map<std::string, Outcome> results;
  std::map<std::string, std::array<int, 5>> per_op;
  std::map<std::string, int> missing;
  std::array<int, 5> totals{};
  for (auto& dir : tests) {
    const std::string name = dir.filename().string();
    Outcome o = run_one(dir);
    results[name] = o;
    ++totals[int(o.result)];
    ++per_op[o.ops][int(o.result)];
    if (o.result == Result::unsupported)
      if (auto op = missing_op(o.message); !op.empty()) ++missing[op];
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::cout << "ONNX node tests in " << root << ": " << tests.size() << " in " << secs << " s\n"
            << "  pass " << totals[0] << ", wrong " << totals[1] << ", error " << totals[2]
            << ", unsupported " << totals[3] << " (bad test data " << totals[4]
            << ")\n  operators missing (tests refused):";
  std::vector<std::pair<int, std::string>> ranked;
  for (auto& [op, c] : missing) ranked.emplace_back(-c, op);
  std::sort(ranked.begin(), ranked.end());
  for (std::size_t i = 0; i < ranked.size() && i < 25; ++i)
    std::cout << " " << ranked[i].second << " " << -ranked[i].first;
  std::cout << "\n";

  if (const char* path = std::getenv("SOMA_ONNX_NODE_REPORT")) {
    std::ofstream f(path);
    for (auto& [name, o] : results) {
      std::string msg = o.message;
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      f << name << "\t" << name_of(o.result) << "\t" << o.ops << "\t" << msg << "\n";
    }
    std::ofstream t(std::string(path) + ".ops");
    t << "operators\tpass\twrong\terror\tunsupported\n";
    for (auto& [op, c] : per_op)
      t << op << "\t" << c[0] << "\t" << c[1] << "\t" << c[2] << "\t" << c[3] << "\n";
  }
  if (const char* u = std::getenv("SOMA_ONNX_NODE_UPDATE"); u && std::string(u) == "1") {
    std::ofstream f(SOMA_ONNX_NODE_EXPECTED);
    f << "# ONNX backend node tests: the result each had when this list was written\n"
         "# (SOMA_ONNX_NODE_UPDATE=1 ./build/tests/test_onnx_node_conformance; see the test).\n";
    for (auto& [name, o] : results) f << name << " " << name_of(o.result) << "\n";
  }

  int improved = 0;
  for (auto& [name, o] : results) {
    const std::string got = name_of(o.result);
    EXPECT_NE(o.result, Result::wrong) << name << " (" << o.ops << ") gives wrong results: "
                                       << o.message;
    auto it = expected.find(name);
    // A test the list does not know (another onnx version) may be anything but wrong.
    const std::string want = it == expected.end() ? "error" : it->second;
    if (o.result != Result::wrong)
      EXPECT_LE(rank_of(got), rank_of(want))
          << name << " (" << o.ops << ") was " << want << ", now " << got << ": " << o.message;
    if (it != expected.end() && rank_of(got) < rank_of(want)) ++improved;
  }
  if (improved)
    std::cout << "  " << improved << " tests do better than tests/onnx/node_expected.txt says "
              << "(SOMA_ONNX_NODE_UPDATE=1 rewrites it)\n";
}
#endif  // SOMA_ONNX_NODE_EXPECTED
