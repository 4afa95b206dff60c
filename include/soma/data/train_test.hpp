#pragma once
// The four tensors a classic image-classification data set comes as (Keras' load_data()).
#include "soma/tensor.hpp"

namespace soma::data {

// Unpacks with structured bindings:
//   auto [x_train, y_train, x_test, y_test] = soma::data::load_fashion_mnist();
struct TrainTestData {
  Tensor x_train;  // images, u8, [N, ...]
  Tensor y_train;  // class ids, u8, [N]
  Tensor x_test;
  Tensor y_test;
};

}  // namespace soma::data
