// soma::image: PNG decoding/encoding (round trips, corrupted and hostile files) and the image
// ops checked against plain per-pixel references.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "soma/image.hpp"
#include "test_support.hpp"

using namespace soma;
namespace img = soma::image;
using soma::testing::all_close;
using soma::testing::check_gradients;
using soma::testing::rand_tensor;
namespace fs = std::filesystem;

namespace {

// Random u8 image from std::mt19937_64 via rand_tensor.
Tensor rand_u8(const Shape& shape, std::uint64_t seed) {
  return cast(floor(rand_tensor(shape, seed, 0.0, 256.0)), DType::u8);
}

Tensor u8(const std::vector<int>& v, const Shape& shape) {
  std::vector<std::uint8_t> b(v.begin(), v.end());
  return constant(b, shape);
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::uint32_t crc32(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(std::uint8_t(x >> s));
}

void put_chunk(std::vector<std::uint8_t>& v, const char* type, std::vector<std::uint8_t> data) {
  put_be32(v, std::uint32_t(data.size()));
  std::vector<std::uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  v.insert(v.end(), body.begin(), body.end());
  put_be32(v, crc32(body.data(), body.size()));
}

// A PNG whose header claims width x height RGBA pixels, followed by a bit of (garbage) IDAT.
std::vector<std::uint8_t> png_with_header(std::uint32_t width, std::uint32_t height) {
  std::vector<std::uint8_t> v = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<std::uint8_t> ihdr;
  put_be32(ihdr, width);
  put_be32(ihdr, height);
  ihdr.insert(ihdr.end(), {8, 6, 0, 0, 0});
  put_chunk(v, "IHDR", ihdr);
  put_chunk(v, "IDAT", {1, 2, 3, 4});
  return v;
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("soma_test_image_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// tf.image.resize bilinear (half_pixel_centers) per output pixel, written plainly.
double bilinear_ref(const Tensor& x, std::int64_t oy, std::int64_t ox, std::int64_t c,
                    std::int64_t OH, std::int64_t OW) {
  const std::int64_t H = x.dim(0), W = x.dim(1);
  auto coord = [](std::int64_t i, std::int64_t in, std::int64_t out, std::int64_t& lo,
                  std::int64_t& hi) {
    double v = (double(i) + 0.5) * double(in) / double(out) - 0.5;
    lo = std::max<std::int64_t>(0, std::int64_t(std::floor(v)));
    hi = std::min<std::int64_t>(in - 1, std::int64_t(std::ceil(v)));
    return v - std::floor(v);
  };
  std::int64_t y0, y1, x0, x1;
  double fy = coord(oy, H, OH, y0, y1), fx = coord(ox, W, OW, x0, x1);
  auto at = [&](std::int64_t y, std::int64_t xx) { return x.at<double>({y, xx, c}); };
  double top = at(y0, x0) + (at(y0, x1) - at(y0, x0)) * fx;
  double bot = at(y1, x0) + (at(y1, x1) - at(y1, x0)) * fx;
  return top + (bot - top) * fy;
}

}  // namespace

// ---- PNG ------------------------------------------------------------------------------------

TEST(ImagePng, GreyRoundTripIsBitExact) {
  Tensor a = rand_u8({7, 5, 1}, 1);
  Tensor b = img::decode_png(img::encode_png(a));
  EXPECT_EQ(b.shape(), (Shape{7, 5, 1}));
  EXPECT_EQ(b.dtype(), DType::u8);
  EXPECT_EQ(b.to_vector<int>(), a.to_vector<int>());
}

TEST(ImagePng, RgbRoundTripIsBitExact) {
  Tensor a = rand_u8({4, 9, 3}, 2);
  Tensor b = img::decode_png(img::encode_png(a));
  EXPECT_EQ(b.shape(), (Shape{4, 9, 3}));
  EXPECT_EQ(b.to_vector<int>(), a.to_vector<int>());
}

TEST(ImagePng, RgbaRoundTripIsBitExact) {
  Tensor a = rand_u8({6, 3, 4}, 3);
  Tensor b = img::decode_png(img::encode_png(a));
  EXPECT_EQ(b.shape(), (Shape{6, 3, 4}));
  EXPECT_EQ(b.to_vector<int>(), a.to_vector<int>());
}

TEST(ImagePng, GreyAlphaDecodesAsRgba) {
  Tensor a = u8({10, 200, 30, 40}, {1, 2, 2});
  Tensor b = img::decode_png(img::encode_png(a));
  EXPECT_EQ(b.shape(), (Shape{1, 2, 4}));
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{10, 10, 10, 200, 30, 30, 30, 40}));
}

TEST(ImagePng, NonContiguousInputEncodesItsValues) {
  Tensor a = rand_u8({5, 6, 3}, 4);
  Tensor v = img::flip_left_right(a);  // a negative-stride view
  EXPECT_EQ(img::decode_png(img::encode_png(v)).to_vector<int>(), v.to_vector<int>());
}

TEST(ImagePng, ChannelsOptionConvertsRgbToGreyLikeRgbToGrayscale) {
  Tensor a = rand_u8({3, 4, 3}, 5);
  Tensor b = img::decode_png(img::encode_png(a), {.channels = 1});
  EXPECT_EQ(b.shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(b.to_vector<int>(), img::rgb_to_grayscale(a).to_vector<int>());
}

TEST(ImagePng, ChannelsOptionAddsOpaqueAlpha) {
  Tensor a = u8({1, 2, 3}, {1, 1, 3});
  Tensor b = img::decode_png(img::encode_png(a), {.channels = 4});
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, 2, 3, 255}));
}

