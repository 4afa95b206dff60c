// CUDA kernels of the convolution and pooling ops (src/ops/nn.cpp), host side.
//
// Convolutions (conv2d, conv2d_bias_act, conv2d_backprop_input, conv2d_backprop_filter) run on
// cuDNN's legacy API: NCHW tensors, cross-correlation, groups and dilation as the ops define them.
// cuDNN takes symmetric padding only; conv_plan.hpp says how asymmetric ("same") padding becomes
// an explicit zero-padded copy of the input (or a cropped input gradient). Algorithms come from
// cuDNN's heuristics (cudnnGet*Algorithm_v7, no benchmarking: nothing runs or allocates behind
// soma's allocator) and their candidates cached per shape; the workspace comes from soma's caching
// allocator, and a candidate whose workspace cannot be allocated gives way to the next.
// conv2d_bias_act adds the bias and applies ReLU with a kernel of conv_pool.cu (exactly the CPU
// kernel's ReLU: v <= 0 -> +0, NaN stays; every float dtype).
//
// Pooling runs on soma's kernels (conv_pool.cu; why not cuDNN's pooling: see there).
#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/conv_plan.hpp"
#include "backend/cuda/conv_pool_launch.hpp"
#include "backend/cuda/cudnn_loader.hpp"
#include "backend/cuda/host_util.hpp"
#include "backend/cuda/math_policy.hpp"
#include "backend/cuda/runtime.hpp"
#include "internal/conv3d_op.hpp"
#include "internal/copy.hpp"
#include "soma/cuda.hpp"
#include "soma/op.hpp"

namespace soma::cuda_detail {
namespace {

using Ints = std::vector<std::int64_t>;

void check_float(const char* op, const Tensor& t) {
  const DType d = t.dtype();
  if (d != DType::f32 && d != DType::f64 && d != DType::f16 && d != DType::bf16)
    fail(op, "dtype ", dtype_name(d), " is not supported on ", t.device().str(),
         " (expected f32, f64, f16 or bf16)");
}

// Runs body(y) on a packed tensor for out: out itself when packed, else a temporary copied in.
template <class F>
void into(const Tensor& out, F&& body) {
  if (out.is_contiguous()) return body(out);
  Tensor tmp = Tensor::empty(out.shape(), out.dtype(), out.device());
  body(tmp);
  detail::copy_into(tmp, out);
}

void zero(const Tensor& t, const char* op, int dev) {
  if (t.numel() == 0) return;
  check(cudaMemsetAsync(first_element(t), 0, std::size_t(t.numel()) * dtype_size(t.dtype()),
                        stream(dev)),
        op, "cudaMemsetAsync", dev);
}

// ---- pooling ------------------------------------------------------------------------------------
PoolDims pool_dims(const char* op, const Shape& x, const Shape& pooled, const Attrs& a) {
  const bool count_pad = a.has("count_include_pad") && a.i("count_include_pad") != 0;
  PoolDims p = plan_pool(x, a.ints("pool"), a.ints("strides"), a.ints("pads"), count_pad);
  if (pooled.size() != 4 || pooled[2] != p.oh || pooled[3] != p.ow)
    fail(op, "internal: the pooled shape ", shape_str(pooled), " of input ", shape_str(x),
         " is not the planned ", p.oh, "x", p.ow);
  return p;
}

// a, b: the launch's inputs (see PoolKind); dims from the (unpooled) input shape.
void run_pool(const char* op, PoolKind kind, const Tensor& a0, const Tensor* b0,
              const Tensor& out, const Shape& input_shape, const Shape& pooled, const Attrs& at) {
  check_float(op, a0);
  const int dev = use_device(out.device().index, op);
  const PoolDims p = pool_dims(op, input_shape, pooled, at);
  // An empty H or W with enough padding still has windows, made only of padding: nothing to
  // read (the CPU kernels read past the plane there).
  const bool reads_windows = kind != PoolKind::max_grad && kind != PoolKind::avg_grad;
  if (reads_windows && numel(input_shape) == 0 && numel(pooled) != 0)
    fail(op, "input ", shape_str(input_shape), " is empty but the pooled shape ",
         shape_str(pooled), " is not: every window is padding");
  const Tensor a = packed(a0);
  const Tensor b = b0 ? packed(*b0) : Tensor();
  into(out, [&](const Tensor& y) {
    launched(launch_pool(kind, first_element(a), b0 ? first_element(b) : nullptr, first_element(y),
                         elem(a.dtype()), p, stream(dev)),
             op, dev);
  });
}

void max_pool_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  run_pool("max_pool2d", PoolKind::max, in[0], nullptr, out[0], in[0].shape(), out[0].shape(), a);
}
void max_pool_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                          const Attrs& a) {
  run_pool("max_pool2d_grad", PoolKind::max_grad, in[0], &in[1], out[0], in[0].shape(),
           in[1].shape(), a);
}
void max_pool_grad_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                               const Attrs& a) {
  run_pool("max_pool2d_grad_grad", PoolKind::max_grad_grad, in[0], &in[1], out[0],
           in[0].shape(), out[0].shape(), a);
}
// (x) -> (y, indices i64): the values as max_pool2d, then each window's argmax offset in its
// plane (the same first-maximum rule, so the two agree).
void max_pool_with_indices_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                  const Attrs& a) {
  const char* op = "max_pool2d_with_indices";
  run_pool(op, PoolKind::max, in[0], nullptr, out[0], in[0].shape(), out[0].shape(), a);
  const int dev = use_device(out[1].device().index, op);
  const PoolDims p = pool_dims(op, in[0].shape(), out[1].shape(), a);
  const Tensor x = packed(in[0]);
  into(out[1], [&](const Tensor& idx) {
    launched(launch_pool_argmax(first_element(x), static_cast<std::int64_t*>(first_element(idx)),
                                elem(x.dtype()), p, stream(dev)),
             op, dev);
  });
}
// (x, indices) -> zeros of attr output_size with x scattered to each plane offset: a composite
// of scatter along the flattened planes (the same rule: the last write in row-major order wins).
void max_unpool_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  static const OpDef& scatter = get_op("scatter");
  const char* op = "max_unpool2d";
  const int dev = use_device(out[0].device().index, op);
  const Shape& xs = in[0].shape();
  const Shape& os = out[0].shape();
  auto flat = [](const Tensor& t, const Shape& s) {  // packed [N, C, H*W] view
    const Tensor p = packed(t);
    const Shape f{s[0], s[1], s[2] * s[3]};
    return Tensor::view_of(p, f, contiguous_strides(f), p.offset());
  };
  Tensor zeros = Tensor::empty({os[0], os[1], os[2] * os[3]}, out[0].dtype(), out[0].device());
  zero(zeros, op, dev);
  const Tensor y = call_op1(scatter, {zeros, flat(in[1], xs), flat(in[0], xs)},
                            {{"axis", std::int64_t(2)}, {"reduction", std::string("none")}});
  detail::copy_into(Tensor::view_of(y, os, contiguous_strides(os), y.offset()), out[0]);
}

