// Dataset stages filter, flat_map, concatenate, interleave (include/soma/data/dataset.hpp) and
// the augmentations zoom / random_zoom, shear / random_shear (include/soma/data/augment.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "soma/data/augment.hpp"
#include "soma/data/dataset.hpp"
#include "soma/soma.hpp"
#include "test_support.hpp"

using namespace soma;
using soma::testing::all_close;
namespace augment = soma::data::augment;
using data::Dataset;
using data::Element;

namespace {

Dataset drange(std::int64_t a, std::int64_t b) {
  std::vector<double> v;
  for (std::int64_t i = a; i < b; ++i) v.push_back(double(i));
  return Dataset::from_tensor_slices({constant(v, {b - a})});
}

std::vector<double> values(const Dataset& d) {
  std::vector<double> out;
  for (auto& e : d) out.push_back(e[0].item<double>());
  return out;
}

}  // namespace

TEST(DatasetStages, Filter) {
  auto d = drange(0, 10).filter([](const Element& e) { return int(e[0].item<double>()) % 3 == 0; });
  EXPECT_EQ(values(d), (std::vector<double>{0, 3, 6, 9}));
  EXPECT_EQ(d.cardinality(), data::kUnknownCardinality);
  // Rows that pass still batch (gathered in one op) and a second pass gives the same.
  auto b = d.batch(3);
  std::vector<Element> batches;
  for (auto& e : b) batches.push_back(e);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_TRUE(all_close(batches[0][0], {0.0, 3.0, 6.0}));
  EXPECT_EQ(values(d), (std::vector<double>{0, 3, 6, 9}));
  EXPECT_THROW(drange(0, 3).filter(nullptr), Error);
}

TEST(DatasetStages, Concatenate) {
  auto d = drange(0, 3).concatenate(drange(10, 12));
  EXPECT_EQ(values(d), (std::vector<double>{0, 1, 2, 10, 11}));
  EXPECT_EQ(d.cardinality(), 5);
  EXPECT_EQ(drange(0, 3).concatenate(drange(0, 1).repeat()).cardinality(),
            data::kInfiniteCardinality);
  auto pairs = Dataset::from_tensor_slices({constant(std::vector<double>{1.0}, Shape{1}), constant(std::vector<double>{2.0}, Shape{1})});
  EXPECT_THROW(values(drange(0, 2).concatenate(pairs)), Error);  // 1 vs 2 tensors
}

TEST(DatasetStages, FlatMap) {
  // Each x gives x copies of itself.
  auto d = drange(1, 4).flat_map([](Element e) {
    const auto n = std::int64_t(e[0].item<double>());
    return Dataset::from_tensors({e[0]}).repeat(n);
  });
  EXPECT_EQ(values(d), (std::vector<double>{1, 2, 2, 3, 3, 3}));
  EXPECT_EQ(values(d), (std::vector<double>{1, 2, 2, 3, 3, 3}));  // a second pass
  // Inner datasets of rows.
  auto rows = drange(0, 2).flat_map([](Element e) {
    const double x = e[0].item<double>();
    return drange(std::int64_t(x) * 10, std::int64_t(x) * 10 + 2);
  });
  EXPECT_EQ(values(rows), (std::vector<double>{0, 1, 10, 11}));
}

TEST(DatasetStages, InterleaveInTfDataOrder) {
  // tf.data's documented example: drange(1, 6).interleave(lambda x: from_tensors(x).repeat(6),
  // cycle_length=2, block_length=4).
  auto d = drange(1, 6).interleave(
      [](Element e) { return Dataset::from_tensors({e[0]}).repeat(6); }, 2, 4);
  EXPECT_EQ(values(d), (std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                            3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5}));
  // Unequal lengths, block 1: the shorter one's slot is refilled by the next input element.
  auto u = drange(1, 4).interleave(
      [](Element e) {
        const auto x = std::int64_t(e[0].item<double>());
        return drange(x * 10, x * 10 + (x == 1 ? 1 : 3));
      },
      2);
  EXPECT_EQ(values(u), (std::vector<double>{10, 20, 21, 30, 22, 31, 32}));
  EXPECT_THROW(drange(0, 2).interleave([](Element e) { return Dataset::from_tensors(e); }, 0),
               Error);
}

// ---- zoom and shear -------------------------------------------------------------------------

namespace {
// A 5x5 one-channel image with value 10 * y + x.
Tensor ramp() {
  std::vector<double> v;
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) v.push_back(10.0 * y + x);
  return constant(v, {5, 5, 1});
}
double at(const Tensor& img, int y, int x) { return img.to_vector<double>()[std::size_t(y * 5 + x)]; }
}  // namespace

