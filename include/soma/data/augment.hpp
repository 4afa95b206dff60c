#pragma once
// Random data augmentation for images, as tensors in and out (any real dtype; the output has the
// input's dtype, rounded for integer dtypes).
//
// Layout: a rank-2 tensor is one image [H, W]; rank 3 is one image [H, W, C] (Layout::hwc, the
// default, as Keras' channels_last) or [C, H, W] (Layout::chw); rank 4 is a batch [N, H, W, C] or
// [N, C, H, W]. A batch of grayscale images [N, H, W] must be given as [N, H, W, 1].
//
// Determinism: image n of a call draws its random numbers from (seed, n) alone, with a
// counter-based hash, so results do not depend on thread counts or call order. Inside
// Dataset::map use a two-argument function and pass `ctx.seed(base)`: a different draw per
// element and per epoch, the same on every run.
//
//   ds.map([](data::Element e, const data::MapContext& ctx) {
//     e[0] = augment::random_flip_left_right(e[0], {.seed = ctx.seed(1)});
//     return e;
//   }, 4);
#include <cstdint>
#include <optional>
#include <vector>

#include "soma/tensor.hpp"

namespace soma::data::augment {

enum class Layout { hwc, chw };
enum class Interpolation { nearest, bilinear };

struct FlipOptions {
  double probability = 0.5;  // of flipping each image
  std::uint64_t seed = 0;
  Layout layout = Layout::hwc;
};
// Mirrors each image horizontally (columns reversed) with the given probability.
Tensor random_flip_left_right(const Tensor& images, const FlipOptions& options = {});
// Mirrors each image vertically (rows reversed) with the given probability.
Tensor random_flip_up_down(const Tensor& images, const FlipOptions& options = {});

struct CropOptions {
  std::int64_t padding = 4;  // added on every side before cropping back to H x W
  std::uint64_t seed = 0;
  Layout layout = Layout::hwc;
  double fill = 0.0;  // value of the padding
};
// The CIFAR-style crop: pad by `padding`, then take an H x W window at a random offset in
// [0, 2 * padding] on each axis (offset `padding` is the original image).
Tensor random_crop(const Tensor& images, const CropOptions& options = {});

struct TranslationOptions {
  std::int64_t max_dx = 2, max_dy = 2;  // shifts drawn uniformly from [-max, max] pixels
  std::uint64_t seed = 0;
  Layout layout = Layout::hwc;
  double fill = 0.0;  // value of pixels shifted in from outside
};
// Shifts each image by whole pixels: out(y, x) = in(y - dy, x - dx).
Tensor random_translation(const Tensor& images, const TranslationOptions& options = {});

struct RotationOptions {
  double max_degrees = 10.0;  // angles drawn uniformly from [-max, max]
  Interpolation interpolation = Interpolation::bilinear;
  std::uint64_t seed = 0;
  Layout layout = Layout::hwc;
  double fill = 0.0;
};
// Rotates each image about its centre by a random angle (positive: counterclockwise).
Tensor random_rotation(const Tensor& images, const RotationOptions& options = {});
// Rotates every image by `degrees` counterclockwise about its centre ((H-1)/2, (W-1)/2).
Tensor rotate(const Tensor& images, double degrees,
              Interpolation interpolation = Interpolation::bilinear, Layout layout = Layout::hwc,
              double fill = 0.0);

// Keras' RandomZoom: each axis scaled about the centre by 1 + f, f drawn uniformly from
// [-factor, factor] (f > 0 zooms out: the image shrinks and `fill` shows at the borders; f < 0
// zooms in). Without width_factor both axes take the same f (the aspect ratio is kept).
struct ZoomOptions {
  double height_factor = 0.1;  // in [0, 1)
  std::optional<double> width_factor;
  Interpolation interpolation = Interpolation::bilinear;
  std::uint64_t seed = 0;
  Layout layout = Layout::hwc;
  double fill = 0.0;
};
Tensor random_zoom(const Tensor& images, const ZoomOptions& options = {});
// Every image: out(y, x) = in(cy + zoom_y * (y - cy), cx + zoom_x * (x - cx)) (> 1 zooms out).
Tensor zoom(const Tensor& images, double zoom_y, double zoom_x,
            Interpolation interpolation = Interpolation::bilinear, Layout layout = Layout::hwc,
            double fill = 0.0);

// Keras' RandomShear: shear factors drawn uniformly from [-x_factor, x_factor] and
// [-y_factor, y_factor] (tangents of the shear angles).
struct ShearOptions {
  double x_factor = 0.1, y_factor = 0.0;
  Interpolation interpolation = Interpolation::bilinear;
  std::uint64_t seed = 0;
  Layout layout = Layout::hwc;
  double fill = 0.0;
};
Tensor random_shear(const Tensor& images, const ShearOptions& options = {});
// Every image, about its centre: out(y, x) = in(y + shear_y * (x - cx), x + shear_x * (y - cy)).
Tensor shear(const Tensor& images, double shear_x, double shear_y,
             Interpolation interpolation = Interpolation::bilinear, Layout layout = Layout::hwc,
             double fill = 0.0);

// (x - mean[c]) / std[c] per channel; one value each applies to every channel. The result is
// f64 for f64 input and f32 otherwise.
Tensor normalize(const Tensor& images, const std::vector<double>& mean,
                 const std::vector<double>& std, Layout layout = Layout::hwc);

}  // namespace soma::data::augment
