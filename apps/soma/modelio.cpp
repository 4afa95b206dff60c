// Model files: a thin layer over soma/model/serialization.hpp, so that the subcommands build
// (and say clearly what is missing) in a tree that does not have model files yet.
#include <cstdio>

#include "common.hpp"

#if __has_include(<soma/model/serialization.hpp>)
#include <soma/model/serialization.hpp>
#define SOMA_CLI_HAVE_MODEL_FILES 1
#endif

namespace soma::cli {

#ifdef SOMA_CLI_HAVE_MODEL_FILES

bool model_files_available() { return true; }

void save_model_file(nn::Model& model, const std::string& path) { model.save(path); }

std::shared_ptr<nn::Model> load_model_file(const std::string& path) {
  return soma::load_model(path);
}

#else

bool model_files_available() { return false; }

void save_model_file(nn::Model&, const std::string&) {
  throw NotAvailable("model files are not available yet in this build "
                     "(soma/model/serialization.hpp is missing)");
}

std::shared_ptr<nn::Model> load_model_file(const std::string&) {
  throw NotAvailable("model files are not available yet in this build "
                     "(soma/model/serialization.hpp is missing)");
}

#endif

bool warn_invalid_weights(const nn::Model& model, const std::string& path, const std::string& who) {
  const auto problems = soma::check_weights(model);
  for (const auto& p : problems)
    std::fprintf(stderr, "%s: warning: '%s': %s\n", who.c_str(), path.c_str(), p.message.c_str());
  return !problems.empty();
}

std::optional<Shape> model_input_shape(nn::Model& model) {
  if (auto* seq = dynamic_cast<nn::Sequential*>(&model)) {
    if (auto s = seq->input_shape()) return Shape(s->begin() + 1, s->end());
  }
  if (model.inputs().size() == 1) {
    // A functional model's input shape, batch axis first.
    const Shape s = model.inputs()[0].shape();
    if (!s.empty()) return Shape(s.begin() + 1, s.end());
  }
  return std::nullopt;
}

}  // namespace soma::cli
