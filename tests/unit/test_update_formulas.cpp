// The optimiser update rules of src/ops/update_formulas.hpp (the CUDA update kernels' per-element
// formula) applied on the host, element by element, against the update ops' CPU kernels: the
// fused loops and the composites, over several steps, for every variant the ops support (weight
// decay, momentum, Nesterov, AMSGrad, centered RMSprop), f32 and f64.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "../../src/ops/update_formulas.hpp"
#include "soma/optim/optimizer.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"
#include "update_cases.hpp"

using namespace soma;
using soma::testing::all_close;
using namespace soma::update_cases;

namespace {

// The rule of `op` for attributes `a` applied to every element: v[0] the variable, v[1] the
// gradient, then the op's slot inputs in order.
template <class T>
void apply_rule(const std::string& op, const Attrs& a, std::vector<std::vector<T>>& v) {
  const std::size_t n = v[0].size();
  std::vector<T> unused(n, T(0));
  auto slot = [&](std::size_t i) -> std::vector<T>& { return i < v.size() ? v[i] : unused; };
  auto each = [&](const auto& rule, std::vector<T>& s0, std::vector<T>& s1, std::vector<T>& s2) {
    for (std::size_t i = 0; i < n; ++i) rule(v[0][i], v[1][i], s0[i], s1[i], s2[i]);
  };
  if (op == "sgd_update") {
    each(upd::Sgd<T>::make(a.f("lr"), a.f("decay"), a.f("momentum"), a.b("nesterov")), slot(2),
         unused, unused);
  } else if (op == "adam_update") {
    each(upd::Adam<T>::make(a.f("alpha"), a.f("beta_1"), a.f("beta_2"), a.f("epsilon"),
                            a.f("decay"), v.size() == 5),
         v[2], v[3], slot(4));
  } else if (op == "nadam_update") {
    each(upd::Nadam<T>::make(a.f("lr"), a.f("beta_1"), a.f("beta_2"), a.f("k_m"), a.f("k_g"),
                             a.f("k_v"), a.f("epsilon"), a.f("decay")),
         v[2], v[3], unused);
  } else if (op == "rmsprop_update") {
    const bool centered = a.b("centered"), mom = a.f("momentum") > 0.0;
    each(upd::Rmsprop<T>::make(a.f("lr"), a.f("rho"), a.f("epsilon"), a.f("momentum"), centered,
                               a.f("decay")),
         v[2], centered ? v[3] : unused, mom ? v[centered ? 4 : 3] : unused);
  } else if (op == "adagrad_update") {
    each(upd::Adagrad<T>::make(a.f("lr"), a.f("epsilon"), a.f("decay")), v[2], unused, unused);
  } else {
    FAIL() << "no rule for " << op;
  }
}

// kSteps of the op on the CPU (fused or composite kernel): the variable and slots at the end.
std::vector<Tensor> run_op(const UpdateCase& c, DType t, bool fused) {
  FusedKernels k(fused);
  std::vector<Tensor> s = initial_state(c, t);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<Tensor> in{s[0], gradient(step, t)};
    in.insert(in.end(), s.begin() + 1, s.end());
    call_op(get_op(c.op), in, c.attrs(step));
  }
  return s;
}

template <class T>
std::vector<std::vector<T>> run_rule(const UpdateCase& c, DType t) {
  std::vector<Tensor> s = initial_state(c, t);
  std::vector<std::vector<T>> v;
  for (const Tensor& x : s) v.push_back(x.to_vector<T>());
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<T>> in{v[0], gradient(step, t).to_vector<T>()};
    in.insert(in.end(), v.begin() + 1, v.end());
    apply_rule<T>(c.op, c.attrs(step), in);
    v[0] = in[0];
    for (std::size_t i = 1; i < v.size(); ++i) v[i] = in[i + 1];
  }
  return v;
}

template <class T>
void check_all(DType t, double tol) {
  for (const UpdateCase& c : all_cases()) {
    const std::vector<std::vector<T>> want = run_rule<T>(c, t);
    for (bool fused : {true, false}) {
      const std::vector<Tensor> got = run_op(c, t, fused);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        std::vector<double> expected(want[i].begin(), want[i].end());
        EXPECT_TRUE(all_close(got[i], expected, tol, tol))
            << c.name << (fused ? " (fused CPU kernel)" : " (composite)")
            << (i == 0 ? ": the variable" : ": slot ") << (i == 0 ? "" : std::to_string(i - 1));
      }
    }
  }
}

}  // namespace

TEST(UpdateFormulas, F32RulesMatchTheCpuKernelsAndComposites) { check_all<float>(DType::f32, 2e-6); }

TEST(UpdateFormulas, F64RulesMatchTheCpuKernelsAndComposites) {
  check_all<double>(DType::f64, 1e-13);
}

// The step scalars of FitOptions::cuda_graph (values in a tensor instead of attributes): the
// same results, fused loop and composite, f32 and f64.
TEST(UpdateFormulas, StepScalarsGiveTheAttributesResults) {
  for (DType t : {DType::f32, DType::f64})
    for (bool fused : {true, false}) EXPECT_TRUE(step_scalars_match(Device::cpu(), t, fused));
}

// The rules really change the state (a table of no-op rules would pass the tests above only if
// the kernels were no-ops too; this pins the direction of one Adam and one SGD step).
TEST(UpdateFormulas, OneStepByHand) {
  float p = 1.0f, m = 0.0f, v = 0.0f, unused = 0.0f;
  upd::Adam<float>::make(0.1, 0.9, 0.999, 1e-7, 0.0, false)(p, 2.0f, m, v, unused);
  EXPECT_FLOAT_EQ(m, 0.2f);
  EXPECT_NEAR(v, 0.004f, 1e-7f);
  EXPECT_NEAR(p, 1.0f - 0.1f * 0.2f / (std::sqrt(0.004f) + 1e-7f), 1e-6f);
  double q = 2.0, mom = 1.0, u = 0.0;
  upd::Sgd<double>::make(0.5, 0.1, 0.9, true)(q, 1.0, mom, u, u);
  // decay: 2 - 0.2 = 1.8; m = -0.5 + 0.9 = 0.4; nesterov: 1.8 + (-0.5 + 0.36) = 1.66
  EXPECT_DOUBLE_EQ(mom, 0.4);
  EXPECT_NEAR(q, 1.66, 1e-15);
}