void avg_pool_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  run_pool("avg_pool2d", PoolKind::avg, in[0], nullptr, out[0], in[0].shape(), out[0].shape(), a);
}
void avg_pool_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                          const Attrs& a) {
  run_pool("avg_pool2d_grad", PoolKind::avg_grad, in[0], nullptr, out[0], out[0].shape(),
           in[0].shape(), a);
}

// ---- convolutions (cuDNN) -------------------------------------------------------------------------
#if SOMA_HAS_CUDNN_HEADERS

constexpr int kMaxDevices = 64;
// Algorithms needing more workspace than this are passed over while another one works.
constexpr std::size_t kWorkspaceLimit = std::size_t(1) << 30;

// What a failing call reports besides the op: the convolution's shapes and attributes.
std::string describe(const ConvPlan& p, DType t) {
  return "input " + shape_str({p.n, p.c, p.h, p.w}) + ", kernel " +
         shape_str({p.o, p.c / p.groups, p.kh, p.kw}) + ", output " +
         shape_str({p.n, p.o, p.oh, p.ow}) + ", " + dtype_name(t) + ", strides " +
         shape_str({p.sh, p.sw}) + ", cuDNN padding " + shape_str({p.pad_h, p.pad_w}) +
         " + explicit " + shape_str({p.extra_top, p.extra_bottom, p.extra_left, p.extra_right}) +
         ", dilation " + shape_str({p.dh, p.dw}) + ", groups " + std::to_string(p.groups);
}

// Tensor cores where soma allows them (math_policy.hpp): f16/bf16 always, f32 as TF32 when
// cuda::allow_tf32() on Ampere or later (otherwise FMA kernels only: full f32 products).
cudnnMathType_t requested_math(DType t, int device) {
  switch (conv_math(t, cuda::allow_tf32(), compute_major(device))) {
    case ConvMath::kTensorOp: return CUDNN_TENSOR_OP_MATH;
    case ConvMath::kFma: return CUDNN_FMA_MATH;
    case ConvMath::kDefault: break;
  }
  return CUDNN_DEFAULT_MATH;
}

// One convolution call's context: the op, its plan and device, for the error messages.
struct Call {
  const char* op;
  const ConvPlan& plan;
  DType dtype;
  int dev;
  const CudnnApi& api;
  cudnnMathType_t math;  // requested: requested_math(dtype) when the call began

  void check(cudnnStatus_t st, const char* what) const {
    if (st == CUDNN_STATUS_SUCCESS) return;
    fail(op, what, " failed on cuda:", dev, ": ", api.cudnnGetErrorString(st), " (",
         describe(plan, dtype), ")");
  }
};

cudnnHandle_t cudnn_handle(const Call& c) {
  static std::once_flag once[kMaxDevices];
  static cudnnHandle_t handles[kMaxDevices] = {};
  if (c.dev < 0 || c.dev >= kMaxDevices) fail(c.op, "cuda:", c.dev, " is out of range");
  std::call_once(once[c.dev], [&] {
    cudnnHandle_t h = nullptr;
    c.check(c.api.cudnnCreate(&h), "cudnnCreate");
    c.check(c.api.cudnnSetStream(h, stream(c.dev)), "cudnnSetStream");
    handles[c.dev] = h;  // never destroyed, as the streams (runtime.cpp)
  });
  return handles[c.dev];
}

