// PNG, JPEG and PPM decoding: images made in the test with libpng / libturbojpeg decode to the same pixels
// (JPEG within a tolerance), and hostile input - garbage, truncated files, headers claiming huge images - is
// refused with a clear error before anything large is allocated.
#include <png.h>
#include <turbojpeg.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>

#include "epd/model/image_codec.hpp"
#include "epd/model/rng.hpp"
#include "helpers.hpp"

using namespace epd::model;
using epd::protocol::ErrorCode;

// The largest single allocation through operator new while armed: proves a decoder refused a huge image
// from its header, before the pixel buffer existed. Every unaligned form of new and delete is replaced
// (malloc / free), so allocations and frees always pair, also under ASan, which checks that.
namespace {
std::atomic<bool> g_track{false};
std::atomic<size_t> g_largest{0};

void* tracked_malloc(std::size_t n) noexcept {
  if (g_track.load(std::memory_order_relaxed))
    for (size_t seen = g_largest.load(); n > seen && !g_largest.compare_exchange_weak(seen, n);) {
    }
  return std::malloc(n ? n : 1);
}
}  // namespace

// g++ 12 inlines the library's operator new into callers and then takes our free() for a mismatch: both
// halves are replaced here, together.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (void* p = tracked_malloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return tracked_malloc(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void* operator new[](std::size_t n) {
  return operator new(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return tracked_malloc(n);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace {

constexpr size_t kLimit = size_t{1} << 30;

std::vector<uint8_t> png_of(const Image& img, uint32_t format = PNG_FORMAT_RGB,
                            const std::vector<uint8_t>* pixels = nullptr) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = img.width;
  png.height = img.height;
  png.format = format;
  const void* src = pixels ? pixels->data() : img.rgb.data();
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_to_memory(&png, nullptr, &size, 0, src, 0, nullptr));
  std::vector<uint8_t> out(size);
  REQUIRE(png_image_write_to_memory(&png, out.data(), &size, 0, src, 0, nullptr));
  out.resize(size);
  return out;
}

std::vector<uint8_t> jpeg_of(const Image& img, int subsampling = TJSAMP_444, int quality = 95) {
  tjhandle tj = tjInitCompress();
  REQUIRE(tj != nullptr);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int pf = subsampling == TJSAMP_GRAY ? TJPF_GRAY : TJPF_RGB;
  REQUIRE(tjCompress2(tj, img.rgb.data(), int(img.width), 0, int(img.height), pf, &buf, &size, subsampling,
                      quality, 0) == 0);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// Smooth, so JPEG's error stays small: gradients without the test image's noise and checkerboard.
Image smooth_image(uint32_t w, uint32_t h) {
  Image img{w, h, std::vector<uint8_t>(size_t{w} * h * 3)};
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < w; ++x) {
      uint8_t* px = &img.rgb[(size_t{y} * w + x) * 3];
      px[0] = uint8_t(x * 255 / (w - 1));
      px[1] = uint8_t(y * 255 / (h - 1));
      px[2] = uint8_t(128 + (x + y) % 64);
    }
  return img;
}

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}

// A valid PNG whose IHDR (CRC fixed up) claims w x h.
std::vector<uint8_t> png_claiming(uint32_t w, uint32_t h) {
  auto png = png_of(make_test_image(4, 4, 1));
  // Signature (8), IHDR length (4), "IHDR" (4), width, height, ... , CRC over type + 13 data bytes.
  REQUIRE(std::memcmp(&png[12], "IHDR", 4) == 0);
  put_be32(&png[16], w);
  put_be32(&png[20], h);
  put_be32(&png[29], crc32(&png[12], 17));
  return png;
}

// A valid JPEG whose frame header claims w x h (at most 65535 each).
std::vector<uint8_t> jpeg_claiming(uint16_t w, uint16_t h) {
  auto jpeg = jpeg_of(smooth_image(16, 16));
  for (size_t i = 2; i + 9 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && (jpeg[i + 1] == 0xC0 || jpeg[i + 1] == 0xC2)) {
      // FF C0, length (2), precision (1), height (2), width (2).
      jpeg[i + 5] = uint8_t(h >> 8);
      jpeg[i + 6] = uint8_t(h);
      jpeg[i + 7] = uint8_t(w >> 8);
      jpeg[i + 8] = uint8_t(w);
      return jpeg;
    }
  FAIL("no SOF marker");
  return {};
}

