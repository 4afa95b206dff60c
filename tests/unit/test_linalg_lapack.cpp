// soma::linalg (solve, inv, det, slogdet, cholesky, qr, svd, eigh through LAPACK): known answers,
// the identities each decomposition satisfies (A inv(A) = I, Q^T Q = I, U S Vh = A, ...) on
// batched f32/f64 inputs, refusals (singular, not positive definite, wrong shapes or dtypes),
// NaN propagation, empty matrices, and gradients vs finite differences in f64 for the cases the
// registry suite does not sample (wide QR/SVD, the vector right-hand side, composites).
// The registry suite (tests/ops) checks every op against its f64 reference besides.
#include <cmath>
#include <string>

#include "emulated_device.hpp"
#include "error_testing.hpp"
#include "torch_script.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::error_of;
using soma::testing::rand_tensor;

namespace {

Tensor mT(const Tensor& t) {
  std::vector<std::int64_t> perm(std::size_t(t.rank()));
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int64_t(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(t, perm);
}
Tensor batch_eye(std::int64_t n, DType t) { return eye(n, n, t); }
// A well-conditioned [b, n, n] matrix: uniform [-1, 1] plus n I.
Tensor well_conditioned(std::int64_t b, std::int64_t n, std::uint64_t seed, DType t = DType::f64) {
  return cast(rand_tensor({b, n, n}, seed) + eye(n, n, DType::f64) * double(n), t);
}
Tensor spd(std::int64_t b, std::int64_t n, std::uint64_t seed, DType t = DType::f64) {
  Tensor a = rand_tensor({b, n, n}, seed);
  return cast(matmul(a, mT(a)) + eye(n, n, DType::f64) * double(n), t);
}
double tol_of(DType t) { return t == DType::f64 ? 1e-10 : 2e-5; }

TEST(Linalg, KnownAnswers) {
  auto x = linalg::solve(constant<double>({{3, 1}, {1, 2}}), constant<double>({9, 8}));
  EXPECT_TRUE(all_close(x, std::vector<double>{2, 3}, 1e-12));
  EXPECT_NEAR(linalg::det(constant<double>({{1, 2}, {3, 4}})).item<double>(), -2.0, 1e-12);
  EXPECT_TRUE(all_close(linalg::inv(constant<double>({{4, 7}, {2, 6}})),
                        std::vector<double>{0.6, -0.7, -0.2, 0.4}, 1e-12));
  auto l = linalg::cholesky(constant<double>({{4, 12, -16}, {12, 37, -43}, {-16, -43, 98}}));
  EXPECT_TRUE(all_close(l, std::vector<double>{2, 0, 0, 6, 1, 0, -8, 5, 3}, 1e-12));
  auto e = linalg::eigh(constant<double>({{2, 1}, {1, 2}}));
  EXPECT_TRUE(all_close(e.eigenvalues, std::vector<double>{1, 3}, 1e-12));
  auto s = linalg::svd(constant<double>({{3, 0}, {0, -2}, {0, 0}}));
  EXPECT_TRUE(all_close(s.s, std::vector<double>{3, 2}, 1e-12));
  auto sl = linalg::slogdet(constant<double>({{1, 2}, {3, 4}}));
  EXPECT_EQ(sl.sign.item<double>(), -1.0);
  EXPECT_NEAR(sl.logabsdet.item<double>(), std::log(2.0), 1e-12);
  auto qr = linalg::qr(constant<double>({{0, 2}, {3, 0}}));  // columns already orthogonal
  EXPECT_TRUE(all_close(qr.q, std::vector<double>{0, 1, 1, 0}, 1e-12));
  EXPECT_TRUE(all_close(qr.r, std::vector<double>{3, 0, 0, 2}, 1e-12));
}

class LinalgIdentities : public ::testing::TestWithParam<DType> {};

TEST_P(LinalgIdentities, SolveInvDet) {
  const DType t = GetParam();
  const double tol = tol_of(t);
  Tensor a = well_conditioned(3, 4, 1, t), b = cast(rand_tensor({3, 4, 2}, 2), t);
  EXPECT_TRUE(all_close(matmul(a, linalg::solve(a, b)), b, tol, tol));
  EXPECT_TRUE(all_close(matmul(a, linalg::inv(a)), broadcast_to(batch_eye(4, t), {3, 4, 4}), tol, tol));
  // det(AB) = det(A) det(B); slogdet agrees with det.
  Tensor c = well_conditioned(3, 4, 3, t);
  EXPECT_TRUE(all_close(linalg::det(matmul(a, c)), linalg::det(a) * linalg::det(c), 10 * tol, 10 * tol));
  auto sl = linalg::slogdet(a);
  EXPECT_TRUE(all_close(sl.sign * exp(sl.logabsdet), linalg::det(a), tol, tol));
  EXPECT_EQ(linalg::det(a).shape(), (Shape{3}));
  // Strided (transposed) input: the same as its packed copy.
  EXPECT_TRUE(all_close(linalg::inv(mT(a)), mT(linalg::inv(a)), tol, tol));
}

TEST_P(LinalgIdentities, Cholesky) {
  const DType t = GetParam();
  const double tol = tol_of(t);
  Tensor a = spd(2, 5, 4, t);
  Tensor l = linalg::cholesky(a);
  EXPECT_TRUE(all_close(matmul(l, mT(l)), a, 10 * tol, tol));
  for (double v : (l * (1.0 - cast(greater_equal(reshape(arange(5.0, t), {5, 1}),
                                                 reshape(arange(5.0, t), {1, 5})), t)))
                      .to_vector<double>())
    EXPECT_EQ(v, 0.0) << "L has a non-zero above its diagonal";
}

TEST_P(LinalgIdentities, QrTallAndWide) {
  const DType t = GetParam();
  const double tol = tol_of(t);
  for (Shape s : {Shape{2, 5, 3}, Shape{2, 3, 5}, Shape{4, 4}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor a = cast(rand_tensor(s, 5), t);
    auto [q, r] = linalg::qr(a);
    const std::int64_t k = std::min(s[s.size() - 2], s.back());
    EXPECT_EQ(q.dim(-1), k);
    EXPECT_EQ(r.dim(-2), k);
    EXPECT_TRUE(all_close(matmul(q, r), a, tol, tol));
    EXPECT_TRUE(all_close(matmul(mT(q), q), broadcast_to(batch_eye(k, t), matmul(mT(q), q).shape()), tol, tol));
    std::vector<double> rv = r.to_vector<double>();
    const std::int64_t n = s.back();
    for (std::size_t i = 0; i < rv.size(); ++i) {
      const std::int64_t row = std::int64_t(i) / n % k, c = std::int64_t(i) % n;
      if (c < row) EXPECT_EQ(rv[i], 0.0) << "R not upper triangular at " << i;
      if (c == row) EXPECT_GE(rv[i], 0.0) << "R's diagonal is negative at " << i;
    }
  }
}

TEST_P(LinalgIdentities, SvdTallAndWide) {
  const DType t = GetParam();
  const double tol = tol_of(t);
  for (Shape s : {Shape{2, 5, 3}, Shape{2, 3, 5}}) {
    SCOPED_TRACE(shape_str(s));
    Tensor a = cast(rand_tensor(s, 6), t);
    auto [u, sv, vh] = linalg::svd(a);
    EXPECT_TRUE(all_close(matmul(u * expand_dims(sv, -2), vh), a, tol, tol));
    EXPECT_TRUE(all_close(matmul(mT(u), u), broadcast_to(batch_eye(3, t), {2, 3, 3}), tol, tol));
    EXPECT_TRUE(all_close(matmul(vh, mT(vh)), broadcast_to(batch_eye(3, t), {2, 3, 3}), tol, tol));
    std::vector<double> v = sv.to_vector<double>();
    for (std::size_t i = 0; i + 1 < v.size(); ++i)
      if ((i + 1) % 3) EXPECT_GE(v[i], v[i + 1]) << "singular values not descending";
  }
}

TEST_P(LinalgIdentities, Eigh) {
  const DType t = GetParam();
  const double tol = tol_of(t);
  Tensor r = rand_tensor({2, 4, 4}, 7);
  Tensor a = cast(r + mT(r), t);
  auto [w, v] = linalg::eigh(a);
  EXPECT_TRUE(all_close(matmul(a, v), v * expand_dims(w, -2), 10 * tol, 10 * tol));
  EXPECT_TRUE(all_close(matmul(mT(v), v), broadcast_to(batch_eye(4, t), {2, 4, 4}), tol, tol));
  std::vector<double> wv = w.to_vector<double>();
  for (std::size_t i = 0; i + 1 < wv.size(); ++i)
    if ((i + 1) % 4) EXPECT_LE(wv[i], wv[i + 1]) << "eigenvalues not ascending";
  // Only the lower triangle is read: garbage above the diagonal changes nothing.
  Tensor junk = a + cast(rand_tensor({2, 4, 4}, 8), t) *
                        cast(less(reshape(arange(4.0), {4, 1}), reshape(arange(4.0), {1, 4})), t);
  EXPECT_TRUE(all_close(linalg::eigh(junk).eigenvalues, w, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinalgIdentities, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Linalg, SingularAndIndefiniteInputsAreErrorsNamingTheBatchIndex) {
  Tensor a = stack({eye(3, 3, DType::f64), constant<double>({{1, 2, 3}, {2, 4, 6}, {0, 0, 1}})});
  std::string e = error_of([&] { linalg::inv(a); });
  EXPECT_NE(e.find("linalg_inv"), std::string::npos) << e;
  EXPECT_NE(e.find("matrix 1 of the batch"), std::string::npos) << e;
  EXPECT_NE(e.find("singular"), std::string::npos) << e;
  e = error_of([&] { linalg::solve(a, ones({2, 3, 1}, DType::f64)); });
  EXPECT_NE(e.find("linalg_solve"), std::string::npos) << e;
  EXPECT_NE(e.find("matrix 1"), std::string::npos) << e;
  // det of a singular matrix is 0, not an error; slogdet gives sign 0 and -inf.
  EXPECT_TRUE(all_close(linalg::det(a), std::vector<double>{1, 0}, 1e-12));
  auto sl = linalg::slogdet(a);
  EXPECT_EQ(sl.sign.to_vector<double>()[1], 0.0);
  EXPECT_TRUE(std::isinf(sl.logabsdet.to_vector<double>()[1]));
  Tensor indefinite = stack({eye(2, 2, DType::f64), constant<double>({{1, 2}, {2, 1}})});
  e = error_of([&] { linalg::cholesky(indefinite); });
  EXPECT_NE(e.find("linalg_cholesky"), std::string::npos) << e;
  EXPECT_NE(e.find("matrix 1 of the batch"), std::string::npos) << e;
  EXPECT_NE(e.find("not positive definite"), std::string::npos) << e;
}

TEST(Linalg, BadShapesAndDtypesAreRefused) {
  EXPECT_NE(error_of([] { linalg::inv(ones({2, 3}, DType::f64)); }).find("square"), std::string::npos);
  EXPECT_NE(error_of([] { linalg::det(ones({3}, DType::f64)); }).find("[..., m, n]"), std::string::npos);
  EXPECT_NE(error_of([] { linalg::cholesky(ones({2, 2}, DType::i32)); }).find("f32 or f64"),
            std::string::npos);
  EXPECT_NE(error_of([] { linalg::solve(eye(3, 3, DType::f64), ones({4, 1}, DType::f64)); })
                .find("linalg_solve"),
            std::string::npos);
  EXPECT_NE(error_of([] { linalg::solve(eye(3, 3, DType::f64), ones({3, 1}, DType::f32)); })
                .find("dtypes differ"),
            std::string::npos);
}

TEST(Linalg, NanOrInfGivesNanForThatMatrixOnly) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = stack({constant<double>({{nan, 0}, {0, 1}}), constant<double>({{2, 0}, {0, 4}})});
  auto check = [](const Tensor& t, const char* what) {
    std::vector<double> v = t.to_vector<double>();
    const std::size_t half = v.size() / 2;
    for (std::size_t i = 0; i < v.size(); ++i)
      EXPECT_EQ(std::isnan(v[i]), i < half) << what << " element " << i;
  };
  check(linalg::inv(a), "inv");
  check(linalg::det(a), "det");
  check(linalg::cholesky(a), "cholesky");
  check(linalg::qr(a).r, "qr");
  check(linalg::svd(a).s, "svd");
  check(linalg::eigh(a).eigenvectors, "eigh");
  check(linalg::solve(a, ones({2, 2, 1}, DType::f64)), "solve");
  // cholesky and eigh read only the lower triangle: NaN above it is ignored.
  Tensor upper_nan = constant<double>({{4, nan}, {2, 3}});
  EXPECT_TRUE(all_close(linalg::eigh(upper_nan).eigenvalues,
                        linalg::eigh(constant<double>({{4, 2}, {2, 3}})).eigenvalues, 1e-12));
}

TEST(Linalg, EmptyMatricesAndBatches) {
  EXPECT_EQ(linalg::inv(zeros({0, 3, 3}, DType::f64)).shape(), (Shape{0, 3, 3}));
  EXPECT_TRUE(all_close(linalg::det(zeros({2, 0, 0}, DType::f64)), std::vector<double>{1, 1}));
  auto qr = linalg::qr(zeros({2, 0, 3}, DType::f32));
  EXPECT_EQ(qr.q.shape(), (Shape{2, 0, 0}));
  EXPECT_EQ(qr.r.shape(), (Shape{2, 0, 3}));
  auto s = linalg::svd(zeros({4, 0}, DType::f64));
  EXPECT_EQ(s.u.shape(), (Shape{4, 0}));
  EXPECT_EQ(s.vh.shape(), (Shape{0, 0}));
  EXPECT_EQ(linalg::eigh(zeros({0, 0}, DType::f64)).eigenvalues.shape(), (Shape{0}));
  EXPECT_EQ(linalg::solve(zeros({2, 2}, DType::f64), zeros({2, 0}, DType::f64)).shape(), (Shape{2, 0}));
}

TEST(LinalgGradients, SolveWithAVectorRightHandSide) {
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return linalg::solve(x[0] + eye(3, 3, DType::f64) * 3.0, x[1]); },
      {rand_tensor({3, 3}, 11), rand_tensor({3}, 12)}));
}

TEST(LinalgGradients, SolveBroadcastsBatchDims) {
  Tensor a = rand_tensor({3, 3}, 16) + eye(3, 3, DType::f64) * 3.0, b = rand_tensor({2, 3, 1}, 17);
  Tensor x = linalg::solve(a, b);
  EXPECT_EQ(x.shape(), (Shape{2, 3, 1}));
  EXPECT_TRUE(all_close(matmul(a, x), b, 1e-12, 1e-12));
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& in) { return linalg::solve(in[0] + eye(3, 3, DType::f64) * 3.0, in[1]); },
      {rand_tensor({3, 3}, 18), b}));
}

