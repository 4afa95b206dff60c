// data::Dataset: sources, each stage's semantics against hand-built expectations, threads
// (map workers, prefetch), error propagation, augmentation on tiny images with known outputs,
// and Model::fit on a Dataset.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "soma/data/augment.hpp"
#include "soma/data/dataset.hpp"
#include "soma/metrics.hpp"
#include "soma/model/model.hpp"
#include "soma/model/sequential.hpp"
#include "soma/nn/layers.hpp"
#include "soma/nn/losses.hpp"
#include "soma/ops.hpp"
#include "soma/optim/optimizers.hpp"
#include "test_support.hpp"

using namespace soma;
using data::Dataset;
using data::Element;
namespace aug = soma::data::augment;

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const soma::Error& e) {
    return e.what();
  }
  return "(no error)";
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// 0, 1, ..., n-1 as i64, with labels 10 * i.
Dataset numbers(std::int64_t n) {
  return Dataset::from_tensor_slices(
      {arange(double(n), DType::i64), arange(0.0, 10.0 * double(n), 10.0, DType::i64)});
}

// The first component of every element, flattened, in order.
std::vector<std::int64_t> values(const Dataset& ds) {
  std::vector<std::int64_t> out;
  for (auto& e : ds)
    for (auto v : e[0].to_vector<std::int64_t>()) out.push_back(v);
  return out;
}
std::vector<std::int64_t> iota(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> v(std::size_t(hi - lo));
  std::iota(v.begin(), v.end(), lo);
  return v;
}
std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// A generator dataset counting 0..n-1 (restarts each pass), as a source without the fast path.
Dataset counter(std::int64_t n, std::shared_ptr<std::atomic<int>> calls = nullptr) {
  return Dataset::from_generator_factory(
      [n, calls] {
        auto i = std::make_shared<std::int64_t>(0);
        return data::GeneratorFn([n, i, calls]() -> std::optional<Element> {
          if (*i >= n) return std::nullopt;
          if (calls) ++*calls;
          return Element{constant(std::vector<std::int64_t>{(*i)++}, Shape{})};
        });
      },
      n);
}

}  // namespace

// ---- sources --------------------------------------------------------------------------------
TEST(DatasetSources, TensorSlicesYieldRowsInOrder) {
  std::vector<Element> got;
  for (auto& e : numbers(4)) got.push_back(e);
  ASSERT_EQ(got.size(), 4u);
  for (std::int64_t i = 0; i < 4; ++i) {
    ASSERT_EQ(got[std::size_t(i)].size(), 2u);
    EXPECT_EQ(got[std::size_t(i)][0].rank(), 0);
    EXPECT_EQ(got[std::size_t(i)][0].item<std::int64_t>(), i);
    EXPECT_EQ(got[std::size_t(i)][1].item<std::int64_t>(), 10 * i);
  }
}

TEST(DatasetSources, TensorSlicesOfMatricesYieldRows) {
  Tensor x = constant<float>({{1, 2}, {3, 4}, {5, 6}});
  auto it = Dataset::from_tensor_slices({x}).iterator();
  auto e = it.next();
  ASSERT_TRUE(e);
  EXPECT_EQ((*e)[0].shape(), Shape({2}));
  EXPECT_EQ((*e)[0].to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(DatasetSources, TensorSlicesRejectDifferentLengths) {
  std::string msg = error_of([] {
    Dataset::from_tensor_slices({zeros({3, 2}), zeros({4})});
  });
  EXPECT_TRUE(contains(msg, "from_tensor_slices")) << msg;
  EXPECT_TRUE(contains(msg, "[3, 2]") && contains(msg, "[4]")) << msg;
}

TEST(DatasetSources, FromTensorsYieldsOneElement) {
  Dataset ds = Dataset::from_tensors({zeros({3, 2}), zeros({3})});
  EXPECT_EQ(ds.cardinality(), 1);
  int n = 0;
  for (auto& e : ds) {
    EXPECT_EQ(e[0].shape(), Shape({3, 2}));
    ++n;
  }
  EXPECT_EQ(n, 1);
}

TEST(DatasetSources, GeneratorRunsUntilNullopt) {
  EXPECT_EQ(values(counter(5)), iota(0, 5));
  EXPECT_EQ(values(counter(5)), iota(0, 5));  // a fresh pass restarts the factory
}

TEST(DatasetSources, EachLoopIsAFreshPass) {
  Dataset ds = numbers(3);
  EXPECT_EQ(values(ds), iota(0, 3));
  EXPECT_EQ(values(ds), iota(0, 3));
}

// ---- batch ----------------------------------------------------------------------------------
TEST(DatasetBatch, KeepsTheRemainder) {
  std::vector<std::int64_t> sizes;
  for (auto& b : numbers(10).batch(4)) sizes.push_back(b[0].shape()[0]);
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{4, 4, 2}));
  EXPECT_EQ(numbers(10).batch(4).cardinality(), 3);
  EXPECT_EQ(values(numbers(10).batch(4)), iota(0, 10));
}

