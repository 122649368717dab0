// GGUF files in every tensor type epd runs, made by llama.cpp's own quantizer: each runs in place on ggml's
// CPU kernels and computes the model its quantized values define (against an f32 file holding exactly
// those values, dequantized by llama.cpp), and the runner's determinism holds for quantized weights too.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>

#include "epd/model/chunk_grid.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/quantize.hpp"
#include "helpers.hpp"
#include "llama_checkpoint.hpp"
#include "llama_run.hpp"

namespace {

namespace fs = std::filesystem;
using namespace epd::model;
using epd::model::testing::CheckpointSpec;
using epd::model::testing::write_llama_checkpoint;

using epd::model::test::load;
using epd::model::test::prompt_ids;
using epd::model::test::Run;
using epd::model::test::run;
using epd::model::test::TempDir;

// Row lengths that are whole k-quant super-blocks (256), as in Llama-3.2-1B's 2048.
CheckpointSpec kquant_spec(const std::string& file_type, bool dequantized = false) {
  CheckpointSpec s;
  s.d_model = 256;
  s.ffn = 512;
  s.heads = 4;
  s.kv_heads = 2;
  s.gguf_file_type = file_type;
  s.gguf_dequantized = dequantized;
  return s;
}

// max |a - b| / max |b| over all values.
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double top = 0, worst = 0;
  for (float v : b) top = std::max(top, double{std::fabs(v)});
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  return worst / top;
}

}  // namespace

TEST_CASE("ggml's CPU kernels load, for a variant this CPU runs") {
  auto v = ggml_cpu_variant();
  if (!v) FAIL(v.error().detail);
  INFO("variant " << *v);
  CHECK_FALSE(v->empty());
}

TEST_CASE("every tensor type runs in place and computes the model its quantized values define") {
  // The gap left is the activations' own rounding (to Q8_0/Q8_1/Q8_K, or f16/bf16), as in llama.cpp; this
  // random model's sharp attention (Q/K gain 2) amplifies it (measured: 2e-3 f16, 1.3e-2 bf16, 2.5-4.6e-2
  // for the 8- to 2-bit types, worst over 40 positions x 384 logits).
  const struct {
    const char* file_type;
    double tolerance;
    bool coarse;  // 4-6 bits a weight: quantizing moves the logits far more than the activations' rounding
  } cases[] = {{"f16", 3e-3, false},   {"bf16", 3e-2, false},  {"q8_0", 6e-2, false},  {"q4_0", 6e-2, true},
               {"q4_1", 6e-2, true},   {"q5_0", 6e-2, true},   {"q5_1", 6e-2, true},   {"q2_k", 6e-2, true},
               {"q3_k_m", 6e-2, true}, {"q4_k_m", 6e-2, true}, {"q5_k_m", 6e-2, true}, {"q6_k", 6e-2, true}};
  const auto prompt = prompt_ids(40, 384);
  TempDir odir;
  auto o = write_llama_checkpoint(kquant_spec("f32"), odir.path);
  REQUIRE(o.ok());
  const Run original = run(*load(o->gguf), prompt, 0);
  for (const auto& c : cases) {
    INFO("file type " << c.file_type);
    TempDir qdir, fdir;
    auto q = write_llama_checkpoint(kquant_spec(c.file_type), qdir.path);
    auto f = write_llama_checkpoint(kquant_spec(c.file_type, true), fdir.path);
    REQUIRE(q.ok());
    REQUIRE(f.ok());
    // In place: the quantized file is a fraction of the f32 one (norms stay f32).
    if (std::string(c.file_type) != "f16" && std::string(c.file_type) != "bf16")
      CHECK(fs::file_size(q->gguf) * 3 < fs::file_size(f->gguf));
    auto qr = load(q->gguf), fr = load(f->gguf);
    const Run got = run(*qr, prompt, 0), want = run(*fr, prompt, 0);
    const double gap = relative_gap(got.logits, want.logits);
    std::printf("%-7s max |logit - f32 of the same values| / max |logit| = %.2e\n", c.file_type, gap);
    CHECK(gap <= c.tolerance);
    // ... and it is that model, not the unquantized one: quantizing the weights moved the logits further.
    const double moved = relative_gap(got.logits, original.logits);
    std::printf("%-7s max |logit - unquantized f32| / max |logit| = %.2e\n", c.file_type, moved);
    if (c.coarse) CHECK(moved > 2 * gap);
  }
}

