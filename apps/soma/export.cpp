// soma export MODEL OUT.onnx: writes a model file as ONNX (soma/onnx.hpp, docs/onnx.md).
#include <cstdio>
#include <iostream>

#include <soma/onnx.hpp>

#include "common.hpp"

namespace soma::cli {

int cmd_export(int argc, char** argv) {
  ArgParser p("soma export", "MODEL OUT.onnx [options]",
              "Writes a model file as an ONNX model (standard operators, dynamic batch axis).");
  p.positional("MODEL OUT.onnx", "a model file written by soma train or model.save(), and the "
               "ONNX file to write", 2, 2);
  p.option("opset", "N", "ONNX operator set, 11 to 21 (default 17)");
  Args a;
  if (parse_or_help(p, argc, argv, a)) return 0;
  const std::int64_t opset = a.integer("opset", 17, 11, 21);
  if (!onnx::available())
    throw NotAvailable("this build of soma has no ONNX support (install libonnx-dev and "
                       "libprotobuf-dev, then reconfigure)");
  auto model = load_model_file(a.positional[0]);
  onnx::export_model(*model, a.positional[1], {.opset = opset});
  std::printf("wrote %s (ONNX opset %lld, %lld parameters)\n", a.positional[1].c_str(),
              static_cast<long long>(opset), static_cast<long long>(model->count_params()));
  return 0;
}

}  // namespace soma::cli

namespace soma::cli {

bool is_onnx_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

std::shared_ptr<nn::Model> load_onnx_file(const std::string& path) {
  if (!onnx::available())
    throw NotAvailable("'" + path + "' is an ONNX file, but this build of soma has no ONNX "
                       "support (install libonnx-dev and libprotobuf-dev, then reconfigure)");
  auto model = onnx::load(path, {.trainable = false});
  model->eval();
  return model;
}

std::optional<Shape> onnx_input_shape(const std::string& path) {
  const auto shapes = onnx::input_shapes(path);
  if (shapes.empty() || shapes[0].size() < 2) return std::nullopt;
  Shape s(shapes[0].begin() + 1, shapes[0].end());
  for (auto d : s)
    if (d < 0) return std::nullopt;
  return s;
}

}  // namespace soma::cli
