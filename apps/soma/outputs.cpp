// Output paths are checked before a long run starts (docs/reliability.md, "Files").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common.hpp"

namespace soma::cli {

void check_output_path(const std::string& option, const std::string& path) {
  auto bad = [&](const std::string& why) {
    throw std::runtime_error("cannot write " + option + " '" + path + "': " + why);
  };
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) bad("it is a directory");
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  // A probe file, created and removed: a missing, read-only or full directory fails here.
  const std::string probe = dir + "/.soma-write-check." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) bad("cannot create a file in '" + dir + "': " + std::strerror(errno));
  const bool wrote = ::write(fd, "x", 1) == 1;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) bad("cannot write a file in '" + dir + "': " + std::strerror(err));
}

}  // namespace soma::cli
