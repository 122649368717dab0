#include <algorithm>
#include <random>

#include "helpers.hpp"

using namespace epd::model;
using namespace epd::model::test;

namespace {
const char* kText = "A cat sits on a mat; the quick brown fox jumps over the lazy dog. 0123456789!";
}

TEST_CASE("same config, seed and input give bitwise-identical KV and tokens", "[model][prefill]") {
  const Image img = make_test_image(32, 32, 3);
  std::vector<std::vector<std::byte>> kvs;
  std::vector<std::vector<TokenId>> outs;
  for (int run = 0; run < 2; ++run) {
    auto r = runner_for("tiny");  // a fresh runner: weights regenerated from the seed
    const Request req = make_request(*r, kText, &img);
    TestPool tp(r->config(), 8);
    const auto pages = iota_pages(8);
    const TokenId first = prefill(*r, tp.pool, pages, req);
    outs.push_back(decode(*r, tp.pool, pages, req.prompt.size(), first, 12));
    kvs.push_back(tp.logical(pages));
    CHECK(all_finite(tp, pages));
  }
  CHECK(outs[0] == outs[1]);
  CHECK(kvs[0] == kvs[1]);
}

TEST_CASE("chunked prefill (1, 7, 64, whole) is bitwise identical to one shot", "[model][prefill]") {
  auto r = runner_for("tiny");
  const Image img = make_test_image(40, 24, 7);  // 5 x 3 = 15 image tokens; chunks of 7 split them
  const Request req = make_request(*r, kText, &img);
  const uint32_t n = req.prompt.size();
  REQUIRE(n > 64);
  const auto pages = iota_pages(pages_for(kv_layout_for(r->config(), 1), n));

  TestPool ref(r->config(), pages.size());
  const TokenId first = prefill(*r, ref.pool, pages, req, 0);
  const auto ref_kv = ref.logical(pages);
  for (uint32_t chunk : {1u, 7u, 64u, n}) {
    INFO("chunk " << chunk);
    TestPool tp(r->config(), pages.size());
    CHECK(prefill(*r, tp.pool, pages, req, chunk) == first);
    CHECK(tp.logical(pages) == ref_kv);
  }
}

TEST_CASE("chunked prefill is bitwise identical on the bench preset too", "[model][prefill]") {
  auto r = runner_for("bench");
  const Request req = make_request(*r, "short bench prompt, chunked in 16s and 13s", nullptr);
  const auto pages = iota_pages(pages_for(kv_layout_for(r->config(), 1), req.prompt.size()));
  TestPool a(r->config(), pages.size()), b(r->config(), pages.size()), c(r->config(), pages.size());
  const TokenId t = prefill(*r, a.pool, pages, req);
  CHECK(prefill(*r, b.pool, pages, req, 16) == t);
  CHECK(prefill(*r, c.pool, pages, req, 13) == t);
  CHECK(a.logical(pages) == b.logical(pages));
  CHECK(a.logical(pages) == c.logical(pages));
}

TEST_CASE("pages placed in shuffled order give the same result as contiguous pages", "[model][prefill]") {
  auto r = runner_for("tiny");
  const Image img = make_test_image(32, 32, 4);
  const Request req = make_request(*r, kText, &img);
  const uint32_t need = pages_for(kv_layout_for(r->config(), 1), req.prompt.size() + 16);

  TestPool contiguous(r->config(), need);
  const auto cpages = iota_pages(need);
  const TokenId t0 = prefill(*r, contiguous.pool, cpages, req, 7);
  const auto tokens0 = decode(*r, contiguous.pool, cpages, req.prompt.size(), t0, 16);

  // A pool three times larger; the sequence gets a random subset of pages in random order.
  TestPool shuffled(r->config(), need * 3);
  auto all = iota_pages(need * 3);
  std::mt19937 rng(1234);
  std::shuffle(all.begin(), all.end(), rng);
  const std::vector<PageId> spages(all.begin(), all.begin() + need);
  REQUIRE_FALSE(std::is_sorted(spages.begin(), spages.end()));
  const TokenId t1 = prefill(*r, shuffled.pool, spages, req, 7);
  const auto tokens1 = decode(*r, shuffled.pool, spages, req.prompt.size(), t1, 16);

  CHECK(t0 == t1);
  CHECK(tokens0 == tokens1);
  CHECK(contiguous.logical(cpages) == shuffled.logical(spages));
}

TEST_CASE("other KV dtypes and orders: chunking stays bit-exact, f32 orders agree", "[model][prefill]") {
  auto r = runner_for("tiny");
  const Request req = make_request(*r, kText, nullptr);
  const auto pages = iota_pages(pages_for(kv_layout_for(r->config(), 1), req.prompt.size() + 8));
  std::vector<std::vector<TokenId>> f32_tokens;
  for (auto dt : {DType::f32, DType::f16, DType::bf16})
    for (auto order : {KvDimOrder::token_head_dim, KvDimOrder::head_token_dim}) {
      TestPool a(r->config(), pages.size(), dt, order), b(r->config(), pages.size(), dt, order);
      const TokenId t = prefill(*r, a.pool, pages, req);
      CHECK(prefill(*r, b.pool, pages, req, 5) == t);
      CHECK(a.logical(pages) == b.logical(pages));
      const auto toks = decode(*r, a.pool, pages, req.prompt.size(), t, 8);
      CHECK(toks.size() == 8);
      if (dt == DType::f32) f32_tokens.push_back(toks);
    }
  REQUIRE(f32_tokens.size() == 2);
  CHECK(f32_tokens[0] == f32_tokens[1]);  // same values, only placed differently
}

TEST_CASE("invalid prefill input is rejected before anything is written", "[model][prefill]") {
  auto r = runner_for("tiny");
  const Image img = make_test_image(16, 16, 1);
  const Request req = make_request(*r, "hello", &img);
  const auto chunk = slice_prompt(req.prompt, req.emb.data, r->config().d_model, 0, req.prompt.size());
  TestPool tp(r->config(), 4);
  const auto pages = iota_pages(4);

  CHECK_FALSE(r->prefill_chunk(tp.pool, std::span(pages).first(0), 0, chunk).ok());  // no pages
  const std::vector<PageId> outside{0, 9};
  CHECK_FALSE(r->prefill_chunk(tp.pool, outside, 10, chunk).ok());            // page 9 outside a 4-page pool
  CHECK_FALSE(r->prefill_chunk(tp.pool, pages, 0, {chunk.tokens, {}}).ok());  // embeddings missing
  const std::vector<TokenId> bad_tok{kBos, 300};
  CHECK_FALSE(r->prefill_chunk(tp.pool, pages, 0, {bad_tok, {}}).ok());
  CHECK_FALSE(r->prefill_chunk(tp.pool, pages, 0, {std::span<const TokenId>{}, {}}).ok());
  CHECK_FALSE(r->prefill_chunk(tp.pool, pages, r->config().max_seq - 2, chunk).ok());
  std::vector<float> nan_emb(req.emb.data);
  nan_emb[3] = NAN;
  CHECK_FALSE(r->prefill_chunk(tp.pool, pages, 0, {chunk.tokens, nan_emb}).ok());
  KvPool wrong = tp.pool;
  wrong.layout.head_dim = 8;
  CHECK_FALSE(r->prefill_chunk(wrong, pages, 0, chunk).ok());
  CHECK(tp.all_zero());
  CHECK(r->prefill_chunk(tp.pool, pages, 0, chunk).ok());
  CHECK_FALSE(tp.all_zero());
}
