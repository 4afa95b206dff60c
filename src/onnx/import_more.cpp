// ONNX operators written with soma ops, kept out of import.cpp's table file: recurrent attention
// and convolution with state (opset 27), SwiGLU, window functions, LRN. Each handler's
// attributes are listed in onnx_ops() (import.cpp) and checked there at load.
#ifdef SOMA_HAS_ONNX
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "onnx/import_handlers.hpp"
#include "soma/nn_ops.hpp"
#include "soma/op.hpp"

namespace soma::onnx::importer {

namespace {
// [B, T, H*D] -> [B, H, T, D]
Tensor heads_first(const Tensor& x, std::int64_t heads) {
  return transpose(reshape(x, {x.dim(0), x.dim(1), heads, x.dim(2) / heads}), {0, 2, 1, 3});
}
// The slice t[:, :, i] (keeping the axis) of a [B, H, T, ...] tensor.
Tensor step_of(const Tensor& t, std::int64_t i) {
  std::vector<Slice> s(std::size_t(t.rank()));
  s[2] = Slice{i, i + 1};
  return slice(t, s);
}
}  // namespace

// LinearAttention (opset 27), as ONNX's reference: a state S [B, Hkv, dk, dv] per sequence,
// decayed by exp(decay) (gated rules), corrected toward v by beta (delta rules), written with
// k v^T and read by q (grouped heads share their KV head's state); computed in f32.
std::vector<Tensor> linear_attention(const Node& n) {
  const Tensor &query = n.x(), &key = n.arg(1), &value = n.arg(2);
  const std::string rule = n.attr.s("update_rule");
  enum class Rule { linear, gated, delta, gated_delta };
  const Rule r = keyword<Rule>(rule, {{"linear", Rule::linear}, {"gated", Rule::gated},
                                      {"delta", Rule::delta}, {"gated_delta", Rule::gated_delta}},
                               n.what);
  const bool gating = r == Rule::gated || r == Rule::gated_delta;
  const bool delta = r == Rule::delta || r == Rule::gated_delta;
  const std::int64_t hq = n.attr.i("q_num_heads"), hkv = n.attr.i("kv_num_heads");
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    fail(kWho, n.what, ": q_num_heads (", hq, ") must be a positive multiple of kv_num_heads (",
         hkv, ")");
  if (gating != n.has(4))
    fail(kWho, n.what, ": update_rule '", rule, "' ", gating ? "needs" : "takes no", " decay input");
  if (delta != n.has(5))
    fail(kWho, n.what, ": update_rule '", rule, "' ", delta ? "needs" : "takes no", " beta input");
  for (const Tensor* t : {&query, &key, &value})
    if (t->rank() != 3) fail(kWho, n.what, ": query, key and value must have rank 3 [B, T, H*D]");
  const std::int64_t b = query.dim(0), len = query.dim(1);
  const std::int64_t dk = query.dim(2) / hq, dv = value.dim(2) / hkv, group = hq / hkv;
  auto f32 = [](const Tensor& t) { return cast(t, DType::f32); };
  const Tensor q = f32(heads_first(query, hq)), k = f32(heads_first(key, hkv)),
               v = f32(heads_first(value, hkv));
  Tensor decay, beta;
  if (gating) {
    const Tensor& d = n.arg(4);
    if (d.rank() != 3 || (d.dim(2) != hkv && d.dim(2) != hkv * dk))
      fail(kWho, n.what, ": decay must be [B, T, kv_num_heads] or [B, T, kv_num_heads * d_k]");
    decay = f32(d.dim(2) == hkv ? transpose(reshape(d, {b, len, hkv, 1}), {0, 2, 1, 3})
                                : heads_first(d, hkv));
  }
  if (delta) {
    const Tensor& bt = n.arg(5);
    if (bt.rank() != 3 || (bt.dim(2) != hkv && bt.dim(2) != 1))
      fail(kWho, n.what, ": beta must be [B, T, kv_num_heads] or [B, T, 1]");
    beta = f32(transpose(reshape(bt, {b, len, bt.dim(2), 1}), {0, 2, 1, 3}));
  }
  DType state_dtype = query.dtype();
  Tensor state;
  if (n.has(3)) {
    const Tensor& past = n.arg(3);
    if (past.shape() != Shape{b, hkv, dk, dv})
      fail(kWho, n.what, ": past_state has shape ", shape_str(past.shape()), ", expected ",
           shape_str(Shape{b, hkv, dk, dv}));
    state_dtype = past.dtype();
    state = f32(past);
  } else {
    state = zeros({b, hkv, dk, dv}, DType::f32);
  }
  const double sc = n.attr.f("scale");
  const double scale = sc == 0.0 ? 1.0 / std::sqrt(double(dk)) : sc;
  std::vector<Tensor> outs;
  for (std::int64_t i = 0; i < len; ++i) {
    const Tensor kt = step_of(k, i);  // [B, Hkv, 1, dk]
    Tensor vt = step_of(v, i);        // [B, Hkv, 1, dv]
    if (gating) state = state * exp(transpose(step_of(decay, i), {0, 1, 3, 2}));
    if (delta) vt = step_of(beta, i) * (vt - matmul(kt, state));
    state = state + matmul(transpose(kt, {0, 1, 3, 2}), vt);
    Tensor read = state;
    if (group > 1)
      read = reshape(broadcast_to(expand_dims(state, 2), {b, hkv, group, dk, dv}), {b, hq, dk, dv});
    outs.push_back(matmul(step_of(q, i), read) * scale);  // [B, Hq, 1, dv]
  }
  Tensor out = reshape(transpose(concat(outs, 2), {0, 2, 1, 3}), {b, len, hq * dv});
  return {cast(out, query.dtype()), cast(state, state_dtype)};
}

// CausalConvWithState (opset 27): a depthwise 1-D convolution over [past_state, input] (zeros
// when no state), an optional SiLU, and the last k - 1 positions as the next state.
std::vector<Tensor> causal_conv_with_state(const Node& n) {
  const Tensor &x = n.x(), &w = n.arg(1);
  if (x.rank() != 3 || w.rank() != 3 || w.dim(1) != 1 || w.dim(0) != x.dim(1))
    fail(kWho, n.what, ": input must be [B, C, L] and weight [C, 1, k], got ", shape_str(x.shape()),
         " and ", shape_str(w.shape()));
  const std::int64_t c = x.dim(1), k = w.dim(2);
  const Tensor past = n.has(3) ? n.arg(3) : zeros({x.dim(0), c, k - 1}, x.dtype());
  const Tensor padded = concat({past, x}, 2);
  Tensor y = conv2d(expand_dims(padded, 2), expand_dims(w, 2), Size2(1), Padding("valid"),
                    Size2(1), c);
  y = squeeze(y, {2});
  if (n.has(2)) y = y + reshape(n.arg(2), {1, c, 1});
  enum class Act { none, silu };
  if (keyword<Act>(n.attr.s("activation"), {{"none", Act::none}, {"silu", Act::silu}, {"swish", Act::silu}},
                   n.what) == Act::silu)
    y = y * sigmoid(y);
  std::vector<Slice> last(3);
  last[2] = Slice{padded.dim(2) - (k - 1), std::nullopt};
  return {y, slice(padded, last)};
}

// SwiGLU: a * sigmoid(alpha * a) * b, on equal shapes.
std::vector<Tensor> swiglu(const Node& n) {
  const Tensor &a = n.x(), &b = n.arg(1);
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    fail(kWho, n.what, ": A and B must have one shape and dtype, got ", shape_str(a.shape()), " ",
         a.dtype(), " and ", shape_str(b.shape()), " ", b.dtype());
  return {a * sigmoid(a * n.attr.f("alpha")) * b};
}

// Hann, Hamming and Blackman windows of `size` points: periodic (N = size) or symmetric
// (N = size - 1), computed in f64 and cast to output_datatype.
template <int Kind>
std::vector<Tensor> window(const Node& n) {
  const std::int64_t size = std::int64_t(n.number(0));
  const DType out = soma_dtype(int(n.attr.i("output_datatype")), n.what + " output_datatype");
  const double len = double(n.attr.i("periodic") ? size : size - 1);
  const Tensor i = arange(double(size), DType::f64);
  const double pi = std::numbers::pi;
  Tensor w;
  if (Kind == 0) w = square(sin(i * (pi / len)));                              // Hann
  else if (Kind == 1) w = 25.0 / 46.0 - cos(i * (2 * pi / len)) * (21.0 / 46.0);  // Hamming
  else w = 0.42 - cos(i * (2 * pi / len)) * 0.5 + cos(i * (4 * pi / len)) * 0.08;  // Blackman
  return {cast(w, out)};
}
template std::vector<Tensor> window<0>(const Node&);
template std::vector<Tensor> window<1>(const Node&);
template std::vector<Tensor> window<2>(const Node&);

// LRN across channels: x / (bias + alpha / size * sum of x^2 over the size channels around)^beta.
std::vector<Tensor> lrn(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t size = n.attr.i("size");
  if (size <= 0) fail(kWho, n.what, ": size must be positive, got ", size);
  const std::int64_t before = (size - 1) / 2, after = size - 1 - before;
  std::vector<std::pair<std::int64_t, std::int64_t>> p(std::size_t(x.rank()), {0, 0});
  p[1] = {before, after};
  const Tensor sq = pad(square(x), p);
  Tensor s = zeros_like(x);
  std::vector<Slice> win(std::size_t(x.rank()));
  for (std::int64_t j = 0; j < size; ++j) {
    win[1] = Slice{j, j + x.dim(1)};
    s = s + slice(sq, win);
  }
  const Tensor base = s * (n.attr.f("alpha") / double(size)) + n.attr.f("bias");
  return {x / pow(base, scalar(n.attr.f("beta"), x.dtype()))};
}

// Resize's cubic and antialiased taps along one axis, as ONNX's reference: the source
// coordinate x splits into f = ceil(x) - 1 and ratio = x - f in (0, 1]; tap j reads index
// f - n/2 + 1 + j (clamped to the edge) with the kernel's weight at its distance (antialias
// widens the kernel by 1 / scale when downsampling and normalises it).
ResizeTaps resize_taps(const std::vector<double>& src, std::int64_t in_len, double scale,
                       bool cubic, bool antialias, double a, bool exclude_outside) {
  const double s = antialias ? std::min(scale, 1.0) : 1.0;
  const std::int64_t start = std::int64_t(std::floor((cubic ? -2.0 : -1.0) / s)) + 1;
  const std::size_t n = std::size_t(2 - 2 * start);
  auto cubic_w = [a](double x) {
    x = std::fabs(x);
    if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
  };
  ResizeTaps t{n, {}, {}};
  for (double x : src) {
    const double f = std::ceil(x) - 1, ratio = x - f;
    std::vector<double> w(n);
    for (std::size_t j = 0; j < n; ++j) {
      const double d = (double(start) + double(j) - ratio) * s;  // tap offset from x, scaled
      w[j] = cubic ? cubic_w(d) : std::max(0.0, 1.0 - std::fabs(d));
    }
    if (antialias) {
      double sum = 0;
      for (double v : w) sum += v;
      for (double& v : w) v /= sum;
    }
    std::vector<std::int64_t> idx(n);
    for (std::size_t j = 0; j < n; ++j) idx[j] = std::int64_t(f) + start + std::int64_t(j);
    if (exclude_outside) {
      double sum = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (idx[j] < 0 || idx[j] >= in_len) w[j] = 0;
        sum += w[j];
      }
      for (double& v : w) v /= sum;
    }
    for (std::size_t j = 0; j < n; ++j) {
      t.index.push_back(std::clamp<std::int64_t>(idx[j], 0, in_len - 1));
      t.weight.push_back(w[j]);
    }
  }
  return t;
}

