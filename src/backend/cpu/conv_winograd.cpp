// Winograd F(2x2, 5x5) f32 forward convolution for Conv2D's inference path (conv_winograd.hpp).
//
// y = A^T [ (G g G^T) . (B^T d B) ] A per 2x2 output tile, d the 6x6 input tile, g the 5x5
// filter. Summed over the input channels, the element-wise stage is 36 independent GEMMs (one per
// position xi of the 6x6 transformed tile): M[xi] = V[xi] [tiles, C] x U[xi] [C, O].
//
// The matrices come from the Cook-Toom construction on the points 0, 1, -1, 2, -1/2 and infinity:
// A^T[i][j] = p_j^i, G[j][k] = p_j^k / prod_{l != j} (p_j - p_l) (the infinity column / row pick
// the highest coefficient), B^T solved from y_i = sum_k g_k d_{i+k} exactly (rationals, sympy:
// scripts/winograd-points.py). In a simulation of the f32 pipeline (C = 32, unit-variance input,
// weights scaled to a unit-variance output, 600 tiles) the largest error of a tile relative to
// the output's RMS was 1.1e-5 (median 1.6e-6) with these points, 1.9e-5 (2.3e-6) with 0, +-1,
// +-2 and 1.5e-5 (2.3e-6) with 0, +-1, +-1/2. B^T and A^T are exact in f32; G has thirds and
// fifteenths, so the filter transform is computed in f64 and rounded once.
//
// Layout: the input is copied once into a zero-padded NHWC buffer (channels padded to a multiple
// of 16), so that both transforms work on 16 channels at a time (one AVX-512 register; the file
// is compiled once per ISA, isa_foreach.hpp). The tiles (all images together) are processed in
// chunks of at most kChunk: a chunk's input transform V [36, chunk, C], oneDNN's batched f32
// matmul into M [36, chunk, O] (U in the layout the primitive prefers, reordered once per weight
// change), the output transform with bias and ReLU writes y. A chunk's buffers stay in L2; the
// chunks are spread over as many threads as the direct kernel would use (each GEMM
// single-threaded).
#include "conv_winograd.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "internal/cpu_allocator.hpp"
#include "internal/parallel.hpp"
#include "onednn_matmul.hpp"  // limit_onednn_primitive_cache
#include "soma/tensor.hpp"    // Storage (the filter transform's weight identity)

#ifdef SOMA_HAS_ONEDNN
#include <array>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>

#include "onednn_engine.hpp"
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // the vector helpers below (Vec), inlined in each pass
#endif

#define SOMA_ISA_FILE "backend/cpu/conv_winograd.cpp"
#include "backend/cpu/isa_foreach.hpp"  // the transforms once per instruction set

