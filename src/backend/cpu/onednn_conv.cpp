// CPU convolution through oneDNN (forward, backward-data, backward-weights; f32).
//
// soma's tensors stay plain NCHW / OIHW. Each primitive is created with "any" memory formats so
// oneDNN picks its fastest (blocked, e.g. nChw16c) layouts; user buffers are reordered into them
// and the result back only where the chosen layout differs. Primitives and their reorders are
// cached per thread, keyed on the geometry, the operation and the OpenMP thread count (oneDNN's
// OpenMP runtime sizes its work partition when a primitive is created). The blocked intermediate
// buffers and the scratchpad are taken for each call from soma's caching allocator (so a training
// step after the first still allocates nothing from malloc), not held by the cache: a program
// that goes through many shapes (e.g. predict at batch sizes 1..800) would otherwise keep
// activation-sized buffers for every shape it saw (docs/reliability.md). The cache is an LRU of
// kMaxEntries entries and kMaxEntryBytes bytes (the fused path's reordered weights).
// Debian's libdnnl uses the OpenMP runtime (libgomp, like soma), so soma::set_num_threads
// (omp_set_num_threads) governs its threads too.
// Under bf16 autocast (soma/autocast.hpp) the primitives take bf16 inputs (the reorders convert
// soma's f32 buffers) and write f32 outputs; oneDNN accumulates in f32. Where oneDNN has only a
// reference bf16 kernel for a geometry, that convolution stays f32 (far faster).
// Conv2D's inference path (src/nn/conv.cpp) uses onednn_conv_forward_fused: one forward-inference
// primitive with the bias and ReLU applied by the kernel, activations in nChw16c where the
// channels allow, and the weights reordered into the primitive's layout only when they changed.
#include "onednn_conv.hpp"

#include "conv_winograd.hpp"
#include "internal/cpu_allocator.hpp"
#include "onednn_matmul.hpp"  // cpu_autocast_dtype
#include "soma/tensor.hpp"      // Storage (the fused path's weight identity)

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>

#ifdef SOMA_HAS_ONEDNN
#include <omp.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <vector>

#include "onednn_engine.hpp"
#endif

namespace soma::detail {
namespace {

thread_local std::uint64_t t_fused_calls = 0;
thread_local std::uint64_t t_conv3d_calls = 0;

ConvImpl impl_from_env() {
  const char* v = std::getenv("SOMA_CONV_IMPL");
  if (v && std::strcmp(v, "im2col") == 0) return ConvImpl::im2col;
  return ConvImpl::automatic;
}

std::atomic<ConvImpl>& impl_flag() {
  static std::atomic<ConvImpl> flag{impl_from_env()};
  return flag;
}

}  // namespace

std::uint64_t onednn_conv_fused_calls() { return t_fused_calls; }
std::uint64_t onednn_conv3d_calls() { return t_conv3d_calls; }

ConvImpl conv_impl() { return impl_flag().load(std::memory_order_relaxed); }
void set_conv_impl(ConvImpl impl) { impl_flag().store(impl); }

#ifndef SOMA_HAS_ONEDNN

bool onednn_conv_built() { return false; }
bool onednn_conv_forward(const ConvGeometry&, const float*, const float*, float*,
                         const std::shared_ptr<Storage>&) {
  return false;
}
bool onednn_conv_backward_data(const ConvGeometry&, const float*, const float*, float*,
                               const std::shared_ptr<Storage>&) {
  return false;
}
bool onednn_conv_backward_weights(const ConvGeometry&, const float*, const float*, float*) {
  return false;
}
bool onednn_conv_forward_fused(const ConvGeometry&, const float*, const float*,
                               const std::shared_ptr<Storage>&, const float*, bool, float*) {
  return false;
}
bool onednn_conv3d_forward(const Conv3dGeometry&, const float*, const float*, float*) {
  return false;
}
bool onednn_conv3d_backward_data(const Conv3dGeometry&, const float*, const float*, float*) {
  return false;
}
bool onednn_conv3d_backward_weights(const Conv3dGeometry&, const float*, const float*, float*) {
  return false;
}

#else

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

enum class Pass { forward, backward_data, backward_weights };

// Runs p with arguments prepared once: the C++ API's execute() builds a hash map and a vector of
// them on every call (heap allocations that show at batch 1).
void execute(const dnnl::primitive& p, dnnl::stream& s, const dnnl_exec_arg_t* args, int n) {
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), s.get(), n, args),
                          "could not execute a primitive");
}