TEST(DatasetBatch, DropRemainderDropsTheShortBatch) {
  std::vector<std::int64_t> sizes;
  for (auto& b : numbers(10).batch(4, true)) sizes.push_back(b[0].shape()[0]);
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(numbers(10).batch(4, true).cardinality(), 2);
}

TEST(DatasetBatch, StacksEveryComponent) {
  auto it = numbers(5).batch(3).iterator();
  auto b = *it.next();
  EXPECT_EQ(b[0].shape(), Shape({3}));
  EXPECT_EQ(b[1].to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 10, 20}));
}

TEST(DatasetBatch, GeneratorPathMatchesSlicePath) {
  // Stacking (generator) and gathering (shuffled slices) give the same batches.
  Tensor x = arange(24.0).reshape({6, 2, 2});
  std::vector<Tensor> rows = unstack(x, 0);
  auto i = std::make_shared<std::size_t>(0);
  Dataset gen = Dataset::from_generator([rows, i]() -> std::optional<Element> {
    if (*i >= rows.size()) return std::nullopt;
    return Element{rows[(*i)++]};
  });
  std::vector<Tensor> a, b;
  for (auto& e : gen.batch(4)) a.push_back(e[0]);
  for (auto& e : Dataset::from_tensor_slices({x}).shuffle(1, 0).batch(4)) b.push_back(e[0]);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(a[k].shape(), b[k].shape());
    EXPECT_EQ(a[k].to_vector<float>(), b[k].to_vector<float>());
  }
}

TEST(DatasetBatch, ShuffledSlicesGatherTheRightRows) {
  Tensor x = arange(12.0).reshape({6, 2});
  Tensor y = arange(6.0, DType::i64);
  for (auto& b : Dataset::from_tensor_slices({x, y}).shuffle(6, 3).batch(4)) {
    auto ids = b[1].to_vector<std::int64_t>();
    auto xs = b[0].to_vector<float>();
    for (std::size_t k = 0; k < ids.size(); ++k) {
      EXPECT_EQ(xs[2 * k], float(2 * ids[k]));
      EXPECT_EQ(xs[2 * k + 1], float(2 * ids[k] + 1));
    }
  }
}

TEST(DatasetBatch, RejectsNonPositiveBatchSize) {
  std::string msg = error_of([] { numbers(3).batch(0); });
  EXPECT_TRUE(contains(msg, "Dataset.batch: batch_size must be positive, got 0")) << msg;
}

TEST(DatasetBatch, RejectsElementsOfDifferentShapes) {
  auto i = std::make_shared<int>(0);
  Dataset ds = Dataset::from_generator([i]() -> std::optional<Element> {
    if (*i >= 2) return std::nullopt;
    return Element{zeros({(*i)++ + 1})};
  });
  std::string msg = error_of([&] { values(ds.batch(2)); });
  EXPECT_TRUE(contains(msg, "Dataset.batch") && contains(msg, "[2]") && contains(msg, "[1]"))
      << msg;
}

