#include "epd/model/image_codec.hpp"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <fstream>

namespace epd::model {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

constexpr uint8_t kPngMagic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

protocol::Error bad(std::string_view format, const std::string& detail) {
  return make_error(ErrorCode::invalid_request, std::string(format) + ": " + detail);
}

// The limits, from a header's dimensions, before a pixel is decoded or the image allocated.
protocol::Status check_dims(std::string_view format, uint64_t w, uint64_t h, size_t max_rgb_bytes) {
  if (w == 0 || h == 0) return bad(format, "zero width or height");
  uint64_t pixels = 0, bytes = 0;
  if (__builtin_mul_overflow(w, h, &pixels) || __builtin_mul_overflow(pixels, uint64_t{3}, &bytes) ||
      bytes > max_rgb_bytes)
    return bad(format, image_too_large(w, h, max_rgb_bytes));
  if (w > kMaxImageSide || h > kMaxImageSide || pixels > kMaxImagePixels)
    return bad(format, "image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels exceeds " +
                           std::to_string(kMaxImageSide) + " pixels a side or " +
                           std::to_string(kMaxImagePixels) + " pixels");
  return {};
}

protocol::Result<Image> decode_png(std::span<const uint8_t> bytes, size_t max_rgb_bytes) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  // png_image_free may be called at any time after the struct is initialised, also after finish_read.
  struct Free {
    png_image* p;
    ~Free() { png_image_free(p); }
  } free_png{&png};
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
    return bad("PNG", std::string("corrupt or truncated header: ") + png.message);
  if (auto st = check_dims("PNG", png.width, png.height, max_rgb_bytes); !st) return st.error();
  png.format = PNG_FORMAT_RGB;
  // 16-bit samples are sRGB-encoded like 8-bit ones (libpng otherwise assumes linear and re-encodes).
  png.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  Image img{png.width, png.height, std::vector<uint8_t>(uint64_t{png.width} * png.height * 3)};
  const png_color white{255, 255, 255};
  if (!png_image_finish_read(&png, &white, img.rgb.data(), 0, nullptr))
    return bad("PNG", std::string("truncated or corrupt image data: ") + png.message);
  return img;
}

protocol::Result<Image> decode_jpeg(std::span<const uint8_t> bytes, size_t max_rgb_bytes) {
  struct Handle {
    tjhandle h = tjInitDecompress();
    ~Handle() {
      if (h) tjDestroy(h);
    }
  } tj;
  if (!tj.h)
    return make_error(ErrorCode::internal, std::string("JPEG: no decoder: ") + tjGetErrorStr2(nullptr));
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, bytes.data(), bytes.size(), &w, &h, &subsampling, &colorspace) != 0)
    return bad("JPEG", std::string("corrupt or truncated header: ") + tjGetErrorStr2(tj.h));
  if (w <= 0 || h <= 0) return bad("JPEG", "zero width or height");
  if (auto st = check_dims("JPEG", uint64_t(w), uint64_t(h), max_rgb_bytes); !st) return st.error();
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    return bad("JPEG", "CMYK images are not supported (colour or greyscale only)");
  Image img{uint32_t(w), uint32_t(h), std::vector<uint8_t>(uint64_t(w) * uint64_t(h) * 3)};
  // A warning (e.g. "premature end of data", where libjpeg would fill the rest with grey) is an error here;
  // progressive files are limited to 500 scans (each scan re-reads the whole image).
  if (tjDecompress2(tj.h, bytes.data(), bytes.size(), img.rgb.data(), w, 0, h, TJPF_RGB,
                    TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
    return bad("JPEG", std::string("truncated or corrupt image data: ") + tjGetErrorStr2(tj.h));
  return img;
}

}  // namespace

ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  if (b.size() >= sizeof kPngMagic && std::memcmp(b.data(), kPngMagic, sizeof kPngMagic) == 0)
    return ImageFormat::png;
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::jpeg;
  if (b.size() >= 2 && b[0] == 'P' && b[1] == '6') return ImageFormat::ppm;
  return ImageFormat::unknown;
}

std::string_view image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::png:
      return "png";
    case ImageFormat::jpeg:
      return "jpeg";
    case ImageFormat::ppm:
      return "ppm";
    case ImageFormat::unknown:
      break;
  }
  return "unknown";
}

protocol::Result<Image> decode_image(std::span<const uint8_t> bytes, size_t max_rgb_bytes) {
  switch (sniff_image_format(bytes)) {
    case ImageFormat::png:
      return decode_png(bytes, max_rgb_bytes);
    case ImageFormat::jpeg:
      return decode_jpeg(bytes, max_rgb_bytes);
    case ImageFormat::ppm:
      return parse_ppm(bytes, max_rgb_bytes);
    case ImageFormat::unknown:
      break;
  }
  return make_error(
      ErrorCode::invalid_request,
      bytes.empty() ? "empty image" : "unknown image format: accepted are PNG, JPEG and binary PPM (P6)");
}

protocol::Result<Image> read_image_file(const std::string& path, size_t max_rgb_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot open image '" + path + "'");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size > kMaxImagePixels * 3 + 4096)  // as large as the largest PPM accepted
    return make_error(ErrorCode::invalid_request, "image '" + path + "' is too large a file");
  in.seekg(0);
  std::vector<uint8_t> bytes(size);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
    return make_error(ErrorCode::io_error, "cannot read image '" + path + "'");
  auto img = decode_image(bytes, max_rgb_bytes);
  if (!img) return make_error(img.error().code, path + ": " + img.error().detail);
  return img;
}

uint64_t max_rgb_bytes_for(const ModelConfig& cfg) {
  // libmtmd resizes whatever it is given; a 4096x4096 photograph is the most it is handed.
  if (!cfg.mmproj.empty()) return uint64_t{4096} * 4096 * 3;
  return uint64_t{cfg.max_image_patches} * cfg.patch_size * cfg.patch_size * 3;
}

}  // namespace epd::model