TEST_F(TempDir, WritePngThenReadPngRoundTrips) {
  Tensor a = rand_u8({8, 8, 3}, 6);
  img::write_png(a, path("x.png"));
  EXPECT_FALSE(fs::exists(path("x.png.tmp")));
  EXPECT_EQ(img::read_png(path("x.png")).to_vector<int>(), a.to_vector<int>());
}

TEST_F(TempDir, CorruptedPngErrorNamesTheFile) {
  std::vector<std::uint8_t> bytes = img::encode_png(rand_u8({16, 16, 3}, 7));
  for (std::size_t i = bytes.size() / 2; i < bytes.size() / 2 + 8; ++i) bytes[i] ^= 0x5a;
  std::ofstream(path("bad.png"), std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  std::string msg = error_of([&] { img::read_png(path("bad.png")); });
  EXPECT_NE(msg.find("decode_png: '" + path("bad.png") + "': corrupted PNG"), std::string::npos)
      << msg;
}

TEST(ImagePng, TruncatedPngThrows) {
  std::vector<std::uint8_t> bytes = img::encode_png(rand_u8({16, 16, 3}, 8));
  for (std::size_t keep : {bytes.size() - 20, bytes.size() / 2, std::size_t(20)}) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + std::ptrdiff_t(keep));
    std::string msg = error_of([&] { img::decode_png(cut, {}, "cut.png"); });
    EXPECT_NE(msg.find("decode_png: 'cut.png': corrupted PNG"), std::string::npos) << msg;
  }
}

