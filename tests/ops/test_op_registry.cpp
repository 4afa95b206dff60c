// The registry-driven op suite: every registered op whose test entry (OpDef::test) names sample
// shapes gets, with no test written for it by hand,
//   Forward        outputs vs the entry's f64 reference, in f64 and f32 (and f16/bf16 for
//                  elementwise float ops), contiguous and strided inputs; for random ops (no
//                  reference): the same seed gives the same values, another seed other values;
//   Gradient       the tape's gradient vs central finite differences in f64;
//   GraphEqualsEager  the op as a graph node (placeholders, Session) vs the eager call, within
//                  1 ulp;
//   CudaEqualsCpu  the op on CUDA tensors vs the CPU, within the dtype's tolerance (skips
//                  without a GPU or a CUDA kernel);
//   CudaGradientEqualsCpu  the tape's gradients of the op (and so the CUDA kernels of every op
//                  its gradient is written with) on CUDA vs the CPU, in the dtypes of Forward,
//                  within ten times its tolerance (same skips);
//   GradientHarnessOnTheCpu  the same comparison CPU against CPU, to test the harness anywhere;
//   EmptyInputs    a zero-size variant of the sample: the shape (and values) of the reference,
//                  or a soma::Error where the reference refuses too;
//   NanAndInf      NaN/inf in every floating input: no crash, the same output shapes, and NaN
//                  out where NaN went in for elementwise unary float ops.
// The table test below keeps the list of ops without a test entry from growing.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "soma/cuda.hpp"
#include "soma/op_testing.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;

namespace {

// Registered ops without a test entry (test.shapes empty). A new op must come with one: raise
// this only with a reason, lower it whenever entries are added.
constexpr std::size_t kOpsWithoutTestEntry = 9;

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<std::string> tested_ops() {
  std::vector<std::string> names;
  for (const OpDef* d : all_ops())
    if (!d->test.shapes.empty()) names.push_back(d->name);
  return names;
}

std::string shapes_str(const std::vector<Shape>& shapes) {
  std::string s;
  for (const auto& sh : shapes) s += (s.empty() ? "" : ", ") + shape_str(sh);
  return s;
}

bool is_elementwise_float(const OpDef& d) {
  return (d.tags & (kElementwiseUnary | kElementwiseBinary)) != 0 && d.has(kFloatOnly);
}

const TestInputSpec* fixed_input(const OpDef& d, std::size_t i) {
  for (const auto& f : d.test.fixed_inputs)
    if (f.input == int(i)) return &f;
  return nullptr;
}
bool all_inputs_fixed(const OpDef& d) {
  for (std::size_t i = 0; i < d.test.shapes.size(); ++i)
    if (!fixed_input(d, i)) return false;
  return true;
}

// The dtypes the floating inputs are tested in.
std::vector<DType> test_dtypes(const OpDef& d) {
  if (all_inputs_fixed(d)) return {DType::f64};
  if (is_elementwise_float(d)) return {DType::f64, DType::f32, DType::f16, DType::bf16};
  return {DType::f64, DType::f32};
}

struct Tol {
  double atol, rtol;
};
Tol tol_of(DType t) {
  switch (t) {
    case DType::f64: return {1e-10, 1e-10};
    case DType::f32: return {1e-5, 1e-5};
    case DType::f16: return {2e-3, 2e-3};
    case DType::bf16: return {1e-2, 1e-2};
    default: return {0, 0};
  }
}
Tol looser(Tol a, Tol b) { return {std::max(a.atol, b.atol), std::max(a.rtol, b.rtol)}; }

std::uint64_t seed_of(const std::string& name, std::uint64_t salt) {
  std::uint64_t h = 1469598103934665603ull ^ salt;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool near_kink(const OpTestSpec& t, double v) {
  for (double k : t.kinks)
    if (std::abs(v - k) < t.min_gap) return true;
  return false;
}

// The sample inputs for these shapes: floating inputs in f64, uniform in [lo, hi] away from the
// kinks; fixed inputs in their own dtype.
std::vector<Tensor> sample(const OpDef& d, const std::vector<Shape>& shapes, std::uint64_t seed) {
  const OpTestSpec& t = d.test;
  std::mt19937_64 gen(seed);
  std::vector<Tensor> in;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::vector<double> v(std::size_t(numel(shapes[i])));
    if (const TestInputSpec* f = fixed_input(d, i)) {
      std::uniform_int_distribution<std::int64_t> dist(std::int64_t(f->lo), std::int64_t(f->hi));
      for (auto& x : v) x = f->dtype == DType::boolean ? double(dist(gen) > 0) : double(dist(gen));
      in.push_back(cast(constant(v, shapes[i]), f->dtype));
      continue;
    }
    std::uniform_real_distribution<double> dist(t.lo, t.hi);
    for (auto& x : v) {
      x = dist(gen);
      for (int tries = 0; tries < 1000 && near_kink(t, x); ++tries) x = dist(gen);
    }
    in.push_back(constant(v, shapes[i]));
  }
  // Ops whose inputs must be invertible, positive definite, ... map the samples onto such inputs.
  if (PrepareTestInputsFn prepare = test_inputs_prepare(d.name)) in = prepare(in);
  return in;
}

// The floating inputs in `dtype` (fixed ones as they are).
std::vector<Tensor> in_dtype(const OpDef& d, const std::vector<Tensor>& in, DType dtype) {
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < in.size(); ++i)
    out.push_back(fixed_input(d, i) ? in[i] : cast(in[i], dtype));
  return out;
}

