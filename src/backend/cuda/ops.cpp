// CUDA kernels of the registered ops (host side): turns tensors into launch descriptors
// (launch.hpp) and calls the kernels of kernels.cu, or cuBLAS for matmul. Registered with
// register_kernel(op, DeviceKind::CUDA, fn), so op definitions and gradients are untouched.
#include <array>
#include <climits>
#include <cstring>

#include "backend/cuda/conv_pool_launch.hpp"
#include "backend/cuda/cublas_loader.hpp"
#include "backend/cuda/host_util.hpp"
#include "backend/cuda/launch.hpp"
#include "backend/cuda/runtime.hpp"
#include "core/device_backend.hpp"
#include "soma/cuda.hpp"
#include "soma/op.hpp"

namespace soma::detail {
const DeviceBackend* cuda_device_backend();
void register_cuda_kernels();
void register_cuda_dense_and_update_kernels();  // dense.cpp, optim_ops.cpp
void register_cuda_index_kernels();  // index_ops.cpp
void register_cuda_sort_scan_kernels();  // sort_scan_ops.cpp
void register_cuda_linalg_kernels();  // linalg_host.cpp (solve, inv, ... through the host)
void register_cuda_quantize_kernels();  // quantize.cpp
void register_cuda_attention_kernels();  // attention_cudnn.cpp (cuDNN fused attention)
}  // namespace soma::detail

namespace soma::cuda_detail {
namespace {

// Strides of `t` (shape `in`) read over `out` (NumPy broadcasting: stride 0 where it stretches).
Strides broadcast_strides_of(const Tensor& t, const Shape& out) {
  Strides s(out.size(), 0);
  const std::size_t lead = out.size() - std::size_t(t.rank());
  for (std::size_t i = 0; i < std::size_t(t.rank()); ++i)
    s[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return s;
}

// An elementwise launch over `shape` for tensors broadcast to it: size-1 dims dropped, dims that
// are contiguous for every operand merged (most launches end up 1-d and packed).
template <std::size_t N>
Space make_space(const char* op, const Shape& shape, const std::array<const Tensor*, N>& ts,
                 std::array<Operand, N>& ops) {
  std::array<Strides, N> st;
  for (std::size_t k = 0; k < N; ++k) st[k] = broadcast_strides_of(*ts[k], shape);
  Shape sh;
  std::array<Strides, N> cs;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sh.empty();
    for (std::size_t k = 0; k < N && merge; ++k) merge = cs[k].back() == st[k][d] * shape[d];
    if (merge) {
      sh.back() *= shape[d];
      for (std::size_t k = 0; k < N; ++k) cs[k].back() = st[k][d];
    } else {
      sh.push_back(shape[d]);
      for (std::size_t k = 0; k < N; ++k) cs[k].push_back(st[k][d]);
    }
  }
  if (sh.size() > std::size_t(kMaxDims))
    fail(op, "tensors of shape ", shape_str(shape), " have more than ", kMaxDims,
         " non-mergeable dimensions, which the CUDA kernels do not support; make them "
         "contiguous first");
  Space s;
  s.rank = int(sh.size());
  s.numel = numel(shape);
  s.packed = true;
  for (std::size_t d = 0; d < sh.size(); ++d) s.shape[d] = sh[d];
  for (std::size_t k = 0; k < N; ++k) {
    ops[k].data = first_element(*ts[k]);
    ops[k].type = elem(ts[k]->dtype());
    for (std::size_t d = 0; d < sh.size(); ++d) ops[k].stride[d] = cs[k][d];
    if (sh.size() > 1 || (sh.size() == 1 && cs[k][0] != 1)) s.packed = false;
  }
  return s;
}

// ---- copy and fill (also the backend table's copy_strided / fill) ----
void copy_strided(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  const int d = device_of(dst, "copy");
  if (broadcast_shapes(src.shape(), dst.shape(), "copy") != dst.shape())
    fail("copy", "cannot write a tensor of shape ", shape_str(src.shape()), " into shape ",
         shape_str(dst.shape()));
  std::array<Operand, 2> ops;
  Space s = make_space<2>("copy", dst.shape(), {&src, &dst}, ops);
  if (s.packed && src.dtype() == dst.dtype()) {
    if (ops[0].data != ops[1].data)
      check(cudaMemcpyAsync(ops[1].data, ops[0].data,
                            std::size_t(dst.numel()) * dtype_size(dst.dtype()),
                            cudaMemcpyDeviceToDevice, stream(d)),
            "copy", "cudaMemcpyAsync", d);
    return;
  }
  launched(launch_copy(ops[0], ops[1], s, stream(d)), "copy", d);
}

void fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  const int d = device_of(dst, "fill");
  std::array<Operand, 1> ops;
  Space s = make_space<1>("fill", dst.shape(), {&dst}, ops);
  if (value == 0.0 && s.packed) {  // all-zero bits: a memset
    check(cudaMemsetAsync(ops[0].data, 0, std::size_t(dst.numel()) * dtype_size(dst.dtype()),
                          stream(d)),
          "fill", "cudaMemsetAsync", d);
    return;
  }
  launched(launch_fill(ops[0], s, value, stream(d)), "fill", d);
}

void copy_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  copy_strided(in[0], out[0]);
}

