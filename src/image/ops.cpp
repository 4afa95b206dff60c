// Image ops on [H, W, C] and [N, H, W, C] tensors, built from soma ops so that float images
// get gradients. u8 images are processed in f32 and converted back.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "soma/image.hpp"
#include "soma/ops.hpp"

namespace soma::image {
namespace {

// The image as a batch [N, H, W, C], remembering whether to drop N again.
struct Batch {
  Tensor t;
  bool batched = false;
  Tensor restore(const Tensor& out) const {
    if (batched) return out;
    Shape s(out.shape().begin() + 1, out.shape().end());
    return reshape(out, s);
  }
};

Batch as_batch(const Tensor& image, const char* op) {
  if (!image.defined()) fail(op, "got an undefined tensor");
  if (image.rank() == 4) return {image, true};
  if (image.rank() == 3) return {expand_dims(image, 0), false};
  fail(op, "expected an image [H, W, C] or a batch [N, H, W, C], got shape ",
       shape_str(image.shape()));
}

void check_image_dtype(const Tensor& image, const char* op) {
  if (image.dtype() != DType::u8 && !is_floating(image.dtype()))
    fail(op, "expected a u8 or floating-point image, got dtype ", dtype_name(image.dtype()));
}

void check_channels(const Tensor& image, std::int64_t want, const char* op) {
  if (image.dim(-1) != want)
    fail(op, "expected ", want, " channel", want == 1 ? "" : "s", " (last axis), got shape ",
         shape_str(image.shape()));
}

// u8 -> f32 keeping the 0..255 scale (for geometric ops); floats pass through.
Tensor working(const Tensor& t) { return t.dtype() == DType::u8 ? cast(t, DType::f32) : t; }
// Back to u8 after a geometric op: round to nearest, saturate.
Tensor back_to(const Tensor& t, DType dtype) {
  if (dtype != DType::u8) return t;
  return cast(clip(round(t), 0.0, 255.0), DType::u8);
}

Tensor index_tensor(const std::vector<std::int64_t>& idx) {
  return constant(idx, Shape{std::int64_t(idx.size())});
}

// A [1, ..., n, ..., 1] weight tensor (n at `axis` of a rank-4 shape) in `dtype`.
Tensor weights(const std::vector<double>& w, int axis, DType dtype) {
  Shape s{1, 1, 1, 1};
  s[std::size_t(axis)] = std::int64_t(w.size());
  return constant(w, s).cast(dtype);
}

Tensor resize_axis(const Tensor& x, std::int64_t out, int axis, Interpolation method) {
  const std::int64_t in = x.dim(axis);
  if (in == out) return x;
  const double scale = double(in) / double(out);
  if (method == Interpolation::nearest) {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(out));
    for (std::int64_t i = 0; i < out; ++i)
      idx[std::size_t(i)] = std::min(in - 1, std::int64_t(std::floor((double(i) + 0.5) * scale)));
    return gather(x, index_tensor(idx), axis);
  }
  std::vector<std::int64_t> lo(static_cast<std::size_t>(out)), hi(static_cast<std::size_t>(out));
  std::vector<double> frac(static_cast<std::size_t>(out));
  for (std::int64_t i = 0; i < out; ++i) {
    const double c = (double(i) + 0.5) * scale - 0.5;
    const double f = std::floor(c);
    lo[std::size_t(i)] = std::max<std::int64_t>(0, std::int64_t(f));
    hi[std::size_t(i)] = std::min<std::int64_t>(in - 1, std::int64_t(std::ceil(c)));
    frac[std::size_t(i)] = c - f;
  }
  Tensor a = gather(x, index_tensor(lo), axis);
  Tensor b = gather(x, index_tensor(hi), axis);
  return a + (b - a) * weights(frac, axis, x.dtype());
}

// Float image -> u8 as tf.image.convert_image_dtype: x * 255.5, truncated, saturated.
Tensor float_to_u8(const Tensor& t) { return cast(floor(clip(t * 255.5, 0.0, 255.0)), DType::u8); }

// Runs a colour op in float and converts back, as tf.image does for integer images.
template <class Fn>
Tensor in_float(const Tensor& image, Fn fn) {
  if (image.dtype() != DType::u8) return fn(image);
  return float_to_u8(fn(cast(image, DType::f32) / 255.0));
}

}  // namespace