namespace soma::detail {
SOMA_ISA_BEGIN
namespace wino {

constexpr int kLanes = 16;  // channels per step of the transforms

// 16 channels: one AVX-512 register (two AVX or four SSE registers in the other passes). The
// helpers taking and returning it are inlined within each pass: no ABI crosses a pass (GCC's
// -Wpsabi note about it is switched off for this file, at its top).
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// o = B^T d for one column of six (B^T for the points 0, 1, -1, 2, -1/2, infinity; exact in f32):
//   [1  3/2   -2  -3/2     1  0]
//   [0   -1 -5/2  -1/2     1  0]
//   [0    1  1/2  -5/2     1  0]
//   [0 -1/2   -1   1/2     1  0]
//   [0    2   -1    -2     1  0]
//   [0    1  3/2    -2  -3/2  1]
inline void bt(const Vec (&d)[6], Vec (&o)[6]) {
  o[0] = d[0] + 1.5f * d[1] - 2.0f * d[2] - 1.5f * d[3] + d[4];
  o[1] = d[4] - d[1] - 2.5f * d[2] - 0.5f * d[3];
  o[2] = d[4] + d[1] + 0.5f * d[2] - 2.5f * d[3];
  o[3] = d[4] - 0.5f * d[1] - d[2] + 0.5f * d[3];
  o[4] = d[4] + 2.0f * d[1] - d[2] - 2.0f * d[3];
  o[5] = d[5] + d[1] + 1.5f * d[2] - 2.0f * d[3] - 1.5f * d[4];
}

// A^T m for one column of six: A^T = [1 1 1 1 1 0; 0 1 -1 2 -1/2 1].
inline Vec at0(const Vec (&m)[6]) { return m[0] + (m[1] + m[2]) + (m[3] + m[4]); }
inline Vec at1(const Vec (&m)[6]) { return (m[1] - m[2]) + 2.0f * m[3] - 0.5f * m[4] + m[5]; }

// Image x [c, h, w] into xp [hp, wp, cp] at offset (pt, pl), zeros elsewhere.
void pad_to_nhwc(const float* x, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t pt,
                 std::int64_t pl, std::int64_t hp, std::int64_t wp, std::int64_t cp, float* xp) {
  std::memset(xp, 0, sizeof(float) * std::size_t(hp * wp * cp));
  const std::int64_t rows = std::min(h, hp - pt), cols = std::min(w, wp - pl);
  for (std::int64_t ch = 0; ch < c; ++ch)
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* src = x + (ch * h + i) * w;
      float* dst = xp + ((i + pt) * wp + pl) * cp + ch;
      for (std::int64_t j = 0; j < cols; ++j) dst[j * cp] = src[j];
    }
}

// V[xi][r][:] = (B^T d B)[xi] for the tiles t0 + r, r < t1 - t0, of the padded NHWC input
// (tile t: image t / (th tw), rows 2 ty .. 2 ty + 5, columns 2 tx .. 2 tx + 5); rows r up to
// `rows` (a partial last chunk) are zeroed.
void input_transform(const float* xp, std::int64_t th, std::int64_t tw, std::int64_t hp,
                     std::int64_t wp, std::int64_t cp, std::int64_t t0, std::int64_t t1,
                     std::int64_t rows, float* v) {
  const std::int64_t plane = rows * cp;  // one xi's [rows, cp]
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t n = t / (th * tw), ty = t / tw % th, tx = t % tw;
    const float* base = xp + ((n * hp + 2 * ty) * wp + 2 * tx) * cp;
    float* out = v + (t - t0) * cp;
    for (std::int64_t cb = 0; cb < cp; cb += kLanes) {
      Vec tmp[6][6];  // tmp[b][i] = (B^T d)[i][b]
      for (int b = 0; b < 6; ++b) {
        Vec col[6];
        for (int a = 0; a < 6; ++a) col[a] = load(base + (a * wp + b) * cp + cb);
        bt(col, tmp[b]);
      }
      for (int i = 0; i < 6; ++i) {
        Vec row[6], res[6];
        for (int b = 0; b < 6; ++b) row[b] = tmp[b][i];
        bt(row, res);
        for (int j = 0; j < 6; ++j) store(out + (i * 6 + j) * plane + cb, res[j]);
      }
    }
  }
  for (std::int64_t r = t1 - t0; r < rows; ++r)
    for (int xi = 0; xi < 36; ++xi) std::memset(v + xi * plane + r * cp, 0, sizeof(float) * cp);
}