TEST(LinalgGradients, WideQr) {
  Tensor a = rand_tensor({2, 3, 5}, 13) + constant<double>({{2, 0, 0, 0, 0}, {0, 4, 0, 0, 0}, {0, 0, 6, 0, 0}});
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return linalg::qr(x[0]).q; }, {a}));
  EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& x) { return linalg::qr(x[0]).r; }, {a}));
}

TEST(LinalgGradients, WideSvd) {
  Tensor a = rand_tensor({3, 5}, 14) + constant<double>({{2, 0, 0, 0, 0}, {0, 4, 0, 0, 0}, {0, 0, 6, 0, 0}});
  for (int k = 0; k < 3; ++k)
    EXPECT_TRUE(check_gradients(
        [k](const std::vector<Tensor>& x) {
          auto r = linalg::svd(x[0]);
          return k == 0 ? r.u : k == 1 ? r.s : r.vh;
        },
        {a}))
        << "output " << k;
}

// Through a symmetric construction the lower-triangle convention gives the usual gradient.
TEST(LinalgGradients, CholeskyAndEighOfASymmetricProduct) {
  Tensor b = rand_tensor({4, 4}, 15);
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) {
        return linalg::cholesky(matmul(x[0], mT(x[0])) + eye(4, 4, DType::f64) * 4.0);
      },
      {b}));
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) {
        auto e = linalg::eigh(x[0] + mT(x[0]) + constant<double>({{1, 0, 0, 0}, {0, 3, 0, 0}, {0, 0, 5, 0}, {0, 0, 0, 7}}));
        return concat({e.eigenvalues, reshape(e.eigenvectors, {16})}, 0);
      },
      {b}));
  EXPECT_TRUE(check_gradients(
      [](const std::vector<Tensor>& x) { return linalg::slogdet(x[0] + eye(4, 4, DType::f64) * 4.0).logabsdet; },
      {b}));
}

}  // namespace

