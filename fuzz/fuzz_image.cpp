// The image decoders (model/src/image_codec.cpp: PNG via libpng, JPEG via libjpeg-turbo; model/src/image.cpp:
// binary PPM): every image a client sends goes through decode_image. Invariants: a decoded image has nonzero
// sides within kMaxImageSide, at most kMaxImagePixels pixels, exactly width * height * 3 bytes and no more
// than the limit; it survives encode_ppm -> parse_ppm unchanged; a refusal is invalid_request.
#include "epd/model/image.hpp"
#include "epd/model/image_codec.hpp"
#include "fuzz_check.hpp"

using namespace epd::model;
using epd::protocol::ErrorCode;

namespace {
constexpr size_t kMaxRgb =
    3 << 20;  // a 1-megapixel image: large enough for every path, small enough to run fast
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto img = decode_image(bytes, kMaxRgb);
  if (!img) {
    FUZZ_CHECK(img.error().code == ErrorCode::invalid_request);
    return 0;
  }
  FUZZ_CHECK(sniff_image_format(bytes) != ImageFormat::unknown);
  FUZZ_CHECK(img->width > 0 && img->height > 0);
  FUZZ_CHECK(img->width <= kMaxImageSide && img->height <= kMaxImageSide);
  const uint64_t pixels = uint64_t{img->width} * img->height;
  FUZZ_CHECK(pixels <= kMaxImagePixels);
  FUZZ_CHECK(img->rgb.size() == pixels * 3);
  FUZZ_CHECK(img->rgb.size() <= kMaxRgb);

  auto again = parse_ppm(encode_ppm(*img), kMaxRgb);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->width == img->width && again->height == img->height && again->rgb == img->rgb);
  return 0;
}