// ---- shuffle --------------------------------------------------------------------------------
TEST(DatasetShuffle, IsAPermutation) {
  auto v = values(numbers(100).shuffle(100, 7));
  EXPECT_EQ(sorted(v), iota(0, 100));
  EXPECT_NE(v, iota(0, 100));
}

TEST(DatasetShuffle, SmallBufferIsStillAPermutation) {
  auto v = values(numbers(50).shuffle(5, 7));
  EXPECT_EQ(sorted(v), iota(0, 50));
  // With a buffer of 5, element i can leave at position >= i - 4 at the earliest.
  for (std::size_t p = 0; p < v.size(); ++p) EXPECT_LE(v[p], std::int64_t(p) + 4);
}

TEST(DatasetShuffle, IsReproducibleWithASeed) {
  EXPECT_EQ(values(numbers(50).shuffle(50, 3)), values(numbers(50).shuffle(50, 3)));
  EXPECT_NE(values(numbers(50).shuffle(50, 3)), values(numbers(50).shuffle(50, 4)));
}

TEST(DatasetShuffle, ReshufflesEachEpoch) {
  Dataset ds = numbers(50).shuffle(50, 3);
  auto first = values(ds), second = values(ds);
  EXPECT_NE(first, second);
  EXPECT_EQ(sorted(second), iota(0, 50));
}

TEST(DatasetShuffle, SameOrderEachEpochWithoutReshuffle) {
  Dataset ds = numbers(50).shuffle(50, 3, false);
  EXPECT_EQ(values(ds), values(ds));
}

TEST(DatasetShuffle, BufferOfOneKeepsTheOrder) {
  EXPECT_EQ(values(numbers(20).shuffle(1, 3)), iota(0, 20));
}

TEST(DatasetShuffle, RepeatReshufflesEachRepetition) {
  auto v = values(numbers(30).shuffle(30, 1).repeat(2));
  ASSERT_EQ(v.size(), 60u);
  std::vector<std::int64_t> a(v.begin(), v.begin() + 30), b(v.begin() + 30, v.end());
  EXPECT_EQ(sorted(a), iota(0, 30));
  EXPECT_EQ(sorted(b), iota(0, 30));
  EXPECT_NE(a, b);
}

// ---- map ------------------------------------------------------------------------------------
TEST(DatasetMap, AppliesTheFunctionToEachElement) {
  auto ds = numbers(4).map([](Element e) {
    e[0] = e[0] * 2.0;
    return e;
  });
  std::vector<double> got;
  for (auto& e : ds) got.push_back(e[0].item<double>());
  EXPECT_EQ(got, (std::vector<double>{0, 2, 4, 6}));
}

TEST(DatasetMap, FourThreadsPreserveOrder) {
  // Later elements finish first: the output must still come in input order.
  auto slow_first = [](Element e) {
    const auto v = e[0].item<std::int64_t>();
    std::this_thread::sleep_for(std::chrono::microseconds(200 * ((7 - v % 8))));
    return e;
  };
  EXPECT_EQ(values(numbers(40).map(slow_first, 4)), iota(0, 40));
  EXPECT_EQ(values(numbers(40).map(slow_first, data::kAutotune)), iota(0, 40));
}

TEST(DatasetMap, ParallelGivesTheSameSequenceAsSerial) {
  auto fn = [](Element e) {
    e[0] = e[0] * e[0];
    return e;
  };
  Dataset base = numbers(37).shuffle(37, 5, false);
  EXPECT_EQ(values(base.map(fn, 3).batch(4)), values(base.map(fn).batch(4)));
}

