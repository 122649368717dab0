// Batched prefill (ModelRunner::prefill_batch): several rooms' chunks in one pass give each room exactly
// the K/V bits, logits and token it gets from its chunk alone, for every kind of kernel a checkpoint's
// matrices take (ggml's repacked GEMM/GEMV, llamafile's tiles, OpenBLAS for f16/f32, experts grouped by
// row), for sliding windows, and for the reference model; and a piece that cannot run fails alone.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "epd/model/llama.hpp"
#include "helpers.hpp"
#include "llama_checkpoint.hpp"
#include "llama_run.hpp"

namespace {

using namespace epd::model;
using epd::model::test::load;
using epd::model::test::prompt_ids;
using epd::model::test::TempDir;
using epd::model::test::TestPool;
using epd::model::testing::CheckpointSpec;
using epd::model::testing::write_llama_checkpoint;

constexpr uint32_t kPagesPerRoom = 8;

// A room: its prompt, computed from `start` (the positions before it already computed alone), its next
// chunk's end, and its sampling.
struct Room {
  std::vector<TokenId> prompt;
  uint32_t start = 0, end = 0;
  SamplingParams sampling{};
};

// Rows of every size a matrix kernel treats its own way: one row (a decode-style attention), three (GEMV
// only), four and seven (one GEMM group, then GEMV), a long chunk past one attention block (64 rows), and
// one that starts after a computed prefix; one samples.
std::vector<Room> rooms(uint32_t vocab) {
  std::vector<Room> r = {{prompt_ids(1, vocab, 1), 0, 1},    {prompt_ids(3, vocab, 2), 0, 3},
                         {prompt_ids(7, vocab, 3), 0, 7},    {prompt_ids(70, vocab, 4), 0, 70},
                         {prompt_ids(30, vocab, 5), 11, 30}, {prompt_ids(4, vocab, 6), 0, 4}};
  r[2].sampling.temperature = 0.8f;
  r[2].sampling.seed = 42;
  return r;
}

struct Outcome {
  std::vector<TokenId> tokens;
  std::vector<std::vector<float>> logits;
  std::vector<uint64_t> digests;
};

// Every room's chunk [start, end), each alone or all in one pass, after its [0, start) alone; room i in
// pages [i * kPagesPerRoom, (i + 1) * kPagesPerRoom) of one pool.
Outcome prefill(ModelRunner& runner, LlamaRunner* llama, const std::vector<Room>& rs, bool together) {
  TestPool pool(runner.config(), uint32_t(rs.size()) * kPagesPerRoom);
  std::vector<std::vector<PageId>> pages(rs.size());
  std::vector<PrefillPiece> pieces;
  for (size_t i = 0; i < rs.size(); ++i) {
    for (uint32_t p = 0; p < kPagesPerRoom; ++p) pages[i].push_back(PageId(i * kPagesPerRoom + p));
    if (rs[i].start > 0)
      REQUIRE(runner.prefill_chunk(pool.pool, pages[i], 0, {std::span(rs[i].prompt).first(rs[i].start), {}}));
    PrefillChunk c{std::span(rs[i].prompt).subspan(rs[i].start, rs[i].end - rs[i].start), {}, rs[i].sampling};
    pieces.push_back({pages[i], rs[i].start, c});
  }
  Outcome out;
  const size_t vocab = runner.config().vocab;
  if (together) {
    const auto got = runner.prefill_batch(pool.pool, pieces);
    REQUIRE(got.size() == rs.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("room " << i);
      REQUIRE(got[i].ok());
      out.tokens.push_back(*got[i]);
      if (llama)
        out.logits.emplace_back(&llama->last_logits()[i * vocab], &llama->last_logits()[(i + 1) * vocab]);
    }
  } else {
    for (const PrefillPiece& p : pieces) {
      auto t = runner.prefill_chunk(pool.pool, p.pages, p.start, p.chunk);
      REQUIRE(t.ok());
      out.tokens.push_back(*t);
      if (llama) out.logits.emplace_back(llama->last_logits().begin(), llama->last_logits().end());
    }
  }
  for (size_t i = 0; i < rs.size(); ++i)
    out.digests.push_back(
        kv_digest(pool.pool, std::span(pages[i]).first(pages_for(pool.pool.layout, rs[i].end))));
  return out;
}

void check_same(ModelRunner& runner, LlamaRunner* llama, const std::vector<Room>& rs) {
  const Outcome alone = prefill(runner, llama, rs, false), together = prefill(runner, llama, rs, true);
  for (size_t i = 0; i < rs.size(); ++i) {
    INFO("room " << i << ", chunk [" << rs[i].start << ", " << rs[i].end << ")");
    CHECK(together.digests[i] == alone.digests[i]);
    CHECK(together.tokens[i] == alone.tokens[i]);
    if (llama) CHECK(together.logits[i] == alone.logits[i]);
  }
}

CheckpointSpec spec(const std::string& file_type, const std::string& arch = "llama") {
  CheckpointSpec s;
  s.d_model = 256;  // whole k-quant super-blocks
  s.ffn = 512;
  s.heads = 4;
  s.kv_heads = 2;
  s.gguf_file_type = file_type;
  s.arch = arch;
  s.write_hf = false;
  return s;
}

}  // namespace

