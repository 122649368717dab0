// GGUF: the test-side writer and epd's reader agree on every metadata type, tensor type and alignment, and
// the reader refuses truncated or hostile files with an error naming the problem.
#include <unistd.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "epd/model/gguf.hpp"
#include "gguf_writer.hpp"

namespace {

using epd::model::GgufFile;
using epd::model::GgufType;
using epd::model::TensorType;
using epd::model::testing::GgufWriter;

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>(i % 37) - 18.0f) / 7.0f;
  return v;
}

GgufWriter sample_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 18000000000000000000ull);
  w.set_i64("t.i64", -9000000000000000000ll);
  w.set_f32("t.f32", 0.25f);
  w.set_f64("t.f64", -1e300);
  w.set_bool("t.bool", true);
  w.set_strings("t.strings", {"a", "", "héllo ✓"});
  const float f[] = {1.5f, -2.0f};
  const int32_t i[] = {-1, 7};
  const uint32_t u[] = {3000000000u};
  w.set_f32s("t.f32s", f);
  w.set_i32s("t.i32s", i);
  w.set_u32s("t.u32s", u);
  return w;
}

std::span<const std::byte> view(const std::vector<std::byte>& b) {
  return {b.data(), b.size()};
}

}  // namespace

TEST_CASE("GGUF metadata of every type survives the writer and the reader") {
  const auto bytes = sample_writer().bytes();
  auto g = GgufFile::parse(view(bytes));
  REQUIRE(g.ok());
  CHECK(g->version() == 3);
  CHECK(g->alignment() == 32);
  CHECK(g->find("t.u8")->type == GgufType::u8);
  CHECK(g->find("t.u8")->u == 200);
  CHECK(g->find("t.i8")->i == -100);
  CHECK(g->find("t.u16")->u == 60000);
  CHECK(g->find("t.i16")->i == -30000);
  CHECK(g->find("t.u32")->u == 4000000000u);
  CHECK(g->find("t.i32")->i == -2000000000);
  CHECK(g->find("t.u64")->u == 18000000000000000000ull);
  CHECK(g->find("t.i64")->i == -9000000000000000000ll);
  CHECK(g->find("t.f32")->f == 0.25);
  CHECK(g->find("t.f64")->f == -1e300);
  CHECK(g->find("t.bool")->type == GgufType::boolean);
  CHECK(g->find("t.bool")->i == 1);
  CHECK(g->find("t.strings")->elem == GgufType::string);
  CHECK(g->find("t.strings")->strings == std::vector<std::string>{"a", "", "héllo ✓"});
  CHECK(g->find("t.f32s")->floats == std::vector<double>{1.5, -2.0});
  CHECK(g->find("t.i32s")->ints == std::vector<int64_t>{-1, 7});
  CHECK(g->find("t.u32s")->ints == std::vector<int64_t>{3000000000ll});
  CHECK(*g->get_string("general.architecture").value() == "llama");
  CHECK(*g->get_uint("t.u32").value() == 4000000000u);
  CHECK_FALSE(g->get_uint("t.i8").ok());  // negative
  CHECK_FALSE(g->get_uint("t.f32").ok());
  CHECK_FALSE(g->get_float("t.u8").ok());
  CHECK_FALSE(g->get_uint("absent").value().has_value());
}

TEST_CASE("GGUF tensors of every type read back in row-major order at any alignment") {
  for (uint32_t align : {0u, 64u, 256u}) {
    GgufWriter w = sample_writer();
    if (align) w.set_u32("general.alignment", align);
    const auto a = ramp(3 * 64, 0.5f), b = ramp(5, 1.0f), c = ramp(2 * 32, 3.0f);
    w.add_f32("a", {64, 3}, a);  // PyTorch [3, 64]
    w.add_f16("b", {5}, b);
    w.add_q8_0("c", {32, 2}, c);
    const auto bytes = w.bytes();
    auto g = GgufFile::parse(view(bytes));
    REQUIRE(g.ok());
    CHECK(g->alignment() == (align ? align : 32));
    REQUIRE(g->tensors().size() == 3);
    const auto* ta = g->tensor("a");
    REQUIRE(ta);
    CHECK(ta->type == TensorType::f32);
    CHECK(ta->shape == std::vector<uint64_t>{3, 64});
    for (const auto& t : g->tensors())
      CHECK(static_cast<size_t>(t.bytes.data() - bytes.data()) % g->alignment() == 0);
    std::vector<float> out(3 * 64);
    REQUIRE(tensor_to_f32(*ta, out).ok());
    CHECK(out == a);
    const auto* tb = g->tensor("b");
    REQUIRE(tb);
    CHECK(tb->type == TensorType::f16);
    out.resize(5);
    REQUIRE(tensor_to_f32(*tb, out).ok());
    for (size_t i = 0; i < 5; ++i) CHECK(out[i] == Approx(b[i]).margin(1e-3));
    const auto* tc = g->tensor("c");
    REQUIRE(tc);
    CHECK(tc->type == TensorType::q8_0);
    CHECK(tc->shape == std::vector<uint64_t>{2, 32});
    CHECK(tc->bytes.size() == 2 * 34);
    out.resize(64);
    REQUIRE(tensor_to_f32(*tc, out).ok());
    // Q8_0 keeps each value within half a step (max|x| / 127 / 2) of the original.
    for (size_t i = 0; i < 64; ++i) CHECK(std::fabs(out[i] - c[i]) <= 3.0f * 18 / 7 / 127 * 0.51f);
    CHECK_FALSE(g->tensor("absent"));
  }
}

