#include "soma/data/dataset.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::data {

namespace {
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
std::uint64_t mix(std::uint64_t a, std::uint64_t b) { return splitmix64(a ^ splitmix64(b)); }
}  // namespace

std::uint64_t MapContext::seed(std::uint64_t base) const {
  return mix(mix(base, std::uint64_t(epoch)), std::uint64_t(index));
}

namespace detail {

// An element in flight. Stages that only move elements (shuffle, take, skip, shard, repeat,
// prefetch) pass rows of a from_tensor_slices source as bare indices, so batch() can gather a
// whole batch in one op; `source` points at the tensors the row indexes (owned by the node).
struct Item {
  Element elem;
  std::int64_t row = -1;
  const Element* source = nullptr;

  Element materialize() && {
    if (row < 0) return std::move(elem);
    Element out;
    out.reserve(source->size());
    for (auto& t : *source) out.push_back(t[row]);
    return out;
  }
};

struct IteratorImpl {
  virtual ~IteratorImpl() = default;
  virtual std::optional<Item> next() = 0;
};
using IterPtr = std::unique_ptr<IteratorImpl>;

struct DatasetNode {
  virtual ~DatasetNode() = default;
  virtual IterPtr iterate() const = 0;
  virtual std::int64_t cardinality() const = 0;
};
using NodePtr = std::shared_ptr<const DatasetNode>;

}  // namespace detail

