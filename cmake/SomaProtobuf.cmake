# Protocol buffers for the TensorBoard event writer (src/model/tensorboard.cpp). The schema is
# kept in proto/; protoc generates C++ into the build tree and the generated code is compiled
# into libsoma. Protobuf stays private: no public soma header includes a generated header.
#
# Debian 12 ships no CMake package config for protobuf, so this uses CMake's FindProtobuf module
# (protobuf::libprotobuf, protobuf::protoc, protobuf_generate). Protobuf is optional: without
# it soma still builds, and creating a TensorBoard writer throws a soma::Error that says what to
# install (scripts/install-deps.sh installs it).
find_package(Protobuf QUIET)

set(SOMA_HAVE_PROTOBUF OFF)
if(Protobuf_FOUND AND TARGET protobuf::libprotobuf AND TARGET protobuf::protoc)
  set(SOMA_HAVE_PROTOBUF ON)
  set(_soma_proto_out ${PROJECT_BINARY_DIR}/generated/proto)
  file(MAKE_DIRECTORY ${_soma_proto_out})
  protobuf_generate(
    LANGUAGE cpp
    PROTOS ${PROJECT_SOURCE_DIR}/proto/tensorboard_event.proto
    IMPORT_DIRS ${PROJECT_SOURCE_DIR}/proto
    APPEND_PATH
    PROTOC_OUT_DIR ${_soma_proto_out}
    OUT_VAR _soma_proto_srcs)
  target_sources(soma PRIVATE ${_soma_proto_srcs})
  target_include_directories(soma PRIVATE ${_soma_proto_out})
  target_compile_definitions(soma PRIVATE SOMA_HAVE_PROTOBUF=1)
  target_link_libraries(soma PRIVATE protobuf::libprotobuf)
  message(STATUS "soma: protobuf ${Protobuf_VERSION} (TensorBoard event files)")
else()
  message(STATUS "soma: protobuf not found; the TensorBoard callback will throw "
                 "(apt-get install libprotobuf-dev protobuf-compiler)")
endif()
