#pragma once
// data::Dataset: an input pipeline in the style of tf.data.
//
//   auto [x_train, y_train, x_test, y_test] = data::load_fashion_mnist();
//   auto train = data::Dataset::from_tensor_slices({x_train, y_train})
//                    .shuffle(60000, /*seed=*/1)
//                    .batch(32)
//                    .map([](data::Element e) { e[0] = e[0].cast(DType::f32) / 255.0; return e; })
//                    .prefetch(2);
//   for (auto& batch : train) { ... batch[0], batch[1] ... }   // one epoch per loop
//
// A Dataset is a value: copying it is cheap and copies share the same immutable pipeline. Every
// stage returns a new Dataset. Each element is a tuple of tensors (an Element, e.g. {x, y}).
// Each `for` loop (or iterator()) is a fresh pass over the data; shuffle() reshuffles and map()
// sees a new epoch number on each pass.
//
// Threads: map(fn, n > 1) runs fn on n worker threads owned by the iterator and keeps the input
// order; prefetch(n) runs the stages before it on one background thread. Both stop and join
// their threads when the iterator is destroyed, also in the middle of a pass. An exception thrown
// by fn or by a generator is rethrown on the thread that asks for the next element.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "soma/tensor.hpp"

namespace soma::data {

using Element = std::vector<Tensor>;

// cardinality() values that are not counts.
inline constexpr std::int64_t kUnknownCardinality = -1;
inline constexpr std::int64_t kInfiniteCardinality = -2;

// What map() tells a two-argument function about the element it is given, so that random
// augmentation can be deterministic whatever the thread count: seed(base) depends only on
// (base, epoch, index), never on which thread runs the function or when.
struct MapContext {
  std::int64_t epoch = 0;  // the how-many-th pass of this map stage (0 first)
  std::int64_t index = 0;  // the element's position in this pass
  std::uint64_t seed(std::uint64_t base) const;
};

using MapFn = std::function<Element(Element)>;
using ContextMapFn = std::function<Element(Element, const MapContext&)>;
using GeneratorFn = std::function<std::optional<Element>()>;

// map(fn, kAutotune): one worker per hardware thread.
inline constexpr int kAutotune = -1;

namespace detail {
struct DatasetNode;
struct IteratorImpl;
}  // namespace detail

class Dataset {
 public:
  class Iterator;
  struct Sentinel {};

  // ---- sources ----
  // One element: the tensors as given.
  static Dataset from_tensors(Element tensors);
  // One element per index along axis 0 of every tensor (all must have the same extent there).
  // Batching such a dataset (also after shuffle/take/skip/shard/repeat) gathers each batch's rows
  // in one op per tensor instead of stacking per-row tensors.
  static Dataset from_tensor_slices(Element tensors);
  // Calls fn for each element until it returns nullopt. fn is called again from the start of each
  // pass, so it must restart itself if several passes are wanted (or use a factory:
  // from_generator_factory). cardinality: the element count if known.
  static Dataset from_generator(GeneratorFn fn, std::int64_t cardinality = kUnknownCardinality);
  // make() is called at the start of each pass and returns that pass's generator.
  static Dataset from_generator_factory(std::function<GeneratorFn()> make,
                                        std::int64_t cardinality = kUnknownCardinality);
  // Elements i of every dataset side by side, flattened into one tuple (datasets with different
  // arities are fine: {x} zip {y, w} gives {x, y, w}). Stops at the shortest dataset.
  static Dataset zip(std::vector<Dataset> datasets);

  // ---- stages ----
  // tf.data's buffered shuffle: keeps buffer_size elements and emits a random one of them,
  // refilling from the input. buffer_size >= the dataset's size gives a uniform permutation; 1
  // keeps the order. Without a seed one is drawn from soma's global generator (set_seed) when
  // the stage is made. reshuffle_each_iteration: a new order on every pass (seeded by
  // (seed, pass)); otherwise every pass has the same order.
  Dataset shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;
  // Stacks batch_size consecutive elements along a new axis 0; the last batch may be smaller
  // unless drop_remainder.
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;
  // fn(element) or fn(element, context). num_parallel_calls <= 1: fn runs on the iterating
  // thread; n > 1: on n worker threads, in order; kAutotune: one per hardware thread.
  Dataset map(MapFn fn, int num_parallel_calls = 0) const;
  Dataset map(ContextMapFn fn, int num_parallel_calls = 0) const;
  // A background thread keeps up to buffer_size elements ready (bounded queue).
  Dataset prefetch(std::int64_t buffer_size = 2) const;
  // Keeps the elements in memory after the first complete pass; later passes read the copy and
  // do not run the stages before cache() again. An incomplete pass caches nothing.
  Dataset cache() const;
  // count < 0: forever.
  Dataset repeat(std::int64_t count = -1) const;
  Dataset take(std::int64_t count) const;
  Dataset skip(std::int64_t count) const;
  // Every num_shards-th element, starting with element `index`.
  Dataset shard(std::int64_t num_shards, std::int64_t index) const;
  Dataset zip(const Dataset& other) const { return zip({*this, other}); }
  // tf.data's filter: the elements for which pred is true (cardinality unknown).
  Dataset filter(std::function<bool(const Element&)> pred) const;
  // tf.data's flat_map: fn(element) gives a Dataset per input element; their elements one after
  // another, in order.
  Dataset flat_map(std::function<Dataset(Element)> fn) const;
  // This dataset's elements, then other's; both must have the same number of tensors per
  // element.
  Dataset concatenate(const Dataset& other) const;
  // tf.data's interleave: fn(element) gives a Dataset per input element; cycle_length of them
  // are open at a time and block_length consecutive elements are taken from each in turn; when
  // one ends, the next input element's dataset takes its place in the cycle. cycle_length 1 is
  // flat_map. Runs on the iterating thread (no parallel calls).
  Dataset interleave(std::function<Dataset(Element)> fn, std::int64_t cycle_length,
                     std::int64_t block_length = 1) const;

  // Number of elements of a pass, or kUnknownCardinality / kInfiniteCardinality.
  std::int64_t cardinality() const;

  // ---- iteration ----
  Iterator iterator() const;  // a new pass
  Iterator begin() const;
  Sentinel end() const { return {}; }

  const std::shared_ptr<const detail::DatasetNode>& node() const { return node_; }

 private:
  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node) : node_(std::move(node)) {}
  std::shared_ptr<const detail::DatasetNode> node_;
};

// One pass over a Dataset. Move-only; destroying it stops its threads.
class Dataset::Iterator {
 public:
  using value_type = Element;
  using difference_type = std::ptrdiff_t;

  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  // The next element, or nullopt at the end of the pass.
  std::optional<Element> next();

  Element& operator*() { return *current_; }
  Element* operator->() { return &*current_; }
  Iterator& operator++() {
    current_ = next();
    return *this;
  }
  bool operator==(const Sentinel&) const { return !current_.has_value(); }

 private:
  friend class Dataset;
  explicit Iterator(std::unique_ptr<detail::IteratorImpl> impl);
  std::unique_ptr<detail::IteratorImpl> impl_;
  std::optional<Element> current_;
};

}  // namespace soma::data