// One tensor argument: the user's plain buffer and, when the primitive wants another layout, a
// buffer in that layout with the reorder between them. The other layout's buffer is bound for
// each call (bind_prim), unless `own` asks for one that lives with the argument (the fused path's
// reordered weights, kept across calls).
struct Arg {
  memory user, prim;
  std::size_t prim_bytes = 0;  // the other layout's buffer (0: none, prim is user)
  std::optional<dnnl::reorder> reorder;  // user -> prim for inputs, prim -> user for the output
  std::array<dnnl_exec_arg_t, 2> reorder_args{};

  Arg(const memory::desc& user_md, const memory::desc& prim_md, bool input, bool own = false) {
    auto& eng = onednn_cpu_engine();
    user = memory(user_md, eng, DNNL_MEMORY_NONE);
    if (user_md == prim_md) {
      prim = user;
    } else {
      prim = own ? memory(prim_md, eng) : memory(prim_md, eng, DNNL_MEMORY_NONE);
      prim_bytes = own ? 0 : prim_md.get_size();
      reorder = input ? dnnl::reorder(user, prim) : dnnl::reorder(prim, user);
      const memory& from = input ? user : prim;
      const memory& to = input ? prim : user;
      reorder_args = {{{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}}};
    }
  }
  void bind(const void* p) { user.set_data_handle(const_cast<void*>(p)); }
  void bind_prim(CpuBuffer& buf) { bind_call_buffer(prim, prim_bytes, buf); }
  // user -> prim (inputs) or prim -> user (the output): the direction fixed at construction.
  void run_reorder(dnnl::stream& s) {
    if (reorder) execute(*reorder, s, reorder_args.data(), 2);
  }
};

// A ready primitive: inputs a and b, output c (forward: src, weights -> dst; backward data:
// diff_dst, weights -> diff_src; backward weights: src, diff_dst -> diff_weights).
struct Entry {
  dnnl::primitive prim;
  int a_arg, b_arg, c_arg;
  std::unique_ptr<Arg> a, b, c;
  memory scratchpad;  // bound for each call
  std::size_t scratchpad_bytes = 0;
  std::array<dnnl_exec_arg_t, 4> args{};  // memory handles: bind() updates what they point to
  std::size_t held_bytes() const { return 0; }
};

using Key = std::array<std::int64_t, 21>;

Key make_key(Pass pass, const ConvGeometry& g, dt lo) {
  return {std::int64_t(pass), g.n,  g.c,  g.h,  g.w,  g.o,  g.kh, g.kw, g.oh, g.ow,
          g.sh,               g.sw, g.pt, g.pb, g.pl, g.pr, g.dh, g.dw, g.groups,
          std::int64_t(omp_get_max_threads()), std::int64_t(lo)};
}

struct Descs {
  memory::desc src_user, wei_user, dst_user;  // plain layouts of soma's buffers
  memory::desc src_any, wei_any, dst_any;     // "any": oneDNN chooses; f32
  // The same in the autocast dtype `lo` (f32 without autocast): a pass reads its inputs in `lo`
  // and writes its output in f32.
  memory::desc src_lo, wei_lo, dst_lo;
  memory::dims strides, dilates, pad_l, pad_r;
};

Descs make_descs(const ConvGeometry& g, dt lo) {
  const memory::dims src{g.n, g.c, g.h, g.w}, dst{g.n, g.o, g.oh, g.ow};
  const bool grouped = g.groups > 1;
  // [O, C/g, KH, KW] in memory is [g, O/g, C/g, KH, KW]: the same bytes.
  const memory::dims wei = grouped ? memory::dims{g.groups, g.o / g.groups, g.c / g.groups, g.kh,
                                                  g.kw}
                                   : memory::dims{g.o, g.c, g.kh, g.kw};
  const tag wtag = grouped ? tag::goihw : tag::oihw;
  return {memory::desc(src, dt::f32, tag::nchw),
          memory::desc(wei, dt::f32, wtag),
          memory::desc(dst, dt::f32, tag::nchw),
          memory::desc(src, dt::f32, tag::any),
          memory::desc(wei, dt::f32, tag::any),
          memory::desc(dst, dt::f32, tag::any),
          memory::desc(src, lo, tag::any),
          memory::desc(wei, lo, tag::any),
          memory::desc(dst, lo, tag::any),
          {g.sh, g.sw},
          {g.dh - 1, g.dw - 1},  // oneDNN counts dilation from 0
          {g.pt, g.pl},
          {g.pb, g.pr}};
}