namespace {
using detail::DatasetNode;
using detail::Item;
using detail::IteratorImpl;
using detail::IterPtr;
using detail::NodePtr;

// ---- sources --------------------------------------------------------------------------------
// Iterators point at their nodes without owning them: the Root iterator owns the top node,
// which owns its inputs, and destroys the iterator chain (joining any threads) before the nodes.
struct TensorsNode final : DatasetNode {
  Element tensors;
  struct It final : IteratorImpl {
    const TensorsNode* node;
    bool done = false;
    std::optional<Item> next() override {
      if (done) return std::nullopt;
      done = true;
      return Item{node->tensors};
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->node = this;
    return it;
  }
  std::int64_t cardinality() const override { return 1; }
};

struct SlicesNode final : DatasetNode {
  Element tensors;
  std::int64_t n = 0;
  struct It final : IteratorImpl {
    const SlicesNode* node;
    std::int64_t i = 0;
    std::optional<Item> next() override {
      if (i >= node->n) return std::nullopt;
      return Item{{}, i++, &node->tensors};
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->node = this;
    return it;
  }
  std::int64_t cardinality() const override { return n; }
};

struct GeneratorNode final : DatasetNode {
  std::function<GeneratorFn()> make;
  std::int64_t card = kUnknownCardinality;
  struct It final : IteratorImpl {
    GeneratorFn fn;
    bool done = false;
    std::optional<Item> next() override {
      if (done) return std::nullopt;
      std::optional<Element> e = fn();
      if (!e) {
        done = true;
        return std::nullopt;
      }
      return Item{std::move(*e)};
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->fn = make();
    if (!it->fn) fail("Dataset.from_generator", "the generator factory returned an empty function");
    return it;
  }
  std::int64_t cardinality() const override { return card; }
};

// ---- stages that move elements --------------------------------------------------------------
// Each stage node holds its input node; its iterator holds the input's iterator. Nodes are
// immutable apart from atomic pass counters, so iterators on several threads may share them.
struct UnaryNode : DatasetNode {
  NodePtr input;
};

struct ShuffleNode final : UnaryNode {
  std::int64_t buffer_size = 1;
  std::uint64_t seed = 0;
  bool reshuffle = true;
  mutable std::atomic<std::int64_t> passes{0};
  struct It final : IteratorImpl {
    IterPtr in;
    std::int64_t buffer_size;
    std::uint64_t state;
    std::vector<Item> buffer;
    bool in_done = false;
    std::uint64_t draw(std::uint64_t n) {  // uniform in [0, n): Lemire's multiply-shift
      state = splitmix64(state);
      return std::uint64_t((__uint128_t(state) * n) >> 64);
    }
    std::optional<Item> next() override {
      while (!in_done && std::int64_t(buffer.size()) < buffer_size) {
        auto item = in->next();
        if (!item) in_done = true;
        else buffer.push_back(std::move(*item));
      }
      if (buffer.empty()) return std::nullopt;
      const std::size_t k = draw(buffer.size());
      Item out = std::move(buffer[k]);
      if (k + 1 != buffer.size()) buffer[k] = std::move(buffer.back());
      buffer.pop_back();
      return out;
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    const std::int64_t pass = passes.fetch_add(1);
    it->state = mix(seed, std::uint64_t(reshuffle ? pass : 0));
    it->buffer_size = buffer_size;
    it->buffer.reserve(std::size_t(std::min<std::int64_t>(buffer_size, 1 << 20)));
    it->in = input->iterate();
    return it;
  }
  std::int64_t cardinality() const override { return input->cardinality(); }
};

struct TakeNode final : UnaryNode {
  std::int64_t count = 0;
  struct It final : IteratorImpl {
    IterPtr in;
    std::int64_t left;
    std::optional<Item> next() override {
      if (left <= 0) return std::nullopt;
      --left;
      return in->next();
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->in = input->iterate();
    it->left = count;
    return it;
  }
  std::int64_t cardinality() const override {
    const std::int64_t c = input->cardinality();
    if (c == kInfiniteCardinality) return count;
    if (c == kUnknownCardinality) return kUnknownCardinality;
    return std::min(c, count);
  }
};

struct SkipNode final : UnaryNode {
  std::int64_t count = 0;
  struct It final : IteratorImpl {
    IterPtr in;
    std::int64_t to_skip;
    std::optional<Item> next() override {
      for (; to_skip > 0; --to_skip)
        if (!in->next()) {
          to_skip = 0;
          return std::nullopt;
        }
      return in->next();
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->in = input->iterate();
    it->to_skip = count;
    return it;
  }
  std::int64_t cardinality() const override {
    const std::int64_t c = input->cardinality();
    return c < 0 ? c : std::max<std::int64_t>(0, c - count);
  }
};

struct ShardNode final : UnaryNode {
  std::int64_t num_shards = 1, index = 0;
  struct It final : IteratorImpl {
    IterPtr in;
    std::int64_t num_shards, index, pos = 0;
    std::optional<Item> next() override {
      while (auto item = in->next())
        if (pos++ % num_shards == index) return item;
      return std::nullopt;
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->in = input->iterate();
    it->num_shards = num_shards;
    it->index = index;
    return it;
  }
  std::int64_t cardinality() const override {
    const std::int64_t c = input->cardinality();
    if (c < 0) return c;
    return c > index ? (c - index + num_shards - 1) / num_shards : 0;
  }
};

struct RepeatNode final : UnaryNode {
  std::int64_t count = -1;
  struct It final : IteratorImpl {
    const DatasetNode* input;
    IterPtr in;
    std::int64_t count, done_passes = 0;
    bool pass_empty = true;
    std::optional<Item> next() override {
      while (count < 0 || done_passes < count) {
        if (!in) {
          in = input->iterate();
          pass_empty = true;
        }
        if (auto item = in->next()) {
          pass_empty = false;
          return item;
        }
        in.reset();
        ++done_passes;
        if (pass_empty) break;  // an empty input would otherwise repeat forever
      }
      return std::nullopt;
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->input = input.get();
    it->count = count;
    return it;
  }
  std::int64_t cardinality() const override {
    const std::int64_t c = input->cardinality();
    if (c == 0) return 0;
    if (count < 0) return c == kUnknownCardinality ? kUnknownCardinality : kInfiniteCardinality;
    return c < 0 ? c : c * count;
  }
};

// ---- batch ----------------------------------------------------------------------------------
Tensor gather_rows(const Tensor& t, const std::vector<std::int64_t>& rows) {
  bool consecutive = true;
  for (std::size_t i = 1; i < rows.size() && consecutive; ++i)
    consecutive = rows[i] == rows[i - 1] + 1;
  if (consecutive) return t.slice(0, rows.front(), rows.back() + 1).contiguous();
  return gather(t, constant(rows, {std::int64_t(rows.size())}), 0);
}

Element stack_elements(std::vector<Element>& elems) {
  const std::size_t arity = elems[0].size();
  Element out;
  for (std::size_t c = 0; c < arity; ++c) {
    std::vector<Tensor> parts;
    parts.reserve(elems.size());
    for (std::size_t i = 0; i < elems.size(); ++i) {
      if (elems[i].size() != arity)
        fail("Dataset.batch", "elements have different numbers of components: element 0 has ",
             arity, ", element ", i, " has ", elems[i].size());
      const Tensor& t = elems[i][c];
      if (t.shape() != elems[0][c].shape() || t.dtype() != elems[0][c].dtype())
        fail("Dataset.batch", "component ", c, " of element ", i, " has shape ",
             shape_str(t.shape()), " ", dtype_name(t.dtype()), " but element 0's is ",
             shape_str(elems[0][c].shape()), " ", dtype_name(elems[0][c].dtype()),
             "; batch() needs equal shapes and dtypes");
      parts.push_back(t);
    }
    out.push_back(stack(parts, 0));
  }
  return out;
}

struct BatchNode final : UnaryNode {
  std::int64_t batch_size = 1;
  bool drop_remainder = false;
  struct It final : IteratorImpl {
    IterPtr in;
    std::int64_t batch_size;
    bool drop_remainder, in_done = false;
    std::optional<Item> next() override {
      if (in_done) return std::nullopt;
      std::vector<Item> items;
      // Reserved up to a bound: a batch size far beyond the data (INT64_MAX means "everything")
      // must not ask for that much memory up front.
      items.reserve(std::size_t(std::min<std::int64_t>(batch_size, 4096)));
      while (std::int64_t(items.size()) < batch_size) {
        auto item = in->next();
        if (!item) {
          in_done = true;
          break;
        }
        items.push_back(std::move(*item));
      }
      if (items.empty() || (drop_remainder && std::int64_t(items.size()) < batch_size))
        return std::nullopt;
      const Element* src = items[0].source;
      bool rows = src != nullptr;
      for (auto& it : items) rows = rows && it.row >= 0 && it.source == src;
      Item out;
      if (rows) {  // one gather (or slice) per component
        std::vector<std::int64_t> idx;
        idx.reserve(items.size());
        for (auto& it : items) idx.push_back(it.row);
        for (auto& t : *src) out.elem.push_back(gather_rows(t, idx));
      } else {
        std::vector<Element> elems;
        elems.reserve(items.size());
        for (auto& it : items) elems.push_back(std::move(it).materialize());
        out.elem = stack_elements(elems);
      }
      return out;
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->in = input->iterate();
    it->batch_size = batch_size;
    it->drop_remainder = drop_remainder;
    return it;
  }
  std::int64_t cardinality() const override {
    const std::int64_t c = input->cardinality();
    if (c < 0) return c;
    if (drop_remainder) return c / batch_size;
    return c == 0 ? 0 : 1 + (c - 1) / batch_size;  // no overflow for batch sizes near INT64_MAX
  }
};

// ---- map ------------------------------------------------------------------------------------
struct MapNode final : UnaryNode {
  ContextMapFn fn;
  int threads = 0;
  mutable std::atomic<std::int64_t> passes{0};

