#include <algorithm>
#include <set>

#include "helpers.hpp"

using namespace epd::model;
using namespace epd::model::test;

namespace {

struct Seq {
  Request req;
  std::vector<PageId> pages;
  uint32_t join_step;  // decode step at which it enters the batch
  uint32_t count;      // tokens to generate, including the prefill's
};

}  // namespace

TEST_CASE("decoding in a batch gives each sequence the tokens it gets alone", "[model][decode]") {
  auto r = runner_for("tiny");
  const Image img1 = make_test_image(24, 16, 1), img2 = make_test_image(32, 32, 2);
  const char* texts[] = {"first sequence", "second, a bit longer sequence of text", "3", "fourth",
                         "the fifth one joins late"};
  const Image* imgs[] = {&img1, nullptr, &img2, nullptr, &img1};
  const uint32_t joins[] = {0, 0, 3, 5, 9};
  const uint32_t counts[] = {20, 6, 14, 20, 8};  // the second leaves early; others join later

  const uint32_t pages_each = 8;
  std::vector<Seq> seqs;
  for (int i = 0; i < 5; ++i) {
    Seq s{make_request(*r, texts[i], imgs[i]), iota_pages(pages_each, i * pages_each), joins[i], counts[i]};
    REQUIRE(s.req.prompt.size() + s.count <= pages_each * r->config().page_size);
    seqs.push_back(std::move(s));
  }

  // Alone: each sequence in its own pool.
  std::vector<std::vector<TokenId>> alone;
  std::vector<std::vector<std::byte>> alone_kv;
  for (const Seq& s : seqs) {
    TestPool tp(r->config(), 5 * pages_each);
    const TokenId t = prefill(*r, tp.pool, s.pages, s.req);
    alone.push_back(decode(*r, tp.pool, s.pages, s.req.prompt.size(), t, s.count));
    alone_kv.push_back(tp.logical(s.pages));
  }

  // Batched: one shared pool, sequences join and leave between steps, batch order varies.
  TestPool shared(r->config(), 5 * pages_each);
  std::vector<DecodeSeq> state(5);
  std::vector<std::vector<TokenId>> got(5);
  size_t max_batch = 0;
  for (uint32_t step = 0; step < 40; ++step) {
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].join_step == step) {
        const TokenId t = prefill(*r, shared.pool, seqs[i].pages, seqs[i].req, 7);
        state[i] = DecodeSeq{seqs[i].pages, static_cast<uint32_t>(seqs[i].req.prompt.size()), t};
        got[i].push_back(t);
      }
    std::vector<size_t> active;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (!got[i].empty() && got[i].size() < seqs[i].count) active.push_back(i);
    if (step % 2) std::reverse(active.begin(), active.end());
    if (active.empty()) continue;
    max_batch = std::max(max_batch, active.size());
    std::vector<DecodeSeq> batch;
    for (size_t i : active) batch.push_back(state[i]);
    std::vector<TokenId> next(batch.size());
    REQUIRE(r->decode_step(shared.pool, batch, next).ok());
    for (size_t j = 0; j < active.size(); ++j) {
      DecodeSeq& s = state[active[j]];
      s.length++;
      s.last_token = next[j];
      got[active[j]].push_back(next[j]);
    }
  }
  CHECK(max_batch >= 4);
  for (size_t i = 0; i < seqs.size(); ++i) {
    INFO("sequence " << i);
    CHECK(got[i] == alone[i]);
    CHECK(shared.logical(seqs[i].pages) == alone_kv[i]);
  }
}

TEST_CASE("one flipped bit in one KV page changes the generated tokens", "[model][decode]") {
  auto r = runner_for("tiny");
  const Request req = make_request(*r, "Flip one bit in the cache and the answer must change.", nullptr);
  const auto pages = iota_pages(6);
  TestPool tp(r->config(), 6);
  const TokenId first = prefill(*r, tp.pool, pages, req);
  TestPool flipped = tp;

  // Layer 1, K pool, logical page 1 (positions 16..31), slot 5 (position 21), kv head 0, dim 0:
  // flip the sign bit, a mild change of a single key element.
  const KvLayout& l = flipped.pool.layout;
  std::byte* elem = flipped.pool.base + l.page_offset(1, 0, pages[1]) + (5 * l.kv_heads + 0) * l.head_dim * 4;
  uint32_t bits;
  std::memcpy(&bits, elem, 4);
  bits ^= 1u << 31;
  std::memcpy(elem, &bits, 4);

  const auto a = decode(*r, tp.pool, pages, req.prompt.size(), first, 16);
  const auto b = decode(*r, flipped.pool, pages, req.prompt.size(), first, 16);
  CHECK(a != b);
  CHECK(all_finite(flipped, pages));
}

