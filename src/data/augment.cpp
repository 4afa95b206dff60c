#include "soma/data/augment.hpp"

#include <array>
#include <cmath>
#include <functional>

#include "soma/error.hpp"
#include "soma/ops.hpp"

namespace soma::data::augment {

namespace {
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// The k-th uniform number in [0, 1) of image n: a pure function of (seed, n, k).
double uniform(std::uint64_t seed, std::int64_t n, int k) {
  const std::uint64_t h =
      splitmix64(splitmix64(seed ^ splitmix64(std::uint64_t(n))) + std::uint64_t(k));
  return double(h >> 11) * 0x1.0p-53;
}
std::int64_t uniform_int(std::uint64_t seed, std::int64_t n, int k, std::int64_t lo,
                         std::int64_t hi) {  // inclusive
  return lo + std::min(hi - lo, std::int64_t(uniform(seed, n, k) * double(hi - lo + 1)));
}

// Index arithmetic for the supported layouts: element (n, c, y, x) of a contiguous tensor.
struct Geometry {
  std::int64_t N = 1, C = 1, H = 0, W = 0;
  std::int64_t sn = 0, sc = 0, sy = 0, sx = 0;
  std::int64_t at(std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) const {
    return n * sn + c * sc + y * sy + x * sx;
  }
};

Geometry geometry(const char* who, const Tensor& t, Layout layout) {
  if (!t.defined()) fail(who, "the image tensor is undefined");
  const Shape& s = t.shape();
  Geometry g;
  const bool hwc = layout == Layout::hwc;
  switch (s.size()) {
    case 2: g.H = s[0]; g.W = s[1]; break;
    case 3:
      if (hwc) { g.H = s[0]; g.W = s[1]; g.C = s[2]; }
      else { g.C = s[0]; g.H = s[1]; g.W = s[2]; }
      break;
    case 4:
      g.N = s[0];
      if (hwc) { g.H = s[1]; g.W = s[2]; g.C = s[3]; }
      else { g.C = s[1]; g.H = s[2]; g.W = s[3]; }
      break;
    default:
      fail(who, "expected an image [H, W], [H, W, C] / [C, H, W] or a batch [N, H, W, C] / ",
           "[N, C, H, W], got shape ", shape_str(s));
  }
  if (!is_floating(t.dtype()) && !is_integral(t.dtype()))
    fail(who, "expected a real dtype, got ", dtype_name(t.dtype()));
  if (hwc) { g.sx = g.C; g.sc = 1; g.sy = g.W * g.C; }
  else { g.sx = 1; g.sy = g.W; g.sc = g.H * g.W; }
  g.sn = g.C * g.H * g.W;
  return g;
}

Tensor finish(std::vector<double>& out, const Tensor& like) {
  if (!is_floating(like.dtype()))
    for (auto& v : out) v = std::round(v);
  return constant(out, like.shape()).cast(like.dtype());
}

// Maps every output pixel (y, x) of image n to a source position; `map` returns false when
// the source is outside the image (the pixel gets `fill`).
using PixelMap = std::function<bool(std::int64_t n, std::int64_t y, std::int64_t x,
                                    std::int64_t& sy, std::int64_t& sx)>;

Tensor remap_int(const char* who, const Tensor& images, Layout layout, double fill,
                 const PixelMap& map) {
  const Geometry g = geometry(who, images, layout);
  const std::vector<double> in = images.to_vector<double>();
  std::vector<double> out(in.size());
  for (std::int64_t n = 0; n < g.N; ++n)
    for (std::int64_t y = 0; y < g.H; ++y)
      for (std::int64_t x = 0; x < g.W; ++x) {
        std::int64_t sy = 0, sx = 0;
        const bool inside = map(n, y, x, sy, sx) && sy >= 0 && sy < g.H && sx >= 0 && sx < g.W;
        for (std::int64_t c = 0; c < g.C; ++c)
          out[std::size_t(g.at(n, c, y, x))] = inside ? in[std::size_t(g.at(n, c, sy, sx))] : fill;
      }
  return finish(out, images);
}

void check_probability(const char* who, double p) {
  if (!(p >= 0.0 && p <= 1.0)) fail(who, "probability must be in [0, 1], got ", p);
}
}  // namespace

Tensor random_flip_left_right(const Tensor& images, const FlipOptions& o) {
  const char* who = "random_flip_left_right";
  check_probability(who, o.probability);
  const std::int64_t W = geometry(who, images, o.layout).W;
  return remap_int(who, images, o.layout, 0.0,
                   [&](std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t& sy,
                       std::int64_t& sx) {
                     const bool flip = uniform(o.seed, n, 0) < o.probability;
                     sy = y;
                     sx = flip ? W - 1 - x : x;
                     return true;
                   });
}

Tensor random_flip_up_down(const Tensor& images, const FlipOptions& o) {
  const char* who = "random_flip_up_down";
  check_probability(who, o.probability);
  const std::int64_t H = geometry(who, images, o.layout).H;
  return remap_int(who, images, o.layout, 0.0,
                   [&](std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t& sy,
                       std::int64_t& sx) {
                     const bool flip = uniform(o.seed, n, 0) < o.probability;
                     sy = flip ? H - 1 - y : y;
                     sx = x;
                     return true;
                   });
}

Tensor random_crop(const Tensor& images, const CropOptions& o) {
  const char* who = "random_crop";
  if (o.padding < 0) fail(who, "padding must be >= 0, got ", o.padding);
  // Window offset (oy, ox) in the padded image; source = offset - padding + position.
  return remap_int(who, images, o.layout, o.fill,
                   [&](std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t& sy,
                       std::int64_t& sx) {
                     sy = y + uniform_int(o.seed, n, 0, 0, 2 * o.padding) - o.padding;
                     sx = x + uniform_int(o.seed, n, 1, 0, 2 * o.padding) - o.padding;
                     return true;
                   });
}

Tensor random_translation(const Tensor& images, const TranslationOptions& o) {
  const char* who = "random_translation";
  if (o.max_dx < 0 || o.max_dy < 0)
    fail(who, "max_dx and max_dy must be >= 0, got ", o.max_dx, " and ", o.max_dy);
  return remap_int(who, images, o.layout, o.fill,
                   [&](std::int64_t n, std::int64_t y, std::int64_t x, std::int64_t& sy,
                       std::int64_t& sx) {
                     sy = y - uniform_int(o.seed, n, 0, -o.max_dy, o.max_dy);
                     sx = x - uniform_int(o.seed, n, 1, -o.max_dx, o.max_dx);
                     return true;
                   });
}

namespace {
// Samples every output pixel (x, y) of image n from the source position
// centre + A * ((x, y) - centre), A = a(n) = {a00, a01, a10, a11} (x from the first row); the
// rotation, zoom and shear are such maps about the image centre ((H-1)/2, (W-1)/2).
using AffineOf = std::function<std::array<double, 4>(std::int64_t n)>;
Tensor affine_each(const char* who, const Tensor& images, Layout layout, double fill,
                   Interpolation interp, const AffineOf& a_of) {
  const Geometry g = geometry(who, images, layout);
  const std::vector<double> in = images.to_vector<double>();
  std::vector<double> out(in.size());
  const double cy = double(g.H - 1) / 2.0, cx = double(g.W - 1) / 2.0;
  auto pixel = [&](std::int64_t n, std::int64_t c, std::int64_t y, std::int64_t x) {
    if (y < 0 || y >= g.H || x < 0 || x >= g.W) return fill;
    return in[std::size_t(g.at(n, c, y, x))];
  };
  for (std::int64_t n = 0; n < g.N; ++n) {
    const std::array<double, 4> a = a_of(n);
    // A NaN or infinite factor maps every pixel to NaN coordinates, whose conversion to an
    // index is undefined behaviour: refuse it.
    for (double v : a)
      if (!std::isfinite(v)) fail(who, "the transform must be finite, got a factor ", v);
    for (std::int64_t y = 0; y < g.H; ++y)
      for (std::int64_t x = 0; x < g.W; ++x) {
        const double dx = double(x) - cx, dy = double(y) - cy;
        const double fx = cx + a[0] * dx + a[1] * dy, fy = cy + a[2] * dx + a[3] * dy;
        for (std::int64_t c = 0; c < g.C; ++c) {
          double v;
          if (interp == Interpolation::nearest) {
            v = pixel(n, c, std::int64_t(std::lround(fy)), std::int64_t(std::lround(fx)));
          } else {
            const double y0 = std::floor(fy), x0 = std::floor(fx);
            const double ty = fy - y0, tx = fx - x0;
            const auto iy = std::int64_t(y0), ix = std::int64_t(x0);
            v = (1 - ty) * ((1 - tx) * pixel(n, c, iy, ix) + tx * pixel(n, c, iy, ix + 1)) +
                ty * ((1 - tx) * pixel(n, c, iy + 1, ix) + tx * pixel(n, c, iy + 1, ix + 1));
          }
          out[std::size_t(g.at(n, c, y, x))] = v;
        }
      }
  }
  return finish(out, images);
}

// Inverse map (y grows downwards): the source of a counterclockwise rotation.
std::array<double, 4> rotation(const char* who, double deg) {
  if (!std::isfinite(deg)) fail(who, "the angle must be finite, got ", deg, " degrees");
  const double th = deg * M_PI / 180.0, cs = std::cos(th), sn = std::sin(th);
  return {cs, -sn, sn, cs};
}

void check_factor(const char* who, const char* what, double f, double below) {
  if (!(f >= 0.0 && f < below))
    fail(who, what, " must be in [0, ", below, "), got ", f);
}
}  // namespace

Tensor rotate(const Tensor& images, double degrees, Interpolation interpolation, Layout layout,
              double fill) {
  return affine_each("rotate", images, layout, fill, interpolation,
                     [&](std::int64_t) { return rotation("rotate", degrees); });
}

Tensor random_rotation(const Tensor& images, const RotationOptions& o) {
  const char* who = "random_rotation";
  if (!(o.max_degrees >= 0.0) || std::isinf(o.max_degrees))
    fail(who, "max_degrees must be finite and >= 0, got ", o.max_degrees);
  return affine_each(who, images, o.layout, o.fill, o.interpolation, [&](std::int64_t n) {
    return rotation(who, (2.0 * uniform(o.seed, n, 0) - 1.0) * o.max_degrees);
  });
}

Tensor zoom(const Tensor& images, double zoom_y, double zoom_x, Interpolation interpolation,
            Layout layout, double fill) {
  if (!(zoom_y > 0.0) || !(zoom_x > 0.0) || std::isinf(zoom_y) || std::isinf(zoom_x))
    fail("zoom", "the zoom factors must be finite and > 0, got ", zoom_y, " (height) and ",
         zoom_x, " (width)");
  return affine_each("zoom", images, layout, fill, interpolation, [&](std::int64_t) {
    return std::array<double, 4>{zoom_x, 0.0, 0.0, zoom_y};
  });
}

Tensor random_zoom(const Tensor& images, const ZoomOptions& o) {
  const char* who = "random_zoom";
  check_factor(who, "height_factor", o.height_factor, 1.0);
  if (o.width_factor) check_factor(who, "width_factor", *o.width_factor, 1.0);
  return affine_each(who, images, o.layout, o.fill, o.interpolation, [&](std::int64_t n) {
    const double zy = 1.0 + (2.0 * uniform(o.seed, n, 0) - 1.0) * o.height_factor;
    const double zx =
        o.width_factor ? 1.0 + (2.0 * uniform(o.seed, n, 1) - 1.0) * *o.width_factor : zy;
    return std::array<double, 4>{zx, 0.0, 0.0, zy};
  });
}

Tensor shear(const Tensor& images, double shear_x, double shear_y, Interpolation interpolation,
             Layout layout, double fill) {
  return affine_each("shear", images, layout, fill, interpolation, [&](std::int64_t) {
    return std::array<double, 4>{1.0, shear_x, shear_y, 1.0};
  });
}

Tensor random_shear(const Tensor& images, const ShearOptions& o) {
  const char* who = "random_shear";
  if (!(o.x_factor >= 0.0) || std::isinf(o.x_factor))
    fail(who, "x_factor must be finite and >= 0, got ", o.x_factor);
  if (!(o.y_factor >= 0.0) || std::isinf(o.y_factor))
    fail(who, "y_factor must be finite and >= 0, got ", o.y_factor);
  return affine_each(who, images, o.layout, o.fill, o.interpolation, [&](std::int64_t n) {
    return std::array<double, 4>{1.0, (2.0 * uniform(o.seed, n, 0) - 1.0) * o.x_factor,
                                 (2.0 * uniform(o.seed, n, 1) - 1.0) * o.y_factor, 1.0};
  });
}

Tensor normalize(const Tensor& images, const std::vector<double>& mean,
                 const std::vector<double>& stdv, Layout layout) {
  const char* who = "normalize";
  const Geometry g = geometry(who, images, layout);
  auto check = [&](const std::vector<double>& v, const char* name) {
    if (v.size() != 1 && std::int64_t(v.size()) != g.C)
      fail(who, name, " has ", v.size(), " values for ", g.C, " channels (give 1 or ", g.C, ")");
  };
  check(mean, "mean");
  check(stdv, "std");
  for (double s : stdv)
    if (!(s != 0.0)) fail(who, "std must be non-zero, got ", s);
  // Shape the per-channel constants to broadcast against the channel axis.
  Shape cshape(std::size_t(images.rank()), 1);
  if (g.C > 1 || images.rank() >= 3) {
    const std::size_t caxis = layout == Layout::hwc ? cshape.size() - 1 : cshape.size() - 3;
    cshape[caxis] = g.C;
  }
  const DType dt = images.dtype() == DType::f64 ? DType::f64 : DType::f32;
  auto per_channel = [&](const std::vector<double>& v) {
    std::vector<double> full(std::size_t(g.C));
    for (std::int64_t c = 0; c < g.C; ++c) full[std::size_t(c)] = v.size() == 1 ? v[0] : v[std::size_t(c)];
    return constant(full, cshape).cast(dt);
  };
  return (images.cast(dt) - per_channel(mean)) / per_channel(stdv);
}

}  // namespace soma::data::augment