Tensor resize(const Tensor& image, Size size, Interpolation method) {
  const char* op = "image::resize";
  Batch b = as_batch(image, op);
  check_image_dtype(image, op);
  if (size.height < 1 || size.width < 1 || size.height > kMaxSide || size.width > kMaxSide)
    fail(op, "target size ", size.height, " x ", size.width, " must be within 1..", kMaxSide,
         " per side (image shape ", shape_str(image.shape()), ")");
  if (b.t.dim(1) < 1 || b.t.dim(2) < 1)
    fail(op, "cannot resize an empty image of shape ", shape_str(image.shape()));
  const DType dt = image.dtype();
  if (method == Interpolation::nearest) {  // exact copies: no float round trip needed
    Tensor y = resize_axis(resize_axis(b.t, size.height, 1, method), size.width, 2, method);
    return b.restore(y);
  }
  Tensor x = working(b.t);
  Tensor y = resize_axis(resize_axis(x, size.height, 1, method), size.width, 2, method);
  return b.restore(back_to(y, dt));
}

Tensor flip_left_right(const Tensor& image) {
  Batch b = as_batch(image, "image::flip_left_right");
  return b.restore(b.t.slice(2, std::nullopt, std::nullopt, -1));
}

Tensor flip_up_down(const Tensor& image) {
  Batch b = as_batch(image, "image::flip_up_down");
  return b.restore(b.t.slice(1, std::nullopt, std::nullopt, -1));
}

Tensor crop(const Tensor& image, std::int64_t top, std::int64_t left, std::int64_t height,
            std::int64_t width) {
  const char* op = "image::crop";
  Batch b = as_batch(image, op);
  const std::int64_t H = b.t.dim(1), W = b.t.dim(2);
  if (top < 0 || left < 0 || height < 1 || width < 1 || top + height > H || left + width > W)
    fail(op, "box (top ", top, ", left ", left, ", height ", height, ", width ", width,
         ") does not fit in an image of shape ", shape_str(image.shape()),
         "; need 0 <= top, 0 <= left, top + height <= ", H, ", left + width <= ", W,
         " and a non-empty box");
  return b.restore(b.t.slice(1, top, top + height).slice(2, left, left + width));
}

Tensor pad(const Tensor& image, Padding p, double value) {
  const char* op = "image::pad";
  Batch b = as_batch(image, op);
  if (p.top < 0 || p.bottom < 0 || p.left < 0 || p.right < 0)
    fail(op, "paddings must be non-negative, got top ", p.top, ", bottom ", p.bottom, ", left ",
         p.left, ", right ", p.right, " for an image of shape ", shape_str(image.shape()));
  if (image.dtype() == DType::u8 && (value < 0 || value > 255))
    fail(op, "fill value ", value, " is outside 0..255 for a u8 image");
  return b.restore(soma::pad(b.t, {{0, 0}, {p.top, p.bottom}, {p.left, p.right}, {0, 0}}, value));
}

Tensor pad_to_bounding_box(const Tensor& image, std::int64_t top, std::int64_t left,
                           std::int64_t height, std::int64_t width) {
  const char* op = "image::pad_to_bounding_box";
  Batch b = as_batch(image, op);
  const std::int64_t H = b.t.dim(1), W = b.t.dim(2);
  if (top < 0 || left < 0 || top + H > height || left + W > width)
    fail(op, "an image of shape ", shape_str(image.shape()), " placed at (top ", top, ", left ",
         left, ") does not fit in a ", height, " x ", width, " canvas");
  return pad(image, {.top = top, .bottom = height - top - H, .left = left,
                     .right = width - left - W});
}