// y (NCHW) for the tiles t0 + r from M[xi][r][:] (op channels, o of them real): A^T m A, then
// bias (op values, zero past o; null: none) and ReLU (soma's: 0 where v <= 0, NaN stays);
// outputs past oh, ow (odd sizes) dropped.
void output_transform(const float* m, std::int64_t rows, std::int64_t op, std::int64_t t0,
                      std::int64_t t1, std::int64_t th, std::int64_t tw, std::int64_t o,
                      std::int64_t oh, std::int64_t ow, const float* bias, bool relu, float* y) {
  const std::int64_t plane = rows * op;
  const Vec zero = {};
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t n = t / (th * tw), ty = t / tw % th, tx = t % tw;
    const float* in = m + (t - t0) * op;
    const std::int64_t ny = std::min<std::int64_t>(2, oh - 2 * ty);
    const std::int64_t nx = std::min<std::int64_t>(2, ow - 2 * tx);
    for (std::int64_t ob = 0; ob < op; ob += kLanes) {
      Vec r0[6], r1[6];  // rows 0 and 1 of A^T m, per column b
      for (int b = 0; b < 6; ++b) {
        Vec col[6];
        for (int a = 0; a < 6; ++a) col[a] = load(in + (a * 6 + b) * plane + ob);
        r0[b] = at0(col);
        r1[b] = at1(col);
      }
      Vec res[4] = {at0(r0), at1(r0), at0(r1), at1(r1)};  // (0,0) (0,1) (1,0) (1,1)
      const Vec bv = bias ? load(bias + ob) : zero;
      for (Vec& r : res) {
        if (bias) r += bv;
        if (relu) r = r <= zero ? zero : r;
      }
      alignas(64) float lanes[4][kLanes];
      for (int q = 0; q < 4; ++q) store(lanes[q], res[q]);
      const std::int64_t nl = std::min<std::int64_t>(kLanes, o - ob);
      float* dst = y + ((n * o + ob) * oh + 2 * ty) * ow + 2 * tx;
      const std::int64_t cstride = oh * ow;
      if (ny == 2 && nx == 2) {
        for (std::int64_t l = 0; l < nl; ++l) {
          float* d = dst + l * cstride;
          d[0] = lanes[0][l];
          d[1] = lanes[1][l];
          d[ow] = lanes[2][l];
          d[ow + 1] = lanes[3][l];
        }
      } else {
        for (std::int64_t l = 0; l < nl; ++l)
          for (std::int64_t i = 0; i < ny; ++i)
            for (std::int64_t j = 0; j < nx; ++j) dst[l * cstride + i * ow + j] = lanes[i * 2 + j][l];
      }
    }
  }
}

// G (6x5) in f64: the filter transform's matrix (see the file comment).
constexpr double kG[6][5] = {{1.0, 0.0, 0.0, 0.0, 0.0},
                             {-1.0 / 3, -1.0 / 3, -1.0 / 3, -1.0 / 3, -1.0 / 3},
                             {1.0 / 3, -1.0 / 3, 1.0 / 3, -1.0 / 3, 1.0 / 3},
                             {1.0 / 15, 2.0 / 15, 4.0 / 15, 8.0 / 15, 16.0 / 15},
                             {-16.0 / 15, 8.0 / 15, -4.0 / 15, 2.0 / 15, -1.0 / 15},
                             {0.0, 0.0, 0.0, 0.0, 1.0}};

// u[xi][c][o] (cp x op per xi, the caller zeroed it) = (G w[o][c] G^T)[xi] in f64, rounded once,
// for the nc x no kernels of w ([no, nc, 5, 5]; flip: [nc, no, 5, 5] read rotated by 180
// degrees). All output channels of an input channel at once: the loops over o vectorise (here,
// per ISA), and u's rows are contiguous in o.
void filter_transform(const float* w, std::int64_t nc, std::int64_t no, bool flip,
                      std::int64_t cp, std::int64_t op, float* u) {
  typedef double VecD __attribute__((vector_size(8 * sizeof(double))));
  typedef float VecF8 __attribute__((vector_size(8 * sizeof(float))));
  const std::int64_t no8 = (no + 7) / 8 * 8;  // <= op (a multiple of 16)
  std::vector<double> k(std::size_t(25 * no8), 0.0);  // k[q][o]: tap q of kernel (o, c)
  for (std::int64_t c = 0; c < nc; ++c) {
    for (std::int64_t o = 0; o < no; ++o) {
      const float* src = w + (flip ? c * no + o : o * nc + c) * 25;
      for (int q = 0; q < 25; ++q) k[std::size_t(q * no8 + o)] = double(src[flip ? 24 - q : q]);
    }
    for (std::int64_t ob = 0; ob < no8; ob += 8) {  // 8 kernels in registers (past no: zeros)
      VecD t[6][5];  // G k
      for (int i = 0; i < 6; ++i)
        for (int b = 0; b < 5; ++b) {
          VecD sum = {};
          for (int a = 0; a < 5; ++a) {
            VecD ka;
            std::memcpy(&ka, k.data() + (a * 5 + b) * no8 + ob, sizeof ka);
            sum += kG[i][a] * ka;
          }
          t[i][b] = sum;
        }
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
          VecD sum = {};
          for (int b = 0; b < 5; ++b) sum += t[i][b] * kG[j][b];
          const VecF8 f = __builtin_convertvector(sum, VecF8);
          std::memcpy(u + ((i * 6 + j) * cp + c) * op + ob, &f, sizeof f);
        }
    }
  }
}

}  // namespace wino
SOMA_ISA_END