// ---- training operators (domain ai.onnx.preview.training), as ONNX's reference -------------------
// Inputs: R (learning rate), T (update count), then the tensors of n parameters in groups (X...,
// G..., then each state...); outputs the new X... then each new state...

namespace {
// The n parameter groups of a training operator with `states` state tensors per parameter.
std::size_t training_groups(const Node& n, std::size_t states) {
  const std::size_t per = 2 + states;
  if (n.in.size() < 2 + per || (n.in.size() - 2) % per != 0)
    fail(kWho, n.what, ": takes R, T and groups of ", per, " tensors, got ", n.in.size(), " inputs");
  return (n.in.size() - 2) / per;
}
}  // namespace

std::vector<Tensor> adagrad(const Node& n) {
  const std::size_t k = training_groups(n, 1);
  const double r = n.number(0), t = n.number(1);
  const double rate = r / (1 + t * n.attr.f("decay_factor"));
  std::vector<Tensor> xs, hs;
  for (std::size_t i = 0; i < k; ++i) {
    const Tensor &x = n.arg(2 + i), &g = n.arg(2 + k + i), &h = n.arg(2 + 2 * k + i);
    const Tensor gr = x * n.attr.f("norm_coefficient") + g;
    const Tensor h_new = h + gr * gr;
    xs.push_back(x - gr * rate / (sqrt(h_new) + n.attr.f("epsilon")));
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

std::vector<Tensor> adam(const Node& n) {
  const std::size_t k = training_groups(n, 2);
  const double r = n.number(0), t = n.number(1);
  const double alpha = n.attr.f("alpha"), beta = n.attr.f("beta");
  const double rate = t > 0 ? r * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t)) : r;
  std::vector<Tensor> xs, vs, hs;
  for (std::size_t i = 0; i < k; ++i) {
    const Tensor &x = n.arg(2 + i), &g = n.arg(2 + k + i), &v = n.arg(2 + 2 * k + i),
                 &h = n.arg(2 + 3 * k + i);
    const Tensor gr = x * n.attr.f("norm_coefficient") + g;
    const Tensor v_new = v * alpha + gr * (1 - alpha);
    const Tensor h_new = h * beta + gr * gr * (1 - beta);
    const Tensor x_new = x - v_new / (sqrt(h_new) + n.attr.f("epsilon")) * rate;
    xs.push_back(x_new * (1 - n.attr.f("norm_coefficient_post")));
    vs.push_back(v_new);
    hs.push_back(h_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  xs.insert(xs.end(), hs.begin(), hs.end());
  return xs;
}

std::vector<Tensor> momentum(const Node& n) {
  const std::size_t k = training_groups(n, 1);
  const double r = n.number(0), t = n.number(1);
  const double alpha = n.attr.f("alpha"), beta = t > 0 ? n.attr.f("beta") : 1.0;
  enum class M { standard, nesterov };
  const bool nesterov =
      keyword<M>(n.attr.s("mode"), {{"standard", M::standard}, {"nesterov", M::nesterov}}, n.what) == M::nesterov;
  std::vector<Tensor> xs, vs;
  for (std::size_t i = 0; i < k; ++i) {
    const Tensor &x = n.arg(2 + i), &g = n.arg(2 + k + i), &v = n.arg(2 + 2 * k + i);
    const Tensor gr = x * n.attr.f("norm_coefficient") + g;
    const Tensor v_new = v * alpha + gr * beta;
    xs.push_back(x - (nesterov ? gr + v_new * alpha : v_new) * r);
    vs.push_back(v_new);
  }
  xs.insert(xs.end(), vs.begin(), vs.end());
  return xs;
}

// ---- ai.onnx.ml --------------------------------------------------------------------------------

std::vector<Tensor> binarizer(const Node& n) {
  return {cast(greater(n.x(), scalar(n.attr.f("threshold"), n.x().dtype())), n.x().dtype())};
}
// ArrayFeatureExtractor: x[..., indices] (indices flattened; a 1-D x gives one row).
std::vector<Tensor> array_feature_extractor(const Node& n) {
  const Tensor x = n.x().rank() == 1 ? expand_dims(n.x(), 0) : n.x();
  return {gather(x, reshape(cast(n.arg(1), DType::i64), {-1}), x.rank() - 1)};
}

// ---- tensor rearrangements -----------------------------------------------------------------------

// ReverseSequence: the first sequence_lens[b] steps along time_axis reversed, per batch entry.
std::vector<Tensor> reverse_sequence(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t t_ax = norm_axis(n.attr.i("time_axis"), x.rank()),
                     b_ax = norm_axis(n.attr.i("batch_axis", 1), x.rank());
  if (x.rank() < 2 || t_ax == b_ax || (t_ax != 0 && t_ax != 1) || (b_ax != 0 && b_ax != 1))
    fail(kWho, n.what, ": time_axis and batch_axis must be 0 and 1 (either way), on rank >= 2");
  const auto lens = ints_of(n.arg(1));
  const std::int64_t steps = x.dim(t_ax);
  if (std::int64_t(lens.size()) != x.dim(b_ax))
    fail(kWho, n.what, ": sequence_lens has ", lens.size(), " values for batch ", x.dim(b_ax));
  std::vector<Tensor> rows;
  for (std::int64_t b = 0; b < x.dim(b_ax); ++b) {
    const std::int64_t len = lens[std::size_t(b)];
    if (len < 0 || len > steps) fail(kWho, n.what, ": sequence length ", len, " outside [0, ", steps, "]");
    std::vector<std::int64_t> idx(static_cast<std::size_t>(steps));
    for (std::int64_t i = 0; i < steps; ++i) idx[std::size_t(i)] = i < len ? len - 1 - i : i;
    std::vector<Slice> sl(std::size_t(x.rank()));
    sl[std::size_t(b_ax)] = Slice{b, b + 1};
    rows.push_back(gather(slice(x, sl), constant(idx, Shape{steps}), t_ax));
  }
  return {concat(rows, b_ax)};
}

// TensorScatter (opset 24): update written into past_cache along `axis` from write_indices[b]
// (0 if absent) for each batch entry b (axis 0), wrapping around in circular mode.
std::vector<Tensor> tensor_scatter(const Node& n) {
  const Tensor &cache = n.x(), &update = n.arg(1);
  const std::int64_t axis = norm_axis(n.attr.i("axis", -2), cache.rank());
  if (axis == 0 || cache.rank() != update.rank())
    fail(kWho, n.what, ": axis must not be the batch axis, and the ranks must agree");
  for (std::int64_t d = 0; d < cache.rank(); ++d)
    if (d == axis ? update.dim(d) > cache.dim(d) : update.dim(d) != cache.dim(d))
      fail(kWho, n.what, ": update ", shape_str(update.shape()), " does not fit the cache ",
           shape_str(cache.shape()), " along axis ", axis);
  enum class M { linear, circular };
  const bool circular =
      keyword<M>(n.attr.s("mode"), {{"linear", M::linear}, {"circular", M::circular}}, n.what) == M::circular;
  const std::int64_t batch = cache.dim(0), len = cache.dim(axis), upd = update.dim(axis);
  const auto write = n.has(2) ? ints_of(n.arg(2)) : std::vector<std::int64_t>(std::size_t(batch), 0);
  std::vector<Tensor> rows;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t w = write.at(std::size_t(b));
    if (!circular && (w < 0 || w + upd > len))
      fail(kWho, n.what, ": writing ", upd, " entries at ", w, " overruns the cache of ", len);
    // Position p of the result takes cache[p], or update[offset] (index len + offset in the
    // concatenation of the two along the axis).
    std::vector<std::int64_t> idx(static_cast<std::size_t>(len));
    for (std::int64_t p = 0; p < len; ++p) {
      std::int64_t off = p - w;
      if (circular) off = ((off % len) + len) % len;
      idx[std::size_t(p)] = off >= 0 && off < upd ? len + off : p;
    }
    std::vector<Slice> sl(std::size_t(cache.rank()));
    sl[0] = Slice{b, b + 1};
    rows.push_back(gather(concat({slice(cache, sl), slice(update, sl)}, axis), constant(idx, Shape{len}), axis));
  }
  return {concat(rows, 0)};
}

// AffineGrid: theta [N, 2, 3] (or [N, 3, 4]) applied to the normalised grid of size's spatial
// axes, (x, y[, z], 1) per position: [N, H, W, 2] (or [N, D, H, W, 3]).
std::vector<Tensor> affine_grid(const Node& n) {
  const Tensor& theta = n.x();
  const auto size = ints_of(n.arg(1));
  const std::size_t dims = size.size() - 2;
  if ((dims != 2 && dims != 3) || theta.rank() != 3 || theta.dim(1) != std::int64_t(dims) ||
      theta.dim(2) != std::int64_t(dims) + 1)
    fail(kWho, n.what, ": theta ", shape_str(theta.shape()), " and size of ", size.size(),
         " values do not make a 2-D or 3-D grid");
  const bool align = n.attr.i("align_corners") != 0;
  Shape spatial(size.begin() + 2, size.end());
  std::int64_t count = 1;
  for (auto d : spatial) count *= d;
  // Homogeneous coordinates [count, dims + 1]: x runs along the last axis, then y, then z.
  std::vector<double> base(static_cast<std::size_t>(count * std::int64_t(dims + 1)));
  for (std::int64_t p = 0; p < count; ++p) {
    std::int64_t rest = p;
    for (std::size_t a = dims; a-- > 0;) {  // a: spatial axis, last first
      const std::int64_t len = spatial[a], i = rest % len;
      rest /= len;
      const double v = align ? (len > 1 ? -1.0 + 2.0 * double(i) / double(len - 1) : 0.0)
                             : (2.0 * double(i) + 1.0) / double(len) - 1.0;
      base[std::size_t(p) * (dims + 1) + (dims - 1 - a)] = v;
    }
    base[std::size_t(p) * (dims + 1) + dims] = 1.0;
  }
  const Tensor grid = cast(constant(base, Shape{count, std::int64_t(dims + 1)}), theta.dtype());
  Tensor out = matmul(grid, transpose(theta, {0, 2, 1}));  // [N, count, dims]
  Shape shape{theta.dim(0)};
  shape.insert(shape.end(), spatial.begin(), spatial.end());
  shape.push_back(std::int64_t(dims));
  return {reshape(out, shape)};
}

// ---- signal processing -----------------------------------------------------------------------------

namespace {
// x along its last axis cut or zero-padded to `len`.
Tensor fit_last(const Tensor& x, std::int64_t len) {
  const std::int64_t have = x.dim(-1);
  if (have == len) return x;
  if (have > len) {
    std::vector<Slice> s(std::size_t(x.rank()));
    s.back() = Slice{0, len};
    return slice(x, s);
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> p(std::size_t(x.rank()), {0, 0});
  p.back() = {0, len - have};
  return pad(x, p);
}
// cos / sin(2 pi j k / n) as [rows, cols] f64 matrices.
std::pair<Tensor, Tensor> dft_basis(std::int64_t rows, std::int64_t cols, std::int64_t n) {
  std::vector<double> c(static_cast<std::size_t>(rows * cols)), s(c.size());
  for (std::int64_t j = 0; j < rows; ++j)
    for (std::int64_t k = 0; k < cols; ++k) {
      const double a = 2.0 * std::numbers::pi * double((j * k) % n) / double(n);
      c[std::size_t(j * cols + k)] = std::cos(a);
      s[std::size_t(j * cols + k)] = std::sin(a);
    }
  return {constant(c, Shape{rows, cols}), constant(s, Shape{rows, cols})};
}
}  // namespace

// The DFT of length n along the last axis of (re, im) (f64, im undefined for a real signal), as
// numpy's fft / ifft / irfft: [..., bins, 2], or [..., n, 1] for the one-sided inverse.
Tensor dft_last(Tensor re, Tensor im, std::int64_t n, bool inverse, bool onesided) {
  if (!inverse) {
    re = fit_last(re, n);
    if (im.defined()) im = fit_last(im, n);
    const std::int64_t bins = onesided ? n / 2 + 1 : n;
    auto [c, s] = dft_basis(n, bins, n);
    Tensor out_re = matmul(re, c), out_im = -matmul(re, s);
    if (im.defined()) {
      out_re = out_re + matmul(im, s);
      out_im = out_im + matmul(im, c);
    }
    return stack({out_re, out_im}, -1);
  }
  if (!im.defined()) im = zeros_like(re);
  if (!onesided) {
    re = fit_last(re, n);
    im = fit_last(im, n);
    auto [c, s] = dft_basis(n, n, n);
    return stack({(matmul(re, c) - matmul(im, s)) / double(n), (matmul(re, s) + matmul(im, c)) / double(n)}, -1);
  }
  // irfft: the hermitian spectrum from bins 0..n/2; the imaginary parts of bin 0 (and n/2 for
  // even n) do not count, the other bins count twice.
  const std::int64_t bins = n / 2 + 1;
  re = fit_last(re, bins);
  im = fit_last(im, bins);
  auto [c, s] = dft_basis(bins, n, n);
  std::vector<double> w(static_cast<std::size_t>(bins), 2.0);
  w[0] = 1.0;
  if (n % 2 == 0) w.back() = 1.0;
  std::vector<double> wi(w);
  wi[0] = 0.0;
  if (n % 2 == 0) wi.back() = 0.0;
  const Tensor wr = constant(w, Shape{bins}), wim = constant(wi, Shape{bins});
  return expand_dims((matmul(re * wr, c) - matmul(im * wim, s)) / double(n), -1);
}

// DFT: x [..., L, 1 or 2] (real or complex) along `axis` (an input from opset 20, else an
// attribute), dft_length points.
std::vector<Tensor> dft(const Node& n) {
  const Tensor& x = n.x();
  const std::int64_t r = x.rank();
  if (r < 2 || (x.dim(-1) != 1 && x.dim(-1) != 2))
    fail(kWho, n.what, ": the input must end in an axis of 1 (real) or 2 (complex), got ",
         shape_str(x.shape()));
  std::int64_t axis = n.opset >= 20 ? (n.has(2) ? std::int64_t(n.number(2)) : -2) : n.attr.i("axis", 1);
  axis = norm_axis(axis, r);
  if (axis < 0 || axis >= r - 1) fail(kWho, n.what, ": axis ", axis, " is not a signal axis");
  const bool inverse = n.attr.i("inverse") != 0, onesided = n.attr.i("onesided") != 0;
  if (onesided && x.dim(-1) == 2 && !inverse)
    fail(kWho, n.what, ": onesided needs a real input");
  std::vector<std::int64_t> perm;
  for (std::int64_t d = 0; d < r - 1; ++d)
    if (d != axis) perm.push_back(d);
  perm.push_back(axis);
  perm.push_back(r - 1);
  const Tensor moved = cast(transpose(x, perm), DType::f64);  // [..., L, c]
  std::vector<Slice> sl(static_cast<std::size_t>(r));
  sl.back() = Slice{0, 1};
  const Tensor re = squeeze(slice(moved, sl), {r - 1});
  Tensor im;
  if (x.dim(-1) == 2) {
    sl.back() = Slice{1, 2};
    im = squeeze(slice(moved, sl), {r - 1});
  }
  const std::int64_t len = x.dim(axis);
  const std::int64_t points = n.has(1) ? std::int64_t(n.number(1)) : inverse && onesided ? 2 * (len - 1) : len;
  if (points <= 0) fail(kWho, n.what, ": dft_length must be positive, got ", points);
  Tensor y = dft_last(re, im, points, inverse, onesided);  // [..., K, c']
  std::vector<std::int64_t> back(static_cast<std::size_t>(r));
  for (std::size_t i = 0; i < perm.size(); ++i) back[std::size_t(perm[i])] = std::int64_t(i);
  return {cast(transpose(y, back), x.dtype())};
}

// The complex inverse (inverse=1, onesided=0) is computed (dft_last) but refused: its results
// differ from ONNX's test data by the f32 rounding noise of numpy's complex64 ifft (2e-7 where
// the exact value is 0), beyond the node tests' absolute tolerance of 1e-7.
void check_dft(const LoadCheck& c) {
  if (c.attr.i("inverse") && !c.attr.i("onesided"))
    fail(kWho, c.what, ": the inverse DFT of a complex signal (inverse=1, onesided=0) is not "
         "supported (onesided inverse, the irfft, is)");
}

// STFT: frames of frame_length every frame_step along signal [batch, length, 1 or 2], each
// times the window, transformed: [batch, frames, bins, 2].
std::vector<Tensor> stft(const Node& n) {
  const Tensor& x = n.x();
  if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2))
    fail(kWho, n.what, ": the signal must be [batch, length, 1 or 2], got ", shape_str(x.shape()));
  const std::int64_t step = std::int64_t(n.number(1));
  const std::int64_t frame = n.has(3) ? std::int64_t(n.number(3)) : n.has(2) ? n.arg(2).dim(0) : x.dim(1);
  if (step <= 0 || frame <= 0 || frame > x.dim(1))
    fail(kWho, n.what, ": frame_step ", step, " and frame_length ", frame, " do not fit length ", x.dim(1));
  const bool onesided = n.attr.i("onesided") != 0;
  if (onesided && x.dim(2) == 2) fail(kWho, n.what, ": onesided needs a real signal");
  const std::int64_t frames = 1 + (x.dim(1) - frame) / step;
  // Frame f, position j reads signal position f * step + j: one gather.
  std::vector<std::int64_t> idx(static_cast<std::size_t>(frames * frame));
  for (std::int64_t f = 0; f < frames; ++f)
    for (std::int64_t j = 0; j < frame; ++j) idx[std::size_t(f * frame + j)] = f * step + j;
  Tensor fr = cast(gather(x, constant(idx, Shape{frames, frame}), 1), DType::f64);  // [B, F, frame, c]
  if (n.has(2)) {
    const Tensor& w = n.arg(2);
    if (w.rank() != 1 || w.dim(0) != frame)
      fail(kWho, n.what, ": the window has shape ", shape_str(w.shape()), ", expected [", frame, "]");
    fr = fr * reshape(cast(w, DType::f64), {1, 1, frame, 1});
  }
  std::vector<Slice> sl(4);
  sl[3] = Slice{0, 1};
  const Tensor re = squeeze(slice(fr, sl), {3});
  Tensor im;
  if (x.dim(2) == 2) {
    sl[3] = Slice{1, 2};
    im = squeeze(slice(fr, sl), {3});
  }
  return {cast(dft_last(re, im, frame, false, onesided), x.dtype())};
}

