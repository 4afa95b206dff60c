#include "soma/threading.hpp"

#include <omp.h>

#include "soma/error.hpp"

extern "C" void openblas_set_num_threads(int);

namespace soma {

void set_num_threads(int n) {
  if (n < 1) fail("set_num_threads", "expected at least 1 thread, got ", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace soma