#if SOMA_ISA_ONCE
namespace {

thread_local std::uint64_t t_calls = 0;
thread_local std::uint64_t t_filter_transforms = 0;

std::atomic<WinogradUse>& use_flag() {
  static std::atomic<WinogradUse> flag{[] {
    const char* v = std::getenv("SOMA_CONV_WINOGRAD");
    return v && std::strcmp(v, "0") == 0 ? WinogradUse::off : WinogradUse::automatic;
  }()};
  return flag;
}

}  // namespace

WinogradUse conv_winograd_use() { return use_flag().load(std::memory_order_relaxed); }
void set_conv_winograd(WinogradUse use) { use_flag().store(use); }
std::uint64_t conv_winograd_calls() { return t_calls; }
std::uint64_t conv_winograd_filter_transforms() { return t_filter_transforms; }

bool conv_winograd_supports(const ConvGeometry& g) {
  return g.groups == 1 && g.kh == 5 && g.kw == 5 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
         g.dw == 1 && g.oh >= 1 && g.ow >= 1;
}

// Measured against oneDNN's direct JIT kernel (batch 1, 'same' padding; Zen 4, AVX-512), at 1
// thread: faster from 16 input and 32 output channels (C 16 O 32 14x14 1.25x, C 32 O 64 1.6x,
// C 128 O 128 1.9x, C 64 O 128 7x7 1.1x, C 32 O 32 56x56 1.35x); not below (C 24 O 24 1.2x on
// one thread but 0.84-0.91x on two, both padded to 32; C 16 O 16 28x28 0.75x; C 8 0.3-0.5x: the
// channels are padded to 16 and the transforms do not pay) nor at 4x4 outputs (0.9x). At 2
// threads the direct
// kernel gains more from the second thread on small work: C 16 O 32 14x14 0.92-0.98x, C 32 O 32
// 14x14 0.98-1.25x, C 64 O 128 7x7 0.92-0.99x, against C 32 O 64 14x14 1.34-1.5x, C 32 O 32
// 56x56 1.14-1.21x, C 33 O 64 1.1x, batch 8 1.1-1.17x: with more threads it is taken from 8M
// direct multiply-adds (two GEMM grains) and 100 output pixels.
bool conv_winograd_pays(const ConvGeometry& g) {
  if (g.c < 16 || g.o < 32 || g.oh * g.ow < 49) return false;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return threads == 1 ||
         (g.n * g.o * g.oh * g.ow * g.c * 25 >= 2 * kGemmGrain && g.oh * g.ow >= 100);
}

// dx[iy] = sum_k dy[iy + pt - k] w[k] = sum_k' dy[iy - (4 - pt) + k'] w[4 - k']: a forward
// convolution of dy with the flipped kernel, pads 4 - p per side, output the input's size.
ConvGeometry backward_data_geometry(const ConvGeometry& g) {
  return {g.n, g.o, g.oh, g.ow, g.c, 5, 5, g.h, g.w, 1, 1,
          4 - g.pt, 4 - g.pb, 4 - g.pl, 4 - g.pr, 1, 1, 1};
}