TEST(DatasetMap, ContextIsTheElementIndexAndEpoch) {
  std::vector<std::int64_t> idx, ep;
  Dataset ds = numbers(3).map([](Element e, const data::MapContext& ctx) {
    return Element{constant(std::vector<std::int64_t>{ctx.epoch * 100 + ctx.index}, Shape{})};
  }, 2);
  EXPECT_EQ(values(ds), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(values(ds), (std::vector<std::int64_t>{100, 101, 102}));
}

TEST(DatasetMap, RandomAugmentationDoesNotDependOnThreadCount) {
  Tensor imgs = arange(5 * 4 * 4.0).reshape({5, 4, 4, 1});
  auto fn = [](Element e, const data::MapContext& ctx) {
    e[0] = aug::random_rotation(e[0], {.max_degrees = 30, .seed = ctx.seed(9)});
    return e;
  };
  Dataset base = Dataset::from_tensor_slices({imgs});
  std::vector<std::vector<float>> a, b;
  for (auto& e : base.map(fn)) a.push_back(e[0].to_vector<float>());
  for (auto& e : base.map(fn, 4)) b.push_back(e[0].to_vector<float>());
  EXPECT_EQ(a, b);
}

TEST(DatasetMap, ErrorInFunctionReachesTheConsumer) {
  auto bad = [](Element e) -> Element {
    if (e[0].item<std::int64_t>() == 5) throw std::runtime_error("bad element 5");
    return e;
  };
  for (int threads : {0, 4}) {
    std::vector<std::int64_t> seen;
    std::string msg;
    try {
      for (auto& e : numbers(20).map(bad, threads)) seen.push_back(e[0].item<std::int64_t>());
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg, "bad element 5") << threads;
    EXPECT_EQ(seen, iota(0, 5)) << threads;  // everything before the failure, in order
  }
}

// ---- prefetch -------------------------------------------------------------------------------
TEST(DatasetPrefetch, GivesTheSameSequence) {
  Dataset base = numbers(100).shuffle(100, 2, false).batch(7);
  EXPECT_EQ(values(base.prefetch(2)), values(base));
  EXPECT_EQ(values(base.prefetch(1).map([](Element e) { return e; }, 3).prefetch(5)),
            values(base));
}

TEST(DatasetPrefetch, EarlyDestructionDoesNotHang) {
  // An endless source with a full queue: the producer is blocked when the iterator goes away.
  Dataset ds = numbers(10).repeat().prefetch(2);
  for (int round = 0; round < 20; ++round) {
    auto it = ds.iterator();
    EXPECT_TRUE(it.next());
  }
  int n = 0;
  for (auto& e : ds.map([](Element e) { return e; }, 4).prefetch(3)) {
    (void)e;
    if (++n == 25) break;
  }
  EXPECT_EQ(n, 25);
}

TEST(DatasetPrefetch, SourceErrorReachesTheConsumer) {
  auto i = std::make_shared<int>(0);
  Dataset ds = Dataset::from_generator([i]() -> std::optional<Element> {
    if (*i == 3) throw std::runtime_error("generator broke");
    return Element{constant(std::vector<std::int64_t>{(*i)++}, Shape{})};
  });
  std::vector<std::int64_t> seen;
  std::string msg;
  try {
    for (auto& e : ds.prefetch(2)) seen.push_back(e[0].item<std::int64_t>());
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, "generator broke");
  EXPECT_EQ(seen, iota(0, 3));
}

TEST(DatasetPrefetch, RejectsNonPositiveBuffer) {
  EXPECT_TRUE(contains(error_of([] { numbers(3).prefetch(0); }), "Dataset.prefetch"));
}

// ---- cache ----------------------------------------------------------------------------------
TEST(DatasetCache, SecondPassIsIdenticalWithoutRecomputation) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto map_calls = std::make_shared<std::atomic<int>>(0);
  Dataset ds = counter(6, calls)
                   .map([map_calls](Element e) {
                     ++*map_calls;
                     return e;
                   })
                   .cache();
  auto first = values(ds);
  EXPECT_EQ(*calls, 6);
  EXPECT_EQ(*map_calls, 6);
  EXPECT_EQ(values(ds), first);
  EXPECT_EQ(*calls, 6);
  EXPECT_EQ(*map_calls, 6);
}

