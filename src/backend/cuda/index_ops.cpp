// CUDA kernels of the index ops (host side): concat, pad, gather, gather_grad, one_hot,
// argmax/argmin, all/any and the random ops. Turns tensors into the plain launch structs of
// index_launch.hpp; the kernels are in index_kernels.cu. Registered by
// register_cuda_index_kernels(), called from register_cuda_kernels() (ops.cpp).
//
// Indices are checked on the device: a kernel records the first bad position and the host reads
// it back before returning (one stream synchronisation per gather / gather_grad), so a bad index
// is the CPU's soma::Error, not a device fault.
#include <climits>
#include <cstring>

#include "backend/cuda/host_util.hpp"
#include "backend/cuda/index_launch.hpp"
#include "backend/cuda/runtime.hpp"
#include "core/device_backend.hpp"
#include "internal/dispatch.hpp"
#include "soma/op.hpp"
#include "soma/random_state.hpp"

namespace soma::detail {
void register_cuda_index_kernels();
}  // namespace soma::detail

namespace soma::cuda_detail {
namespace {

using cuda_index::i64;

// The kernels write packed outputs: a strided output gets a packed stand-in, copied back by
// finish().
struct PackedOut {
  const Tensor& target;
  Tensor buf;
  explicit PackedOut(const Tensor& o)
      : target(o), buf(o.is_contiguous() ? o : Tensor::empty(o.shape(), o.dtype(), o.device())) {}
  void* data() const { return first_element(buf); }
  void finish() const {
    if (!target.is_contiguous()) detail::device_copy_into(buf, target);
  }
};

// A value of `dtype` as its bytes (for data-movement kernels that work on widths), converted as
// the CPU kernels' fill does.
std::uint64_t value_bits(double v, DType dtype) {
  std::uint64_t bits = 0;
  detail::dispatch_dtype(dtype, [&]<class T>() {
    const T x = detail::convert<T>(v);
    std::memcpy(&bits, &x, sizeof(T));
  });
  return bits;
}

std::int64_t prod(const Shape& s, std::size_t b, std::size_t e) {
  std::int64_t n = 1;
  for (std::size_t i = b; i < e; ++i) n *= s[i];
  return n;
}

Indices indices_of(const Tensor& packed_ids, const char* op) {
  if (packed_ids.dtype() != DType::i32 && packed_ids.dtype() != DType::i64)
    fail(op, "indices must have dtype i32 or i64, got ", dtype_name(packed_ids.dtype()));
  return {first_element(packed_ids), packed_ids.dtype() == DType::i64};
}


// ---- concat ----
void concat_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  const int ax = normalize_axis(a.i("axis"), o.rank(), "concat");
  if (o.numel() == 0) return;
  const int d = device_of(o, "concat");
  PackedOut po(o);
  std::vector<Tensor> parts;
  std::vector<std::int64_t> begins;
  std::int64_t at = 0;
  for (const auto& t : in) {
    const std::int64_t len = t.shape()[std::size_t(ax)];
    if (t.numel() > 0) {  // empty inputs add nothing
      parts.push_back(packed(t));
      begins.push_back(at);
    }
    at += len;
  }
  ConcatLaunch l;
  l.geom.outer = prod(o.shape(), 0, std::size_t(ax));
  l.geom.total = o.shape()[std::size_t(ax)];
  l.geom.inner = prod(o.shape(), std::size_t(ax) + 1, o.shape().size());
  l.out = po.data();
  l.elem_bytes = int(dtype_size(o.dtype()));
  // Groups of up to kMaxConcatParts inputs, one launch each.
  for (std::size_t g = 0; g < parts.size(); g += cuda_index::kMaxConcatParts) {
    const std::size_t end = std::min(parts.size(), g + cuda_index::kMaxConcatParts);
    l.geom.parts = int(end - g);
    for (std::size_t p = g; p < end; ++p) {
      l.src[p - g] = first_element(parts[p]);
      l.geom.begin[p - g] = begins[p];
    }
    l.geom.axis_begin = begins[g];
    l.geom.axis_end = begins[end - 1] + parts[end - 1].shape()[std::size_t(ax)];
    l.geom.begin[end - g] = l.geom.axis_end;
    launched(launch_concat(l, stream(d)), "concat", d);
  }
  po.finish();
}

// ---- pad ----
void pad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  const Tensor& x = in[0];
  if (o.numel() == 0) return;
  if (o.rank() > cuda_index::kMaxDims)
    fail("pad", "tensors of rank ", o.rank(), " (shape ", shape_str(x.shape()),
         ") are not supported on cuda (at most ", cuda_index::kMaxDims, " dimensions)");
  const auto& p = a.ints("paddings");
  const int d = device_of(o, "pad");
  PackedOut po(o);
  PadLaunch l;
  l.geom.rank = int(o.rank());
  l.geom.numel = o.numel();
  for (std::size_t i = 0; i < std::size_t(o.rank()); ++i) {
    l.geom.out_shape[i] = o.shape()[i];
    l.geom.in_shape[i] = x.shape()[i];
    l.geom.in_stride[i] = x.strides()[i];
    l.geom.before[i] = p[2 * i];
  }
  l.in = first_element(x);
  l.out = po.data();
  l.elem_bytes = int(dtype_size(o.dtype()));
  l.value_bits = value_bits(a.f("value"), o.dtype());
  launched(launch_pad(l, stream(d)), "pad", d);
  po.finish();
}