std::vector<Tensor> reference(const OpDef& d, const std::vector<Tensor>& in) {
  return d.test.reference(in_dtype(d, in, DType::f64), d.test.attrs);
}

std::vector<Tensor> run(const OpDef& d, const std::vector<Tensor>& in) {
  return call_op(d, in, d.test.attrs);
}

::testing::AssertionResult close_outputs(const std::vector<Tensor>& got,
                                         const std::vector<Tensor>& want, Tol tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " outputs, expected " << want.size();
  for (std::size_t k = 0; k < got.size(); ++k) {
    auto r = all_close(got[k], want[k], tol.atol, tol.rtol);
    if (!r) return r << " (output " << k << ")";
  }
  return ::testing::AssertionSuccess();
}

// Distance in units in the last place of `t` (0 for equal values, NaN == NaN).
std::uint64_t ulps(double a, double b, DType t) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : ~0ull;
  if (a == b) return 0;
  auto ordered = [t](double v) -> std::int64_t {
    std::int64_t bits = 0, sign = 0;
    switch (t) {
      case DType::f64: {
        auto u = std::bit_cast<std::uint64_t>(v);
        sign = std::int64_t(u >> 63);
        bits = std::int64_t(u & 0x7fffffffffffffffull);
        break;
      }
      case DType::f32: {
        auto u = std::bit_cast<std::uint32_t>(float(v));
        sign = u >> 31;
        bits = u & 0x7fffffffu;
        break;
      }
      case DType::f16: {
        auto u = Half(float(v)).bits;
        sign = u >> 15;
        bits = u & 0x7fff;
        break;
      }
      case DType::bf16: {
        auto u = BFloat16(float(v)).bits;
        sign = u >> 15;
        bits = u & 0x7fff;
        break;
      }
      default: return std::int64_t(v);  // integers: the distance is the difference
    }
    return sign ? -bits : bits;
  };
  std::int64_t x = ordered(a), y = ordered(b);
  return std::uint64_t(x > y ? x - y : y - x);
}

::testing::AssertionResult within_ulps(const std::vector<Tensor>& got,
                                       const std::vector<Tensor>& want, std::uint64_t max_ulps) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " outputs, expected " << want.size();
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (got[k].shape() != want[k].shape() || got[k].dtype() != want[k].dtype())
      return ::testing::AssertionFailure()
             << "output " << k << ": " << shape_str(got[k].shape()) << " " << got[k].dtype()
             << " vs " << shape_str(want[k].shape()) << " " << want[k].dtype();
    std::vector<double> a = got[k].to_vector<double>(), b = want[k].to_vector<double>();
    for (std::size_t i = 0; i < a.size(); ++i)
      if (ulps(a[i], b[i], got[k].dtype()) > max_ulps)
        return ::testing::AssertionFailure() << "output " << k << " element " << i << ": " << a[i]
                                             << " vs " << b[i] << " (more than " << max_ulps
                                             << " ulp apart)";
  }
  return ::testing::AssertionSuccess();
}

