// The op suite in both modes: every op invocation below runs eagerly and as a traced graph
// (soma::function, with and without the optimisation passes), forward and, for floating
// outputs, its tape gradient; the results must be identical. The ops each case put into its
// graph are collected, and every registered op must be covered or excluded with a reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "../../src/internal/conv_bias_act.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::rand_tensor;

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct OpCase {
  std::string name;
  std::vector<Tensor> inputs;
  Fn f;
};

// gtest shows a case by its name (not as raw bytes).
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

Tensor pos(const Shape& s, std::uint64_t seed) { return rand_tensor(s, seed, 0.5, 2.0); }
Tensor any_(const Shape& s, std::uint64_t seed) { return rand_tensor(s, seed, -2.0, 2.0); }
Tensor boolean(const Shape& s, std::uint64_t seed) { return any_(s, seed) > 0.0; }

std::vector<OpCase> cases() {
  std::vector<OpCase> cs;
  auto unary = [&](const std::string& name, std::function<Tensor(const Tensor&)> f, Tensor x) {
    cs.push_back({name, {x}, [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; }});
  };
  auto binary = [&](const std::string& name, std::function<Tensor(const Tensor&, const Tensor&)> f,
                    Tensor a, Tensor b) {
    cs.push_back({name, {a, b}, [f](const std::vector<Tensor>& in) {
                    return std::vector<Tensor>{f(in[0], in[1])};
                  }});
  };
  const Shape s{3, 4};
  unary("abs", [](const Tensor& x) { return abs(x); }, any_(s, 1));
  unary("negative", [](const Tensor& x) { return negative(x); }, any_(s, 2));
  unary("sign", [](const Tensor& x) { return sign(x); }, any_(s, 3));
  unary("square", [](const Tensor& x) { return square(x); }, any_(s, 4));
  unary("reciprocal", [](const Tensor& x) { return reciprocal(x); }, pos(s, 5));
  unary("sqrt", [](const Tensor& x) { return sqrt(x); }, pos(s, 6));
  unary("rsqrt", [](const Tensor& x) { return rsqrt(x); }, pos(s, 7));
  unary("exp", [](const Tensor& x) { return exp(x); }, any_(s, 8));
  unary("log", [](const Tensor& x) { return log(x); }, pos(s, 9));
  unary("log1p", [](const Tensor& x) { return log1p(x); }, pos(s, 10));
  unary("expm1", [](const Tensor& x) { return expm1(x); }, any_(s, 11));
  unary("sin", [](const Tensor& x) { return sin(x); }, any_(s, 12));
  unary("cos", [](const Tensor& x) { return cos(x); }, any_(s, 13));
  unary("tanh", [](const Tensor& x) { return tanh(x); }, any_(s, 14));
  unary("erf", [](const Tensor& x) { return erf(x); }, any_(s, 15));
  unary("sigmoid", [](const Tensor& x) { return sigmoid(x); }, any_(s, 16));
  unary("relu", [](const Tensor& x) { return relu(x); }, any_(s, 17));
  unary("leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, any_(s, 18));
  unary("elu", [](const Tensor& x) { return elu(x, 0.7); }, any_(s, 19));
  unary("gelu", [](const Tensor& x) { return gelu(x); }, any_(s, 20));
  unary("softplus", [](const Tensor& x) { return softplus(x); }, any_(s, 21));
  unary("round", [](const Tensor& x) { return round(x * 3.0); }, any_(s, 22));
  unary("ceil", [](const Tensor& x) { return ceil(x); }, any_(s, 23));
  unary("floor", [](const Tensor& x) { return floor(x); }, any_(s, 24));
  unary("clip", [](const Tensor& x) { return clip(x, -0.5, 0.5); }, any_(s, 25));
  unary("cast", [](const Tensor& x) { return cast(x, DType::f32); }, any_(s, 26));
  unary("copy", [](const Tensor& x) { return copy(x); }, any_(s, 27));
  unary("stop_gradient", [](const Tensor& x) { return stop_gradient(x) * x; }, any_(s, 28));
  unary("logical_not", [](const Tensor& x) { return logical_not(x > 0.0); }, any_(s, 29));

  const Tensor a = any_(s, 30), b = any_({4}, 31), bp = pos({4}, 32);
  binary("add", [](const Tensor& x, const Tensor& y) { return x + y; }, a, b);
  binary("subtract", [](const Tensor& x, const Tensor& y) { return x - y; }, a, b);
  binary("multiply", [](const Tensor& x, const Tensor& y) { return x * y; }, a, b);
  binary("divide", [](const Tensor& x, const Tensor& y) { return x / y; }, a, bp);
  binary("floor_div", [](const Tensor& x, const Tensor& y) { return floor_div(x, y); }, a, bp);
  binary("mod", [](const Tensor& x, const Tensor& y) { return mod(x, y); }, a, bp);
  binary("pow", [](const Tensor& x, const Tensor& y) { return pow(x, y); }, pos(s, 33), b);
  binary("maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }, a, b);
  binary("minimum", [](const Tensor& x, const Tensor& y) { return minimum(x, y); }, a, b);
  binary("squared_difference", [](const Tensor& x, const Tensor& y) { return squared_difference(x, y); }, a, b);
  binary("equal", [](const Tensor& x, const Tensor& y) { return equal(round(x), round(y)); }, a, b);
  binary("not_equal", [](const Tensor& x, const Tensor& y) { return not_equal(round(x), round(y)); }, a, b);
  binary("less", [](const Tensor& x, const Tensor& y) { return less(x, y); }, a, b);
  binary("less_equal", [](const Tensor& x, const Tensor& y) { return less_equal(x, y); }, a, b);
  binary("greater", [](const Tensor& x, const Tensor& y) { return greater(x, y); }, a, b);
  binary("greater_equal", [](const Tensor& x, const Tensor& y) { return greater_equal(x, y); }, a, b);
  binary("logical_and", [](const Tensor& x, const Tensor& y) { return logical_and(x > 0.0, y > 0.0); }, a, b);
  binary("logical_or", [](const Tensor& x, const Tensor& y) { return logical_or(x > 0.0, y > 0.0); }, a, b);
  cs.push_back({"where", {boolean(s, 34), a, b}, [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{where(in[0], in[1], in[2])};
                }});

  const Tensor r = any_({3, 4, 5}, 40);
  unary("sum", [](const Tensor& x) { return sum(x, {1}); }, r);
  unary("mean", [](const Tensor& x) { return mean(x, {0, 2}, true); }, r);
  unary("prod", [](const Tensor& x) { return prod(x, {2}); }, r);
  unary("max", [](const Tensor& x) { return max(x, {1}); }, r);
  unary("min", [](const Tensor& x) { return min(x); }, r);
  unary("all", [](const Tensor& x) { return all(x > -1.5, {1}); }, r);
  unary("any", [](const Tensor& x) { return any(x > 1.5, {2}); }, r);
  unary("argmax", [](const Tensor& x) { return argmax(x, 1); }, r);
  unary("argmin", [](const Tensor& x) { return argmin(x, -1); }, r);
  unary("softmax", [](const Tensor& x) { return softmax(x, 1); }, r);
  unary("log_softmax", [](const Tensor& x) { return log_softmax(x, -1); }, r);
  unary("logsumexp", [](const Tensor& x) { return logsumexp(x, {2}); }, r);
  unary("variance", [](const Tensor& x) { return variance(x, {1}); }, r);
  unary("norm", [](const Tensor& x) { return norm(x, {2}); }, r);

  unary("reshape", [](const Tensor& x) { return reshape(x, {5, -1}) * 2.0; }, r);
  unary("transpose", [](const Tensor& x) { return transpose(x, {2, 0, 1}) * 2.0; }, r);
  unary("broadcast_to", [](const Tensor& x) { return broadcast_to(x, {2, 3, 4, 5}) * 2.0; }, r);
  unary("slice", [](const Tensor& x) { return x.slice({Slice{1, 3}, Slice{}, Slice{0, 5, 2}}) * 2.0; }, r);
  unary("squeeze/expand_dims", [](const Tensor& x) { return squeeze(expand_dims(x, 1), {1}) * 2.0; }, r);
  unary("split", [](const Tensor& x) {
    auto p = split(x, std::vector<std::int64_t>{1, 3}, 1);
    return p[0] * 2.0 + sum(p[1], {1}, true);
  }, r);
  unary("unstack", [](const Tensor& x) { auto p = unstack(x, 0); return p[0] * p[2] + p[1]; }, r);
  unary("tile", [](const Tensor& x) { return tile(x, {1, 2, 1}); }, r);
  unary("pad", [](const Tensor& x) { return pad(x, {{0, 1}, {2, 0}, {1, 1}}, 0.5); }, r);
  cs.push_back({"concat", {a, any_({2, 4}, 41)}, [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{concat({in[0], in[1]}, 0)};
                }});
  cs.push_back({"stack", {a, any_(s, 42)}, [](const std::vector<Tensor>& in) {
                  return std::vector<Tensor>{stack({in[0], in[1]}, 1)};
                }});
  cs.push_back({"gather", {r, constant<std::int64_t>({2, 0, 2, 1})},
                [](const std::vector<Tensor>& in) { return std::vector<Tensor>{gather(in[0], in[1], 0)}; }});
  cs.push_back({"one_hot", {constant<std::int64_t>({2, 0, 1})},
                [](const std::vector<Tensor>& in) { return std::vector<Tensor>{one_hot(in[0], 4)}; }});
  unary("diag", [](const Tensor& x) { return diag(x) * 2.0; }, any_({4, 4}, 43));
  unary("trace", [](const Tensor& x) { return trace(x); }, any_({4, 4}, 44));

  binary("matmul", [](const Tensor& x, const Tensor& y) { return matmul(x, y); }, any_({2, 3, 4}, 45), any_({4, 5}, 46));
  binary("tensordot", [](const Tensor& x, const Tensor& y) { return tensordot(x, y, 1); }, any_({3, 4}, 47), any_({4, 2}, 48));
  binary("einsum", [](const Tensor& x, const Tensor& y) { return einsum("ij,kj->ik", {x, y}); }, any_({3, 4}, 49), any_({2, 4}, 50));

  const Tensor img = any_({2, 3, 6, 6}, 60), ker = any_({4, 3, 3, 3}, 61);
  binary("conv2d", [](const Tensor& x, const Tensor& w) { return conv2d(x, w, 1, "same"); }, img, ker);
  binary("conv2d_strided", [](const Tensor& x, const Tensor& w) { return conv2d(x, w, 2, "valid"); }, img, ker);
  binary("conv2d_transpose", [](const Tensor& x, const Tensor& w) { return conv2d_transpose(x, w, 2, "same"); },
         any_({2, 3, 3, 3}, 62), any_({3, 2, 3, 3}, 63));
  unary("max_pool2d", [](const Tensor& x) { return max_pool2d(x, 2); }, img);
  unary("avg_pool2d", [](const Tensor& x) { return avg_pool2d(x, 3, 1, "same"); }, img);
  binary("max_pool2d_grad", [](const Tensor& x, const Tensor& g) { return max_pool2d_grad(x, g, 2); },
         img, any_({2, 3, 3, 3}, 64));
  // Conv2D's fused forward (internal op), with and without its ReLU.
  for (bool relu : {true, false})
    cs.push_back({relu ? "conv2d_bias_act_relu" : "conv2d_bias_act", {img, ker, any_({4}, 65)},
                  [relu](const std::vector<Tensor>& in) {
                    return std::vector<Tensor>{
                        detail::conv2d_bias_act(in[0], in[1], in[2], 1, "same", 1, 1, relu)};
                  }});
  // Dense's forward op, with and without its ReLU.
  for (bool relu : {true, false})
    cs.push_back({relu ? "dense_bias_act_relu" : "dense_bias_act",
                  {any_({2, 3, 4}, 66), any_({4, 5}, 67), any_({5}, 68)},
                  [relu](const std::vector<Tensor>& in) {
                    return std::vector<Tensor>{
                        call_op1(get_op("dense_bias_act"), {in[0], in[1], in[2]},
                                 {{"activation", std::string(relu ? "relu" : "linear")}})};
                  }});
  return cs;
}

// Ops no case can put into a graph, with the reason.
// Random ops draw anew at every run, so a graph result cannot equal an eager one; they are
// tested in test_graph_runtime.cpp (first run equals the eager draw, later runs differ).
const std::map<std::string, std::string> kExcluded = {
    {"random_uniform", "random: test_graph_runtime.cpp"},
    {"random_normal", "random: test_graph_runtime.cpp"},
    {"truncated_normal", "random: test_graph_runtime.cpp"},
    // In-place optimiser updates: no output to compare; test_optim.cpp checks each rule.
    {"sgd_update", "in-place update: test_optim.cpp"},
    {"adam_update", "in-place update: test_optim.cpp"},
    {"nadam_update", "in-place update: test_optim.cpp"},
    {"rmsprop_update", "in-place update: test_optim.cpp"},
    {"adagrad_update", "in-place update: test_optim.cpp"}};

std::vector<Tensor> grads_of(const Fn& f, const std::vector<Tensor>& in, const Tensor& weights_seed_like) {
  (void)weights_seed_like;
  GradientTape tape;
  std::vector<Tensor> watched;
  for (const auto& t : in)
    if (is_floating(t.dtype())) {
      tape.watch(t);
      watched.push_back(t);
    }
  Tensor y = f(in)[0];
  // A fixed, non-uniform weighting so every output element's gradient matters; y * y makes the
  // incoming gradient depend on the inputs (a constant one would be computed at tracing time).
  Tensor w = cast(arange(0.0, double(y.numel())) * 0.01 + 0.5, y.dtype());
  Tensor l = sum(y * y * reshape(w, y.shape()));
  std::vector<Tensor> g = tape.gradient(l, watched, UnconnectedGradients::Zero);
  return g;
}

void collect_ops(const Graph& g, std::set<std::string>& ops) {
  for (const auto& n : g.nodes())
    if (n.op) ops.insert(n.op->name);
}

}  // namespace

class GraphOps : public ::testing::TestWithParam<OpCase> {};

TEST_P(GraphOps, GraphResultEqualsEagerResult) {
  const OpCase& c = GetParam();
  std::vector<Tensor> eager = c.f(c.inputs);
  for (bool optimize : {true, false}) {
    Function traced = function(c.f, {.optimize = optimize});
    for (int call = 0; call < 2; ++call) {  // tracing call, then a run of the cached plan
      std::vector<Tensor> got = traced(c.inputs);
      ASSERT_EQ(got.size(), eager.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].dtype(), eager[i].dtype());
        EXPECT_TRUE(all_close(got[i], eager[i], 0, 0)) << c.name << " output " << i
                                                       << (optimize ? " (optimised)" : "");
      }
    }
  }
}

