#pragma once
// soma::image: PNG files and image ops, tensors in and out.
//
// Layout: channels last, as decoded: one image is [H, W, C], a batch is [N, H, W, C]. Every op
// below takes either and returns the same rank. Decoded images are u8 (0..255); the float form
// is f32/f64 in [0, 1] (convert_image_dtype). Models take channels first: to_chw / to_nchw.
//
// The geometric and colour ops are built from soma ops (gather, slice, pad, arithmetic), so on
// float images they are differentiable with respect to the pixels. u8 images go through f32 and
// back with rounding and saturation, as TensorFlow's tf.image does.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "soma/tensor.hpp"

namespace soma::image {

// Limits checked before any pixel buffer is allocated: a corrupted or hostile header cannot
// make the decoder ask for gigabytes.
inline constexpr std::int64_t kMaxSide = std::int64_t(1) << 15;    // per side
inline constexpr std::int64_t kMaxPixels = std::int64_t(1) << 28;  // width * height

// ---- PNG ------------------------------------------------------------------------------------
struct DecodeOptions {
  // 0: as stored (grey -> 1, RGB or palette -> 3, with alpha or transparency -> 4; grey+alpha
  // is widened to RGBA so that C is always 1, 3 or 4). 1, 3 or 4: converted to that many
  // (colour -> grey with the ITU-R 601-2 weights; alpha dropped without compositing, or added
  // as opaque). Bit depths below 8 are expanded; 16-bit samples are scaled to 8 bits.
  int channels = 0;
};

// Decodes PNG bytes to a [H, W, C] u8 tensor. `name` (a file name) appears in error messages.
// A corrupted, truncated or oversized image throws soma::Error.
Tensor decode_png(std::span<const std::uint8_t> bytes, const DecodeOptions& options = {},
                  const std::string& name = "<memory>");
// Reads and decodes a PNG file; errors name the file.
Tensor read_png(const std::string& path, const DecodeOptions& options = {});
// Encodes a [H, W, C] u8 image (C = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA) as 8-bit PNG bytes.
std::vector<std::uint8_t> encode_png(const Tensor& image);
// Encodes and writes a PNG file (through a temporary file renamed into place).
void write_png(const Tensor& image, const std::string& path);

// ---- geometry -------------------------------------------------------------------------------
enum class Interpolation { nearest, bilinear };

struct Size {
  std::int64_t height = 0;
  std::int64_t width = 0;
};

// Resizes to size.height x size.width with half-pixel centres (TensorFlow 2's tf.image.resize,
// i.e. resize_* with half_pixel_centers=true): output pixel i samples source coordinate
// (i + 0.5) * in / out - 0.5. Bilinear clamps at the borders; nearest takes floor of the
// centre-mapped coordinate ((i + 0.5) * in / out), so an integer upscale repeats pixels
// and a 2x downscale of bilinear averages 2x2 blocks. No antialiasing. Output dtype = input's
// (u8 results are rounded).
Tensor resize(const Tensor& image, Size size, Interpolation method = Interpolation::bilinear);
Tensor flip_left_right(const Tensor& image);  // reverses W
Tensor flip_up_down(const Tensor& image);     // reverses H
// tf.image.crop_to_bounding_box: rows [top, top + height), columns [left, left + width).
Tensor crop(const Tensor& image, std::int64_t top, std::int64_t left, std::int64_t height,
            std::int64_t width);
// Pads with `value` (in the image's own scale: 0..255 for u8).
struct Padding {
  std::int64_t top = 0, bottom = 0, left = 0, right = 0;
};
Tensor pad(const Tensor& image, Padding padding, double value = 0.0);
// tf.image.pad_to_bounding_box: places the image at (top, left) in a zero canvas of
// height x width.
Tensor pad_to_bounding_box(const Tensor& image, std::int64_t top, std::int64_t left,
                           std::int64_t height, std::int64_t width);
// Rotates counter-clockwise (as seen on screen, y pointing down) by angle_degrees about the
// image centre, keeping the size; pixels whose source falls outside get `fill` (image scale).
// Bilinear samples outside the image count as `fill` too (TensorFlow's fill_mode="constant").
Tensor rotate(const Tensor& image, double angle_degrees,
              Interpolation method = Interpolation::nearest, double fill = 0.0);

// ---- colour ---------------------------------------------------------------------------------
// delta is in the float scale ([0, 1] images): x + delta; u8 goes through f32 and saturates.
Tensor adjust_brightness(const Tensor& image, double delta);
// Per image and channel: (x - mean) * factor + mean, the mean over H and W (as TensorFlow).
Tensor adjust_contrast(const Tensor& image, double factor);
// C = 3 -> C = 1 with the ITU-R 601-2 luma weights 0.2989, 0.5870, 0.1140.
Tensor rgb_to_grayscale(const Tensor& image);
// C = 1 -> C = 3 (the channel repeated).
Tensor grayscale_to_rgb(const Tensor& image);
// tf.image.convert_image_dtype: u8 -> float divides by 255; float -> u8 multiplies by 255.5
// and truncates, saturating to 0..255 (so every u8 value round-trips exactly); float -> float
// is a cast; u8 -> u8 returns the image. Other dtypes are refused.
Tensor convert_image_dtype(const Tensor& image, DType dtype);

// [H, W, C] -> [C, H, W] and [N, H, W, C] -> [N, C, H, W] (contiguous copies).
Tensor to_chw(const Tensor& image);
// Any image -> f32 in [0, 1], channels first (what a convolutional model takes).
Tensor to_chw_f32(const Tensor& image);

// ---- model input ----------------------------------------------------------------------------
enum class Invert { never, always, automatic };

struct ModelInputOptions {
  std::int64_t height = 28;
  std::int64_t width = 28;
  // Fashion-MNIST and MNIST are light objects on a black background. automatic inverts when
  // the image's border is mostly light (a photo on a white background), which is how
  // Fashion-MNIST itself was made from product photos.
  Invert invert = Invert::automatic;
  // true: scale the longer side to fit and centre the image on the background (0 after
  // inversion); false: stretch to height x width.
  bool keep_aspect_ratio = true;
  // true: [1, 1, H, W] (for Conv2D models with channels first); false: [1, H, W].
  bool channel_axis = true;
  // With channel_axis: [1, H, W, 1] instead, for channels_last models (Keras' layout).
  bool channels_last = false;
};

// A decoded image of any size and colour -> f32 grayscale in [0, 1]. Transparent pixels are
// composited over white first. Downscaling halves the image with 2x2 averaging until it is
// within 2x of the target, then resizes bilinearly, which avoids aliasing on large photos.
Tensor to_model_input(const Tensor& image, const ModelInputOptions& options = {});
// read_png + to_model_input.
Tensor load_model_input(const std::string& path, const ModelInputOptions& options = {});

}  // namespace soma::image
