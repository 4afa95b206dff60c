#pragma once
// Shared by src/model/keras.cpp and keras_h5.cpp.
#include <string>

namespace soma::model::internal {

// Keras' to_snake_case: GlorotUniform -> glorot_uniform, Conv2D -> conv2d, Conv2DTranspose ->
// conv2d_transpose, BatchNormalization -> batch_normalization. Keras names initialisers and the
// paths of a .weights.h5 file with it.
std::string keras_snake_case(const std::string& name);

}  // namespace soma::model::internal