// In training the weights change at every step: each call also transforms the filter (~45 ns
// per kernel, single-threaded), which the batch must amortise. Measured per call (C 32 O 64
// 14x14 and 8x8, weights updated before each call; direct / Winograd, forward and backward
// data), 1 thread: batch 64 1.40x / 1.28x, batch 8 1.19x / 1.08x, batch 1 8x8 0.43x / 0.41x;
// 2 threads: batch 64 1.28-1.37x / 1.10-1.26x, 16 1.13-1.16x / 1.01x, 8 0.92-0.94x / 0.77-0.85x.
// But within LeNet's training step (batch 64, 2 threads, alternated runs) Winograd's backward
// data pass made the step slower (median of 20 pairs 0.94x; at 1 thread 1.04-1.05x faster), so
// the training passes take it on one thread only, from 1024 output pixels over the batch.
bool conv_winograd_pays_per_step(const ConvGeometry& g) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return threads == 1 && g.n * g.oh * g.ow >= 1024;
}

bool conv_winograd_applies(const ConvGeometry& g) {
  const WinogradUse use = conv_winograd_use();
  return use != WinogradUse::off && conv_winograd_supports(g) &&
         (use == WinogradUse::always || conv_winograd_pays(g));
}

#ifndef SOMA_HAS_ONEDNN

bool conv_winograd_forward(const ConvGeometry&, const float*, const float*,
                           const std::shared_ptr<Storage>&, const float*, bool, float*) {
  return false;
}
bool conv_winograd_backward_data(const ConvGeometry&, const float*, const float*,
                                 const std::shared_ptr<Storage>&, float*) {
  return false;
}
bool conv_winograd_train_forward(const ConvGeometry&, const float*, const float*,
                                 const std::shared_ptr<Storage>&, float*) {
  return false;
}
std::size_t conv_winograd_cache_size() { return 0; }

#else

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr std::int64_t kChunk = 64;  // tiles per GEMM: V and M of a chunk stay in L2
constexpr std::int64_t kLanes = 16;

std::int64_t round_up(std::int64_t v, std::int64_t k) { return (v + k - 1) / k * k; }

// One geometry: the batched GEMM primitive for `rows` tiles per chunk and the filter transform
// of the weights it last saw.
struct Entry {
  std::int64_t rows = 0, cp = 0, op = 0;
  dnnl::matmul prim;
  memory::desc src_md, dst_md, scratch_md;
  memory u;  // U [36, cp, op] in the primitive's weights layout
  dnnl::reorder to_u;  // plain [36, cp, op] -> u's layout (built at the first transform)
  bool to_u_built = false;
  // Which weights u holds (as the fused path's reordered weights): the storage (weak: a freed
  // and reallocated storage never matches), the pointer and the in-place write counter.
  std::weak_ptr<Storage> w_owner;
  const float* w_ptr = nullptr;
  std::uint64_t w_version = 0;
  bool w_valid = false;
  float w_max = 0.0f;  // max |w| (inf or NaN when not finite)
  std::uint64_t used = 0;
  std::size_t bytes() const { return u.get_desc().get_size(); }
};

using Key = std::array<std::int64_t, 15>;

// LRU of entries per thread: at most kMaxEntries and kMaxBytes of filter transforms.
constexpr std::size_t kMaxEntries = 32;
constexpr std::size_t kMaxBytes = std::size_t(64) << 20;

struct Cache {
  std::map<Key, std::unique_ptr<Entry>> slots;  // null: oneDNN refused (remembered)
  std::uint64_t tick = 0;
  std::size_t bytes = 0;
};

Cache& cache() {
  thread_local Cache c;
  return c;
}

