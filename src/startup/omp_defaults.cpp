// soma's OpenMP wait default (docs/reliability.md, "Threads on a busy machine").
//
// libgomp's threads spin after a parallel region (300,000 spins by default) before they sleep.
// On an idle machine that saves a wake-up: measured with bench/busy_machine.sh on the 2-core
// machine, 2-thread MLP training ran about 2x faster spinning than with OMP_WAIT_POLICY=passive.
// On a machine with other work, the spinning threads take the cores that the other work (and
// soma's own next region) needs: next to one busy process, passive was 2.4x faster than libgomp's
// default, and 12-50x with heavier load. No fixed spin count is good at both (1000-5000 spins
// lose 13-35% idle and still half of passive's speed loaded), so the soma command looks at the
// machine when it starts: when other tasks are runnable (/proc/loadavg's running count, sampled
// five times over ~2.5 ms, is above 1 in at least three samples), OpenMP threads sleep while they
// wait (OMP_WAIT_POLICY=passive); on an idle machine libgomp's default stays. This is decided
// once, at start; OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user always win, and
// SOMA_OMP_DEFAULTS=passive / =0 force passive / libgomp's default.
//
// libgomp reads both variables once, in its own constructor, which runs before any constructor of
// libsoma or of this program (a library's dependencies are initialised first), so setting them
// from soma is too late. Functions in the executable's .preinit_array run before every shared
// library's constructor, but before libc's too: a setenv() there is lost when libc's
// initialisation sets `environ` to the original environment. So the preinit function execs the
// program again (/proc/self/exe, same arguments) with the variable added to its environment; that
// costs one more start of the dynamic linker (a few milliseconds) and happens only when the
// machine is busy and neither variable is set. (A shared object cannot have a .preinit_array:
// programs linking libsoma set the variable in their environment; docs/reliability.md.)
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr const char* kDefault = "OMP_WAIT_POLICY=passive";

bool starts_with(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

// The number of runnable tasks on the machine, this one included (/proc/loadavg's fourth field,
// "R/T"); 0 when it cannot be read. Plain system calls: libc is not initialised yet.
long runnable_tasks() {
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* p = buf;
  for (int field = 0; field < 3 && *p; ++p)
    if (*p == ' ') ++field;
  long r = 0;
  for (; *p >= '0' && *p <= '9'; ++p) r = r * 10 + (*p - '0');
  return *p == '/' ? r : 0;
}

// Other work competes for the cores now: more than this task runnable in most of five samples.
bool machine_is_busy() {
  int busy = 0;
  for (int i = 0; i < 5; ++i) {
    if (runnable_tasks() > 1) ++busy;
    const timespec pause{0, 500000};  // 0.5 ms
    ::nanosleep(&pause, nullptr);
  }
  return busy >= 3;
}

void soma_omp_defaults(int, char** argv, char** envp) {
  if (!argv || !argv[0] || !envp) return;
  std::size_t n = 0;
  bool forced = false;
  for (; envp[n]; ++n) {
    if (starts_with(envp[n], "OMP_WAIT_POLICY=") || starts_with(envp[n], "GOMP_SPINCOUNT=") ||
        std::strcmp(envp[n], "SOMA_OMP_DEFAULTS=0") == 0)
      return;
    if (std::strcmp(envp[n], "SOMA_OMP_DEFAULTS=passive") == 0) forced = true;
  }
  if (!forced && !machine_is_busy()) return;
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
