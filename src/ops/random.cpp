// Random tensors from a counter-based generator (Philox4x32-10, Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3", SC 2011). Element i's bits are a pure function of
// (seed, stream, i), so generation is split across threads freely and the same seed gives the
// same numbers on every run and for any soma::set_num_threads value. The generator and its
// transforms are src/backend/cuda/philox.hpp, shared with the CUDA kernels, which take their
// (seed, stream) through detail::random_op_stream: a draw gives the same numbers on either device.
//
// Seeds, as in TensorFlow:
//   - a per-call seed fixes the stream: the same call with the same seed returns the same numbers;
//   - without one, each call takes the next value of a global call counter as its stream under
//     the global seed. set_seed(s) sets the global seed and restarts the counter, so a program
//     that sets the seed reproduces its whole sequence. Calls with a per-call seed leave the
//     counter alone.
//   - when set_seed was never called, the global seed is kDefaultSeed (0x736f6d61, "soma" in
//     ASCII): programs are reproducible by default.
//
// Counter layout of one Philox block: ctr[0..1] = block index (48 bits) | redraw attempt << 48,
// ctr[2..3] = stream (the global call number with the top bit set; 0 for per-call seeds, so the
// two kinds of stream never meet); key = the 64-bit seed.
//
// random_uniform, random_normal and truncated_normal are registered ops without a gradient
// (nothing to differentiate; Dropout's gradient flows through its multiply by the mask). They
// take no input, or one whose shape (and dtype) they copy (random_*_like): with a symbolic input
// they become graph nodes that draw anew at every run. The stream is chosen when the kernel runs
// (attrs "rng": 0 global, 1 per-call seed, 2 Dropout's mix(seed, calls)); a Session sets
// "run_seed"/"run_stream" per run instead (src/graph/session.cpp). random_shuffle is not an op
// (its output is a fresh copy that carries no gradient; the data pipeline uses it eagerly).
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "backend/cuda/philox.hpp"
#include "internal/dispatch.hpp"
#include "internal/parallel.hpp"
#include "internal/registration.hpp"
#include "soma/op.hpp"
#include "soma/ops.hpp"
#include "soma/random_state.hpp"