// Descriptors, destroyed with their scope.
struct TensorDesc {
  const Call& c;
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(const Call& call, cudnnDataType_t t, std::int64_t n, std::int64_t ch,
             std::int64_t h, std::int64_t w)
      : c(call) {
    c.check(c.api.cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    c.check(c.api.cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, int(n), int(ch), int(h),
                                             int(w)),
            "cudnnSetTensor4dDescriptor");
  }
  ~TensorDesc() { c.api.cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  const Call& c;
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const Call& call, cudnnDataType_t t, const ConvPlan& p) : c(call) {
    c.check(c.api.cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor");
    c.check(c.api.cudnnSetFilter4dDescriptor(d, t, CUDNN_TENSOR_NCHW, int(p.o),
                                             int(p.c / p.groups), int(p.kh), int(p.kw)),
            "cudnnSetFilter4dDescriptor");
  }
  ~FilterDesc() { c.api.cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  const Call& c;
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Call& call, cudnnDataType_t compute, const ConvPlan& p) : c(call) {
    c.check(c.api.cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor");
    c.check(c.api.cudnnSetConvolution2dDescriptor(d, int(p.pad_h), int(p.pad_w), int(p.sh),
                                                  int(p.sw), int(p.dh), int(p.dw),
                                                  CUDNN_CROSS_CORRELATION, compute),
            "cudnnSetConvolution2dDescriptor");
    c.check(c.api.cudnnSetConvolutionGroupCount(d, int(p.groups)),
            "cudnnSetConvolutionGroupCount");
  }
  void math(cudnnMathType_t m) const {
    c.check(c.api.cudnnSetConvolutionMathType(d, m), "cudnnSetConvolutionMathType");
  }
  ~ConvDesc() { c.api.cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Workspace from soma's caching allocator (freed blocks are reused at once: one stream per device).
struct Workspace {
  void* p = nullptr;
  std::size_t n = 0;
  int dev = 0;
  Workspace(std::size_t bytes, int device) : n(bytes), dev(device) {
    if (n) p = allocate(n, dev);
  }
  ~Workspace() {
    if (p) deallocate(p, n, dev);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
};

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}
// Accumulation: f64 in f64, everything else in f32 (f16/bf16 too, as the CPU's work dtype).
cudnnDataType_t compute_type(DType t) {
  return t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}
enum class Pass : int { forward, backward_data, backward_filter };

struct Algo {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace = 0;
};

using Algos = std::vector<Algo>;  // candidates, best first

std::mutex g_algo_mutex;
std::map<Ints, Algos> g_algos;  // by (pass, device, dtype, math, cuDNN-side geometry)

Ints algo_key(Pass pass, const Call& c, cudnnMathType_t math) {
  const ConvPlan& p = c.plan;
  return {int(pass), c.dev,  int(c.dtype), int(math), p.n,    p.c,    p.hp,  p.wp,  p.o,
          p.kh,      p.kw,   p.groups,     p.pad_h,   p.pad_w, p.sh,  p.sw,  p.dh,  p.dw};
}

// The heuristics' working algorithms: in their order those whose workspace is within the limit,
// then the others. list(perf, count, &returned); ws(algo, &bytes).
template <class Perf, class List, class Ws>
Algos choose(const Call& c, const ConvDesc& cd, int max_count, const char* list_name,
            const char* ws_name, List&& list, Ws&& ws) {
  std::vector<Perf> perf(static_cast<std::size_t>(max_count));
  int returned = 0;
  c.check(list(perf.data(), max_count, &returned), list_name);
  Algos within, over;
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[std::size_t(i)];
    if (r.status != CUDNN_STATUS_SUCCESS) continue;
    // The heuristics' math type, except that FMA stays FMA: their CUDNN_DEFAULT_MATH would let
    // f32 use TF32 on Ampere and later after set_allow_tf32(false).
    const cudnnMathType_t m = c.math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : r.mathType;
    cd.math(m);
    std::size_t bytes = 0;
    if (ws(r.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    (bytes <= kWorkspaceLimit ? within : over).push_back({int(r.algo), m, bytes});
  }
  within.insert(within.end(), over.begin(), over.end());
  if (within.empty())
    fail(c.op, list_name, " found no usable algorithm on cuda:", c.dev, " (",
         describe(c.plan, c.dtype), "; ", ws_name, " failed or every candidate reported a status)");
  return within;
}

template <class Choose>
Algos cached_algos(Pass pass, const Call& c, const ConvDesc& cd, Choose&& choose_fn) {
  const cudnnMathType_t want = c.math;
  const Ints key = algo_key(pass, c, want);
  {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) return it->second;
  }
  cd.math(want);
  Algos a = choose_fn();
  std::lock_guard<std::mutex> lock(g_algo_mutex);
  g_algos[key] = a;
  return a;
}

// Runs exec(algo, workspace, bytes) with the first candidate whose workspace can be allocated
// and which cuDNN runs; a candidate cuDNN reports NOT_SUPPORTED or ALLOC_FAILED for passes to
// the next. Any other failure is an error naming the op and shapes.
template <class Exec>
void run_algos(const Call& c, const ConvDesc& cd, const Algos& candidates, const char* what,
               Exec&& exec) {
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
  std::string no_memory;
  for (const Algo& al : candidates) {
    std::optional<Workspace> ws;
    try {
      ws.emplace(al.workspace, c.dev);
    } catch (const Error& e) {  // out of device memory for this one's workspace
      no_memory = e.what();
      continue;
    }
    cd.math(al.math);
    last = exec(al.algo, ws->p, ws->n);
    if (last == CUDNN_STATUS_SUCCESS) return;
    if (last != CUDNN_STATUS_NOT_SUPPORTED && last != CUDNN_STATUS_ALLOC_FAILED) break;
  }
  if (last != CUDNN_STATUS_SUCCESS) c.check(last, what);
  fail(c.op, "no ", what, " algorithm's workspace could be allocated on cuda:", c.dev, " (",
       describe(c.plan, c.dtype), "): ", no_memory);
}

// cuDNN's legacy API counts in int; a tensor is limited to 2^31 - 1 elements.
void check_int_range(const char* op, const ConvPlan& p, DType t) {
  const std::int64_t sizes[] = {p.n * p.c * p.hp * p.wp, p.n * p.o * p.oh * p.ow,
                                p.o * (p.c / p.groups) * p.kh * p.kw};
  for (std::int64_t s : sizes)
    if (s > INT_MAX)
      fail(op, "a tensor of ", s, " elements is more than cuDNN's limit of 2^31 - 1 (",
           describe(p, t), ")");
}

struct Scale {
  float f[2] = {1.0f, 0.0f};
  double d[2] = {1.0, 0.0};
  const void* alpha(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* beta(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d[1]) : &f[1]; }
};

ConvPlan conv_plan(const char* op, const Shape& x, const Shape& w, const Shape& y,
                   const Attrs& a) {
  ConvPlan p = plan_conv(x, w, a.ints("strides"), a.ints("pads"), a.ints("dilation"),
                         a.i("groups"));
  if (y != Shape{p.n, p.o, p.oh, p.ow})
    fail(op, "internal: the convolution's output ", shape_str(y), " is not cuDNN's ",
         shape_str({p.n, p.o, p.oh, p.ow}), " (input ", shape_str(x), ", kernel ", shape_str(w),
         ")");
  return p;
}

// The input as cuDNN reads it: x itself, or its explicitly padded copy.
Tensor padded_input(const Call& c, const Tensor& x) {
  if (!c.plan.explicit_padding()) return x;
  const ConvPlan& p = c.plan;
  Tensor xp = Tensor::empty({p.n, p.c, p.hp, p.wp}, x.dtype(), x.device());
  launched(launch_window_copy(first_element(x), first_element(xp), int(dtype_size(x.dtype())), p.pad_input(),
                              stream(c.dev)),
           c.op, c.dev);
  return xp;
}

// y = conv2d(x, w) [+ b, ReLU]: conv2d and conv2d_bias_act.
void conv_forward(const char* op, const std::vector<Tensor>& in, const Tensor& out,
                  const Attrs& a, bool bias_act) {
  for (const Tensor& t : in) check_float(op, t);
  const Tensor x = packed(in[0]), w = packed(in[1]);
  const Tensor b = bias_act && in.size() == 3 ? packed(in[2]) : Tensor();
  const bool relu = bias_act && a.i("relu") != 0;
  const int dev = use_device(out.device().index, op);
  const ConvPlan p = conv_plan(op, x.shape(), w.shape(), out.shape(), a);
  const DType t = x.dtype();
  into(out, [&](const Tensor& y) {
    if (y.numel() == 0) return;
    if (x.numel() == 0 || w.numel() == 0) {
      zero(y, op, dev);  // an empty sum
    } else {
      check_int_range(op, p, t);
      const Call c{op, p, t, dev, cudnn_api(op), requested_math(t, dev)};
      const cudnnHandle_t h = cudnn_handle(c);
      const Tensor xp = padded_input(c, x);
      const TensorDesc xd(c, cudnn_type(t), p.n, p.c, p.hp, p.wp);
      const TensorDesc yd(c, cudnn_type(t), p.n, p.o, p.oh, p.ow);
      const FilterDesc wd(c, cudnn_type(t), p);
      const ConvDesc cd(c, compute_type(t), p);
      int dims[4] = {};
      c.check(c.api.cudnnGetConvolution2dForwardOutputDim(cd.d, xd.d, wd.d, &dims[0], &dims[1],
                                                          &dims[2], &dims[3]),
              "cudnnGetConvolution2dForwardOutputDim");
      if (Shape{dims[0], dims[1], dims[2], dims[3]} != y.shape())
        fail(op, "internal: cuDNN's output ", shape_str({dims[0], dims[1], dims[2], dims[3]}),
             " is not the op's ", shape_str(y.shape()), " (", describe(p, t), ")");
      const Algos algos = cached_algos(Pass::forward, c, cd, [&] {
        return choose<cudnnConvolutionFwdAlgoPerf_t>(
            c, cd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "cudnnGetConvolutionForwardAlgorithm_v7",
            "cudnnGetConvolutionForwardWorkspaceSize",
            [&](cudnnConvolutionFwdAlgoPerf_t* r, int n, int* got) {
              return c.api.cudnnGetConvolutionForwardAlgorithm_v7(h, xd.d, wd.d, cd.d, yd.d, n,
                                                                  got, r);
            },
            [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
              return c.api.cudnnGetConvolutionForwardWorkspaceSize(h, xd.d, wd.d, cd.d, yd.d,
                                                                   algo, bytes);
            });
      });
      const Scale s;
      run_algos(c, cd, algos, "cudnnConvolutionForward", [&](int algo, void* ws, std::size_t n) {
        return c.api.cudnnConvolutionForward(h, s.alpha(t), xd.d, first_element(xp), wd.d, first_element(w),
                                             cd.d, cudnnConvolutionFwdAlgo_t(algo), ws, n,
                                             s.beta(t), yd.d, first_element(y));
      });
    }
    if (b.defined() || relu)
      launched(launch_bias_act(first_element(y), b.defined() ? first_element(b) : nullptr, elem(t), y.numel(),
                               p.o, p.oh * p.ow, relu, stream(dev)),
               op, dev);
  });
}

void conv2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  conv_forward("conv2d", in, out[0], a, false);
}
void conv2d_bias_act_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  conv_forward("conv2d_bias_act", in, out[0], a, true);
}

// dx = conv2d_backprop_input(g, w), shaped like attr input_shape.
void backprop_input_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                           const Attrs& a) {
  const char* op = "conv2d_backprop_input";
  for (const Tensor& t : in) check_float(op, t);
  const Tensor g = packed(in[0]), w = packed(in[1]);
  const int dev = use_device(out[0].device().index, op);
  const ConvPlan p = conv_plan(op, out[0].shape(), w.shape(), g.shape(), a);
  const DType t = g.dtype();
  into(out[0], [&](const Tensor& dx) {
    if (dx.numel() == 0) return;
    if (g.numel() == 0 || w.numel() == 0) return zero(dx, op, dev);
    check_int_range(op, p, t);
    const Call c{op, p, t, dev, cudnn_api(op), requested_math(t, dev)};
    const cudnnHandle_t h = cudnn_handle(c);
    // The gradient of the padded input, cropped afterwards; dx itself without explicit padding.
    const Tensor dxp = p.explicit_padding()
                           ? Tensor::empty({p.n, p.c, p.hp, p.wp}, t, dx.device())
                           : dx;
    const TensorDesc dxd(c, cudnn_type(t), p.n, p.c, p.hp, p.wp);
    const TensorDesc gd(c, cudnn_type(t), p.n, p.o, p.oh, p.ow);
    const FilterDesc wd(c, cudnn_type(t), p);
    const ConvDesc cd(c, compute_type(t), p);
    const Algos algos = cached_algos(Pass::backward_data, c, cd, [&] {
      return choose<cudnnConvolutionBwdDataAlgoPerf_t>(
          c, cd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
          "cudnnGetConvolutionBackwardDataAlgorithm_v7",
          "cudnnGetConvolutionBackwardDataWorkspaceSize",
          [&](cudnnConvolutionBwdDataAlgoPerf_t* r, int n, int* got) {
            return c.api.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd.d, gd.d, cd.d, dxd.d,
                                                                     n, got, r);
          },
          [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
            return c.api.cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd.d, gd.d, cd.d, dxd.d,
                                                                      algo, bytes);
          });
    });
    const Scale s;
    run_algos(c, cd, algos, "cudnnConvolutionBackwardData", [&](int algo, void* ws, std::size_t n) {
      return c.api.cudnnConvolutionBackwardData(h, s.alpha(t), wd.d, first_element(w), gd.d, first_element(g),
                                                cd.d, cudnnConvolutionBwdDataAlgo_t(algo), ws, n,
                                                s.beta(t), dxd.d, first_element(dxp));
    });
    if (p.explicit_padding())
      launched(launch_window_copy(first_element(dxp), first_element(dx), int(dtype_size(t)), p.crop_input(),
                                  stream(dev)),
               op, dev);
  });
}

