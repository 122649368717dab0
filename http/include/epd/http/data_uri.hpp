#pragma once
// Images in OpenAI chat requests arrive as `image_url` URLs. epd fetches nothing (a router that downloads
// whatever a client names is an SSRF hole and a latency cliff), so only inline data: URIs are taken:
// data:<media type>[;<param>...];base64,<data> (RFC 2397) with a media type the model can decode.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

#include "epd/http/http_request.hpp"

namespace epd::http {

// The image bytes of `uri`, or 400 invalid_request (not a data: URI, an http(s) URL, another media type, not
// base64, bad base64, empty, not a PNG/JPEG/binary PPM by its first bytes) or 413 oversized (more than
// `max_bytes` once decoded). Media types: image/png, image/jpeg (or image/jpg), image/x-portable-pixmap (or
// image/ppm), any case. Which of the three the bytes are is decided by their magic, not by the media type,
// as image decoders do. The error's param is left empty for the caller to fill.
std::variant<std::vector<uint8_t>, HttpError> decode_image_data_uri(std::string_view uri, size_t max_bytes);

}  // namespace epd::http
