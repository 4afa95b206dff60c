// einsum as a composite of existing ops, so its gradient comes for free: repeated labels in one
// operand become diagonal views, labels nobody else needs are summed early, and the operands
// are contracted pairwise, left to right, with one matmul each (or a broadcast multiply when
// nothing is contracted).
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "soma/ops.hpp"

namespace soma {

namespace detail {
Tensor diagonal_view(const Tensor& t, std::int64_t axis1, std::int64_t axis2);  // linalg.cpp
}

namespace {

// Labels are small ints: 'a'-'z' -> 0-25, 'A'-'Z' -> 26-51, the dims under "..." -> 52 + i.
constexpr int kEllipsisBase = 52;
using Labels = std::vector<int>;

struct Term {
  Labels letters_before, letters_after;  // letters either side of "..." (all in _before if none)
  bool ellipsis = false;
};

struct Operand {
  Tensor t;
  Labels labels;  // one per dim of t
};

std::string label_name(int l) {
  if (l < 26) return std::string(1, char('a' + l));
  if (l < kEllipsisBase) return std::string(1, char('A' + l - 26));
  return "...";
}

class Einsum {
 public:
  Einsum(const std::string& equation, const std::vector<Tensor>& operands)
      : eq_(equation), ops_in_(operands) {}

  Tensor run() {
    parse();
    bind_sizes();
    std::vector<Operand> ops = prepare_operands();
    Operand acc = ops[0];
    for (std::size_t j = 1; j < ops.size(); ++j) {
      auto needed_later = [&](int l) { return needed_after(l, ops, j); };
      Operand x = ops[j];
      acc = sum_out(acc, [&](int l) { return !has(x.labels, l) && !needed_later(l); });
      x = sum_out(x, [&](int l) { return !has(acc.labels, l) && !needed_later(l); });
      acc = contract(acc, x, needed_later);
    }
    acc = sum_out(acc, [&](int l) { return !has(out_, l); });
    return permute_to(acc, out_).t;
  }

 private:
  template <class... Args>
  [[noreturn]] void error(const Args&... args) const {
    std::string shapes;
    for (std::size_t i = 0; i < ops_in_.size(); ++i)
      shapes += (i ? ", " : "") + (ops_in_[i].defined() ? shape_str(ops_in_[i].shape()) : "undefined");
    fail("einsum", args..., " (equation '", eq_, "', operand shapes ", shapes, ")");
  }

  static bool has(const Labels& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); }