namespace soma {

namespace {

constexpr std::uint64_t kDefaultSeed = 0x736f6d61;  // "soma"

struct GlobalRng {
  std::mutex mu;
  std::uint64_t seed = kDefaultSeed;
  std::uint64_t calls = 0;
};
GlobalRng& global_rng() {
  static GlobalRng g;
  return g;
}

struct Stream {
  std::uint64_t seed;
  std::uint64_t stream;
};

Stream next_stream(std::optional<std::uint64_t> seed) {
  if (seed) return {*seed, 0};
  auto& g = global_rng();
  std::lock_guard lock(g.mu);
  return {g.seed, (g.calls++) | (std::uint64_t(1) << 63)};
}

// ---- Philox4x32-10 (src/backend/cuda/philox.hpp: one definition for the CPU and CUDA) ----
using philox::Block;

// The four 32-bit words of block `index` (redraw `attempt`) of stream `s`.
inline Block bits(const Stream& s, std::uint64_t index, std::uint32_t attempt = 0) {
  return philox::bits(s.seed, s.stream, index, attempt);
}
using philox::u64;

// Fills n values, `lanes` per Philox block: gen(block, first, count) writes elements
// [first, first + count) from block `block`.
// Work is cut into tiles of a fixed size, so every element goes through the same code path (the
// same vector/scalar split) whatever the thread count: results are bit-identical.
template <class Gen>
void generate(std::int64_t n, int lanes, Gen&& gen) {
  constexpr std::int64_t kTileBlocks = 1024;
  std::int64_t blocks = (n + lanes - 1) / lanes;
  std::int64_t tiles = (blocks + kTileBlocks - 1) / kTileBlocks;
  detail::parallel_for(
      tiles, std::max<std::int64_t>(1, detail::kParallelGrain / (kTileBlocks * lanes)),
      [&](std::int64_t t0, std::int64_t t1) {
        for (std::int64_t t = t0; t < t1; ++t) {
          std::int64_t b1 = std::min(blocks, (t + 1) * kTileBlocks);
          for (std::int64_t b = t * kTileBlocks; b < b1; ++b) {
            std::int64_t first = b * lanes;
            gen(std::uint64_t(b), first, int(std::min<std::int64_t>(lanes, n - first)));
          }
        }
      });
}

// Philox for kManyBlocks consecutive blocks (attempt 0) at once: the rounds run over arrays, one
// block per SIMD lane (AVX-512 multiplies 8 blocks' words in one instruction), where
// philox::bits runs one block at a time (issue 26: dropout's draws were 8% of a transformer
// training step). The same words as philox::bits, block for block (test_random checks).
constexpr int kManyBlocks = 16;
void bits_many(const Stream& s, std::uint64_t first, std::uint32_t (&out)[4 * kManyBlocks]) {
  constexpr std::uint64_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, kLow = 0xffffffffu;
  constexpr std::uint64_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  // 32-bit words in 64-bit lanes: GCC vectorises the 32 x 32 -> 64-bit products then (one
  // vpmuludq per 8 lanes); with 32-bit arrays it keeps them scalar (6x slower).
  std::uint64_t c0[kManyBlocks], c1[kManyBlocks], c2[kManyBlocks], c3[kManyBlocks];
  for (int j = 0; j < kManyBlocks; ++j) {
    const std::uint64_t index = first + std::uint64_t(j);
    c0[j] = index & kLow;
    c1[j] = index >> 32;
    c2[j] = s.stream & kLow;
    c3[j] = s.stream >> 32;
  }
  std::uint64_t k0 = s.seed & kLow, k1 = s.seed >> 32;
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < kManyBlocks; ++j) {
      const std::uint64_t p0 = M0 * (c0[j] & kLow);
      const std::uint64_t p1 = M1 * (c2[j] & kLow);
      const std::uint64_t n0 = ((p1 >> 32) ^ c1[j] ^ k0) & kLow;
      const std::uint64_t n2 = ((p0 >> 32) ^ c3[j] ^ k1) & kLow;
      c1[j] = p1 & kLow;
      c3[j] = p0 & kLow;
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 = (k0 + W0) & kLow;
    k1 = (k1 + W1) & kLow;
  }
  for (int j = 0; j < kManyBlocks; ++j) {
    out[4 * j] = std::uint32_t(c0[j]);
    out[4 * j + 1] = std::uint32_t(c1[j]);
    out[4 * j + 2] = std::uint32_t(c2[j]);
    out[4 * j + 3] = std::uint32_t(c3[j]);
  }
}

// generate() for draws of one value per 32-bit word (4 per block) that use attempt 0 only:
// gen(words, first, count) writes elements [first, first + count) from words[0 .. count), so
// its loop runs over up to 4 * kManyBlocks values and vectorises too. Tiles of generate()'s size.
template <class Gen>
void generate_words(const Stream& s, std::int64_t n, Gen&& gen) {
  constexpr std::int64_t kTileBlocks = 1024, kLanes = 4;
  static_assert(kTileBlocks % kManyBlocks == 0);
  std::int64_t blocks = (n + kLanes - 1) / kLanes;
  std::int64_t tiles = (blocks + kTileBlocks - 1) / kTileBlocks;
  detail::parallel_for(
      tiles, std::max<std::int64_t>(1, detail::kParallelGrain / (kTileBlocks * kLanes)),
      [&](std::int64_t t0, std::int64_t t1) {
        std::uint32_t w[kLanes * kManyBlocks];
        for (std::int64_t t = t0; t < t1; ++t) {
          std::int64_t b1 = std::min(blocks, (t + 1) * kTileBlocks);
          for (std::int64_t b = t * kTileBlocks; b < b1; b += kManyBlocks) {
            bits_many(s, std::uint64_t(b), w);
            const std::int64_t first = b * kLanes;
            gen(static_cast<const std::uint32_t*>(w), first,
                std::min<std::int64_t>(kLanes * kManyBlocks, n - first));
          }
        }
      });
}

void check_shape(const Shape& shape, const char* op) {
  for (auto d : shape)
    if (d < 0) fail(op, "negative dimension in shape ", shape_str(shape));
}

void check_normal_args(const char* op, double mean, double stddev, DType dtype) {
  if (!is_floating(dtype))
    fail(op, "dtype ", dtype_name(dtype), " is not supported (expected f32, f64, f16 or bf16)");
  if (!(stddev >= 0) || !std::isfinite(stddev))
    fail(op, "stddev must be finite and non-negative, got ", stddev);
  if (!std::isfinite(mean)) fail(op, "mean must be finite, got ", mean);
}

// Largest value of T strictly below x (x finite).
template <class T>
T below(T x) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::nextafter(x, -std::numeric_limits<T>::infinity());
  } else {  // f16 / bf16: step the bit pattern towards -inf
    T r = x;
    if (r.bits == 0x0000 || r.bits == 0x8000)
      r.bits = 0x8001;
    else if (r.bits & 0x8000)
      ++r.bits;
    else
      --r.bits;
    return r;
  }
}