class Op : public ::testing::TestWithParam<std::string> {
 protected:
  const OpDef& def() const { return get_op(GetParam()); }
  std::vector<Tensor> sample_inputs(std::uint64_t salt = 0) const {
    return sample(def(), def().test.shapes, seed_of(GetParam(), salt));
  }
};

// ---- a. forward vs the reference ----
TEST_P(Op, Forward) {
  const OpDef& d = def();
  const std::vector<Tensor> base = sample_inputs();
  if (!d.test.reference) {
    if (!d.has(kRandom)) GTEST_SKIP() << d.name << "'s test entry has no reference";
    // Random ops: the seed (attrs) fixes the values; another seed changes them.
    for (DType dt : test_dtypes(d)) {
      SCOPED_TRACE(dtype_name(dt));
      auto in = in_dtype(d, base, dt);
      EXPECT_TRUE(within_ulps(run(d, in), run(d, in), 0)) << "same seed, different values";
      Attrs other = d.test.attrs;
      other.set("seed", std::int64_t(12345));
      EXPECT_FALSE(within_ulps(call_op(d, in, other), run(d, in), 0)) << "another seed, same values";
    }
    return;
  }
  for (DType dt : test_dtypes(d)) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt));
    const auto in = in_dtype(d, base, dt);
    const auto want = reference(d, in);
    const auto got = run(d, in);
    Tol tol = tol_of(dt);
    for (const auto& g : got) tol = looser(tol, tol_of(g.dtype()));
    EXPECT_TRUE(close_outputs(got, want, tol)) << "inputs " << shapes_str(d.test.shapes);
    // The same values in strided (non-contiguous) inputs.
    std::vector<Tensor> strided;
    for (const auto& t : in) strided.push_back(soma::testing::noncontiguous(t));
    EXPECT_TRUE(close_outputs(run(d, strided), want, tol)) << "non-contiguous inputs";
  }
}

// ---- b. gradient vs central differences (f64) ----
TEST_P(Op, Gradient) {
  const OpDef& d = def();
  if (!d.grad) GTEST_SKIP() << d.name << " is not differentiable (no gradient definition)";
  if (!d.test.gradcheck) GTEST_SKIP() << d.name << "'s test entry turns the gradient check off";
  const std::vector<Tensor> x0 = sample_inputs();
  std::vector<std::size_t> wrt;
  for (std::size_t i = 0; i < x0.size(); ++i)
    if (!fixed_input(d, i)) wrt.push_back(i);
  ASSERT_FALSE(wrt.empty());

  // L(x) = sum_k <out_k(x), w_k> for fixed random weights w_k.
  std::vector<Tensor> ws;
  std::vector<std::vector<double>> wv;
  {
    auto outs = run(d, x0);
    for (std::size_t k = 0; k < outs.size(); ++k) {
      ws.push_back(soma::testing::rand_tensor(outs[k].shape(), 99 + k, -1.0, 1.0));
      wv.push_back(ws.back().to_vector<double>());
    }
  }
  auto loss_value = [&](const std::vector<Tensor>& in) {
    auto outs = run(d, in);
    double s = 0;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      if (!is_floating(outs[k].dtype())) continue;
      std::vector<double> v = outs[k].to_vector<double>();
      for (std::size_t j = 0; j < v.size(); ++j) s += v[j] * wv[k][j];
    }
    return s;
  };

  std::vector<Tensor> xs = x0, grads;
  {
    GradientTape tape;
    std::vector<Tensor> srcs;
    for (auto i : wrt) {
      tape.watch(xs[i]);
      srcs.push_back(xs[i]);
    }
    auto outs = run(d, xs);
    Tensor loss = scalar(0.0, DType::f64);
    for (std::size_t k = 0; k < outs.size(); ++k)
      if (is_floating(outs[k].dtype()) && outs[k].numel() > 0)
        loss = loss + sum(multiply(outs[k], ws[k]));
    grads = tape.gradient(loss, srcs, UnconnectedGradients::Zero);
  }
  const double eps = 1e-6, tol = 1e-5;
  for (std::size_t k = 0; k < wrt.size(); ++k) {
    const std::size_t i = wrt[k];
    ASSERT_TRUE(grads[k].defined()) << "input " << i;
    ASSERT_EQ(grads[k].shape(), x0[i].shape()) << "gradient of input " << i;
    std::vector<double> xv = x0[i].to_vector<double>(), g = grads[k].to_vector<double>();
    for (std::size_t j = 0; j < xv.size(); ++j) {
      auto shifted = [&](double delta) {
        std::vector<double> v = xv;
        v[j] += delta;
        std::vector<Tensor> in = x0;
        in[i] = constant(v, x0[i].shape());
        return loss_value(in);
      };
      const double num = (shifted(eps) - shifted(-eps)) / (2 * eps);
      ASSERT_LE(std::abs(num - g[j]), tol * (1.0 + std::abs(num)))
          << "input " << i << " element " << j << ": tape " << g[j] << " vs finite difference "
          << num << " (inputs " << shapes_str(d.test.shapes) << ")";
    }
  }
}