TEST(ImagePng, RandomlyCorruptedBytesDecodeOrThrowButNeverCrash) {
  const std::vector<std::uint8_t> good = img::encode_png(rand_u8({6, 5, 3}, 19));
  std::vector<double> r = rand_tensor({300, 2}, 20, 0.0, 1.0).to_vector<double>();
  int errors = 0;
  for (std::size_t i = 0; i < 300; ++i) {
    std::vector<std::uint8_t> bytes = good;
    const std::size_t at = 8 + std::size_t(r[2 * i] * double(bytes.size() - 8));
    bytes[at] = std::uint8_t(bytes[at] ^ (1 + int(r[2 * i + 1] * 255)));
    try {
      Tensor t = img::decode_png(bytes);
      EXPECT_EQ(t.rank(), 3);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 250);  // CRCs catch nearly every flip
}

TEST(ImagePng, BadSignatureThrows) {
  std::vector<std::uint8_t> bytes = {'G', 'I', 'F', '8', '9', 'a', 0, 0, 0, 0};
  EXPECT_EQ(error_of([&] { img::decode_png(bytes, {}, "a.gif"); }),
            "decode_png: 'a.gif': not a PNG file (bad signature)");
}

TEST(ImagePng, HeaderHelperBuildsAValidHeader) {  // guards the two tests below
  std::string msg = error_of([&] { img::decode_png(png_with_header(2, 2)); });
  EXPECT_EQ(msg.find("limit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("corrupted PNG"), std::string::npos) << msg;  // the IDAT is garbage
}

TEST(ImagePng, RefusesASideLongerThanTheLimit) {
  std::string msg = error_of([&] { img::decode_png(png_with_header(40000, 2)); });
  EXPECT_NE(msg.find("40000 x 2 pixels has a side longer than the 32768-pixel limit"),
            std::string::npos)
      << msg;
}

TEST(ImagePng, RefusesTooManyPixelsBeforeAllocating) {
  std::string msg = error_of([&] { img::decode_png(png_with_header(30000, 30000)); });
  EXPECT_NE(msg.find("30000 x 30000 pixels is larger than the 268435456-pixel limit"),
            std::string::npos)
      << msg;
}

TEST(ImagePng, MissingFileErrorNamesIt) {
  std::string msg = error_of([] { img::read_png("/nonexistent/shoe.png"); });
  EXPECT_NE(msg.find("read_png: cannot open '/nonexistent/shoe.png'"), std::string::npos) << msg;
}

TEST(ImagePng, EncodeRefusesFloatAndWrongShapes) {
  EXPECT_NE(error_of([] { img::encode_png(zeros({2, 2, 3})); }).find("expected dtype u8, got f32"),
            std::string::npos);
  EXPECT_EQ(error_of([] { img::encode_png(zeros({2, 2, 5}, DType::u8)); }),
            "encode_png: expected an image of shape [H, W, C] with C = 1, 2, 3 or 4, got shape "
            "[2, 2, 5]");
}

// ---- resize ---------------------------------------------------------------------------------

TEST(ImageResize, NearestUpscaleRepeatsPixels) {
  Tensor a = u8({1, 2, 3, 4}, {2, 2, 1});
  Tensor b = img::resize(a, {4, 4}, img::Interpolation::nearest);
  EXPECT_EQ(b.dtype(), DType::u8);
  EXPECT_EQ(b.to_vector<int>(),
            (std::vector<int>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
}

TEST(ImageResize, NearestDownscaleTakesHalfPixelCentres) {
  Tensor a = constant(std::vector<float>{0, 1, 2, 3}, {1, 4, 1});
  // centres (i + 0.5) * 2 = 1, 3
  EXPECT_TRUE(all_close(img::resize(a, {1, 2}, img::Interpolation::nearest), {1, 3}));
}

TEST(ImageResize, BilinearUpscaleMatchesHandComputedValues) {
  Tensor a = constant(std::vector<float>{0, 10}, {1, 2, 1});
  // source x = (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped at the borders
  EXPECT_TRUE(all_close(img::resize(a, {1, 4}), {0, 2.5, 7.5, 10}));
}

TEST(ImageResize, BilinearHalvingAveragesBlocks) {
  Tensor a = constant(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 4, 1});
  EXPECT_TRUE(all_close(img::resize(a, {1, 2}), {(1 + 2 + 5 + 6) / 4.0, (3 + 4 + 7 + 8) / 4.0}));
}

TEST(ImageResize, BilinearMatchesPerPixelReference) {
  Tensor a = rand_tensor({5, 7, 2}, 9);
  for (auto [oh, ow] : {std::pair{3, 4}, std::pair{9, 11}, std::pair{5, 3}}) {
    Tensor b = img::resize(a, {oh, ow});
    std::vector<double> want;
    for (std::int64_t y = 0; y < oh; ++y)
      for (std::int64_t x = 0; x < ow; ++x)
        for (std::int64_t c = 0; c < 2; ++c) want.push_back(bilinear_ref(a, y, x, c, oh, ow));
    EXPECT_TRUE(all_close(b, want, 1e-12, 1e-12)) << oh << "x" << ow;
  }
}

TEST(ImageResize, BilinearOnU8Rounds) {
  Tensor a = u8({0, 11}, {1, 2, 1});
  EXPECT_EQ(img::resize(a, {1, 4}).to_vector<int>(), (std::vector<int>{0, 3, 8, 11}));
}

TEST(ImageResize, BatchResizesEachImage) {
  Tensor a = rand_tensor({2, 4, 5, 3}, 10);
  Tensor b = img::resize(a, {3, 2});
  ASSERT_EQ(b.shape(), (Shape{2, 3, 2, 3}));
  EXPECT_TRUE(all_close(b[1], img::resize(a[1], {3, 2})));
}

TEST(ImageResize, BilinearGradientsCheck) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return img::resize(in[0], {5, 3}); },
                              {rand_tensor({3, 4, 2}, 11)}));
}