std::unique_ptr<Entry> build(std::int64_t rows, std::int64_t cp, std::int64_t op) {
  auto e = std::make_unique<Entry>();
  e->rows = rows, e->cp = cp, e->op = op;
  e->src_md = memory::desc({36, rows, cp}, dt::f32, tag::abc);
  e->dst_md = memory::desc({36, rows, op}, dt::f32, tag::abc);
  const memory::desc wei_any({36, cp, op}, dt::f32, tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Each GEMM runs on one thread (the chunks are what is spread over threads): the primitive is
  // created for one, as oneDNN sizes its work partition at creation.
  BlasThreads one(1);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->src_md, wei_any, e->dst_md), attr,
                                  onednn_cpu_engine());
  if (std::strncmp(pd.impl_info_str(), "ref", 3) == 0) return nullptr;
  e->prim = dnnl::matmul(pd);
  e->scratch_md = pd.scratchpad_desc();
  e->u = memory(pd.weights_desc(), onednn_cpu_engine());
  return e;
}

// flip: the entry holds the transform of the flipped, in/out-transposed kernel (the backward
// data pass), never shared with a forward convolution of the same geometry.
Entry* lookup(const ConvGeometry& g, std::int64_t rows, std::int64_t cp, std::int64_t op,
              bool flip) {
  Cache& c = cache();
  const Key key{g.n, g.c,  g.h, g.w,  g.o, g.oh, g.ow,         g.pt,
                g.pb, g.pl, g.pr, rows, cp, op, std::int64_t(flip)};
  auto it = c.slots.find(key);
  if (it != c.slots.end()) {
    if (it->second) it->second->used = ++c.tick;
    return it->second.get();
  }
  std::unique_ptr<Entry> e;
  try {
    e = build(rows, cp, op);
  } catch (const dnnl::error&) {
    e = nullptr;
  }
  const std::size_t bytes = e ? e->bytes() : 0;
  while (!c.slots.empty() && (c.slots.size() >= kMaxEntries || c.bytes + bytes > kMaxBytes)) {
    auto oldest = c.slots.begin();  // refused geometries (null) go first
    for (auto i = c.slots.begin(); i != c.slots.end(); ++i) {
      const std::uint64_t ui = i->second ? i->second->used : 0;
      const std::uint64_t uo = oldest->second ? oldest->second->used : 0;
      if (ui < uo) oldest = i;
    }
    c.bytes -= oldest->second ? oldest->second->bytes() : 0;
    c.slots.erase(oldest);
  }
  if (e) e->used = ++c.tick;
  c.bytes += bytes;
  return c.slots.emplace(key, std::move(e)).first->second.get();
}

// U[xi][c][o] = (G w[o][c] G^T)[xi] in f64, rounded once, into e.u; channels past c, o zero.
// flip: w is [c, o, 5, 5] (a forward kernel whose input channels are g.o) and is read rotated
// by 180 degrees: the backward data pass as a forward convolution. In training it runs once per
// weight update and pass (wino::filter_transform, vectorised over o: 32 -> 64 channels took
// ~300 us one kernel at a time, a third of a batch-8 convolution).
void filter_transform(Entry& e, const ConvGeometry& g, const float* w, bool flip) {
  const std::size_t usize = std::size_t(36 * e.cp * e.op);
  CpuBuffer ub(usize * sizeof(float));  // the caching allocator: no page faults per update
  float* u = ub.f();
  std::fill(u, u + usize, 0.0f);
  SOMA_ISA_SELECT(wino::filter_transform)(w, g.c, g.o, flip, e.cp, e.op, u);
  const memory::desc plain({36, e.cp, e.op}, dt::f32, tag::abc);
  if (plain == e.u.get_desc()) {
    std::memcpy(e.u.get_data_handle(), u, usize * sizeof(float));
  } else {
    // The reorder primitive is kept: creating it (a JIT kernel) cost more than the transform.
    memory src(plain, onednn_cpu_engine(), u);
    if (!e.to_u_built) {
      e.to_u = dnnl::reorder(src, e.u);
      e.to_u_built = true;
    }
    e.to_u.execute(onednn_cpu_stream(), src, e.u);
    onednn_cpu_stream().wait();
  }
  ++t_filter_transforms;
}