template <class T>
void fill_normal(Tensor& out, const Stream& s, double mean, double stddev, bool truncate) {
  T* p = out.data<T>();
  const std::int64_t n = out.numel();
  if constexpr (std::is_same_v<T, double>) {
    generate(n, 2, [&](std::uint64_t b, std::int64_t first, int count) {
      double z[2];
      philox::normals_d(bits(s, b), z);
      for (int k = 0; k < count; ++k) {
        const double v = truncate ? philox::truncate_d(s.seed, s.stream, b, k, z[k]) : z[k];
        p[first + k] = mean + stddev * v;
      }
    });
  } else {
    const float m = float(mean), sd = float(stddev);
    generate(n, 4, [&](std::uint64_t b, std::int64_t first, int count) {
      float z[4];
      philox::normals_f(bits(s, b), z);
      for (int k = 0; k < count; ++k) {
        const float v = truncate ? philox::truncate_f(s.seed, s.stream, b, k, z[k]) : z[k];
        p[first + k] = detail::convert<T>(m + sd * v);
      }
    });
  }
}

std::uint64_t as_u64(std::int64_t v) { return std::uint64_t(v); }

// The stream of one execution of a random op (see the comment at the top).
Stream stream_of(const Attrs& a) {
  if (a.has("run_stream")) return {as_u64(a.i("run_seed")), as_u64(a.i("run_stream"))};
  const std::int64_t mode = a.i("rng");
  if (mode == 0) return next_stream(std::nullopt);
  const std::uint64_t seed = as_u64(a.i("seed"));
  if (mode == 2) return {detail::splitmix64(seed ^ detail::splitmix64(as_u64(a.i("calls")))), 0};
  return {seed, 0};
}

Attrs rng_attrs(std::optional<std::uint64_t> seed) {
  Attrs a;
  a.set("rng", std::int64_t(seed ? 1 : 0));
  if (seed) a.set("seed", std::int64_t(*seed));
  return a;
}

std::vector<TensorSpec> random_infer(const std::vector<TensorSpec>& in, const Attrs& a) {
  if (in.size() > 1) fail("random", "expected 0 or 1 inputs, got ", in.size());
  Shape s = in.empty() ? Shape(a.ints("shape")) : in[0].shape;
  DType t = a.has("dtype") ? a.dtype("dtype") : in.at(0).dtype;
  return {{s, t}};
}

