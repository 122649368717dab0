// Staging between KV layouts: gather -> scatter must place and convert every element exactly, touch nothing
// else, and reject bad input before writing. The page size of a pool must not change what the model computes.
#include <algorithm>
#include <bit>
#include <random>
#include <string>

#include "epd/model/generate.hpp"
#include "epd/model/kv_staging.hpp"
#include "epd/model/rng.hpp"
#include "helpers.hpp"

using namespace epd::model;
using namespace epd::model::test;

namespace {

struct Fmt {
  uint32_t page_size;
  DType dtype;
  KvDimOrder order;
};

std::vector<Fmt> all_formats() {
  std::vector<Fmt> v;
  for (uint32_t ps : {16u, 64u, 7u})
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (KvDimOrder o : {KvDimOrder::token_head_dim, KvDimOrder::head_token_dim}) v.push_back({ps, dt, o});
  return v;
}

std::string describe(const Fmt& f) {
  return "page " + std::to_string(f.page_size) + " " + std::string(dtype_name(f.dtype)) + " " +
         std::string(dim_order_name(f.order));
}

// A pool for a `tokens`-token sequence whose page table is a shuffled subset of the pool's pages (three
// spare pages are never in the table), so a placement bug lands on memory the test can see.
struct SeqPool {
  SeqPool(const ModelConfig& cfg, const Fmt& f, uint32_t tokens, uint64_t seed)
      : tp(cfg, pages_for(kv_layout_for(cfg, 1, f.dtype, f.order, f.page_size), tokens) + 3, f.dtype, f.order,
           f.page_size) {
    pages = iota_pages(tp.pool.layout.num_pages);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(static_cast<uint32_t>(seed)));
    pages.resize(pages.size() - 3);
  }
  PageId page_of(uint32_t t) const { return pages[t / tp.pool.layout.page_size]; }
  uint32_t slot_of(uint32_t t) const { return t % tp.pool.layout.page_size; }
  const KvLayout& layout() const { return tp.pool.layout; }

  TestPool tp;
  std::vector<PageId> pages;
};

// Fills tokens [0, tokens) with values from 2^-26 (f16 subnormal or zero) up to 2^18 (f16 overflow), stored
// through KvView so each pool holds values of its own dtype.
void fill(SeqPool& sp, uint32_t tokens, uint64_t seed) {
  const KvLayout& l = sp.layout();
  SplitMix64 rng(seed);
  std::vector<float> vec(uint64_t{l.kv_heads} * l.head_dim);
  const KvView kv(sp.tp.pool);
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t layer = 0; layer < l.layers; ++layer)
      for (uint32_t kind = 0; kind < 2; ++kind) {
        for (float& x : vec) x = std::ldexp(rng.uniform_pm1(), static_cast<int>(rng.next() % 45) - 26);
        kv.store(layer, kind, sp.page_of(t), sp.slot_of(t), vec.data());
      }
}

// A count, not a vector comparison: Catch would print every word of both pools on failure.
size_t words_differing(const TestPool& a, const TestPool& b) {
  REQUIRE(a.words.size() == b.words.size());
  size_t n = 0;
  for (size_t i = 0; i < a.words.size(); ++i) n += a.words[i] != b.words[i];
  return n;
}

void fill_sentinel(SeqPool& sp) {
  std::fill(sp.tp.words.begin(), sp.tp.words.end(), 0xA5A5A5A5A5A5A5A5ull);
}

uint32_t get_bits(const KvView& kv, uint32_t layer, uint32_t kind, PageId page, uint32_t slot, uint32_t head,
                  uint32_t d) {
  const std::byte* p = kv.raw(layer, kind, page, slot, head);
  if (kv.layout().dtype == DType::f32) {
    uint32_t u;
    std::memcpy(&u, p + uint64_t{d} * 4, 4);
    return u;
  }
  uint16_t h;
  std::memcpy(&h, p + uint64_t{d} * 2, 2);
  return h;
}

void set_bits(const KvView& kv, uint32_t layer, uint32_t kind, PageId page, uint32_t slot, uint32_t head,
              uint32_t d, uint32_t bits) {
  std::byte* p = kv.raw(layer, kind, page, slot, head);
  if (kv.layout().dtype == DType::f32) {
    std::memcpy(p + uint64_t{d} * 4, &bits, 4);
  } else {
    const uint16_t h = static_cast<uint16_t>(bits);
    std::memcpy(p + uint64_t{d} * 2, &h, 2);
  }
}