TEST_P(GraphOps, GraphGradientEqualsEagerGradient) {
  const OpCase& c = GetParam();
  if (!is_floating(c.f(c.inputs)[0].dtype())) GTEST_SKIP() << "not differentiable";
  Fn gf = [f = c.f](const std::vector<Tensor>& in) { return grads_of(f, in, Tensor()); };
  std::vector<Tensor> eager = gf(c.inputs);
  Function traced = function(gf);
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> got = traced(c.inputs);
    ASSERT_EQ(got.size(), eager.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(all_close(got[i], eager[i], 0, 0)) << c.name << " gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, GraphOps, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<OpCase>& i) {
                           std::string n = i.param.name;
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(GraphOpsCoverage, EveryRegisteredOpIsCoveredOrExcluded) {
  std::set<std::string> covered;
  for (const auto& c : cases()) {
    Function f = function(c.f);
    collect_ops(f.graph_for(c.inputs), covered);
    if (is_floating(c.f(c.inputs)[0].dtype())) {
      Function gf = function([f = c.f](const std::vector<Tensor>& in) { return grads_of(f, in, Tensor()); });
      collect_ops(gf.graph_for(c.inputs), covered);
      // Second order: the gradient's own gradient (max_pool2d_grad_grad and friends).
      Function ggf = function([f = c.f](const std::vector<Tensor>& in) {
        Fn inner = [f](const std::vector<Tensor>& x) { return grads_of(f, x, Tensor()); };
        std::vector<Tensor> g = grads_of(inner, in, Tensor());
        return g;
      });
      if (c.name == "max_pool2d_grad" || c.name == "max_pool2d") collect_ops(ggf.graph_for(c.inputs), covered);
    }
  }
  std::string missing;
  // An op with a test table entry (OpDef::test) is covered by the registry-driven suite
  // (tests/ops: graph == eager for every such op).
  for (const auto& op : registered_ops())
    if (!covered.count(op) && !kExcluded.count(op) && get_op(op).test.shapes.empty())
      missing += " " + op;
  EXPECT_TRUE(missing.empty()) << "registered ops with no graph-mode case in test_graph_ops.cpp "
                                  "(add a case, or an exclusion with the reason):"
                               << missing;
}