void slice_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  // Zeros of the input's shape with the gradient written into the sliced window.
  const Tensor& o = out[0];
  fill(o, 0.0);
  const auto& begin = a.ints("begin");
  const auto& step = a.ints("step");
  const auto& size = a.ints("size");
  Strides st = o.strides();
  std::int64_t off = o.offset();
  for (std::size_t i = 0; i < st.size(); ++i) {
    if (size[i] > 0) off += begin[i] * st[i];
    st[i] *= step[i];
  }
  copy_strided(in[0], Tensor::view_of(o, size, st, off));
}

// ---- elementwise: the ops of the elementwise table (src/ops/elementwise_table.hpp) ----
#define SOMA_CUDA_NAME(NAME, ...) #NAME,
constexpr const char* kUnaryNames[] = {SOMA_ELEMENTWISE_UNARY(SOMA_CUDA_NAME)};
constexpr const char* kBinaryNames[] = {SOMA_ELEMENTWISE_BINARY(SOMA_CUDA_NAME)};
#undef SOMA_CUDA_NAME

// The dtypes of an op's family: the same as on the CPU (the kernels run the same functors).
bool family_supports(ew::Family f, DType t) {
  switch (f) {
    case ew::Family::Numeric: return t != DType::boolean;
    case ew::Family::Float: return is_float(t);
    case ew::Family::Bool: return t == DType::boolean;
    case ew::Family::Any:
    case ew::Family::Predicate: return true;
  }
  return false;
}

// F: the op's functor (its attributes with the table's defaults).
template <UnaryOp Op, class F>
void unary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* name = kUnaryNames[int(Op)];
  if (!family_supports(F::family, in[0].dtype()))
    fail(name, "dtype ", dtype_name(in[0].dtype()), " is not supported on ", in[0].device().str());
  const F f = ew::make_functor<F>(a);
  const int d = device_of(out[0], name);
  std::array<Operand, 2> ops;
  Space s = make_space<2>(name, out[0].shape(), {&in[0], &out[0]}, ops);
  launched(launch_unary(Op, ops[0], ops[1], s, f.alpha, f.beta, stream(d)), name, d);
}

