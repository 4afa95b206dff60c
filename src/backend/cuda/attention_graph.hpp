#pragma once
// Internal: scaled_dot_product_attention's forward as a cuDNN fused flash attention graph,
// described as plain data (no cuDNN header), so that the description, the shapes and strides and
// the support predicate are checked on the CPU (tests/unit/test_cuda_attention_cudnn.cpp runs the
// described graph with a small interpreter against the CPU op). attention_cudnn.cpp turns the
// description into cuDNN backend descriptors, one per tensor and operation.
//
// The graph is the pattern cuDNN 9's runtime fusion engines recognise as "flash attention fprop"
// (the cudnn_frontend sdpa node builds the same one; soma does not use the frontend):
//   S = matmul(Q, K^T) * scale                 [b, h, sq, sk] f32, virtual
//   causal: S = select(row >= col, S, -inf)    GEN_INDEX on axes 2 and 3, CMP_GE, BINARY_SELECT
//   M = max(S, axis 3); E = exp(S - M); Z = sum(E, axis 3)          [b, h, sq, 1]
//   Stats = M + log(Z)                         the op's lse, f32 (the only non-virtual f32 tensor)
//   P = E / Z                                  in the input dtype (the second matmul's A)
//   O = matmul(P, V)                           [b, h, sq, dv]
// K is read transposed through its strides (KT [b, h, d, sk]); Q, K, V are packed [b, h, s, d] or
// [b, s, h, d] (Layout), O and Stats packed [b, h, s, d].
// scale and -inf are by-value scalars, given at execution time: one plan serves every scale.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace soma::cuda_detail::attn {

enum class Elem : int { f16, bf16, f32, i32, boolean };

// How q, k or v lie in memory. bhsd: packed [b, h, s, d]; bshd: a packed [b, s, h, d] seen as
// [b, h, s, d] (MultiHeadAttention's heads, transposed from its projections: read in place
// rather than copied). Anything else is packed into bhsd first.
enum class Layout : int { bhsd, bshd };

inline std::vector<std::int64_t> layout_strides(Layout l, std::int64_t b, std::int64_t h,
                                                std::int64_t s, std::int64_t d) {
  (void)b;
  if (l == Layout::bshd) return {s * h * d, d, h * d, 1};
  return {h * s * d, s * d, d, 1};
}

// Sets `out` to the layout of a [b, h, s, d] tensor with these strides; false when it is neither
// (dims of size 1 may have any stride, as a packed tensor's do).
inline bool match_layout(const std::vector<std::int64_t>& dims,
                         const std::vector<std::int64_t>& strides, Layout& out) {
  if (dims.size() != 4 || strides.size() != 4) return false;
  for (Layout l : {Layout::bhsd, Layout::bshd}) {
    const std::vector<std::int64_t> want = layout_strides(l, dims[0], dims[1], dims[2], dims[3]);
    bool ok = true;
    for (int i = 0; i < 4; ++i)
      if (dims[std::size_t(i)] != 1 && strides[std::size_t(i)] != want[std::size_t(i)]) ok = false;
    if (ok) {
      out = l;
      return true;
    }
  }
  return false;
}

// One call's geometry and options; `key()` is what a plan is cached by (with the device).
struct Problem {
  std::int64_t b = 0, h = 0, sq = 0, sk = 0, d = 0, dv = 0;
  Elem dtype = Elem::f16;  // of q, k, v and out
  bool causal = false;
  bool has_mask = false;  // an explicit mask input (not taken by this path: see unsupported_reason)
  Layout q_layout = Layout::bhsd, k_layout = Layout::bhsd, v_layout = Layout::bhsd;  // out: bhsd

  std::vector<std::int64_t> key(int device) const {
    return {device, int(dtype), b, h, sq, sk, d, dv, causal ? 1 : 0,
            int(q_layout), int(k_layout), int(v_layout)};
  }
};

// Largest head dimension the fused engines are asked for; larger ones run the composite.
constexpr std::int64_t kMaxHeadDim = 256;
// Plans kept (each may have compiled a kernel when built); shapes beyond run the composite.
constexpr std::size_t kMaxPlans = 64;

