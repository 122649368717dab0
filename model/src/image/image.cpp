#include "epd/model/image.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>

#include "epd/model/rng.hpp"

namespace epd::model {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

protocol::Error ppm_error(std::string detail) {
  return make_error(ErrorCode::invalid_request, "PPM: " + std::move(detail));
}

bool is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Cursor over the header: whitespace and '#' comments (to end of line) separate fields.
struct HeaderReader {
  std::span<const uint8_t> b;
  size_t pos = 0;

  void skip_space_and_comments() {
    while (pos < b.size()) {
      if (is_space(b[pos])) {
        ++pos;
      } else if (b[pos] == '#') {
        while (pos < b.size() && b[pos] != '\n' && b[pos] != '\r') ++pos;
      } else {
        break;
      }
    }
  }

  // A decimal field; bounded so that no digit string can overflow.
  protocol::Result<uint64_t> number(const char* what) {
    skip_space_and_comments();
    if (pos >= b.size()) return ppm_error(std::string("truncated header: missing ") + what);
    if (b[pos] < '0' || b[pos] > '9') return ppm_error(std::string("expected a number for ") + what);
    uint64_t v = 0;
    while (pos < b.size() && b[pos] >= '0' && b[pos] <= '9') {
      v = v * 10 + (b[pos] - '0');
      if (v > 0xFFFFFFFFull) return ppm_error(std::string(what) + " is too large");
      ++pos;
    }
    if (pos >= b.size()) return ppm_error(std::string("truncated header after ") + what);
    if (!is_space(b[pos]) && b[pos] != '#') return ppm_error(std::string("garbage after ") + what);
    return v;
  }
};

}  // namespace

std::string image_too_large(uint64_t width, uint64_t height, uint64_t max_rgb_bytes) {
  uint64_t pixels = 0, bytes = 0;
  const bool overflow =
      __builtin_mul_overflow(width, height, &pixels) || __builtin_mul_overflow(pixels, uint64_t{3}, &bytes);
  return "image of " + std::to_string(width) + "x" + std::to_string(height) + " pixels needs " +
         (overflow ? std::string("more than 2^64") : std::to_string(bytes)) + " bytes of RGB, the limit is " +
         std::to_string(max_rgb_bytes);
}

protocol::Result<Image> parse_ppm(std::span<const uint8_t> bytes, uint64_t max_rgb_bytes) {
  if (bytes.size() < 2 || bytes[0] != 'P' || bytes[1] != '6')
    return ppm_error("bad magic (expected binary PPM \"P6\")");
  HeaderReader r{bytes, 2};
  if (r.pos >= bytes.size() || (!is_space(bytes[r.pos]) && bytes[r.pos] != '#'))
    return ppm_error("bad magic (expected whitespace after \"P6\")");
  auto w = r.number("width");
  if (!w) return w.error();
  auto h = r.number("height");
  if (!h) return h.error();
  auto maxval = r.number("maxval");
  if (!maxval) return maxval.error();
  if (*w == 0 || *h == 0) return ppm_error("zero width or height");
  if (*w > kMaxImageSide || *h > kMaxImageSide)
    return ppm_error("image side exceeds " + std::to_string(kMaxImageSide) + " pixels");
  if (*w * *h > kMaxImagePixels)
    return ppm_error("image exceeds " + std::to_string(kMaxImagePixels) + " pixels");
  if (*w * *h * 3 > max_rgb_bytes) return ppm_error(image_too_large(*w, *h, max_rgb_bytes));
  if (*maxval != 255) return ppm_error("maxval " + std::to_string(*maxval) + " not supported (only 255)");
  // Exactly one whitespace byte separates the header from the raster (number() checked it exists).
  if (!is_space(bytes[r.pos])) return ppm_error("missing whitespace before pixel data");
  ++r.pos;
  const uint64_t need = *w * *h * 3;
  const uint64_t have = bytes.size() - r.pos;
  if (have < need)
    return ppm_error("truncated pixel data: need " + std::to_string(need) + " bytes, have " +
                     std::to_string(have));
  Image img;
  img.width = static_cast<uint32_t>(*w);
  img.height = static_cast<uint32_t>(*h);
  img.rgb.assign(bytes.begin() + r.pos, bytes.begin() + r.pos + need);
  return img;  // trailing bytes (e.g. a newline some writers add) are ignored
}

protocol::Result<Image> read_ppm_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::io_error, "cannot open image '" + path + "'");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size > kMaxImagePixels * 3 + 4096) return ppm_error(path + ": file too large");
  in.seekg(0);
  std::vector<uint8_t> bytes(size);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size)))
    return make_error(ErrorCode::io_error, "cannot read image '" + path + "'");
  auto img = parse_ppm(bytes);
  if (!img) return ppm_error(path + ": " + img.error().detail.substr(5));
  return img;
}

std::vector<uint8_t> encode_ppm(const Image& img) {
  const std::string header =
      "P6\n" + std::to_string(img.width) + " " + std::to_string(img.height) + "\n255\n";
  std::vector<uint8_t> out(header.begin(), header.end());
  out.insert(out.end(), img.rgb.begin(), img.rgb.end());
  return out;
}

protocol::Status write_ppm_file(const std::string& path, const Image& img) {
  const auto bytes = encode_ppm(img);
  std::ofstream out(path, std::ios::binary);
  if (!out ||
      !out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    return make_error(ErrorCode::io_error, "cannot write image '" + path + "'");
  return {};
}

Image make_test_image(uint32_t width, uint32_t height, uint64_t seed) {
  Image img{width, height, std::vector<uint8_t>(uint64_t{width} * height * 3)};
  SplitMix64 rng(mix64(seed));
  const uint32_t phase = static_cast<uint32_t>(rng.next() & 255);
  const uint32_t cell = 2 + static_cast<uint32_t>(rng.next() % 7);
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      uint8_t* px = &img.rgb[(uint64_t{y} * width + x) * 3];
      const bool check = ((x / cell) + (y / cell)) % 2 == 0;
      const uint32_t noise = static_cast<uint32_t>(rng.next() & 31);
      px[0] = static_cast<uint8_t>((x * 255 / (width > 1 ? width - 1 : 1) + phase) & 255);
      px[1] = static_cast<uint8_t>((y * 255 / (height > 1 ? height - 1 : 1) + noise) & 255);
      px[2] = static_cast<uint8_t>(check ? 224 - noise : 32 + noise);
    }
  }
  return img;
}

}  // namespace epd::model
