// scaled_dot_product_attention on CUDA: cuDNN 9's fused flash attention forward, through the
// backend graph API in C (cudnnBackend*; soma does not use the cudnn_frontend header).
//
// The graph (attention_graph.hpp, checked on the CPU) is built once per (device, dtype, shape,
// causal), its engine chosen by cuDNN's heuristics (mode A, then FALLBACK; the first engine config
// whose execution plan finalises) and the plan cached. Whatever cuDNN does not take runs the op's
// composite kernel (internal/attention_composite.hpp), with the same outputs:
//   - f32/f64 inputs, an explicit mask, head dims not multiples of 8 or above 256, no keys, a
//     pre-Ampere GPU (attn::unsupported_reason);
//   - any failure while building, finalising, finding an engine or executing: the composite runs
//     instead, silently, and the shape is remembered so it is not tried again;
//   - SOMA_CUDNN_ATTENTION=debug prints each fallback's reason (with the shapes) once on stderr;
//   - SOMA_CUDNN_ATTENTION=0 (read at each call): never tried.
// cuda::fused_attention_stats() counts both outcomes (tests check which path ran).
// The backward op (scaled_dot_product_attention_grad) runs the composite on CUDA: it recomputes
// the probabilities from the forward's lse, so the two paths combine freely.
// cuDNN's Stats output is f32 [b, h, sq, 1]; the op's lse is in q's dtype, as on the CPU.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/attention_graph.hpp"
#include "backend/cuda/cudnn_loader.hpp"
#include "backend/cuda/host_util.hpp"
#include "backend/cuda/runtime.hpp"
#include "internal/attention_composite.hpp"
#include "internal/copy.hpp"
#include "soma/cuda.hpp"
#include "soma/op.hpp"

namespace soma::cuda_detail {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

struct Counters {
  std::atomic<std::uint64_t> fused{0}, fallback{0};
  std::mutex m;
  std::string last;
  std::set<std::string> printed;  // SOMA_CUDNN_ATTENTION=debug's lines so far
};
Counters& counters() {
  static Counters* c = new Counters;  // never destroyed: kernels may run during static exit
  return *c;
}

#if SOMA_HAS_CUDNN_HEADERS

constexpr int kMaxDevices = 64;
constexpr std::size_t kMaxFailed = 4096;  // remembered refusals (then forgotten and retried)

// A failure while building or running the fused graph: becomes a fallback, never an error.
struct Unusable {
  std::string why;
};

// Backend descriptors destroyed together (reverse creation order).
class Descriptors {
 public:
  explicit Descriptors(const CudnnApi& api) : api_(api) {}
  ~Descriptors() {
    for (auto it = ds_.rbegin(); it != ds_.rend(); ++it) api_.cudnnBackendDestroyDescriptor(*it);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t, const char* what) {
    cudnnBackendDescriptor_t d = nullptr;
    check(api_.cudnnBackendCreateDescriptor(t, &d), "cudnnBackendCreateDescriptor", what);
    ds_.push_back(d);
    return d;
  }
  template <class T>
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, const T* values, std::int64_t count,
           const char* what) {
    check(api_.cudnnBackendSetAttribute(d, name, type, count, values),
          "cudnnBackendSetAttribute", what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    check(api_.cudnnBackendFinalize(d), "cudnnBackendFinalize", what);
  }
  void check(cudnnStatus_t st, const char* call, const char* what) const {
    if (st != CUDNN_STATUS_SUCCESS)
      throw Unusable{std::string(call) + " (" + what + "): " + api_.cudnnGetErrorString(st)};
  }
  const CudnnApi& api() const { return api_; }

 private:
  const CudnnApi& api_;
  std::vector<cudnnBackendDescriptor_t> ds_;
};

// A finalised execution plan and everything it refers to (kept alive with it).
struct Plan {
  std::unique_ptr<Descriptors> keep;
  cudnnBackendDescriptor_t exec = nullptr;
  std::int64_t workspace = 0;
  std::vector<std::int64_t> uids;  // the variant pack's tensors
};

cudnnDataType_t cudnn_elem(attn::Elem e) {
  switch (e) {
    case attn::Elem::f16: return CUDNN_DATA_HALF;
    case attn::Elem::bf16: return CUDNN_DATA_BFLOAT16;
    case attn::Elem::i32: return CUDNN_DATA_INT32;
    case attn::Elem::boolean: return CUDNN_DATA_BOOLEAN;
    case attn::Elem::f32: break;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnPointwiseMode_t pointwise_mode(attn::Mode m) {
  switch (m) {
    case attn::Mode::mul: return CUDNN_POINTWISE_MUL;
    case attn::Mode::add: return CUDNN_POINTWISE_ADD;
    case attn::Mode::sub: return CUDNN_POINTWISE_SUB;
    case attn::Mode::div: return CUDNN_POINTWISE_DIV;
    case attn::Mode::exp: return CUDNN_POINTWISE_EXP;
    case attn::Mode::log: return CUDNN_POINTWISE_LOG;
    case attn::Mode::gen_index: return CUDNN_POINTWISE_GEN_INDEX;
    case attn::Mode::cmp_ge: return CUDNN_POINTWISE_CMP_GE;
    case attn::Mode::binary_select: return CUDNN_POINTWISE_BINARY_SELECT;
    default: break;
  }
  throw Unusable{"internal: not a pointwise mode"};
}

using Bd = cudnnBackendDescriptor_t;

Bd tensor_desc(Descriptors& D, const attn::TensorNode& t) {
  const Bd d = D.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
  const cudnnDataType_t dt = cudnn_elem(t.type);
  const std::int64_t align = 16;
  D.set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &dt, 1, "tensor data type");
  D.set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.dims.data(),
        std::int64_t(t.dims.size()), "tensor dims");
  D.set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.strides.data(),
        std::int64_t(t.strides.size()), "tensor strides");
  D.set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &t.uid, 1, "tensor uid");
  D.set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align, 1, "tensor alignment");
  const bool yes = true;
  if (t.is_virtual)
    D.set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &yes, 1, "tensor virtual");
  if (t.by_value)
    D.set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &yes, 1, "tensor by value");
  D.finalize(d, "tensor");
  return d;
}

