// soma's OpenMP wait default (docs/reliability.md, "Threads on a busy machine").
//
// libgomp's threads spin after a parallel region (300,000 spins by default) before they sleep.
// On an idle machine that saves a wake-up; on a machine with other work the spinning threads take
// the cores the other work (and soma's own next region) needs: a 2-thread run next to one busy
// process was 12-25x slower. So the soma command makes OpenMP threads sleep while they wait
// (OMP_WAIT_POLICY=passive) when the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT.
//
// libgomp reads both variables once, in its own constructor, which runs before any constructor of
// libsoma or of this program (a library's dependencies are initialised first), so setting them
// from soma is too late. Functions in the executable's .preinit_array run before every shared
// library's constructor, but before libc's too: a setenv() there is lost when libc's
// initialisation sets `environ` to the original environment. So the preinit function execs the
// program again (/proc/self/exe, same arguments) with the variable added to its environment; that
// costs one more start of the dynamic linker (measured: a few milliseconds) and happens only when
// neither variable is set. (A shared object cannot have a .preinit_array: programs linking libsoma
// set the variable in their environment; docs/reliability.md.) SOMA_OMP_DEFAULTS=0 leaves
// libgomp's own default in force (bench/busy_machine.sh compares the two).
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

// The variable soma adds. Measured with bench/busy_machine.sh (docs/reliability.md): next to
// other work, libgomp's default (300000 spins) ran 2-thread MLP training 20-50x slower than
// passive, 10000 spins 4-10x slower, 1000 spins 1.4x slower; passive was the fastest setting both
// with and without a competing process on the 2-core machine measured.
constexpr const char* kDefault = "OMP_WAIT_POLICY=passive";

bool starts_with(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

void soma_omp_defaults(int, char** argv, char** envp) {
  if (!argv || !argv[0] || !envp) return;
  std::size_t n = 0;
  for (; envp[n]; ++n)
    if (starts_with(envp[n], "OMP_WAIT_POLICY=") || starts_with(envp[n], "GOMP_SPINCOUNT=") ||
        std::strcmp(envp[n], "SOMA_OMP_DEFAULTS=0") == 0)
      return;
  char** env = static_cast<char**>(std::malloc((n + 2) * sizeof(char*)));
  if (!env) return;
  std::memcpy(env, envp, n * sizeof(char*));
  env[n] = const_cast<char*>(kDefault);
  env[n + 1] = nullptr;
  ::execve("/proc/self/exe", argv, env);
  std::free(env);  // no /proc: libgomp's default stays
}

}  // namespace

__attribute__((section(".preinit_array"), used)) void (*const soma_omp_defaults_entry)(
    int, char**, char**) = soma_omp_defaults;
