// dense_bias_act's CUDA kernel (the op: src/ops/dense.cpp): act(x W + b) as one cuBLASLt matmul
// whose epilogue adds the bias and applies the ReLU (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS), instead
// of the composite's GEMM, bias pass and ReLU pass. f32 (TF32 tensor cores when
// cuda::tf32_active()), f16 and bf16 (f32 accumulation); f64 and shapes cuBLASLt declines run the
// composite (matmul + add + relu). Only the forward: the op's gradient is written with ops.
//
// Row-major y[m, n] = x[m, k] W[k, n] is column-major y^T = W^T x^T (the layouts: dense_plan.hpp,
// tested on the CPU): the bias (n values, D's rows) is broadcast along D's columns, which is what
// the epilogue does. A plan (descriptors, the heuristic's algorithm and its workspace size) is kept
// per device, dtype, shape, layout, epilogue and pointer alignment.
//
// ReLU of NaN: the epilogue is documented as max(x, 0), which may give 0 where the CPU kernel and
// the relu op keep the NaN (not checked on a GPU yet; CudaDense.ReluKeepsNaN). kReluEpilogue false
// runs the bias epilogue and then the relu op instead (one more pass over y).
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cublaslt_loader.hpp"
#include "backend/cuda/dense_plan.hpp"
#include "backend/cuda/host_util.hpp"
#include "backend/cuda/runtime.hpp"
#include "internal/copy.hpp"
#include "internal/dense_op.hpp"
#include "soma/autograd.hpp"
#include "soma/cuda.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"

namespace soma::cuda_detail {

void register_cuda_update_kernels();  // optim_ops.cpp

namespace {

constexpr const char* kOp = "dense_bias_act";
constexpr bool kReluEpilogue = true;

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address.
std::uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t r = 1;
  while (r < 256 && a % (2 * r) == 0) r *= 2;
  return r;
}

struct PlanKey {
  int device;
  DType dtype;
  std::int64_t m, n, k;
  DenseGemm g;  // the layouts (dense_gemm(): fixed by m, n, k, the transposes and the lds)
  bool bias, relu, tf32;
  std::uint32_t align_w, align_x, align_y, align_b;
  auto tie() const {
    return std::tie(device, dtype, m, n, k, g.a.trans, g.a.ld, g.b.trans, g.b.ld, bias, relu,
                    tf32, align_w, align_x, align_y, align_b);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

struct Plan {
  bool ok = false;  // false: cuBLASLt has no algorithm for it (the composite runs)
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
};

// Plans and handles live for the process (the library stays loaded). One lock for both: a plan's
// descriptor gets the call's bias pointer, so setting it and queueing the matmul go together.
std::mutex g_mutex;
std::map<PlanKey, Plan> g_plans;
std::map<int, cublasLtHandle_t> g_handles;
constexpr std::size_t kMaxPlans = 4096;  // past this (ever-changing shapes) the cache restarts
constexpr std::size_t kMaxWorkspace = std::size_t(32) << 20;  // cuBLAS' recommendation on Hopper

cublasLtHandle_t handle(int device) {
  auto it = g_handles.find(device);
  if (it != g_handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  check_cublaslt(cublaslt_api(kOp).create(&h), kOp, "cublasLtCreate", device);
  g_handles.emplace(device, h);
  return h;
}

void destroy(const CublasLtApi& api, Plan& p) {
  if (p.desc) api.matmul_desc_destroy(p.desc);
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d})
    if (l) api.layout_destroy(l);
  p = Plan{};
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// Builds the descriptors for `key` and asks the heuristic for the best algorithm. bias_ptr: the
// call's bias (the heuristic reads its alignment).
Plan make_plan(const PlanKey& key, const void* bias_ptr) {
  const CublasLtApi& api = cublaslt_api(kOp);
  const int dev = key.device;
  auto ok = [&](cublasStatus_t st, const char* what) { check_cublaslt(st, kOp, what, dev); };
  Plan p;
  const cudaDataType_t type = data_type(key.dtype);
  const cublasComputeType_t compute = key.dtype == DType::f32 && key.tf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;  // key.tf32: cuda::tf32_active
  try {
    ok(api.matmul_desc_create(&p.desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const std::int32_t op_a = key.g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const std::int32_t op_b = key.g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    ok(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
       "cublasLtMatmulDescSetAttribute(TRANSA)");
    ok(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
       "cublasLtMatmulDescSetAttribute(TRANSB)");
    const bool relu = key.relu && kReluEpilogue;
    const cublasLtEpilogue_t epi =
        key.bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                 : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    ok(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
       "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    if (key.bias)
      ok(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                       sizeof(bias_ptr)),
         "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    // The layouts of dense_plan.hpp: A from W, B from x, D (and C) the output.
    const DenseGemm& g = key.g;
    auto layout = [&](cublasLtMatrixLayout_t* l, const MatrixDesc& md, const char* what) {
      ok(api.layout_create(l, type, std::uint64_t(md.rows), std::uint64_t(md.cols), md.ld), what);
    };
    layout(&p.a, g.a, "cublasLtMatrixLayoutCreate(kernel)");
    layout(&p.b, g.b, "cublasLtMatrixLayoutCreate(x)");
    layout(&p.d, g.d, "cublasLtMatrixLayoutCreate(y)");
    cublasLtMatmulPreference_t pref = nullptr;
    ok(api.preference_create(&pref), "cublasLtMatmulPreferenceCreate");
    auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t at, const void* v, std::size_t sz) {
      return api.preference_set_attribute(pref, at, v, sz);
    };
    const std::uint64_t ws = kMaxWorkspace;
    cublasStatus_t st = set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y}};
    for (const auto& [attr, value] : aligns)
      if (st == CUBLAS_STATUS_SUCCESS) st = set_pref(attr, &value, sizeof(value));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = api.algo_get_heuristic(handle(dev), p.desc, p.a, p.b, p.d, p.d, pref, 1, &result,
                                  &found);
    api.preference_destroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0) ||
        (st == CUBLAS_STATUS_SUCCESS && result.state != CUBLAS_STATUS_SUCCESS)) {
      destroy(api, p);  // no algorithm for this case: the composite serves it
      return p;
    }
    ok(st, "cublasLtMatmulAlgoGetHeuristic");
    p.algo = result.algo;
    p.workspace = result.workspaceSize;
    p.ok = true;
  } catch (...) {
    destroy(api, p);
    throw;
  }
  return p;
}

void dense_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const DType t = in[0].dtype();
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  const std::int64_t k = in[1].dim(0), n = in[1].dim(1), m = y.numel() / n;
  if (t == DType::f64 || k == 0) return detail::dense_composite_kernel(in, out, attrs);
  const bool relu = detail::dense_relu(attrs), has_bias = in.size() == 3;