// ---- pooling in any rank -----------------------------------------------------------------------------

// MaxPool / AveragePool / LpPool over N-D windows, with dilations, any dtype (max) and MaxPool's
// Indices, as ONNX's reference: the output size from the padding (ceil_mode: the last window
// starts inside the input or its begin padding, the extra padding split as the reference
// splits it); every window tap gathered (one gather per spatial axis), then reduced. Taps in
// the padding are left out of max and of average without count_include_pad; the extra ceil
// padding counts in no average.
std::vector<Tensor> pool_nd(const Node& n, PoolKind kind) {
  const Tensor& x = n.x();
  const std::int64_t dims = x.rank() - 2;
  if (dims < 1) fail(kWho, n.what, ": the input must be [N, C, spatial...], got ", shape_str(x.shape()));
  const auto ks = n.attr.ints("kernel_shape");
  if (std::int64_t(ks.size()) != dims)
    fail(kWho, n.what, ": kernel_shape has ", ks.size(), " values for ", dims, " spatial axes");
  auto per_axis = [&](std::string_view name, std::int64_t def, std::size_t count) {
    auto v = n.attr.ints(name);
    if (v.empty()) v.assign(count, def);
    if (v.size() != count)
      fail(kWho, n.what, ": ", std::string(name), " has ", v.size(), " values, expected ", count);
    return v;
  };
  const auto st = per_axis("strides", 1, std::size_t(dims)), dil = per_axis("dilations", 1, std::size_t(dims));
  auto pads = per_axis("pads", 0, std::size_t(2 * dims));
  enum class Auto { notset, valid, same_upper, same_lower };
  const Auto auto_pad = keyword<Auto>(n.attr.s("auto_pad"),
                                      {{"NOTSET", Auto::notset}, {"", Auto::notset}, {"VALID", Auto::valid},
                                       {"SAME_UPPER", Auto::same_upper}, {"SAME_LOWER", Auto::same_lower}},
                                      n.what);
  const bool ceil_mode = n.attr.i("ceil_mode") != 0;
  const bool include_pad = kind == PoolKind::lp || (kind == PoolKind::avg && n.attr.i("count_include_pad"));
  std::vector<std::int64_t> out(static_cast<std::size_t>(dims)), begin(out.size());
  for (std::size_t a = 0; a < out.size(); ++a) {
    const std::int64_t in = x.dim(std::int64_t(a) + 2), keff = (ks[a] - 1) * dil[a] + 1;
    if (auto_pad == Auto::same_upper || auto_pad == Auto::same_lower) {
      out[a] = (in - 1) / st[a] + 1;
      const std::int64_t total = std::max<std::int64_t>((out[a] - 1) * st[a] + ks[a] - in, 0);
      pads[a] = auto_pad == Auto::same_upper ? total / 2 : total - total / 2;
      pads[a + std::size_t(dims)] = total - pads[a];
    } else if (auto_pad == Auto::valid) {
      out[a] = (in - ks[a]) / st[a] + 1;
      pads[a] = pads[a + std::size_t(dims)] = 0;
    } else {
      const std::int64_t span = in + pads[a] + pads[a + std::size_t(dims)] - keff;
      out[a] = ceil_mode ? (span + st[a] - 1) / st[a] + 1 : span / st[a] + 1;
      if (ceil_mode && (out[a] - 1) * st[a] >= in + pads[a]) --out[a];
    }
    if (out[a] <= 0) fail(kWho, n.what, ": the window does not fit the input (axis ", a + 2, ")");
    begin[a] = pads[a];
    const std::int64_t extra = (out[a] - 1) * st[a] + keff - in - pads[a] - pads[a + std::size_t(dims)];
    if (extra > 0) begin[a] += extra / 2;
  }
  // Gather the taps: [N, C, o1, k1, o2, k2, ...]; per axis, which taps are input elements
  // (valid) and which count in an average.
  Tensor g = x;
  std::vector<Tensor> valid_masks, counts;
  std::vector<std::vector<std::int64_t>> tap_pos;  // per axis [o * k + j]: the input index, or -1
  for (std::size_t a = 0; a < out.size(); ++a) {
    const std::int64_t in = x.dim(std::int64_t(a) + 2), o_n = out[a], k_n = ks[a];
    const std::int64_t limit = in + pads[a] + pads[a + std::size_t(dims)];  // the padded extent
    std::vector<std::int64_t> idx(static_cast<std::size_t>(o_n * k_n)), pos(idx.size());
    std::vector<double> valid(idx.size()), count(static_cast<std::size_t>(o_n), 0.0);
    for (std::int64_t o = 0; o < o_n; ++o)
      for (std::int64_t j = 0; j < k_n; ++j) {
        const std::int64_t q = o * st[a] + j * dil[a], p = q - begin[a];
        const bool included = q < limit, ok = included && p >= 0 && p < in;
        const std::size_t t = std::size_t(o * k_n + j);
        idx[t] = std::clamp<std::int64_t>(p, 0, in - 1);
        pos[t] = ok ? p : -1;
        valid[t] = ok ? 1.0 : 0.0;
        count[std::size_t(o)] += (include_pad ? included : ok) ? 1.0 : 0.0;
      }
    const std::int64_t axis = 2 + 2 * std::int64_t(a);  // where this axis sits in g
    g = gather(g, constant(idx, Shape{o_n, k_n}), axis);
    Shape vs(std::size_t(2 + 2 * dims), 1);
    vs[std::size_t(axis)] = o_n;
    vs[std::size_t(axis) + 1] = k_n;
    valid_masks.push_back(constant(valid, vs));
    Shape cs(std::size_t(2 + 2 * dims), 1);
    cs[std::size_t(axis)] = o_n;
    counts.push_back(constant(count, cs));
    tap_pos.push_back(pos);
  }
  Tensor valid = valid_masks[0];
  for (std::size_t a = 1; a < valid_masks.size(); ++a) valid = valid * valid_masks[a];
  Axes taps;
  for (std::int64_t a = 0; a < dims; ++a) taps.push_back(3 + 2 * a);
  const Tensor ok = cast(valid, DType::boolean);
  if (kind == PoolKind::avg || kind == PoolKind::lp) {
    if (!is_floating(x.dtype())) fail(kWho, n.what, ": average and Lp pooling need a floating input");
    if (kind == PoolKind::lp) {
      const double p = double(n.attr.i("p"));
      Tensor v = where(ok, pow(abs(g), scalar(p, x.dtype())), zeros({}, x.dtype()));
      return {pow(sum(v, taps), scalar(1.0 / p, x.dtype()))};
    }
    Tensor cnt = counts[0];
    for (std::size_t a = 1; a < counts.size(); ++a) cnt = cnt * counts[a];
    return {sum(where(ok, g, zeros({}, x.dtype())), taps) / cast(squeeze(cnt, taps), x.dtype())};
  }
  // max: padding taps can never win
  const double lowest = is_floating(x.dtype()) ? -std::numeric_limits<double>::infinity()
                        : x.dtype() == DType::u8 || x.dtype() == DType::boolean ? 0.0
                        : x.dtype() == DType::i32 ? double(std::numeric_limits<std::int32_t>::min())
                                                  : double(std::numeric_limits<std::int64_t>::min());
  const Tensor masked = where(ok, g, full_like(g, lowest));
  Tensor y = max(masked, taps);
  if (!(n.proto.output_size() > 1 && !n.proto.output(1).empty())) return {y};
  // Indices: the flat index (row-major, or column-major for storage_order 1) of each window's
  // first maximum, counted over the whole input.
  std::vector<std::int64_t> perm{0, 1}, outs_shape{x.dim(0), x.dim(1)};
  std::int64_t o_total = 1, k_total = 1;
  for (std::int64_t a = 0; a < dims; ++a) {
    perm.push_back(2 + 2 * a);
    outs_shape.push_back(out[std::size_t(a)]);
    o_total *= out[std::size_t(a)];
    k_total *= ks[std::size_t(a)];
  }
  for (std::int64_t a = 0; a < dims; ++a) perm.push_back(3 + 2 * a);
  Tensor flat = reshape(transpose(masked, perm), {x.dim(0), x.dim(1), o_total, k_total});
  Tensor arg = argmax(flat, 3);  // [N, C, O]
  const bool col_major = n.attr.i("storage_order") != 0;
  std::vector<std::int64_t> stride(static_cast<std::size_t>(dims));
  std::int64_t spatial = 1;
  for (std::int64_t a = 0; a < dims; ++a) {
    const std::int64_t d = col_major ? a : dims - 1 - a;
    stride[std::size_t(d)] = spatial;
    spatial *= x.dim(d + 2);
  }
  // table[o * K + t]: the spatial flat index of tap t of window o
  std::vector<std::int64_t> table(static_cast<std::size_t>(o_total * k_total), 0);
  for (std::int64_t o = 0; o < o_total; ++o)
    for (std::int64_t t = 0; t < k_total; ++t) {
      std::int64_t orest = o, trest = t, flat_idx = 0;
      for (std::int64_t a = dims - 1; a >= 0; --a) {
        const std::int64_t oa = orest % out[std::size_t(a)], ta = trest % ks[std::size_t(a)];
        orest /= out[std::size_t(a)];
        trest /= ks[std::size_t(a)];
        const std::int64_t p = tap_pos[std::size_t(a)][std::size_t(oa * ks[std::size_t(a)] + ta)];
        flat_idx += std::max<std::int64_t>(p, 0) * stride[std::size_t(a)];
      }
      table[std::size_t(o * k_total + t)] = flat_idx;
    }
  const Tensor base = reshape(arange(0, double(o_total), 1, DType::i64), {1, 1, o_total}) *
                      scalar(double(k_total), DType::i64);
  Tensor where_in = gather(constant(table, Shape{o_total * k_total}), arg + base, 0);
  const Tensor nc = reshape(arange(0, double(x.dim(0) * x.dim(1)), 1, DType::i64), {x.dim(0), x.dim(1), 1}) *
                    scalar(double(spatial), DType::i64);
  return {y, reshape(where_in + nc, Shape(outs_shape.begin(), outs_shape.end()))};
}

