#pragma once
// Shared test fixtures: a zeroed KV pool, chunked prefill and greedy decode loops, logical KV bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "epd/model/runner.hpp"

namespace epd::model::test {

inline std::unique_ptr<ModelRunner> runner_for(const char* preset_name) {
  auto cfg = preset(preset_name);
  REQUIRE(cfg.ok());
  auto r = make_reference_runner(*cfg);
  REQUIRE(r.ok());
  return std::move(*r);
}

struct TestPool {
  TestPool(const ModelConfig& cfg, uint32_t num_pages, DType dt = DType::f32,
           KvDimOrder order = KvDimOrder::token_head_dim, uint32_t page_size = 0) {
    pool.layout = kv_layout_for(cfg, num_pages, dt, order, page_size);
    words.assign((pool.layout.total_bytes() + 7) / 8, 0);
    pool.base = reinterpret_cast<std::byte*>(words.data());
  }
  TestPool(const TestPool& o) : words(o.words), pool(o.pool) {
    pool.base = reinterpret_cast<std::byte*>(words.data());
  }
  TestPool& operator=(const TestPool&) = delete;

  // The sequence's pages in logical order (layer, K then V, page-table order).
  std::vector<std::byte> logical(std::span<const PageId> pages) const {
    std::vector<std::byte> out;
    const KvLayout& l = pool.layout;
    for (uint32_t layer = 0; layer < l.layers; ++layer)
      for (uint32_t kind = 0; kind < 2; ++kind)
        for (PageId p : pages) {
          const std::byte* src = pool.base + l.page_offset(layer, kind, p);
          out.insert(out.end(), src, src + l.page_bytes());
        }
    return out;
  }
  bool all_zero() const {
    return std::all_of(words.begin(), words.end(), [](uint64_t w) { return w == 0; });
  }
  std::vector<uint64_t> words;
  KvPool pool;
};

inline std::vector<PageId> iota_pages(uint32_t n, PageId first = 0) {
  std::vector<PageId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

struct Request {
  std::vector<TokenId> prompt;
  Embeddings emb;
};

inline Request make_request(ModelRunner& r, std::string_view text, const Image* img) {
  Request req;
  if (img) {
    auto e = r.encode(*img);
    REQUIRE(e.ok());
    req.emb = std::move(*e);
  }
  auto p = build_prompt(r.config(), text,
                        img ? std::optional<MediaDims>({img->width, img->height}) : std::nullopt);
  REQUIRE(p.ok());
  req.prompt = std::move(*p);
  return req;
}

// Prefill in chunks of `chunk` (0 = whole); returns the first generated token.
inline TokenId prefill(ModelRunner& r, const KvPool& pool, std::span<const PageId> pages, const Request& req,
                       uint32_t chunk = 0) {
  const uint32_t n = static_cast<uint32_t>(req.prompt.size());
  if (chunk == 0) chunk = n;
  TokenId tok = 0;
  for (uint32_t b = 0; b < n; b += chunk) {
    const uint32_t e = std::min(n, b + chunk);
    auto t =
        r.prefill_chunk(pool, pages, b, slice_prompt(req.prompt, req.emb.data, r.config().d_model, b, e));
    REQUIRE(t.ok());
    tok = *t;
  }
  return tok;
}

// `count` tokens starting with `first` (the prefill's token), decoding alone.
inline std::vector<TokenId> decode(ModelRunner& r, const KvPool& pool, std::span<const PageId> pages,
                                   uint32_t length, TokenId first, uint32_t count) {
  std::vector<TokenId> out{first};
  DecodeSeq s{pages, length, first};
  while (out.size() < count) {
    TokenId next = 0;
    REQUIRE(r.decode_step(pool, {&s, 1}, {&next, 1}).ok());
    s.length++;
    s.last_token = next;
    out.push_back(next);
  }
  return out;
}

inline bool all_finite(const TestPool& tp, std::span<const PageId> pages) {
  REQUIRE(tp.pool.layout.dtype == DType::f32);
  const auto bytes = tp.logical(pages);
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    float f;
    std::memcpy(&f, &bytes[i], 4);
    if (!std::isfinite(f)) return false;
  }
  return true;
}

}  // namespace epd::model::test