  struct Serial final : IteratorImpl {
    IterPtr in;
    const ContextMapFn* fn;
    MapContext ctx;
    std::optional<Item> next() override {
      auto item = in->next();
      if (!item) return std::nullopt;
      Item out{(*fn)(std::move(*item).materialize(), ctx)};
      ++ctx.index;
      return out;
    }
  };

  // The iterating thread pulls inputs in order and queues them; workers run fn; results are
  // handed out in input order. At most 2 * threads elements are in flight.
  struct Parallel final : IteratorImpl {
    struct Slot {
      Element in, out;
      MapContext ctx;
      bool done = false;
      std::exception_ptr error;
    };
    IterPtr in;
    const ContextMapFn* fn;
    std::int64_t epoch = 0, index = 0;
    bool in_done = false;
    std::mutex mu;
    std::condition_variable work_cv, done_cv;
    std::deque<std::shared_ptr<Slot>> pending;  // not yet taken by a worker
    std::deque<std::shared_ptr<Slot>> order;    // every slot in flight, in input order
    bool stop = false;
    std::vector<std::thread> workers;

    void start(int n) {
      for (int i = 0; i < n; ++i) workers.emplace_back([this] { work(); });
    }
    void work() {
      for (;;) {
        std::shared_ptr<Slot> s;
        {
          std::unique_lock lock(mu);
          work_cv.wait(lock, [&] { return stop || !pending.empty(); });
          if (stop) return;
          s = std::move(pending.front());
          pending.pop_front();
        }
        try {
          s->out = (*fn)(std::move(s->in), s->ctx);
        } catch (...) {
          s->error = std::current_exception();
        }
        {
          std::lock_guard lock(mu);
          s->done = true;
        }
        done_cv.notify_all();
      }
    }
    std::optional<Item> next() override {
      const std::size_t window = 2 * workers.size();
      while (!in_done && order.size() < window) {
        auto item = in->next();  // an input error propagates from here, in order enough
        if (!item) {
          in_done = true;
          break;
        }
        auto s = std::make_shared<Slot>();
        s->in = std::move(*item).materialize();
        s->ctx = {epoch, index++};
        {
          std::lock_guard lock(mu);
          pending.push_back(s);
          order.push_back(s);
        }
        work_cv.notify_one();
      }
      if (order.empty()) return std::nullopt;
      std::shared_ptr<Slot> s;
      {
        std::unique_lock lock(mu);
        done_cv.wait(lock, [&] { return order.front()->done; });
        s = std::move(order.front());
        order.pop_front();
      }
      if (s->error) std::rethrow_exception(s->error);
      return Item{std::move(s->out)};
    }
    ~Parallel() override {
      {
        std::lock_guard lock(mu);
        stop = true;
      }
      work_cv.notify_all();
      for (auto& t : workers) t.join();
    }
  };

