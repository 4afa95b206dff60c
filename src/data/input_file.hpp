#pragma once
// Internal: a data file opened for reading, raw or gzip-compressed (recognised by its magic
// bytes), with an upper bound on how much data it can still deliver, so that readers can refuse
// an absurd header before allocating for it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace soma::data::detail {

class InputFile {
 public:
  // Throws soma::Error "<op>: cannot open '<path>': <reason>".
  InputFile(const std::string& path, const char* op);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  bool is_gzip() const { return gzip_; }
  std::uint64_t size_on_disk() const { return size_; }
  // Bytes delivered so far (uncompressed).
  std::uint64_t position() const { return pos_; }
  // The most bytes the rest of the file can deliver: exact for a raw file; for gzip, the
  // compressed size times deflate's maximal ratio (1032:1).
  std::uint64_t max_remaining() const;
  // Reads up to n bytes; fewer only at the end of the data. Throws on a corrupted gzip stream.
  std::size_t read(void* dst, std::size_t n);
  // True when no byte is left (reads one byte ahead; for gzip this also checks the CRC).
  bool at_end();
  // Reads everything that is left, refusing more than `limit` bytes.
  std::vector<std::uint8_t> read_all(std::uint64_t limit);

 private:
  std::string path_;
  const char* op_;
  void* gz_ = nullptr;  // gzFile; kept opaque so that zlib.h stays out of this header
  bool gzip_ = false;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
};

// "1.5 MB"-style text for byte counts in messages.
std::string bytes_str(std::uint64_t n);

}  // namespace soma::data::detail
