#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "epd/model/kv_cache.hpp"
#include "epd/model/runner.hpp"
#include "epd/model/tokens.hpp"

using namespace epd::model;

TEST_CASE("byte tokenizer round-trips every byte and stops at EOS", "[model][tokens]") {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  auto toks = encode_text(all);
  REQUIRE(toks.size() == 256);
  CHECK(decode_text(toks) == all);
  std::vector<TokenId> with_specials{kBos, 'h', kImage, 'i', kEos, 'x'};
  CHECK(decode_text(with_specials) == "hi");
  CHECK(kBos == 256);
  CHECK(kEos == 257);
  CHECK(kImage == 258);
}

TEST_CASE("escape_text keeps printable ASCII and escapes the rest", "[model][tokens]") {
  CHECK(escape_text(std::string("ok \x01\xff\\", 6)) == "ok \\x01\\xff\\x5c");
}

TEST_CASE("build_prompt places one IMAGE token per patch after BOS", "[model][tokens]") {
  auto cfg = *preset("tiny");  // patch 8
  CHECK(image_token_count(cfg, {32, 32}) == 16);
  CHECK(image_token_count(cfg, {33, 17}) == 5 * 3);  // edges are padded
  auto p = build_prompt(cfg, "ab", MediaDims{16, 8});
  REQUIRE(p.ok());
  CHECK(*p == std::vector<TokenId>{kBos, kImage, kImage, 'a', 'b'});
  auto no_img = build_prompt(cfg, "ab", std::nullopt);
  REQUIRE(no_img.ok());
  CHECK(*no_img == std::vector<TokenId>{kBos, 'a', 'b'});
  CHECK_FALSE(build_prompt(cfg, "x", MediaDims{1000, 1000}).ok());  // too many patches
  CHECK_FALSE(build_prompt(cfg, std::string(cfg.max_seq, 'a'), std::nullopt).ok());
}

TEST_CASE("slice_prompt hands each chunk the embedding rows of its own image tokens", "[model][tokens]") {
  std::vector<TokenId> prompt{kBos, kImage, kImage, kImage, 'a'};
  std::vector<float> emb{10, 11, 20, 21, 30, 31};  // dim 2
  auto c = slice_prompt(prompt, emb, 2, 2, 5);
  CHECK(c.tokens.size() == 3);
  REQUIRE(c.embeddings.size() == 4);
  CHECK(c.embeddings[0] == 20);
  CHECK(c.embeddings[3] == 31);
  CHECK(slice_prompt(prompt, emb, 2, 0, 1).embeddings.empty());
}

TEST_CASE("f16 and bf16 conversions are exact where representable and round to nearest even", "[model][kv]") {
  CHECK(f32_to_f16(1.0f) == 0x3C00);
  CHECK(f32_to_f16(-2.0f) == 0xC000);
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f32_to_f16(65520.0f) == 0x7C00);                          // overflows to inf
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);             // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);             // tie rounds to even (zero)
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie to even
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie to even (up)
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaNs
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    REQUIRE(f32_to_f16(f) == h);
  }
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(bf16_to_f32(f32_to_bf16(3.140625f)) == 3.140625f);
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);  // tie to even
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);
}

TEST_CASE("KvView places elements as KvLayout documents for every order and dtype", "[model][kv]") {
  auto cfg = *preset("tiny");  // kv_heads 2, head_dim 16, page 16
  for (auto dt : {DType::f32, DType::f16, DType::bf16})
    for (auto order : {KvDimOrder::token_head_dim, KvDimOrder::head_token_dim}) {
      KvPool pool{nullptr, kv_layout_for(cfg, 3, dt, order)};
      std::vector<uint64_t> mem((pool.layout.total_bytes() + 7) / 8, 0);
      pool.base = reinterpret_cast<std::byte*>(mem.data());
      REQUIRE(check_pool(cfg, pool).ok());
      std::vector<float> vec(32);
      for (int i = 0; i < 32; ++i) vec[i] = 0.25f * static_cast<float>(i + 1);  // exact in all dtypes
      const KvView kv(pool);
      kv.store(1, 1, 2, 5, vec.data());  // layer 1, V, page 2, slot 5
      float scratch[16];
      for (uint32_t h = 0; h < 2; ++h) {
        const float* got = kv.load(1, 1, 2, 5, h, scratch);
        for (int d = 0; d < 16; ++d) REQUIRE(got[d] == vec[h * 16 + d]);
      }
      // Head 1, dim 0 of slot 5 sits at the documented byte offset.
      const uint64_t elem = order == KvDimOrder::token_head_dim ? (5 * 2 + 1) * 16 : (1 * 16 + 5) * 16;
      const std::byte* at =
          pool.base + pool.layout.page_offset(1, 1, 2) + elem * epd::protocol::dtype_size(dt);
      float v = 0;
      if (dt == DType::f32)
        std::memcpy(&v, at, 4);
      else {
        uint16_t raw;
        std::memcpy(&raw, at, 2);
        v = dt == DType::f16 ? f16_to_f32(raw) : bf16_to_f32(raw);
      }
      CHECK(v == vec[16]);
    }
}