// ---- gather / gather_grad ----
cuda_index::GatherGeom gather_geom(const Shape& table, int ax, std::int64_t k) {
  cuda_index::GatherGeom g;
  g.outer = prod(table, 0, std::size_t(ax));
  g.n = table[std::size_t(ax)];
  g.k = k;
  g.inner = prod(table, std::size_t(ax) + 1, table.size());
  return g;
}

void gather_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& t = in[0];
  const int ax = normalize_axis(a.i("axis"), t.rank(), "gather");
  const Tensor ids = packed(in[1]);
  GatherLaunch l;
  l.ids = indices_of(ids, "gather");
  l.geom = gather_geom(t.shape(), ax, ids.numel());
  const Tensor& o = out[0];
  if (ids.numel() == 0) return;
  const int d = device_of(o, "gather");
  BadIndex bad(d, "gather");
  PackedOut po(o);
  const Tensor src = packed(t);
  l.src = first_element(src);
  l.out = po.data();
  l.elem_bytes = int(dtype_size(t.dtype()));
  l.bad = bad.get();
  // An empty output still has its indices checked, as on the CPU.
  launched(o.numel() > 0 ? launch_gather(l, stream(d))
                         : launch_check_indices(l.ids, l.geom.k, l.geom.n, l.bad, stream(d)),
           "gather", d);
  bad.throw_if_bad(ids, l.geom.n, ax);
  po.finish();
}

void gather_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  const int ax = normalize_axis(a.i("axis"), o.rank(), "gather_grad");
  if (o.dtype() == DType::boolean)
    fail("gather_grad", "dtype bool is not supported (expected a numeric dtype)");
  const Tensor ids = packed(in[1]);
  GatherGradLaunch l;
  l.ids = indices_of(ids, "gather_grad");
  l.geom = gather_geom(o.shape(), ax, ids.numel());
  if (ids.numel() > INT_MAX)
    fail("gather_grad", ids.numel(), " indices are more than the CUDA kernel sorts (", INT_MAX,
         ")");
  const int d = device_of(o, "gather_grad");
  PackedOut po(o);
  const Tensor g = packed(in[0]);
  BadIndex bad(d, "gather_grad");
  l.grad = first_element(g);
  l.out = po.data();
  l.type = elem(o.dtype());
  l.bad = bad.get();
  l.workspace_bytes = gather_grad_workspace_bytes(l.geom.k, l.geom.n);
  void* ws = l.workspace_bytes ? allocate(l.workspace_bytes, d) : nullptr;
  l.workspace = ws;
  const cudaError_t st = o.numel() == 0 && l.geom.k == 0 ? cudaSuccess : launch_gather_grad(l, stream(d));
  if (ws) deallocate(ws, l.workspace_bytes, d);  // stream-ordered: see the caching allocator
  launched(st, "gather_grad", d);
  bad.throw_if_bad(ids, l.geom.n, ax);
  po.finish();
}

// ---- one_hot ----
void one_hot_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const Tensor ids = packed(in[0]);
  const int d = device_of(o, "one_hot");
  PackedOut po(o);
  OneHotLaunch l;
  l.ids = indices_of(ids, "one_hot");
  l.rows = ids.numel();
  l.depth = a.i("depth");
  l.out = po.data();
  l.elem_bytes = int(dtype_size(o.dtype()));
  l.on_bits = value_bits(a.f("on_value"), o.dtype());
  l.off_bits = value_bits(a.f("off_value"), o.dtype());
  launched(launch_one_hot(l, stream(d)), "one_hot", d);
  po.finish();
}

