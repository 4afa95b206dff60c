// Runtime ISA dispatch (issue 27): the instruction set the CPU kernels run with is reported,
// SOMA_ISA lowers it (and an unknown value is an error naming SOMA_ISA), and every target this
// CPU supports computes what the baseline target computes: bit for bit where the op is exact
// (copies, conversions, + - * /, sqrt, max), within a few ulps where FMA contraction or a
// different vector width may round differently (softmax, the optimiser update, exp).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <string>
#include <vector>

#include "../../src/backend/cpu/fused_block.hpp"
#include "../../src/internal/cpu_isa.hpp"
#include "test_support.hpp"
#include <soma/cpu_isa.hpp>
#include <soma/soma.hpp>

namespace soma {
namespace {

using detail::Isa;
using testing::all_close;
using testing::rand_tensor;

// Runs this test binary again with SOMA_ISA=value on one test; 0 when that test ran and passed.
int run_child(const std::string& value, const std::string& test, const std::string& expect) {
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return -1;
  const std::string cmd = "SOMA_ISA='" + value + "' SOMA_ISA_EXPECT='" + expect + "' '" + self +
                          "' --gtest_filter=IsaDispatchChild." + test + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  const int status = pclose(p);
  // (a filter that matched nothing would also exit 0)
  if (status != 0 || out.find("[  PASSED  ] 1 test") == std::string::npos) {
    std::printf("%s\n", out.c_str());
    return status != 0 ? status : -1;
  }
  return 0;
}

const char* expect_env() { return std::getenv("SOMA_ISA_EXPECT"); }

TEST(IsaDispatch, ReportsTheChosenTarget) {
  const std::string isa = cpu_isa();
  EXPECT_TRUE(isa == "baseline" || isa == "avx" || isa == "avx2" || isa == "avx512") << isa;
  EXPECT_EQ(isa, detail::isa_name(detail::active_isa()));
  const std::string s = cpu_isa_summary();
  EXPECT_EQ(s.rfind(isa, 0), 0u) << s;
  EXPECT_NE(s.find("cpu supports: baseline"), std::string::npos) << s;
  // Without SOMA_ISA, the best target both the CPU and the build have.
  if (!std::getenv("SOMA_ISA")) {
    Isa best = detail::cpu_best_isa();
    if (int(detail::compiled_isa_max()) < int(best)) best = detail::compiled_isa_max();
    if (int(best) < int(detail::compiled_isa_min())) best = detail::compiled_isa_min();
    EXPECT_EQ(isa, detail::isa_name(best));
  }
}

TEST(IsaDispatch, ParsesTheTargetNames) {
  for (int i = 0; i < detail::kIsaCount; ++i)
    EXPECT_EQ(detail::parse_isa(detail::isa_name(Isa(i))), Isa(i));
  try {
    detail::parse_isa("avx3");
    FAIL() << "no error for an unknown target";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("SOMA_ISA"), std::string::npos) << m;
    EXPECT_NE(m.find("'avx3'"), std::string::npos) << m;
    EXPECT_NE(m.find("baseline, avx, avx2 or avx512"), std::string::npos) << m;
  }
}

// The children: run only through run_child (SOMA_ISA_EXPECT set), skipped otherwise.
TEST(IsaDispatchChild, Reports) {
  if (!expect_env()) GTEST_SKIP() << "run by IsaDispatch.EnvironmentLowersTheTarget";
  EXPECT_EQ(cpu_isa(), expect_env());
  Tensor y = add(ones({3}), ones({3}));  // the kernels run
  EXPECT_EQ(y.data<float>()[0], 2.0f);
}
TEST(IsaDispatchChild, RejectsAnUnknownValue) {
  if (!expect_env()) GTEST_SKIP() << "run by IsaDispatch.EnvironmentRejectsUnknownValues";
  for (int attempt = 0; attempt < 2; ++attempt) {  // every call fails, not only the first
    try {
      (void)add(ones({3}), ones({3}));
      FAIL() << "no error for SOMA_ISA=" << std::getenv("SOMA_ISA");
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("SOMA_ISA"), std::string::npos) << m;
      EXPECT_NE(m.find("baseline, avx, avx2 or avx512"), std::string::npos) << m;
    }
  }
}

TEST(IsaDispatch, EnvironmentLowersTheTarget) {
  const Isa best = detail::active_isa();
  // Lowering gives the named target where it is compiled; a value above the CPU's gives the
  // CPU's (never raised).
  for (int i = 0; i < detail::kIsaCount; ++i) {
    Isa want = Isa(i);
    Isa got = want;
    if (int(detail::cpu_best_isa()) < int(got)) got = detail::cpu_best_isa();
    if (int(detail::compiled_isa_max()) < int(got)) got = detail::compiled_isa_max();
    if (int(got) < int(detail::compiled_isa_min())) got = detail::compiled_isa_min();
    EXPECT_EQ(run_child(detail::isa_name(want), "Reports", detail::isa_name(got)), 0)
        << "SOMA_ISA=" << detail::isa_name(want) << " should run " << detail::isa_name(got);
  }
  EXPECT_EQ(detail::active_isa(), best);  // the parent's own choice is untouched
}

