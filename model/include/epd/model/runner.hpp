#pragma once
// The interface the roles call. Encoder: encode(). Prefill: prefill_chunk() per chunk. Decode: decode_step()
// over a batch. A sequence's entire state is (page table, length, last token), owned by the caller.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "epd/model/config.hpp"
#include "epd/model/image.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// Image embeddings: `tokens` rows of `dim` floats, contiguous (tokens * dim), ready to send as one buffer.
struct Embeddings {
  uint32_t tokens = 0;
  uint32_t dim = 0;
  std::vector<float> data;
};

// One prefill chunk: the tokens at positions [start, start + tokens.size()). Each kImage token takes the
// next row of `embeddings` (rows for exactly the kImage tokens of this chunk, in order).
struct PrefillChunk {
  std::span<const TokenId> tokens;
  std::span<const float> embeddings;
};

// The chunk [begin, end) of a full prompt, with the embedding rows of its image tokens.
PrefillChunk slice_prompt(std::span<const TokenId> prompt, std::span<const float> embeddings, uint32_t dim,
                          uint32_t begin, uint32_t end);

// One sequence in a decode step: feed `last_token` at position `length` (its K/V go to that slot) and
// predict the next token. Afterwards the caller sets length += 1, last_token = predicted.
struct DecodeSeq {
  std::span<const PageId> pages;  // logical page i -> page index in the pool
  uint32_t length = 0;            // tokens whose K/V are already in the pages
  TokenId last_token = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;

  // Image -> one embedding per patch (image_token_count rows of d_model).
  virtual protocol::Result<Embeddings> encode(const Image& image) = 0;

  // Runs one chunk, writing its K/V into `pages` at positions [start, start + n). Returns the greedy token
  // after the chunk's last position: after the last chunk that is the first generated token.
  // Validation happens before any write: on error the pool is untouched.
  virtual protocol::Result<TokenId> prefill_chunk(const KvPool& pool, std::span<const PageId> pages,
                                                  uint32_t start, const PrefillChunk& chunk) = 0;

  // One step for every sequence in `batch`; next[i] receives sequence i's token. Per-sequence results are
  // bit-identical to decoding it alone.
  virtual protocol::Status decode_step(const KvPool& pool, std::span<const DecodeSeq> batch,
                                       std::span<TokenId> next) = 0;
};

// The seeded reference transformer. Not thread-safe (scratch buffers): one runner per thread.
// Errors if the config does not validate.
protocol::Result<std::unique_ptr<ModelRunner>> make_reference_runner(const ModelConfig& cfg);

}  // namespace epd::model