// A NaN may come back quieted (the CPU's vcvtph2ps sets the quiet bit); every other value bit for bit.
TEST_CASE("f16 and bf16 pools read back every bit pattern as the scalar conversions give it", "[model][kv]") {
  auto cfg = *preset("tiny");  // kv_heads 2, head_dim 16 (one vector), page 16: 512 values a page
  for (auto dt : {DType::f16, DType::bf16}) {
    KvPool pool{nullptr, kv_layout_for(cfg, 128, dt)};  // one layer's K pages hold all 65536 patterns
    std::vector<uint64_t> mem((pool.layout.total_bytes() + 7) / 8, 0);
    pool.base = reinterpret_cast<std::byte*>(mem.data());
    auto* raw = reinterpret_cast<uint16_t*>(pool.base + pool.layout.page_offset(0, 0, 0));
    for (uint32_t h = 0; h < 0x10000; ++h) raw[h] = static_cast<uint16_t>(h);
    const KvView kv(pool);
    float scratch[16];
    uint32_t mismatches = 0;
    for (PageId page = 0; page < 128; ++page)
      for (uint32_t slot = 0; slot < 16; ++slot)
        for (uint32_t head = 0; head < 2; ++head) {
          const float* got = kv.load(0, 0, page, slot, head, scratch);
          for (uint32_t d = 0; d < 16; ++d) {
            const auto bits = static_cast<uint16_t>(page * 512 + slot * 32 + head * 16 + d);
            const float want = dt == DType::f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
            if (std::bit_cast<uint32_t>(got[d]) != std::bit_cast<uint32_t>(want)) ++mismatches;
          }
        }
    // The bulk conversion attention uses (the CPU's instructions), over rows 32 elements apart.
    const auto convert = dt == DType::f16 ? f16_rows_to_f32 : bf16_rows_to_f32;
    std::vector<float> rows(0x8000);
    for (uint32_t first : {0u, 16u}) {
      convert(raw + first, 32, 0x800, 16, rows.data());
      for (uint32_t i = 0; i < 0x8000; ++i) {
        const auto bits = static_cast<uint16_t>(i / 16 * 32 + first + i % 16);
        const float want = dt == DType::f16 ? f16_to_f32(bits) : bf16_to_f32(bits);
        const bool nan_kept =
            std::isnan(want) && std::isnan(rows[i]) && std::signbit(want) == std::signbit(rows[i]);
        if (!nan_kept && std::bit_cast<uint32_t>(rows[i]) != std::bit_cast<uint32_t>(want)) ++mismatches;
      }
    }
    INFO("dtype " << dtype_name(dt));
    CHECK(mismatches == 0);
  }
}

TEST_CASE("kv_layout_for takes the model's page size unless one is given", "[model][kv]") {
  auto cfg = *preset("tiny");
  CHECK(kv_layout_for(cfg, 3).page_size == cfg.page_size);
  const KvLayout l = kv_layout_for(cfg, 3, DType::bf16, KvDimOrder::head_token_dim, 64);
  CHECK(l.page_size == 64);
  CHECK(l.num_pages == 3);
  CHECK(l.dtype == DType::bf16);
  CHECK(l.order == KvDimOrder::head_token_dim);
  CHECK(l.page_bytes() == 64u * 2 * 16 * 2);
}

TEST_CASE("check_pool rejects layouts that do not match the model", "[model][kv]") {
  auto cfg = *preset("tiny");
  std::vector<uint64_t> mem(1024);
  KvPool pool{reinterpret_cast<std::byte*>(mem.data()), kv_layout_for(cfg, 1)};
  CHECK(check_pool(cfg, pool).ok());
  auto bad = pool;
  // The page size belongs to the pool: any size in 1..4096 fits the model.
  for (uint32_t ps : {1u, 8u, 64u, 4096u}) {
    bad.layout.page_size = ps;
    CHECK(check_pool(cfg, bad).ok());
  }
  for (uint32_t ps : {0u, 4097u}) {
    bad.layout.page_size = ps;
    CHECK_FALSE(check_pool(cfg, bad).ok());
  }
  bad = pool;
  bad.layout.kv_heads = 4;
  CHECK_FALSE(check_pool(cfg, bad).ok());
  bad = pool;
  bad.base = nullptr;
  CHECK_FALSE(check_pool(cfg, bad).ok());
  bad = pool;
  bad.base += 2;  // misaligned for f32
  CHECK_FALSE(check_pool(cfg, bad).ok());
}