void normal_kernel_impl(std::vector<Tensor>& out, const Attrs& a, bool truncate) {
  const double mean = a.f("a"), stddev = a.f("b");
  Stream s = stream_of(a);
  Tensor& o = out[0];
  detail::dispatch_floating(o.dtype(), truncate ? "truncated_normal" : "random_normal",
                            [&]<class T>() { fill_normal<T>(o, s, mean, stddev, truncate); });
}
void normal_kernel(const std::vector<Tensor>&, std::vector<Tensor>& out, const Attrs& a) {
  normal_kernel_impl(out, a, false);
}
void truncated_normal_kernel(const std::vector<Tensor>&, std::vector<Tensor>& out,
                             const Attrs& a) {
  normal_kernel_impl(out, a, true);
}

void uniform_kernel(const std::vector<Tensor>&, std::vector<Tensor>& outs, const Attrs& a) {
  const double minval = a.f("a"), maxval = a.f("b");
  Tensor& out = outs[0];
  const DType dtype = out.dtype();
  if (dtype == DType::i32 || dtype == DType::i64) {
    Stream s = stream_of(a);
    const std::int64_t lo = std::int64_t(minval);
    // maxval - minval <= 2^64 - 1 when both fit an i64 (2^63 itself is excluded as maxval).
    const std::uint64_t range =
        maxval >= 9223372036854775808.0
            ? std::uint64_t(std::int64_t(9223372036854775807LL)) - std::uint64_t(lo) + 1
            : std::uint64_t(std::int64_t(maxval)) - std::uint64_t(lo);
    detail::dispatch_dtype(dtype, [&]<class T>() {
      if constexpr (std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>) {
        T* p = out.data<T>();
        generate(out.numel(), 2, [&](std::uint64_t b, std::int64_t first, int count) {
          Block w = bits(s, b);
          for (int k = 0; k < count; ++k) {
            // Multiply-shift maps 64 random bits onto [0, range); bias <= range / 2^64.
            // range 0: the whole i64 range (2^64 wrapped to 0).
            p[first + k] = T(philox::uniform_int(std::uint64_t(lo), range, w[2 * k], w[2 * k + 1]));
          }
        });
      }
    });
    return;
  }
  detail::dispatch_floating(dtype, "random_uniform", [&]<class T>() {
    const T hi = detail::convert<T>(maxval);
    // Rounding to T can land on maxval itself; such values are moved just below it.
    const T top = below(hi);
    Stream s = stream_of(a);
    T* p = out.data<T>();
    if constexpr (std::is_same_v<T, double>) {
      generate(out.numel(), 2, [&](std::uint64_t b, std::int64_t first, int count) {
        Block w = bits(s, b);
        for (int k = 0; k < count; ++k) {
          double v = philox::uniform53(minval, maxval - minval, w[2 * k], w[2 * k + 1]);
          p[first + k] = v < maxval ? v : top;
        }
      });
    } else {
      const double width = maxval - minval;
      const double hi_d = detail::convert<double>(hi);
      generate_words(s, out.numel(), [&](const std::uint32_t* w, std::int64_t first,
                                         std::int64_t count) {
        T* q = p + first;
        for (std::int64_t k = 0; k < count; ++k) {
          T v = detail::convert<T>(philox::uniform24(minval, width, w[k]));
          q[k] = detail::convert<double>(v) < hi_d ? v : top;
        }
      });
    }
  });
}

void check_uniform_args(const char* op, double minval, double maxval, DType dtype) {
  if (!std::isfinite(minval) || !std::isfinite(maxval))
    fail(op, "bounds must be finite, got [", minval, ", ", maxval, ")");
  if (!(minval < maxval))
    fail(op, "minval must be less than maxval, got minval ", minval, " and maxval ", maxval);
  if (dtype == DType::i32 || dtype == DType::i64) {
    // Integers in [minval, maxval): the bounds must be integers that the dtype holds.
    double lo_lim = dtype == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
    double hi_lim = dtype == DType::i32 ? 2147483648.0 : 9223372036854775808.0;
    if (minval != std::floor(minval) || maxval != std::floor(maxval))
      fail(op, "dtype ", dtype_name(dtype), " needs integer bounds, got [", minval, ", ", maxval,
           ")");
    if (minval < lo_lim || maxval > hi_lim)
      fail(op, "bounds [", minval, ", ", maxval, ") do not fit dtype ", dtype_name(dtype));
    return;
  }
  if (!is_floating(dtype))
    fail(op, "dtype ", dtype_name(dtype),
         " is not supported (expected f32, f64, f16, bf16, i32 or i64)");
  detail::dispatch_floating(dtype, op, [&]<class T>() {
    const T lo = detail::convert<T>(minval), hi = detail::convert<T>(maxval);
    if (!(detail::convert<double>(lo) < detail::convert<double>(hi)))
      fail(op, "bounds [", minval, ", ", maxval, ") collapse to one value in dtype ",
           dtype_name(dtype));
  });
}

