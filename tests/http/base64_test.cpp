#include "epd/http/base64.hpp"

#include <catch2/catch.hpp>
#include <random>

using epd::http::base64_decode;
using epd::http::base64_encode;
using epd::protocol::ErrorCode;

namespace {

std::vector<uint8_t> bytes(std::string_view s) {
  return {s.begin(), s.end()};
}

std::string decoded(std::string_view b64) {
  auto r = base64_decode(b64);
  REQUIRE(r.ok());
  return {r->begin(), r->end()};
}

ErrorCode failure(std::string_view b64, size_t max = SIZE_MAX) {
  auto r = base64_decode(b64, max);
  REQUIRE_FALSE(r.ok());
  return r.error().code;
}

}  // namespace

TEST_CASE("base64 RFC 4648 test vectors", "[base64]") {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (auto [plain, b64] : vectors) {
    CHECK(base64_encode(bytes(plain)) == b64);
    CHECK(decoded(b64) == plain);
  }
}

TEST_CASE("base64 round-trips every byte value and length", "[base64]") {
  std::mt19937 rng(7);
  for (size_t n = 0; n < 300; ++n) {
    std::vector<uint8_t> data(n);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    auto r = base64_decode(base64_encode(data));
    REQUIRE(r.ok());
    CHECK(*r == data);
  }
}

TEST_CASE("base64 skips whitespace, including 76-column line wrapping", "[base64]") {
  CHECK(decoded("Zm9v\nYmFy\n") == "foobar");
  CHECK(decoded(" Zm 9v\r\n\tYg = = ") == "foob");
  std::string wrapped;
  std::string encoded = base64_encode(std::vector<uint8_t>(200, 0xab));
  for (size_t i = 0; i < encoded.size(); i += 76) wrapped += encoded.substr(i, 76) + "\n";
  CHECK(base64_decode(wrapped)->size() == 200);
  CHECK(decoded("  \n ") == "");
}

TEST_CASE("base64 rejects characters outside the standard alphabet, naming the offset", "[base64]") {
  CHECK(failure("Zm9v!mFy") == ErrorCode::invalid_request);
  auto r = base64_decode("Zm9v-_Fy");  // URL-safe alphabet is not accepted
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().detail.find("'-' at offset 4") != std::string::npos);
  r = base64_decode(std::string("Zm9\0v", 5));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().detail.find("byte 0x00 at offset 3") != std::string::npos);
  CHECK(failure("Zm9v\xc3\xa9") == ErrorCode::invalid_request);
}

TEST_CASE("base64 rejects wrong lengths and misplaced padding", "[base64]") {
  CHECK(failure("Zm9") == ErrorCode::invalid_request);       // unpadded
  CHECK(failure("Zm9vY") == ErrorCode::invalid_request);     // 5 symbols
  CHECK(failure("Zg=") == ErrorCode::invalid_request);       // short padding
  CHECK(failure("Z===") == ErrorCode::invalid_request);      // three pads
  CHECK(failure("====") == ErrorCode::invalid_request);      // only padding
  CHECK(failure("Zg==Zg==") == ErrorCode::invalid_request);  // data after padding
  CHECK(failure("Zm=v") == ErrorCode::invalid_request);
  auto r = base64_decode("Zm9vY");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().detail.find("multiple of 4") != std::string::npos);
}

TEST_CASE("base64 enforces the decoded size limit before decoding", "[base64]") {
  CHECK(base64_decode("Zm9vYmFy", 6).ok());
  CHECK(failure("Zm9vYmFy", 5) == ErrorCode::oversized);
  CHECK(failure("Zm9vYg==", 3) == ErrorCode::oversized);
  CHECK(base64_decode("Zm9vYg==", 4).ok());
}