TEST(ImageResize, WrongRankErrorNamesFunctionAndShape) {
  EXPECT_EQ(error_of([] { img::resize(zeros({3, 4}), {2, 2}); }),
            "image::resize: expected an image [H, W, C] or a batch [N, H, W, C], got shape [3, 4]");
}

TEST(ImageResize, RefusesEmptyTargetSize) {
  EXPECT_NE(error_of([] { img::resize(zeros({3, 4, 1}), {0, 2}); }).find("target size 0 x 2"),
            std::string::npos);
}

// ---- flips, crop, pad -----------------------------------------------------------------------

TEST(ImageFlip, LeftRightReversesColumns) {
  Tensor a = u8({1, 2, 3, 4, 5, 6}, {2, 3, 1});
  EXPECT_EQ(img::flip_left_right(a).to_vector<int>(), (std::vector<int>{3, 2, 1, 6, 5, 4}));
}

TEST(ImageFlip, UpDownReversesRows) {
  Tensor a = u8({1, 2, 3, 4, 5, 6}, {2, 3, 1});
  EXPECT_EQ(img::flip_up_down(a).to_vector<int>(), (std::vector<int>{4, 5, 6, 1, 2, 3}));
}

TEST(ImageFlip, BatchFlipsEachImageNotTheBatch) {
  Tensor a = rand_u8({2, 3, 4, 2}, 12);
  Tensor b = img::flip_left_right(a);
  EXPECT_EQ(b[0].to_vector<int>(), img::flip_left_right(a[0]).to_vector<int>());
  EXPECT_EQ(b[1].to_vector<int>(), img::flip_left_right(a[1]).to_vector<int>());
}

TEST(ImageCrop, ReturnsTheBox) {
  Tensor a = constant(std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4, 1});
  EXPECT_EQ(img::crop(a, 1, 1, 2, 2).to_vector<int>(), (std::vector<int>{5, 6, 9, 10}));
}

TEST(ImageCrop, BoxOutsideTheImageThrows) {
  std::string msg = error_of([] { img::crop(zeros({3, 4, 1}), 2, 0, 2, 2); });
  EXPECT_NE(msg.find("image::crop: box (top 2, left 0, height 2, width 2) does not fit in an "
                     "image of shape [3, 4, 1]"),
            std::string::npos)
      << msg;
}

