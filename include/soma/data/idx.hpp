#pragma once
// The IDX format of MNIST, Fashion-MNIST and EMNIST, raw or gzip-compressed.
//
// An IDX file is a 4-byte magic number {0, 0, type, ndim}, ndim big-endian u32 dimensions, then
// the elements in row-major order, big-endian. Element types and the dtype they load as (soma has
// no 8- or 16-bit signed type, so those widen to i32):
//   0x08 u8 -> u8   0x09 i8 -> i32   0x0B i16 -> i32   0x0C i32 -> i32
//   0x0D f32 -> f32   0x0E f64 -> f64
#include <string>

#include "soma/data/train_test.hpp"
#include "soma/tensor.hpp"

namespace soma::data {

// Reads one IDX file. gzip is recognised by its magic bytes (1f 8b), not by the file name.
// Throws soma::Error naming the file for: a file that cannot be opened, a bad magic number,
// element type or rank (1..8), a header claiming more data than the file can hold (checked
// before anything is allocated), truncated data (expected and actual byte counts) and trailing
// bytes after the data.
Tensor read_idx(const std::string& path);

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Loads the four files train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
// and t10k-labels-idx1-ubyte (each raw or with a .gz suffix) from `dir`:
// x_train [60000, 28, 28] u8, y_train [60000] u8, x_test [10000, 28, 28] u8, y_test [10000] u8.
// Labels stay u8 as in the file (the sparse losses and metrics take any integer dtype).
// Checks that images are [N, H, W] u8, labels [N] u8 with the same N, and labels lie in 0..9.
// Missing files give an error listing them and saying what to put where.
TrainTestData load_mnist(const std::string& dir);
// The same files and layout; Debian's `dataset-fashion-mnist` package installs them in
// /usr/share/datasets/fashion-mnist.
TrainTestData load_fashion_mnist(const std::string& dir = kFashionMnistDir);

}  // namespace soma::data
