#pragma once
// Images as clients send them: PNG, JPEG or binary PPM, told apart by their magic bytes and decoded to the
// model's 8-bit RGB Image. The input is hostile: the dimensions are read from the header and checked before
// a pixel is decoded or a buffer allocated (decompression bombs), and every malformed file is an
// invalid_request error, never a crash. The router decodes once and ships PPM (encode_ppm in image.hpp) to
// the encoder in SUBMIT.image.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "epd/model/config.hpp"
#include "epd/model/image.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

enum class ImageFormat { unknown, png, jpeg, ppm };

// From the first bytes: PNG "\x89PNG\r\n\x1a\n", JPEG "\xFF\xD8\xFF", PPM "P6".
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);
std::string_view image_format_name(ImageFormat format);  // "png", "jpeg", "ppm", "unknown"

// Decodes a PNG, JPEG or P6 PPM. Refused before decoding: width * height * 3 > max_rgb_bytes, a side over
// kMaxImageSide or more than kMaxImagePixels pixels (image.hpp). PNG: any bit depth and colour type (16-bit
// is scaled to 8, palettes and grey expanded); an alpha channel is composited onto white by libpng (a
// transparent pixel is white, an opaque one its own colour). JPEG: baseline or progressive, any subsampling,
// greyscale expanded to RGB; CMYK is refused. Truncated data is an error, not a partly grey image. Errors
// (invalid_request) name the problem: an unknown format (and which ones are accepted), truncated or corrupt
// data, or the dimensions that are too large.
protocol::Result<Image> decode_image(std::span<const uint8_t> bytes, size_t max_rgb_bytes);

// A max_rgb_bytes for `cfg`: the RGB bytes of max_image_patches full patches. A larger image always needs
// more patches than the model takes; a smaller one may still (a long thin one): build_prompt checks exactly.
uint64_t max_rgb_bytes_for(const ModelConfig& cfg);

// A file through decode_image (io_error if it cannot be read).
protocol::Result<Image> read_image_file(const std::string& path, size_t max_rgb_bytes);

}  // namespace epd::model