// The same for a 3-d convolution: NCDHW / OIDHW (GOIDHW grouped).
Descs make_descs3(const Conv3dGeometry& g, dt lo) {
  const memory::dims src{g.n, g.c, g.d, g.h, g.w}, dst{g.n, g.o, g.od, g.oh, g.ow};
  const bool grouped = g.groups > 1;
  const memory::dims wei = grouped ? memory::dims{g.groups, g.o / g.groups, g.c / g.groups, g.kd,
                                                  g.kh, g.kw}
                                   : memory::dims{g.o, g.c, g.kd, g.kh, g.kw};
  const tag wtag = grouped ? tag::goidhw : tag::oidhw;
  return {memory::desc(src, dt::f32, tag::ncdhw),
          memory::desc(wei, dt::f32, wtag),
          memory::desc(dst, dt::f32, tag::ncdhw),
          memory::desc(src, dt::f32, tag::any),
          memory::desc(wei, dt::f32, tag::any),
          memory::desc(dst, dt::f32, tag::any),
          memory::desc(src, lo, tag::any),
          memory::desc(wei, lo, tag::any),
          memory::desc(dst, lo, tag::any),
          {g.sd, g.sh, g.sw},
          {g.dd - 1, g.dh - 1, g.dw - 1},
          {g.pf, g.pt, g.pl},
          {g.pbk, g.pb, g.pr}};
}

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d) {
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, d.src_lo, d.wei_lo,
                                       d.dst_any, d.strides, d.dilates, d.pad_l, d.pad_r);
  return {desc, scratchpad_attr(), onednn_cpu_engine()};
}

// A bf16 primitive that oneDNN can only serve with its reference kernel is refused.
void check_not_reference(const dnnl::primitive_desc_base& pd, dt lo) {
  if (lo != dt::f32 && std::strncmp(pd.impl_info_str(), "ref", 3) == 0)
    throw dnnl::error(dnnl_unimplemented, "reference bf16 convolution");
}

std::unique_ptr<Entry> build_from(Pass pass, const Descs& d, dt lo) {
  auto e = std::make_unique<Entry>();
  memory::desc scratch_md;
  const auto fwd = forward_pd(d);
  switch (pass) {
    case Pass::forward: {
      check_not_reference(fwd, lo);
      e->prim = dnnl::convolution_forward(fwd);
      e->a_arg = DNNL_ARG_SRC, e->b_arg = DNNL_ARG_WEIGHTS, e->c_arg = DNNL_ARG_DST;
      e->a = std::make_unique<Arg>(d.src_user, fwd.src_desc(), true);
      e->b = std::make_unique<Arg>(d.wei_user, fwd.weights_desc(), true);
      e->c = std::make_unique<Arg>(d.dst_user, fwd.dst_desc(), false);
      scratch_md = fwd.scratchpad_desc();
      break;
    }
    case Pass::backward_data: {
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src_any,
                                                 d.wei_lo, d.dst_lo, d.strides, d.dilates,
                                                 d.pad_l, d.pad_r);
      dnnl::convolution_backward_data::primitive_desc pd(desc, scratchpad_attr(), onednn_cpu_engine(),
                                                         fwd);
      check_not_reference(pd, lo);
      e->prim = dnnl::convolution_backward_data(pd);
      e->a_arg = DNNL_ARG_DIFF_DST, e->b_arg = DNNL_ARG_WEIGHTS, e->c_arg = DNNL_ARG_DIFF_SRC;
      e->a = std::make_unique<Arg>(d.dst_user, pd.diff_dst_desc(), true);
      e->b = std::make_unique<Arg>(d.wei_user, pd.weights_desc(), true);
      e->c = std::make_unique<Arg>(d.src_user, pd.diff_src_desc(), false);
      scratch_md = pd.scratchpad_desc();
      break;
    }
    case Pass::backward_weights: {
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct,
                                                    d.src_lo, d.wei_any, d.dst_lo, d.strides,
                                                    d.dilates, d.pad_l, d.pad_r);
      dnnl::convolution_backward_weights::primitive_desc pd(desc, scratchpad_attr(),
                                                            onednn_cpu_engine(), fwd);
      check_not_reference(pd, lo);
      e->prim = dnnl::convolution_backward_weights(pd);
      e->a_arg = DNNL_ARG_SRC, e->b_arg = DNNL_ARG_DIFF_DST, e->c_arg = DNNL_ARG_DIFF_WEIGHTS;
      e->a = std::make_unique<Arg>(d.src_user, pd.src_desc(), true);
      e->b = std::make_unique<Arg>(d.dst_user, pd.diff_dst_desc(), true);
      e->c = std::make_unique<Arg>(d.wei_user, pd.diff_weights_desc(), false);
      scratch_md = pd.scratchpad_desc();
      break;
    }
  }
  e->scratchpad = memory(scratch_md, onednn_cpu_engine(), DNNL_MEMORY_NONE);
  e->scratchpad_bytes = scratch_md.get_size();
  e->args = {{{e->a_arg, e->a->prim.get()},
              {e->b_arg, e->b->prim.get()},
              {e->c_arg, e->c->prim.get()},
              {DNNL_ARG_SCRATCHPAD, e->scratchpad.get()}}};
  return e;
}