  Term parse_term(const std::string& s) const {
    Term t;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '.') {
        if (s.compare(i, 3, "...") != 0) error("'.' must come in a group of three ('...')");
        if (t.ellipsis) error("'...' appears twice in the subscripts '", s, "'");
        t.ellipsis = true;
        i += 2;
      } else if (c >= 'a' && c <= 'z') {
        (t.ellipsis ? t.letters_after : t.letters_before).push_back(c - 'a');
      } else if (c >= 'A' && c <= 'Z') {
        (t.ellipsis ? t.letters_after : t.letters_before).push_back(c - 'A' + 26);
      } else {
        error("invalid character '", std::string(1, c), "' (expected letters, ',', '->' or '...')");
      }
    }
    return t;
  }

  void parse() {
    std::string e;
    for (char c : eq_)
      if (c != ' ' && c != '\t' && c != '\n') e += c;
    if (ops_in_.empty()) error("no operands given");
    for (const Tensor& t : ops_in_)
      if (!t.defined()) error("an operand is an undefined Tensor");
    std::string lhs = e, rhs;
    const std::size_t arrow = e.find("->");
    const bool explicit_out = arrow != std::string::npos;
    if (explicit_out) {
      lhs = e.substr(0, arrow);
      rhs = e.substr(arrow + 2);
      if (rhs.find("->") != std::string::npos || rhs.find(',') != std::string::npos)
        error("the output (after '->') must be one term");
    } else if (e.find('-') != std::string::npos || e.find('>') != std::string::npos) {
      error("'-' and '>' may only appear together as '->'");
    }
    std::vector<std::string> terms(1);
    for (char c : lhs) {
      if (c == ',') terms.emplace_back();
      else terms.back() += c;
    }
    if (terms.size() != ops_in_.size())
      error("the equation names ", terms.size(), " operand", terms.size() == 1 ? "" : "s", " but ",
            ops_in_.size(), " ", ops_in_.size() == 1 ? "was" : "were", " given");

    // Each operand's labels; "..." stands for the operand's extra dims, right-aligned across
    // operands (they broadcast like NumPy's leading dims).
    std::vector<Term> parsed;
    for (const auto& s : terms) parsed.push_back(parse_term(s));
    ell_rank_ = 0;
    for (std::size_t i = 0; i < parsed.size(); ++i) {
      const Term& t = parsed[i];
      const std::int64_t letters = std::int64_t(t.letters_before.size() + t.letters_after.size());
      const std::int64_t rank = ops_in_[i].rank();
      if (t.ellipsis ? rank < letters : rank != letters)
        error("operand ", i, " has rank ", rank, " but its subscripts '", terms[i], "' name ",
              letters, t.ellipsis ? " or more" : "", " dims");
      if (t.ellipsis) ell_rank_ = std::max(ell_rank_, rank - letters);
    }
    for (std::size_t i = 0; i < parsed.size(); ++i) {
      const Term& t = parsed[i];
      Labels ls = t.letters_before;
      if (t.ellipsis) {
        const std::int64_t e_dims = ops_in_[i].rank() - std::int64_t(t.letters_before.size() +
                                                                     t.letters_after.size());
        for (std::int64_t d = 0; d < e_dims; ++d)
          ls.push_back(kEllipsisBase + int(ell_rank_ - e_dims + d));
      }
      ls.insert(ls.end(), t.letters_after.begin(), t.letters_after.end());
      labels_.push_back(ls);
    }

    std::array<int, kEllipsisBase> count{};
    bool any_ellipsis = false;
    for (const Term& t : parsed) {
      for (int l : t.letters_before) ++count[std::size_t(l)];
      for (int l : t.letters_after) ++count[std::size_t(l)];
      any_ellipsis = any_ellipsis || t.ellipsis;
    }
    auto ellipsis_labels = [&] {
      Labels ls;
      for (std::int64_t d = 0; d < ell_rank_; ++d) ls.push_back(kEllipsisBase + int(d));
      return ls;
    };
    if (explicit_out) {
      Term t = parse_term(rhs);
      if (t.ellipsis && !any_ellipsis) error("the output has '...' but no operand does");
      out_ = t.letters_before;
      if (t.ellipsis) {
        Labels el = ellipsis_labels();
        out_.insert(out_.end(), el.begin(), el.end());
      }
      out_.insert(out_.end(), t.letters_after.begin(), t.letters_after.end());
      for (std::size_t i = 0; i < out_.size(); ++i) {
        if (out_[i] < kEllipsisBase && count[std::size_t(out_[i])] == 0)
          error("output label '", label_name(out_[i]), "' does not appear in any operand");
        if (std::count(out_.begin(), out_.end(), out_[i]) > 1)
          error("output label '", label_name(out_[i]), "' appears more than once");
      }
    } else {
      // NumPy's implicit output: the "..." dims, then the letters used exactly once, sorted.
      out_ = ellipsis_labels();
      for (char c = 'A'; c <= 'Z'; ++c)
        if (count[std::size_t(c - 'A' + 26)] == 1) out_.push_back(c - 'A' + 26);
      for (char c = 'a'; c <= 'z'; ++c)
        if (count[std::size_t(c - 'a')] == 1) out_.push_back(c - 'a');
    }
  }

  // One size per label; a dim of size 1 broadcasts against the others.
  void bind_sizes() {
    size_.assign(std::size_t(kEllipsisBase + ell_rank_), -1);
    for (std::size_t i = 0; i < labels_.size(); ++i)
      for (std::size_t d = 0; d < labels_[i].size(); ++d) {
        const int l = labels_[i][d];
        const std::int64_t s = ops_in_[i].shape()[d];
        std::int64_t& cur = size_[std::size_t(l)];
        if (cur == -1 || cur == 1) {
          cur = s;
        } else if (s != 1 && s != cur) {
          if (l >= kEllipsisBase) error("the dims under '...' do not broadcast");
          error("label '", label_name(l), "' has size ", cur, " in one place and ", s,
                " in operand ", i);
        }
      }
  }

  std::vector<Operand> prepare_operands() {
    DType dt = ops_in_[0].dtype();
    for (const Tensor& t : ops_in_) dt = promote_types(dt, t.dtype());
    if (dt == DType::boolean) error("dtype bool is not supported (cast to a numeric dtype first)");
    std::vector<Operand> ops;
    for (std::size_t i = 0; i < ops_in_.size(); ++i) {
      Operand op{cast(ops_in_[i], dt), labels_[i]};
      // A size-1 dim broadcast against a larger one: the operand does not depend on that label.
      Shape kept;
      Labels kept_labels;
      for (std::size_t d = 0; d < op.labels.size(); ++d) {
        const std::int64_t s = op.t.shape()[d];
        if (s == 1 && size_[std::size_t(op.labels[d])] != 1) continue;
        kept.push_back(s);
        kept_labels.push_back(op.labels[d]);
      }
      if (kept.size() != op.labels.size()) op = {reshape(op.t, kept), kept_labels};
      // Repeated labels: take the diagonal (a view); it becomes the last axis.
      for (bool again = true; again;) {
        again = false;
        for (std::size_t p = 0; p < op.labels.size() && !again; ++p)
          for (std::size_t q = p + 1; q < op.labels.size() && !again; ++q)
            if (op.labels[p] == op.labels[q]) {
              const int l = op.labels[p];
              op.t = detail::diagonal_view(op.t, std::int64_t(p), std::int64_t(q));
              op.labels.erase(op.labels.begin() + std::ptrdiff_t(q));
              op.labels.erase(op.labels.begin() + std::ptrdiff_t(p));
              op.labels.push_back(l);
              again = true;
            }
      }
      ops.push_back(std::move(op));
    }
    return ops;
  }

  bool needed_after(int l, const std::vector<Operand>& ops, std::size_t j) const {
    if (has(out_, l)) return true;
    for (std::size_t i = j + 1; i < ops.size(); ++i)
      if (has(ops[i].labels, l)) return true;
    return false;
  }

  template <class Pred>
  static Operand sum_out(const Operand& op, Pred drop) {
    Axes axes;
    Labels kept;
    for (std::size_t d = 0; d < op.labels.size(); ++d) {
      if (drop(op.labels[d])) axes.push_back(std::int64_t(d));
      else kept.push_back(op.labels[d]);
    }
    if (axes.empty()) return op;
    return {sum(op.t, axes), kept};
  }

  // op's axes reordered to `order` (a permutation of its labels); no op when already in order.
  static Operand permute_to(const Operand& op, const Labels& order) {
    std::vector<std::int64_t> perm;
    bool identity = true;
    for (int l : order) {
      const auto pos = std::int64_t(std::find(op.labels.begin(), op.labels.end(), l) - op.labels.begin());
      identity = identity && pos == std::int64_t(perm.size());
      perm.push_back(pos);
    }
    if (identity) return {op.t, order};
    return {transpose(op.t, perm), order};
  }

  std::int64_t extent(const Labels& ls) const {
    std::int64_t n = 1;
    for (int l : ls) n *= size_[std::size_t(l)];
    return n;
  }
  Shape sizes(const Labels& ls) const {
    Shape s;
    for (int l : ls) s.push_back(size_[std::size_t(l)]);
    return s;
  }
  static Labels join(std::initializer_list<const Labels*> parts) {
    Labels r;
    for (const Labels* p : parts) r.insert(r.end(), p->begin(), p->end());
    return r;
  }
  static Tensor reshape_if(const Tensor& t, const Shape& s) {
    return t.shape() == s ? t : reshape(t, s);
  }

  template <class Pred>
  Operand contract(const Operand& a, const Operand& b, Pred needed_later) const {
    Labels batch, summed, left, right;
    for (int l : a.labels) {
      if (!has(b.labels, l)) left.push_back(l);
      else if (needed_later(l)) batch.push_back(l);
      else summed.push_back(l);
    }
    for (int l : b.labels)
      if (!has(a.labels, l)) right.push_back(l);
    const Labels out_labels = join({&batch, &left, &right});
    const Shape out_shape = sizes(out_labels);
    if (summed.empty()) {
      // Nothing to contract: an outer product over left x right, elementwise over batch.
      Shape sa = sizes(join({&batch, &left})), sb = sizes(batch);
      sa.insert(sa.end(), right.size(), 1);
      sb.insert(sb.end(), left.size(), 1);
      for (int l : right) sb.push_back(size_[std::size_t(l)]);
      Tensor x = reshape_if(permute_to(a, join({&batch, &left})).t, sa);
      Tensor y = reshape_if(permute_to(b, join({&batch, &right})).t, sb);
      return {x * y, out_labels};
    }
    const std::int64_t nb = extent(batch), m = extent(left), k = extent(summed), n = extent(right);
    Shape sa = batch.empty() ? Shape{m, k} : Shape{nb, m, k};
    Shape sb = batch.empty() ? Shape{k, n} : Shape{nb, k, n};
    Tensor x = reshape_if(permute_to(a, join({&batch, &left, &summed})).t, sa);
    Tensor y = reshape_if(permute_to(b, join({&batch, &summed, &right})).t, sb);
    return {reshape_if(matmul(x, y), out_shape), out_labels};
  }

  std::string eq_;
  const std::vector<Tensor>& ops_in_;
  std::vector<Labels> labels_;
  Labels out_;
  std::int64_t ell_rank_ = 0;
  std::vector<std::int64_t> size_;
};

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  return Einsum(equation, operands).run();
}

}  // namespace soma