// Winograd's intermediates stay finite, so that its result is the direct kernel's up to rounding,
// when max|x| and max|w| are below 1e30 and max|x| max|w| C 1e5 below 1e38 (f32 ends at 3.4e38).
// The transforms scale a tile by at most: input 7^2 (B^T's largest row sum, squared), filter
// (31/15)^2, output 5.5^2, so an output-sized intermediate is at most ~6.3e3 C max|x| max|w|
// (a direct sum: 25 C max|x| max|w|). Larger values go to the direct kernel.
bool magnitudes_safe(float x_max, float w_max, std::int64_t c) {
  return x_max < 1e30f && w_max < 1e30f &&
         double(x_max) * double(w_max) * double(c) * 1e5 < 1e38;
}

// Whether e.u holds the transform of these weights (recomputed when not) and they are finite.
bool weights_ready(Entry& e, const ConvGeometry& g, const float* w,
                   const std::shared_ptr<Storage>& w_storage, bool flip) {
  const std::uint64_t version = w_storage ? w_storage->version.load() : 0;
  const bool fresh = e.w_valid && w_storage && e.w_ptr == w && e.w_version == version &&
                     e.w_owner.lock() == w_storage;
  if (!fresh) {
    e.w_max = max_abs_f32(w, g.o * g.c * 25);
    if (magnitudes_safe(0.0f, e.w_max, g.c)) filter_transform(e, g, w, flip);
    e.w_owner = w_storage;
    e.w_ptr = w;
    e.w_version = version;
    e.w_valid = true;
  }
  return magnitudes_safe(0.0f, e.w_max, g.c);
}

}  // namespace

std::size_t conv_winograd_cache_size() { return cache().slots.size(); }