// dw = conv2d_backprop_filter(x, g), shaped like attr filter_shape.
void backprop_filter_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  const char* op = "conv2d_backprop_filter";
  for (const Tensor& t : in) check_float(op, t);
  const Tensor x = packed(in[0]), g = packed(in[1]);
  const int dev = use_device(out[0].device().index, op);
  const ConvPlan p = conv_plan(op, x.shape(), out[0].shape(), g.shape(), a);
  const DType t = x.dtype();
  into(out[0], [&](const Tensor& dw) {
    if (dw.numel() == 0) return;
    if (x.numel() == 0 || g.numel() == 0) return zero(dw, op, dev);
    check_int_range(op, p, t);
    const Call c{op, p, t, dev, cudnn_api(op), requested_math(t, dev)};
    const cudnnHandle_t h = cudnn_handle(c);
    const Tensor xp = padded_input(c, x);
    const TensorDesc xd(c, cudnn_type(t), p.n, p.c, p.hp, p.wp);
    const TensorDesc gd(c, cudnn_type(t), p.n, p.o, p.oh, p.ow);
    const FilterDesc wd(c, cudnn_type(t), p);
    const ConvDesc cd(c, compute_type(t), p);
    const Algos algos = cached_algos(Pass::backward_filter, c, cd, [&] {
      return choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
          c, cd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
          "cudnnGetConvolutionBackwardFilterWorkspaceSize",
          [&](cudnnConvolutionBwdFilterAlgoPerf_t* r, int n, int* got) {
            return c.api.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd.d, gd.d, cd.d, wd.d,
                                                                       n, got, r);
          },
          [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
            return c.api.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd.d, gd.d, cd.d,
                                                                        wd.d, algo, bytes);
          });
    });
    const Scale s;
    run_algos(c, cd, algos, "cudnnConvolutionBackwardFilter",
              [&](int algo, void* ws, std::size_t n) {
                return c.api.cudnnConvolutionBackwardFilter(
                    h, s.alpha(t), xd.d, first_element(xp), gd.d, first_element(g), cd.d,
                    cudnnConvolutionBwdFilterAlgo_t(algo), ws, n, s.beta(t), wd.d, first_element(dw));
              });
  });
}

