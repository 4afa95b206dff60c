// A generative adversarial network (Goodfellow et al., 2014). Two MLPs play a game: the
// discriminator D learns to tell real samples from generated ones, the generator G learns to
// turn random noise into samples that D takes for real. They are trained alternately, one step
// each, with their own optimisers and GradientTapes.
//
//   gan [--data ring|fashion] [--fashion-dir DIR] [--steps N] [--batch-size B] [--seed S]
//       [--device cuda]   (or SOMA_DEVICE=cuda; example_device.hpp)
//       [--out FILE.png] [--check]
//
// ring (default): 2-D points from a ring of 8 Gaussians of radius 2; writes a scatter plot with
// the real points in grey and the generated ones in red. fashion: Fashion-MNIST images (from
// Debian's dataset-fashion-mnist, or --fashion-dir); writes an 8x8 grid of generated images.
// --check (ring only) exits non-zero unless the generated points moved onto the ring: their mean
// radius near 2, most of them close to one of the 8 modes, and at least 4 modes covered.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <soma/soma.hpp>

#include "example_device.hpp"

namespace nn = soma::nn;
using soma::Tensor;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kModes = 8;
constexpr double kRadius = 2.0, kSpread = 0.05;

// A batch of the target: a random mode k of the ring, plus Gaussian noise.
Tensor sample_ring(std::int64_t n) {
  Tensor k = soma::floor(soma::random_uniform({n, 1}, 0.0, double(kModes)));
  Tensor angle = k * (2.0 * kPi / kModes);
  Tensor centre = soma::concat({soma::cos(angle), soma::sin(angle)}, 1) * kRadius;
  return centre + soma::random_normal({n, 2}, 0.0, kSpread);
}

// How ring-like a set of points is: mean radius, the fraction within 0.5 of a mode, and how
// many modes hold at least 5% of the points.
struct RingStats {
  double mean_radius = 0, near_fraction = 0;
  int modes_covered = 0;
};
RingStats ring_stats(const Tensor& points) {
  auto p = points.to_vector<float>();
  const std::size_t n = p.size() / 2;
  std::vector<int> per_mode(kModes, 0);
  RingStats s;
  int near = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = p[2 * i], y = p[2 * i + 1];
    s.mean_radius += std::hypot(x, y) / double(n);
    for (int k = 0; k < kModes; ++k) {
      const double a = 2.0 * kPi * k / kModes;
      if (std::hypot(x - kRadius * std::cos(a), y - kRadius * std::sin(a)) < 0.5) {
        ++near;
        ++per_mode[std::size_t(k)];
      }
    }
  }
  s.near_fraction = double(near) / double(n);
  for (int c : per_mode) s.modes_covered += c >= int(0.05 * double(n));
  return s;
}

// A scatter plot in [-3, 3]^2: real points grey, generated points red, axes light grey.
void write_scatter(const Tensor& real, const Tensor& fake, const std::string& path) {
  const int side = 400;
  std::vector<std::uint8_t> img(std::size_t(side * side * 3), 255);
  auto plot = [&](const Tensor& pts, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
    auto p = pts.to_vector<float>();
    for (std::size_t i = 0; i + 1 < p.size(); i += 2) {
      const int cx = int((p[i] + 3.0) / 6.0 * side), cy = int((3.0 - p[i + 1]) / 6.0 * side);
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          const int x = cx + dx, y = cy + dy;
          if (x < 0 || y < 0 || x >= side || y >= side) continue;
          std::uint8_t* px = &img[std::size_t((y * side + x) * 3)];
          px[0] = r, px[1] = g, px[2] = b;
        }
    }
  };
  for (int i = 0; i < side; ++i)
    for (int c = 0; c < 3; ++c) {
      img[std::size_t((side / 2 * side + i) * 3 + c)] = 220;
      img[std::size_t((i * side + side / 2) * 3 + c)] = 220;
    }
  plot(real, 150, 150, 150);
  plot(fake, 220, 30, 30);
  soma::image::write_png(soma::constant(img, {side, side, 3}), path);
}

// n*n images [n*n, 784] in [0, 1] -> one grey [28n, 28n, 1] PNG.
void write_grid(const Tensor& images, int n, const std::string& path) {
  Tensor grid = images.reshape({n, n, 28, 28}).permute({0, 2, 1, 3}).reshape({n * 28, n * 28, 1});
  soma::image::write_png(soma::image::convert_image_dtype(soma::clip(grid, 0.0, 1.0), soma::DType::u8),
                         path);
}

}  // namespace