float to_f32(uint32_t bits, DType t) {
  if (t == DType::f32) return std::bit_cast<float>(bits);
  return t == DType::f16 ? f16_to_f32(static_cast<uint16_t>(bits)) : bf16_to_f32(static_cast<uint16_t>(bits));
}

// What an element with `bits` in dtype `from` must become in dtype `to`.
uint32_t convert_bits(uint32_t bits, DType from, DType to) {
  if (from == to) return bits;
  const float f = to_f32(bits, from);
  if (to == DType::f32) return std::bit_cast<uint32_t>(f);
  return to == DType::f16 ? f32_to_f16(f) : f32_to_bf16(f);
}

std::vector<std::byte> gather(const SeqPool& sp, uint32_t first, uint32_t count) {
  std::vector<std::byte> buf(count * staging_token_bytes(sp.layout()) + 64, std::byte{0x5A});
  REQUIRE(gather_tokens(sp.tp.pool, sp.pages, first, count, buf.data()).ok());
  // Exactly count * staging_token_bytes bytes are written.
  const auto tail = std::span(buf).last(64);
  CHECK(std::all_of(tail.begin(), tail.end(), [](std::byte b) { return b == std::byte{0x5A}; }));
  buf.resize(buf.size() - 64);
  return buf;
}

// gather [first, first+count) from `src`, scatter into a sentinel-filled `dst`; the whole dst pool must equal
// its old bytes with exactly the range's elements replaced by their converted source values.
void round_trip(const SeqPool& src, SeqPool& dst, uint32_t first, uint32_t count) {
  fill_sentinel(dst);
  TestPool expected = dst.tp;
  const KvView s(src.tp.pool), d(dst.tp.pool), e(expected.pool);
  const KvLayout& l = src.layout();
  for (uint32_t t = first; t < first + count; ++t)
    for (uint32_t layer = 0; layer < l.layers; ++layer)
      for (uint32_t kind = 0; kind < 2; ++kind)
        for (uint32_t h = 0; h < l.kv_heads; ++h)
          for (uint32_t i = 0; i < l.head_dim; ++i)
            set_bits(e, layer, kind, dst.page_of(t), dst.slot_of(t), h, i,
                     convert_bits(get_bits(s, layer, kind, src.page_of(t), src.slot_of(t), h, i), l.dtype,
                                  dst.layout().dtype));

  const auto buf = gather(src, first, count);
  REQUIRE(scatter_tokens(dst.tp.pool, dst.pages, first, count, buf.data(), l).ok());
  CHECK(words_differing(dst.tp, expected) == 0);

  // The model's view agrees: loads from dst equal the source loads, converted.
  std::vector<float> sa(l.head_dim), da(l.head_dim);
  uint64_t mismatches = 0;
  for (uint32_t t = first; t < first + count; ++t)
    for (uint32_t layer = 0; layer < l.layers; ++layer)
      for (uint32_t kind = 0; kind < 2; ++kind)
        for (uint32_t h = 0; h < l.kv_heads; ++h) {
          const float* sv = s.load(layer, kind, src.page_of(t), src.slot_of(t), h, sa.data());
          const float* dv = d.load(layer, kind, dst.page_of(t), dst.slot_of(t), h, da.data());
          for (uint32_t i = 0; i < l.head_dim; ++i) {
            const uint32_t want =
                convert_bits(std::bit_cast<uint32_t>(sv[i]), DType::f32, dst.layout().dtype);
            if (std::bit_cast<uint32_t>(to_f32(want, dst.layout().dtype)) != std::bit_cast<uint32_t>(dv[i]))
              ++mismatches;
          }
        }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("gather then scatter places and converts every element between all layouts", "[model][staging]") {
  const auto cfg = *preset("tiny");
  const uint32_t len = 70;
  const auto formats = all_formats();
  uint64_t seed = 1;
  for (const Fmt& sf : formats) {
    SeqPool src(cfg, sf, len, seed++);
    fill(src, len, seed);
    for (const Fmt& df : formats) {
      SeqPool dst(cfg, df, len, seed++);
      INFO(describe(sf) << " -> " << describe(df));
      for (auto [first, count] : {std::pair{0u, len}, {5u, 50u}, {60u, 10u}, {63u, 1u}}) {
        INFO("tokens [" << first << ", " << first + count << ")");
        round_trip(src, dst, first, count);
      }
    }
  }
}

TEST_CASE("f32 to f16 staging overflows to inf and flushes tiny values exactly as f32_to_f16",
          "[model][staging]") {
  const auto cfg = *preset("tiny");
  SeqPool src(cfg, {16, DType::f32, KvDimOrder::token_head_dim}, 1, 1);
  SeqPool dst(cfg, {64, DType::f16, KvDimOrder::head_token_dim}, 1, 2);
  std::vector<float> vec(32, 0.0f);
  vec[0] = 1e6f;                          // above f16 max
  vec[1] = -70000.0f;                     // rounds past 65504
  vec[2] = std::ldexp(1.0f, -26);         // below half the smallest subnormal
  vec[3] = std::ldexp(3.0f, -25);         // subnormal, rounds
  vec[4] = 1.0f + std::ldexp(1.0f, -11);  // tie to even
  KvView(src.tp.pool).store(1, 0, src.page_of(0), 0, vec.data());
  const auto buf = gather(src, 0, 1);
  REQUIRE(scatter_tokens(dst.tp.pool, dst.pages, 0, 1, buf.data(), src.layout()).ok());
  const KvView d(dst.tp.pool);
  CHECK(get_bits(d, 1, 0, dst.page_of(0), 0, 0, 0) == 0x7C00);
  CHECK(get_bits(d, 1, 0, dst.page_of(0), 0, 0, 1) == 0xFC00);
  CHECK(get_bits(d, 1, 0, dst.page_of(0), 0, 0, 2) == 0x0000);
  CHECK(get_bits(d, 1, 0, dst.page_of(0), 0, 0, 3) == 0x0002);
  CHECK(get_bits(d, 1, 0, dst.page_of(0), 0, 0, 4) == 0x3C00);
}

TEST_CASE("the staging buffer is layer, kind, token, kv_head, head_dim in the source dtype",
          "[model][staging]") {
  const auto cfg = *preset("tiny");
  SeqPool src(cfg, {7, DType::f16, KvDimOrder::head_token_dim}, 40, 3);
  fill(src, 40, 4);
  const uint32_t first = 9, count = 20;
  const KvLayout& l = src.layout();
  CHECK(staging_token_bytes(l) == uint64_t{l.layers} * 2 * l.kv_heads * l.head_dim * 2);
  CHECK(staging_token_bytes(kv_layout_for(cfg, 1)) == cfg.kv_bytes_per_token());
  const auto buf = gather(src, first, count);
  REQUIRE(buf.size() == count * staging_token_bytes(l));
  const KvView s(src.tp.pool);
  uint64_t at = 0, mismatches = 0;
  for (uint32_t layer = 0; layer < l.layers; ++layer)
    for (uint32_t kind = 0; kind < 2; ++kind)
      for (uint32_t t = first; t < first + count; ++t)
        for (uint32_t h = 0; h < l.kv_heads; ++h)
          for (uint32_t i = 0; i < l.head_dim; ++i, at += 2) {
            uint16_t v;
            std::memcpy(&v, &buf[at], 2);
            if (v != get_bits(s, layer, kind, src.page_of(t), src.slot_of(t), h, i)) ++mismatches;
          }
  CHECK(at == buf.size());
  CHECK(mismatches == 0);
}

TEST_CASE("staging rejects bad page tables, pages and shapes without writing anything", "[model][staging]") {
  const auto cfg = *preset("tiny");
  const uint32_t len = 100;
  SeqPool src(cfg, {16, DType::f32, KvDimOrder::token_head_dim}, len, 5);
  fill(src, len, 6);
  SeqPool dst(cfg, {64, DType::f16, KvDimOrder::head_token_dim}, len, 7);  // 2 pages in the table
  fill_sentinel(dst);
  const TestPool before = dst.tp;
  const auto buf = gather(src, 0, len);
  const KvLayout& sl = src.layout();
  const auto bad_request = [](const epd::protocol::Status& st) {
    return !st.ok() && st.error().code == epd::protocol::ErrorCode::invalid_request;
  };

  // Page table too short: tokens 30..99 need logical page 1.
  CHECK(bad_request(scatter_tokens(dst.tp.pool, std::span(dst.pages).first(1), 30, 70, buf.data(), sl)));
  CHECK(bad_request(scatter_tokens(dst.tp.pool, {}, 0, 1, buf.data(), sl)));
  // first + count past 2^32 must not wrap around to a small page index.
  CHECK(bad_request(scatter_tokens(dst.tp.pool, dst.pages, 0xFFFFFFFFu, 2, buf.data(), sl)));
  // A page id outside the pool.
  auto outside = dst.pages;
  outside[1] = dst.layout().num_pages;
  CHECK(bad_request(scatter_tokens(dst.tp.pool, outside, 0, len, buf.data(), sl)));
  // Shape mismatches between the staged tokens and the destination.
  for (int which = 0; which < 3; ++which) {
    KvLayout other = sl;
    (which == 0 ? other.layers : which == 1 ? other.kv_heads : other.head_dim) += 1;
    CHECK(bad_request(scatter_tokens(dst.tp.pool, dst.pages, 0, len, buf.data(), other)));
  }
  KvLayout bad_dtype = sl;
  bad_dtype.dtype = static_cast<DType>(7);
  CHECK(bad_request(scatter_tokens(dst.tp.pool, dst.pages, 0, len, buf.data(), bad_dtype)));
  // A destination pool whose own layout is broken.
  KvPool broken = dst.tp.pool;
  broken.layout.page_size = 0;
  CHECK(bad_request(scatter_tokens(broken, dst.pages, 0, len, buf.data(), sl)));
  broken.layout.page_size = kMaxPageSize + 1;
  CHECK(bad_request(scatter_tokens(broken, dst.pages, 0, len, buf.data(), sl)));
  CHECK(words_differing(dst.tp, before) == 0);

  // count == 0 is a no-op, whatever the table.
  CHECK(scatter_tokens(dst.tp.pool, {}, 1000, 0, nullptr, sl).ok());
  CHECK(words_differing(dst.tp, before) == 0);

  // Gather validates the same way and leaves its output alone.
  std::vector<std::byte> out(buf.size(), std::byte{0x33});
  const auto untouched = [&] {
    return std::all_of(out.begin(), out.end(), [](std::byte b) { return b == std::byte{0x33}; });
  };
  CHECK(bad_request(gather_tokens(src.tp.pool, std::span(src.pages).first(6), 0, len, out.data())));
  auto src_outside = src.pages;
  src_outside[6] = 1u << 20;
  CHECK(bad_request(gather_tokens(src.tp.pool, src_outside, 0, len, out.data())));
  CHECK(bad_request(gather_tokens(src.tp.pool, src.pages, 0xFFFFFFF0u, 32, out.data())));
  CHECK(gather_tokens(src.tp.pool, {}, 0, 0, out.data()).ok());
  CHECK(untouched());
  // Pages the range does not touch are not looked at.
  CHECK(gather_tokens(src.tp.pool, src_outside, 0, 96, out.data()).ok());
}

TEST_CASE("KV dtype and order names parse and print", "[model][staging]") {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    auto p = parse_dtype(dtype_name(t));
    REQUIRE(p.ok());
    CHECK(*p == t);
  }
  for (KvDimOrder o : {KvDimOrder::token_head_dim, KvDimOrder::head_token_dim}) {
    auto p = parse_dim_order(dim_order_name(o));
    REQUIRE(p.ok());
    CHECK(*p == o);
  }
  CHECK(dtype_name(DType::bf16) == "bf16");
  CHECK(dim_order_name(KvDimOrder::head_token_dim) == "head_token_dim");
  for (const char* bad : {"", "F16", "fp16", "f8", "f32 "}) {
    auto p = parse_dtype(bad);
    REQUIRE_FALSE(p.ok());
    CHECK(p.error().code == epd::protocol::ErrorCode::invalid_request);
  }
  CHECK_FALSE(parse_dim_order("token-head-dim").ok());
  CHECK_FALSE(parse_dim_order("").ok());
}