// ---- data-dependent shapes, computed from the values (import only: a soma op's shape rule sees
// shapes, not values) ---------------------------------------------------------------------------------

// NonZero: the coordinates of the non-zero elements, [rank, count], in row-major order.
std::vector<Tensor> non_zero(const Node& n) {
  const Tensor& x = n.x();
  const auto v = cast(x, DType::f64).to_vector<double>();
  const std::int64_t r = std::max<std::int64_t>(x.rank(), 1);
  std::vector<std::int64_t> hits;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0.0) hits.push_back(std::int64_t(i));
  const std::int64_t count = std::int64_t(hits.size());
  std::vector<std::int64_t> out(static_cast<std::size_t>(r * count));
  for (std::int64_t h = 0; h < count; ++h) {
    std::int64_t rest = hits[std::size_t(h)];
    for (std::int64_t d = x.rank() - 1; d >= 0; --d) {
      out[std::size_t(d * count + h)] = rest % x.dim(d);
      rest /= x.dim(d);
    }
  }
  return {constant(out, Shape{x.rank(), count})};
}

// Compress: the slices along `axis` (or elements of the flattened input) where condition is true.
std::vector<Tensor> compress(const Node& n) {
  const Tensor& x = n.x();
  const auto cond = cast(n.arg(1), DType::f64).to_vector<double>();
  const bool flat = !n.attr.has("axis");
  const Tensor src = flat ? reshape(x, {-1}) : x;
  const std::int64_t axis = flat ? 0 : norm_axis(n.attr.i("axis"), x.rank());
  if (axis < 0 || axis >= src.rank()) fail(kWho, n.what, ": axis ", n.attr.i("axis"), " is out of range");
  if (std::int64_t(cond.size()) > src.dim(axis))
    fail(kWho, n.what, ": condition has ", cond.size(), " values for an axis of ", src.dim(axis));
  std::vector<std::int64_t> keep;
  for (std::size_t i = 0; i < cond.size(); ++i)
    if (cond[i] != 0.0) keep.push_back(std::int64_t(i));
  return {gather(src, constant(keep, Shape{std::int64_t(keep.size())}), axis)};
}