std::string error_of(const std::vector<uint8_t>& bytes, size_t limit = kLimit) {
  auto r = decode_image(bytes, limit);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::invalid_request);
  return r.error().detail;
}

}  // namespace

TEST_CASE("PNG: an RGB image decodes to exactly its pixels", "[model][image]") {
  const Image img = make_test_image(37, 23, 5);
  const auto png = png_of(img);
  CHECK(sniff_image_format(png) == ImageFormat::png);
  auto got = decode_image(png, kLimit);
  REQUIRE(got.ok());
  CHECK(got->width == 37);
  CHECK(got->height == 23);
  CHECK(got->rgb == img.rgb);
}

TEST_CASE("PNG: grey is expanded, alpha is composited onto white", "[model][image]") {
  const Image img = make_test_image(8, 4, 2);
  std::vector<uint8_t> grey(32);
  for (size_t i = 0; i < grey.size(); ++i) grey[i] = uint8_t(i * 8);
  auto g = decode_image(png_of(img, PNG_FORMAT_GRAY, &grey), kLimit);
  REQUIRE(g.ok());
  for (size_t i = 0; i < grey.size(); ++i) {
    INFO("pixel " << i);
    CHECK(g->rgb[i * 3] == grey[i]);
    CHECK(g->rgb[i * 3 + 1] == grey[i]);
    CHECK(g->rgb[i * 3 + 2] == grey[i]);
  }
  // Opaque pixels keep their colour, transparent ones become white.
  std::vector<uint8_t> rgba(32 * 4);
  for (size_t i = 0; i < 32; ++i) {
    std::memcpy(&rgba[i * 4], &img.rgb[i * 3], 3);
    rgba[i * 4 + 3] = i % 2 ? 255 : 0;
  }
  auto a = decode_image(png_of(img, PNG_FORMAT_RGBA, &rgba), kLimit);
  REQUIRE(a.ok());
  for (size_t i = 0; i < 32; ++i) {
    INFO("pixel " << i);
    for (int c = 0; c < 3; ++c) CHECK(a->rgb[i * 3 + c] == (i % 2 ? img.rgb[i * 3 + c] : 255));
  }
}

TEST_CASE("JPEG: quality 95 decodes within a small error, grey JPEG to grey RGB", "[model][image]") {
  const Image img = smooth_image(40, 30);
  for (int subsampling : {TJSAMP_444, TJSAMP_420}) {
    INFO("subsampling " << subsampling);
    const auto jpeg = jpeg_of(img, subsampling);
    CHECK(sniff_image_format(jpeg) == ImageFormat::jpeg);
    auto got = decode_image(jpeg, kLimit);
    REQUIRE(got.ok());
    REQUIRE(got->width == 40);
    REQUIRE(got->height == 30);
    uint64_t sum = 0;
    int worst = 0;
    for (size_t i = 0; i < img.rgb.size(); ++i) {
      const int d = std::abs(int(got->rgb[i]) - int(img.rgb[i]));
      sum += d;
      worst = std::max(worst, d);
    }
    CHECK(double(sum) / img.rgb.size() < 3.0);
    CHECK(worst < 40);
  }
  Image grey{16, 8, std::vector<uint8_t>(128)};
  for (size_t i = 0; i < grey.rgb.size(); ++i) grey.rgb[i] = uint8_t(64 + i);
  auto g = decode_image(jpeg_of(grey, TJSAMP_GRAY), kLimit);
  REQUIRE(g.ok());
  REQUIRE(g->rgb.size() == 16 * 8 * 3);
  for (size_t i = 0; i < 128; ++i) {
    CHECK(g->rgb[i * 3] == g->rgb[i * 3 + 1]);
    CHECK(g->rgb[i * 3] == g->rgb[i * 3 + 2]);
    CHECK(std::abs(int(g->rgb[i * 3]) - int(grey.rgb[i])) <= 3);
  }
}

TEST_CASE("PPM still decodes, through the same entry point and limit", "[model][image]") {
  const Image img = make_test_image(9, 7, 3);
  const auto ppm = encode_ppm(img);
  CHECK(sniff_image_format(ppm) == ImageFormat::ppm);
  auto got = decode_image(ppm, kLimit);
  REQUIRE(got.ok());
  CHECK(got->rgb == img.rgb);
  CHECK_THAT(error_of(ppm, 9 * 7 * 3 - 1), Catch::Contains("9x7") && Catch::Contains("limit is 188"));
  CHECK(decode_image(ppm, 9 * 7 * 3).ok());
}

