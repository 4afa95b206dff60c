#include "soma/version.hpp"

#define SOMA_STR2(x) #x
#define SOMA_STR(x) SOMA_STR2(x)

namespace soma {

const char* version() {
  return SOMA_STR(SOMA_VERSION_MAJOR) "." SOMA_STR(SOMA_VERSION_MINOR) "." SOMA_STR(SOMA_VERSION_PATCH);
}

}  // namespace soma
