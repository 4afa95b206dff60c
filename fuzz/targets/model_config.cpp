// JSON model configs: the library's (serialization::model_from_config, Keras' get_config form,
// as model files hold it) and the CLI's `soma train --config` reader (apps/soma/models.cpp, its
// short {"type": "Dense", ...} form as well), and Keras' to_json() reader. A model that builds
// runs once on a small input.
#include <optional>

#include "../../apps/soma/common.hpp"
#include "fuzz_target.hpp"
#include "soma/soma.hpp"

namespace soma::fuzz {

void model_config(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The input counts as accepted when either reader builds a model from it; a soma::Error from
  // one reader alone is an ordinary outcome (the two accept different forms).
  std::optional<Error> lib_error;
  try {
    auto m = serialization::model_from_config(text);
    auto* seq = dynamic_cast<nn::Sequential*>(m.get());
    if (seq && seq->input_shape()) {
      Shape s = *seq->input_shape();
      if (!s.empty()) s[0] = 2;
      bool small = !s.empty();
      for (auto d : s) small = small && d >= 0 && d <= 64;
      if (small && numel(s) <= 4096) (void)m->predict_on_batch(fill(s, 0.25));
    }
  } catch (const Error& e) {
    lib_error = e;
  }
  // Keras' to_json() reader (model::from_keras_json, docs/keras.md): a soma::Error is an ordinary
  // refusal; anything else escaping it is a finding.
  try {
    auto k = model::from_keras_json(text);
    (void)k->count_params();
  } catch (const Error&) {
  }
  // The CLI reads a file and fixes the input shape from the data set ([C, H, W] per sample).
  try {
    auto m = cli::model_from_config(memory_file(data, size, 1), Shape{1, 8, 8});
    (void)m->predict_on_batch(fill({2, 1, 8, 8}, 0.25));
  } catch (const Error&) {
    if (lib_error) throw;
  } catch (const cli::UsageError& e) {  // the CLI's own usage errors are an ordinary outcome too
    if (lib_error) throw Error(e.what());
  }
}

}  // namespace soma::fuzz

SOMA_FUZZ_ENTRY(soma::fuzz::model_config)
