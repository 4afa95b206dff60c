#include "data/input_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>

#include "soma/error.hpp"

namespace soma::data::detail {

namespace {

// deflate cannot expand its input by more than this factor (zlib's technical details).
constexpr std::uint64_t kMaxDeflateRatio = 1032;

gzFile gz(void* p) { return static_cast<gzFile>(p); }

}  // namespace

std::string bytes_str(std::uint64_t n) {
  std::ostringstream os;
  os << n << (n == 1 ? " byte" : " bytes");
  return os.str();
}

InputFile::InputFile(const std::string& path, const char* op) : path_(path), op_(op) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail(op, "cannot open '", path, "': it is a directory, expected a file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(op, "cannot open '", path, "': ", std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  std::size_t got = std::fread(magic, 1, 2, f);
  bool seek_ok = std::fseek(f, 0, SEEK_END) == 0;
  long end = seek_ok ? std::ftell(f) : -1;
  std::fclose(f);
  if (end < 0) fail(op, "cannot open '", path, "': cannot determine its size");
  size_ = std::uint64_t(end);
  gzip_ = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  // gzopen reads a raw file transparently, so one code path serves both.
  errno = 0;
  gzFile g = gzopen(path.c_str(), "rb");
  if (!g) fail(op, "cannot open '", path, "': ", errno ? std::strerror(errno) : "out of memory");
  gzbuffer(g, 1u << 18);  // larger than zlib's 8 KiB default: fewer system calls
  gz_ = g;
}

InputFile::~InputFile() {
  if (gz_) gzclose_r(gz(gz_));
}

std::uint64_t InputFile::max_remaining() const {
  if (!gzip_) return size_ > pos_ ? size_ - pos_ : 0;
  std::uint64_t bound = std::numeric_limits<std::uint64_t>::max();
  if (size_ < bound / kMaxDeflateRatio) bound = size_ * kMaxDeflateRatio + 1024;
  return bound > pos_ ? bound - pos_ : 0;
}

std::size_t InputFile::read(void* dst, std::size_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  std::size_t total = 0;
  while (total < n) {
    // gzread takes an unsigned length and returns an int: read in chunks of at most 1 GiB.
    unsigned chunk = unsigned(std::min<std::size_t>(n - total, std::size_t(1) << 30));
    int got = gzread(gz(gz_), out + total, chunk);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(gz(gz_), &code);
      fail(op_, "'", path_, "' is corrupted: ", is_gzip() ? "gzip" : "read", " error after ",
           bytes_str(pos_ + total), ": ", msg ? msg : "unknown error");
    }
    if (got == 0) break;
    total += std::size_t(got);
  }
  pos_ += total;
  return total;
}

bool InputFile::at_end() {
  unsigned char c;
  if (read(&c, 1) == 0) return true;
  --pos_;  // the byte is reported by the caller as "extra", not consumed data
  return false;
}

std::vector<std::uint8_t> InputFile::read_all(std::uint64_t limit) {
  std::vector<std::uint8_t> out;
  std::uint64_t expect = std::min(max_remaining(), limit);
  // Raw files know their size; for gzip start with a guess and grow (deflate ratios are ~2-5).
  std::uint64_t reserve = is_gzip() ? std::min<std::uint64_t>(expect, size_ * 4 + 4096) : expect;
  out.resize(std::size_t(reserve));
  std::size_t filled = 0;
  while (true) {
    if (filled == out.size()) {
      if (out.size() >= limit) {
        if (at_end()) break;
        fail(op_, "'", path_, "' holds more than ", bytes_str(limit), ", the most this reader accepts");
      }
      std::uint64_t grow = std::min<std::uint64_t>(limit, std::max<std::uint64_t>(out.size() * 2, 65536));
      out.resize(std::size_t(grow));
    }
    std::size_t got = read(out.data() + filled, out.size() - filled);
    filled += got;
    if (got == 0) break;
  }
  out.resize(filled);
  return out;
}

}  // namespace soma::data::detail