// ---- 3-d convolution (conv3d ops, src/ops/conv3d.cpp) through cuDNN's N-d descriptors ----------
// NCDHW / OIDHW, cross-correlation, groups and dilation as the ops define them. cuDNN takes one
// padding per axis: unevenly padded convolutions (Keras' "same" with an odd total) and tensors
// past cuDNN's int range run the ops' composite instead (conv2d with the depth taps folded into
// the channels, which pads explicitly). Algorithms from cuDNN's heuristics per call (no
// benchmarking), workspace from soma's allocator, candidates tried in order as for conv2d.
struct Conv3Call {
  const char* op;
  DType dtype;
  int dev;
  const CudnnApi& api;
  cudnnMathType_t math;
  std::string what;  // shapes and attrs, for messages
  void check(cudnnStatus_t st, const char* fn) const {
    if (st == CUDNN_STATUS_SUCCESS) return;
    fail(op, fn, " failed on cuda:", dev, ": ", api.cudnnGetErrorString(st), " (", what, ")");
  }
};

cudnnHandle_t conv3_handle(const Conv3Call& c) {
  static std::once_flag once[kMaxDevices];
  static cudnnHandle_t handles[kMaxDevices] = {};
  if (c.dev < 0 || c.dev >= kMaxDevices) fail(c.op, "cuda:", c.dev, " is out of range");
  std::call_once(once[c.dev], [&] {
    cudnnHandle_t h = nullptr;
    c.check(c.api.cudnnCreate(&h), "cudnnCreate");
    c.check(c.api.cudnnSetStream(h, stream(c.dev)), "cudnnSetStream");
    handles[c.dev] = h;  // never destroyed, as the streams (runtime.cpp)
  });
  return handles[c.dev];
}

