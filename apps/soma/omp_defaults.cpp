// soma's OpenMP wait default (docs/reliability.md, "Threads on a busy machine").
//
// libgomp's threads spin after a parallel region (300,000 spins by default) before they sleep.
// On an idle machine that saves a wake-up; on a machine with other work the spinning threads take
// the cores the other work (and soma's own next region) needs: a 2-thread run next to one busy
// process was 12-25x slower. So the soma command makes OpenMP threads wait briefly (see
// kSpinCount) when the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT.
//
// libgomp reads both variables once, in its own constructor, which runs before any constructor of
// libsoma or of this program (a library's dependencies are initialised first). Functions in the
// executable's .preinit_array run before every shared library's constructor, so that is where
// the variable is set. (A shared object cannot have a .preinit_array: programs linking libsoma set
// the variable in their environment; docs/reliability.md.) SOMA_OMP_DEFAULTS=0 leaves libgomp's
// own default in force (bench/busy_machine.sh compares the two).
#include <cstdlib>
#include <cstring>

namespace {

// Spins before a waiting thread sleeps (libgomp's default is 300000; OMP_WAIT_POLICY=passive is
// 0). Measured in bench/busy_machine.sh.
constexpr const char* kSpinCount = "10000";

void soma_omp_defaults(int, char**, char**) {
  const char* off = std::getenv("SOMA_OMP_DEFAULTS");
  if (off && std::strcmp(off, "0") == 0) return;
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  ::setenv("GOMP_SPINCOUNT", kSpinCount, 0);
}

}  // namespace

__attribute__((section(".preinit_array"), used)) void (*const soma_omp_defaults_entry)(
    int, char**, char**) = soma_omp_defaults;
