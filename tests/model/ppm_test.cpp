#include <catch2/catch.hpp>
#include <string>

#include "epd/model/image.hpp"
#include "epd/model/rng.hpp"

using namespace epd::model;

namespace {
std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string parse_error_of(const std::string& s) {
  auto r = parse_ppm(bytes_of(s));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == epd::protocol::ErrorCode::invalid_request);
  return r.error().detail;
}
}  // namespace

TEST_CASE("PPM round-trips and accepts comments and trailing bytes", "[model][ppm]") {
  const Image img = make_test_image(13, 7, 5);
  auto back = parse_ppm(encode_ppm(img));
  REQUIRE(back.ok());
  CHECK(back->width == 13);
  CHECK(back->height == 7);
  CHECK(back->rgb == img.rgb);

  auto c = parse_ppm(bytes_of("P6 # comment\n2 # w\n1\n255\nabcdef\n"));
  REQUIRE(c.ok());
  CHECK(c->width == 2);
  CHECK(std::string(c->rgb.begin(), c->rgb.end()) == "abcdef");
}

TEST_CASE("test images depend on their seed", "[model][ppm]") {
  CHECK(make_test_image(16, 16, 1).rgb == make_test_image(16, 16, 1).rgb);
  CHECK(make_test_image(16, 16, 1).rgb != make_test_image(16, 16, 2).rgb);
}

TEST_CASE("malformed PPM gives a clear error", "[model][ppm]") {
  CHECK_THAT(parse_error_of(""), Catch::Contains("bad magic"));
  CHECK_THAT(parse_error_of("P3\n1 1\n255\nabc"), Catch::Contains("bad magic"));
  CHECK_THAT(parse_error_of("P5\n1 1\n255\na"), Catch::Contains("bad magic"));
  CHECK_THAT(parse_error_of("P61 1\n255\nabc"), Catch::Contains("bad magic"));
  CHECK_THAT(parse_error_of("P6\n"), Catch::Contains("truncated header"));
  CHECK_THAT(parse_error_of("P6\n4 4"), Catch::Contains("truncated header"));
  CHECK_THAT(parse_error_of("P6\n4 4\n255"), Catch::Contains("truncated header"));
  CHECK_THAT(parse_error_of("P6\n4 x\n255\n"), Catch::Contains("expected a number for height"));
  CHECK_THAT(parse_error_of("P6\n-1 4\n255\n"), Catch::Contains("expected a number for width"));
  CHECK_THAT(parse_error_of("P6\n4a 4\n255\n"), Catch::Contains("garbage after width"));
  CHECK_THAT(parse_error_of("P6\n0 4\n255\n"), Catch::Contains("zero width"));
  CHECK_THAT(parse_error_of("P6\n2 2\n255\nabc"), Catch::Contains("truncated pixel data"));
  CHECK_THAT(parse_error_of("P6\n2 2\n65535\n"), Catch::Contains("maxval 65535 not supported"));
  CHECK_THAT(parse_error_of("P6\n2 2\n0\n"), Catch::Contains("maxval 0 not supported"));
  // Hostile sizes: w*h*3 overflows 32 bits (or 64 bits if multiplied naively), digits overflow 64 bits.
  CHECK_THAT(parse_error_of("P6\n4294967295 4294967295\n255\n"), Catch::Contains("exceeds"));
  CHECK_THAT(parse_error_of("P6\n16384 16384\n255\n"), Catch::Contains("exceeds"));
  CHECK_THAT(parse_error_of("P6\n99999999999999999999999 1\n255\n"), Catch::Contains("too large"));
}

TEST_CASE("random corruptions of a PPM never crash the parser", "[model][ppm]") {
  const auto good = encode_ppm(make_test_image(4, 3, 9));
  SplitMix64 rng(42);
  for (int i = 0; i < 3000; ++i) {
    auto b = good;
    const int edits = 1 + static_cast<int>(rng.next() % 4);
    for (int e = 0; e < edits; ++e) b[rng.next() % b.size()] = static_cast<uint8_t>(rng.next());
    b.resize(rng.next() % (b.size() + 1));
    auto r = parse_ppm(b);
    if (r.ok()) CHECK(r->rgb.size() == uint64_t{r->width} * r->height * 3);
  }
}

TEST_CASE("reading a missing PPM file is an io_error", "[model][ppm]") {
  auto r = read_ppm_file("/nonexistent/x.ppm");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == epd::protocol::ErrorCode::io_error);
}