TEST_CASE("page size is lossless: prefill and decode in 64-, 7- and 1-token pages match 16",
          "[model][staging]") {
  auto r = runner_for("tiny");
  const ModelConfig& cfg = r->config();
  const Image img = make_test_image(24, 16, 8);
  const Request req = make_request(*r, "pages of any size", &img);
  const uint32_t n = static_cast<uint32_t>(req.prompt.size()), count = 20, written = n + count - 1;
  for (DType dt : {DType::f32, DType::bf16})
    for (KvDimOrder order : {KvDimOrder::token_head_dim, KvDimOrder::head_token_dim}) {
      INFO(dtype_name(dt) << " " << dim_order_name(order));
      SeqPool base(cfg, {16, dt, order}, n + count, 9);
      const TokenId t16 = prefill(*r, base.tp.pool, base.pages, req);
      const auto tokens16 = decode(*r, base.tp.pool, base.pages, n, t16, count);
      const auto kv16 = gather(base, 0, written);
      for (uint32_t ps : {64u, 7u, 1u}) {
        INFO("page size " << ps);
        SeqPool other(cfg, {ps, dt, order}, n + count, 10 + ps);
        const TokenId t = prefill(*r, other.tp.pool, other.pages, req, 5);
        CHECK(t == t16);
        CHECK(decode(*r, other.tp.pool, other.pages, n, t, count) == tokens16);
        CHECK((gather(other, 0, written) == kv16));  // the same values, only paged differently
      }
    }
}