Tensor call_random(const char* op, const std::vector<Tensor>& like, const Shape* shape, DType dtype,
                   double a, double b, Attrs attrs) {
  if (shape) {
    attrs.set("shape", std::vector<std::int64_t>(shape->begin(), shape->end()));
    attrs.set("dtype", dtype);
  }
  attrs.set("a", a).set("b", b);
  return call_op1(get_op(op), like, attrs);
}

Tensor normal_impl(const char* op, const Shape& shape, double mean, double stddev, DType dtype,
                   std::optional<std::uint64_t> seed) {
  check_shape(shape, op);
  check_normal_args(op, mean, stddev, dtype);
  return call_random(op, {}, &shape, dtype, mean, stddev, rng_attrs(seed));
}

Tensor like_input(const char* op, const Tensor& like) {
  if (!like.defined()) fail(op, "the tensor to take the shape from is undefined (empty)");
  return like;
}

}  // namespace

void set_seed(std::uint64_t seed) {
  auto& g = global_rng();
  std::lock_guard lock(g.mu);
  g.seed = seed;
  g.calls = 0;
}

RngState get_rng_state() {
  auto& g = global_rng();
  std::lock_guard lock(g.mu);
  return {g.seed, g.calls};
}

void set_rng_state(const RngState& state) {
  auto& g = global_rng();
  std::lock_guard lock(g.mu);
  g.seed = state.seed;
  g.calls = state.calls;
}

Tensor random_normal(const Shape& shape, double mean, double stddev, DType dtype,
                     std::optional<std::uint64_t> seed) {
  return normal_impl("random_normal", shape, mean, stddev, dtype, seed);
}

Tensor truncated_normal(const Shape& shape, double mean, double stddev, DType dtype,
                        std::optional<std::uint64_t> seed) {
  return normal_impl("truncated_normal", shape, mean, stddev, dtype, seed);
}

Tensor random_uniform(const Shape& shape, double minval, double maxval, DType dtype,
                      std::optional<std::uint64_t> seed) {
  const char* op = "random_uniform";
  check_shape(shape, op);
  check_uniform_args(op, minval, maxval, dtype);
  return call_random(op, {}, &shape, dtype, minval, maxval, rng_attrs(seed));
}

Tensor random_uniform_like(const Tensor& like, double minval, double maxval,
                           std::optional<std::uint64_t> seed) {
  const char* op = "random_uniform";
  check_uniform_args(op, minval, maxval, like_input(op, like).dtype());
  return call_random(op, {like}, nullptr, like.dtype(), minval, maxval, rng_attrs(seed));
}

Tensor random_normal_like(const Tensor& like, double mean, double stddev,
                          std::optional<std::uint64_t> seed) {
  const char* op = "random_normal";
  check_normal_args(op, mean, stddev, like_input(op, like).dtype());
  return call_random(op, {like}, nullptr, like.dtype(), mean, stddev, rng_attrs(seed));
}

Tensor truncated_normal_like(const Tensor& like, double mean, double stddev,
                             std::optional<std::uint64_t> seed) {
  const char* op = "truncated_normal";
  check_normal_args(op, mean, stddev, like_input(op, like).dtype());
  return call_random(op, {like}, nullptr, like.dtype(), mean, stddev, rng_attrs(seed));
}