// Unique: the distinct elements (or slices along `axis`), sorted or in order of first
// appearance; the index of each one's first appearance, each input's index into the result,
// and the counts.
std::vector<Tensor> unique(const Node& n) {
  const Tensor& x = n.x();
  const bool has_axis = n.attr.has("axis");
  const std::int64_t axis = has_axis ? norm_axis(n.attr.i("axis"), x.rank()) : 0;
  if (has_axis && (axis < 0 || axis >= x.rank()))
    fail(kWho, n.what, ": axis ", n.attr.i("axis"), " is out of range");
  // Rows to compare: the flattened elements, or the slices along axis moved to the front.
  Tensor moved = reshape(x, {-1, 1});
  if (has_axis) {
    std::vector<std::int64_t> perm{axis};
    for (std::int64_t d = 0; d < x.rank(); ++d)
      if (d != axis) perm.push_back(d);
    moved = reshape(transpose(x, perm), {x.dim(axis), -1});
  }
  const std::int64_t rows = moved.dim(0), width = moved.dim(1);
  // Exact keys: integers as i64, floating values as f64.
  const bool integral = !is_floating(x.dtype());
  const auto vi = integral ? cast(moved, DType::i64).to_vector<std::int64_t>() : std::vector<std::int64_t>{};
  const auto vf = integral ? std::vector<double>{} : cast(moved, DType::f64).to_vector<double>();
  auto less_row = [&](std::int64_t a, std::int64_t b) {
    for (std::int64_t k = 0; k < width; ++k) {
      const std::size_t ia = std::size_t(a * width + k), ib = std::size_t(b * width + k);
      if (integral ? vi[ia] != vi[ib] : vf[ia] != vf[ib]) return integral ? vi[ia] < vi[ib] : vf[ia] < vf[ib];
    }
    return false;
  };
  auto same_row = [&](std::int64_t a, std::int64_t b) { return !less_row(a, b) && !less_row(b, a); };
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) order[std::size_t(i)] = i;
  std::stable_sort(order.begin(), order.end(), less_row);
  // Groups of equal rows in sorted order; each group's first appearance is its smallest index.
  std::vector<std::int64_t> first, count, group_of(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || !same_row(order[i - 1], order[i])) {
      first.push_back(order[i]);
      count.push_back(0);
    }
    group_of[std::size_t(order[i])] = std::int64_t(first.size()) - 1;
    ++count.back();
  }
  // Output order: sorted (the groups as they are) or by first appearance.
  std::vector<std::int64_t> rank(first.size());
  for (std::size_t g = 0; g < rank.size(); ++g) rank[g] = std::int64_t(g);
  if (!n.attr.i("sorted")) {
    std::vector<std::int64_t> by_first(first.size());
    for (std::size_t g = 0; g < by_first.size(); ++g) by_first[g] = std::int64_t(g);
    std::sort(by_first.begin(), by_first.end(), [&](std::int64_t a, std::int64_t b) {
      return first[std::size_t(a)] < first[std::size_t(b)];
    });
    for (std::size_t r = 0; r < by_first.size(); ++r) rank[std::size_t(by_first[r])] = std::int64_t(r);
  }
  const std::int64_t groups = std::int64_t(first.size());
  std::vector<std::int64_t> idx(first.size()), cnt(first.size()), inverse(static_cast<std::size_t>(rows));
  for (std::size_t g = 0; g < first.size(); ++g) {
    idx[std::size_t(rank[g])] = first[g];
    cnt[std::size_t(rank[g])] = count[g];
  }
  for (std::int64_t i = 0; i < rows; ++i) inverse[std::size_t(i)] = rank[std::size_t(group_of[std::size_t(i)])];
  const Tensor picks = constant(idx, Shape{groups});
  const Tensor y = has_axis ? gather(x, picks, axis) : gather(reshape(x, {-1}), picks, 0);
  return {y, picks, constant(inverse, Shape{rows}), constant(cnt, Shape{groups})};
}

// NonMaxSuppression, as ONNX's reference: per batch and class, boxes by descending score (ties:
// the lower index first) above score_threshold, each kept unless its IoU with a kept one exceeds
// iou_threshold, at most max_output_boxes_per_class; [selected, 3] (batch, class, box).
std::vector<Tensor> non_max_suppression(const Node& n) {
  const Tensor &boxes_t = n.x(), &scores_t = n.arg(1);
  if (boxes_t.rank() != 3 || boxes_t.dim(2) != 4 || scores_t.rank() != 3 ||
      scores_t.dim(0) != boxes_t.dim(0) || scores_t.dim(2) != boxes_t.dim(1))
    fail(kWho, n.what, ": boxes must be [B, N, 4] and scores [B, C, N], got ",
         shape_str(boxes_t.shape()), " and ", shape_str(scores_t.shape()));
  const std::int64_t max_out = n.has(2) && n.in[2].numel() ? std::max<std::int64_t>(std::int64_t(n.number(2)), 0) : 0;
  const double iou_max = n.has(3) && n.in[3].numel() ? n.number(3) : 0.0;
  const bool by_score = n.has(4) && n.in[4].numel();
  const double score_min = by_score ? n.number(4) : 0.0;
  const bool center = n.attr.i("center_point_box") != 0;
  const auto boxes = cast(boxes_t, DType::f64).to_vector<double>();
  const auto scores = cast(scores_t, DType::f64).to_vector<double>();
  const std::int64_t batches = boxes_t.dim(0), classes = scores_t.dim(1), count = boxes_t.dim(1);
  // A box as (x_min, x_max, y_min, y_max).
  auto extent = [&](std::int64_t b, std::int64_t i) {
    const double* p = &boxes[std::size_t((b * count + i) * 4)];
    if (center) return std::array<double, 4>{p[0] - p[2] / 2, p[0] + p[2] / 2, p[1] - p[3] / 2, p[1] + p[3] / 2};
    return std::array<double, 4>{std::min(p[1], p[3]), std::max(p[1], p[3]), std::min(p[0], p[2]), std::max(p[0], p[2])};
  };
  auto suppresses = [&](std::int64_t b, std::int64_t i, std::int64_t j) {
    const auto a = extent(b, i), c = extent(b, j);
    const double ix0 = std::max(a[0], c[0]), ix1 = std::min(a[1], c[1]);
    if (ix1 <= ix0) return false;
    const double iy0 = std::max(a[2], c[2]), iy1 = std::min(a[3], c[3]);
    if (iy1 <= iy0) return false;
    const double inter = (ix1 - ix0) * (iy1 - iy0);
    const double area_a = (a[1] - a[0]) * (a[3] - a[2]), area_c = (c[1] - c[0]) * (c[3] - c[2]);
    const double uni = area_a + area_c - inter;
    if (inter <= 0 || area_a <= 0 || area_c <= 0 || uni <= 0) return false;
    return inter / uni > iou_max;
  };
  std::vector<std::int64_t> out;
  for (std::int64_t b = 0; b < batches; ++b)
    for (std::int64_t c = 0; c < classes; ++c) {
      const double* sc = &scores[std::size_t((b * classes + c) * count)];
      std::vector<std::int64_t> cand;
      for (std::int64_t i = 0; i < count; ++i)
        if (!by_score || sc[i] > score_min) cand.push_back(i);
      std::stable_sort(cand.begin(), cand.end(), [&](std::int64_t i, std::int64_t j) { return sc[i] > sc[j]; });
      std::vector<std::int64_t> kept;
      for (std::int64_t i : cand) {
        if (std::int64_t(kept.size()) >= max_out) break;
        bool keep = true;
        for (std::int64_t k : kept)
          if (suppresses(b, i, k)) {
            keep = false;
            break;
          }
        if (!keep) continue;
        kept.push_back(i);
        out.insert(out.end(), {b, c, i});
      }
    }
  return {constant(out, Shape{std::int64_t(out.size() / 3), 3})};
}

