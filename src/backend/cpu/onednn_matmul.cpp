// bf16 autocast on the CPU: the decision (cpu_autocast_dtype) and the matmul through oneDNN.
// Also f32 GEMM through oneDNN's sgemm where it measured faster than OpenBLAS (gemm_uses_onednn;
// SOMA_GEMM_IMPL=blas|onednn forces a library).
//
// A product under autocast is one oneDNN matmul primitive with bf16 source and weights and an
// f32 destination (oneDNN accumulates in f32). soma's f32 operands, in whatever strides the
// kernel got them (transposed views from the backward pass included), are converted by oneDNN
// reorders into plain bf16 copies in the same row or column order (see build()). Primitives and
// reorders are cached per thread, keyed on the shape, the strides and the OpenMP thread count (as
// in onednn_conv.cpp); the bf16 buffers and the scratchpad come from soma's caching allocator for
// each call, so the cache holds no activation-sized memory.
// A case for which oneDNN offers only its reference kernel is refused (remembered), and the
// caller runs f32 OpenBLAS: a reference bf16 kernel is many times slower than f32.
#include "onednn_matmul.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "internal/cpu_allocator.hpp"
#include "soma/autocast.hpp"

#ifdef SOMA_HAS_ONEDNN
#include <omp.h>

#include <array>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "onednn_engine.hpp"
#endif

namespace soma {
namespace detail {
namespace {

bool bf16_isa() {
#ifdef SOMA_HAS_ONEDNN
  // cpu_isa values are bit sets: an ISA includes every bit of the ones it extends.
  static const bool ok = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto need = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & need) == need;
  }();
  return ok;
#else
  return false;
#endif
}

void note_once(DType asked) {
  static std::atomic<bool> said_f16{false}, said_bf16{false};
  auto& said = asked == DType::f16 ? said_f16 : said_bf16;
  if (said.exchange(true)) return;
  const char* why = asked == DType::f16 ? "the CPU kernels have no f16 path"
#ifdef SOMA_HAS_ONEDNN
                                        : "this CPU has no AVX-512-BF16";
#else
                                        : "soma was built without oneDNN";
#endif
  std::fprintf(stderr, "soma: autocast %s: %s; CPU matrix and convolution work runs in f32\n",
               dtype_name(asked), why);
}

}  // namespace

DType cpu_autocast_dtype() {
  const DType want = autocast_dtype();
  if (want == DType::f32) return DType::f32;
  if (want == DType::bf16 && bf16_isa()) return DType::bf16;
  note_once(want);
  return DType::f32;
}

GemmImpl parse_gemm_impl(const char* value) {
  if (value && std::strcmp(value, "blas") == 0) return GemmImpl::blas;
  if (value && std::strcmp(value, "onednn") == 0) return GemmImpl::onednn;
  return GemmImpl::automatic;
}

namespace {

std::atomic<GemmImpl>& gemm_impl_flag() {
  static std::atomic<GemmImpl> flag{parse_gemm_impl(std::getenv("SOMA_GEMM_IMPL"))};
  return flag;
}

}  // namespace

GemmImpl gemm_impl() { return gemm_impl_flag().load(std::memory_order_relaxed); }
void set_gemm_impl(GemmImpl impl) { gemm_impl_flag().store(impl); }

namespace {

std::atomic<std::int64_t> sgemm_calls{0};

// Measured side by side on this project's machine (2 AVX-512 cores; bench/bench_sgemm.cpp,
// docs/performance.md workload 6). One thread: oneDNN's JIT sgemm beat OpenBLAS 0.3.21 by 5-25%
// on every shape from about 2^20 multiply-adds up (square 128-2048, the MLP's 32x784x128 and its
// transposed backward products); below that its larger fixed cost per call loses (0.6-0.9x at
// 64^3 or 32x128x10). Two threads on the idle machine (2026-11-22): oneDNN was faster at every
// square size from 128 to 2048 (medians of 5: 1.1-1.9x; OpenBLAS's own 2-thread split is slower
// than one thread on the MLP's 784x128x32 weight gradient: 87 vs 77 us, oneDNN 35 us), so the
// same rule holds for any thread count. Products under 2^20 run on the calling thread anyway
// (linalg.cpp). Earlier 2-thread measurements taken on busy cores had favoured OpenBLAS outside
// 480^3-704^3: on busy cores every threaded library is many times slower and the ranking was noise.
// Thin products (a dimension under 32) were not measured and stay on OpenBLAS.
bool onednn_faster(std::int64_t m, std::int64_t n, std::int64_t k, int /*threads*/) {
  if (std::min({m, n, k}) < 32) return false;
  return m * n * k >= (std::int64_t(1) << 20);
}

}  // namespace

bool gemm_uses_onednn(std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
  if (!onednn_sgemm_built()) return false;
  switch (gemm_impl()) {
    case GemmImpl::blas: return false;
    case GemmImpl::onednn: return true;
    case GemmImpl::automatic: break;
  }
  return onednn_faster(m, n, k, threads);
}

std::int64_t onednn_sgemm_calls() { return sgemm_calls.load(std::memory_order_relaxed); }

#ifndef SOMA_HAS_ONEDNN

bool onednn_matmul_bf16(const MatmulGeometry&, const float*, const float*, float*) {
  return false;
}

bool onednn_sgemm_built() { return false; }
void limit_onednn_primitive_cache() {}

bool onednn_sgemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, const float*,
                  std::int64_t, const float*, std::int64_t, float*, std::int64_t) {
  return false;
}

#else