TEST_CASE("a batched prefill pass gives every room the bits its chunk gets alone", "[model][prefill]") {
  auto moe = spec("q4_k_m", "qwen3moe");
  moe.expert_ffn = 256;
  auto gemma = spec("q8_0", "gemma3");
  gemma.sliding_window = 16;  // the 70-row chunk crosses it
  const CheckpointSpec specs[] = {spec("q4_k_m"), spec("q8_0"), spec("f16"), spec("f32"), moe, gemma};
  for (const CheckpointSpec& s : specs) {
    DYNAMIC_SECTION(s.arch << " " << s.gguf_file_type) {
      TempDir dir;
      auto paths = write_llama_checkpoint(s, dir.path);
      REQUIRE(paths.ok());
      auto runner = load(paths->gguf, 2);
      INFO(runner->kernels());
      check_same(*runner, runner.get(), rooms(s.vocab));
    }
  }
  SECTION("the reference model") {
    auto runner = make_runner(ModelConfig{});
    REQUIRE(runner.ok());
    check_same(**runner, nullptr, rooms((*runner)->config().vocab));
  }
}

TEST_CASE("a piece of a batched prefill that cannot run fails alone, and touches nothing",
          "[model][prefill]") {
  auto runner = make_runner(ModelConfig{});
  REQUIRE(runner.ok());
  ModelRunner& r = **runner;
  TestPool pool(r.config(), 3 * kPagesPerRoom);
  const uint32_t page = pool.pool.layout.page_size;
  std::vector<PageId> a, b, c;
  for (uint32_t p = 0; p < kPagesPerRoom; ++p) {
    a.push_back(p);
    b.push_back(kPagesPerRoom + p);
    c.push_back(2 * kPagesPerRoom + p);
  }
  const auto prompt = prompt_ids(5, r.config().vocab);
  std::vector<TokenId> bad = prompt;
  bad[2] = r.config().vocab + 7;
  // c writes page a[0], which a writes too; b's token is outside the vocabulary.
  std::vector<PageId> c_on_a = c;
  c_on_a[0] = a[0];
  const TestPool before = pool;
  const PrefillPiece pieces[] = {{a, 0, {prompt, {}}}, {b, 0, {bad, {}}}, {c_on_a, 0, {prompt, {}}}};
  const auto got = r.prefill_batch(pool.pool, pieces);
  REQUIRE(got.size() == 3);
  CHECK(got[0].ok());
  REQUIRE_FALSE(got[1].ok());
  CHECK(got[1].error().detail.find("outside vocab") != std::string::npos);
  REQUIRE_FALSE(got[2].ok());
  CHECK(got[2].error().detail.find("share page " + std::to_string(a[0])) != std::string::npos);
  CHECK(pool.logical(b) == before.logical(b));
  CHECK(pool.logical(std::span(c).subspan(1)) == before.logical(std::span(c).subspan(1)));
  // Reading a page another piece reads is fine: two rooms on one cached prefix.
  const uint32_t prefix = page;
  const auto more = prompt_ids(prefix + 3, r.config().vocab);
  REQUIRE(r.prefill_chunk(pool.pool, a, 0, {std::span(more).first(prefix), {}}));
  std::vector<PageId> a2 = b;
  a2[0] = a[0];
  const auto tail = std::span(more).subspan(prefix);
  const PrefillPiece shared[] = {{a, prefix, {tail, {}}}, {a2, prefix, {tail, {}}}};
  const auto two = r.prefill_batch(pool.pool, shared);
  CHECK(two[0].ok());
  CHECK(two[1].ok());
}