Bd operation_desc(Descriptors& D, const attn::OpNode& op, const std::map<std::int64_t, Bd>& t) {
  auto td = [&](std::int64_t id) { return t.at(id); };
  const cudnnDataType_t math = cudnn_elem(op.math);
  if (op.mode == attn::Mode::matmul) {
    const Bd md = D.make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    D.set(md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &math, 1, "matmul comp type");
    D.finalize(md, "matmul");
    const Bd o = D.make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
    const Bd a = td(op.inputs[0]), b = td(op.inputs[1]), c = td(op.output);
    D.set(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &a, 1, "matmul A");
    D.set(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &b, 1, "matmul B");
    D.set(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &c, 1, "matmul C");
    D.set(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &md, 1, "matmul desc");
    D.finalize(o, "matmul op");
    return o;
  }
  if (op.mode == attn::Mode::reduce_max || op.mode == attn::Mode::reduce_add) {
    const Bd rd = D.make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    const cudnnReduceTensorOp_t r =
        op.mode == attn::Mode::reduce_max ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
    D.set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &math, 1, "reduction comp type");
    D.set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &r, 1,
          "reduction operator");
    D.finalize(rd, "reduction");
    const Bd o = D.make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
    const Bd x = td(op.inputs[0]), y = td(op.output);
    D.set(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x, 1, "reduction X");
    D.set(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y, 1, "reduction Y");
    D.set(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &rd, 1,
          "reduction desc");
    D.finalize(o, "reduction op");
    return o;
  }
  const Bd pd = D.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
  const cudnnPointwiseMode_t mode = pointwise_mode(op.mode);
  D.set(pd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode, 1, "pointwise mode");
  D.set(pd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &math, 1, "pointwise math");
  if (op.mode == attn::Mode::gen_index)
    D.set(pd, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &op.axis, 1, "gen_index axis");
  D.finalize(pd, "pointwise");
  const Bd o = D.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
  D.set(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, &pd, 1,
        "pointwise desc");
  const Bd x = td(op.inputs[0]), y = td(op.output);
  D.set(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x, 1, "pointwise X");
  D.set(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y, 1, "pointwise Y");
  if (op.inputs.size() >= 2) {
    const Bd b = td(op.inputs[1]);
    D.set(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &b, 1,
          "pointwise B");
  }
  if (op.inputs.size() >= 3) {
    const Bd tt = td(op.inputs[2]);
    D.set(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &tt, 1,
          "pointwise T");
  }
  const float one = 1.0f;
  D.set(o, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, &one, 1, "pointwise alpha1");
  D.set(o, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, &one, 1, "pointwise alpha2");
  D.finalize(o, "pointwise op");
  return o;
}