TEST(IsaDispatch, EnvironmentRejectsUnknownValues) {
  EXPECT_EQ(run_child("sse9", "RejectsAnUnknownValue", "error"), 0);
  EXPECT_EQ(run_child("AVX2", "RejectsAnUnknownValue", "error"), 0);  // names are lower case
}

// ---- every supported target against the baseline ---------------------------------------------

Tensor f32(const Tensor& t) { return cast(t, DType::f32); }

struct Results {
  std::vector<Tensor> exact;  // compared bit for bit
  std::vector<Tensor> close;  // compared within a few ulps
};

// Float chains for the fused-block loops (src/graph/session.cpp runs them): ((a * b) + 0.5)
// minus a, sqrt of its abs, divided by b; once over L1-sized blocks (fused_block_op) and
// once in registers (fused_chain_in_registers where the target has it).
std::vector<float> fused_chain(const std::vector<float>& a, const std::vector<float>& b,
                               bool registers) {
  const std::int64_t n = std::int64_t(a.size());
  std::vector<detail::FusedInstr> prog;
  auto instr = [&](const char* op, detail::FusedInstr::Kind k0, const float* p0,
                   detail::FusedInstr::Kind k1, const float* p1, float v1, int nargs) {
    detail::FusedInstr in = detail::fused_instr(op, Attrs{});
    EXPECT_NE(in.code, detail::FusedCode::Kernel) << op;
    in.nargs = nargs;
    in.kind[0] = k0;
    in.p[0] = p0;
    in.kind[1] = k1;
    in.p[1] = p1;
    in.v[1] = v1;
    prog.push_back(in);
  };
  using K = detail::FusedInstr;
  instr("multiply", K::Array, a.data(), K::Array, b.data(), 0, 2);
  instr("add", K::Chain, nullptr, K::Scalar, nullptr, 0.5f, 2);
  instr("subtract", K::Chain, nullptr, K::Array, a.data(), 0, 2);
  instr("abs", K::Chain, nullptr, K::Chain, nullptr, 0, 1);
  instr("sqrt", K::Chain, nullptr, K::Chain, nullptr, 0, 1);
  instr("divide", K::Chain, nullptr, K::Array, b.data(), 0, 2);
  std::vector<float> out(std::size_t(n), 0.0f);
  if (registers && detail::fused_chain_in_registers_available()) {
    detail::fused_chain_in_registers(prog.data(), int(prog.size()), out.data(), 0, n, false);
    return out;
  }
  // One op at a time over the whole range, as the block loop does per block.
  std::vector<float> cur(static_cast<std::size_t>(n)), tmp(static_cast<std::size_t>(n));
  for (const auto& in : prog) {
    const float* x = in.kind[0] == K::Chain ? cur.data() : in.p[0];
    const float* y = in.nargs < 2 ? nullptr : in.kind[1] == K::Chain ? cur.data()
                                            : in.kind[1] == K::Array ? in.p[1] : nullptr;
    detail::fused_block_op(in, tmp.data(), x, 0.0f, y, in.v[1], n);
    std::swap(cur, tmp);
  }
  return cur;
}