struct TensorNd {
  const Conv3Call& c;
  cudnnTensorDescriptor_t d = nullptr;
  TensorNd(const Conv3Call& call, const Shape& s) : c(call) {
    int dims[5], strides[5];
    for (int i = 4, st = 1; i >= 0; --i) {
      dims[i] = int(s[std::size_t(i)]);
      strides[i] = st;
      st *= dims[i];
    }
    c.check(c.api.cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor");
    c.check(c.api.cudnnSetTensorNdDescriptor(d, cudnn_type(c.dtype), 5, dims, strides),
            "cudnnSetTensorNdDescriptor");
  }
  ~TensorNd() { c.api.cudnnDestroyTensorDescriptor(d); }
  TensorNd(const TensorNd&) = delete;
  TensorNd& operator=(const TensorNd&) = delete;
};

struct FilterNd {
  const Conv3Call& c;
  cudnnFilterDescriptor_t d = nullptr;
  FilterNd(const Conv3Call& call, const Shape& s) : c(call) {
    int dims[5];
    for (int i = 0; i < 5; ++i) dims[i] = int(s[std::size_t(i)]);
    c.check(c.api.cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor");
    c.check(c.api.cudnnSetFilterNdDescriptor(d, cudnn_type(c.dtype), CUDNN_TENSOR_NCHW, 5, dims),
            "cudnnSetFilterNdDescriptor");
  }
  ~FilterNd() { c.api.cudnnDestroyFilterDescriptor(d); }
  FilterNd(const FilterNd&) = delete;
  FilterNd& operator=(const FilterNd&) = delete;
};

struct ConvNd {
  const Conv3Call& c;
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvNd(const Conv3Call& call, const Attrs& a) : c(call) {
    const Ints &st = a.ints("strides"), &p = a.ints("pads"), &dl = a.ints("dilation");
    int pad[3], stride[3], dil[3];
    for (int i = 0; i < 3; ++i) {
      pad[i] = int(p[std::size_t(2 * i)]);
      stride[i] = int(st[std::size_t(i)]);
      dil[i] = int(dl[std::size_t(i)]);
    }
    c.check(c.api.cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor");
    c.check(c.api.cudnnSetConvolutionNdDescriptor(d, 3, pad, stride, dil, CUDNN_CROSS_CORRELATION,
                                                  compute_type(c.dtype)),
            "cudnnSetConvolutionNdDescriptor");
    c.check(c.api.cudnnSetConvolutionGroupCount(d, int(a.i("groups"))),
            "cudnnSetConvolutionGroupCount");
  }
  void math(cudnnMathType_t m) const {
    c.check(c.api.cudnnSetConvolutionMathType(d, m), "cudnnSetConvolutionMathType");
  }
  ~ConvNd() { c.api.cudnnDestroyConvolutionDescriptor(d); }
  ConvNd(const ConvNd&) = delete;
  ConvNd& operator=(const ConvNd&) = delete;
};

// cuDNN's case: one padding per axis and every tensor within int range.
bool cudnn_conv3_case(const Attrs& a, std::initializer_list<const Shape*> shapes) {
  const Ints& p = a.ints("pads");
  for (int i = 0; i < 3; ++i)
    if (p[std::size_t(2 * i)] != p[std::size_t(2 * i + 1)]) return false;
  for (const Shape* s : shapes) {
    std::int64_t n = 1;
    for (auto d : *s) n *= d;
    if (n > INT_MAX) return false;
  }
  return true;
}

std::string describe3(const Shape& x, const Shape& w, const Shape& y, DType t, const Attrs& a) {
  return "input " + shape_str(x) + ", kernel " + shape_str(w) + ", output " + shape_str(y) + ", " +
         dtype_name(t) + ", strides " + shape_str(a.ints("strides")) + ", pads " +
         shape_str(a.ints("pads")) + ", dilation " + shape_str(a.ints("dilation")) + ", groups " +
         std::to_string(a.i("groups"));
}

// The heuristics' candidates, best first (those over the workspace limit last), each run until
// one works: list(perf, count, &returned), ws(algo, &bytes), exec(algo, workspace, bytes).
template <class Perf, class List, class Ws, class Exec>
void run_conv3(const Conv3Call& c, const ConvNd& cd, int max_count, const char* what, List&& list,
               Ws&& ws, Exec&& exec) {
  std::vector<Perf> perf(static_cast<std::size_t>(max_count));
  int returned = 0;
  cd.math(c.math);
  c.check(list(perf.data(), max_count, &returned), what);
  Algos within, over;
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[std::size_t(i)];
    if (r.status != CUDNN_STATUS_SUCCESS) continue;
    const cudnnMathType_t m = c.math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : r.mathType;
    cd.math(m);
    std::size_t bytes = 0;
    if (ws(r.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    (bytes <= kWorkspaceLimit ? within : over).push_back({int(r.algo), m, bytes});
  }
  within.insert(within.end(), over.begin(), over.end());
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  std::string no_memory;
  for (const Algo& al : within) {
    std::optional<Workspace> buf;
    try {
      buf.emplace(al.workspace, c.dev);
    } catch (const Error& e) {
      no_memory = e.what();
      continue;
    }
    cd.math(al.math);
    last = exec(al.algo, buf->p, buf->n);
    if (last == CUDNN_STATUS_SUCCESS) return;
    if (last != CUDNN_STATUS_NOT_SUPPORTED && last != CUDNN_STATUS_ALLOC_FAILED) break;
  }
  if (!no_memory.empty() && last == CUDNN_STATUS_NOT_SUPPORTED)
    fail(c.op, "no ", what, " algorithm's workspace could be allocated on cuda:", c.dev, " (",
         c.what, "): ", no_memory);
  c.check(last, what);
}

void conv3d_cudnn_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                         const Attrs& a) {
  const char* op = "conv3d";
  for (const Tensor& t : in) check_float(op, t);
  if (!cudnn_conv3_case(a, {&in[0].shape(), &in[1].shape(), &out[0].shape()}))
    return detail::copy_into(detail::conv3d_composite(in[0], in[1], a), out[0]);
  const Tensor x = packed(in[0]), w = packed(in[1]);
  const int dev = use_device(out[0].device().index, op);
  const DType t = x.dtype();
  into(out[0], [&](const Tensor& y) {
    if (y.numel() == 0) return;
    if (x.numel() == 0 || w.numel() == 0) return zero(y, op, dev);
    const Conv3Call c{op, t, dev, cudnn_api(op), requested_math(t, dev),
                      describe3(x.shape(), w.shape(), y.shape(), t, a)};
    const cudnnHandle_t h = conv3_handle(c);
    const TensorNd xd(c, x.shape()), yd(c, y.shape());
    const FilterNd wd(c, w.shape());
    const ConvNd cd(c, a);
    const Scale s;
    run_conv3<cudnnConvolutionFwdAlgoPerf_t>(
        c, cd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "cudnnConvolutionForward",
        [&](cudnnConvolutionFwdAlgoPerf_t* r, int n, int* got) {
          return c.api.cudnnGetConvolutionForwardAlgorithm_v7(h, xd.d, wd.d, cd.d, yd.d, n, got, r);
        },
        [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
          return c.api.cudnnGetConvolutionForwardWorkspaceSize(h, xd.d, wd.d, cd.d, yd.d, algo,
                                                               bytes);
        },
        [&](int algo, void* ws, std::size_t n) {
          return c.api.cudnnConvolutionForward(h, s.alpha(t), xd.d, first_element(x), wd.d,
                                               first_element(w), cd.d,
                                               cudnnConvolutionFwdAlgo_t(algo), ws, n, s.beta(t),
                                               yd.d, first_element(y));
        });
  });
}

void conv3d_backprop_input_cudnn_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                        const Attrs& a) {
  const char* op = "conv3d_backprop_input";
  for (const Tensor& t : in) check_float(op, t);
  if (!cudnn_conv3_case(a, {&in[0].shape(), &in[1].shape(), &out[0].shape()}))
    return detail::copy_into(detail::conv3d_backprop_input_composite(in[0], in[1], a), out[0]);
  const Tensor g = packed(in[0]), w = packed(in[1]);
  const int dev = use_device(out[0].device().index, op);
  const DType t = g.dtype();
  into(out[0], [&](const Tensor& dx) {
    if (dx.numel() == 0) return;
    if (g.numel() == 0 || w.numel() == 0) return zero(dx, op, dev);
    const Conv3Call c{op, t, dev, cudnn_api(op), requested_math(t, dev),
                      describe3(dx.shape(), w.shape(), g.shape(), t, a)};
    const cudnnHandle_t h = conv3_handle(c);
    const TensorNd dxd(c, dx.shape()), gd(c, g.shape());
    const FilterNd wd(c, w.shape());
    const ConvNd cd(c, a);
    const Scale s;
    run_conv3<cudnnConvolutionBwdDataAlgoPerf_t>(
        c, cd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, "cudnnConvolutionBackwardData",
        [&](cudnnConvolutionBwdDataAlgoPerf_t* r, int n, int* got) {
          return c.api.cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd.d, gd.d, cd.d, dxd.d, n,
                                                                   got, r);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
          return c.api.cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd.d, gd.d, cd.d, dxd.d,
                                                                    algo, bytes);
        },
        [&](int algo, void* ws, std::size_t n) {
          return c.api.cudnnConvolutionBackwardData(h, s.alpha(t), wd.d, first_element(w), gd.d,
                                                    first_element(g), cd.d,
                                                    cudnnConvolutionBwdDataAlgo_t(algo), ws, n,
                                                    s.beta(t), dxd.d, first_element(dx));
        });
  });
}