TEST(ImagePad, PadsWithTheValue) {
  Tensor a = u8({1, 2}, {1, 2, 1});
  Tensor b = img::pad(a, {.top = 1, .right = 1}, 9);
  EXPECT_EQ(b.shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{9, 9, 9, 1, 2, 9}));
}

TEST(ImagePad, PadToBoundingBoxPlacesTheImage) {
  Tensor a = u8({7}, {1, 1, 1});
  Tensor b = img::pad_to_bounding_box(a, 1, 2, 2, 3);
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{0, 0, 0, 0, 0, 7}));
}

TEST(ImagePad, NegativePaddingThrows) {
  EXPECT_NE(error_of([] { img::pad(zeros({2, 2, 1}), {.left = -1}); })
                .find("image::pad: paddings must be non-negative"),
            std::string::npos);
}

// ---- rotate ---------------------------------------------------------------------------------

TEST(ImageRotate, NinetyDegreesNearestIsTransposeThenFlip) {
  Tensor a = rand_u8({5, 5, 2}, 13);
  Tensor want = img::flip_up_down(transpose(a, {1, 0, 2}));
  EXPECT_EQ(img::rotate(a, 90.0).to_vector<int>(), want.to_vector<int>());
}

TEST(ImageRotate, NinetyDegreesBilinearIsTransposeThenFlipOnEvenSides) {
  Tensor a = rand_tensor({4, 4, 1}, 14);
  Tensor want = img::flip_up_down(transpose(a, {1, 0, 2}));
  EXPECT_TRUE(all_close(img::rotate(a, 90.0, img::Interpolation::bilinear), want, 1e-12));
}

TEST(ImageRotate, HalfTurnFlipsBothAxes) {
  Tensor a = rand_u8({2, 4, 6, 3}, 15);
  Tensor want = img::flip_up_down(img::flip_left_right(a));
  EXPECT_EQ(img::rotate(a, 180.0).to_vector<int>(), want.to_vector<int>());
}

TEST(ImageRotate, CornersOutsideGetTheFillValue) {
  Tensor a = ones({5, 5, 1});
  Tensor b = img::rotate(a, 45.0, img::Interpolation::nearest, -1.0);
  EXPECT_EQ(b.at<float>({0, 0, 0}), -1.0f);
  EXPECT_EQ(b.at<float>({2, 2, 0}), 1.0f);
}

TEST(ImageRotate, BilinearGradientsCheck) {
  EXPECT_TRUE(check_gradients(
      [](const auto& in) { return img::rotate(in[0], 30.0, img::Interpolation::bilinear, 0.5); },
      {rand_tensor({4, 5, 2}, 16)}));
}

// ---- colour ---------------------------------------------------------------------------------

TEST(ImageColour, BrightnessAddsDeltaToFloats) {
  Tensor a = constant(std::vector<float>{0.1f, 0.5f}, {1, 2, 1});
  EXPECT_TRUE(all_close(img::adjust_brightness(a, 0.25), {0.35, 0.75}));
}

TEST(ImageColour, BrightnessOnU8Saturates) {
  Tensor a = u8({0, 100, 250}, {1, 3, 1});
  // (100 / 255 + 0.1) * 255.5 = 125.7 -> 125; 250 -> 255 (saturated); 0 -> 25.55 -> 25
  EXPECT_EQ(img::adjust_brightness(a, 0.1).to_vector<int>(), (std::vector<int>{25, 125, 255}));
  EXPECT_EQ(img::adjust_brightness(a, -0.5).to_vector<int>(), (std::vector<int>{0, 0, 122}));
}

TEST(ImageColour, ContrastScalesAroundThePerChannelMean) {
  // channel 0: mean 0.5; channel 1: mean 0.2
  Tensor a = constant(std::vector<double>{0.25, 0.1, 0.75, 0.3}, {1, 2, 2});
  EXPECT_TRUE(all_close(img::adjust_contrast(a, 2.0), {0.0, 0.0, 1.0, 0.4}, 1e-12));
}