// The graph's descriptors, then an execution plan from the heuristics' first engine config that
// finalises. Throws Unusable with the last reason when none does.
std::shared_ptr<Plan> build_plan(const CudnnApi& api, cudnnHandle_t handle, const attn::Graph& g) {
  auto plan = std::make_shared<Plan>();
  plan->keep = std::make_unique<Descriptors>(api);
  Descriptors& D = *plan->keep;
  std::map<std::int64_t, Bd> tensors;
  for (const attn::TensorNode& t : g.tensors) tensors[t.uid] = tensor_desc(D, t);
  std::vector<Bd> ops;
  for (const attn::OpNode& op : g.ops) ops.push_back(operation_desc(D, op, tensors));

  const Bd graph = D.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  D.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
        std::int64_t(ops.size()), "graph ops");
  // The graph's handle: deprecated since 9.x (and so spelled by value, to keep the build free of
  // deprecation warnings), still needed by older 9.x libraries; a refusal here is harmless.
  api.cudnnBackendSetAttribute(graph, static_cast<cudnnBackendAttributeName_t>(800),
                               CUDNN_TYPE_HANDLE, 1, &handle);
  D.finalize(graph, "operation graph");

  std::string last = "the heuristics returned no engine configuration";
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Bd> cfgs;
    try {
      const Bd heur = D.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
      D.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph, 1,
            "heuristics graph");
      D.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode, 1, "heuristics mode");
      D.finalize(heur, "heuristics");
      std::int64_t count = 0;
      D.check(api.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              "cudnnBackendGetAttribute", "heuristics result count");
      if (count <= 0) continue;
      for (std::int64_t i = 0; i < count; ++i)
        cfgs.push_back(D.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
      std::int64_t got = 0;
      D.check(api.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data()),
              "cudnnBackendGetAttribute", "heuristics results");
      cfgs.resize(std::size_t(std::max<std::int64_t>(0, std::min(got, count))));
    } catch (const Unusable& e) {
      last = e.why;
      continue;
    }
    for (Bd cfg : cfgs) {
      try {
        const Bd ep = D.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        D.set(ep, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle, 1, "plan handle");
        D.set(ep, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfg, 1,
              "plan engine config");
        D.finalize(ep, "execution plan");
        std::int64_t ws = 0, n = 0;
        D.check(api.cudnnBackendGetAttribute(ep, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                             CUDNN_TYPE_INT64, 1, &n, &ws),
                "cudnnBackendGetAttribute", "plan workspace size");
        plan->exec = ep;
        plan->workspace = ws < 0 ? 0 : ws;
        plan->uids = g.io_uids();
        return plan;
      } catch (const Unusable& e) {
        last = e.why;
      }
    }
  }
  throw Unusable{"no engine for the fused attention graph: " + last};
}

cudnnHandle_t handle_for(const CudnnApi& api, int dev) {
  static std::mutex m;
  static cudnnHandle_t handles[kMaxDevices] = {};
  if (dev < 0 || dev >= kMaxDevices) throw Unusable{"device index out of range"};
  std::lock_guard<std::mutex> lock(m);
  if (!handles[dev]) {
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = api.cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS)
      throw Unusable{std::string("cudnnCreate: ") + api.cudnnGetErrorString(st)};
    st = api.cudnnSetStream(h, stream(dev));
    if (st != CUDNN_STATUS_SUCCESS)
      throw Unusable{std::string("cudnnSetStream: ") + api.cudnnGetErrorString(st)};
    handles[dev] = h;  // never destroyed, as the streams (runtime.cpp)
  }
  return handles[dev];
}

