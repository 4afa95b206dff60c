// Workload 6 side by side, in one process: f32 N x N x N GEMM GFLOP/s of OpenBLAS
// (cblas_sgemm), oneDNN (dnnl_sgemm), BLIS (bli_sgemm, when libblis.so.4 is installed: Debian
// libblis-dev) and soma::matmul on its automatic route and forced to each library
// (detail::set_gemm_impl, as SOMA_GEMM_IMPL does). Each round visits every library in a rotated
// order, so load changes on a shared machine spread over all of them; medians are printed as a
// Markdown table, then every sample. docs/performance.md, workload 6.
//   bench_sgemm [--rounds 7] [--seconds 0.25] [--sizes 256,512,1024,2048] [--threads 1,2]
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/onednn_matmul.hpp"
#include "soma/soma.hpp"

extern "C" void openblas_set_num_threads(int);

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// GFLOP/s of f after one warm-up call, over at least 3 calls and `min_s` seconds.
template <class F>
double gflops(long n, F&& f, double min_s) {
  f();
  long calls = 0;
  const auto t0 = Clock::now();
  while (calls < 3 || seconds_since(t0) < min_s) {
    f();
    ++calls;
  }
  return 2.0 * double(n) * double(n) * double(n) * double(calls) / seconds_since(t0) / 1e9;
}

// BLIS exports cblas_sgemm/sgemm_ as OpenBLAS does; loaded RTLD_LOCAL, it cannot take over
// the calls soma and this program make to OpenBLAS. The typed API takes dim_t/inc_t (64-bit)
// and trans_t (BLIS_NO_TRANSPOSE = 0).
using BliSgemm = void (*)(int, int, long, long, long, const float*, const float*, long, long,
                          const float*, long, long, const float*, float*, long, long);
using BliSetThreads = void (*)(long);

std::vector<long> int_list(const std::string& s) {
  std::vector<long> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stol(item));
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  double min_s = 0.25;
  std::vector<long> sizes{256, 512, 1024, 2048}, threads{1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--seconds") min_s = std::atof(argv[i + 1]);
    else if (a == "--sizes") sizes = int_list(argv[i + 1]);
    else if (a == "--threads") threads = int_list(argv[i + 1]);
  }
  void* blis = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
  const auto bli_sgemm = blis ? reinterpret_cast<BliSgemm>(dlsym(blis, "bli_sgemm")) : nullptr;
  const auto bli_threads =
      blis ? reinterpret_cast<BliSetThreads>(dlsym(blis, "bli_thread_set_num_threads")) : nullptr;

  using soma::detail::GemmImpl;
  std::vector<std::string> libs{"openblas", "onednn"};
  if (bli_sgemm) libs.push_back("blis");
  const std::map<std::string, GemmImpl> soma_routes{
      {"soma", GemmImpl::automatic}, {"soma_blas", GemmImpl::blas}, {"soma_onednn", GemmImpl::onednn}};
  std::vector<std::string> all = libs;
  for (const auto& r : soma_routes) all.push_back(r.first);

  std::map<std::string, std::vector<double>> samples;  // "<lib> <threads> <N>"
  auto key = [](const std::string& lib, long t, long n) {
    return lib + " " + std::to_string(t) + " " + std::to_string(n);
  };
  for (int r = 0; r < rounds; ++r) {
    for (long t : threads) {
      soma::set_num_threads(int(t));  // OpenMP and OpenBLAS; oneDNN follows OpenMP
      if (bli_threads) bli_threads(t);
      for (long n : sizes) {
        const soma::Tensor ta = soma::random_uniform({n, n}, -1.0, 1.0, soma::DType::f32, 4);
        const soma::Tensor tb = soma::random_uniform({n, n}, -1.0, 1.0, soma::DType::f32, 5);
        const float* a = ta.data<float>();
        const float* b = tb.data<float>();
        std::vector<float> c(std::size_t(n * n));
        std::vector<std::string> order = all;
        std::rotate(order.begin(), order.begin() + std::ptrdiff_t(r % order.size()), order.end());
        if (r % 2) std::reverse(order.begin(), order.end());
        for (const auto& lib : order) {
          double g = 0;
          if (lib == "openblas") {
            g = gflops(n, [&] {
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f,
                          a, int(n), b, int(n), 0.0f, c.data(), int(n));
            }, min_s);
          } else if (lib == "onednn") {
            g = gflops(n, [&] {
              dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c.data(), n);
            }, min_s);
          } else if (lib == "blis") {
            const float one = 1, zero = 0;
            g = gflops(n, [&] {
              bli_sgemm(0, 0, n, n, n, &one, a, n, 1, b, n, 1, &zero, c.data(), n, 1);
            }, min_s);
          } else {
            soma::detail::set_gemm_impl(soma_routes.at(lib));
            g = gflops(n, [&] { soma::matmul(ta, tb); }, min_s);
            soma::detail::set_gemm_impl(GemmImpl::automatic);
          }
          samples[key(lib, t, n)].push_back(g);
        }
      }
    }
    std::fprintf(stderr, "round %d/%d done\n", r + 1, rounds);
  }

  std::printf("| N | threads |");
  for (const auto& l : all) std::printf(" %s |", l.c_str());
  std::printf(" fastest library | soma / fastest | soma_blas / fastest |\n|");
  for (std::size_t i = 0; i < all.size() + 5; ++i) std::printf(" --- |");
  std::printf("\n");
  for (long t : threads)
    for (long n : sizes) {
      std::printf("| %ld | %ld |", n, t);
      double best = 0;
      std::string best_lib;
      for (const auto& l : all) {
        const double m = median(samples[key(l, t, n)]);
        std::printf(" %.1f |", m);
        if (!soma_routes.count(l) && m > best) best = m, best_lib = l;
      }
      std::printf(" %s | %.3f | %.3f |\n", best_lib.c_str(),
                  median(samples[key("soma", t, n)]) / best,
                  median(samples[key("soma_blas", t, n)]) / best);
    }
  std::printf("\nGFLOP/s samples in round order:\n");
  for (const auto& [k, v] : samples) {
    std::printf("%s:", k.c_str());
    for (double x : v) std::printf(" %.1f", x);
    std::printf("\n");
  }
  return 0;
}