  IterPtr iterate() const override {
    const std::int64_t epoch = passes.fetch_add(1);
    if (threads <= 1) {
      auto it = std::make_unique<Serial>();
      it->in = input->iterate();
      it->fn = &fn;
      it->ctx.epoch = epoch;
      return it;
    }
    auto it = std::make_unique<Parallel>();
    it->in = input->iterate();
    it->fn = &fn;
    it->epoch = epoch;
    it->start(threads);
    return it;
  }
  std::int64_t cardinality() const override { return input->cardinality(); }
};

// ---- prefetch -------------------------------------------------------------------------------
struct PrefetchNode final : UnaryNode {
  std::int64_t buffer_size = 2;
  struct It final : IteratorImpl {
    IterPtr in;  // used by the background thread only
    std::size_t capacity;
    std::mutex mu;
    std::condition_variable not_full, not_empty;
    std::deque<Item> queue;
    bool producer_done = false, stop = false;
    std::exception_ptr error;
    std::thread producer;

    void start() {
      producer = std::thread([this] {
        try {
          for (;;) {
            {
              std::unique_lock lock(mu);
              not_full.wait(lock, [&] { return stop || queue.size() < capacity; });
              if (stop) break;
            }
            auto item = in->next();  // outside the lock: the consumer keeps taking meanwhile
            std::lock_guard lock(mu);
            if (!item) break;
            queue.push_back(std::move(*item));
            not_empty.notify_one();
          }
        } catch (...) {
          std::lock_guard lock(mu);
          error = std::current_exception();
        }
        std::lock_guard lock(mu);
        producer_done = true;
        not_empty.notify_all();
      });
    }
    std::optional<Item> next() override {
      std::unique_lock lock(mu);
      not_empty.wait(lock, [&] { return !queue.empty() || producer_done; });
      if (!queue.empty()) {
        Item item = std::move(queue.front());
        queue.pop_front();
        not_full.notify_one();
        return item;
      }
      if (error) {
        auto e = error;
        error = nullptr;
        std::rethrow_exception(e);
      }
      return std::nullopt;
    }
    ~It() override {
      {
        std::lock_guard lock(mu);
        stop = true;
      }
      not_full.notify_all();
      if (producer.joinable()) producer.join();
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->in = input->iterate();  // on this thread, so per-pass state (epochs) is taken in order
    it->capacity = std::size_t(buffer_size);
    it->start();
    return it;
  }
  std::int64_t cardinality() const override { return input->cardinality(); }
};

// ---- cache ----------------------------------------------------------------------------------
struct CacheNode final : UnaryNode {
  mutable std::mutex mu;
  mutable std::shared_ptr<const std::vector<Element>> cached;

