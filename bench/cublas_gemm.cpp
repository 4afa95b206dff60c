// cuBLAS called directly, the reference of the GEMM rows of bench/gpu_compare.sh (issue 23:
// soma's SGEMM/TF32 and BF16 GEMM at 4096 should reach 95% of this). Built by the script itself
// (g++ against the CUDA toolkit: no CMake target, no soma), so it is the plain library call:
//
//   cublas_gemm N f32|tf32|bf16 [MIN_CALLS]
//   -> cublas workload=sgemm|bf16_gemm batch=N value=<GFLOP/s> unit=GFLOP/s precision=<p> device=cuda:0
//
// C = A B with N x N operands in device memory, cublasGemmEx with the compute type soma uses for
// that precision (CUBLAS_COMPUTE_32F, _32F_FAST_TF32; bf16 operands and output with f32
// accumulation), timed as soma bench times its GEMMs: blocks of 10 calls, a synchronisation after
// each block, at least MIN_CALLS calls (default 3) and 0.3 s. Exit status 3: no usable GPU.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void check(cudaError_t st, const char* what) {
  if (st == cudaSuccess) return;
  std::fprintf(stderr, "cublas_gemm: %s: %s\n", what, cudaGetErrorString(st));
  std::exit(st == cudaErrorNoDevice || st == cudaErrorInsufficientDriver ? 3 : 1);
}
void check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "cublas_gemm: %s: cuBLAS status %d\n", what, int(st));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: cublas_gemm N f32|tf32|bf16 [MIN_CALLS]\n");
    return 2;
  }
  const int n = std::atoi(argv[1]);
  const std::string prec = argv[2];
  const long min_calls = argc > 3 ? std::atol(argv[3]) : 3;
  if (n <= 0 || (prec != "f32" && prec != "tf32" && prec != "bf16")) {
    std::fprintf(stderr, "cublas_gemm: bad arguments (N > 0; f32, tf32 or bf16)\n");
    return 2;
  }
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) {
    std::fprintf(stderr, "cublas_gemm: no CUDA device\n");
    return 3;
  }
  const bool bf16 = prec == "bf16";
  const std::size_t elems = std::size_t(n) * std::size_t(n);
  const std::size_t es = bf16 ? 2 : 4;
  // Uniform values in [-1, 1) (the exact values do not matter for the speed).
  std::vector<float> host(elems);
  unsigned state = 12345;
  for (auto& v : host) {
    state = state * 1664525u + 1013904223u;
    v = float(state >> 8) / float(1u << 24) * 2.0f - 1.0f;
  }
  std::vector<unsigned char> bytes(elems * es);
  if (bf16) {
    auto* p = reinterpret_cast<__nv_bfloat16*>(bytes.data());
    for (std::size_t i = 0; i < elems; ++i) p[i] = __float2bfloat16(host[i]);
  } else {
    std::memcpy(bytes.data(), host.data(), bytes.size());
  }
  void *a = nullptr, *b = nullptr, *c = nullptr;
  check(cudaMalloc(&a, bytes.size()), "cudaMalloc");
  check(cudaMalloc(&b, bytes.size()), "cudaMalloc");
  check(cudaMalloc(&c, elems * es), "cudaMalloc");
  check(cudaMemcpy(a, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(b, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      prec == "tf32" ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float alpha = 1.0f, beta = 0.0f;
  auto call = [&] {
    check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b, type, n, a, type, n, &beta,
                       c, type, n, compute, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  };
  call();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  using Clock = std::chrono::steady_clock;
  long calls = 0;
  const auto t0 = Clock::now();
  double t = 0;
  while (calls < min_calls || t < 0.3) {
    for (int i = 0; i < 10; ++i) call();
    calls += 10;
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    t = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::printf("cublas workload=%s batch=%d value=%.6g unit=GFLOP/s precision=%s device=cuda:0\n",
              bf16 ? "bf16_gemm" : "sgemm", n, 2.0 * double(n) * n * n * double(calls) / t / 1e9,
              prec.c_str());
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