TEST_CASE("quantized weights keep the runner's determinism: threads and batches change no bit") {
  // A dense model, and a mixture of experts (8 experts, 2 per row): in a batch, rows choosing one expert
  // are multiplied together, and each must still get the bits it gets alone.
  auto moe = kquant_spec("q4_k_m");
  moe.arch = "qwen3moe";
  moe.expert_ffn = 256;
  for (const auto& spec : {kquant_spec("q4_k_m"), moe}) {
    DYNAMIC_SECTION(spec.arch) {
      TempDir dir;
      auto paths = write_llama_checkpoint(spec, dir.path);
      REQUIRE(paths.ok());
      auto one = load(paths->gguf, 1), two = load(paths->gguf, 2);
      // On x86 with AVX2, ggml repacks Q4_K (rows a multiple of 8) for its GEMM/GEMV: this covers those too,
      // and every expert's matrices are repacked (as rows of their 3-D tensor).
      INFO(one->kernels());
      CHECK(one->kernels().find("q4_K_8x") != std::string::npos);
      if (spec.arch == "qwen3moe") {
        const std::string k = one->kernels();
        const auto at = k.find(" of ");
        REQUIRE(at != std::string::npos);
        const auto repacked = std::stoul(k.substr(k.rfind(' ', at - 1) + 1));
        CHECK(repacked >= spec.layers * spec.experts * 3);
      }
      const auto prompt = prompt_ids(45, 384);
      // Threads take fixed blocks of output columns and every kernel computes an element the same way
      // wherever its block starts, so the thread count changes no bit, for one chunk or several.
      for (uint32_t chunk : {0u, 7u}) {
        INFO("chunk " << chunk);
        const Run a = run(*one, prompt, 12, chunk), b = run(*two, prompt, 12, chunk);
        CHECK(a.logits == b.logits);
        CHECK(a.tokens == b.tokens);
        CHECK(a.digest == b.digest);
      }
      // Another chunking moves rows between ggml's GEMM (four rows at a time) and GEMV, or between
      // llamafile's tiles and single dot products: the last bits may change, the model may not.
      const Run whole = run(*one, prompt, 12), chunked = run(*two, prompt, 12, 7);
      const double gap = relative_gap(whole.logits, chunked.logits);
      std::printf("q4_k_m one chunk vs chunks of 7: max |logit gap| / max |logit| = %.2e\n", gap);
      CHECK(gap < 1e-2);

      // Batched decode equals each sequence alone.
      constexpr uint32_t kSeqs = 4, kPages = 8, kSteps = 6;
      std::vector<Run> alone;
      for (uint32_t s = 0; s < kSeqs; ++s) alone.push_back(run(*one, prompt_ids(9 + 5 * s, 384, s), kSteps));
      epd::model::test::TestPool pool(two->config(), kSeqs * kPages);
      std::vector<std::vector<PageId>> pages(kSeqs);
      std::vector<std::vector<TokenId>> prompts;
      for (uint32_t s = 0; s < kSeqs; ++s) {
        for (uint32_t p = 0; p < kPages; ++p) pages[s].push_back(s * kPages + p);
        prompts.push_back(prompt_ids(9 + 5 * s, 384, s));
      }
      std::vector<DecodeSeq> seqs;
      const auto got = epd::model::test::decode_together(*two, pool.pool, pages, prompts, kSteps, seqs);
      for (uint32_t s = 0; s < kSeqs; ++s) {
        CHECK(got[s] == alone[s].tokens);
        CHECK(kv_digest(pool.pool, std::span(pages[s]).first(pages_for(pool.pool.layout, seqs[s].length))) ==
              alone[s].digest);
      }
    }
  }
}

