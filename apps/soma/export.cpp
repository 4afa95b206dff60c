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
