// CUDA kernels of the scan, sort and element-index ops (host side): turns tensors into the
// launch structs of sort_scan_launch.hpp (kernels: sort_scan.cu). Registered by
// register_cuda_sort_scan_kernels(), called from register_cuda_kernels() (ops.cpp).
// Bad indices are found on the device and reported with the CPU kernel's message (one stream
// synchronisation per take_along_axis / scatter).
#include <climits>

#include "backend/cuda/host_util.hpp"
#include "backend/cuda/runtime.hpp"
#include "backend/cuda/sort_scan_launch.hpp"
#include "core/device_backend.hpp"
#include "soma/op.hpp"

namespace soma::detail {
void register_cuda_sort_scan_kernels();
}  // namespace soma::detail

namespace soma::cuda_detail {
namespace {

namespace ss = soma::sort_scan;
using i64 = std::int64_t;

// Kernels write packed outputs: a strided output gets a packed stand-in, copied back by finish().
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

// Device scratch memory, returned to the (stream-ordered) caching allocator at scope end.
class Workspace {
 public:
  Workspace(std::size_t bytes, int device)
      : bytes_(bytes), device_(device), p_(bytes ? allocate(bytes, device) : nullptr) {}
  ~Workspace() {
    if (p_) deallocate(p_, bytes_, device_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return p_; }

 private:
  std::size_t bytes_;
  int device_;
  void* p_;
};

i64 prod(const Shape& s, std::size_t b, std::size_t e) {
  i64 n = 1;
  for (std::size_t i = b; i < e; ++i) n *= s[i];
  return n;
}
ss::AxisGeom axis_geom(const Shape& s, int ax) {
  ss::AxisGeom g;
  g.outer = prod(s, 0, std::size_t(ax));
  g.n = s[std::size_t(ax)];
  g.inner = prod(s, std::size_t(ax) + 1, s.size());
  return g;
}
void check_rank(const Tensor& t, const char* op) {
  if (t.rank() > ss::kMaxDims)
    fail(op, "tensors of rank ", t.rank(), " (shape ", shape_str(t.shape()),
         ") are not supported on cuda (at most ", ss::kMaxDims, " dimensions)");
}
void check_numeric(const Tensor& t, const char* op) {
  if (t.dtype() == DType::boolean)
    fail(op, "dtype bool is not supported (expected a numeric dtype)");
}

// ---- cumsum / cumprod / cumprod_grad ----
template <bool Prod>
void scan_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* op = Prod ? "cumprod" : "cumsum";
  const Tensor& o = out[0];
  check_numeric(in[0], op);
  if (o.numel() == 0) return;
  const int d = device_of(o, op);
  PackedOut po(o);
  const Tensor x = packed(in[0]);
  ScanLaunch l;
  l.geom = axis_geom(x.shape(), normalize_axis(a.i("axis"), x.rank(), op));
  l.in = first_element(x);
  l.out = po.data();
  l.type = elem(x.dtype());
  l.prod = Prod;
  l.exclusive = a.b("exclusive");
  l.reverse = a.b("reverse");
  launched(launch_scan(l, stream(d)), op, d);
  po.finish();
}

void cumprod_grad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                         const Attrs& a) {
  const Tensor& o = out[0];
  check_numeric(in[0], "cumprod_grad");
  if (o.numel() == 0) return;
  const int d = device_of(o, "cumprod_grad");
  PackedOut po(o);
  const Tensor x = packed(in[0]), g = packed(in[1]);
  Workspace ws(std::size_t(o.numel()) * 8, d);
  CumprodGradLaunch l;
  l.geom = axis_geom(x.shape(), normalize_axis(a.i("axis"), x.rank(), "cumprod_grad"));
  l.x = first_element(x);
  l.g = first_element(g);
  l.out = po.data();
  l.workspace = ws.get();
  l.type = elem(x.dtype());
  l.exclusive = a.b("exclusive");
  l.reverse = a.b("reverse");
  launched(launch_cumprod_grad(l, stream(d)), "cumprod_grad", d);
  po.finish();
}

// ---- sort / topk ----
void sorted_prefix(const char* op, const Tensor& xin, const std::vector<Tensor>& out, int ax,
                   i64 k, bool desc) {
  if (out[0].numel() == 0) return;
  const int d = device_of(out[0], op);
  PackedOut pv(out[0]), pi(out[1]);
  const Tensor x = packed(xin);
  SortLaunch l;
  l.geom = axis_geom(x.shape(), ax);
  l.k = k;
  l.in = first_element(x);
  l.values = pv.data();
  l.indices = static_cast<i64*>(pi.data());
  l.type = elem(x.dtype());
  l.descending = desc;
  l.workspace_bytes = sort_workspace_bytes(l.geom.lines(), l.geom.n);
  if (l.workspace_bytes == 0) fail(op, "CUB could not size the sort of ", shape_str(x.shape()));
  Workspace ws(l.workspace_bytes, d);
  l.workspace = ws.get();
  launched(launch_sort(l, stream(d)), op, d);
  pv.finish();
  pi.finish();
}
void sort_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "sort");
  sorted_prefix("sort", in[0], out, ax, in[0].shape()[std::size_t(ax)], a.b("descending"));
}
void topk_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "topk");
  sorted_prefix("topk", in[0], out, ax, a.i("k"), a.b("largest"));
}