// ---- PyTorch (python3-torch) as an oracle: values and gradients of gauge-invariant losses ----
namespace torch_check {
const char* kScript = R"PY(
import sys
try:
    import torch
except Exception:
    sys.exit(77)
torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
out = open(sys.argv[1], 'w')
def w(name, t):
    t = t.detach().to(torch.float64).contiguous()
    out.write(name + " " + str(t.dim()) + " " + " ".join(str(d) for d in t.shape) + " " +
              " ".join(repr(float(v)) for v in t.flatten()) + "\n")
eye = torch.eye(4)
a = torch.rand(2, 4, 4) * 2 - 1 + 4 * eye
a[1, 0, 0] -= 8  # a negative determinant
b = torch.rand(2, 4, 2) * 2 - 1
r = torch.rand(2, 4, 4) * 2 - 1
spd = r @ r.mT + 4 * eye
x = torch.rand(2, 5, 3) * 2 - 1
wx = torch.rand(2, 4, 2); wl = torch.rand(2, 4, 4); we = torch.rand(2, 4); ws = torch.rand(2, 3)
for n, t in [("a", a), ("b", b), ("spd", spd), ("x", x), ("wx", wx), ("wl", wl), ("we", we), ("ws", ws)]:
    w(n, t)
w("solve", torch.linalg.solve(a, b)); w("inv", torch.linalg.inv(a)); w("det", torch.linalg.det(a))
s, l = torch.linalg.slogdet(a); w("sign", s); w("logabs", l)
w("chol", torch.linalg.cholesky(spd)); w("eigvals", torch.linalg.eigvalsh(spd))
w("svals", torch.linalg.svdvals(x))
a1 = a.clone().requires_grad_(); b1 = b.clone().requires_grad_()
(torch.linalg.solve(a1, b1) * wx).sum().backward(); w("solve_ga", a1.grad); w("solve_gb", b1.grad)
a1 = a.clone().requires_grad_(); torch.linalg.det(a1).sum().backward(); w("det_g", a1.grad)
s1 = spd.clone().requires_grad_(); (torch.linalg.cholesky(s1) * wl).sum().backward(); w("chol_g", s1.grad)
s1 = spd.clone().requires_grad_(); (torch.linalg.eigvalsh(s1) * we).sum().backward(); w("eig_g", s1.grad)
x1 = x.clone().requires_grad_(); (torch.linalg.svdvals(x1) * ws).sum().backward(); w("svd_g", x1.grad)
)PY";
}  // namespace torch_check