template <BinaryOp Op, class F>
void binary_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const char* name = kBinaryNames[int(Op)];
  if (in[0].dtype() != in[1].dtype())
    fail(name, "dtypes differ: ", dtype_name(in[0].dtype()), " and ", dtype_name(in[1].dtype()));
  if (!family_supports(F::family, in[0].dtype()))
    fail(name, "dtype ", dtype_name(in[0].dtype()), " is not supported on ", in[0].device().str());
  const int d = device_of(out[0], name);
  std::array<Operand, 3> ops;
  Space s = make_space<3>(name, out[0].shape(), {&in[0], &in[1], &out[0]}, ops);
  launched(launch_binary(Op, ops[0], ops[1], ops[2], s, stream(d)), name, d);
}

void where_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const int d = device_of(out[0], "where");
  std::array<Operand, 4> ops;
  Space s = make_space<4>("where", out[0].shape(), {&in[0], &in[1], &in[2], &out[0]}, ops);
  launched(launch_where(ops[0], ops[1], ops[2], ops[3], s, stream(d)), "where", d);
}

// ---- reductions and softmax ----
template <ReduceOp Op>
void reduce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  static constexpr const char* names[] = {"sum", "mean", "prod", "max", "min"};
  const char* name = names[int(Op)];
  const Tensor& x = in[0];
  const DType t = x.dtype();
  const bool ok = is_float(t) || (Op != ReduceOp::mean && (t == DType::i32 || t == DType::i64));
  if (!ok) fail(name, "dtype ", dtype_name(t), " is not supported on ", x.device().str());
  std::vector<bool> reduced(std::size_t(x.rank()), false);
  for (std::int64_t ax : a.ints("axes"))
    reduced[std::size_t(normalize_axis(ax, x.rank(), name))] = true;
  if (out[0].numel() == 0) return;
  const int d = device_of(out[0], name);
  ReduceSpace s = reduce_space(name, x, out[0], reduced);
  launched(launch_reduce(Op, first_element(x), first_element(out[0]), elem(t), s, stream(d)),
           name, d);
}

template <bool Log>
void softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* name = Log ? "log_softmax" : "softmax";
  const Tensor& x = in[0];
  if (!is_float(x.dtype()))
    fail(name, "dtype ", dtype_name(x.dtype()), " is not supported (expected f32, f64, f16 or bf16)");
  if (x.numel() == 0) return;
  const int axis = normalize_axis(a.i("axis"), x.rank(), name);
  std::vector<bool> reduced(std::size_t(x.rank()), false);
  reduced[std::size_t(axis)] = true;
  const int d = device_of(out[0], name);
  // The output has x's shape: its kept strides come from reduce_space with keepdims.
  ReduceSpace s = reduce_space(name, x, out[0], reduced);
  const std::int64_t out_axis_stride = contiguous_strides(out[0].shape())[std::size_t(axis)];
  launched(launch_softmax(Log, first_element(x), first_element(out[0]), elem(x.dtype()), s,
                          out_axis_stride, stream(d)),
           name, d);
}

// ---- matmul (cuBLAS) ----
// A matrix operand as cuBLAS can take it: rows or columns packed, the other stride >= extent.
struct Layout {
  bool ok = false;
  bool trans = false;  // stored column-major (a transposed view)
  std::int64_t ld = 1;
};
Layout layout(std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
  if (cols <= 1) cs = 1;
  if (rows <= 1) rs = std::max<std::int64_t>(cols, 1);
  if (cs == 1 && rs >= std::max<std::int64_t>(cols, 1)) return {true, false, rs};
  if (rows <= 1 || cols <= 1) return {};
  if (rs == 1 && cs >= rows) return {true, true, cs};
  return {};
}