void conv3d_backprop_filter_cudnn_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                         const Attrs& a) {
  const char* op = "conv3d_backprop_filter";
  for (const Tensor& t : in) check_float(op, t);
  if (!cudnn_conv3_case(a, {&in[0].shape(), &in[1].shape(), &out[0].shape()}))
    return detail::copy_into(detail::conv3d_backprop_filter_composite(in[0], in[1], a), out[0]);
  const Tensor x = packed(in[0]), g = packed(in[1]);
  const int dev = use_device(out[0].device().index, op);
  const DType t = x.dtype();
  into(out[0], [&](const Tensor& dw) {
    if (dw.numel() == 0) return;
    if (x.numel() == 0 || g.numel() == 0) return zero(dw, op, dev);
    const Conv3Call c{op, t, dev, cudnn_api(op), requested_math(t, dev),
                      describe3(x.shape(), dw.shape(), g.shape(), t, a)};
    const cudnnHandle_t h = conv3_handle(c);
    const TensorNd xd(c, x.shape()), gd(c, g.shape());
    const FilterNd wd(c, dw.shape());
    const ConvNd cd(c, a);
    const Scale s;
    run_conv3<cudnnConvolutionBwdFilterAlgoPerf_t>(
        c, cd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, "cudnnConvolutionBackwardFilter",
        [&](cudnnConvolutionBwdFilterAlgoPerf_t* r, int n, int* got) {
          return c.api.cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd.d, gd.d, cd.d, wd.d, n,
                                                                     got, r);
        },
        [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
          return c.api.cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd.d, gd.d, cd.d, wd.d,
                                                                      algo, bytes);
        },
        [&](int algo, void* ws, std::size_t n) {
          return c.api.cudnnConvolutionBackwardFilter(h, s.alpha(t), xd.d, first_element(x), gd.d,
                                                      first_element(g), cd.d,
                                                      cudnnConvolutionBwdFilterAlgo_t(algo), ws, n,
                                                      s.beta(t), wd.d, first_element(dw));
        });
  });
}

