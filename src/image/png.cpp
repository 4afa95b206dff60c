// PNG decoding and encoding through libpng.
//
// libpng reports errors by longjmp. A longjmp must not skip a C++ frame with live destructors,
// so every call that can fail runs inside a small function (`guarded`) whose only locals are
// trivial, with its setjmp; the C++ objects (the output tensor, the row pointers, the libpng
// structs' RAII owner) live in the callers, which the jump never crosses. The error callback
// copies the message into a fixed buffer and jumps; the caller then throws soma::Error.
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "internal/atomic_file.hpp"
#include "soma/image.hpp"
#include "soma/ops.hpp"

namespace soma::image {
namespace {

struct PngContext {
  char message[256] = {0};
  // Memory source for reading.
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  // Memory sink for writing.
  std::vector<std::uint8_t>* out = nullptr;
};

extern "C" void on_png_error(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof ctx->message, "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}
extern "C" void on_png_warning(png_structp, png_const_charp) {}  // ancillary problems: ignore

extern "C" void read_from_memory(png_structp png, png_bytep dst, png_size_t n) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (n > ctx->size - ctx->pos) png_error(png, "truncated data (unexpected end of file)");
  std::memcpy(dst, ctx->data + ctx->pos, n);
  ctx->pos += n;
}

extern "C" void write_to_memory(png_structp png, png_bytep src, png_size_t n) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    ctx->out->insert(ctx->out->end(), src, src + n);
  } catch (...) {  // no exception may cross libpng's C frames
    ok = false;
  }
  if (!ok) png_error(png, "out of memory while encoding");
}
extern "C" void flush_memory(png_structp) {}

// Owns the libpng read or write structs.
struct PngHandle {
  png_structp png = nullptr;
  png_infop info = nullptr;
  bool reading = true;
  ~PngHandle() {
    if (!png) return;
    if (reading)
      png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    else
      png_destroy_write_struct(&png, info ? &info : nullptr);
  }
};

struct Header {
  png_uint_32 width = 0, height = 0;
  int channels = 0;
};

// Runs fn(png, info) under setjmp. fn must keep only trivial locals.
template <class Fn>
[[gnu::noinline]] bool guarded(png_structp png, Fn fn) {
  if (setjmp(png_jmpbuf(png))) return false;
  fn();
  return true;
}

void read_header(png_structp png, png_infop info, Header* h) {
  png_read_info(png, info);
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_scale_16(png);  // rounds, unlike png_set_strip_16
  if (depth < 8) png_set_packing(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  h->width = png_get_image_width(png, info);
  h->height = png_get_image_height(png, info);
  h->channels = png_get_channels(png, info);
}

// The most bytes one decoded image may take (256 MiB: 8192 x 8192 RGBA, 16384 x 16384 grey).
constexpr std::int64_t kMaxDecodedBytes = std::int64_t(1) << 28;

std::string where(const std::string& name) { return "'" + name + "'"; }

// Widens/narrows channels after decoding (C in 1..4 -> want in {1, 3, 4}).
Tensor convert_channels(const Tensor& img, int have, int want) {
  if (have == want) return img;
  const std::int64_t h = img.dim(0), w = img.dim(1), n = h * w;
  Tensor out = Tensor::empty({h, w, want}, DType::u8);
  const std::uint8_t* s = img.data<std::uint8_t>();
  std::uint8_t* d = out.data<std::uint8_t>();
  for (std::int64_t i = 0; i < n; ++i, s += have, d += want) {
    const bool colour = have >= 3;
    const std::uint8_t alpha = (have == 2 || have == 4) ? s[have - 1] : 255;
    std::uint8_t r = s[0], g = colour ? s[1] : s[0], b = colour ? s[2] : s[0];
    if (want == 1) {
      // Same arithmetic as rgb_to_grayscale on u8 (through [0, 1] and back by x * 255.5).
      double y = 0.2989 * r + 0.5870 * g + 0.1140 * b;
      d[0] = colour ? std::uint8_t(std::min(255.0, std::floor(y / 255.0 * 255.5))) : r;
    } else {
      d[0] = r;
      d[1] = g;
      d[2] = b;
      if (want == 4) d[3] = alpha;
    }
  }
  return out;
}

}  // namespace

