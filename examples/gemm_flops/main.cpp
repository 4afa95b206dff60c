// How fast is a matrix product? C = A x B in f32 for square N x N matrices, timed, reported in
// GFLOP/s (2 N^3 floating-point operations per product). On the CPU soma's matmul goes to
// OpenBLAS on soma's thread pool; where a GPU is usable a second line runs the same code on CUDA
// tensors (cuBLASLt); elsewhere the program says why the GPU is not available.
//
//   gemm_flops [--sizes 2000,4000,6000] [--repeats R] [--threads T] [--check]
//
// --check compares entries of every product against a direct dot product in double precision
// and exits non-zero when one differs by more than the f32 rounding allows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <soma/soma.hpp>

using soma::Tensor;

namespace {

// The median time of `repeats` products on `device`, in seconds (one untimed warm-up first).
double time_matmul(const Tensor& a, const Tensor& b, int repeats, Tensor& c) {
  c = soma::matmul(a, b);  // warm-up: first-touch of the output, thread start-up
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    c = soma::matmul(a, b);
    c.slice(0, 0, 1).slice(1, 0, 1).to(soma::Device::cpu());  // waits for a device to finish
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Largest relative error of C[i, j] against sum_k A[i, k] B[k, j] in double, over a few (i, j).
double check_entries(const Tensor& a, const Tensor& b, const Tensor& c) {
  const std::int64_t n = a.dim(0), k = a.dim(1), m = b.dim(1);
  const float* pa = a.contiguous().data<float>();
  const Tensor bc = b.contiguous(), cc = c.contiguous();
  const float* pb = bc.data<float>();
  const float* pc = cc.data<float>();
  double worst = 0.0;
  const std::int64_t picks[][2] = {{0, 0}, {n - 1, m - 1}, {n / 2, m / 3}, {n / 3, m - 1},
                                   {n - 1, 0}, {n / 7, m / 5}};
  for (const auto& p : picks) {
    double want = 0.0, scale = 0.0;
    for (std::int64_t t = 0; t < k; ++t) {
      want += double(pa[p[0] * k + t]) * double(pb[t * m + p[1]]);
      scale += std::abs(double(pa[p[0] * k + t]) * double(pb[t * m + p[1]]));
    }
    worst = std::max(worst, std::abs(double(pc[p[0] * m + p[1]]) - want) / std::max(scale, 1e-30));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> sizes = {2000, 4000, 6000};
  int repeats = 3, threads = 0;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string n; std::getline(ss, n, ',');) sizes.push_back(std::atoll(n.c_str()));
    } else if (a == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr,
                   "usage: gemm_flops [--sizes N1,N2,...] [--repeats R] [--threads T] [--check]\n");
      return 2;
    }
  }
  if (threads > 0) soma::set_num_threads(threads);
  soma::set_seed(0);

  // Is there a GPU? Moving a tensor there says so (or throws "not available in this build").
  bool gpu = false;
  try {
    soma::zeros({1}).to(soma::Device::cuda());
    gpu = true;
  } catch (const soma::Error& e) {
    std::printf("GPU: not available (%s)\n", e.what());
  }
  std::printf("CPU: %d threads; median of %d products per size\n", soma::get_num_threads(),
              repeats);

  bool ok = true;
  for (std::int64_t n : sizes) {
    if (n <= 0) {
      std::fprintf(stderr, "gemm_flops: sizes must be positive\n");
      return 2;
    }
    const Tensor a = soma::random_uniform({n, n}, -1.0, 1.0);
    const Tensor b = soma::random_uniform({n, n}, -1.0, 1.0);
    const double flop = 2.0 * double(n) * double(n) * double(n);
    Tensor c;
    double s = time_matmul(a, b, repeats, c);
    std::printf("N = %5lld  CPU  %8.3f s  %8.1f GFLOP/s", static_cast<long long>(n), s,
                flop / s / 1e9);
    if (check) {
      // f32 accumulation over n terms: the error grows like sqrt(n) * 2^-24 relative to the sum
      // of |terms|; 1e-5 leaves room for blocked summation orders.
      double err = check_entries(a, b, c);
      bool good = err < 1e-5;
      ok = ok && good;
      std::printf("  check: max rel. error %.1e %s", err, good ? "ok" : "TOO LARGE");
    }
    std::printf("\n");
    if (gpu) {
      const Tensor ag = a.to(soma::Device::cuda()), bg = b.to(soma::Device::cuda());
      Tensor cg;
      double sg = time_matmul(ag, bg, repeats, cg);
      std::printf("N = %5lld  GPU  %8.3f s  %8.1f GFLOP/s\n", static_cast<long long>(n), sg,
                  flop / sg / 1e9);
    }
    std::fflush(stdout);
  }
  if (check) {
    std::printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
  }
  return 0;
}
