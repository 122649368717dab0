#include "epd/http/data_uri.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "epd/http/base64.hpp"

namespace epd::http {
namespace {

constexpr const char* kExample = "data:image/png;base64,...";

HttpError bad(std::string message) {
  return {400, "invalid_request", std::move(message)};
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lower(s.substr(0, prefix.size())) == prefix;
}

// The start of a client's URL, for messages: enough to recognise it, never the whole base64.
std::string clip(std::string_view s) {
  return s.size() <= 40 ? std::string(s) : std::string(s.substr(0, 40)) + "...";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool supported_media_type(const std::string& t) {
  static constexpr std::array<std::string_view, 5> kTypes = {"image/png", "image/jpeg", "image/jpg",
                                                             "image/x-portable-pixmap", "image/ppm"};
  return std::find(kTypes.begin(), kTypes.end(), t) != kTypes.end();
}

bool known_image_magic(const std::vector<uint8_t>& b) {
  auto starts = [&](std::initializer_list<uint8_t> magic) {
    return b.size() >= magic.size() && std::equal(magic.begin(), magic.end(), b.begin());
  };
  bool png = starts({0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'});
  bool jpeg = starts({0xFF, 0xD8, 0xFF});
  bool ppm = b.size() >= 3 && b[0] == 'P' && b[1] == '6' &&
             (b[2] == ' ' || b[2] == '\t' || b[2] == '\n' || b[2] == '\r');
  return png || jpeg || ppm;
}

}  // namespace

std::variant<std::vector<uint8_t>, HttpError> decode_image_data_uri(std::string_view uri, size_t max_bytes) {
  if (starts_with_nocase(uri, "http://") || starts_with_nocase(uri, "https://")) {
    return bad("image URLs are not fetched; send the image inline as a data: URI (" + std::string(kExample) +
               ")");
  }
  if (!starts_with_nocase(uri, "data:")) {
    return bad("\"" + clip(uri) + "\" is not a data: URI; send the image inline as " + kExample);
  }
  uri.remove_prefix(5);
  size_t comma = uri.find(',');
  if (comma == std::string_view::npos) return bad("the data: URI has no ',' before its data");
  std::string_view header = uri.substr(0, comma);
  std::string_view data = uri.substr(comma + 1);

  std::string media_type = lower(trim(header.substr(0, header.find(';'))));
  if (!supported_media_type(media_type)) {
    return bad("media type \"" + clip(media_type) +
               "\" is not supported; use image/png, image/jpeg or image/x-portable-pixmap");
  }
  // ";base64" must be the last parameter (RFC 2397); others (a charset, a name) mean nothing for an image.
  size_t last_semicolon = header.rfind(';');
  if (last_semicolon == std::string_view::npos ||
      lower(trim(header.substr(last_semicolon + 1))) != "base64") {
    return bad("the data: URI must be base64-encoded (" + std::string(kExample) + ")");
  }
  if (data.empty()) return bad("the data: URI holds no image data");

  auto bytes = base64_decode(data, max_bytes);
  if (!bytes) {
    const auto& err = bytes.error();
    if (err.code == protocol::ErrorCode::oversized)
      return HttpError{413, "oversized", "image: " + err.detail};
    return bad("image: " + err.detail);
  }
  if (!known_image_magic(*bytes)) {
    return bad("the image's first bytes are not those of a PNG, JPEG or binary PPM (P6) file");
  }
  return std::move(*bytes);
}

}  // namespace epd::http