TEST(DatasetCache, IncompletePassCachesNothing) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Dataset ds = counter(6, calls).cache();
  {
    auto it = ds.iterator();
    it.next();
  }
  EXPECT_EQ(values(ds), iota(0, 6));
  EXPECT_EQ(*calls, 7);
}

// ---- repeat / take / skip / shard / zip -----------------------------------------------------
TEST(DatasetRepeat, RepeatsCountTimes) {
  auto v = values(numbers(3).repeat(2));
  EXPECT_EQ(v, (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(numbers(3).repeat(2).cardinality(), 6);
}

TEST(DatasetRepeat, ForeverIsInfiniteAndTakeEndsIt) {
  EXPECT_EQ(numbers(3).repeat().cardinality(), data::kInfiniteCardinality);
  EXPECT_EQ(values(numbers(3).repeat().take(7)), (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(numbers(3).repeat().take(7).cardinality(), 7);
}

TEST(DatasetRepeat, EmptyInputDoesNotLoopForever) {
  EXPECT_TRUE(values(numbers(3).take(0).repeat()).empty());
}

TEST(DatasetTakeSkip, TakeAndSkipSelectRanges) {
  EXPECT_EQ(values(numbers(10).take(3)), iota(0, 3));
  EXPECT_EQ(values(numbers(10).skip(7)), iota(7, 10));
  EXPECT_EQ(values(numbers(10).skip(3).take(2)), iota(3, 5));
  EXPECT_EQ(values(numbers(3).take(10)), iota(0, 3));
  EXPECT_TRUE(values(numbers(3).skip(10)).empty());
  EXPECT_EQ(numbers(10).skip(3).cardinality(), 7);
  EXPECT_EQ(numbers(3).skip(10).cardinality(), 0);
}

TEST(DatasetShard, TakesEveryNthElement) {
  EXPECT_EQ(values(numbers(10).shard(3, 0)), (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(values(numbers(10).shard(3, 2)), (std::vector<std::int64_t>{2, 5, 8}));
  EXPECT_EQ(numbers(10).shard(3, 0).cardinality(), 4);
  EXPECT_EQ(numbers(10).shard(3, 2).cardinality(), 3);
}

TEST(DatasetShard, RejectsIndexOutOfRange) {
  std::string msg = error_of([] { numbers(10).shard(3, 3); });
  EXPECT_TRUE(contains(msg, "Dataset.shard: index must be in [0, 3), got 3")) << msg;
  EXPECT_TRUE(contains(error_of([] { numbers(10).shard(0, 0); }), "num_shards"));
}

TEST(DatasetZip, PairsElementsAndStopsAtTheShortest) {
  Dataset a = Dataset::from_tensor_slices({arange(5.0, DType::i64)});
  Dataset b = Dataset::from_tensor_slices({arange(10.0, 13.0, 1.0, DType::i64)});
  std::vector<std::pair<std::int64_t, std::int64_t>> got;
  for (auto& e : Dataset::zip({a, b})) {
    ASSERT_EQ(e.size(), 2u);
    got.push_back({e[0].item<std::int64_t>(), e[1].item<std::int64_t>()});
  }
  EXPECT_EQ(got, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 10}, {1, 11}, {2, 12}}));
  EXPECT_EQ(Dataset::zip({a, b}).cardinality(), 3);
}

TEST(DatasetZip, DifferentAritiesAreFlattened) {
  Dataset one = Dataset::from_tensor_slices({arange(3.0, DType::i64)});
  Dataset two = numbers(3);
  auto it = one.zip(two).iterator();
  auto e = *it.next();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[2].item<std::int64_t>(), 0);
  EXPECT_EQ(values(one.zip(two).batch(2)), iota(0, 3));
}

TEST(DatasetCardinality, UnknownForGenerators) {
  EXPECT_EQ(Dataset::from_generator([]() -> std::optional<Element> { return std::nullopt; })
                .batch(2)
                .cardinality(),
            data::kUnknownCardinality);
  EXPECT_EQ(numbers(60000).shuffle(1000, 1).batch(32).prefetch(2).cardinality(), 1875);
}

// ---- augmentation ---------------------------------------------------------------------------
namespace {
Tensor img3x3() { return arange(1.0, 10.0).reshape({3, 3}); }  // [[1,2,3],[4,5,6],[7,8,9]]
}  // namespace

TEST(Augment, FlipWithProbabilityOneMirrorsColumns) {
  Tensor out = aug::random_flip_left_right(img3x3(), {.probability = 1.0});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{3, 2, 1, 6, 5, 4, 9, 8, 7}));
  Tensor ud = aug::random_flip_up_down(img3x3(), {.probability = 1.0});
  EXPECT_EQ(ud.to_vector<float>(), (std::vector<float>{7, 8, 9, 4, 5, 6, 1, 2, 3}));
}