// Element offsets of each matrix of the broadcast batch; `stride` is set when they are evenly
// spaced (one strided-batched call serves them all).
std::vector<std::int64_t> batch_offsets(const Tensor& t, const Shape& batch, bool& even,
                                        std::int64_t& stride) {
  const std::size_t tb = std::size_t(t.rank()) - 2;
  Strides s(batch.size(), 0);
  const std::size_t lead = batch.size() - tb;
  for (std::size_t i = 0; i < tb; ++i) s[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  const std::int64_t nb = numel(batch);
  std::vector<std::int64_t> offs(std::size_t(nb), 0);
  for (std::int64_t i = 0; i < nb; ++i) {
    std::int64_t rem = i, off = 0;
    for (std::size_t d = batch.size(); d-- > 0;) {
      off += (rem % batch[d]) * s[d];
      rem /= batch[d];
    }
    offs[std::size_t(i)] = off;
  }
  stride = nb > 1 ? offs[1] - offs[0] : 0;
  even = true;
  for (std::int64_t i = 0; i < nb && even; ++i) even = offs[std::size_t(i)] == i * stride;
  return offs;
}

void matmul_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor &a0 = in[0], &b0 = in[1];
  Tensor a = a0.rank() == 1 ? Tensor::view_of(a0, {1, a0.dim(0)}, {0, a0.strides()[0]}, a0.offset())
                            : a0;
  Tensor b = b0.rank() == 1 ? Tensor::view_of(b0, {b0.dim(0), 1}, {b0.strides()[0], 0}, b0.offset())
                            : b0;
  const std::int64_t m = a.dim(-2), k = a.dim(-1), n = b.dim(-1);
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  Shape full = batch;
  full.push_back(m);
  full.push_back(n);
  Tensor c = Tensor::view_of(out[0], full, contiguous_strides(full), out[0].offset());
  if (c.numel() == 0) return;
  if (k == 0) return fill(c, 0.0);  // an empty sum

  cudaDataType_t type;
  cublasComputeType_t compute;
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = &alpha_f;
  const void* beta = &beta_f;
  switch (a.dtype()) {
    case DType::f32:
      type = CUDA_R_32F;
      compute = gemm_compute_type(DType::f32, c.device().index);  // TF32 unless switched off or pre-Ampere
      break;
    case DType::f64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      alpha = &alpha_d;
      beta = &beta_d;
      break;
    case DType::f16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case DType::bf16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    default:
      fail("matmul", "dtype ", dtype_name(a.dtype()), " is not supported on ", a.device().str(),
           " (cuBLAS takes f32, f64, f16 and bf16)");
  }

  auto mat_layout = [](const Tensor& t) {
    const std::size_t r = std::size_t(t.rank());
    return layout(t.shape()[r - 2], t.shape()[r - 1], t.strides()[r - 2], t.strides()[r - 1]);
  };
  Layout la = mat_layout(a), lb = mat_layout(b);
  if (!la.ok) {
    a = packed(a);
    la = mat_layout(a);
  }
  if (!lb.ok) {
    b = packed(b);
    lb = mat_layout(b);
  }
  for (std::int64_t v : {m, n, k, la.ld, lb.ld})
    if (v > INT_MAX)
      fail("matmul", "dimension ", v, " is too large for cuBLAS (", shape_str(a0.shape()), " x ",
           shape_str(b0.shape()), ")");

  const int dev = device_of(c, "matmul");
  cublasHandle_t h = cublas(dev);
  const std::size_t es = dtype_size(a.dtype());
  char* pa = static_cast<char*>(first_element(a));
  char* pb = static_cast<char*>(first_element(b));
  char* pc = static_cast<char*>(first_element(c));
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets B first, then A.
  const cublasOperation_t op_b = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int M = int(n), N = int(m), K = int(k), ldb = int(lb.ld), lda = int(la.ld), ldc = int(n);

  bool even_a = true, even_b = true;
  std::int64_t stride_a = 0, stride_b = 0;
  auto offs_a = batch_offsets(a, batch, even_a, stride_a);
  auto offs_b = batch_offsets(b, batch, even_b, stride_b);
  const std::int64_t nb = numel(batch);
  if (even_a && even_b && nb <= INT_MAX) {
    check_cublas(cublas_api("matmul").gemm_strided_batched_ex(h, op_b, op_a, M, N, K, alpha, pb, type, ldb,
                                            stride_b, pa, type, lda, stride_a, beta, pc, type,
                                            ldc, m * n, int(nb), compute, CUBLAS_GEMM_DEFAULT),
                 "matmul", "cublasGemmStridedBatchedEx", dev);
    return;
  }
  for (std::int64_t i = 0; i < nb; ++i)
    check_cublas(cublas_api("matmul").gemm_ex(h, op_b, op_a, M, N, K, alpha,
                              pb + offs_b[std::size_t(i)] * std::int64_t(es), type, ldb,
                              pa + offs_a[std::size_t(i)] * std::int64_t(es), type, lda, beta,
                              pc + i * m * n * std::int64_t(es), type, ldc, compute,
                              CUBLAS_GEMM_DEFAULT),
                 "matmul", "cublasGemmEx", dev);
}