// ---- triu / tril ----
template <bool Upper>
void tri_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* op = Upper ? "triu" : "tril";
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const int d = device_of(o, op);
  PackedOut po(o);
  const Tensor x = packed(in[0]);
  TriLaunch l;
  l.in = first_element(x);
  l.out = po.data();
  l.numel = o.numel();
  l.rows = x.shape()[std::size_t(x.rank() - 2)];
  l.cols = x.shape().back();
  l.k = a.i("k");
  l.upper = Upper;
  l.elem_bytes = int(dtype_size(x.dtype()));
  launched(launch_tri(l, stream(d)), op, d);
  po.finish();
}

// ---- roll / flip ----
template <bool Roll>
void move_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const char* op = Roll ? "roll" : "flip";
  const Tensor& o = out[0];
  const Tensor& x = in[0];
  check_rank(x, op);
  if (o.numel() == 0) return;
  const int d = device_of(o, op);
  PackedOut po(o);
  MoveLaunch l;
  l.geom.rank = int(x.rank());
  l.geom.numel = x.numel();
  for (int k = 0; k < l.geom.rank; ++k) {
    l.geom.shape[k] = x.shape()[std::size_t(k)];
    l.geom.in_stride[k] = x.strides()[std::size_t(k)];
  }
  if (Roll) {
    const auto& sh = a.ints("shifts");
    const auto& axes = a.ints("axes");
    for (std::size_t j = 0; j < axes.size(); ++j) {
      const int ax = normalize_axis(axes[j], x.rank(), "roll");
      const i64 n = l.geom.shape[ax];
      if (n > 0) l.geom.shift[ax] = ((l.geom.shift[ax] + sh[j]) % n + n) % n;
    }
  } else {
    for (int ax : normalize_axes(a.ints("axes"), x.rank(), "flip")) l.geom.flip[ax] = true;
  }
  l.in = first_element(x);
  l.out = po.data();
  l.elem_bytes = int(dtype_size(x.dtype()));
  launched(launch_move(l, stream(d)), op, d);
  po.finish();
}

// ---- take_along_axis / scatter ----
ss::ElementGeom element_geom(const Tensor& data, const Tensor& ids, int ax, const char* op) {
  check_rank(data, op);
  ss::ElementGeom g;
  g.rank = int(data.rank());
  g.axis = ax;
  g.count = ids.numel();
  g.n = data.shape()[std::size_t(ax)];
  const Strides st = contiguous_strides(data.shape());
  for (int k = 0; k < g.rank; ++k) {
    g.ids_shape[k] = ids.shape()[std::size_t(k)];
    g.data_stride[k] = st[std::size_t(k)];
  }
  return g;
}