// ---- scatter-adds ----------------------------------------------------------------------------------

namespace {
// rows [k] of updates [k, w] added into a [rows_out, w] zero tensor (soma's gather gradient); rows
// equal to rows_out are dropped.
Tensor scatter_add_rows(const Tensor& updates, const std::vector<std::int64_t>& rows, std::int64_t rows_out) {
  static const OpDef& scatter_add = get_op("gather_grad");
  Attrs a;
  a.set("axis", std::int64_t(0));
  a.set("input_shape", Shape{rows_out + 1, updates.dim(1)});
  Tensor y = call_op1(scatter_add, {updates, constant(rows, Shape{std::int64_t(rows.size())})}, a);
  return slice(y, {Slice{0, rows_out}, Slice{}});
}
}  // namespace

// Col2Im: the columns [N, C * prod(block), L] of an im2col added back into [N, C, image...].
std::vector<Tensor> col2im(const Node& n) {
  const Tensor& x = n.x();
  const auto image = ints_of(n.arg(1)), block = ints_of(n.arg(2));
  const std::size_t dims = image.size();
  if (block.size() != dims || x.rank() != 3)
    fail(kWho, n.what, ": image_shape and block_shape must have one size per spatial axis, the input rank 3");
  auto per = [&](std::string_view name, std::int64_t def, std::size_t cnt) {
    auto v = n.attr.ints(name);
    if (v.empty()) v.assign(cnt, def);
    if (v.size() != cnt) fail(kWho, n.what, ": ", std::string(name), " has ", v.size(), " values, expected ", cnt);
    return v;
  };
  const auto dil = per("dilations", 1, dims), st = per("strides", 1, dims), pads = per("pads", 0, 2 * dims);
  std::int64_t kprod = 1, pixels = 1, cols = 1;
  std::vector<std::int64_t> outs(dims);
  for (std::size_t a = 0; a < dims; ++a) {
    kprod *= block[a];
    pixels *= image[a];
    outs[a] = (image[a] + pads[a] + pads[a + dims] - (dil[a] * (block[a] - 1) + 1)) / st[a] + 1;
    cols *= outs[a];
  }
  if (x.dim(1) % kprod != 0 || x.dim(2) != cols)
    fail(kWho, n.what, ": input ", shape_str(x.shape()), " does not fit blocks of ", kprod, " and ", cols, " positions");
  const std::int64_t batch = x.dim(0), ch = x.dim(1) / kprod;
  // Target pixel of block offset k at column l (pixels: outside the image).
  std::vector<std::int64_t> rows(static_cast<std::size_t>(kprod * cols));
  for (std::int64_t k = 0; k < kprod; ++k)
    for (std::int64_t l = 0; l < cols; ++l) {
      std::int64_t kr = k, lr = l, target = 0;
      bool inside = true;
      for (std::size_t a = dims; a-- > 0;) {
        const std::int64_t ka = kr % block[a], la = lr % outs[a];
        kr /= block[a];
        lr /= outs[a];
        const std::int64_t p = la * st[a] - pads[a] + ka * dil[a];
        inside = inside && p >= 0 && p < image[a];
        std::int64_t stride = 1;
        for (std::size_t b = a + 1; b < dims; ++b) stride *= image[b];
        target += p * stride;
      }
      rows[std::size_t(k * cols + l)] = inside ? target : pixels;
    }
  // [N, C, K, L] -> [K * L, N * C]
  Tensor u = reshape(transpose(reshape(x, {batch, ch, kprod, cols}), {2, 3, 0, 1}), {kprod * cols, batch * ch});
  Tensor y = transpose(scatter_add_rows(u, rows, pixels), {1, 0});
  Shape shape{batch, ch};
  shape.insert(shape.end(), image.begin(), image.end());
  return {reshape(y, shape)};
}

// MaxUnpool of other ranks than 2-D (import.cpp's max_unpool takes 2-D through max_unpool2d), as
// ONNX's reference: the values X written at their flat Indices into zeros of the unpooled shape
// ((in - 1) * stride - pads + kernel per spatial axis), then zero-padded at the end to
// output_shape when one is given.
std::vector<Tensor> max_unpool_nd(const Node& n) {
  const Tensor &x = n.x(), &idx = n.arg(1);
  const auto ks = n.attr.ints("kernel_shape");
  const std::size_t dims = std::size_t(x.rank() - 2);
  if (ks.size() != dims || idx.shape() != x.shape())
    fail(kWho, n.what, ": kernel_shape must have one size per spatial axis, and I the shape of X");
  auto st = n.attr.ints("strides"), pads = n.attr.ints("pads");
  if (st.empty()) st.assign(dims, 1);
  if (pads.empty()) pads.assign(2 * dims, 0);
  if (st.size() != dims || pads.size() != 2 * dims)
    fail(kWho, n.what, ": strides and pads must have ", dims, " and ", 2 * dims, " values");
  Shape inferred{x.dim(0), x.dim(1)};
  for (std::size_t a = 0; a < dims; ++a)
    inferred.push_back((x.dim(std::int64_t(a) + 2) - 1) * st[a] - pads[a] - pads[a + dims] + ks[a]);
  std::int64_t total = 1;
  for (auto d : inferred) total *= d;
  const auto rows = ints_of(idx);
  for (auto r : rows)
    if (r < 0 || r >= total) fail(kWho, n.what, ": index ", r, " is outside the output of ", total, " elements");
  Tensor y = reshape(scatter_add_rows(reshape(x, {-1, 1}), rows, total), inferred);
  if (!n.has(2)) return {y};
  const auto os = ints_of(n.arg(2));
  if (os.size() != inferred.size())
    fail(kWho, n.what, ": output_shape has ", os.size(), " values for rank ", inferred.size());
  std::vector<std::pair<std::int64_t, std::int64_t>> grow;
  for (std::size_t d = 0; d < os.size(); ++d) {
    if (os[d] < inferred[d])
      fail(kWho, n.what, ": output_shape ", shape_str(Shape(os.begin(), os.end())), " is smaller than ",
           shape_str(inferred));
    grow.push_back({0, os[d] - inferred[d]});
  }
  return {pad(y, grow)};
}

// BatchNormalization with training_mode = 1 (opset 14 on), as ONNX's reference: normalised with
// the batch's mean and (population) variance over every axis but 1, and the running statistics
// moved toward them by momentum as two more outputs.
std::vector<Tensor> batch_norm_training(const Node& n) {
  const Tensor& x = n.x();
  Axes axes;
  for (std::int64_t d = 0; d < x.rank(); ++d)
    if (d != 1) axes.push_back(d);
  Shape b(std::size_t(x.rank()), 1);
  b[1] = x.dim(1);
  const Tensor m = mean(x, axes), v = mean(square(x - reshape(m, b)), axes);
  const double momentum = n.attr.f("momentum"), eps = n.attr.f("epsilon");
  Tensor y = (x - reshape(m, b)) * rsqrt(reshape(v, b) + eps) * reshape(n.arg(1), b) + reshape(n.arg(2), b);
  return {y, n.arg(3) * momentum + m * (1 - momentum), n.arg(4) * momentum + v * (1 - momentum)};
}

// BitCast (opset 26): the bits of each element read as another type of the same width.
std::vector<Tensor> bit_cast(const Node& n) {
  const Tensor& x = n.x();
  const DType to = soma_dtype(int(n.attr.i("to")), n.what + " attribute 'to'");
  if (dtype_size(to) != dtype_size(x.dtype()))
    fail(kWho, n.what, ": BitCast from ", x.dtype(), " to ", to, " changes the element width");
  if (to == x.dtype()) return {x};
  const Tensor c = contiguous(x.device() == Device::cpu() ? x : x.to(Device::cpu()));
  Tensor y = Tensor::empty(x.shape(), to);
  std::memcpy(y.raw_data(), c.raw_data(), std::size_t(x.numel()) * dtype_size(to));
  if (to == DType::boolean) y = not_equal(cast(y, DType::u8), zeros({}, DType::u8));  // 0 / 1 only
  return {x.device() == Device::cpu() ? y : y.to(x.device())};
}
void check_bit_cast(const LoadCheck& c) {
  const DType to = soma_dtype(int(c.attr.i("to")), c.what + " attribute 'to'");
  const Declared x = c.input(0);
  if (x.elem) {
    const DType from = soma_dtype(x.elem, c.what + " input 0");
    if (dtype_size(from) != dtype_size(to))
      fail(kWho, c.what, ": BitCast from ", from, " to ", to, " changes the element width");
  }
}