TEST(LinalgTorch, ValuesAndGradientsMatchPyTorch) {
  auto run = soma::testing::run_torch_script(torch_check::kScript, "linalg");
  if (run.unavailable()) GTEST_SKIP() << "no python3 with torch: " << run.log;
  ASSERT_EQ(run.rc, 0) << run.log;
  auto& t = run.t;
  const double tol = 1e-10;
  EXPECT_TRUE(all_close(linalg::solve(t["a"], t["b"]), t["solve"], tol, tol));
  EXPECT_TRUE(all_close(linalg::inv(t["a"]), t["inv"], tol, tol));
  EXPECT_TRUE(all_close(linalg::det(t["a"]), t["det"], tol, tol));
  auto sl = linalg::slogdet(t["a"]);
  EXPECT_TRUE(all_close(sl.sign, t["sign"], 0, 0));
  EXPECT_TRUE(all_close(sl.logabsdet, t["logabs"], tol, tol));
  EXPECT_TRUE(all_close(linalg::cholesky(t["spd"]), t["chol"], tol, tol));
  EXPECT_TRUE(all_close(linalg::eigh(t["spd"]).eigenvalues, t["eigvals"], tol, tol));
  EXPECT_TRUE(all_close(linalg::svd(t["x"]).s, t["svals"], tol, tol));

  auto grads = [](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> in) {
    GradientTape tape;
    for (auto& x : in) tape.watch(x);
    Tensor loss = f(in);
    return tape.gradient(loss, in);
  };
  auto g = grads([&](const std::vector<Tensor>& in) { return sum(linalg::solve(in[0], in[1]) * t["wx"]); },
                 {t["a"], t["b"]});
  EXPECT_TRUE(all_close(g[0], t["solve_ga"], tol, tol));
  EXPECT_TRUE(all_close(g[1], t["solve_gb"], tol, tol));
  g = grads([](const std::vector<Tensor>& in) { return sum(linalg::det(in[0])); }, {t["a"]});
  EXPECT_TRUE(all_close(g[0], t["det_g"], tol, tol));
  g = grads([](const std::vector<Tensor>& in) { return sum(linalg::svd(in[0]).s * in[1]); }, {t["x"], t["ws"]});
  EXPECT_TRUE(all_close(g[0], t["svd_g"], tol, tol));
  // cholesky/eigh: soma's gradient is w.r.t. the lower triangle, torch's is symmetrised; they
  // agree as G + G^T (what any symmetric construction of the input sees).
  g = grads([&](const std::vector<Tensor>& in) { return sum(linalg::cholesky(in[0]) * t["wl"]); }, {t["spd"]});
  EXPECT_TRUE(all_close(g[0] + mT(g[0]), t["chol_g"] + mT(t["chol_g"]), 1e-9, 1e-9));
  g = grads([&](const std::vector<Tensor>& in) { return sum(linalg::eigh(in[0]).eigenvalues * t["we"]); }, {t["spd"]});
  EXPECT_TRUE(all_close(g[0] + mT(g[0]), t["eig_g"] + mT(t["eig_g"]), 1e-9, 1e-9));
}