std::unique_ptr<Entry> build(Pass pass, const ConvGeometry& g, dt lo) {
  return build_from(pass, make_descs(g, lo), lo);
}

// An LRU cache of primitives, one per thread (an entry's memory objects are bound to the calling
// thread's buffers while it runs, so a shared cache would have to lock for the whole call). At most
// kMaxEntries entries and kMaxEntryBytes bytes held by them; the least recently used go first.
constexpr std::size_t kMaxEntries = 64;
constexpr std::size_t kMaxEntryBytes = std::size_t(64) << 20;

template <class Key, class Value>
struct Lru {
  struct Slot {
    std::unique_ptr<Value> value;  // null: oneDNN rejected the case (remembered)
    std::uint64_t used = 0;
    std::size_t bytes = 0;
  };
  std::map<Key, Slot> slots;
  std::uint64_t tick = 0;
  std::size_t bytes = 0;
  ~Lru() = default;
};

// cache[key], built on first use; null (remembered) when oneDNN rejects the case, so a rejected
// case costs one failed attempt only.
template <class Key, class Value, class Build>
Value* find_or_build(Lru<Key, Value>& cache, const Key& key, Build&& build) {
  auto it = cache.slots.find(key);
  if (it != cache.slots.end()) {
    it->second.used = ++cache.tick;
    return it->second.value.get();
  }
  typename Lru<Key, Value>::Slot slot;
  try {
    slot.value = build();
  } catch (const dnnl::error&) {
    slot.value = nullptr;
  }
  slot.bytes = slot.value ? slot.value->held_bytes() : 0;
  slot.used = ++cache.tick;
  while (!cache.slots.empty() && (cache.slots.size() >= kMaxEntries ||
                                  cache.bytes + slot.bytes > kMaxEntryBytes)) {
    auto oldest = cache.slots.begin();
    for (auto i = cache.slots.begin(); i != cache.slots.end(); ++i)
      if (i->second.used < oldest->second.used) oldest = i;
    cache.bytes -= oldest->second.bytes;
    cache.slots.erase(oldest);
  }
  cache.bytes += slot.bytes;
  return cache.slots.emplace(key, std::move(slot)).first->second.value.get();
}

// The cached primitive for (pass, geometry), or null when oneDNN rejects the case.
Entry* lookup(Pass pass, const ConvGeometry& g, dt lo) {
  thread_local Lru<Key, Entry> cache;
  return find_or_build(cache, make_key(pass, g, lo), [&] { return build(pass, g, lo); });
}

using Key3 = std::array<std::int64_t, 28>;

Entry* lookup3(Pass pass, const Conv3dGeometry& g, dt lo) {
  thread_local Lru<Key3, Entry> cache;
  const Key3 key{std::int64_t(pass), g.n,  g.c,  g.d,  g.h,  g.w,  g.o,  g.kd, g.kh, g.kw,
                 g.od, g.oh, g.ow, g.sd, g.sh, g.sw, g.pf, g.pbk, g.pt, g.pb, g.pl, g.pr,
                 g.dd, g.dh, g.dw, g.groups, std::int64_t(omp_get_max_threads()),
                 std::int64_t(lo)};
  return find_or_build(cache, key, [&] { return build_from(pass, make_descs3(g, lo), lo); });
}

bool run_entry(Entry* e, const float* a, const float* b, float* c);