// GridSample in any rank and with cubic interpolation, as ONNX's reference: grid [N, O..., k]
// holds normalised coordinates, the last spatial axis first; each is denormalised, rounded half
// to even (nearest), moved inside by the padding mode (border: clamped; reflection: reflected),
// and read through 1 (nearest), 2 (linear) or 4 (cubic, a = -0.75) taps per axis, each tap
// padded again (zeros: 0 outside). One gather of rows of x as [N * prod(D), C] per tap combination.
std::vector<Tensor> grid_sample_nd(const Node& n) {
  const Tensor &x = n.x(), &grid = n.arg(1);
  const std::int64_t k = x.rank() - 2;
  if (k < 1 || grid.rank() != k + 2 || grid.dim(0) != x.dim(0) || grid.dim(-1) != k)
    fail(kWho, n.what, ": X ", shape_str(x.shape()), " and grid ", shape_str(grid.shape()),
         " do not make a ", k, "-D sampling");
  enum class Mode { nearest, linear, cubic };
  enum class Pad { zeros, border, reflection };
  const Mode mode = keyword<Mode>(n.attr.s("mode"), {{"nearest", Mode::nearest}, {"linear", Mode::linear},
                                                     {"bilinear", Mode::linear}, {"cubic", Mode::cubic},
                                                     {"bicubic", Mode::cubic}}, n.what);
  const Pad padding = keyword<Pad>(n.attr.s("padding_mode"), {{"zeros", Pad::zeros}, {"border", Pad::border},
                                                              {"reflection", Pad::reflection}}, n.what);
  const bool nearest = mode == Mode::nearest, cubic = mode == Mode::cubic;
  const bool align = n.attr.i("align_corners") != 0;
  const std::int64_t batch = x.dim(0), ch = x.dim(1);
  Shape out_sp(grid.shape().begin() + 1, grid.shape().end() - 1);
  std::vector<std::int64_t> len(static_cast<std::size_t>(k)), stride(len.size());
  std::int64_t pixels = 1;
  for (std::int64_t a = k - 1; a >= 0; --a) {
    len[std::size_t(a)] = x.dim(a + 2);
    stride[std::size_t(a)] = pixels;
    pixels *= len[std::size_t(a)];
  }
  const Tensor g = cast(grid, DType::f64);
  auto reflect = [](const Tensor& v, double lo, double hi) {
    const double rng = hi - lo;
    if (rng <= 0) return full_like(v, lo);
    Tensor t = mod(v - lo, full_like(v, 2 * rng));
    return where(less_equal(t, full_like(t, rng)), t, 2 * rng - t) + lo;
  };
  // Per axis: the tap indices (inside [0, len)), whether each is inside (zeros padding) and
  // its weight, each [N, O...].
  struct Tap {
    Tensor index, valid, weight;
  };
  std::vector<std::vector<Tap>> taps(static_cast<std::size_t>(k));
  for (std::int64_t a = 0; a < k; ++a) {
    const double l = double(len[std::size_t(a)]);
    const double lo = align ? 0.0 : -0.5, hi = align ? l - 1 : l - 0.5;
    std::vector<Slice> sl(std::size_t(g.rank()));
    sl.back() = Slice{k - 1 - a, k - a};
    Tensor v = squeeze(slice(g, sl), {g.rank() - 1});
    v = align ? (v + 1.0) / 2.0 * (l - 1) : ((v + 1.0) * l - 1.0) / 2.0;
    if (nearest) v = round(v);
    const Tensor outside = logical_or(less(v, full_like(v, lo)), greater(v, full_like(v, hi)));
    if (padding == Pad::border) v = where(outside, clip(v, 0.0, l - 1), v);
    if (padding == Pad::reflection) v = where(outside, reflect(v, lo, hi), v);
    auto fetch = [&](Tensor i, Tensor w) {  // i: integral values (f64)
      Tensor valid = logical_and(greater_equal(i, zeros({}, DType::f64)), less(i, full_like(i, l)));
      if (padding == Pad::reflection) i = where(valid, i, reflect(i, lo, hi));
      if (padding != Pad::zeros) valid = not_equal(i, full_like(i, std::nan("")));  // all true
      // int(): toward zero, then inside the axis
      Tensor j = cast(clip(where(less(i, zeros({}, DType::f64)), ceil(i), floor(i)), 0.0, l - 1), DType::i64);
      return Tap{j, valid, w};
    };
    auto& t = taps[std::size_t(a)];
    if (nearest) {
      t.push_back(fetch(v, ones_like(v)));
      continue;
    }
    const Tensor x0 = floor(v), f = v - x0;
    if (!cubic) {
      t.push_back(fetch(x0, 1.0 - f));
      t.push_back(fetch(x0 + 1.0, f));
      continue;
    }
    const double A = -0.75;
    auto near_w = [A](const Tensor& d) { return ((d * (A + 2) - (A + 3)) * d * d) + 1.0; };   // |d| <= 1
    auto far_w = [A](const Tensor& d) { return ((d * A - 5 * A) * d + 8 * A) * d - 4 * A; };  // 1 < |d| < 2
    t.push_back(fetch(x0 - 1.0, far_w(f + 1.0)));
    t.push_back(fetch(x0, near_w(f)));
    t.push_back(fetch(x0 + 1.0, near_w(1.0 - f)));
    t.push_back(fetch(x0 + 2.0, far_w(2.0 - f)));
  }
  const Tensor rows = reshape(transpose(x, [&] {
                                std::vector<std::int64_t> perm{0};
                                for (std::int64_t a = 0; a < k; ++a) perm.push_back(a + 2);
                                perm.push_back(1);
                                return perm;
                              }()),
                              {batch * pixels, ch});
  Shape bshape(std::size_t(k + 1), 1);
  bshape[0] = batch;
  const Tensor base = reshape(arange(0, double(batch), 1, DType::i64), bshape) *
                      scalar(double(pixels), DType::i64);
  Shape out_rows{batch};
  out_rows.insert(out_rows.end(), out_sp.begin(), out_sp.end());
  out_rows.push_back(ch);
  // Every combination of one tap per axis.
  std::vector<std::size_t> pick(static_cast<std::size_t>(k), 0);
  Tensor y;
  while (true) {
    Tensor pos = base, w = ones(g.shape().size() > 1 ? Shape(g.shape().begin(), g.shape().end() - 1) : Shape{}, DType::f64);
    Tensor valid;
    for (std::int64_t a = 0; a < k; ++a) {
      const Tap& t = taps[std::size_t(a)][pick[std::size_t(a)]];
      pos = pos + t.index * scalar(double(stride[std::size_t(a)]), DType::i64);
      w = w * where(t.valid, t.weight, zeros({}, DType::f64));
    }
    Tensor v = reshape(gather(rows, reshape(pos, {-1}), 0), out_rows);
    Tensor term = v * expand_dims(cast(w, x.dtype()), -1);
    y = y.defined() ? y + term : term;
    std::int64_t a = k - 1;
    while (a >= 0 && ++pick[std::size_t(a)] == taps[std::size_t(a)].size()) pick[std::size_t(a--)] = 0;
    if (a < 0) break;
  }
  std::vector<std::int64_t> back{0, k + 1};
  for (std::int64_t a = 0; a < k; ++a) back.push_back(a + 1);
  return {transpose(y, back)};
}

// ScatterND with reduction mul, max or min: data with each index tuple's slice combined with its
// update, the tuples in order. Computed from the values (f64 for floating types, i64 for the
// others): soma has no scatter-max.
std::vector<Tensor> scatter_nd_reduce(const Node& n) {
  const Tensor &x = n.x(), &indices = n.arg(1), &updates = n.arg(2);
  enum class R { mul, max, min };
  const R reduction = keyword<R>(n.attr.s("reduction"), {{"mul", R::mul}, {"max", R::max}, {"min", R::min}},
                                 n.what);
  const std::int64_t k = indices.dim(-1);
  if (k < 1 || k > x.rank()) fail(kWho, n.what, ": index tuples of ", k, " for rank ", x.rank());
  std::int64_t inner = 1, tuples = indices.numel() / k;
  for (std::int64_t d = k; d < x.rank(); ++d) inner *= x.dim(d);
  if (updates.numel() != tuples * inner)
    fail(kWho, n.what, ": updates ", shape_str(updates.shape()), " do not fit ", tuples,
         " index tuples of slices of ", inner);
  const auto idx = ints_of(indices);
  auto apply = [&](auto data, const auto& upd) {
    for (std::int64_t t = 0; t < tuples; ++t) {
      std::int64_t row = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t i = idx[std::size_t(t * k + j)];
        const std::int64_t dim = x.dim(j);
        if (i < 0) i += dim;
        if (i < 0 || i >= dim) fail(kWho, n.what, ": index ", i, " is outside axis ", j, " of ", dim);
        row = row * dim + i;
      }
      for (std::int64_t e = 0; e < inner; ++e) {
        auto& d = data[std::size_t(row * inner + e)];
        const auto u = upd[std::size_t(t * inner + e)];
        d = reduction == R::mul ? d * u : reduction == R::max ? std::max(d, u) : std::min(d, u);
      }
    }
    return data;
  };
  if (is_floating(x.dtype())) {
    auto out = apply(cast(x, DType::f64).to_vector<double>(), cast(updates, DType::f64).to_vector<double>());
    return {cast(constant(out, x.shape()), x.dtype())};
  }
  auto out = apply(cast(x, DType::i64).to_vector<std::int64_t>(), cast(updates, DType::i64).to_vector<std::int64_t>());
  return {cast(constant(out, x.shape()), x.dtype())};
}

