#pragma once
// Resident-memory measurements for the reliability suites (test_reliability_memory,
// test_reliability_rss): /proc/self/statm, and whether this is an ASan build (whose quarantine
// keeps freed memory resident, so RSS bounds are checked in the plain build only).
#include <unistd.h>

#include <cstdio>

#if defined(__SANITIZE_ADDRESS__)
#define SOMA_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOMA_UNDER_ASAN 1
#endif
#endif

namespace soma::testing {

// Resident set size in bytes (/proc/self/statm, field 2); -1 when it cannot be read.
inline long rss_bytes() {
  long pages = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident * ::sysconf(_SC_PAGESIZE);
}

constexpr bool under_asan() {
#ifdef SOMA_UNDER_ASAN
  return true;
#else
  return false;
#endif
}

}  // namespace soma::testing