// ---- c. graph == eager ----
std::vector<Tensor> run_as_graph(const OpDef& d, const std::vector<Tensor>& in) {
  Graph g;
  std::vector<Tensor> ph, outs;
  {
    GraphScope scope(g);
    for (std::size_t i = 0; i < in.size(); ++i)
      ph.push_back(g.placeholder(in[i].dtype(), in[i].shape(), "in" + std::to_string(i)));
    outs = call_op(d, ph, d.test.attrs);
  }
  Feeds feeds;
  for (std::size_t i = 0; i < in.size(); ++i) feeds.emplace_back(ph[i], in[i]);
  Session session(g);
  return session.run(outs, feeds);
}

TEST_P(Op, GraphEqualsEager) {
  const OpDef& d = def();
  if (d.has(kNoGraph)) GTEST_SKIP() << d.name << " is not recorded in graph mode (kNoGraph)";
  const std::vector<Tensor> base = sample_inputs();
  for (DType dt : test_dtypes(d)) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt));
    const auto in = in_dtype(d, base, dt);
    EXPECT_TRUE(within_ulps(run_as_graph(d, in), run(d, in), 1));
  }
}

// ---- d. CUDA == CPU ----
// Full f32 products on the GPU for the test's length (TF32 keeps 10 mantissa bits), restored
// even when the test throws.
struct Tf32Off {
  bool was = cuda::allow_tf32();
  Tf32Off() { cuda::set_allow_tf32(false); }
  ~Tf32Off() { cuda::set_allow_tf32(was); }
};

TEST_P(Op, CudaEqualsCpu) {
  const OpDef& d = def();
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason();
  if (!d.kernels[int(DeviceKind::CUDA)]) GTEST_SKIP() << d.name << " has no CUDA kernel";
  Tf32Off full_f32;  // full f32 products, comparable to the CPU's
  const std::vector<Tensor> base = sample_inputs();
  for (DType dt : test_dtypes(d)) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt));
    const auto in = in_dtype(d, base, dt);
    std::vector<Tensor> on_gpu;
    for (const auto& t : in) on_gpu.push_back(t.to(Device::cuda(0)));
    std::vector<Tensor> got;
    for (const auto& t : run(d, on_gpu)) {
      EXPECT_TRUE(t.device().is_cuda()) << "an output of " << d.name << " is on " << t.device().str();
      got.push_back(t.to(Device::cpu()));
    }
    const auto want = run(d, in);
    Tol tol = tol_of(dt);
    for (const auto& g : want) tol = looser(tol, tol_of(g.dtype()));
    EXPECT_TRUE(close_outputs(got, want, tol));
  }
}

// The tape's gradients of L = sum_k <out_k, w_k> with respect to the op's floating inputs, on
// whatever device `in` and `ws` are on.
std::vector<Tensor> tape_gradients(const OpDef& d, const std::vector<Tensor>& in,
                                   const std::vector<Tensor>& ws) {
  GradientTape tape;
  std::vector<Tensor> srcs;
  for (std::size_t i = 0; i < in.size(); ++i)
    if (!fixed_input(d, i)) {
      tape.watch(in[i]);
      srcs.push_back(in[i]);
    }
  auto outs = run(d, in);
  Tensor loss;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype()) || outs[k].numel() == 0) continue;
    Tensor term = sum(multiply(outs[k], cast(ws[k], outs[k].dtype())));
    loss = loss.defined() ? loss + term : term;
  }
  if (!loss.defined()) return {};
  return tape.gradient(loss, srcs, UnconnectedGradients::Zero);
}