TEST(Augment, ZoomAboutTheCentre) {
  const Tensor img = ramp();
  // Zoom 1 is the identity; zoom 2 (out) samples twice as far from the centre (2, 2).
  EXPECT_TRUE(all_close(augment::zoom(img, 1.0, 1.0), img));
  Tensor z = augment::zoom(img, 2.0, 2.0, augment::Interpolation::nearest, augment::Layout::hwc, -1);
  EXPECT_EQ(at(z, 2, 2), 22.0);
  EXPECT_EQ(at(z, 1, 1), 0.0);    // source (0, 0)
  EXPECT_EQ(at(z, 3, 2), 42.0);   // source (4, 2)
  EXPECT_EQ(at(z, 0, 0), -1.0);   // source (-2, -2): fill
  // Zoom 0.5 (in), bilinear: source (y, x) = (1.5, 1.5) for output (1, 1).
  Tensor zi = augment::zoom(img, 0.5, 0.5);
  EXPECT_NEAR(at(zi, 1, 1), 16.5, 1e-9);
  // Only the width.
  Tensor zw = augment::zoom(img, 1.0, 2.0, augment::Interpolation::nearest);
  EXPECT_EQ(at(zw, 3, 1), 30.0);  // source (3, 0)
  EXPECT_THROW(augment::zoom(img, 0.0, 1.0), Error);
}

TEST(Augment, RandomZoomDrawsPerImageAndKeepsTheAspect) {
  Tensor batch = concat({expand_dims(ramp(), 0), expand_dims(ramp(), 0)}, 0);  // [2, 5, 5, 1]
  Tensor a = augment::random_zoom(batch, {.height_factor = 0.5, .seed = 3});
  Tensor b = augment::random_zoom(batch, {.height_factor = 0.5, .seed = 3});
  EXPECT_TRUE(all_close(a, b, 0.0, 0.0));  // deterministic in the seed
  EXPECT_FALSE(all_close(soma::slice(a, {Slice{0, 1}}), soma::slice(a, {Slice{1, 2}}), 1e-9, 0));
  // Without width_factor the same factor on both axes: the transpose of a symmetric image stays
  // symmetric.
  std::vector<double> sym;
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) sym.push_back(double(y * x));
  Tensor s = augment::random_zoom(constant(sym, {5, 5}), {.height_factor = 0.4, .seed = 9});
  EXPECT_TRUE(all_close(s, transpose(s, {1, 0}), 1e-9, 1e-9));
  EXPECT_TRUE(all_close(augment::random_zoom(ramp(), {.height_factor = 0.0}), ramp()));
  EXPECT_THROW(augment::random_zoom(ramp(), {.height_factor = 1.0}), Error);
}

TEST(Augment, ShearAboutTheCentre) {
  const Tensor img = ramp();
  EXPECT_TRUE(all_close(augment::shear(img, 0.0, 0.0), img));
  // shear_x 1: row y samples columns shifted by (y - 2).
  Tensor s = augment::shear(img, 1.0, 0.0, augment::Interpolation::nearest, augment::Layout::hwc, -1);
  EXPECT_EQ(at(s, 2, 0), 20.0);   // the centre row is unchanged
  EXPECT_EQ(at(s, 3, 0), 31.0);   // source x = 0 + 1
  EXPECT_EQ(at(s, 1, 1), 10.0);   // source x = 1 - 1
  EXPECT_EQ(at(s, 4, 4), -1.0);   // source x = 6: fill
  // shear_y 1: column x samples rows shifted by (x - 2).
  Tensor t = augment::shear(img, 0.0, 1.0, augment::Interpolation::nearest);
  EXPECT_EQ(at(t, 0, 3), 13.0);
  Tensor r = augment::random_shear(img, {.x_factor = 0.3, .y_factor = 0.3, .seed = 5});
  EXPECT_TRUE(all_close(r, augment::random_shear(img, {.x_factor = 0.3, .y_factor = 0.3, .seed = 5})));
  EXPECT_FALSE(all_close(r, img, 1e-6, 0));
  EXPECT_THROW(augment::random_shear(img, {.x_factor = -1.0}), Error);
  // Layout chw gives the same numbers as hwc for one channel.
  Tensor chw = augment::shear(reshape(img, {1, 5, 5}), 1.0, 0.0, augment::Interpolation::bilinear,
                              augment::Layout::chw);
  EXPECT_TRUE(all_close(reshape(chw, {5, 5, 1}), augment::shear(img, 1.0, 0.0)));
}