TEST(ImageColour, ContrastMeanIsPerImageInABatch) {
  Tensor a = constant(std::vector<double>{0, 1, 10, 20}, {2, 1, 2, 1});
  EXPECT_TRUE(all_close(img::adjust_contrast(a, 0.0), {0.5, 0.5, 15, 15}, 1e-12));
}

TEST(ImageColour, GrayscaleUsesItu601Weights) {
  Tensor a = constant(std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1, 0.5, 0.5, 0.5}, {2, 2, 3});
  Tensor g = img::rgb_to_grayscale(a);
  EXPECT_EQ(g.shape(), (Shape{2, 2, 1}));
  EXPECT_TRUE(all_close(g, {0.2989, 0.5870, 0.1140, 0.49995}, 1e-12));
}

TEST(ImageColour, GrayscaleOnU8) {
  Tensor a = u8({100, 150, 200, 255, 255, 255}, {1, 2, 3});
  double y = (0.2989 * 100 + 0.5870 * 150 + 0.1140 * 200) / 255.0 * 255.5;  // 141.9...
  EXPECT_EQ(img::rgb_to_grayscale(a).to_vector<int>(), (std::vector<int>{int(y), 255}));
}

TEST(ImageColour, GrayscaleWrongChannelsErrorNamesShape) {
  EXPECT_EQ(error_of([] { img::rgb_to_grayscale(zeros({2, 2, 4})); }),
            "image::rgb_to_grayscale: expected 3 channels (last axis), got shape [2, 2, 4]");
}

TEST(ImageColour, GrayscaleToRgbRepeatsTheChannel) {
  Tensor a = u8({7, 9}, {1, 2, 1});
  EXPECT_EQ(img::grayscale_to_rgb(a).to_vector<int>(), (std::vector<int>{7, 7, 7, 9, 9, 9}));
  EXPECT_NE(error_of([] { img::grayscale_to_rgb(zeros({2, 2, 3})); })
                .find("expected 1 channel (last axis), got shape [2, 2, 3]"),
            std::string::npos);
}

TEST(ImageColour, GrayscaleGradientsCheck) {
  EXPECT_TRUE(check_gradients([](const auto& in) { return img::rgb_to_grayscale(in[0]); },
                              {rand_tensor({2, 3, 3}, 17)}));
}

// ---- dtype conversion -----------------------------------------------------------------------

TEST(ImageDtype, EveryU8ValueRoundTripsThroughF32) {
  std::vector<std::uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[std::size_t(i)] = std::uint8_t(i);
  Tensor a = constant(all, {16, 16, 1});
  Tensor f = img::convert_image_dtype(a, DType::f32);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_FLOAT_EQ(f.at<float>({15, 15, 0}), 1.0f);
  EXPECT_FLOAT_EQ(f.at<float>({3, 3, 0}), 0.2f);  // 51 / 255
  EXPECT_EQ(img::convert_image_dtype(f, DType::u8).to_vector<int>(), a.to_vector<int>());
}

TEST(ImageDtype, FloatToU8Saturates) {
  Tensor f = constant(std::vector<float>{-0.5f, 0.5f, 1.0f, 3.0f}, {1, 4, 1});
  EXPECT_EQ(img::convert_image_dtype(f, DType::u8).to_vector<int>(),
            (std::vector<int>{0, 127, 255, 255}));
}

TEST(ImageDtype, RefusesIntegerTargets) {
  EXPECT_NE(error_of([] { img::convert_image_dtype(zeros({1, 1, 1}), DType::i32); })
                .find("converts between u8 and floating-point images only, got f32 -> i32"),
            std::string::npos);
}