namespace {

// conv_winograd_forward; flip: w is the kernel of the forward convolution whose backward data
// pass this is (see conv_winograd_backward_data); per_step: a training pass (weights updated
// between calls, conv_winograd_pays_per_step).
bool run_winograd(const ConvGeometry& g, const float* x, const float* w,
                  const std::shared_ptr<Storage>& w_storage, const float* bias, bool relu,
                  bool flip, bool per_step, float* y) {
  if (!conv_winograd_applies(g)) return false;
  if (per_step && conv_winograd_use() == WinogradUse::automatic &&
      !conv_winograd_pays_per_step(g))
    return false;
  const float x_max = max_abs_f32(x, g.n * g.c * g.h * g.w);
  if (!magnitudes_safe(x_max, 0.0f, g.c)) return false;  // inf, NaN or huge: the direct kernel
  const std::int64_t th = (g.oh + 1) / 2, tw = (g.ow + 1) / 2, tiles = g.n * th * tw;
  const std::int64_t cp = round_up(g.c, kLanes), op = round_up(g.o, kLanes);
  const std::int64_t hp = 2 * th + 4, wp = 2 * tw + 4;
  // Threads: as many as the direct kernel it replaces would use (oneDNN's runs on all of them),
  // with at least 8 tiles each. Measured at 2 threads on the quiet machine (direct / Winograd,
  // us): LeNet's 32 -> 64 channels at 14x14, batch 1: 123-128 / 100-113 on two threads, 134-168
  // on one; 16 -> 32 at 14x14: 23 / 21 on two, 29 on one; 64 -> 128 at 7x7 (16 tiles): 66 / 64
  // on two, 110 on one. Each thread gets a chunk of the tiles (a partial last one is padded).
  const int nt = omp_in_parallel()
                     ? 1
                     : int(std::clamp<std::int64_t>(tiles / 8, 1, omp_get_max_threads()));
  const std::int64_t rows = std::min(kChunk, (tiles + nt - 1) / nt);
  const std::int64_t chunks = (tiles + rows - 1) / rows;
  Entry* e = lookup(g, rows, cp, op, flip);
  if (!e || !weights_ready(*e, g, w, w_storage, flip) || !magnitudes_safe(x_max, e->w_max, g.c))
    return false;

  CpuBuffer xp(sizeof(float) * std::size_t(g.n * hp * wp * cp));
  {
    auto pad = SOMA_ISA_SELECT(wino::pad_to_nhwc);
    const std::int64_t image = g.c * g.h * g.w;
    parallel_for(g.n, std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(image, 1)),
                 [&](std::int64_t n0, std::int64_t n1) {
                   for (std::int64_t n = n0; n < n1; ++n)
                     pad(x + n * image, g.c, g.h, g.w, g.pt, g.pl, hp, wp, cp,
                         xp.f() + n * hp * wp * cp);
                 });
  }
  // The bias padded to op channels: the output transform adds 16 at a time (a buffer per thread:
  // no allocation per call once it has grown).
  thread_local std::vector<float> bias_padded;
  if (bias) {
    bias_padded.assign(std::size_t(op), 0.0f);
    std::copy_n(bias, g.o, bias_padded.begin());
  }
  const float* bp = bias ? bias_padded.data() : nullptr;
  auto in_tf = SOMA_ISA_SELECT(wino::input_transform);
  auto out_tf = SOMA_ISA_SELECT(wino::output_transform);
  const std::int64_t per_thread = std::max<std::int64_t>(1, chunks / nt);  // nt threads
  // No exception may leave an OpenMP region: a failure (allocation, oneDNN) is recorded, and
  // the caller then runs the direct kernel, which writes all of y again.
  std::atomic<bool> failed{false};
  parallel_for(chunks, per_thread, [&](std::int64_t k0, std::int64_t k1) {
    try {
      BlasThreads one(1);  // this thread's GEMMs: single-threaded, as the primitive was built
      CpuBuffer v(sizeof(float) * std::size_t(36 * rows * cp));
      CpuBuffer m(sizeof(float) * std::size_t(36 * rows * op));
      CpuBuffer scratch(e->scratch_md.get_size());
      memory src(e->src_md, onednn_cpu_engine(), v.get()), dst(e->dst_md, onednn_cpu_engine(), m.get());
      memory sp(e->scratch_md, onednn_cpu_engine(), scratch.get());
      const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src.get()},
                                       {DNNL_ARG_WEIGHTS, e->u.get()},
                                       {DNNL_ARG_DST, dst.get()},
                                       {DNNL_ARG_SCRATCHPAD, sp.get()}};
      auto& s = onednn_cpu_stream();
      for (std::int64_t k = k0; k < k1 && !failed.load(std::memory_order_relaxed); ++k) {
        const std::int64_t t0 = k * rows, t1 = std::min(tiles, t0 + rows);
        in_tf(xp.f(), th, tw, hp, wp, cp, t0, t1, rows, v.f());
        if (dnnl_primitive_execute(e->prim.get(), s.get(), 4, args) != dnnl_success ||
            dnnl_stream_wait(s.get()) != dnnl_success) {
          failed = true;
          break;
        }
        out_tf(m.f(), rows, op, t0, t1, th, tw, g.o, g.oh, g.ow, bp, relu, y);
      }
    } catch (...) {
      failed = true;
    }
  });
  if (failed) return false;
  ++t_calls;
  return true;
}

}  // namespace

bool conv_winograd_forward(const ConvGeometry& g, const float* x, const float* w,
                           const std::shared_ptr<Storage>& w_storage, const float* bias, bool relu,
                           float* y) {
  return run_winograd(g, x, w, w_storage, bias, relu, false, false, y);
}

bool conv_winograd_train_forward(const ConvGeometry& g, const float* x, const float* w,
                                 const std::shared_ptr<Storage>& w_storage, float* y) {
  return run_winograd(g, x, w, w_storage, nullptr, false, false, true, y);
}

bool conv_winograd_backward_data(const ConvGeometry& g, const float* dy, const float* w,
                                 const std::shared_ptr<Storage>& w_storage, float* dx) {
  if (!conv_winograd_supports(g) || g.pt > 4 || g.pb > 4 || g.pl > 4 || g.pr > 4) return false;
  return run_winograd(backward_data_geometry(g), dy, w, w_storage, nullptr, false, true, true,
                      dx);
}

#endif  // SOMA_HAS_ONEDNN
#endif  // SOMA_ISA_ONCE

}  // namespace soma::detail
