#pragma once
// What the Llama runner's tests share: a scratch directory, loading a checkpoint with a thread count, prompts
// of token ids, and one sequence's run (logits at every prompt position, greedy decode, KV digest).
#include <unistd.h>
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "epd/model/llama.hpp"
#include "helpers.hpp"

namespace epd::model::test {

struct TempDir {
  explicit TempDir(const std::string& prefix = "epd-llama-") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

inline std::unique_ptr<LlamaRunner> load(const std::string& path, uint32_t threads = 1) {
  auto cfg = read_checkpoint_config(path);
  REQUIRE(cfg.ok());
  cfg->threads = threads;
  auto r = make_llama_runner(*cfg);
  if (!r) FAIL(r.error().detail);
  return std::move(*r);
}

inline std::vector<TokenId> prompt_ids(size_t n, uint32_t vocab, uint32_t salt = 0) {
  std::vector<TokenId> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<TokenId>((i * 37 + salt * 11 + 5) % vocab);
  return p;
}

// Logits at every prompt position (prefill in chunks of `chunk`, 0 = one chunk) followed by `steps`
// greedy decode tokens, and the digest of the sequence's KV (in a pool of `kv_dtype`).
struct Run {
  std::vector<float> logits;
  std::vector<TokenId> tokens;
  uint64_t digest = 0;
};

inline Run run(LlamaRunner& r, const std::vector<TokenId>& prompt, uint32_t steps, uint32_t chunk = 0,
               DType kv_dtype = DType::f32) {
  const ModelConfig& cfg = r.config();
  TestPool pool(cfg, 16, kv_dtype);
  std::vector<PageId> pages(16);
  for (PageId i = 0; i < 16; ++i) pages[i] = i;
  Run out;
  r.keep_all_logits(true);
  const uint32_t n = static_cast<uint32_t>(prompt.size()), c = chunk ? chunk : n;
  TokenId next = 0;
  for (uint32_t b = 0; b < n; b += c) {
    const auto part = std::span(prompt).subspan(b, std::min(c, n - b));
    auto t = r.prefill_chunk(pool.pool, pages, b, PrefillChunk{part, {}});
    REQUIRE(t.ok());
    next = *t;
    out.logits.insert(out.logits.end(), r.last_logits().begin(), r.last_logits().end());
  }
  r.keep_all_logits(false);
  DecodeSeq seq{pages, n, next};
  out.tokens.push_back(next);
  for (uint32_t s = 0; s < steps; ++s) {
    TokenId t = 0;
    REQUIRE(r.decode_step(pool.pool, {&seq, 1}, {&t, 1}).ok());
    out.tokens.push_back(t);
    seq.length += 1;
    seq.last_token = t;
  }
  out.digest = kv_digest(pool.pool, std::span(pages).first(pages_for(pool.pool.layout, seq.length)));
  return out;
}

// Prefills each prompt into its own pages of one pool, then decodes all of them together for `steps`
// steps; returns each sequence's tokens (prefill's first) and leaves `seqs` at the final lengths.
inline std::vector<std::vector<TokenId>> decode_together(LlamaRunner& r, const KvPool& pool,
                                                         const std::vector<std::vector<PageId>>& pages,
                                                         const std::vector<std::vector<TokenId>>& prompts,
                                                         uint32_t steps, std::vector<DecodeSeq>& seqs) {
  const size_t n = prompts.size();
  std::vector<std::vector<TokenId>> got(n);
  seqs.clear();
  for (size_t s = 0; s < n; ++s) {
    auto t = r.prefill_chunk(pool, pages[s], 0, PrefillChunk{prompts[s], {}});
    REQUIRE(t.ok());
    got[s].push_back(*t);
    seqs.push_back(DecodeSeq{pages[s], static_cast<uint32_t>(prompts[s].size()), *t});
  }
  for (uint32_t step = 0; step < steps; ++step) {
    std::vector<TokenId> next(n);
    REQUIRE(r.decode_step(pool, seqs, next).ok());
    for (size_t s = 0; s < n; ++s) {
      got[s].push_back(next[s]);
      seqs[s].length += 1;
      seqs[s].last_token = next[s];
    }
  }
  return got;
}

}  // namespace epd::model::test