Tensor rotate(const Tensor& image, double angle_degrees, Interpolation method, double fill) {
  const char* op = "image::rotate";
  Batch b = as_batch(image, op);
  check_image_dtype(image, op);
  if (!std::isfinite(angle_degrees)) fail(op, "angle must be finite, got ", angle_degrees);
  const std::int64_t N = b.t.dim(0), H = b.t.dim(1), W = b.t.dim(2), C = b.t.dim(3);
  const DType dt = image.dtype();
  const double th = angle_degrees * std::numbers::pi / 180.0;
  const double cs = std::cos(th), sn = std::sin(th);
  const double cy = double(H - 1) / 2, cx = double(W - 1) / 2;
  const std::size_t P = std::size_t(H * W);

  // Each output pixel blends up to 4 source pixels (1 for nearest): out = sum_k a_k * x[idx_k]
  // + fill_w, where a_k is the weight of an in-bounds sample and fill_w collects the weight
  // of the out-of-bounds ones times `fill`.
  const int K = method == Interpolation::nearest ? 1 : 4;
  std::vector<std::vector<std::int64_t>> idx(std::size_t(K), std::vector<std::int64_t>(P, 0));
  std::vector<std::vector<double>> a(std::size_t(K), std::vector<double>(P, 0.0));
  std::vector<double> fill_w(P, 0.0);
  for (std::int64_t y = 0; y < H; ++y) {
    for (std::int64_t x = 0; x < W; ++x) {
      const std::size_t p = std::size_t(y * W + x);
      const double dx = double(x) - cx, dy = double(y) - cy;
      const double sx = cx + dx * cs - dy * sn;  // inverse mapping: the source of (y, x)
      const double sy = cy + dx * sn + dy * cs;
      auto put = [&](int k, double yy, double xx, double w) {
        const bool in = yy >= 0 && yy < double(H) && xx >= 0 && xx < double(W);
        if (in) {
          idx[std::size_t(k)][p] = std::int64_t(yy) * W + std::int64_t(xx);
          a[std::size_t(k)][p] = w;
        } else {
          fill_w[p] += w * fill;
        }
      };
      if (K == 1) {
        put(0, std::floor(sy + 0.5), std::floor(sx + 0.5), 1.0);
      } else {
        const double y0 = std::floor(sy), x0 = std::floor(sx);
        const double fy = sy - y0, fx = sx - x0;
        put(0, y0, x0, (1 - fy) * (1 - fx));
        put(1, y0, x0 + 1, (1 - fy) * fx);
        put(2, y0 + 1, x0, fy * (1 - fx));
        put(3, y0 + 1, x0 + 1, fy * fx);
      }
    }
  }
  Tensor flat = reshape(working(b.t), {N, std::int64_t(P), C});
  const DType wdt = flat.dtype();
  auto col = [&](const std::vector<double>& v) {
    return constant(v, Shape{1, std::int64_t(P), 1}).cast(wdt);
  };
  Tensor out = col(fill_w);
  for (int k = 0; k < K; ++k)
    out = out + gather(flat, index_tensor(idx[std::size_t(k)]), 1) * col(a[std::size_t(k)]);
  out = reshape(out, {N, H, W, C});
  return b.restore(back_to(out, dt));
}

Tensor adjust_brightness(const Tensor& image, double delta) {
  const char* op = "image::adjust_brightness";
  Batch b = as_batch(image, op);
  check_image_dtype(image, op);
  return b.restore(in_float(b.t, [&](const Tensor& x) { return x + delta; }));
}

Tensor adjust_contrast(const Tensor& image, double factor) {
  const char* op = "image::adjust_contrast";
  Batch b = as_batch(image, op);
  check_image_dtype(image, op);
  return b.restore(in_float(b.t, [&](const Tensor& x) {
    Tensor m = mean(x, {1, 2}, /*keepdims=*/true);
    return (x - m) * factor + m;
  }));
}

Tensor rgb_to_grayscale(const Tensor& image) {
  const char* op = "image::rgb_to_grayscale";
  Batch b = as_batch(image, op);
  check_image_dtype(image, op);
  check_channels(image, 3, op);
  return b.restore(in_float(b.t, [&](const Tensor& x) {
    Tensor w = constant(std::vector<double>{0.2989, 0.5870, 0.1140}, Shape{3}).cast(x.dtype());
    return sum(x * w, {-1}, /*keepdims=*/true);
  }));
}

Tensor grayscale_to_rgb(const Tensor& image) {
  const char* op = "image::grayscale_to_rgb";
  Batch b = as_batch(image, op);
  check_channels(image, 1, op);
  return b.restore(concat({b.t, b.t, b.t}, -1));
}