// The CUDA kernels copy to the host, run the LAPACK kernel and copy back. Without a GPU the
// round trip runs on the CPU stand-in device (tests/support/emulated_device.hpp): the real CUDA
// kernels are taken before the stand-in points every op at its CPU kernel, then called directly.
TEST(LinalgCudaKernels, RoundTripThroughTheHostOnTheStandInDevice) {
  if (!cuda::is_built()) GTEST_SKIP() << "soma was built without CUDA";
  const KernelFn inv_k = get_op("linalg_inv").kernels[int(DeviceKind::CUDA)];
  const KernelFn svd_k = get_op("linalg_svd").kernels[int(DeviceKind::CUDA)];
  ASSERT_NE(inv_k, get_op("linalg_inv").kernels[int(DeviceKind::CPU)]);
  soma::testing::EmulatedCuda gpu;
  const Device dev = gpu.device();
  Tensor a = well_conditioned(2, 3, 21), x = rand_tensor({2, 4, 3}, 22);
  std::vector<Tensor> out{Tensor::empty({2, 3, 3}, DType::f64, dev)};
  inv_k({a.to(dev)}, out, {});
  EXPECT_TRUE(all_close(out[0].to(Device::cpu()), linalg::inv(a), 0, 0));
  std::vector<Tensor> svd_out{Tensor::empty({2, 4, 3}, DType::f64, dev),
                              Tensor::empty({2, 3}, DType::f64, dev),
                              Tensor::empty({2, 3, 3}, DType::f64, dev)};
  svd_k({x.to(dev)}, svd_out, {});
  auto want = linalg::svd(x);
  EXPECT_TRUE(all_close(svd_out[0].to(Device::cpu()), want.u, 0, 0));
  EXPECT_TRUE(all_close(svd_out[1].to(Device::cpu()), want.s, 0, 0));
  EXPECT_TRUE(all_close(svd_out[2].to(Device::cpu()), want.vh, 0, 0));
  // The CPU kernel's errors come through, batch index and all.
  Tensor singular = zeros({1, 2, 2}, DType::f64);
  std::vector<Tensor> o1{Tensor::empty({1, 2, 2}, DType::f64, dev)};
  const std::string e = error_of([&] { inv_k({singular.to(dev)}, o1, {}); });
  EXPECT_NE(e.find("matrix 0 of the batch"), std::string::npos) << e;
}