// RoiAlign, as ONNX's reference: per region and output cell, a grid of sampling points
// (sampling_ratio per side, else ceil(region / output)), each read bilinearly from the four
// neighbours (points more than one pixel outside read 0); avg averages the points, max takes the
// largest weighted neighbour value (as the reference does). The points and weights come from the
// region values; the reads are one gather from x, so x gets gradients.
std::vector<Tensor> roi_align(const Node& n) {
  const Tensor &x = n.x(), &rois_t = n.arg(1), &batch_t = n.arg(2);
  if (x.rank() != 4 || rois_t.rank() != 2 || rois_t.dim(1) != 4 || batch_t.rank() != 1 ||
      batch_t.dim(0) != rois_t.dim(0))
    fail(kWho, n.what, ": X must be [N, C, H, W], rois [R, 4] and batch_indices [R], got ",
         shape_str(x.shape()), ", ", shape_str(rois_t.shape()), ", ", shape_str(batch_t.shape()));
  const std::int64_t R = rois_t.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const std::int64_t OH = n.attr.i("output_height"), OW = n.attr.i("output_width");
  const std::int64_t ratio = n.attr.i("sampling_ratio");
  const double scale = n.attr.f("spatial_scale");
  enum class Ct { half_pixel, output_half_pixel };
  enum class M { avg, max };
  const bool half_pixel = keyword<Ct>(n.attr.s("coordinate_transformation_mode"),
                                      {{"half_pixel", Ct::half_pixel}, {"output_half_pixel", Ct::output_half_pixel}},
                                      n.what) == Ct::half_pixel;
  const bool avg = keyword<M>(n.attr.s("mode"), {{"avg", M::avg}, {"max", M::max}}, n.what) == M::avg;
  const auto rois = cast(rois_t, DType::f64).to_vector<double>();
  const auto batch = ints_of(batch_t);
  // Sampling grid per region; S = the largest grid (others padded with weight-0 points).
  std::vector<std::int64_t> gh(static_cast<std::size_t>(R)), gw(gh.size());
  std::int64_t S = 1;
  for (std::int64_t r = 0; r < R; ++r) {
    double rw = rois[std::size_t(r * 4 + 2)] * scale - rois[std::size_t(r * 4)] * scale;
    double rh = rois[std::size_t(r * 4 + 3)] * scale - rois[std::size_t(r * 4 + 1)] * scale;
    if (!half_pixel) {
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    gh[std::size_t(r)] = ratio > 0 ? ratio : std::int64_t(std::ceil(rh / double(OH)));
    gw[std::size_t(r)] = ratio > 0 ? ratio : std::int64_t(std::ceil(rw / double(OW)));
    S = std::max(S, gh[std::size_t(r)] * gw[std::size_t(r)]);
  }
  const std::size_t cells = std::size_t(R * OH * OW * S * 4);
  std::vector<std::int64_t> pos(cells, 0);
  std::vector<double> wt(cells, 0.0), count(static_cast<std::size_t>(R * OH * OW), 1.0);
  std::vector<double> pad_mask(static_cast<std::size_t>(R * OH * OW * S), 0.0);  // 1: a real point
  for (std::int64_t r = 0; r < R; ++r) {
    const double off = half_pixel ? 0.5 : 0.0;
    const double sw = rois[std::size_t(r * 4)] * scale - off, sh = rois[std::size_t(r * 4 + 1)] * scale - off;
    double rw = rois[std::size_t(r * 4 + 2)] * scale - off - sw, rh = rois[std::size_t(r * 4 + 3)] * scale - off - sh;
    if (!half_pixel) {
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    const double bh = rh / double(OH), bw = rw / double(OW);
    const std::int64_t nh = gh[std::size_t(r)], nw = gw[std::size_t(r)];
    const std::int64_t b = batch[std::size_t(r)];
    if (b < 0 || b >= x.dim(0)) fail(kWho, n.what, ": batch index ", b, " is outside ", x.dim(0));
    for (std::int64_t ph = 0; ph < OH; ++ph)
      for (std::int64_t pw = 0; pw < OW; ++pw) {
        const std::size_t cell = std::size_t((r * OH + ph) * OW + pw);
        count[cell] = double(std::max<std::int64_t>(nh * nw, 1));
        for (std::int64_t iy = 0; iy < nh; ++iy)
          for (std::int64_t ix = 0; ix < nw; ++ix) {
            const std::size_t smp = cell * std::size_t(S) + std::size_t(iy * nw + ix);
            pad_mask[smp] = 1.0;
            double y = sh + double(ph) * bh + (double(iy) + 0.5) * bh / double(nh);
            double xx = sw + double(pw) * bw + (double(ix) + 0.5) * bw / double(nw);
            if (y < -1.0 || y > double(H) || xx < -1.0 || xx > double(W)) continue;  // weights 0
            y = std::max(y, 0.0);
            xx = std::max(xx, 0.0);
            std::int64_t y0 = std::int64_t(y), x0 = std::int64_t(xx), y1, x1;
            if (y0 >= H - 1) { y1 = y0 = H - 1; y = double(y0); } else { y1 = y0 + 1; }
            if (x0 >= W - 1) { x1 = x0 = W - 1; xx = double(x0); } else { x1 = x0 + 1; }
            const double ly = y - double(y0), lx = xx - double(x0), hy = 1 - ly, hx = 1 - lx;
            const std::int64_t base = b * H * W;
            const std::int64_t p4[4] = {base + y0 * W + x0, base + y0 * W + x1, base + y1 * W + x0, base + y1 * W + x1};
            const double w4[4] = {hy * hx, hy * lx, ly * hx, ly * lx};
            for (int q = 0; q < 4; ++q) {
              pos[smp * 4 + std::size_t(q)] = p4[q];
              wt[smp * 4 + std::size_t(q)] = w4[q];
            }
          }
      }
  }
  const Tensor rows = reshape(transpose(x, {0, 2, 3, 1}), {-1, C});
  Tensor v = reshape(gather(rows, constant(pos, Shape{std::int64_t(cells)}), 0), {R, OH, OW, S, 4, C});
  v = v * cast(constant(wt, Shape{R, OH, OW, S, 4, 1}), x.dtype());
  Tensor y;
  if (avg) {
    y = sum(v, {3, 4}) / cast(constant(count, Shape{R, OH, OW, 1}), x.dtype());
  } else {
    Tensor m = max(v, {4});  // [R, OH, OW, S, C]; padded points never win
    const Tensor real = cast(constant(pad_mask, Shape{R, OH, OW, S, 1}), DType::boolean);
    y = max(where(real, m, full_like(m, -std::numeric_limits<double>::infinity())), {3});
  }
  return {transpose(y, {0, 3, 1, 2})};
}

// Upsample (deprecated since opset 10), nearest with whole-number scales as ONNX's reference:
// each element repeated scale times along its axis. Scales are an input from opset 9, an
// attribute before.
std::vector<Tensor> upsample(const Node& n) {
  Tensor y = n.x();
  std::vector<double> scales;
  if (n.opset >= 9) scales = cast(n.arg(1), DType::f64).to_vector<double>();
  else if (const auto* a = n.attr.find("scales"))
    for (float v : a->floats()) scales.push_back(double(v));
  if (std::int64_t(scales.size()) != y.rank())
    fail(kWho, n.what, ": scales has ", scales.size(), " values for rank ", y.rank());
  for (std::int64_t a = 0; a < y.rank(); ++a) {
    const double sc = scales[std::size_t(a)];
    if (sc == 1.0) continue;
    if (sc < 1.0 || sc != std::floor(sc))
      fail(kWho, n.what, ": scale ", sc, " is not a whole number >= 1 (use Resize)");
    const std::int64_t k = std::int64_t(sc), len = y.dim(a);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(len * k));
    for (std::int64_t o = 0; o < len * k; ++o) idx[std::size_t(o)] = o / k;
    y = gather(y, constant(idx, Shape{len * k}), a);
  }
  return {y};
}

// MelWeightMatrix, as ONNX's reference: [dft_length / 2 + 1, num_mel_bins] triangular filters
// between mel-spaced frequencies (num_mel_bins + 2 points, the step over num_mel_bins + 2).
std::vector<Tensor> mel_weight_matrix(const Node& n) {
  const std::int64_t bins = std::int64_t(n.number(0)), dft_len = std::int64_t(n.number(1));
  const double rate = n.number(2), lo = n.number(3), hi = n.number(4);
  if (bins <= 0 || dft_len <= 0 || rate <= 0)
    fail(kWho, n.what, ": num_mel_bins, dft_length and sample_rate must be positive");
  const std::int64_t spec = dft_len / 2 + 1;
  // The reference computes the mel edges from float32 inputs in float32.
  const float lo_mel = 2595.0f * std::log1p(float(lo) / 700.0f) / std::log(10.0f);
  const float hi_mel = 2595.0f * std::log1p(float(hi) / 700.0f) / std::log(10.0f);
  const float step = (hi_mel - lo_mel) / float(bins + 2);
  std::vector<std::int64_t> edge(static_cast<std::size_t>(bins + 2));
  for (std::int64_t i = 0; i < bins + 2; ++i) {
    const double mel = double(i) * double(step) + double(lo_mel);
    const double hz = 700.0 * std::expm1(mel / 2595.0 * std::log(10.0));
    edge[std::size_t(i)] = std::int64_t(std::floor(double(dft_len + 1) * hz / rate));
  }
  std::vector<double> out(static_cast<std::size_t>(spec * bins), 0.0);
  auto at = [&](std::int64_t j, std::int64_t i) -> double& {
    if (j < 0 || j >= spec) fail(kWho, n.what, ": a filter edge falls outside the spectrum");
    return out[std::size_t(j * bins + i)];
  };
  for (std::int64_t i = 0; i < bins; ++i) {
    const std::int64_t left = edge[std::size_t(i)], center = edge[std::size_t(i + 1)], right = edge[std::size_t(i + 2)];
    if (center == left) at(center, i) = 1;
    else
      for (std::int64_t j = left; j <= center; ++j) at(j, i) = double(j - left) / double(center - left);
    if (right > center)
      for (std::int64_t j = center; j < right; ++j) at(j, i) = double(right - j) / double(right - center);
  }
  const DType dt = soma_dtype(int(n.attr.i("output_datatype")), n.what + " output_datatype");
  return {cast(constant(out, Shape{spec, bins}), dt)};
}

}  // namespace soma::onnx::importer
#endif