// Plans, or the reason a key cannot have one, by Problem::key. Never destroyed.
struct Cache {
  std::mutex m;
  std::map<std::vector<std::int64_t>, std::shared_ptr<Plan>> plans;
  std::map<std::vector<std::int64_t>, std::string> failed;
};
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Runs the fused graph; empty on success, else why not (the outputs are then unspecified).
std::string try_fused(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor &q0 = in[0], &k0 = in[1], &v0 = in[2];
  attn::Problem p;
  p.b = q0.dim(0), p.h = q0.dim(1), p.sq = q0.dim(2), p.d = q0.dim(3);
  p.sk = k0.dim(2), p.dv = v0.dim(3);
  const DType t = q0.dtype();
  p.dtype = t == DType::f16 ? attn::Elem::f16 : t == DType::bf16 ? attn::Elem::bf16 : attn::Elem::f32;
  p.causal = a.has("causal") && a.b("causal");
  p.has_mask = in.size() > 3;
  // q, k, v in place when packed [b, h, s, d] or [b, s, h, d]-seen-as-[b, h, s, d] (the
  // MultiHeadAttention layer's heads), else packed copies.
  auto layout = [](const Tensor& x, attn::Layout& l) {
    const std::vector<std::int64_t> dims(x.shape().begin(), x.shape().end());
    const std::vector<std::int64_t> st(x.strides().begin(), x.strides().end());
    if (attn::match_layout(dims, st, l)) return x;
    l = attn::Layout::bhsd;
    return packed(x);
  };
  const int dev = use_device(out[0].device().index, kOp);
  if (std::string why = attn::unsupported_reason(p, compute_major(dev), cudnn_version());
      !why.empty())
    return why;

  Tensor q, k, v;
  try {
    q = layout(q0, p.q_layout), k = layout(k0, p.k_layout), v = layout(v0, p.v_layout);
  } catch (const std::exception& e) {
    return e.what();
  }
  const std::vector<std::int64_t> key = p.key(dev);
  Cache& c = cache();
  std::shared_ptr<Plan> plan;
  const CudnnApi* api = nullptr;
  cudnnHandle_t handle = nullptr;
  try {
    std::lock_guard<std::mutex> lock(c.m);
    if (auto f = c.failed.find(key); f != c.failed.end()) return f->second;
    if (auto it = c.plans.find(key); it != c.plans.end()) plan = it->second;
    try {
      api = &cudnn_api(kOp);
    } catch (const Error& e) {
      throw Unusable{e.what()};
    }
    handle = handle_for(*api, dev);
    if (!plan) {
      if (c.plans.size() >= attn::kMaxPlans)
        throw Unusable{"the plan cache is full (" + std::to_string(attn::kMaxPlans) +
                       " shapes): further shapes run the composite kernel"};
      const attn::Graph g = attn::forward_graph(p);
      if (std::string bad = attn::validate(g); !bad.empty())
        throw Unusable{"internal: the attention graph is malformed: " + bad};
      plan = build_plan(*api, handle, g);
      c.plans[key] = plan;
    }
  } catch (const Unusable& e) {
    std::lock_guard<std::mutex> lock(c.m);
    if (c.failed.size() >= kMaxFailed) c.failed.clear();  // bounded: shapes may never repeat
    c.failed.emplace(key, e.why);
    return e.why;
  } catch (const std::exception& e) {  // anything else while building: the same
    std::lock_guard<std::mutex> lock(c.m);
    c.failed.emplace(key, e.what());
    return e.what();
  }

  try {
    const bool out_direct = out[0].is_contiguous() && aligned(first_element(out[0]));
    const Tensor o = out_direct ? out[0] : Tensor::empty(out[0].shape(), t, out[0].device());
    const Tensor stats = Tensor::empty({p.b, p.h, p.sq}, DType::f32, out[0].device());
    for (const Tensor* x : {&std::as_const(q), &std::as_const(k), &std::as_const(v), &o, &stats})
      if (!aligned(first_element(*x))) return "a tensor's data is not 16-byte aligned";
    const float scale = float(a.has("scale") && a.f("scale") > 0 ? a.f("scale")
                                                                   : 1.0 / std::sqrt(double(p.d)));
    // The masked logits' value: -inf, or the lowest float for cuDNN before 9.10, whose softmax
    // engines prefer it (cudnn_frontend does the same); either gives those keys exp() = 0.
    const float neg_inf = cudnn_version() >= 91000 ? -std::numeric_limits<float>::infinity()
                                                   : std::numeric_limits<float>::lowest();
    std::vector<void*> ptrs;
    for (std::int64_t id : plan->uids) {
      switch (id) {
        case attn::uid::q: ptrs.push_back(first_element(q)); break;
        case attn::uid::k: ptrs.push_back(first_element(k)); break;
        case attn::uid::v: ptrs.push_back(first_element(v)); break;
        case attn::uid::o: ptrs.push_back(first_element(o)); break;
        case attn::uid::stats: ptrs.push_back(first_element(stats)); break;
        case attn::uid::scale: ptrs.push_back(const_cast<float*>(&scale)); break;
        case attn::uid::neg_inf: ptrs.push_back(const_cast<float*>(&neg_inf)); break;
        default: throw Unusable{"internal: unknown uid " + std::to_string(id)};
      }
    }
    void* ws = plan->workspace > 0 ? allocate(std::size_t(plan->workspace), dev) : nullptr;
    struct WsFree {
      void* p;
      std::size_t n;
      int dev;
      ~WsFree() {
        if (p) deallocate(p, n, dev);
      }
    } ws_free{ws, std::size_t(plan->workspace), dev};
    Descriptors D(*api);
    const Bd vp = D.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    D.set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, plan->uids.data(),
          std::int64_t(plan->uids.size()), "variant pack uids");
    D.set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(),
          std::int64_t(ptrs.size()), "variant pack pointers");
    D.set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws, 1,
          "variant pack workspace");
    D.finalize(vp, "variant pack");
    D.check(api->cudnnBackendExecute(handle, plan->exec, vp), "cudnnBackendExecute", "attention");
    if (!out_direct) detail::copy_into(o, out[0]);
    detail::copy_into(stats, out[1]);  // f32 -> q's dtype
  } catch (const Unusable& e) {
    std::lock_guard<std::mutex> lock(c.m);
    c.failed.emplace(key, e.why);
    c.plans.erase(key);
    return e.why;
  } catch (const std::exception& e) {  // e.g. no device memory for the workspace: this call only
    return e.what();
  }
  return {};
}

