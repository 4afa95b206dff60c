#pragma once
// Keras' model files in soma (docs/keras.md).
//
//   auto model = soma::model::from_keras_json(read_text("model.json"));  // model.to_json()
//   soma::model::load_keras_weights(*model, "model.weights.h5");        // model.save_weights()
//   model->predict(x);  // Keras' layout: channels_last images stay NHWC
//
// from_keras_json reads a Sequential model of Keras 3 (and Keras 2) for the layers soma has:
// Keras' per-layer fields are mapped (module, registered_name, build_config, dtype policy
// objects, initializer and regularizer objects, null constraints, InputLayer's batch_shape as
// the input shape, data_format); anything soma cannot honour (an unknown layer type, a
// constraint, a custom object, a field soma's layer lacks) is a soma::Error naming the layer and
// the field. The CLI's --config files go through the same layer reader (layer_from_entry).
#include <memory>
#include <string>

#include "soma/model/model.hpp"
#include "soma/nn/module.hpp"

namespace soma::model {

// The model a Keras model.to_json() text describes, built for its input shape, with fresh
// weights (load_keras_weights fills them). Layer names are Keras'.
std::shared_ptr<Model> from_keras_json(const std::string& json_text);

// The weights of a Keras 3 `.weights.h5` file (model.save_weights) or a Keras 2 `.h5` file
// (save_weights / save in HDF5) assigned to `model`'s layers by layer name, converted to soma's
// layouts (Conv2D kernels HWIO -> OIHW; Dense [in, out] and batch-norm vectors as they are).
// Every layer with weights must be found with the same number and shapes of weights.
// Throws a soma::Error saying so when soma was built without HDF5 (keras_weights_available()).
void load_keras_weights(Model& model, const std::string& path);
bool keras_weights_available();

// One layer from a JSON entry, soma's short form {"type": "Dense", "units": 10} or Keras'
// {"class_name": "Dense", "config": {...}} (Keras 3's extra fields mapped as above). Absent fields
// take the layer's defaults; unknown keys are errors listing the allowed ones. `where` starts
// every message ("m.json: layers[2]"). The reader of `soma train --config` and from_keras_json.
nn::ModuleRef layer_from_entry(const std::string& entry_json, const std::string& where);

}  // namespace soma::model
