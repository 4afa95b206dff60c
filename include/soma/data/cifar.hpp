#pragma once
// The CIFAR-10 binary version: data_batch_1.bin .. data_batch_5.bin and test_batch.bin, each a
// sequence of 3073-byte records (1 label byte, then 32x32 red, green and blue planes).
#include <string>

#include "soma/data/train_test.hpp"
#include "soma/tensor.hpp"

namespace soma::data {

struct Cifar10Batch {
  Tensor x;  // [N, 3, 32, 32] u8, channels first as stored
  Tensor y;  // [N] u8, class ids 0..9
};

// Reads one batch file (raw or gzip-compressed). Throws soma::Error naming the file when its
// size is not a whole number of records or a label is not in 0..9.
Cifar10Batch read_cifar10_batch(const std::string& path);

// Loads the five training batches (x_train [50000, 3, 32, 32]) and the test batch
// (x_test [10000, 3, 32, 32]) from `dir`, or from `dir`/cifar-10-batches-bin where the archive
// was unpacked as is. Missing files give an error naming them. channels_last: x_train
// [50000, 32, 32, 3] and x_test [10000, 32, 32, 3] instead (Keras' layout).
TrainTestData load_cifar10(const std::string& dir, bool channels_last = false);

}  // namespace soma::data
