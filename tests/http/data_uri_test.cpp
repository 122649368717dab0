// decode_image_data_uri: what is taken, and each refusal's status and message.
#include "epd/http/data_uri.hpp"

#include <catch2/catch.hpp>

#include "epd/http/base64.hpp"

using namespace epd::http;

namespace {

const std::string kPng("\x89PNG\r\n\x1a\n rest of a png", 22);
const std::string kJpeg = "\xFF\xD8\xFF\xE0 rest of a jpeg";
const std::string kPpm = "P6\n1 1\n255\n\x01\x02\x03";

std::string uri_b64(std::string_view s) {
  return base64_encode({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

std::string accepted(const std::string& uri, size_t max = 1024) {
  auto r = decode_image_data_uri(uri, max);
  if (auto* e = std::get_if<HttpError>(&r)) FAIL("rejected: " << e->message);
  auto& bytes = std::get<std::vector<uint8_t>>(r);
  return {bytes.begin(), bytes.end()};
}

HttpError rejected_uri(const std::string& uri, size_t max = 1024) {
  auto r = decode_image_data_uri(uri, max);
  REQUIRE(std::holds_alternative<HttpError>(r));
  auto e = std::get<HttpError>(r);
  CHECK(e.code == (e.status == 413 ? "oversized" : "invalid_request"));
  CHECK(e.param.empty());
  return e;
}

bool uri_says(const HttpError& e, std::string_view what) {
  INFO(e.message);
  return e.message.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("data URI: PNG, JPEG and PPM in every spelling of their media types", "[http][data_uri]") {
  CHECK(accepted("data:image/png;base64," + uri_b64(kPng)) == kPng);
  CHECK(accepted("data:image/jpeg;base64," + uri_b64(kJpeg)) == kJpeg);
  CHECK(accepted("data:image/jpg;base64," + uri_b64(kJpeg)) == kJpeg);
  CHECK(accepted("data:image/x-portable-pixmap;base64," + uri_b64(kPpm)) == kPpm);
  CHECK(accepted("data:image/ppm;base64," + uri_b64(kPpm)) == kPpm);
  CHECK(accepted("DATA:Image/PNG;BASE64," + uri_b64(kPng)) == kPng);
  CHECK(accepted("data:image/png;name=cat.png;base64," + uri_b64(kPng)) == kPng);  // other parameters ignored
  // The bytes decide the format, as decoders sniff it: a JPEG labelled PNG is taken.
  CHECK(accepted("data:image/png;base64," + uri_b64(kJpeg)) == kJpeg);
  // Wrapped base64.
  auto wrapped = uri_b64(kPng);
  wrapped.insert(4, "\n");
  CHECK(accepted("data:image/png;base64," + wrapped) == kPng);
}

TEST_CASE("data URI: URLs to fetch are refused, saying what to send", "[http][data_uri]") {
  auto e = rejected_uri("https://example.com/cat.png");
  CHECK(e.status == 400);
  CHECK(uri_says(e, "image URLs are not fetched"));
  CHECK(uri_says(e, "data:image/png;base64,"));
  CHECK(uri_says(rejected_uri("HTTP://example.com/cat.png"), "not fetched"));
  CHECK(uri_says(rejected_uri("file:///etc/passwd"), "\"file:///etc/passwd\" is not a data: URI"));
  CHECK(rejected_uri("ftp://" + std::string(500, 'x')).message.size() < 200);  // the URL is clipped
  CHECK(uri_says(rejected_uri(""), "is not a data: URI"));
}

TEST_CASE("data URI: media type, base64 marker, data", "[http][data_uri]") {
  CHECK(uri_says(rejected_uri("data:image/gif;base64," + uri_b64("GIF89a")),
                 "media type \"image/gif\" is not supported"));
  CHECK(uri_says(rejected_uri("data:;base64," + uri_b64(kPng)), "media type \"\" is not supported"));
  CHECK(uri_says(rejected_uri("data:image/png," + uri_b64(kPng)), "must be base64-encoded"));
  CHECK(uri_says(rejected_uri("data:image/png;base64;x=y," + uri_b64(kPng)), "must be base64-encoded"));
  CHECK(uri_says(rejected_uri("data:image/png;base64"), "no ','"));
  CHECK(uri_says(rejected_uri("data:image/png;base64,"), "no image data"));
  CHECK(uri_says(rejected_uri("data:image/png;base64,!!!!"), "invalid base64: '!' at offset 0"));
  CHECK(uri_says(rejected_uri("data:image/png;base64," + uri_b64("GIF89a")),
                 "not those of a PNG, JPEG or binary PPM"));
  CHECK(uri_says(rejected_uri("data:image/ppm;base64," + uri_b64("P3\n1 1\n255\n0 0 0")), "binary PPM"));
}

TEST_CASE("data URI: the decoded size limit is 413", "[http][data_uri]") {
  auto e = rejected_uri("data:image/png;base64," + uri_b64(kPng), kPng.size() - 1);
  CHECK(e.status == 413);
  CHECK(uri_says(e, "exceeds the limit of 21 bytes"));
  CHECK(accepted("data:image/png;base64," + uri_b64(kPng), kPng.size()) == kPng);
}