dnnl::engine& onednn_cpu_engine() {
  static dnnl::engine eng = [] {
    limit_onednn_primitive_cache();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return eng;
}

dnnl::stream& onednn_cpu_stream() {
  thread_local dnnl::stream s(onednn_cpu_engine());
  return s;
}

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

// Binds m to a buffer from soma's caching allocator for one call (the cache holds no
// activation-sized buffers: a program going through many shapes would keep one per shape
// otherwise).
void bind(memory& m, CpuBuffer& buf) { bind_call_buffer(m, m.get_desc().get_size(), buf); }

// An input operand: the user's f32 buffer (any strides) and the primitive's bf16 copy.

struct Operand {
  memory user, prim;
  dnnl::reorder reorder;
  Operand(const memory::desc& user_md, const memory::desc& prim_md)
      : user(user_md, onednn_cpu_engine(), DNNL_MEMORY_NONE),
        prim(prim_md, onednn_cpu_engine(), DNNL_MEMORY_NONE),
        reorder(user, prim) {}
  void load(const float* p, CpuBuffer& buf, dnnl::stream& s) {
    user.set_data_handle(const_cast<float*>(p));
    bind(prim, buf);
    reorder.execute(s, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, prim}});
  }
};

struct Entry {
  dnnl::matmul prim;
  std::unique_ptr<Operand> a, b;
  memory c;
  memory scratchpad;  // bound for each call
};

using Key = std::array<std::int64_t, 8>;

bool is_reference(const char* impl) { return std::strncmp(impl, "ref", 3) == 0; }

std::unique_ptr<Entry> build(const MatmulGeometry& g) {
  auto& eng = onednn_cpu_engine();
  const memory::dims ad{g.m, g.k}, bd{g.k, g.n}, cd{g.m, g.n};
  // The bf16 copies keep the f32 operand's order (row- or column-major: a transposed view from
  // the backward pass stays transposed), so the reorder is a plain conversion; brgemm reads
  // either order. Measured against letting oneDNN choose ("any": a blocked weight layout whose
  // reorder cost more than the product at MLP sizes): MLP b32 training in bf16 +14%, b128 +10%,
  // square 256-2048 products the same (docs/performance.md "Workload 8").
  const tag at = g.a_rs == 1 && g.m > 1 ? tag::ba : tag::ab;
  const tag bt = g.b_rs == 1 && g.k > 1 ? tag::ba : tag::ab;
  dnnl::matmul::desc desc(memory::desc(ad, dt::bf16, at), memory::desc(bd, dt::bf16, bt),
                          memory::desc(cd, dt::f32, tag::ab));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(desc, attr, eng);
  if (is_reference(pd.impl_info_str())) return nullptr;
  auto e = std::make_unique<Entry>();
  e->prim = dnnl::matmul(pd);
  e->a = std::make_unique<Operand>(memory::desc(ad, dt::f32, memory::dims{g.a_rs, g.a_cs}),
                                   pd.src_desc());
  e->b = std::make_unique<Operand>(memory::desc(bd, dt::f32, memory::dims{g.b_rs, g.b_cs}),
                                   pd.weights_desc());
  e->c = memory(pd.dst_desc(), eng, DNNL_MEMORY_NONE);
  e->scratchpad = memory(pd.scratchpad_desc(), eng, DNNL_MEMORY_NONE);
  return e;
}

Entry* lookup(const MatmulGeometry& g) {
  thread_local std::map<Key, std::unique_ptr<Entry>> cache;
  const Key key{g.m, g.n, g.k, g.a_rs, g.a_cs, g.b_rs, g.b_cs, omp_get_max_threads()};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  if (cache.size() >= 128) cache.clear();  // shapes that keep changing: start over
  std::unique_ptr<Entry> e;
  try {
    e = build(g);
  } catch (const dnnl::error&) {
    e = nullptr;
  }
  return cache.emplace(key, std::move(e)).first->second.get();
}

}  // namespace

bool onednn_matmul_bf16(const MatmulGeometry& g, const float* a, const float* b, float* c) {
  Entry* e = lookup(g);
  if (!e) return false;
  auto& s = onednn_cpu_stream();
  CpuBuffer a_buf, b_buf, scratch;
  bind(e->scratchpad, scratch);
  e->a->load(a, a_buf, s);
  e->b->load(b, b_buf, s);
  e->c.set_data_handle(c);
  e->prim.execute(s, {{DNNL_ARG_SRC, e->a->prim},
                      {DNNL_ARG_WEIGHTS, e->b->prim},
                      {DNNL_ARG_DST, e->c},
                      {DNNL_ARG_SCRATCHPAD, e->scratchpad}});
  s.wait();
  return true;
}

bool onednn_sgemm_built() { return true; }

void limit_onednn_primitive_cache() {
  static const bool done = [] {
    if (!std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") &&
        !std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY"))
      dnnl::set_primitive_cache_capacity(kOnednnPrimitiveCacheCapacity);
    return true;
  }();
  (void)done;
}

// dnnl_sgemm is row-major like cblas_sgemm and runs oneDNN's own JIT GEMM with no primitive
// to create or cache, so a call costs what OpenBLAS's does.
bool onednn_sgemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                  std::int64_t ldc) {
  if (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c,
                 ldc) != dnnl_success)
    return false;
  sgemm_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

#endif  // SOMA_HAS_ONEDNN

}  // namespace detail

bool autocast_native(DType dtype) {
  if (dtype == DType::f32) return true;
  return dtype == DType::bf16 && detail::bf16_isa();
}

}  // namespace soma