TEST_CASE("a missing or foreign KV page changes the generated tokens", "[model][decode]") {
  auto r = runner_for("tiny");
  const Request req = make_request(*r, "Pages must hold this sequence's own keys and values!", nullptr);
  const Request other = make_request(*r, "A different prompt, written into pages six to eleven", nullptr);
  TestPool tp(r->config(), 12);
  const auto pages = iota_pages(6), other_pages = iota_pages(6, 6);
  const TokenId first = prefill(*r, tp.pool, pages, req);
  prefill(*r, tp.pool, other_pages, other);
  const auto ref = decode(*r, TestPool(tp).pool, pages, req.prompt.size(), first, 12);

  SECTION("a page that never arrived (zeros)") {
    TestPool torn = tp;
    const KvLayout& l = torn.pool.layout;
    for (uint32_t layer = 0; layer < l.layers; ++layer)
      for (uint32_t kind = 0; kind < 2; ++kind)
        std::memset(torn.pool.base + l.page_offset(layer, kind, pages[1]), 0, l.page_bytes());
    CHECK(decode(*r, torn.pool, pages, req.prompt.size(), first, 12) != ref);
  }
  SECTION("a page table entry pointing at another sequence's page") {
    TestPool copy = tp;
    auto wrong = pages;
    wrong[1] = other_pages[1];
    CHECK(decode(*r, copy.pool, wrong, req.prompt.size(), first, 12) != ref);
  }
}

TEST_CASE("the image changes the output", "[model][decode]") {
  auto r = runner_for("tiny");
  const Image img_a = make_test_image(32, 32, 1), img_b = make_test_image(32, 32, 2);
  std::vector<std::vector<TokenId>> outs;
  for (const Image* img : {&img_a, &img_b, static_cast<const Image*>(nullptr)}) {
    const Request req = make_request(*r, "What is in the picture?", img);
    TestPool tp(r->config(), 8);
    const auto pages = iota_pages(8);
    outs.push_back(decode(*r, tp.pool, pages, req.prompt.size(), prefill(*r, tp.pool, pages, req), 16));
  }
  CHECK(outs[0] != outs[1]);
  CHECK(outs[0] != outs[2]);
  CHECK(outs[1] != outs[2]);

  auto e1 = r->encode(img_a), e2 = r->encode(img_b);
  REQUIRE(e1.ok());
  REQUIRE(e2.ok());
  CHECK(e1->tokens == 16);
  CHECK(e1->dim == r->config().d_model);
  CHECK(e1->data.size() == 16u * r->config().d_model);
  CHECK(e1->data != e2->data);
}

TEST_CASE("different prompts give different, non-constant outputs", "[model][decode]") {
  for (const char* name : {"tiny", "bench"}) {
    auto r = runner_for(name);
    std::set<std::vector<TokenId>> distinct;
    for (const char* text : {"Hello, world.", "The quick brown fox", "abc", "Once upon a time"}) {
      const Request req = make_request(*r, text, nullptr);
      TestPool tp(r->config(), 4);
      const auto pages = iota_pages(4);
      const auto out = decode(*r, tp.pool, pages, req.prompt.size(), prefill(*r, tp.pool, pages, req), 16);
      INFO(name << ": " << text);
      CHECK(std::set<TokenId>(out.begin(), out.end()).size() >= 4);
      for (TokenId t : out) CHECK((t < 256 || t == kEos));
      distinct.insert(out);
    }
    CHECK(distinct.size() == 4);
  }
}

TEST_CASE("extreme inputs give finite KV and valid tokens", "[model][decode]") {
  auto r = runner_for("tiny");
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(static_cast<char>(255 - i));
  Image black{32, 32, std::vector<uint8_t>(32 * 32 * 3, 0)},
      white{32, 32, std::vector<uint8_t>(32 * 32 * 3, 255)};
  Image odd = make_test_image(63, 1, 3);  // 8 x 1 patches, mostly padding
  struct Case {
    std::string text;
    const Image* img;
  } cases[] = {
      {all_bytes, &black}, {std::string(300, '\xff'), &white}, {"", &odd}, {std::string(300, '\0'), nullptr}};
  for (const Case& c : cases) {
    const Request req = make_request(*r, c.text, c.img);
    TestPool tp(r->config(), 32);
    const auto pages = iota_pages(32);
    const auto out = decode(*r, tp.pool, pages, req.prompt.size(), prefill(*r, tp.pool, pages, req, 64), 8);
    CHECK(all_finite(tp, pages));
    for (TokenId t : out) CHECK((t < 256 || t == kEos));
  }
}

TEST_CASE("invalid decode input is rejected", "[model][decode]") {
  auto r = runner_for("tiny");
  TestPool tp(r->config(), 2);
  const auto pages = iota_pages(2);
  TokenId out[2];
  DecodeSeq s{pages, 10, 'a'};
  CHECK(r->decode_step(tp.pool, {&s, 1}, out).ok());
  DecodeSeq image_tok{pages, 10, kImage};
  CHECK_FALSE(r->decode_step(tp.pool, {&image_tok, 1}, out).ok());
  DecodeSeq full{pages, 32, 'a'};  // needs a third page
  CHECK_FALSE(r->decode_step(tp.pool, {&full, 1}, out).ok());
  DecodeSeq too_long{pages, r->config().max_seq, 'a'};
  CHECK_FALSE(r->decode_step(tp.pool, {&too_long, 1}, out).ok());
  DecodeSeq two[2] = {s, s};
  CHECK_FALSE(r->decode_step(tp.pool, two, std::span(out, 1)).ok());  // output too small
}