// Empty when the fused path may be tried for `p` on a device of compute capability
// `compute_major` with the cuDNN library of version `cudnn` (cudnnGetVersion, e.g. 91900; 0: not
// known), else why not. Passing this predicate is no promise: cuDNN's heuristics may still find
// no engine, and then the caller falls back (remembering the key). The version rules are the
// known bugs cudnn_frontend's support checks refuse (wrong answers, not refusals).
inline std::string unsupported_reason(const Problem& p, int compute_major, std::size_t cudnn = 0) {
  if (p.dtype != Elem::f16 && p.dtype != Elem::bf16)
    return "cuDNN's fused attention takes f16 and bf16 only";
  if (p.has_mask)
    return "an explicit mask (boolean or additive) runs the composite kernel";
  if (p.b <= 0 || p.h <= 0 || p.sq <= 0 || p.sk <= 0 || p.d <= 0 || p.dv <= 0)
    return "an empty dimension (no keys: every row is fully masked)";
  if (p.d % 8 != 0 || p.dv % 8 != 0)
    return "head dimensions must be multiples of 8 (d = " + std::to_string(p.d) +
           ", d_v = " + std::to_string(p.dv) + ")";
  if (p.d > kMaxHeadDim || p.dv > kMaxHeadDim)
    return "head dimensions above " + std::to_string(kMaxHeadDim);
  if (compute_major != 0 && compute_major < 8)
    return "cuDNN's fused flash attention needs compute capability 8.0 (Ampere) or later";
  if (cudnn == 91000 || cudnn == 91001)
    return "cuDNN 9.10.0/9.10.1 have known bugs in f16/bf16 fused attention";
  // Decoding with a KV cache: one query against a key length that grows every step would build a
  // plan per step; its [b, h, 1, sk] logits are small, so the composite serves it. (cuDNN before
  // 9.10 also mishandles one query with a causal mask.)
  if (p.sq == 1) return "a single query row (decoding) runs the composite kernel";
  // cuDNN counts elements of a tensor in int64 but the engines index with 32-bit offsets.
  const std::int64_t limit = std::int64_t(1) << 31;
  if (p.b * p.h * p.sq * p.d >= limit || p.b * p.h * p.sk * p.d >= limit ||
      p.b * p.h * p.sk * p.dv >= limit || p.b * p.h * p.sq * p.dv >= limit)
    return "a tensor of 2^31 or more elements";
  return {};
}

// SOMA_CUDNN_ATTENTION: unset, "1" or "on": the fused path; "0", "off", "false" or "no": never;
// "debug": the fused path, and each fallback's reason printed once per shape on stderr.
enum class Setting { on, off, debug };
inline Setting parse_setting(const char* env) {
  if (!env || !*env) return Setting::on;
  std::string s(env);
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  static const std::string kOff[] = {"0", "off", "false", "no"}, kDebug = "debug";
  for (const std::string& w : kOff)
    if (s == w) return Setting::off;
  return s == kDebug ? Setting::debug : Setting::on;
}

// ---- the graph as data ---------------------------------------------------------------------------
namespace uid {
constexpr std::int64_t q = 1, k = 2, v = 3, o = 4, stats = 5, scale = 6, neg_inf = 7;
constexpr std::int64_t first_virtual = 100;
}  // namespace uid

struct TensorNode {
  std::int64_t uid = 0;
  std::vector<std::int64_t> dims, strides;  // rank 4
  Elem type = Elem::f32;
  bool is_virtual = false;
  bool by_value = false;  // a host scalar given in the variant pack
};

enum class Mode {
  matmul,                                         // out = in0 @ in1 (batched over dims 0, 1)
  mul, add, sub, div,                             // out = in0 (op) in1, broadcasting
  exp, log,                                       // out = f(in0)
  gen_index,                                      // out = the index along `axis` of in0's shape
  cmp_ge,                                         // out = in0 >= in1
  binary_select,                                  // out = in2 ? in0 : in1
  reduce_max, reduce_add                          // out = reduction of in0 over out's 1-dims
};