TEST_CASE("garbage and unknown formats are refused naming the accepted ones", "[model][image]") {
  CHECK(error_of({}) == "empty image");
  const std::vector<uint8_t> gif{'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
  CHECK(sniff_image_format(gif) == ImageFormat::unknown);
  CHECK_THAT(error_of(gif), Catch::Contains("unknown image format") && Catch::Contains("PNG, JPEG") &&
                                Catch::Contains("PPM"));
  std::vector<uint8_t> noise(500);
  epd::model::SplitMix64 rng(9);
  for (auto& b : noise) b = uint8_t(rng.next());
  noise[0] = 0x00;
  CHECK_THAT(error_of(noise), Catch::Contains("unknown image format"));
  // The right magic, then garbage.
  std::vector<uint8_t> png(noise);
  std::memcpy(png.data(), "\x89PNG\r\n\x1a\n", 8);
  CHECK_THAT(error_of(png), Catch::StartsWith("PNG: "));
  std::vector<uint8_t> jpeg(noise);
  jpeg[0] = 0xFF, jpeg[1] = 0xD8, jpeg[2] = 0xFF;
  CHECK_THAT(error_of(jpeg), Catch::StartsWith("JPEG: "));
}

TEST_CASE("truncated PNG and JPEG files are errors, not partial images", "[model][image]") {
  const Image img = make_test_image(32, 32, 4);
  const auto png = png_of(img), jpeg = jpeg_of(img);
  for (size_t keep : {size_t{10}, size_t{40}, png.size() / 2, png.size() - 13}) {
    INFO("PNG cut to " << keep << " of " << png.size());
    CHECK_THAT(error_of({png.begin(), png.begin() + keep}), Catch::StartsWith("PNG: "));
  }
  for (size_t keep : {size_t{4}, size_t{100}, jpeg.size() / 2, jpeg.size() - 2}) {
    INFO("JPEG cut to " << keep << " of " << jpeg.size());
    CHECK_THAT(error_of({jpeg.begin(), jpeg.begin() + keep}), Catch::StartsWith("JPEG: "));
  }
}

TEST_CASE("headers claiming huge images are refused before the pixels are allocated", "[model][image]") {
  const auto png = png_claiming(100000, 100000);
  const auto jpeg = jpeg_claiming(65000, 65000);
  g_largest = 0;
  g_track = true;
  auto p = decode_image(png, kLimit);
  auto j = decode_image(jpeg, kLimit);
  // Even without a byte limit, the side limit refuses them.
  auto p_side = decode_image(png, SIZE_MAX);
  auto j_side = decode_image(jpeg, SIZE_MAX);
  g_track = false;
  CHECK(g_largest < (size_t{1} << 20));
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.error().detail, Catch::Contains("100000x100000") && Catch::Contains("limit is 1073741824"));
  REQUIRE_FALSE(j.ok());
  CHECK_THAT(j.error().detail, Catch::Contains("65000x65000"));
  REQUIRE_FALSE(p_side.ok());
  CHECK_THAT(p_side.error().detail, Catch::Contains("exceeds 16384"));
  REQUIRE_FALSE(j_side.ok());
  CHECK_THAT(j_side.error().detail, Catch::Contains("exceeds 16384"));
  // A modest claim with a small limit is refused too, naming its size.
  CHECK_THAT(error_of(png_claiming(300, 200), 64 * 64 * 3),
             Catch::Contains("300x200 pixels needs 180000 bytes") && Catch::Contains("limit is 12288"));
}

TEST_CASE("read_image_file decodes a PNG file, max_rgb_bytes_for is the model's full patches",
          "[model][image]") {
  auto cfg = preset("tiny");
  REQUIRE(cfg.ok());
  CHECK(max_rgb_bytes_for(*cfg) == 64 * 8 * 8 * 3);
  const Image img = make_test_image(24, 16, 6);
  const auto path =
      (std::filesystem::temp_directory_path() / ("epd_image_codec_" + std::to_string(getpid()) + ".png"))
          .string();
  const auto bytes = png_of(img);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto got = read_image_file(path, max_rgb_bytes_for(*cfg));
  std::filesystem::remove(path);
  REQUIRE(got.ok());
  CHECK(got->rgb == img.rgb);
  auto missing = read_image_file(path, max_rgb_bytes_for(*cfg));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ErrorCode::io_error);
}
