# ONNX export and import (src/onnx/, include/soma/onnx.hpp). The ONNX protobuf schema comes from
# Debian's libonnx-dev: its CMake package provides the imported target onnx_proto (the C++ code
# protoc generated from onnx-ml.proto, in libonnx_proto.so) with the headers and the definitions
# ONNX_ML=1 / ONNX_NAMESPACE=onnx that those headers need. It links protobuf::libprotobuf, which
# cmake/SomaProtobuf.cmake has found already (include this file after it).
#
# Optional: without libonnx-dev (or protobuf) soma still builds, and soma::onnx::export_model /
# load throw a soma::Error saying that soma was built without ONNX.
set(SOMA_HAS_ONNX OFF)
if(TARGET protobuf::libprotobuf)
  find_package(ONNX CONFIG QUIET)
endif()
if(ONNX_FOUND AND TARGET onnx_proto)
  set(SOMA_HAS_ONNX ON)
  target_compile_definitions(soma PRIVATE SOMA_HAS_ONNX=1)
  target_link_libraries(soma PRIVATE onnx_proto protobuf::libprotobuf)
  message(STATUS "soma: ONNX ${ONNX_VERSION} (ONNX export and import)")
else()
  message(STATUS "soma: ONNX not found; soma::onnx::export_model/load will throw "
                 "(apt-get install libonnx-dev libprotobuf-dev)")
endif()