TEST(Augment, FlipWithProbabilityZeroIsIdentity) {
  Tensor out = aug::random_flip_left_right(img3x3(), {.probability = 0.0});
  EXPECT_EQ(out.to_vector<float>(), img3x3().to_vector<float>());
}

TEST(Augment, FlipMirrorsTheWidthAxisInBothLayouts) {
  Tensor hwc = arange(12.0).reshape({2, 3, 2});  // H=2, W=3, C=2
  Tensor got = aug::random_flip_left_right(hwc, {.probability = 1.0});
  EXPECT_EQ(got.to_vector<float>(), (std::vector<float>{4, 5, 2, 3, 0, 1, 10, 11, 8, 9, 6, 7}));
  Tensor chw = arange(12.0).reshape({2, 2, 3});  // C=2, H=2, W=3
  Tensor got2 = aug::random_flip_left_right(chw, {.probability = 1.0, .layout = aug::Layout::chw});
  EXPECT_EQ(got2.to_vector<float>(), (std::vector<float>{2, 1, 0, 5, 4, 3, 8, 7, 6, 11, 10, 9}));
}

TEST(Augment, FlipDecidesPerImageAndIsSeeded) {
  Tensor batch = arange(2.0 * 64).reshape({64, 1, 2, 1});
  Tensor a = aug::random_flip_left_right(batch, {.seed = 5});
  Tensor b = aug::random_flip_left_right(batch, {.seed = 5});
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  auto v = a.to_vector<float>();
  int flipped = 0;
  for (int n = 0; n < 64; ++n) flipped += v[std::size_t(2 * n)] > v[std::size_t(2 * n + 1)];
  EXPECT_GT(flipped, 10);
  EXPECT_LT(flipped, 54);
}

TEST(Augment, CropWithPaddingIsAShiftedWindowOfThePaddedImage) {
  // Each result must equal the image shifted by (dy, dx) in [-1, 1] with zeros coming in.
  Tensor img = img3x3();
  std::set<std::pair<int, int>> shifts;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    auto got = aug::random_crop(img, {.padding = 1, .seed = seed}).to_vector<float>();
    bool matched = false;
    for (int dy = -1; dy <= 1 && !matched; ++dy)
      for (int dx = -1; dx <= 1 && !matched; ++dx) {
        std::vector<float> want(9);
        for (int y = 0; y < 3; ++y)
          for (int x = 0; x < 3; ++x) {
            const int sy = y + dy, sx = x + dx;
            want[std::size_t(3 * y + x)] =
                sy >= 0 && sy < 3 && sx >= 0 && sx < 3 ? float(1 + 3 * sy + sx) : 0.f;
          }
        if (want == got) {
          matched = true;
          shifts.insert({dy, dx});
        }
      }
    EXPECT_TRUE(matched) << seed;
  }
  EXPECT_EQ(shifts.size(), 9u);  // every offset occurs
}

TEST(Augment, CropWithoutPaddingIsIdentity) {
  EXPECT_EQ(aug::random_crop(img3x3(), {.padding = 0}).to_vector<float>(),
            img3x3().to_vector<float>());
}