struct OpNode {
  Mode mode = Mode::mul;
  std::vector<std::int64_t> inputs;
  std::int64_t output = 0;
  Elem math = Elem::f32;  // compute type (pointwise MATH_PREC, reduction/matmul COMP_TYPE)
  std::int64_t axis = -1;  // gen_index only
};

struct Graph {
  std::vector<TensorNode> tensors;
  std::vector<OpNode> ops;

  const TensorNode* find(std::int64_t id) const {
    for (const TensorNode& t : tensors)
      if (t.uid == id) return &t;
    return nullptr;
  }
  // The non-virtual tensors the variant pack must name (data or host value), in uid order.
  std::vector<std::int64_t> io_uids() const {
    std::vector<std::int64_t> r;
    for (const TensorNode& t : tensors)
      if (!t.is_virtual) r.push_back(t.uid);
    return r;
  }
};

inline std::vector<std::int64_t> packed_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> s(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

inline Graph forward_graph(const Problem& p) {
  Graph g;
  std::int64_t next = uid::first_virtual;
  auto io = [&](std::int64_t id, std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                Elem t) {
    g.tensors.push_back({id, std::move(dims), std::move(strides), t, false, false});
  };
  auto scalar = [&](std::int64_t id) {
    g.tensors.push_back({id, {1, 1, 1, 1}, {1, 1, 1, 1}, Elem::f32, false, true});
  };
  auto virt = [&](std::vector<std::int64_t> dims, Elem t) {
    std::vector<std::int64_t> s = packed_strides(dims);
    g.tensors.push_back({next, std::move(dims), std::move(s), t, true, false});
    return next++;
  };
  auto op = [&](Mode m, std::vector<std::int64_t> in, std::int64_t out, Elem math = Elem::f32,
                std::int64_t axis = -1) { g.ops.push_back({m, std::move(in), out, math, axis}); };

  const std::int64_t b = p.b, h = p.h, sq = p.sq, sk = p.sk, d = p.d, dv = p.dv;
  io(uid::q, {b, h, sq, d}, layout_strides(p.q_layout, b, h, sq, d), p.dtype);
  std::vector<std::int64_t> kt = layout_strides(p.k_layout, b, h, sk, d);
  std::swap(kt[2], kt[3]);  // K^T [b, h, d, sk]: K read across
  io(uid::k, {b, h, d, sk}, kt, p.dtype);
  io(uid::v, {b, h, sk, dv}, layout_strides(p.v_layout, b, h, sk, dv), p.dtype);
  io(uid::o, {b, h, sq, dv}, {h * sq * dv, sq * dv, dv, 1}, p.dtype);
  io(uid::stats, {b, h, sq, 1}, {h * sq, sq, 1, 1}, Elem::f32);
  scalar(uid::scale);

  const std::vector<std::int64_t> logits{b, h, sq, sk}, rows{b, h, sq, 1};
  const std::int64_t s0 = virt(logits, Elem::f32);
  op(Mode::matmul, {uid::q, uid::k}, s0);
  std::int64_t s = virt(logits, Elem::f32);
  op(Mode::mul, {s0, uid::scale}, s);
  if (p.causal) {
    scalar(uid::neg_inf);
    const std::int64_t row = virt(logits, Elem::i32), col = virt(logits, Elem::i32);
    op(Mode::gen_index, {s}, row, Elem::f32, 2);
    op(Mode::gen_index, {s}, col, Elem::f32, 3);
    const std::int64_t keep = virt(logits, Elem::boolean);
    op(Mode::cmp_ge, {row, col}, keep, Elem::boolean);
    const std::int64_t masked = virt(logits, Elem::f32);
    op(Mode::binary_select, {s, uid::neg_inf, keep}, masked);
    s = masked;
  }
  const std::int64_t m = virt(rows, Elem::f32);
  op(Mode::reduce_max, {s}, m);
  const std::int64_t shifted = virt(logits, Elem::f32);
  op(Mode::sub, {s, m}, shifted);
  const std::int64_t e = virt(logits, Elem::f32);
  op(Mode::exp, {shifted}, e);
  const std::int64_t z = virt(rows, Elem::f32);
  op(Mode::reduce_add, {e}, z);
  const std::int64_t logz = virt(rows, Elem::f32);
  op(Mode::log, {z}, logz);
  op(Mode::add, {m, logz}, uid::stats);
  const std::int64_t prob = virt(logits, p.dtype);  // the second matmul takes the i/o dtype
  op(Mode::div, {e, z}, prob);
  op(Mode::matmul, {prob, uid::v}, uid::o);
  return g;
}

// Empty when `g` is well formed: unique uids, every op's inputs exist and are produced before
// use (or are inputs/scalars), every virtual tensor and output is produced exactly once, and the
// shapes agree (broadcasting pointwise inputs, matmul [.., m, k] x [.., k, n], reductions to 1).
inline std::string validate(const Graph& g) {
  std::vector<std::int64_t> produced;
  auto has = [](const std::vector<std::int64_t>& v, std::int64_t x) {
    for (std::int64_t y : v)
      if (y == x) return true;
    return false;
  };
  for (std::size_t i = 0; i < g.tensors.size(); ++i) {
    const TensorNode& t = g.tensors[i];
    if (t.dims.size() != 4 || t.strides.size() != 4) return "tensor " + std::to_string(t.uid) + " is not rank 4";
    for (std::size_t j = 0; j < i; ++j)
      if (g.tensors[j].uid == t.uid) return "uid " + std::to_string(t.uid) + " used twice";
  }
  for (const OpNode& op : g.ops) {
    const TensorNode* out = g.find(op.output);
    if (!out) return "an op writes the unknown uid " + std::to_string(op.output);
    if (out->by_value) return "an op writes a by-value scalar";
    if (has(produced, op.output)) return "uid " + std::to_string(op.output) + " is written twice";
    std::vector<const TensorNode*> in;
    for (std::int64_t id : op.inputs) {
      const TensorNode* t = g.find(id);
      if (!t) return "an op reads the unknown uid " + std::to_string(id);
      if (t->is_virtual && !has(produced, id))
        return "virtual uid " + std::to_string(id) + " is read before it is written";
      if (id == uid::o || id == uid::stats) return "an op reads an output";
      in.push_back(t);
    }
    const std::size_t want = op.mode == Mode::binary_select                      ? 3
                             : (op.mode == Mode::exp || op.mode == Mode::log ||
                                op.mode == Mode::gen_index || op.mode == Mode::reduce_max ||
                                op.mode == Mode::reduce_add)                     ? 1
                                                                                 : 2;
    if (in.size() != want) return "an op has " + std::to_string(in.size()) + " inputs";
    const auto& od = out->dims;
    if (op.mode == Mode::matmul) {
      const auto &a = in[0]->dims, &bm = in[1]->dims;
      if (a[0] != od[0] || a[1] != od[1] || bm[0] != od[0] || bm[1] != od[1] || a[2] != od[2] ||
          bm[3] != od[3] || a[3] != bm[2])
        return "matmul shapes disagree (output uid " + std::to_string(op.output) + ")";
    } else if (op.mode == Mode::reduce_max || op.mode == Mode::reduce_add) {
      for (int dd = 0; dd < 4; ++dd)
        if (od[dd] != 1 && od[dd] != in[0]->dims[dd])
          return "a reduction's output does not keep its input's dims";
    } else {
      for (const TensorNode* t : in)
        for (int dd = 0; dd < 4; ++dd)
          if (t->dims[dd] != 1 && t->dims[dd] != od[dd])
            return "a pointwise input does not broadcast to uid " + std::to_string(op.output);
      if (op.mode == Mode::gen_index && (op.axis < 0 || op.axis > 3)) return "gen_index axis";
    }
    produced.push_back(op.output);
  }
  for (const TensorNode& t : g.tensors)
    if ((t.is_virtual || t.uid == uid::o || t.uid == uid::stats) && !has(produced, t.uid))
      return "uid " + std::to_string(t.uid) + " is never written";
  return {};
}

}  // namespace soma::cuda_detail::attn
