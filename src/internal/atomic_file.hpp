#pragma once
// Internal: the one way soma writes files (docs/reliability.md, "Files").
//
// AtomicFile / write_file_atomically replace a whole file: the bytes go to `<path>.tmp.<pid>.<n>`
// in the same directory, every write is checked, the file is fsync'ed, renamed over `path`, and
// the directory is fsync'ed. A crash or a kill leaves the old file or the new one, never a mix; a
// failure (ENOSPC, EIO, EFBIG, EACCES, EROFS, a missing directory, ...) throws soma::Error
//   "<who>: cannot open '<path>' for writing: <strerror>"   (the temporary cannot be created)
//   "<who>: cannot write '<path>': <strerror>"              (writing, syncing or renaming failed)
// and leaves the old file untouched and no temporary behind. Opening first removes the
// temporaries of earlier saves to the same path whose process is gone (killed saves).
//
// AppendFile is for the files that grow over a run (TensorBoard event files): every write is
// checked, sync() flushes to the disk (fsync), and a failure throws at once, naming the path.
#include <cstddef>
#include <string>
#include <string_view>

namespace soma::internal {

class AtomicFile {
 public:
  AtomicFile(std::string path, std::string who);
  ~AtomicFile();  // without commit(): removes the temporary, the old file stays
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);  // buffered; throws on failure
  void write(std::string_view s) { write(s.data(), s.size()); }
  void commit();  // flush, fsync, rename over the path, fsync the directory

 private:
  [[noreturn]] void fail_with(int err);
  void drain();
  std::string path_, who_, tmp_;
  int fd_ = -1;
  std::string buf_;
};

void write_file_atomically(const std::string& path, std::string_view data, const std::string& who);

class AppendFile {
 public:
  AppendFile() = default;
  // Creates (truncates) `path`, and fsyncs its directory so the new name survives a crash.
  void open(const std::string& path, const std::string& who);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  void write(std::string_view data);  // buffered; throws on failure
  void flush();                       // the buffer to the kernel
  void sync();                        // flush, then fsync
  void close();                       // sync and close; throws on failure

 private:
  [[noreturn]] void fail_with(int err);
  std::string path_, who_;
  int fd_ = -1;
  std::string buf_;
};

// "" when a file can be created in the directory `path` would be written to (tried: a temporary
// file is created there and removed); otherwise why not, e.g. "cannot create a file in
// '/data/out': No such file or directory".
std::string check_writable_location(const std::string& path);

// Removes `<path>.tmp.<pid>[.<n>]` files left by saves to `path` whose process no longer runs.
void remove_stale_temporaries(const std::string& path);

}  // namespace soma::internal