// The grid a checkpoint's prompts are computed on (epd/model/chunk_grid.hpp): chunks end on multiples of
// chunk_tokens counted from position 0, caches serve whole chunks only, a resumed answer's tokens are
// replayed as decode steps. The reference model is exact: any start, any cached token.
TEST_CASE(
    "the chunk grid: where a checkpoint's prompt is cut, and which of its K/V other prompts may reuse") {
  ModelConfig reference;
  ModelConfig checkpoint;
  checkpoint.checkpoint = "model.gguf";
  const ChunkGrid exact(reference, 64), grid(checkpoint, 64), whole(checkpoint, 0);
  CHECK(chunking_exact(reference));
  CHECK_FALSE(chunking_exact(checkpoint));
  CHECK(grid.chunk_end(0, 150) == 64);
  CHECK(grid.chunk_end(80, 150) == 128);  // from a cached start: to the next grid line, not 80 + 64
  CHECK(grid.chunk_end(128, 150) == 150);
  CHECK(whole.chunk_end(0, 150) == 150);
  const auto tokens = [](uint32_t n) { return std::vector<TokenId>(n, 1); };
  CHECK(exact.shareable(tokens(150), 150) == 150);
  CHECK(grid.shareable(tokens(150), 150) == 128);  // the last chunk ends where this prompt ends
  CHECK(grid.shareable(tokens(150), 100) == 64);   // a resumed answer's 50 tokens are not a prompt's
  CHECK(grid.shareable(tokens(63), 63) == 0);
  CHECK(whole.shareable(tokens(150), 150) == 0);
  CHECK(exact.page_step(16) == 1);
  CHECK(grid.page_step(16) == 4);   // cached runs of 4 pages: 64 tokens
  CHECK(grid.page_step(48) == 4);   // lcm(64, 48) = 192
  CHECK(whole.page_step(16) == 0);  // nothing but position 0 is on the grid
  const auto piece = [&](const ChunkGrid& g, uint32_t begin, uint32_t n, uint32_t answer) {
    const auto p = g.next_piece(begin, tokens(n), answer);
    return std::tuple(p.begin, p.end, p.decode_steps);
  };
  CHECK(piece(grid, 0, 150, 20) == std::tuple(0u, 64u, false));
  CHECK(piece(grid, 128, 150, 20) == std::tuple(128u, 130u, false));  // the prompt part ends at 130
  CHECK(piece(grid, 130, 150, 20) == std::tuple(130u, 150u, true));   // the answer's 20 by decode steps
  CHECK(piece(exact, 128, 150, 20) == std::tuple(128u, 150u, false));
  CHECK(piece(grid, 0, 5, 9) == std::tuple(0u, 1u, false));  // at least one token is a prompt's

  // Gemma 3's images attend within themselves both ways: no chunk cuts one, nothing is shared up to the
  // middle of one. Text [0, 40), an image [40, 100), text [100, 150).
  ModelConfig gemma = checkpoint;
  gemma.mmproj = "mmproj.gguf";
  gemma.bidirectional_images = true;
  const ChunkGrid images(gemma, 64);
  std::vector<TokenId> prompt(150, 1);
  std::fill(prompt.begin() + 40, prompt.begin() + 100, *image_token(gemma));
  const auto cut = [&](uint32_t begin, uint32_t answer) {
    const auto p = images.next_piece(begin, prompt, answer);
    return std::pair(p.begin, p.end);
  };
  CHECK(cut(0, 0) == std::pair(0u, 100u));      // the grid line 64 is inside the image: to its end
  CHECK(cut(100, 0) == std::pair(100u, 128u));  // then to the next grid line
  CHECK(cut(128, 0) == std::pair(128u, 150u));
  CHECK(images.cuts_image(prompt, 64));
  CHECK_FALSE(images.cuts_image(prompt, 40));   // where the image starts
  CHECK_FALSE(images.cuts_image(prompt, 100));  // where it ends
  CHECK(images.shareable(prompt, 150) == 128);
  CHECK(images.shareable(prompt, 90) == 0);        // 64 is inside the image, 0 is the boundary before
  CHECK(grid.next_piece(0, prompt, 0).end == 64);  // without bidirectional images: the grid alone
}

// A router that resumes a room on another decode (docs/failure-handling.md) has prefill run prompt +
// the answer's first k tokens and draw token k. On a checkpoint, prefill's kernels give an answer token's
// K/V other bits than the decode step that computed it first, so those tokens are replayed as decode
// steps: the resumed answer is the rest of the first, every log-probability and the whole KV equal.
TEST_CASE("a Q4_K_M checkpoint's resumed answer is the rest of the first answer, bit for bit") {
  TempDir dir;
  auto paths = write_llama_checkpoint(kquant_spec("q4_k_m"), dir.path);
  REQUIRE(paths.ok());
  auto r = load(paths->gguf, 2);
  GenerateOptions o;
  o.max_tokens = 20;
  o.chunk = 64;
  o.stop_at_eos = false;
  o.sampling.logprobs = true;
  const auto prompt = prompt_ids(70, 384, 5);
  auto first = generate_tokens(*r, prompt, o);
  REQUIRE(first.ok());
  REQUIRE(first->tokens.size() == 20);
  for (uint32_t k : {1u, 6u, 19u}) {
    INFO("resumed after " << k << " tokens");
    auto resumed_prompt = prompt;
    resumed_prompt.insert(resumed_prompt.end(), first->tokens.begin(), first->tokens.begin() + k);
    GenerateOptions rest = o;
    rest.first_index = k;
    rest.max_tokens = 20 - k;
    auto resumed = generate_tokens(*r, resumed_prompt, rest);
    REQUIRE(resumed.ok());
    CHECK(resumed->tokens == std::vector<TokenId>(first->tokens.begin() + k, first->tokens.end()));
    CHECK(resumed->kv_digest == first->kv_digest);
    for (uint32_t i = 0; i < resumed->logprobs.size(); ++i)
      CHECK(resumed->logprobs[i].logprob == first->logprobs[k + i].logprob);
  }
}