// ---- reductions: argmax / argmin (one axis), all / any (an axis list) ----
template <bool Max>
void arg_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* name = Max ? "argmax" : "argmin";
  const Tensor& x = in[0];
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  std::vector<bool> reduced(std::size_t(x.rank()), false);
  reduced[std::size_t(normalize_axis(a.i("axis"), x.rank(), name))] = true;
  const int d = device_of(o, name);
  PackedOut po(o);
  const ReduceSpace s = reduce_space(name, x, po.buf, reduced);
  launched(launch_arg_reduce(Max, first_element(x), elem(x.dtype()),
                             static_cast<std::int64_t*>(po.data()), s, stream(d)),
           name, d);
  po.finish();
}

template <bool All>
void bool_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* name = All ? "all" : "any";
  const Tensor& x = in[0];
  if (x.dtype() != DType::boolean) fail(name, "expected dtype bool, got ", dtype_name(x.dtype()));
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  std::vector<bool> reduced(std::size_t(x.rank()), false);
  for (std::int64_t ax : a.ints("axes"))
    reduced[std::size_t(normalize_axis(ax, x.rank(), name))] = true;
  const int d = device_of(o, name);
  PackedOut po(o);
  const ReduceSpace s = reduce_space(name, x, po.buf, reduced);
  launched(launch_bool_reduce(All, static_cast<const bool*>(first_element(x)),
                              static_cast<bool*>(po.data()), s, stream(d)),
           name, d);
  po.finish();
}

// ---- random ops: the CPU's (seed, stream) and numbers (src/ops/random.cpp, philox.hpp) ----
template <RandomKind Kind>
void random_kernel(const std::vector<Tensor>&, std::vector<Tensor>& out, const Attrs& a) {
  static constexpr const char* names[] = {"random_uniform", "random_normal", "truncated_normal"};
  const char* name = names[int(Kind)];
  const Tensor& o = out[0];
  const DType t = o.dtype();
  const bool integer = t == DType::i32 || t == DType::i64;
  if (!is_floating(t) && !(Kind == RandomKind::uniform && integer))
    fail(name, "dtype ", dtype_name(t), " is not supported on ", o.device().str());
  // The stream is taken even for an empty output, as on the CPU, so the sequence of draws of
  // the global generator does not depend on the device.
  const int d0 = device_of(o, name);
  // A captured graph would replay this launch with its seed: the same numbers every step.
  if (capturing(d0))
    fail(name, "cannot be captured in a CUDA graph: every replay would draw the same numbers "
               "(FitOptions::cuda_graph: the step runs eagerly)");
  const auto [seed, strm] = detail::random_op_stream(a);
  if (o.numel() == 0) return;
  const int d = device_of(o, name);
  PackedOut po(o);
  RandomLaunch l;
  l.kind = Kind;
  l.out = po.data();
  l.type = elem(t);
  l.numel = o.numel();
  l.seed = seed;
  l.stream = strm;
  l.a = a.f("a");
  l.b = a.f("b");
  if (Kind == RandomKind::uniform) {
    if (integer) {
      // As the CPU kernel: maxval - minval <= 2^64 - 1 when both fit an i64 (2^63 itself is
      // excluded as maxval); a range of 2^64 wraps to 0, which means "all 64 bits".
      const std::int64_t lo = std::int64_t(l.a);
      l.int_lo = std::uint64_t(lo);
      l.int_range = l.b >= 9223372036854775808.0
                        ? std::uint64_t(std::int64_t(9223372036854775807LL)) - std::uint64_t(lo) + 1
                        : std::uint64_t(std::int64_t(l.b)) - std::uint64_t(lo);
    } else {
      l.top = detail::random_uniform_top(t, l.b);
    }
  }
  launched(launch_random(l, stream(d)), name, d);
  po.finish();
}

}  // namespace
}  // namespace soma::cuda_detail

namespace soma::detail {

void register_cuda_index_kernels() {
  using namespace cuda_detail;
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CUDA, fn); };
  reg("concat", concat_kernel);
  reg("pad", pad_kernel);
  reg("gather", gather_kernel);
  reg("gather_grad", gather_grad_kernel);
  reg("one_hot", one_hot_kernel);
  reg("argmax", arg_kernel<true>);
  reg("argmin", arg_kernel<false>);
  reg("all", bool_kernel<true>);
  reg("any", bool_kernel<false>);
  reg("random_uniform", random_kernel<RandomKind::uniform>);
  reg("random_normal", random_kernel<RandomKind::normal>);
  reg("truncated_normal", random_kernel<RandomKind::truncated_normal>);
}

}  // namespace soma::detail