ElementIds ids_of(const Tensor& packed_ids, const BadIndex& bad) {
  return {first_element(packed_ids), packed_ids.dtype() == DType::i64, bad.get()};
}

void take_along_axis_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out,
                            const Attrs& a) {
  const Tensor& o = out[0];
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "take_along_axis");
  TakeLaunch l;
  l.geom = element_geom(in[0], in[1], ax, "take_along_axis");
  if (l.geom.count == 0) return;
  const int d = device_of(o, "take_along_axis");
  const Tensor ids = packed(in[1]), x = packed(in[0]);
  BadIndex bad(d, "take_along_axis");
  PackedOut po(o);
  l.data = first_element(x);
  l.out = po.data();
  l.ids = ids_of(ids, bad);
  l.elem_bytes = int(dtype_size(x.dtype()));
  launched(launch_take_along_axis(l, stream(d)), "take_along_axis", d);
  bad.throw_if_bad(ids, l.geom.n, ax);
  po.finish();
}

void scatter_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  const Tensor& o = out[0];
  const int ax = normalize_axis(a.i("axis"), in[0].rank(), "scatter");
  const std::string& rs = a.s("reduction");
  const char* names[] = {"none", "add", "mul", "max", "min"};
  int r = 0;
  while (r < 5 && rs != names[r]) ++r;
  if (r == 5) fail("scatter", "reduction '", rs, "' is not one of none, add, mul, max, min");
  if (r != 0 && o.dtype() == DType::boolean)
    fail("scatter", "reduction '", rs, "' is not supported for dtype bool (only none)");
  ScatterLaunch l;
  l.geom = element_geom(in[0], in[1], ax, "scatter");
  if (l.geom.count > INT_MAX)
    fail("scatter", l.geom.count, " indices are more than the CUDA kernel sorts (", INT_MAX, ")");
  const int d = device_of(o, "scatter");
  PackedOut po(o);
  detail::copy_into(in[0], po.buf);
  if (l.geom.count > 0) {
    const Tensor ids = packed(in[1]), u = packed(in[2]);
    BadIndex bad(d, "scatter");
    l.data_numel = o.numel();
    l.updates = first_element(u);
    l.out = po.data();
    l.ids = ids_of(ids, bad);
    l.type = elem(o.dtype());
    l.reduce = ss::ScatterReduce(r);
    l.workspace_bytes = scatter_workspace_bytes(l.geom.count, l.data_numel);
    if (l.workspace_bytes == 0) fail("scatter", "CUB could not size the sort of the indices");
    Workspace ws(l.workspace_bytes, d);
    l.workspace = ws.get();
    launched(launch_scatter(l, stream(d)), "scatter", d);
    bad.throw_if_bad(ids, l.geom.n, ax);
  }
  po.finish();
}

}  // namespace
}  // namespace soma::cuda_detail

namespace soma::detail {

void register_cuda_sort_scan_kernels() {
  using namespace cuda_detail;
  auto reg = [](const char* name, KernelFn fn) { register_kernel(name, DeviceKind::CUDA, fn); };
  reg("cumsum", scan_kernel<false>);
  reg("cumprod", scan_kernel<true>);
  reg("cumprod_grad", cumprod_grad_kernel);
  reg("sort", sort_kernel);
  reg("topk", topk_kernel);
  reg("triu", tri_kernel<true>);
  reg("tril", tri_kernel<false>);
  reg("roll", move_kernel<true>);
  reg("flip", move_kernel<false>);
  reg("take_along_axis", take_along_axis_kernel);
  reg("scatter", scatter_kernel);
}

}  // namespace soma::detail