bool run(Pass pass, const ConvGeometry& g, const float* a, const float* b, float* c) {
  if (conv_impl() == ConvImpl::im2col) return false;
  Entry* e = nullptr;
  if (cpu_autocast_dtype() == DType::bf16) e = lookup(pass, g, dt::bf16);
  if (!e) e = lookup(pass, g, dt::f32);
  return run_entry(e, a, b, c);
}

bool run3(Pass pass, const Conv3dGeometry& g, const float* a, const float* b, float* c) {
  if (conv_impl() == ConvImpl::im2col) return false;
  Entry* e = nullptr;
  if (cpu_autocast_dtype() == DType::bf16) e = lookup3(pass, g, dt::bf16);
  if (!e) e = lookup3(pass, g, dt::f32);
  if (!run_entry(e, a, b, c)) return false;
  ++t_conv3d_calls;
  return true;
}

// Binds the call's buffers to a cached primitive and runs it with its reorders.
bool run_entry(Entry* e, const float* a, const float* b, float* c) {
  if (!e) return false;
  auto& s = onednn_cpu_stream();
  e->a->bind(a);
  e->b->bind(b);
  e->c->bind(c);
  CpuBuffer a_buf, b_buf, c_buf, scratch;
  e->a->bind_prim(a_buf);
  e->b->bind_prim(b_buf);
  e->c->bind_prim(c_buf);
  bind_call_buffer(e->scratchpad, e->scratchpad_bytes, scratch);
  e->a->run_reorder(s);
  e->b->run_reorder(s);
  execute(e->prim, s, e->args.data(), int(e->args.size()));
  e->c->run_reorder(s);
  s.wait();
  return true;
}

// ---- fused inference forward: conv + bias + ReLU in one primitive ----

struct FusedEntry {
  dnnl::primitive prim;
  std::unique_ptr<Arg> src, wei, dst;
  memory bias;  // the caller's bias buffer (plain), when there is one
  memory scratchpad;  // bound for each call
  std::size_t scratchpad_bytes = 0;
  // Built once: memory objects are handles, so bind() on them updates what these pass.
  std::vector<dnnl_exec_arg_t> args;
  // Which weights wei->prim holds now (when the primitive wants them reordered): the storage
  // (weak, so that a freed and reallocated storage at the same address never matches), the data
  // pointer and the storage's in-place write counter at the time of the reorder.
  std::weak_ptr<Storage> w_owner;
  const float* w_ptr = nullptr;
  std::uint64_t w_version = 0;
  bool relu_after = false;  // ReLU not in the primitive: applied to the output afterwards
  // Whether the weights last checked (same identity triple as above) were all finite.
  std::weak_ptr<Storage> wf_owner;
  const float* wf_ptr = nullptr;
  std::uint64_t wf_version = 0;
  bool wf_finite = false;
  // The reordered weights live with the entry.
  std::size_t held_bytes() const { return wei->reorder ? wei->prim.get_desc().get_size() : 0; }
};

bool weights_finite(FusedEntry& e, const ConvGeometry& g, const float* w,
                    const std::shared_ptr<Storage>& w_storage) {
  const std::uint64_t version = w_storage ? w_storage->version.load() : 0;
  if (w_storage && e.wf_ptr == w && e.wf_version == version && e.wf_owner.lock() == w_storage)
    return e.wf_finite;
  e.wf_finite = all_finite_f32(w, g.o * (g.c / g.groups) * g.kh * g.kw);
  e.wf_owner = w_storage;
  e.wf_ptr = w;
  e.wf_version = version;
  return e.wf_finite;
}

using FusedKey = std::array<std::int64_t, 21>;