Results run_kernels() {
  Results r;
  // Elementwise, binary with broadcasting (a row operand, a column operand, a scalar) and
  // unary, odd sizes so that every vector loop has a tail.
  const Tensor a = f32(rand_tensor({37, 129}, 1, -2.0, 2.0));
  const Tensor b = f32(rand_tensor({129}, 2, 0.5, 2.0));
  const Tensor c = f32(rand_tensor({37, 1}, 3, -1.0, 1.0));
  r.exact.push_back(add(a, b));
  r.exact.push_back(multiply(a, c));
  r.exact.push_back(divide(a, b));
  r.exact.push_back(subtract(a, scalar(0.25)));
  r.exact.push_back(maximum(a, c));
  r.exact.push_back(relu(a));
  r.exact.push_back(sqrt(abs(a)));
  r.exact.push_back(greater(a, c));
  r.exact.push_back(add(cast(a, DType::f64), cast(b, DType::f64)));
  r.exact.push_back(add(cast(multiply(a, scalar(100.0)), DType::i32), cast(b, DType::i32)));
  r.close.push_back(exp(a));
  r.close.push_back(tanh(a));
  r.close.push_back(sigmoid(a));
  // Reductions and softmax.
  r.close.push_back(sum(a, {1}));
  r.close.push_back(sum(a, {0}));
  r.exact.push_back(max(a, {1}));
  r.close.push_back(mean(a));
  r.close.push_back(softmax(a, -1));
  r.close.push_back(log_softmax(a, 0));
  // f32 <-> bf16 / f16 conversions (copy.cpp) and 16-bit elementwise.
  const Tensor h = cast(a, DType::f16), bh = cast(a, DType::bf16);
  r.exact.push_back(h);
  r.exact.push_back(bh);
  r.exact.push_back(cast(h, DType::f32));
  r.exact.push_back(cast(bh, DType::f32));
  r.exact.push_back(add(h, cast(b, DType::f16)));
  r.exact.push_back(add(bh, cast(b, DType::bf16)));
  // An optimiser update (in place on fresh tensors): Adam.
  Tensor var = f32(rand_tensor({1001}, 4)), g = f32(rand_tensor({1001}, 5));
  Tensor m = f32(rand_tensor({1001}, 6, -0.1, 0.1)), v = f32(rand_tensor({1001}, 7, 0.0, 0.1));
  Attrs at;
  at.set("alpha", 1e-3).set("beta_1", 0.9).set("beta_2", 0.999).set("epsilon", 1e-7)
      .set("decay", 0.0);
  call_op(get_op("adam_update"), {var, g, m, v}, at);
  r.close.push_back(var);
  r.close.push_back(m);
  r.close.push_back(v);
  // The fused blocks of graph mode.
  const Tensor fa = f32(rand_tensor({1000}, 8, -2.0, 2.0)), fb = f32(rand_tensor({1000}, 9, 0.5, 2.0));
  const std::vector<float> va(fa.data<float>(), fa.data<float>() + 1000);
  const std::vector<float> vb(fb.data<float>(), fb.data<float>() + 1000);
  for (bool registers : {false, true}) {
    const std::vector<float> o = fused_chain(va, vb, registers);
    Tensor t = Tensor::empty({1000}, DType::f32);
    std::memcpy(t.data<float>(), o.data(), o.size() * sizeof(float));
    r.exact.push_back(t);
  }
  return r;
}

bool same_bits(const Tensor& x, const Tensor& y) {
  return x.dtype() == y.dtype() && x.shape() == y.shape() && x.is_contiguous() &&
         y.is_contiguous() &&
         std::memcmp(x.raw_data(), y.raw_data(), std::size_t(x.numel()) * dtype_size(x.dtype())) ==
             0;
}

// Restores the start-up choice after a test that switches.
struct IsaScope {
  Isa saved = detail::active_isa();
  ~IsaScope() { detail::select_cpu_isa(saved); }
};

TEST(IsaDispatch, EveryTargetComputesWhatTheBaselineComputes) {
  IsaScope scope;
  // One target only: a -march=native build, or clang (the sanitizer builds), which compiles the
  // baseline pass alone.
  if (detail::compiled_isa_min() == detail::compiled_isa_max() ||
      detail::select_cpu_isa(Isa::baseline) != Isa::baseline)
    GTEST_SKIP() << "this build has one target only: " << cpu_isa_summary();
  const Results base = run_kernels();
  int compared = 0;
  for (int i = 1; i <= int(detail::cpu_best_isa()); ++i) {
    const Isa isa = Isa(i);
    ASSERT_EQ(detail::select_cpu_isa(isa), isa);
    ASSERT_EQ(cpu_isa(), detail::isa_name(isa));
    const Results got = run_kernels();
    ASSERT_EQ(got.exact.size(), base.exact.size());
    for (std::size_t k = 0; k < base.exact.size(); ++k)
      EXPECT_TRUE(same_bits(got.exact[k], base.exact[k]))
          << detail::isa_name(isa) << ": exact result " << k << " differs from baseline";
    for (std::size_t k = 0; k < base.close.size(); ++k)
      EXPECT_TRUE(all_close(cast(got.close[k], DType::f64), cast(base.close[k], DType::f64),
                            1e-6, 1e-5))
          << detail::isa_name(isa) << ": result " << k;
    ++compared;
  }
  std::printf("compared %d target(s) above baseline (%s)\n", compared, cpu_isa_summary().c_str());
}

// The dispatched kernels really differ per target (the test above would pass trivially if every
// target ran the baseline code): the fused chain in registers exists exactly from avx up.
TEST(IsaDispatch, TargetsRunTheirOwnCode) {
  IsaScope scope;
  if (detail::compiled_isa_min() == detail::compiled_isa_max() ||
      detail::select_cpu_isa(Isa::baseline) != Isa::baseline)
    GTEST_SKIP() << "one target only: " << cpu_isa_summary();
  EXPECT_FALSE(detail::fused_chain_in_registers_available());
  if (int(detail::cpu_best_isa()) >= int(Isa::avx)) {
    detail::select_cpu_isa(Isa::avx);
    EXPECT_TRUE(detail::fused_chain_in_registers_available());
  }
}

}  // namespace
}  // namespace soma