  // x as m rows of k: packed (its leading dims merged) or a 2-d view; W as it is. A view that
  // fits no cuBLASLt layout is packed first.
  Tensor x = in[0], w = in[1];
  if (!x.is_contiguous() && x.rank() != 2) x = packed(x);
  auto gemm = [&] {
    const bool flat = x.is_contiguous();
    return dense_gemm(m, n, k, flat ? k : x.strides()[0], flat ? 1 : x.strides()[1],
                      w.strides()[0], w.strides()[1]);
  };
  DenseGemm g = gemm();
  if (!g.b.ok) {
    x = packed(x);
    g = gemm();
  }
  if (!g.a.ok) {
    w = packed(w);
    g = gemm();
  }
  Tensor b = has_bias ? in[2] : Tensor();
  if (has_bias && b.numel() > 1 && b.strides()[0] != 1) b = packed(b);
  // The result straight into the output when it is packed, else through a temporary.
  Tensor dst = y.is_contiguous() ? y : Tensor::empty(y.shape(), t, y.device());

  const int dev = use_device(y.device().index, kOp);
  void* px = first_element(x);
  void* pw = first_element(w);
  void* py = first_element(dst);
  const void* pb = has_bias ? first_element(b) : nullptr;
  const PlanKey key{dev,  t,    m,        n,    k,  g, has_bias, relu, cuda::tf32_active(dev),
                    alignment_of(pw), alignment_of(px), alignment_of(py),
                    has_bias ? alignment_of(pb) : 256u};
  bool ran = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const CublasLtApi& api = cublaslt_api(kOp);
    auto it = g_plans.find(key);
    if (it == g_plans.end()) {
      if (g_plans.size() >= kMaxPlans) {
        for (auto& kv : g_plans) destroy(api, kv.second);
        g_plans.clear();
      }
      it = g_plans.emplace(key, make_plan(key, pb)).first;
    }
    Plan& p = it->second;
    if (p.ok) {
      if (has_bias)
        check_cublaslt(api.matmul_desc_set_attribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &pb, sizeof(pb)),
                       kOp, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", dev);
      const float alpha = 1.0f, beta = 0.0f;
      // Freed as soon as the matmul is queued: all of a device's work runs on its one stream, so
      // whoever gets the block next writes it after the matmul has read it (runtime.hpp).
      void* ws = p.workspace ? allocate(p.workspace, dev) : nullptr;
      const cublasStatus_t st =
          api.matmul(handle(dev), p.desc, &alpha, pw, p.a, px, p.b, &beta, py, p.d, py, p.d,
                     &p.algo, ws, p.workspace, stream(dev));
      if (ws) deallocate(ws, p.workspace, dev);
      check_cublaslt(st, kOp, "cublasLtMatmul", dev);
      ran = true;
    }
  }
  if (!ran) return detail::dense_composite_kernel(in, out, attrs);
  if (relu && !kReluEpilogue) {
    NoGradScope no_grad;
    detail::copy_into(soma::relu(dst), y);
    return;
  }
  if (dst.storage() != y.storage()) detail::copy_into(dst, y);
}

}  // namespace
}  // namespace soma::cuda_detail

namespace soma::detail {

void register_cuda_dense_and_update_kernels() {
  register_kernel("dense_bias_act", DeviceKind::CUDA, cuda_detail::dense_kernel);
  cuda_detail::register_cuda_update_kernels();
}

}  // namespace soma::detail