TEST_CASE("generate with decode_kv: f32 in other pages and order is lossless, f16 is the staged oracle",
          "[model][staging][generate]") {
  auto r = runner_for("tiny");
  const ModelConfig& cfg = r->config();
  const Image img = make_test_image(32, 24, 12);
  const std::string text = "Staged once, decoded elsewhere.";
  GenerateOptions opts;
  opts.dtype = DType::f32;  // prefill in f32 (the roles' default is f16), so f16 below is a conversion
  opts.max_tokens = 24;
  opts.chunk = 7;
  opts.stop_at_eos = false;
  auto base = generate(*r, text, &img, opts);
  REQUIRE(base.ok());
  REQUIRE(base->tokens.size() == 24);

  // Same layout on both sides: staging is a byte copy, so even the KV digest is unchanged.
  opts.decode_kv = KvLayoutChoice{0, DType::f32};
  auto same = generate(*r, text, &img, opts);
  REQUIRE(same.ok());
  CHECK(same->tokens == base->tokens);
  CHECK(same->kv_digest == base->kv_digest);

  opts.decode_kv = KvLayoutChoice{64, DType::f32, KvDimOrder::head_token_dim};
  auto wide = generate(*r, text, &img, opts);
  REQUIRE(wide.ok());
  CHECK(wide->tokens == base->tokens);
  CHECK(wide->kv_digest != base->kv_digest);  // the digest covers decode's pool, laid out differently

  opts.decode_kv = KvLayoutChoice{64, DType::f16, KvDimOrder::token_head_dim};
  auto a = generate(*r, text, &img, opts), b = generate(*r, text, &img, opts);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->tokens.size() == 24);
  CHECK(a->tokens == b->tokens);
  CHECK(a->kv_digest == b->kv_digest);

  // The oracle is exactly: f32 prefill in 16-token pages, one gather/scatter into f16 64-token pages,
  // decode there.
  const Request req = make_request(*r, text, &img);
  const uint32_t n = static_cast<uint32_t>(req.prompt.size());
  TestPool pre(cfg, pages_for(kv_layout_for(cfg, 1), n + 24));
  const auto pre_pages = iota_pages(pre.pool.layout.num_pages);
  const TokenId first = prefill(*r, pre.pool, pre_pages, req, 7);
  TestPool dec(cfg, pages_for(kv_layout_for(cfg, 1, DType::f16, KvDimOrder::token_head_dim, 64), n + 24),
               DType::f16, KvDimOrder::token_head_dim, 64);
  const auto dec_pages = iota_pages(dec.pool.layout.num_pages);
  std::vector<std::byte> buf(n * staging_token_bytes(pre.pool.layout));
  REQUIRE(gather_tokens(pre.pool, pre_pages, 0, n, buf.data()).ok());
  REQUIRE(scatter_tokens(dec.pool, dec_pages, 0, n, buf.data(), pre.pool.layout).ok());
  CHECK(decode(*r, dec.pool, dec_pages, n, first, 24) == a->tokens);
  CHECK(kv_digest(dec.pool, dec_pages) == a->kv_digest);

  opts.decode_kv = KvLayoutChoice{kMaxPageSize + 1, DType::f32, KvDimOrder::token_head_dim};
  CHECK_FALSE(generate(*r, text, &img, opts).ok());
  opts.decode_kv = KvLayoutChoice{0, static_cast<DType>(5), KvDimOrder::token_head_dim};
  CHECK_FALSE(generate(*r, text, &img, opts).ok());
}