Tensor decode_png(std::span<const std::uint8_t> bytes, const DecodeOptions& options,
                  const std::string& name) {
  const char* op = "decode_png";
  if (options.channels != 0 && options.channels != 1 && options.channels != 3 &&
      options.channels != 4)
    fail(op, where(name), ": channels must be 0 (as stored), 1, 3 or 4, got ", options.channels);
  if (bytes.size() < 8 || png_sig_cmp(bytes.data(), 0, 8) != 0)
    fail(op, where(name), ": not a PNG file (bad signature)",
         bytes.size() < 8 ? " or shorter than 8 bytes" : "");

  // Check the IHDR's claimed size ourselves for a clear message (libpng's would only say
  // "Invalid IHDR data"); png_set_user_limits below stays as the backstop.
  if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    auto be32 = [&](std::size_t at) {
      return std::uint32_t(bytes[at]) << 24 | std::uint32_t(bytes[at + 1]) << 16 |
             std::uint32_t(bytes[at + 2]) << 8 | std::uint32_t(bytes[at + 3]);
    };
    const std::uint32_t w = be32(16), h = be32(20);
    if (w > kMaxSide || h > kMaxSide)
      fail(op, where(name), ": image of ", w, " x ", h, " pixels has a side longer than the ",
           kMaxSide, "-pixel limit");
  }

  PngContext ctx;
  ctx.data = bytes.data();
  ctx.size = bytes.size();
  PngHandle handle;
  handle.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, on_png_error, on_png_warning);
  if (!handle.png) fail(op, where(name), ": cannot create the libpng reader");
  handle.info = png_create_info_struct(handle.png);
  if (!handle.info) fail(op, where(name), ": cannot create the libpng info struct");
  png_set_read_fn(handle.png, &ctx, read_from_memory);
  // libpng refuses larger sides itself, before reading any pixel.
  png_set_user_limits(handle.png, png_uint_32(kMaxSide), png_uint_32(kMaxSide));
  // Ancillary chunks (text, ICC profiles, compressed or not) may not make libpng allocate more
  // than 8 MiB each, nor be kept beyond 1000: a hostile file cannot inflate a zTXt/iCCP bomb.
  png_set_chunk_malloc_max(handle.png, png_alloc_size_t(8) << 20);
  png_set_chunk_cache_max(handle.png, 1000);

  Header h;
  png_structp png = handle.png;
  png_infop info = handle.info;
  if (!guarded(png, [&] { read_header(png, info, &h); }))
    fail(op, where(name), ": corrupted PNG: ", ctx.message);
  if (std::int64_t(h.width) * std::int64_t(h.height) > kMaxPixels)
    fail(op, where(name), ": image of ", h.width, " x ", h.height, " pixels is larger than the ",
         kMaxPixels, "-pixel limit");
  if (h.channels < 1 || h.channels > 4)
    fail(op, where(name), ": unsupported PNG layout with ", h.channels, " channels");
  {
    // A decompression bomb (a small file of a huge image) is refused from the header, before
    // any pixel is inflated: the decoded bytes, in the larger of the stored and wanted layouts.
    const std::int64_t want = options.channels ? options.channels : (h.channels == 2 ? 4 : h.channels);
    const std::int64_t bytes_out =
        std::int64_t(h.width) * std::int64_t(h.height) * std::max<std::int64_t>(h.channels, want);
    if (bytes_out > kMaxDecodedBytes)
      fail(op, where(name), ": image of ", h.width, " x ", h.height, " pixels x ",
           std::max<std::int64_t>(h.channels, want), " channels would decode to ", bytes_out,
           " bytes, more than the ", kMaxDecodedBytes, "-byte limit for a decoded image");
  }

  const std::int64_t H = h.height, W = h.width, C = h.channels;
  Tensor img = Tensor::empty({H, W, C}, DType::u8);
  std::vector<png_bytep> rows(static_cast<std::size_t>(H));
  std::uint8_t* base = img.data<std::uint8_t>();
  for (std::int64_t y = 0; y < H; ++y) rows[std::size_t(y)] = base + y * W * C;
  png_bytepp row_ptrs = rows.data();
  if (!guarded(png, [&] {
        png_read_image(png, row_ptrs);
        png_read_end(png, nullptr);
      }))
    fail(op, where(name), ": corrupted PNG: ", ctx.message);

  int want = options.channels;
  if (want == 0) want = C == 2 ? 4 : int(C);
  return convert_channels(img, int(C), want);
}