TEST(Augment, TranslationShiftsWithinTheLimits) {
  Tensor img = zeros({5, 5});
  img = img + constant(std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0,
                                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                       {5, 5});
  std::set<std::pair<int, int>> where;
  for (std::uint64_t seed = 0; seed < 80; ++seed) {
    auto v = aug::random_translation(img, {.max_dx = 1, .max_dy = 2, .seed = seed})
                 .to_vector<float>();
    ASSERT_EQ(std::count(v.begin(), v.end(), 1.f), 1);
    const auto pos = std::find(v.begin(), v.end(), 1.f) - v.begin();
    const int y = int(pos / 5), x = int(pos % 5);
    EXPECT_LE(std::abs(y - 2), 2);
    EXPECT_LE(std::abs(x - 2), 1);
    where.insert({y, x});
  }
  EXPECT_EQ(where.size(), 15u);
}

TEST(Augment, RotateByNinetyDegreesNearest) {
  // Counterclockwise: the right column becomes the top row.
  Tensor out = aug::rotate(img3x3(), 90.0, aug::Interpolation::nearest);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{3, 6, 9, 2, 5, 8, 1, 4, 7}));
}

TEST(Augment, RotateByZeroIsIdentityBilinear) {
  Tensor out = aug::rotate(img3x3(), 0.0);
  EXPECT_TRUE(soma::testing::all_close(out, img3x3(), 1e-6, 1e-6));
}

TEST(Augment, BilinearRotationInterpolatesNeighbours) {
  // 45 degrees: the top-centre output pixel samples the centre of pixels 1, 2, 4, 5 region.
  Tensor out = aug::rotate(img3x3().cast(DType::f64), 45.0);
  const double s = std::sqrt(0.5);
  // Source of (y=0, x=1): fx = 1 - s * (-1) = 1 + s, fy = 1 + s * 0 + s * (-1) = 1 - s.
  const double fx = 1 + s, fy = 1 - s;
  auto px = [](int y, int x) { return double(1 + 3 * y + x); };
  const int y0 = 0, x0 = 1;
  const double ty = fy - y0, tx = fx - x0;
  const double want = (1 - ty) * ((1 - tx) * px(y0, x0) + tx * px(y0, x0 + 1)) +
                      ty * ((1 - tx) * px(y0 + 1, x0) + tx * px(y0 + 1, x0 + 1));
  EXPECT_NEAR(out.at<double>({0, 1}), want, 1e-12);
  EXPECT_NEAR(out.at<double>({1, 1}), 5.0, 1e-12);  // the centre stays
}

TEST(Augment, RandomRotationStaysWithinTheLimit) {
  // A zero limit never changes the image.
  EXPECT_TRUE(soma::testing::all_close(aug::random_rotation(img3x3(), {.max_degrees = 0.0}), img3x3(),
                                 1e-6, 1e-6));
}

TEST(Augment, NormalizePerChannel) {
  Tensor hwc = constant<float>({{{1, 10}, {3, 30}}});  // H=1, W=2, C=2
  Tensor out = aug::normalize(hwc, {2, 20}, {1, 10});
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{-1, -1, 1, 1}));
  Tensor chw = constant<float>({{{1, 3}}, {{10, 30}}});  // C=2, H=1, W=2
  Tensor out2 = aug::normalize(chw, {2, 20}, {1, 10}, aug::Layout::chw);
  EXPECT_EQ(out2.to_vector<float>(), (std::vector<float>{-1, 1, -1, 1}));
}

TEST(Augment, IntegerImagesKeepTheirDtype) {
  Tensor u8 = img3x3().cast(DType::u8);
  Tensor out = aug::rotate(u8, 90.0, aug::Interpolation::nearest);
  EXPECT_EQ(out.dtype(), DType::u8);
  EXPECT_EQ(out.to_vector<int>(), (std::vector<int>{3, 6, 9, 2, 5, 8, 1, 4, 7}));
}