#else  // built without cudnn.h: the convolutions say so

[[noreturn]] void no_cudnn(const char* op) { fail(op, cudnn_unavailable_reason()); }
void conv2d_kernel(const std::vector<Tensor>&, std::vector<Tensor>&, const Attrs&) {
  no_cudnn("conv2d");
}
void conv2d_bias_act_kernel(const std::vector<Tensor>&, std::vector<Tensor>&, const Attrs&) {
  no_cudnn("conv2d_bias_act");
}
void backprop_input_kernel(const std::vector<Tensor>&, std::vector<Tensor>&, const Attrs&) {
  no_cudnn("conv2d_backprop_input");
}
void backprop_filter_kernel(const std::vector<Tensor>&, std::vector<Tensor>&, const Attrs&) {
  no_cudnn("conv2d_backprop_filter");
}

#endif

}  // namespace

void register_cuda_conv_kernels() {
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CUDA, fn); };
  reg("conv2d", conv2d_kernel);
  reg("conv2d_bias_act", conv2d_bias_act_kernel);
  reg("conv2d_backprop_input", backprop_input_kernel);
  reg("conv2d_backprop_filter", backprop_filter_kernel);
  reg("max_pool2d", max_pool_kernel);
  reg("max_pool2d_grad", max_pool_grad_kernel);
  reg("max_pool2d_grad_grad", max_pool_grad_grad_kernel);
  reg("avg_pool2d", avg_pool_kernel);
  reg("max_pool2d_with_indices", max_pool_with_indices_kernel);
  reg("max_unpool2d", max_unpool_kernel);
  reg("avg_pool2d_grad", avg_pool_grad_kernel);
#if SOMA_HAS_CUDNN_HEADERS  // else the conv3d ops keep their composite kernels (conv2d's)
  reg("conv3d", conv3d_cudnn_kernel);
  reg("conv3d_backprop_input", conv3d_backprop_input_cudnn_kernel);
  reg("conv3d_backprop_filter", conv3d_backprop_filter_cudnn_kernel);
#endif
}

}  // namespace soma::cuda_detail