Tensor read_png(const std::string& path, const DecodeOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("read_png", "cannot open '", path, "': ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::int64_t>(in.tellg());
  in.seekg(0, std::ios::beg);
  // Deflate cannot beat ~1032:1, so a file this large could not be a PNG within the limits.
  if (size < 0 || size > (std::int64_t(1) << 32))
    fail("read_png", "'", path, "': cannot read a file of ", size, " bytes");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (in.gcount() != size) fail("read_png", "'", path, "': read error");
  return decode_png(bytes, options, path);
}

std::vector<std::uint8_t> encode_png(const Tensor& image) {
  const char* op = "encode_png";
  if (!image.defined()) fail(op, "got an undefined tensor");
  if (image.rank() != 3 || image.dim(2) < 1 || image.dim(2) > 4)
    fail(op, "expected an image of shape [H, W, C] with C = 1, 2, 3 or 4, got shape ",
         shape_str(image.shape()));
  if (image.dtype() != DType::u8)
    fail(op, "expected dtype u8, got ", dtype_name(image.dtype()),
         "; use image::convert_image_dtype(image, DType::u8) first");
  const std::int64_t H = image.dim(0), W = image.dim(1), C = image.dim(2);
  if (H < 1 || W < 1 || H > kMaxSide || W > kMaxSide)
    fail(op, "image of shape ", shape_str(image.shape()), " has a side outside 1..", kMaxSide);
  static const int kColor[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                               PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  Tensor packed = image.contiguous();
  std::vector<png_bytep> rows(static_cast<std::size_t>(H));
  std::uint8_t* base = packed.data<std::uint8_t>();
  for (std::int64_t y = 0; y < H; ++y) rows[std::size_t(y)] = base + y * W * C;

  std::vector<std::uint8_t> out;
  PngContext ctx;
  ctx.out = &out;
  PngHandle handle;
  handle.reading = false;
  handle.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx, on_png_error, on_png_warning);
  if (!handle.png) fail(op, "cannot create the libpng writer");
  handle.info = png_create_info_struct(handle.png);
  if (!handle.info) fail(op, "cannot create the libpng info struct");
  png_structp png = handle.png;
  png_infop info = handle.info;
  png_bytepp row_ptrs = rows.data();
  const int color = kColor[C];
  if (!guarded(png, [&] {
        png_set_write_fn(png, &ctx, write_to_memory, flush_memory);
        png_set_IHDR(png, info, png_uint_32(W), png_uint_32(H), 8, color, PNG_INTERLACE_NONE,
                     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        png_write_image(png, row_ptrs);
        png_write_end(png, nullptr);
      }))
    fail(op, "libpng failed: ", ctx.message);
  return out;
}

void write_png(const Tensor& image, const std::string& path) {
  const std::vector<std::uint8_t> bytes = encode_png(image);
  soma::internal::write_file_atomically(
      path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "write_png");
}

}  // namespace soma::image