TEST(Augment, BadInputsNameTheOp) {
  EXPECT_TRUE(contains(error_of([] { aug::random_flip_left_right(zeros({4})); }),
                       "random_flip_left_right: expected an image"));
  EXPECT_TRUE(contains(error_of([] { aug::normalize(zeros({2, 2, 3}), {1, 2}, {1}); }),
                       "normalize: mean has 2 values for 3 channels"));
  EXPECT_TRUE(contains(error_of([] { aug::random_crop(zeros({2, 2}), {.padding = -1}); }),
                       "random_crop: padding must be >= 0"));
}

// ---- Model::fit on a Dataset ----------------------------------------------------------------
namespace {
std::vector<double> losses_of(const nn::History& h) {
  return h.history.at("loss");
}
nn::Sequential tiny_model() {
  set_seed(11);
  nn::Sequential m{nn::Input({4}), nn::Dense(6, nn::tanh), nn::Dense(3)};
  m.compile(optim::SGD({.learning_rate = 0.1}),
            nn::SparseCategoricalCrossentropy({.from_logits = true}), {metrics::Accuracy()});
  return m;
}
}  // namespace

TEST(DatasetFit, MatchesFitOnTensorsWithoutShuffle) {
  set_seed(3);
  Tensor x = random_normal({50, 4});
  Tensor y = cast(argmax(x.slice(1, 0, 3), -1), DType::i64);
  auto a = tiny_model();
  auto ha = a.fit(x, y, {.epochs = 3, .batch_size = 8, .shuffle = false, .verbose = 0});
  auto b = tiny_model();
  auto hb = b.fit(Dataset::from_tensor_slices({x, y}).batch(8).prefetch(2),
                  {.epochs = 3, .verbose = 0});
  ASSERT_EQ(losses_of(ha).size(), 3u);
  EXPECT_EQ(losses_of(ha), losses_of(hb));
  EXPECT_LT(losses_of(hb).back(), losses_of(hb).front());
  auto ea = a.evaluate(x, y, {.batch_size = 8, .verbose = 0});
  auto eb = b.evaluate(Dataset::from_tensor_slices({x, y}).batch(8), {.verbose = 0});
  EXPECT_EQ(ea.at("loss"), eb.at("loss"));
}

TEST(DatasetFit, ValidationDatasetGivesValLogs) {
  set_seed(3);
  Tensor x = random_normal({40, 4});
  Tensor y = cast(argmax(x.slice(1, 0, 3), -1), DType::i64);
  auto m = tiny_model();
  Dataset val = Dataset::from_tensor_slices({x, y}).batch(16);
  auto h = m.fit(Dataset::from_tensor_slices({x, y}).shuffle(40, 1).batch(8),
                 {.epochs = 2, .validation_data = val, .verbose = 0});
  ASSERT_EQ(h.history.at("val_loss").size(), 2u);
  EXPECT_NEAR(h.history.at("val_loss").back(),
              m.evaluate(val, {.verbose = 0}).at("loss"), 1e-6);
}

TEST(DatasetFit, StepsPerEpochRunsOnAnInfiniteDataset) {
  set_seed(3);
  Tensor x = random_normal({10, 4});
  Tensor y = cast(argmax(x.slice(1, 0, 3), -1), DType::i64);
  auto m = tiny_model();
  Dataset ds = Dataset::from_tensor_slices({x, y}).batch(4).repeat();
  EXPECT_TRUE(contains(error_of([&] { m.fit(ds, {.verbose = 0}); }), "steps_per_epoch"));
  auto h = m.fit(ds, {.epochs = 2, .verbose = 0, .steps_per_epoch = 5});
  EXPECT_EQ(h.history.at("loss").size(), 2u);
}

TEST(DatasetFit, UnbatchedElementsGiveAClearError) {
  auto m = tiny_model();
  std::string msg = error_of([&] {
    m.fit(Dataset::from_tensor_slices({zeros({4, 4}), zeros({4}, DType::i64)}), {.verbose = 0});
  });
  EXPECT_TRUE(contains(msg, "batch the dataset")) << msg;
}
