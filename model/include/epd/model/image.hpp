#pragma once
// RGB images, binary PPM (P6) I/O and synthetic test images. The parser treats its input as hostile:
// every malformed file yields an Error, never a crash or a huge allocation.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model {

struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3, row-major
};

// Parser limits: each side at most kMaxImageSide, at most kMaxImagePixels pixels.
inline constexpr uint32_t kMaxImageSide = 16384;
inline constexpr uint64_t kMaxImagePixels = uint64_t{1} << 26;

// `max_rgb_bytes`: larger images (width * height * 3) are refused from the header, before the raster is read.
protocol::Result<Image> parse_ppm(std::span<const uint8_t> bytes, uint64_t max_rgb_bytes = UINT64_MAX);
// "image of WxH pixels needs N bytes of RGB, the limit is M" (PPM, PNG and JPEG alike).
std::string image_too_large(uint64_t width, uint64_t height, uint64_t max_rgb_bytes);
protocol::Result<Image> read_ppm_file(const std::string& path);
std::vector<uint8_t> encode_ppm(const Image& img);
protocol::Status write_ppm_file(const std::string& path, const Image& img);

// Deterministic pattern (gradients + checker + seeded noise); different seeds give different images.
Image make_test_image(uint32_t width, uint32_t height, uint64_t seed);

}  // namespace epd::model