Tensor convert_image_dtype(const Tensor& image, DType dtype) {
  const char* op = "image::convert_image_dtype";
  if (!image.defined()) fail(op, "got an undefined tensor");
  const DType from = image.dtype();
  auto ok = [](DType t) { return t == DType::u8 || is_floating(t); };
  if (!ok(from) || !ok(dtype))
    fail(op, "converts between u8 and floating-point images only, got ", dtype_name(from),
         " -> ", dtype_name(dtype), " (shape ", shape_str(image.shape()), ")");
  if (from == dtype) return image;
  if (from == DType::u8) return cast(image, dtype) / 255.0;
  if (dtype == DType::u8) return float_to_u8(image);
  return cast(image, dtype);
}

Tensor to_chw(const Tensor& image) {
  Batch b = as_batch(image, "image::to_chw");
  if (b.batched) return contiguous(transpose(image, {0, 3, 1, 2}));
  return contiguous(transpose(image, {2, 0, 1}));
}

Tensor to_chw_f32(const Tensor& image) {
  return to_chw(convert_image_dtype(image, DType::f32));
}

Tensor to_model_input(const Tensor& image, const ModelInputOptions& o) {
  const char* op = "image::to_model_input";
  if (!image.defined()) fail(op, "got an undefined tensor");
  if (image.rank() != 3)
    fail(op, "expected one image [H, W, C], got shape ", shape_str(image.shape()));
  check_image_dtype(image, op);
  const std::int64_t C = image.dim(2);
  if (C < 1 || C > 4) fail(op, "expected 1 to 4 channels, got shape ", shape_str(image.shape()));
  if (o.height < 1 || o.width < 1 || o.height > kMaxSide || o.width > kMaxSide)
    fail(op, "target size ", o.height, " x ", o.width, " must be within 1..", kMaxSide);
  if (image.dim(0) < 1 || image.dim(1) < 1)
    fail(op, "cannot use an empty image of shape ", shape_str(image.shape()));

  Tensor f = convert_image_dtype(image, DType::f32);
  if (C == 2 || C == 4) {  // composite over white, as a product photo's background
    Tensor colour = f.slice(2, 0, C - 1), alpha = f.slice(2, C - 1, C);
    f = colour * alpha + (1.0 - alpha);
  }
  Tensor g = f.dim(2) == 3 ? rgb_to_grayscale(f) : f;  // [H, W, 1]
  const std::int64_t H = g.dim(0), W = g.dim(1);

  bool invert = o.invert == Invert::always;
  if (o.invert == Invert::automatic) {
    Tensor border = concat({reshape(g.slice(0, 0, 1), {-1}), reshape(g.slice(0, H - 1, H), {-1}),
                            reshape(g.slice(1, 0, 1), {-1}), reshape(g.slice(1, W - 1, W), {-1})});
    invert = mean(border).item<double>() > 0.5;
  }
  if (invert) g = 1.0 - g;

  std::int64_t nh = o.height, nw = o.width;
  if (o.keep_aspect_ratio) {
    const double s = std::min(double(o.height) / double(H), double(o.width) / double(W));
    nh = std::clamp<std::int64_t>(std::llround(double(H) * s), 1, o.height);
    nw = std::clamp<std::int64_t>(std::llround(double(W) * s), 1, o.width);
  }
  // Halving with half-pixel bilinear averages 2x2 blocks: a cheap antialiasing filter.
  std::int64_t h = H, w = W;
  while (h >= 2 * nh || w >= 2 * nw) {
    h = h >= 2 * nh ? h / 2 : h;
    w = w >= 2 * nw ? w / 2 : w;
    g = resize(g, {h, w}, Interpolation::bilinear);
  }
  g = resize(g, {nh, nw}, Interpolation::bilinear);
  const std::int64_t top = (o.height - nh) / 2, left = (o.width - nw) / 2;
  g = pad(g, {.top = top, .bottom = o.height - nh - top, .left = left,
              .right = o.width - nw - left});
  g = clip(g, 0.0, 1.0);
  if (o.channel_axis && o.channels_last) return reshape(g, {1, o.height, o.width, 1});
  if (o.channel_axis) return reshape(g, {1, 1, o.height, o.width});
  return reshape(g, {1, o.height, o.width});
}

Tensor load_model_input(const std::string& path, const ModelInputOptions& options) {
  return to_model_input(read_png(path), options);
}

}  // namespace soma::image