std::unique_ptr<FusedEntry> build_fused(const ConvGeometry& g, bool has_bias, bool relu) {
  const Descs d = make_descs(g, dt::f32);
  dnnl::primitive_attr attr = scratchpad_attr();
  if (relu) {
    // alpha = 0: oneDNN's JIT kernels then compute max(x, 0) with the 0 as the second operand,
    // which maps NaN to 0 where soma's relu keeps NaN: onednn_conv_forward_fused uses this
    // primitive only when no NaN can arise (finite operands).
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  auto e = std::make_unique<FusedEntry>();
  const memory::desc bias_md({g.o}, dt::f32, tag::x);
  using fwd = dnnl::convolution_forward;
  auto make_pd = [&](const memory::desc& src, const memory::desc& dst) {
    const auto desc =
        has_bias ? fwd::desc(dnnl::prop_kind::forward_inference,
                             dnnl::algorithm::convolution_direct, src, d.wei_any, bias_md, dst,
                             d.strides, d.dilates, d.pad_l, d.pad_r)
                 : fwd::desc(dnnl::prop_kind::forward_inference,
                             dnnl::algorithm::convolution_direct, src, d.wei_any, dst, d.strides,
                             d.dilates, d.pad_l, d.pad_r);
    return fwd::primitive_desc(desc, attr, onednn_cpu_engine());
  };
  // Left to choose ("any"), oneDNN 2.6 takes channels-last brgconv kernels for forward
  // inference; measured on LeNet at batch 1 and 256, the nChw16c JIT kernels are faster and their
  // reorders from and to soma's NCHW far cheaper than the NHWC transposes
  // (docs/conv-fused-inference.md).
  // So blocked where the channels allow (a first layer with few channels reads NCHW directly).
  std::optional<fwd::primitive_desc> pd;
  if (g.groups == 1 && g.o % 16 == 0) {
    try {
      pd = make_pd(memory::desc(d.src_user.dims(), dt::f32,
                                g.c % 16 == 0 ? tag::nChw16c : tag::nchw),
                   memory::desc(d.dst_user.dims(), dt::f32, tag::nChw16c));
      if (std::strncmp(pd->impl_info_str(), "jit", 3) != 0) pd.reset();
    } catch (const dnnl::error&) {
      pd.reset();
    }
  }
  if (!pd) pd = make_pd(d.src_any, d.dst_any);
  // The GEMM-based kernel (grouped, dilated cases) gains nothing from the post-op: there the
  // primitive runs without it and onednn_conv_forward_fused applies soma's relu to the output.
  const char* impl = pd->impl_info_str();
  if (relu && std::strncmp(impl, "jit", 3) != 0 && std::strncmp(impl, "brg", 3) != 0) {
    attr = scratchpad_attr();
    pd = make_pd(pd->src_desc(), pd->dst_desc());
    e->relu_after = true;
  }
  // oneDNN's reference kernel would be slower than its JIT kernel plus the separate ops: decline.
  if (std::strncmp(pd->impl_info_str(), "ref", 3) == 0)
    throw dnnl::error(dnnl_unimplemented, "reference convolution");
  e->prim = fwd(*pd);
  e->src = std::make_unique<Arg>(d.src_user, pd->src_desc(), true);
  e->wei = std::make_unique<Arg>(d.wei_user, pd->weights_desc(), true, /*own=*/true);
  e->dst = std::make_unique<Arg>(d.dst_user, pd->dst_desc(), false);
  e->scratchpad = memory(pd->scratchpad_desc(), onednn_cpu_engine(), DNNL_MEMORY_NONE);
  e->scratchpad_bytes = pd->scratchpad_desc().get_size();
  e->args = {{DNNL_ARG_SRC, e->src->prim.get()},
             {DNNL_ARG_WEIGHTS, e->wei->prim.get()},
             {DNNL_ARG_DST, e->dst->prim.get()},
             {DNNL_ARG_SCRATCHPAD, e->scratchpad.get()}};
  if (has_bias) {
    e->bias = memory(pd->bias_desc(), onednn_cpu_engine(), DNNL_MEMORY_NONE);
    e->args.push_back({DNNL_ARG_BIAS, e->bias.get()});
  }
  return e;
}

FusedEntry* lookup_fused(const ConvGeometry& g, bool has_bias, bool relu) {
  thread_local Lru<FusedKey, FusedEntry> cache;
  const FusedKey key{g.n,  g.c,  g.h,  g.w,  g.o,  g.kh, g.kw, g.oh, g.ow,
                     g.sh, g.sw, g.pt, g.pb, g.pl, g.pr, g.dh, g.dw, g.groups,
                     std::int64_t(omp_get_max_threads()), std::int64_t(has_bias),
                     std::int64_t(relu)};
  return find_or_build(cache, key, [&] { return build_fused(g, has_bias, relu); });
}

}  // namespace