void* backend_allocate(std::size_t nbytes, int index) { return allocate(nbytes, index); }
void backend_free(void* p, std::size_t nbytes, int index) { deallocate(p, nbytes, index); }

}  // namespace
}  // namespace soma::cuda_detail

namespace soma::detail {

const DeviceBackend* cuda_device_backend() {
  using namespace cuda_detail;
  static const DeviceBackend table{
      .allocate = backend_allocate,
      .free = backend_free,
      .copy_bytes = cuda_detail::copy_bytes,
      .copy_strided = copy_strided,
      .fill = cuda_detail::fill,
      .unavailable_reason = cuda_detail::reason,
      .allocate_pinned = cuda_detail::allocate_pinned,
      .free_pinned = [](void* p, std::size_t n) { cuda_detail::free_pinned(p, n); },
      .copy_to_device_async = cuda_detail::copy_to_device_async,
      .create_event = cuda_detail::create_event,
      .record_event = cuda_detail::record_event,
      .wait_event = cuda_detail::wait_event,
      .destroy_event = [](void* e, int i) { cuda_detail::destroy_event(e, i); },
      .begin_capture = cuda_detail::begin_capture,
      .end_capture = cuda_detail::end_capture,
      .launch_graph = cuda_detail::launch_graph,
      .destroy_graph = [](void* g, int i) { cuda_detail::destroy_graph(g, i); },
  };
  return &table;
}

void register_cuda_kernels() {
  using namespace cuda_detail;
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CUDA, fn); };
  reg("copy", copy_kernel);
  reg("cast", copy_kernel);
  reg("slice_grad", slice_grad_kernel);
  reg("where", where_kernel);
#define SOMA_CUDA_UNARY(NAME, ...) reg(#NAME, unary_kernel<UnaryOp::NAME, ew::NAME##_fn>);
#define SOMA_CUDA_BINARY(NAME, ...) reg(#NAME, binary_kernel<BinaryOp::NAME, ew::NAME##_fn>);
  SOMA_ELEMENTWISE_UNARY(SOMA_CUDA_UNARY)
  SOMA_ELEMENTWISE_BINARY(SOMA_CUDA_BINARY)
#undef SOMA_CUDA_UNARY
#undef SOMA_CUDA_BINARY
  reg("sum", reduce_kernel<ReduceOp::sum>);
  reg("mean", reduce_kernel<ReduceOp::mean>);
  reg("prod", reduce_kernel<ReduceOp::prod>);
  reg("max", reduce_kernel<ReduceOp::max>);
  reg("min", reduce_kernel<ReduceOp::min>);
  reg("softmax", softmax_kernel<false>);
  reg("log_softmax", softmax_kernel<true>);
  reg("matmul", matmul_kernel);
  register_cuda_dense_and_update_kernels();
  register_cuda_conv_kernels();
  register_cuda_index_kernels();
  register_cuda_sort_scan_kernels();
  register_cuda_linalg_kernels();
  register_cuda_quantize_kernels();
  register_cuda_attention_kernels();
}

}  // namespace soma::detail