// The op's tape gradients on `device` vs the CPU, in every dtype the op is tested in (f16 and
// bf16 too for elementwise float ops).
void expect_gradients_agree(const OpDef& d, const std::vector<Tensor>& base, Device device) {
  std::vector<Tensor> ws;
  for (const auto& o : run(d, base))
    ws.push_back(soma::testing::rand_tensor(o.shape(), 99 + ws.size(), -1.0, 1.0));
  for (DType dt : test_dtypes(d)) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt));
    const auto in = in_dtype(d, base, dt);
    const std::vector<Tensor> want = tape_gradients(d, in, ws);
    std::vector<Tensor> in_dev, ws_dev, got;
    for (const auto& t : in) in_dev.push_back(t.to(device));
    for (const auto& t : ws) ws_dev.push_back(t.to(device));
    for (const auto& g : tape_gradients(d, in_dev, ws_dev)) {
      EXPECT_EQ(g.device(), device) << "a gradient of " << d.name << " is on " << g.device().str();
      got.push_back(g.to(Device::cpu()));
    }
    // A gradient sums over outputs: ten times the forward tolerance.
    const Tol t = tol_of(dt);
    EXPECT_TRUE(close_outputs(got, want, {10 * t.atol, 10 * t.rtol}))
        << "gradients of inputs " << shapes_str(d.test.shapes);
  }
}

TEST_P(Op, CudaGradientEqualsCpu) {
  const OpDef& d = def();
  if (!cuda::is_available()) GTEST_SKIP() << "no usable GPU: " << cuda::unavailable_reason();
  if (!d.kernels[int(DeviceKind::CUDA)]) GTEST_SKIP() << d.name << " has no CUDA kernel";
  if (!d.grad) GTEST_SKIP() << d.name << " is not differentiable (no gradient definition)";
  if (!d.test.gradcheck) GTEST_SKIP() << d.name << "'s test entry turns the gradient check off";
  Tf32Off full_f32;
  expect_gradients_agree(d, sample_inputs(), Device::cuda(0));
}

// The same comparison with the CPU on both sides (runs everywhere): the harness gives one
// gradient per floating input and is deterministic. A CPU stand-in device goes here too.
TEST_P(Op, GradientHarnessOnTheCpu) {
  const OpDef& d = def();
  if (!d.grad) GTEST_SKIP() << d.name << " is not differentiable (no gradient definition)";
  if (!d.test.gradcheck) GTEST_SKIP() << d.name << "'s test entry turns the gradient check off";
  expect_gradients_agree(d, sample_inputs(), Device::cpu());
}

// ---- e. empty, NaN and inf inputs ----
// Zero-size variants of the sample shapes, tried in order.
std::vector<std::vector<Shape>> empty_variants(const std::vector<Shape>& shapes) {
  std::vector<std::vector<Shape>> vs;
  auto add = [&](std::vector<Shape> v) {
    if (v != shapes && std::find(vs.begin(), vs.end(), v) == vs.end()) vs.push_back(v);
  };
  std::vector<Shape> all_lead = shapes, first_lead = shapes, first_last = shapes, all_last = shapes;
  for (auto& s : all_lead)
    if (!s.empty()) s[0] = 0;
  for (auto& s : all_last)
    if (!s.empty()) s.back() = 0;
  if (!shapes[0].empty()) {
    first_lead[0][0] = 0;
    first_last[0].back() = 0;
  }
  add(all_lead);
  add(first_lead);
  add(first_last);
  add(all_last);
  return vs;
}