  struct Replay final : IteratorImpl {
    std::shared_ptr<const std::vector<Element>> data;
    std::size_t i = 0;
    std::optional<Item> next() override {
      if (i >= data->size()) return std::nullopt;
      return Item{(*data)[i++]};
    }
  };
  struct Fill final : IteratorImpl {
    const CacheNode* node;
    IterPtr in;
    std::vector<Element> seen;
    bool done = false;
    std::optional<Item> next() override {
      if (done) return std::nullopt;
      auto item = in->next();
      if (!item) {
        done = true;
        std::lock_guard lock(node->mu);
        if (!node->cached)
          node->cached = std::make_shared<const std::vector<Element>>(std::move(seen));
        return std::nullopt;
      }
      Element e = std::move(*item).materialize();
      seen.push_back(e);
      return Item{std::move(e)};
    }
  };
  IterPtr iterate() const override {
    {
      std::lock_guard lock(mu);
      if (cached) {
        auto it = std::make_unique<Replay>();
        it->data = cached;
        return it;
      }
    }
    auto it = std::make_unique<Fill>();
    it->node = this;
    it->in = input->iterate();
    return it;
  }
  std::int64_t cardinality() const override { return input->cardinality(); }
};

// ---- zip ------------------------------------------------------------------------------------
struct ZipNode final : DatasetNode {
  std::vector<NodePtr> inputs;
  struct It final : IteratorImpl {
    std::vector<IterPtr> ins;
    std::optional<Item> next() override {
      Item out;
      for (auto& in : ins) {
        auto item = in->next();
        if (!item) return std::nullopt;
        for (auto& t : std::move(*item).materialize()) out.elem.push_back(std::move(t));
      }
      return out;
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    for (auto& n : inputs) it->ins.push_back(n->iterate());
    return it;
  }
  std::int64_t cardinality() const override {
    std::int64_t best = kInfiniteCardinality;
    for (auto& n : inputs) {
      const std::int64_t c = n->cardinality();
      if (c == kUnknownCardinality) return kUnknownCardinality;
      if (c >= 0) best = best < 0 ? c : std::min(best, c);
    }
    return best;
  }
};

// ---- filter, concatenate, flat_map, interleave ---------------------------------------------
struct FilterNode final : UnaryNode {
  std::function<bool(const Element&)> pred;
  struct It final : IteratorImpl {
    const FilterNode* node;
    IterPtr in;
    std::optional<Item> next() override {
      while (auto item = in->next()) {
        // The predicate sees the tensors; a row of a source passes on as a row (batch gathers).
        Element e = item->row < 0 ? item->elem : Item(*item).materialize();
        if (node->pred(e)) return item;
      }
      return std::nullopt;
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->node = this;
    it->in = input->iterate();
    return it;
  }
  std::int64_t cardinality() const override {
    return input->cardinality() == 0 ? 0 : kUnknownCardinality;
  }
};

struct ConcatenateNode final : DatasetNode {
  NodePtr first, second;
  struct It final : IteratorImpl {
    const ConcatenateNode* node;
    IterPtr in;
    bool on_second = false;
    std::size_t arity = 0;
    bool arity_known = false;
    std::optional<Item> next() override {
      for (;;) {
        auto item = in->next();
        if (item) {
          const std::size_t n = item->row < 0 ? item->elem.size() : item->source->size();
          if (!arity_known) {
            arity = n;
            arity_known = true;
          } else if (n != arity) {
            fail("Dataset.concatenate", "the datasets' elements have ", arity, " and ", n,
                 " tensors; they must have the same structure");
          }
          return item;
        }
        if (on_second) return std::nullopt;
        on_second = true;
        in = node->second->iterate();
      }
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->node = this;
    it->in = first->iterate();
    return it;
  }
  std::int64_t cardinality() const override {
    const std::int64_t a = first->cardinality(), b = second->cardinality();
    if (a == kInfiniteCardinality || b == kInfiniteCardinality) return kInfiniteCardinality;
    if (a < 0 || b < 0) return kUnknownCardinality;
    return a + b;
  }
};

// flat_map is interleave with a cycle of one. The inner datasets' elements are materialised at
// once: their nodes die with the inner pass.
struct InterleaveNode final : UnaryNode {
  std::function<Dataset(Element)> fn;
  std::int64_t cycle_length = 1, block_length = 1;
  const char* who = "Dataset.interleave";
  struct Open {
    NodePtr node;  // keeps the inner dataset alive while its pass runs
    IterPtr it;
  };
  struct It final : IteratorImpl {
    const InterleaveNode* node;
    IterPtr in;
    std::vector<std::optional<Open>> cycle;
    std::size_t index = 0;
    std::int64_t in_block = 0, open = 0;
    bool input_done = false;
    void advance() {
      in_block = 0;
      index = (index + 1) % cycle.size();
    }
    // tf.data's order: at the current slot take an element, or open the next input element's
    // dataset there if it is empty, or move on when the input has ended.
    std::optional<Item> next() override {
      while (!input_done || open > 0) {
        auto& slot = cycle[index];
        if (slot) {
          if (auto item = slot->it->next()) {
            if (++in_block >= node->block_length) advance();
            return Item{std::move(*item).materialize()};
          }
          slot.reset();
          --open;
          advance();
        } else if (!input_done) {
          auto e = in->next();
          if (!e) {
            input_done = true;
            continue;
          }
          Dataset d = node->fn(std::move(*e).materialize());
          if (!d.node()) fail(node->who, "the function returned an empty Dataset handle");
          slot = Open{d.node(), d.node()->iterate()};
          ++open;
        } else {
          advance();
        }
      }
      return std::nullopt;
    }
  };
  IterPtr iterate() const override {
    auto it = std::make_unique<It>();
    it->node = this;
    it->in = input->iterate();
    it->cycle.resize(std::size_t(cycle_length));
    return it;
  }
  std::int64_t cardinality() const override {
    return input->cardinality() == 0 ? 0 : kUnknownCardinality;
  }
};

// Owns the top node, so a pass stays valid even when every Dataset handle is gone; `in` is
// destroyed (threads joined) before `node`.
struct Root final : IteratorImpl {
  NodePtr node;
  IterPtr in;
  std::optional<Item> next() override { return in->next(); }
};

template <class N>
std::shared_ptr<N> unary(const NodePtr& input) {
  auto n = std::make_shared<N>();
  n->input = input;
  return n;
}
}  // namespace

// ---- Dataset --------------------------------------------------------------------------------
Dataset Dataset::from_tensors(Element tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].defined()) fail("Dataset.from_tensors", "tensor ", i, " is undefined");
  auto n = std::make_shared<TensorsNode>();
  n->tensors = std::move(tensors);
  return Dataset(std::move(n));
}

Dataset Dataset::from_tensor_slices(Element tensors) {
  const char* who = "Dataset.from_tensor_slices";
  if (tensors.empty()) fail(who, "no tensors given");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) fail(who, "tensor ", i, " is undefined");
    if (tensors[i].rank() == 0)
      fail(who, "tensor ", i, " is a scalar; slicing needs at least one axis");
    if (tensors[i].shape()[0] != tensors[0].shape()[0])
      fail(who, "tensors have different sizes along axis 0: tensor 0 has shape ",
           shape_str(tensors[0].shape()), ", tensor ", i, " has shape ",
           shape_str(tensors[i].shape()));
  }
  auto n = std::make_shared<SlicesNode>();
  n->n = tensors[0].shape()[0];
  n->tensors = std::move(tensors);
  return Dataset(std::move(n));
}

Dataset Dataset::from_generator(GeneratorFn fn, std::int64_t cardinality) {
  if (!fn) fail("Dataset.from_generator", "the generator is an empty function");
  return from_generator_factory([fn] { return fn; }, cardinality);
}

Dataset Dataset::from_generator_factory(std::function<GeneratorFn()> make,
                                        std::int64_t cardinality) {
  if (!make) fail("Dataset.from_generator", "the generator factory is an empty function");
  auto n = std::make_shared<GeneratorNode>();
  n->make = std::move(make);
  n->card = cardinality;
  return Dataset(std::move(n));
}

Dataset Dataset::zip(std::vector<Dataset> datasets) {
  if (datasets.empty()) fail("Dataset.zip", "no datasets given");
  auto n = std::make_shared<ZipNode>();
  for (auto& d : datasets) n->inputs.push_back(d.node_);
  return Dataset(std::move(n));
}

Dataset Dataset::shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed,
                         bool reshuffle_each_iteration) const {
  if (buffer_size <= 0)
    fail("Dataset.shuffle", "buffer_size must be positive, got ", buffer_size);
  auto n = unary<ShuffleNode>(node_);
  n->buffer_size = buffer_size;
  // Without a seed, one from soma's global generator: reproducible under set_seed().
  n->seed = seed ? *seed
                 : std::uint64_t(random_uniform({}, 0.0, 4294967296.0, DType::f64).item<double>());
  n->reshuffle = reshuffle_each_iteration;
  return Dataset(std::move(n));
}

Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  if (batch_size <= 0) fail("Dataset.batch", "batch_size must be positive, got ", batch_size);
  auto n = unary<BatchNode>(node_);
  n->batch_size = batch_size;
  n->drop_remainder = drop_remainder;
  return Dataset(std::move(n));
}

Dataset Dataset::map(MapFn fn, int num_parallel_calls) const {
  if (!fn) fail("Dataset.map", "the function is empty");
  return map(ContextMapFn([fn = std::move(fn)](Element e, const MapContext&) {
               return fn(std::move(e));
             }),
             num_parallel_calls);
}

Dataset Dataset::map(ContextMapFn fn, int num_parallel_calls) const {
  if (!fn) fail("Dataset.map", "the function is empty");
  if (num_parallel_calls < kAutotune)
    fail("Dataset.map", "num_parallel_calls must be >= 0 or kAutotune (-1), got ",
         num_parallel_calls);
  auto n = unary<MapNode>(node_);
  n->fn = std::move(fn);
  n->threads = num_parallel_calls == kAutotune
                   ? int(std::max(1u, std::thread::hardware_concurrency()))
                   : num_parallel_calls;
  return Dataset(std::move(n));
}

Dataset Dataset::prefetch(std::int64_t buffer_size) const {
  if (buffer_size <= 0)
    fail("Dataset.prefetch", "buffer_size must be positive, got ", buffer_size);
  auto n = unary<PrefetchNode>(node_);
  n->buffer_size = buffer_size;
  return Dataset(std::move(n));
}

Dataset Dataset::cache() const { return Dataset(unary<CacheNode>(node_)); }

Dataset Dataset::repeat(std::int64_t count) const {
  auto n = unary<RepeatNode>(node_);
  n->count = count;
  return Dataset(std::move(n));
}

Dataset Dataset::take(std::int64_t count) const {
  if (count < 0) fail("Dataset.take", "count must be >= 0, got ", count);
  auto n = unary<TakeNode>(node_);
  n->count = count;
  return Dataset(std::move(n));
}

Dataset Dataset::skip(std::int64_t count) const {
  if (count < 0) fail("Dataset.skip", "count must be >= 0, got ", count);
  auto n = unary<SkipNode>(node_);
  n->count = count;
  return Dataset(std::move(n));
}

Dataset Dataset::shard(std::int64_t num_shards, std::int64_t index) const {
  if (num_shards <= 0) fail("Dataset.shard", "num_shards must be positive, got ", num_shards);
  if (index < 0 || index >= num_shards)
    fail("Dataset.shard", "index must be in [0, ", num_shards, "), got ", index);
  auto n = unary<ShardNode>(node_);
  n->num_shards = num_shards;
  n->index = index;
  return Dataset(std::move(n));
}

Dataset Dataset::filter(std::function<bool(const Element&)> pred) const {
  if (!pred) fail("Dataset.filter", "the predicate is empty");
  auto n = unary<FilterNode>(node_);
  n->pred = std::move(pred);
  return Dataset(std::move(n));
}

Dataset Dataset::concatenate(const Dataset& other) const {
  auto n = std::make_shared<ConcatenateNode>();
  n->first = node_;
  n->second = other.node_;
  return Dataset(std::move(n));
}

Dataset Dataset::flat_map(std::function<Dataset(Element)> fn) const {
  if (!fn) fail("Dataset.flat_map", "the function is empty");
  auto n = unary<InterleaveNode>(node_);
  n->fn = std::move(fn);
  n->who = "Dataset.flat_map";
  return Dataset(std::move(n));
}

Dataset Dataset::interleave(std::function<Dataset(Element)> fn, std::int64_t cycle_length,
                            std::int64_t block_length) const {
  if (!fn) fail("Dataset.interleave", "the function is empty");
  if (cycle_length <= 0)
    fail("Dataset.interleave", "cycle_length must be positive, got ", cycle_length);
  if (block_length <= 0)
    fail("Dataset.interleave", "block_length must be positive, got ", block_length);
  auto n = unary<InterleaveNode>(node_);
  n->fn = std::move(fn);
  n->cycle_length = cycle_length;
  n->block_length = block_length;
  return Dataset(std::move(n));
}

std::int64_t Dataset::cardinality() const { return node_->cardinality(); }

Dataset::Iterator Dataset::iterator() const {
  auto root = std::make_unique<Root>();
  root->node = node_;
  root->in = node_->iterate();
  return Iterator(std::move(root));
}

Dataset::Iterator Dataset::begin() const {
  Iterator it = iterator();
  ++it;
  return it;
}

// ---- Iterator -------------------------------------------------------------------------------
Dataset::Iterator::Iterator(std::unique_ptr<detail::IteratorImpl> impl) : impl_(std::move(impl)) {}
Dataset::Iterator::Iterator(Iterator&&) noexcept = default;
Dataset::Iterator& Dataset::Iterator::operator=(Iterator&&) noexcept = default;
Dataset::Iterator::~Iterator() = default;

std::optional<Element> Dataset::Iterator::next() {
  if (!impl_) return std::nullopt;
  auto item = impl_->next();
  if (!item) return std::nullopt;
  return std::move(*item).materialize();
}

}  // namespace soma::data
