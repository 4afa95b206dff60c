// Workload 6, the libraries called directly: f32 GEMM GFLOP/s of OpenBLAS (cblas_sgemm) and
// oneDNN (dnnl_sgemm) at N x N x N, and the machine's FMA peak measured with a register-only
// AVX-512 (or AVX2) FMA loop on every thread. Same output line as `soma bench`:
//   bench workload=sgemm_openblas threads=<n> batch=<N> value=<x> unit=GFLOP/s
//   bench workload=fma_peak threads=<n> batch=1 value=<x> unit=GFLOP/s
//   gemm_peers [--threads 1,2] [--batch 256,512,1024,2048]
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#ifdef PEERS_HAVE_DNNL
#include <dnnl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <class F>
double gflops(long n, F&& gemm) {
  gemm();
  long calls = 0;
  const auto t0 = Clock::now();
  while (calls < 3 || seconds_since(t0) < 0.3) {
    gemm();
    ++calls;
  }
  return 2.0 * double(n) * n * n * calls / seconds_since(t0) / 1e9;
}

// Independent FMA chains per thread (more than latency x ports) so both FMA pipes stay busy;
// the chains are separate variables so that they live in registers.
#ifdef __AVX512F__
using Vec = __m512;
#define PEERS_FMA _mm512_fmadd_ps
#define PEERS_SET1 _mm512_set1_ps
constexpr double kLanes = 16;
#else
using Vec = __m256;
#define PEERS_FMA _mm256_fmadd_ps
#define PEERS_SET1 _mm256_set1_ps
constexpr double kLanes = 8;
#endif

double fma_peak(int threads) {
  const long iters = 50'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      Vec c0 = PEERS_SET1(0.f), c1 = PEERS_SET1(1.f), c2 = PEERS_SET1(2.f), c3 = PEERS_SET1(3.f),
          c4 = PEERS_SET1(4.f), c5 = PEERS_SET1(5.f), c6 = PEERS_SET1(6.f), c7 = PEERS_SET1(7.f),
          c8 = PEERS_SET1(8.f), c9 = PEERS_SET1(9.f);
      const Vec a = PEERS_SET1(0.999999f), b = PEERS_SET1(1e-7f);
      for (long i = 0; i < iters; ++i) {
        c0 = PEERS_FMA(c0, a, b); c1 = PEERS_FMA(c1, a, b); c2 = PEERS_FMA(c2, a, b);
        c3 = PEERS_FMA(c3, a, b); c4 = PEERS_FMA(c4, a, b); c5 = PEERS_FMA(c5, a, b);
        c6 = PEERS_FMA(c6, a, b); c7 = PEERS_FMA(c7, a, b); c8 = PEERS_FMA(c8, a, b);
        c9 = PEERS_FMA(c9, a, b);
      }
      Vec s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9;
      float tmp[int(kLanes)];
      std::memcpy(tmp, &s, sizeof s);
      for (float v : tmp) sink += v;
    }
    const double t = seconds_since(t0);
    if (sink == 12345.0f) std::printf(" ");
    best = std::max(best, 2.0 * kLanes * 10 * double(iters) * threads / t / 1e9);
  }
  return best;
}

std::vector<long> int_list(const std::string& s) {
  std::vector<long> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stol(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> threads{omp_get_max_threads()}, sizes{256, 512, 1024, 2048};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--threads") threads = int_list(argv[i + 1]);
    else if (a == "--batch") sizes = int_list(argv[i + 1]);
  }
  for (long t : threads) {
    omp_set_num_threads(int(t));
    openblas_set_num_threads(int(t));
    std::printf("bench workload=fma_peak threads=%ld batch=1 value=%.6g unit=GFLOP/s\n", t,
                fma_peak(int(t)));
    for (long n : sizes) {
      std::vector<float> a(n * n), b(n * n), c(n * n);
      std::mt19937 rng(1);
      std::uniform_real_distribution<float> u(-1, 1);
      for (auto& v : a) v = u(rng);
      for (auto& v : b) v = u(rng);
      const double ob = gflops(n, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n,
                    b.data(), n, 0.0f, c.data(), n);
      });
      std::printf("bench workload=sgemm_openblas threads=%ld batch=%ld value=%.6g unit=GFLOP/s\n",
                  t, n, ob);
#ifdef PEERS_HAVE_DNNL
      const double dn = gflops(n, [&] {
        dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      });
      std::printf("bench workload=sgemm_onednn threads=%ld batch=%ld value=%.6g unit=GFLOP/s\n", t,
                  n, dn);
#endif
      std::fflush(stdout);
    }
  }
  return 0;
}