#else  // built without cudnn.h

std::string try_fused(const std::vector<Tensor>&, std::vector<Tensor>&, const Attrs&) {
  return cudnn_unavailable_reason();
}

#endif

void sdpa_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  // Tensors not on a CUDA device (a test running this slot's kernel on CPU tensors): the
  // composite, which runs anywhere, and nothing counted.
  if (out[0].device().kind != DeviceKind::CUDA) return detail::sdpa_composite_kernel(in, out, a);
  const attn::Setting setting = attn::parse_setting(std::getenv("SOMA_CUDNN_ATTENTION"));
  const std::string why =
      setting == attn::Setting::off ? std::string("SOMA_CUDNN_ATTENTION=0") : try_fused(in, out, a);
  Counters& n = counters();
  if (why.empty()) {
    n.fused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  n.fallback.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(n.m);
    n.last = why;
  }
  if (setting == attn::Setting::debug) {  // each (reason, shapes) once
    const std::string line = why + " (query " + shape_str(in[0].shape()) + ", key " +
                             shape_str(in[1].shape()) + ", " + dtype_name(in[0].dtype()) +
                             (a.has("causal") && a.b("causal") ? ", causal" : "") +
                             (in.size() > 3 ? ", mask" : "") + ")";
    bool fresh = false;
    {
      std::lock_guard<std::mutex> lock(n.m);
      fresh = n.printed.size() < 4096 && n.printed.insert(line).second;
    }
    if (fresh)
      std::fprintf(stderr, "soma: %s on cuda: composite kernel, not cuDNN's fused attention: %s\n",
                   kOp, line.c_str());
  }
  detail::sdpa_composite_kernel(in, out, a);
}

}  // namespace
}  // namespace soma::cuda_detail

namespace soma::cuda {
FusedAttentionStats fused_attention_stats() {
  auto& n = cuda_detail::counters();
  FusedAttentionStats s;
  s.cudnn_calls = n.fused.load(std::memory_order_relaxed);
  s.fallback_calls = n.fallback.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(n.m);
  s.last_fallback_reason = n.last;
  return s;
}
void reset_fused_attention_stats() {
  auto& n = cuda_detail::counters();
  n.fused.store(0);
  n.fallback.store(0);
  std::lock_guard<std::mutex> lock(n.m);
  n.last.clear();
}
}  // namespace soma::cuda

namespace soma::detail {
void register_cuda_attention_kernels() {
  register_kernel("scaled_dot_product_attention", DeviceKind::CUDA, cuda_detail::sdpa_kernel);
}
}  // namespace soma::detail