int main(int argc, char** argv) {
  const soma::Device device = soma::examples::device_from_args(argc, argv);
  using soma::examples::host;
  std::string data = "ring", fashion_dir = soma::data::kFashionMnistDir, out;
  int steps = -1;
  long batch = 128;
  unsigned long seed = 1;
  bool check = false, dir_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data" && i + 1 < argc) data = argv[++i];
    else if (a == "--fashion-dir" && i + 1 < argc) fashion_dir = argv[++i], dir_given = true;
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--batch-size" && i + 1 < argc) batch = std::atol(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--out" && i + 1 < argc) out = argv[++i];
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr,
                   "usage: gan [--data ring|fashion] [--fashion-dir DIR] [--steps N] "
                   "[--batch-size B] [--seed S] [--out FILE.png] [--check]\n");
      return 2;
    }
  }
  const bool ring = data == "ring";
  if (!ring && data != "fashion") {
    std::fprintf(stderr, "gan: --data is ring or fashion\n");
    return 2;
  }
  if (steps < 0) steps = ring ? 2000 : 3000;
  if (out.empty()) out = ring ? "gan_ring.png" : "gan_fashion.png";
  soma::set_seed(seed);

  try {
    // The real data: a sampler for the ring, a shuffled tensor of images for Fashion-MNIST.
    Tensor images;
    if (!ring) {
      if (!dir_given && !std::filesystem::is_directory(fashion_dir)) {  // 77: CTest's skip
        std::fprintf(stderr, "gan: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)\n",
                     fashion_dir.c_str());
        return 77;
      }
      // Flattened to [60000, 784] in [0, 1].
      images = soma::cast(soma::data::load_fashion_mnist(fashion_dir).x_train, soma::DType::f32)
                   .reshape({-1, 784}) / 255.0;
    }
    const std::int64_t dim = ring ? 2 : 784, latent = ring ? 4 : 64, hidden = ring ? 64 : 256;
    // Batches are drawn on the host and copied to the device (with G and D: --device).
    auto real_batch = [&](std::int64_t n) {
      if (ring) return sample_ring(n).to(device);
      Tensor idx = soma::cast(soma::random_uniform({n}, 0.0, double(images.dim(0))), soma::DType::i64);
      return soma::gather(images, idx).to(device);
    };

    // G: noise -> sample (a sigmoid keeps generated pixels in [0, 1]); D: sample -> logit.
    nn::Sequential G{nn::Input({latent}), nn::Dense(hidden, nn::relu), nn::Dense(hidden, nn::relu),
                     nn::Dense(dim, ring ? nn::linear : nn::sigmoid)};
    nn::Sequential D{nn::Input({dim}), nn::Dense(hidden, nn::leaky_relu),
                     nn::Dense(hidden, nn::leaky_relu), nn::Dense(1)};
    G.to(device);
    D.to(device);
    // beta_1 = 0.5, the usual choice for GANs: less momentum follows the moving target better.
    soma::optim::Adam g_opt({.learning_rate = 1e-3, .beta_1 = 0.5});
    soma::optim::Adam d_opt({.learning_rate = 1e-3, .beta_1 = 0.5});
    const nn::BinaryCrossentropy bce({.from_logits = true});
    const std::vector<soma::Variable> g_vars = G.trainable_parameters(),
                                      d_vars = D.trainable_parameters();
    const Tensor ones = soma::ones({batch, 1}).to(device), zeros = soma::zeros({batch, 1}).to(device);
    auto noise = [&](std::int64_t n) { return soma::random_normal({n, latent}).to(device); };

    const Tensor probe = noise(1000);  // fixed noise, to watch the generator's output
    RingStats before;
    if (ring) {
      before = ring_stats(host(G.predict(probe)));
      std::printf("before training: mean radius %.2f, %.0f%% of points near a mode, %d/8 modes\n",
                  before.mean_radius, 100 * before.near_fraction, before.modes_covered);
    }

    for (int step = 1; step <= steps; ++step) {
      // D step: real -> 1, generated -> 0. G's output is a constant here (no gradient to G).
      Tensor fake;
      {
        soma::NoGradScope no_grad;
        fake = G(noise(batch));
      }
      Tensor d_loss;
      {
        soma::GradientTape tape;
        d_loss = bce(ones, D(real_batch(batch))) + bce(zeros, D(fake));
        d_opt.apply_gradients(tape.gradient(d_loss, d_vars), d_vars);
      }
      // G step: make D say 1 for generated samples (the non-saturating loss). Only G's
      // variables are updated, though the gradient flows back through D.
      Tensor g_loss;
      {
        soma::GradientTape tape;
        g_loss = bce(ones, D(G(noise(batch))));
        g_opt.apply_gradients(tape.gradient(g_loss, g_vars), g_vars);
      }
      if (step % (steps / 10 > 0 ? steps / 10 : 1) == 0 || step == steps)
        std::printf("step %5d  d_loss %.4f  g_loss %.4f\n", step, host(d_loss).item<double>(),
                    host(g_loss).item<double>());
    }

    if (!ring) {
      write_grid(host(G.predict(noise(64))), 8, out);
      std::printf("wrote 64 generated images to %s\n", out.c_str());
      return 0;
    }
    const Tensor generated = host(G.predict(probe));
    const RingStats after = ring_stats(generated);
    std::printf("after %d steps:  mean radius %.2f, %.0f%% of points near a mode, %d/8 modes "
                "(target: radius 2, all points near a mode)\n",
                steps, after.mean_radius, 100 * after.near_fraction, after.modes_covered);
    write_scatter(sample_ring(1000), generated, out);
    std::printf("wrote a scatter plot (real grey, generated red) to %s\n", out.c_str());
    if (check) {
      const bool ok = std::abs(after.mean_radius - kRadius) < 0.3 && after.near_fraction > 0.5 &&
                      after.modes_covered >= 4;
      std::printf("check: %s\n", ok ? "passed" : "FAILED");
      return ok ? 0 : 1;
    }
  } catch (const soma::Error& e) {
    std::cerr << "gan: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
