// Conway's Game of Life as tensor ops: each generation is one 3x3 convolution that counts every
// cell's live neighbours, then elementwise rules (a live cell with 2 or 3 neighbours lives, a
// dead one with exactly 3 is born). The board is a torus: it wraps around at the edges.
//
// Every op runs on the board's device and the kernel is put on the same device, so nothing here
// is CPU-specific: with --device cuda the same code runs on the GPU once soma has its CUDA
// backend (today it says the device is not available and stays on the CPU).
//
//   game_of_life [--size N] [--generations G] [--boards B] [--seed S] [--device cpu|cuda]
//                [--check]
//
// It checks the convolution version against a direct loop on B random boards, runs a glider for
// 4 generations (it must reappear shifted by one cell down and right), prints a small board and
// the generations per second. --check exits non-zero when any comparison fails.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <soma/soma.hpp>

using soma::Tensor;

namespace {

// Pads a [1, 1, H, W] board by one cell on every side with the cells of the opposite edge, so
// that a "valid" convolution sees a torus.
Tensor wrap_pad(const Tensor& b) {
  const std::int64_t h = b.dim(2), w = b.dim(3);
  Tensor rows = soma::concat({b.slice(2, h - 1, h), b, b.slice(2, 0, 1)}, 2);
  return soma::concat({rows.slice(3, w - 1, w), rows, rows.slice(3, 0, 1)}, 3);
}

// One generation. `board` is [1, 1, H, W] f32 with 0 (dead) and 1 (alive).
Tensor step(const Tensor& board, const Tensor& kernel) {
  Tensor n = soma::conv2d(wrap_pad(board), kernel);  // live neighbours of every cell
  Tensor born = n == 3.0;
  Tensor survives = soma::logical_and(board == 1.0, n == 2.0);
  return soma::cast(soma::logical_or(born, survives), board.dtype());
}

// The same rules as plain loops over a row-major H x W board: the reference.
std::vector<float> step_loop(const std::vector<float>& b, int h, int w) {
  std::vector<float> out(b.size());
  for (int i = 0; i < h; ++i)
    for (int j = 0; j < w; ++j) {
      int n = 0;
      for (int di = -1; di <= 1; ++di)
        for (int dj = -1; dj <= 1; ++dj)
          if (di || dj) n += b[std::size_t(((i + di + h) % h) * w + (j + dj + w) % w)] > 0.5f;
      bool alive = b[std::size_t(i * w + j)] > 0.5f;
      out[std::size_t(i * w + j)] = (n == 3 || (alive && n == 2)) ? 1.0f : 0.0f;
    }
  return out;
}

void print_board(const Tensor& board, int max_side = 24) {
  const int h = int(board.dim(2)), w = int(board.dim(3));
  auto v = board.to(soma::Device::cpu()).to_vector<float>();
  for (int i = 0; i < h && i < max_side; ++i) {
    std::string line;
    for (int j = 0; j < w && j < max_side; ++j) line += v[std::size_t(i * w + j)] > 0.5f ? '#' : '.';
    std::printf("  %s\n", line.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int size = 64, generations = 100, boards = 3;
  unsigned long seed = 1;
  std::string device_name = "cpu";
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--size" && i + 1 < argc) size = std::atoi(argv[++i]);
    else if (a == "--generations" && i + 1 < argc) generations = std::atoi(argv[++i]);
    else if (a == "--boards" && i + 1 < argc) boards = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--device" && i + 1 < argc) device_name = argv[++i];
    else if (a == "--check") check = true;
    else {
      std::fprintf(stderr,
                   "usage: game_of_life [--size N] [--generations G] [--boards B] [--seed S] "
                   "[--device cpu|cuda] [--check]\n");
      return 2;
    }
  }
  if (size < 8) {
    std::fprintf(stderr, "game_of_life: --size must be at least 8\n");
    return 2;
  }
  soma::set_seed(seed);

  soma::Device device = soma::Device::cpu();
  if (device_name == "cuda") {
    try {
      soma::zeros({1}).to(soma::Device::cuda());
      device = soma::Device::cuda();
    } catch (const soma::Error& e) {
      std::printf("GPU: not available (%s); running on the CPU\n", e.what());
    }
  }
  std::printf("device: %s\n", device.str().c_str());

  // The neighbour-counting kernel [out 1, in 1, 3, 3]: ones around a zero centre.
  const Tensor kernel =
      soma::constant<float>({1, 1, 1, 1, 0, 1, 1, 1, 1}, {1, 1, 3, 3}).to(device);

  // 1. Random boards: the convolution version against the loops, generation by generation.
  int mismatches = 0;
  for (int b = 0; b < boards; ++b) {
    Tensor board = soma::cast(soma::random_uniform({1, 1, size, size}) < 0.35, soma::DType::f32)
                       .to(device);
    auto ref = board.to(soma::Device::cpu()).to_vector<float>();
    int first_bad = -1;
    for (int g = 0; g < generations && first_bad < 0; ++g) {
      board = step(board, kernel);
      ref = step_loop(ref, size, size);
      if (board.to(soma::Device::cpu()).to_vector<float>() != ref) first_bad = g + 1;
    }
    long alive = 0;
    for (float v : ref) alive += v > 0.5f;
    if (first_bad < 0) {
      std::printf("random board %d: %dx%d, %d generations match the direct loop (%ld alive)\n",
                  b, size, size, generations, alive);
    } else {
      ++mismatches;
      std::printf("random board %d: differs from the direct loop at generation %d\n", b,
                  first_bad);
    }
  }

  // 2. A glider moves one cell down and one right every 4 generations.
  std::vector<float> g(std::size_t(size * size), 0.0f);
  const int cells[5][2] = {{0, 1}, {1, 2}, {2, 0}, {2, 1}, {2, 2}};
  for (const auto& c : cells) g[std::size_t(c[0] * size + c[1])] = 1;
  Tensor glider = soma::constant(g, {1, 1, size, size}).to(device);
  Tensor moved = glider;
  for (int k = 0; k < 4; ++k) moved = step(moved, kernel);
  // The expected board: the start shifted by (1, 1) with wrap-around.
  std::vector<float> shifted(g.size(), 0.0f);
  for (int i = 0; i < size; ++i)
    for (int j = 0; j < size; ++j)
      shifted[std::size_t(((i + 1) % size) * size + (j + 1) % size)] = g[std::size_t(i * size + j)];
  const bool glider_ok = moved.to(soma::Device::cpu()).to_vector<float>() == shifted;
  std::printf("glider at the start and after 4 generations (top-left 6x6): %s\n",
              glider_ok ? "same shape, shifted by (1, 1)" : "WRONG");
  print_board(glider.slice(2, 0, 6).slice(3, 0, 6));
  std::printf("\n");
  print_board(moved.slice(2, 0, 6).slice(3, 0, 6));

  // 3. Speed: generations per second on one board.
  Tensor board = soma::cast(soma::random_uniform({1, 1, size, size}) < 0.35, soma::DType::f32)
                     .to(device);
  auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < generations; ++k) board = step(board, kernel);
  board.to(soma::Device::cpu());  // waits for the device before the clock stops
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d generations of %dx%d in %.3f s: %.0f generations/s, %.1f Mcells/s\n",
              generations, size, size, s, generations / s, generations * double(size) * size / s / 1e6);

  if (check) {
    const bool ok = mismatches == 0 && glider_ok;
    std::printf("check: %s\n", ok ? "passed" : "FAILED");
    return ok ? 0 : 1;
  }
  return 0;
}
