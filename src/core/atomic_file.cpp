// The one way soma writes files: write a temporary, fsync, rename, fsync the directory
// (internal/atomic_file.hpp, docs/reliability.md "Files").
#include "internal/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "soma/error.hpp"

namespace soma::internal {

namespace {

constexpr std::size_t kBufferSize = std::size_t(1) << 20;

// The directory a file at `path` lives in, and its name there.
std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
std::string name_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
// The path of `name` in `dir`, spelled as `dir` + "/" + name (the form temporaries are
// registered under), except that the root gives "/name".
std::string path_in(const std::string& dir, const std::string& name) {
  return (dir == "/" ? std::string() : dir) + "/" + name;
}

// Writes all of [p, p + n) to fd; returns 0 or the errno of the failure.
int write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    p += w;
    n -= std::size_t(w);
  }
  return 0;
}

// fsync of the directory makes a created or renamed name durable. File systems that cannot sync
// a directory (EINVAL) are not an error; a failing disk (EIO) is.
int sync_dir(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return 0;  // not readable: nothing we can do, and the data itself is synced
  int err = 0;
  if (::fsync(dfd) != 0 && errno != EINVAL && errno != EROFS && errno != EBADF) err = errno;
  ::close(dfd);
  return err;
}

// The temporaries this process is writing now: a save removes the other `.tmp.<our pid>` files,
// left by an earlier process that had the same pid (containers reuse pids).
std::mutex g_live_mutex;
std::set<std::string>& live_temporaries() {
  static std::set<std::string> s;
  return s;
}
std::atomic<unsigned long> g_counter{0};

void unregister(const std::string& tmp) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  live_temporaries().erase(tmp);
}

}  // namespace

void remove_stale_temporaries(const std::string& path) {
  const std::string dir = dir_of(path);
  const std::string prefix = name_of(path) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const pid_t self = ::getpid();
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // <prefix><pid> or <prefix><pid>.<n>
    std::size_t i = prefix.size();
    long pid = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && pid < (1L << 31))
      pid = pid * 10 + (name[i++] - '0');
    if (i == prefix.size() || pid <= 0 || pid >= (1L << 31)) continue;
    if (i < name.size()) {
      if (name[i] != '.' || i + 1 == name.size()) continue;
      bool digits = true;
      for (std::size_t k = i + 1; k < name.size(); ++k) digits = digits && name[k] >= '0' && name[k] <= '9';
      if (!digits) continue;
    }
    const std::string full = path_in(dir, name);
    bool stale;
    if (pid == self) {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      stale = live_temporaries().count(full) == 0;
    } else {
      stale = ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
    }
    if (stale) ::unlink(full.c_str());
  }
  ::closedir(d);
}

// ---- AtomicFile ------------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path, std::string who) : path_(std::move(path)), who_(std::move(who)) {
  if (path_.empty()) fail(who_, "the file path is empty");
  remove_stale_temporaries(path_);
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_counter++);
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    live_temporaries().insert(tmp_);
  }
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int err = errno;
    unregister(tmp_);
    fail(who_, "cannot open '", path_, "' for writing: ", std::strerror(err));
  }
  // Replacing a file keeps its permissions.
  struct stat st{};
  if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) (void)::fchmod(fd_, st.st_mode & 07777);
  buf_.reserve(kBufferSize);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
  unregister(tmp_);
}

void AtomicFile::fail_with(int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  unregister(tmp_);
  buf_.clear();
  fail(who_, "cannot write '", path_, "': ", std::strerror(err));
}

void AtomicFile::drain() {
  if (buf_.empty()) return;
  if (const int err = write_all(fd_, buf_.data(), buf_.size())) fail_with(err);
  buf_.clear();
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (fd_ < 0) fail(who_, "'", path_, "' is already written or failed");
  const char* p = static_cast<const char*>(data);
  if (buf_.size() + size <= kBufferSize) {
    buf_.append(p, size);
    return;
  }
  drain();
  if (size < kBufferSize) {
    buf_.append(p, size);
    return;
  }
  if (const int err = write_all(fd_, p, size)) fail_with(err);
}

void AtomicFile::commit() {
  if (fd_ < 0) fail(who_, "'", path_, "' is already written or failed");
  drain();
  if (::fsync(fd_) != 0) fail_with(errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_with(errno);  // NFS and the like report write errors here
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail_with(errno);
  unregister(tmp_);
  if (const int err = sync_dir(dir_of(path_))) fail(who_, "cannot write '", path_, "': ", std::strerror(err));
}

void write_file_atomically(const std::string& path, std::string_view data, const std::string& who) {
  AtomicFile f(path, who);
  f.write(data);
  f.commit();
}

// ---- AppendFile ------------------------------------------------------------------------------

void AppendFile::open(const std::string& path, const std::string& who) {
  close();
  path_ = path;
  who_ = who;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) fail(who_, "cannot open '", path_, "' for writing: ", std::strerror(errno));
  if (const int err = sync_dir(dir_of(path_))) fail_with(err);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::fail_with(int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buf_.clear();
  fail(who_, "cannot write '", path_, "': ", std::strerror(err));
}

void AppendFile::write(std::string_view data) {
  if (fd_ < 0) fail(who_, "'", path_, "' is closed");
  buf_.append(data);
  if (buf_.size() >= (std::size_t(1) << 16)) flush();
}

void AppendFile::flush() {
  if (fd_ < 0 || buf_.empty()) return;
  if (const int err = write_all(fd_, buf_.data(), buf_.size())) fail_with(err);
  buf_.clear();
}

void AppendFile::sync() {
  if (fd_ < 0) return;
  flush();
  if (::fsync(fd_) != 0) fail_with(errno);
}

void AppendFile::close() {
  if (fd_ < 0) return;
  sync();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(who_, "cannot write '", path_, "': ", std::strerror(errno));
}

// ---- checks before a long run ----------------------------------------------------------------

std::string check_writable_location(const std::string& path) {
  if (path.empty()) return "the path is empty";
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "'" + path + "' is a directory";
  const std::string dir = dir_of(path);
  const std::string probe = path_in(dir, ".soma-write-check." + std::to_string(::getpid()) + "." +
                                               std::to_string(g_counter++));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create a file in '" + dir + "': " + std::strerror(errno);
  const int err = write_all(fd, "x", 1);  // a full disk fails here, not after the run
  ::close(fd);
  ::unlink(probe.c_str());
  if (err) return "cannot write a file in '" + dir + "': " + std::strerror(err);
  return {};
}

}  // namespace soma::internal