TEST_CASE("GGUF files open through the memory mapping") {
  GgufWriter w = sample_writer();
  const auto a = ramp(64, 1.0f);
  w.add_f32("a", {64}, a);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("epd-gguf-" + std::to_string(::getpid()) + ".gguf"))
          .string();
  REQUIRE(w.write(path).ok());
  {
    auto g = GgufFile::open(path);
    REQUIRE(g.ok());
    std::vector<float> out(64);
    REQUIRE(tensor_to_f32(*g->tensor("a"), out).ok());
    CHECK(out == a);
  }
  std::filesystem::remove(path);
  auto missing = GgufFile::open(path);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == epd::protocol::ErrorCode::io_error);
}

TEST_CASE("GGUF reader refuses every truncation of a valid file") {
  GgufWriter w = sample_writer();
  const auto a = ramp(64, 1.0f);
  w.add_f32("a", {64}, a);
  w.add_q8_0("c", {32}, std::span<const float>(a).first(32));
  const auto bytes = w.bytes();
  REQUIRE(GgufFile::parse(view(bytes)).ok());
  // Cutting anywhere before the end of the last tensor's payload is an error (the padding after it may go).
  const size_t payload_end = bytes.size() - (64 - 34);  // the Q8_0 block is padded to 64 bytes
  for (size_t n = 0; n < payload_end; n += (n < 600 ? 1 : 7)) {
    auto g = GgufFile::parse(view(bytes).first(n));
    INFO("cut at " << n);
    REQUIRE_FALSE(g.ok());
    CHECK(g.error().code == epd::protocol::ErrorCode::config_error);
  }
}

TEST_CASE("GGUF reader names hostile headers") {
  auto err = [](const GgufWriter& w) {
    const auto b = w.bytes();
    auto g = GgufFile::parse(view(b));
    REQUIRE_FALSE(g.ok());
    return g.error().detail;
  };
  const std::vector<float> row(32, 1.0f);
  {
    GgufWriter w;
    w.add_raw("iq2", {256}, 16, std::vector<std::byte>(66));  // IQ2_XXS: epd runs no i-quant but IQ4_NL
    CHECK_THAT(err(w), Catch::Contains("tensor iq2 has unsupported ggml type 16") &&
                           Catch::Contains("supported: F32, F16, Q4_0") && Catch::Contains("Q4_K"));
  }
  {
    GgufWriter w;  // a k-quant row is whole super-blocks of 256
    w.add_raw("qk", {64, 2}, 12, std::vector<std::byte>(2 * 144));
    CHECK_THAT(err(w), Catch::Contains("tensor qk has an invalid shape for q4_K") &&
                           Catch::Contains("multiple of 256"));
  }
  {
    GgufWriter w;  // one Q4_K super-block is 144 bytes: a tensor of two rows needs 288
    w.add_raw("short", {256, 2}, 12, std::vector<std::byte>(144));
    CHECK_THAT(err(w), Catch::Contains("truncated: tensor short"));
  }
  {
    GgufWriter w;
    w.add_raw("z", {0, 4}, 0, {});
    CHECK_THAT(err(w), Catch::Contains("invalid shape"));
  }
  {
    GgufWriter w;
    w.add_raw("huge", {1ull << 40, 1ull << 40}, 0, {});
    CHECK_THAT(err(w), Catch::Contains("invalid shape"));
  }
  {
    GgufWriter w;
    w.add_raw("q8", {31}, 8, std::vector<std::byte>(34));
    CHECK_THAT(err(w), Catch::Contains("multiple of 32"));
  }
  {
    GgufWriter w;
    w.add_raw("five", {1, 1, 1, 1, 1}, 0, std::vector<std::byte>(4));
    CHECK_THAT(err(w), Catch::Contains("5 dimensions"));
  }
  {
    GgufWriter w;
    w.add_f32("dup", {32}, row);
    w.add_f32("dup", {32}, row);
    CHECK_THAT(err(w), Catch::Contains("duplicate tensor dup"));
  }
  {
    GgufWriter w;
    w.set_u32("k", 1);
    w.set_u32("k", 2);
    CHECK_THAT(err(w), Catch::Contains("duplicate metadata key k"));
  }
  {
    GgufWriter w;
    w.set_u32("general.alignment", 48);
    CHECK_THAT(err(w), Catch::Contains("power of two"));
  }
  {
    GgufWriter w;
    w.add_f32("short", {64}, row);  // 32 floats of payload for 64 elements: past the end of the file
    CHECK_THAT(err(w), Catch::Contains("truncated: tensor short"));
  }
  auto patched = [](std::vector<std::byte> b, size_t at, uint64_t v, size_t width) {
    std::memcpy(b.data() + at, &v, width);
    auto g = GgufFile::parse(view(b));
    REQUIRE_FALSE(g.ok());
    return g.error().detail;
  };
  GgufWriter w;
  w.set_strings("s", {"x"});
  const auto b = w.bytes();
  CHECK_THAT(patched(b, 0, 0x46554746, 4), Catch::Contains("bad magic"));
  CHECK_THAT(patched(b, 4, 1, 4), Catch::Contains("unsupported GGUF version 1"));
  CHECK_THAT(patched(b, 8, 1ull << 40, 8), Catch::Contains("tensor count"));
  CHECK_THAT(patched(b, 16, 1ull << 40, 8), Catch::Contains("metadata count"));
  // Key "s" (8 + 1 bytes) then its type at 33, element type at 37, element count at 41.
  CHECK_THAT(patched(b, 33, 99, 4), Catch::Contains("unknown value type 99"));
  CHECK_THAT(patched(b, 37, 9, 4), Catch::Contains("nested arrays"));
  CHECK_THAT(patched(b, 41, 1ull << 60, 8), Catch::Contains("truncated"));
  CHECK_THAT(patched(b, 49, 1ull << 62, 8), Catch::Contains("truncated"));  // the string's length
}