TEST(ImageDtype, ToChwMovesChannelsFirst) {
  Tensor a = u8({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  Tensor c = img::to_chw_f32(a);
  EXPECT_EQ(c.shape(), (Shape{3, 1, 2}));
  EXPECT_TRUE(all_close(c, {1 / 255.0, 4 / 255.0, 2 / 255.0, 5 / 255.0, 3 / 255.0, 6 / 255.0}));
  EXPECT_EQ(img::to_chw(rand_u8({2, 3, 4, 5}, 18)).shape(), (Shape{2, 5, 3, 4}));
}

// ---- model input ----------------------------------------------------------------------------

TEST(ImageModelInput, DarkObjectOnWhiteBecomesBrightOnBlack) {
  // A 100 x 100 white RGB picture with a black 40 x 40 square in the middle.
  Tensor a = img::pad(zeros({40, 40, 3}, DType::u8), {30, 30, 30, 30}, 255);
  Tensor x = img::to_model_input(a);
  ASSERT_EQ(x.shape(), (Shape{1, 1, 28, 28}));
  EXPECT_EQ(x.dtype(), DType::f32);
  // The 601 weights sum to 0.9999, so white is 0.9999 grey: 1e-4 after inversion.
  EXPECT_NEAR(x.at<float>({0, 0, 0, 0}), 0.0f, 2e-4);
  EXPECT_NEAR(x.at<float>({0, 0, 14, 14}), 1.0f, 1e-6);
  EXPECT_GE(min(x).item<float>(), 0.0f);
  EXPECT_LE(max(x).item<float>(), 1.0f);
}

TEST(ImageModelInput, BrightObjectOnBlackIsKept) {
  Tensor a = img::pad(fill({28, 28, 1}, 255, DType::u8), {2, 2, 2, 2});
  Tensor x = img::to_model_input(a, {.channel_axis = false});
  ASSERT_EQ(x.shape(), (Shape{1, 28, 28}));
  EXPECT_NEAR(x.at<float>({0, 14, 14}), 1.0f, 1e-6);
  EXPECT_NEAR(x.at<float>({0, 0, 0}), 0.0f, 1e-6);
  // channels_last models (Keras' layout) take [1, H, W, 1].
  Tensor nhwc = img::to_model_input(a, {.channels_last = true});
  ASSERT_EQ(nhwc.shape(), (Shape{1, 28, 28, 1}));
  EXPECT_NEAR(nhwc.at<float>({0, 14, 14, 0}), 1.0f, 1e-6);
}

TEST(ImageModelInput, KeepsAspectRatioAndCentres) {
  // 10 x 40 bright bar on black -> 7 x 28, padded to rows 10..16
  Tensor x = img::to_model_input(fill({10, 40, 1}, 255, DType::u8), {.invert = img::Invert::never});
  EXPECT_NEAR(x.at<float>({0, 0, 9, 14}), 0.0f, 1e-6);
  EXPECT_NEAR(x.at<float>({0, 0, 10, 14}), 1.0f, 1e-6);
  EXPECT_NEAR(x.at<float>({0, 0, 16, 14}), 1.0f, 1e-6);
  EXPECT_NEAR(x.at<float>({0, 0, 17, 14}), 0.0f, 1e-6);
}

TEST(ImageModelInput, TransparentBackgroundCountsAsWhite) {
  Tensor rgba = zeros({8, 8, 4}, DType::u8);  // fully transparent black
  Tensor x = img::to_model_input(rgba);
  EXPECT_NEAR(max(x).item<float>(), 0.0f, 2e-4);  // white after compositing, then inverted
}

TEST_F(TempDir, LoadModelInputReadsAPng) {
  img::write_png(fill({56, 56, 1}, 255, DType::u8), path("s.png"));
  Tensor x = img::load_model_input(path("s.png"), {.invert = img::Invert::never});
  EXPECT_TRUE(all_close(x, ones({1, 1, 28, 28})));
}

TEST(ImageModelInput, RefusesABatch) {
  EXPECT_EQ(error_of([] { img::to_model_input(zeros({2, 4, 4, 1})); }),
            "image::to_model_input: expected one image [H, W, C], got shape [2, 4, 4, 1]");
}