namespace detail {

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::pair<std::uint64_t, std::uint64_t> random_op_stream(const Attrs& attrs) {
  Stream s = stream_of(attrs);
  return {s.seed, s.stream};
}

double random_uniform_top(DType dtype, double maxval) {
  double top = 0.0;
  dispatch_floating(dtype, "random_uniform",
                    [&]<class T>() { top = convert<double>(below(convert<T>(maxval))); });
  return top;
}

std::pair<std::uint64_t, std::uint64_t> next_global_stream() {
  Stream s = next_stream(std::nullopt);
  return {s.seed, s.stream};
}

Tensor dropout_uniform(const Tensor& like, std::optional<std::uint64_t> seed,
                       std::uint64_t calls) {
  const char* op = "random_uniform";
  check_uniform_args(op, 0.0, 1.0, like_input(op, like).dtype());
  Attrs a = rng_attrs(seed);
  if (seed) a.set("rng", std::int64_t(2)).set("calls", std::int64_t(calls));
  return call_random(op, {like}, nullptr, like.dtype(), 0.0, 1.0, a);
}

void register_random_ops() {
  // Tested in their _like form with a per-call seed: no reference (the values are the
  // generator's), but graph == eager, CPU == CUDA, determinism and empty inputs.
  auto sample = [](double a, double b) {
    return OpTestSpec{.shapes = {{3, 4}},
                      .attrs = {{"rng", std::int64_t(1)}, {"seed", std::int64_t(7)}, {"a", a},
                                {"b", b}},
                      .gradcheck = false};
  };
  register_op({.name = "random_uniform", .num_inputs = -1, .infer = random_infer,
               .tags = kRandom, .test = sample(-1.0, 2.0)});
  register_op({.name = "random_normal", .num_inputs = -1, .infer = random_infer,
               .tags = kRandom, .test = sample(0.5, 2.0)});
  register_op({.name = "truncated_normal", .num_inputs = -1, .infer = random_infer,
               .tags = kRandom, .test = sample(0.0, 1.0)});
  register_kernel("random_uniform", DeviceKind::CPU, uniform_kernel);
  register_kernel("random_normal", DeviceKind::CPU, normal_kernel);
  register_kernel("truncated_normal", DeviceKind::CPU, truncated_normal_kernel);
}

}  // namespace detail

Tensor random_shuffle(const Tensor& t, std::optional<std::uint64_t> seed) {
  const char* op = "random_shuffle";
  if (t.rank() == 0)
    fail(op, "expected a tensor of rank >= 1 to shuffle along axis 0, got shape []");
  if (!t.device().is_cpu())
    fail(op, "tensor is on ", t.device().str(), "; only CPU tensors are supported in this build");
  const std::int64_t n = t.shape()[0];
  Stream s = next_stream(seed);
  // Fisher-Yates: swap k with a uniform j in [0, k]; step k draws from block (n - 1 - k).
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) perm[std::size_t(i)] = i;
  for (std::int64_t k = n - 1; k > 0; --k) {
    Block w = bits(s, std::uint64_t(n - 1 - k));
    auto j = std::int64_t((unsigned __int128)u64(w[0], w[1]) * std::uint64_t(k + 1) >> 64);
    std::swap(perm[std::size_t(k)], perm[std::size_t(j)]);
  }
  Tensor src = contiguous(t);
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  const std::size_t row_bytes =
      std::size_t(t.numel() / std::max<std::int64_t>(n, 1)) * dtype_size(t.dtype());
  const char* sp = static_cast<const char*>(src.raw_data());
  char* dp = static_cast<char*>(out.raw_data());
  std::int64_t grain = std::max<std::int64_t>(
      1, detail::kParallelGrain * 4 / std::max<std::int64_t>(std::int64_t(row_bytes), 1));
  detail::parallel_for(n, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      std::memcpy(dp + std::size_t(r) * row_bytes,
                  sp + std::size_t(perm[std::size_t(r)]) * row_bytes, row_bytes);
  });
  return out;
}

}  // namespace soma
