// soma's version. The macros are the version of these headers (CMakeLists.txt reads its
// project version from here, so there is one place to change it); soma::version() is the
// version of the libsoma the program runs with, which can differ after an upgrade of the
// shared library alone.
#pragma once

#define SOMA_VERSION_MAJOR 0
#define SOMA_VERSION_MINOR 1
#define SOMA_VERSION_PATCH 0
// One number that compares: 0.1.0 is 100, 1.2.3 is 10203.
#define SOMA_VERSION (SOMA_VERSION_MAJOR * 10000 + SOMA_VERSION_MINOR * 100 + SOMA_VERSION_PATCH)

namespace soma {

// "0.1.0": the version libsoma was built as.
const char* version();

}  // namespace soma