bool onednn_conv_forward_fused(const ConvGeometry& g, const float* x, const float* w,
                               const std::shared_ptr<Storage>& w_storage, const float* bias,
                               bool relu, float* y) {
  if (conv_impl() == ConvImpl::im2col) return false;
  // 5x5 stride-1 convolutions with enough channels: Winograd F(2x2, 5x5), 9 multiplications per
  // output instead of 25 (conv_winograd.hpp; it declines non-finite operands).
  if (conv_winograd_forward(g, x, w, w_storage, bias, relu, y)) {
    ++t_fused_calls;
    return true;
  }
  FusedEntry* e = lookup_fused(g, bias != nullptr, relu);
  if (!e) return false;
  // The JIT kernels' ReLU post-op is max(v, 0), which maps NaN to 0; soma's relu keeps NaN. A
  // NaN output needs a NaN or infinite input, weight or bias (finite operands give NaN only
  // through an overflow to inf - inf), so with any of those the primitive without the post-op
  // runs and the ReLU is applied afterwards. The weights' check is cached like their reorder.
  bool relu_after = e->relu_after;
  if (relu && !relu_after &&
      !(all_finite_f32(x, g.n * g.c * g.h * g.w) && weights_finite(*e, g, w, w_storage) &&
        (!bias || all_finite_f32(bias, g.o)))) {
    e = lookup_fused(g, bias != nullptr, false);
    if (!e) return false;
    relu_after = true;
  }
  auto& s = onednn_cpu_stream();
  e->src->bind(x);
  e->dst->bind(y);
  CpuBuffer src_buf, dst_buf, scratch;
  e->src->bind_prim(src_buf);
  e->dst->bind_prim(dst_buf);
  bind_call_buffer(e->scratchpad, e->scratchpad_bytes, scratch);
  if (bias) e->bias.set_data_handle(const_cast<float*>(bias));
  e->src->run_reorder(s);
  if (e->wei->reorder) {
    const std::uint64_t version = w_storage ? w_storage->version.load() : 0;
    const bool fresh = w_storage && e->w_ptr == w && e->w_version == version &&
                       e->w_owner.lock() == w_storage;
    if (!fresh) {
      e->wei->bind(w);
      e->wei->run_reorder(s);
      e->w_owner = w_storage;
      e->w_ptr = w;
      e->w_version = version;
    }
  } else {
    e->wei->bind(w);
  }
  execute(e->prim, s, e->args.data(), int(e->args.size()));
  e->dst->run_reorder(s);
  s.wait();
  if (relu_after) {  // soma's relu: 0 where v <= 0, NaN stays
    const std::int64_t size = g.n * g.o * g.oh * g.ow;
    for (std::int64_t i = 0; i < size; ++i) y[i] = y[i] <= 0.0f ? 0.0f : y[i];
  }
  ++t_fused_calls;
  return true;
}

bool onednn_conv_built() { return true; }

// Winograd's training passes: f32 only (under bf16 autocast the direct kernel computes in bf16,
// as before).
static bool winograd_allowed() {
  return conv_impl() != ConvImpl::im2col && cpu_autocast_dtype() != DType::bf16;
}

bool onednn_conv_forward(const ConvGeometry& g, const float* x, const float* w, float* y,
                         const std::shared_ptr<Storage>& w_storage) {
  if (winograd_allowed() && conv_winograd_train_forward(g, x, w, w_storage, y))
    return true;
  return run(Pass::forward, g, x, w, y);
}
bool onednn_conv_backward_data(const ConvGeometry& g, const float* dy, const float* w, float* dx,
                               const std::shared_ptr<Storage>& w_storage) {
  if (winograd_allowed() && conv_winograd_backward_data(g, dy, w, w_storage, dx)) return true;
  return run(Pass::backward_data, g, dy, w, dx);
}
bool onednn_conv_backward_weights(const ConvGeometry& g, const float* x, const float* dy,
                                  float* dw) {
  return run(Pass::backward_weights, g, x, dy, dw);
}

bool onednn_conv3d_forward(const Conv3dGeometry& g, const float* x, const float* w, float* y) {
  return run3(Pass::forward, g, x, w, y);
}
bool onednn_conv3d_backward_data(const Conv3dGeometry& g, const float* dy, const float* w,
                                 float* dx) {
  return run3(Pass::backward_data, g, dy, w, dx);
}
bool onednn_conv3d_backward_weights(const Conv3dGeometry& g, const float* x, const float* dy,
                                    float* dw) {
  return run3(Pass::backward_weights, g, x, dy, dw);
}

#endif  // SOMA_HAS_ONEDNN

}  // namespace soma::detail