TEST_P(Op, EmptyInputs) {
  const OpDef& d = def();
  const auto variants = empty_variants(d.test.shapes);
  if (variants.empty()) GTEST_SKIP() << "only scalar inputs";
  const DType dt = all_inputs_fixed(d) ? DType::f64 : DType::f32;
  for (const auto& shapes : variants) {
    const auto in = in_dtype(d, sample(d, shapes, 1), dt);
    std::vector<TensorSpec> specs;
    for (const auto& t : in) specs.push_back({t.shape(), t.dtype()});
    std::vector<Tensor> want;
    try {
      d.infer(specs, d.test.attrs);  // the shape rule may be stricter than the reference
      if (d.test.reference) want = reference(d, in);
    } catch (const Error&) {
      continue;  // not a case the op accepts: try the next variant
    }
    SCOPED_TRACE("inputs " + shapes_str(shapes));
    std::vector<Tensor> got;
    try {
      got = run(d, in);
    } catch (const Error& e) {
      FAIL() << "refused: " << e.what();
    }
    if (d.test.reference) {
      EXPECT_TRUE(close_outputs(got, want, tol_of(dt)));
    } else {
      auto inferred = d.infer(specs, d.test.attrs);
      ASSERT_EQ(got.size(), inferred.size());
      for (std::size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k].shape(), inferred[k].shape);
    }
    return;
  }
  // The shape rule or the reference refuses every variant: the op must refuse the first with a
  // soma::Error (an op whose shape rule accepts what the reference refuses fails here).
  const auto in = in_dtype(d, sample(d, variants[0], 1), dt);
  EXPECT_THROW(run(d, in), Error) << "inputs " << shapes_str(variants[0])
                                  << ": the reference refuses them, the op does not";
}

TEST_P(Op, NanAndInf) {
  const OpDef& d = def();
  if (all_inputs_fixed(d)) GTEST_SKIP() << "no floating input";
  const std::vector<Tensor> base = sample_inputs();
  const double specials[] = {kNan, kInf, -kInf};
  for (DType dt : test_dtypes(d)) {
    SCOPED_TRACE(std::string("dtype ") + dtype_name(dt));
    std::vector<Tensor> in = in_dtype(d, base, dt);
    std::vector<std::vector<bool>> is_nan(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (fixed_input(d, i)) continue;
      std::vector<double> v = in[i].to_vector<double>();
      is_nan[i].assign(v.size(), false);
      for (std::size_t j = 0; j < v.size(); j += 2) {  // every other element: NaN, inf, -inf
        v[j] = specials[(j / 2) % 3];
        is_nan[i][j] = std::isnan(v[j]);
      }
      in[i] = cast(constant(v, in[i].shape()), dt);
    }
    const auto finite = run(d, in_dtype(d, base, dt));
    std::vector<Tensor> got;
    try {
      got = run(d, in);
    } catch (const Error& e) {
      FAIL() << "refused NaN/inf inputs: " << e.what();
    }
    ASSERT_EQ(got.size(), finite.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].shape(), finite[k].shape()) << "output " << k;
      std::vector<double> v = got[k].to_vector<double>();  // readable, no crash
      if (d.has(kElementwiseUnary) && d.has(kFloatOnly))
        for (std::size_t j = 0; j < v.size(); ++j)
          if (is_nan[0][j]) EXPECT_TRUE(std::isnan(v[j])) << "NaN in, " << v[j] << " out at " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, Op, ::testing::ValuesIn(tested_ops()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Op);

// ---- the table itself ----
TEST(OpRegistryTable, OpsWithoutATestEntryDoNotGrow) {
  std::vector<std::string> missing;
  for (const OpDef* d : all_ops())
    if (d->test.shapes.empty()) missing.push_back(d->name);
  std::string list;
  for (const auto& n : missing) list += " " + n;
  std::cout << missing.size() << " of " << all_ops().size()
            << " registered ops have no test entry:" << list << "\n";
  EXPECT_LE(missing.size(), kOpsWithoutTestEntry)
      << "a new op needs a test entry (OpDef::test): without one:" << list;
}

TEST(OpRegistryTable, EntriesAreWellFormed) {
  for (const OpDef* d : all_ops()) {
    const OpTestSpec& t = d->test;
    if (t.shapes.empty()) continue;
    SCOPED_TRACE(d->name);
    if (d->num_inputs >= 0) EXPECT_EQ(t.shapes.size(), std::size_t(d->num_inputs));
    EXPECT_TRUE(t.reference || d->has(kRandom)) << "only random ops may leave out the reference";
    EXPECT_LE(t.lo, t.hi);
    for (const auto& f : t.fixed_inputs) {
      EXPECT_TRUE(f.input >= 0 && std::size_t(f.input) < t.shapes.size()) << f.input;
      EXPECT_FALSE(is_floating(f.dtype)) << "fixed input " << f.input;
    }
  }
}

}  // namespace
