#pragma once
// The interface the roles call. Encoder: encode(). Prefill: prefill_chunk() per chunk, or prefill_batch()
// for several rooms' chunks in one pass. Decode: decode_step() over a batch. A sequence's entire state is
// (page table, length, last token, sampling params, number of tokens generated), owned by the caller.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "epd/model/config.hpp"
#include "epd/model/image.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/media.hpp"
#include "epd/model/positions.hpp"
#include "epd/model/sampling.hpp"
#include "epd/model/token_constraint.hpp"
#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// Image embeddings: `tokens` rows of `dim` floats, contiguous (tokens * dim), ready to send as one buffer.
struct Embeddings {
  uint32_t tokens = 0;
  uint32_t dim = 0;
  std::vector<float> data;
};

// One prefill chunk: the tokens at positions [start, start + tokens.size()). Each image token (kImage, or a
// checkpoint's image_token()) takes the
// next row of `embeddings` (rows for exactly the kImage tokens of this chunk, in order). `sampling` picks the
// token after the chunk's last position as generated token number `generated` (only the last chunk's
// matters): 0, or for a resumed answer the count of tokens drawn before, which end the prompt.
struct PrefillChunk {
  PrefillChunk() = default;
  // Greedy callers name only tokens and embeddings (a constructor, so that stays free of missing-initializer
  // warnings).
  PrefillChunk(std::span<const TokenId> tokens_, std::span<const float> embeddings_,
               SamplingParams sampling_ = {})
      : tokens(tokens_), embeddings(embeddings_), sampling(sampling_) {}

  std::span<const TokenId> tokens;
  std::span<const float> embeddings;
  SamplingParams sampling;
  uint32_t generated = 0;  // the draw's index (sampling is a function of seed and index)
  // With a penalty (sampling.penalized()): the prompt's tokens up to the chunk's end, [0, start + size),
  // whose last `generated` are a resumed answer's (sample_token's history). Unread otherwise.
  std::span<const TokenId> history{};
  // With sampling.logprobs: receives the drawn token's log-probabilities (sample_token's). Unread otherwise.
  TokenLogprobs* logprobs = nullptr;
  // Set: masks the logits of the token after the chunk before the draw (a grammar). Not advanced here.
  TokenConstraint* constraint{};
  // An M-RoPE model's positions of the whole prompt (ModelConfig::mrope; its image rows need them); null:
  // each row's position is its slot.
  const PromptPositions* positions = nullptr;
};

// The chunk [begin, end) of a full prompt, with the embedding rows of its image tokens (greedy sampling:
// set `sampling` on the result).
// `image`: the prompt's image placeholder (image_token(), epd/model/mmproj.hpp).
PrefillChunk slice_prompt(std::span<const TokenId> prompt, std::span<const float> embeddings, uint32_t dim,
                          uint32_t begin, uint32_t end, TokenId image = kImage);

// One room's chunk in a batched prefill pass (ModelRunner::prefill_batch): its pages and the chunk's start.
struct PrefillPiece {
  std::span<const PageId> pages;
  uint32_t start = 0;
  PrefillChunk chunk;
};

// One sequence in a decode step: feed `last_token` at position `length` (its K/V go to that slot) and
// predict the next token, generated token number `generated` (the draw's index: prefill's token was 0, so
// the first decode step predicts 1). Afterwards the caller sets length += 1, generated += 1,
// last_token = predicted.
struct DecodeSeq {
  DecodeSeq() = default;
  // Greedy callers name only the first three (as PrefillChunk's).
  DecodeSeq(std::span<const PageId> pages_, uint32_t length_, TokenId last_token_,
            SamplingParams sampling_ = {}, uint32_t generated_ = 0)
      : pages(pages_), length(length_), last_token(last_token_), sampling(sampling_), generated(generated_) {}

  std::span<const PageId> pages;  // logical page i -> page index in the pool
  uint32_t length = 0;            // tokens whose K/V are already in the pages
  TokenId last_token = 0;
  SamplingParams sampling;
  uint32_t generated = 0;  // index of the token this step predicts (prefill's was 0: the first step is 1)
  // With a penalty (sampling.penalized()): the sequence's length + 1 tokens, the prompt then the answer
  // through last_token, whose last `generated` are the answer's (sample_token's history). Unread otherwise.
  std::span<const TokenId> history{};
  // Set: masks the logits before the draw (a grammar). Not advanced here: the caller accepts the token.
  TokenConstraint* constraint{};
  // M-RoPE: the token rotates at position length - position_lag (PromptPositions::lag() of its prompt).
  uint32_t position_lag = 0;
};

// A model's vision tower alone: what the encoder role runs. It holds none of the language model's weights.
class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;
  // Image -> one embedding row per image token (image_token_count rows of d_model for the reference model).
  virtual protocol::Result<Embeddings> encode(const Image& image) = 0;
  // An audio clip -> its chunks' rows, in order. Default: invalid_request (no audio tower).
  virtual protocol::Result<Embeddings> encode_audio(const Audio& audio);
  // Which tower this is, for cache keys: empty for the reference model's (its config says it all), the
  // mmproj file's identity for libmtmd's.
  virtual std::string tower() const { return {}; }
};

class ModelRunner;
// An item through the encoder's encode or encode_audio.
protocol::Result<Embeddings> encode_media(ImageEncoder& encoder, const Media& item);
protocol::Result<Embeddings> encode_media(ModelRunner& runner, const Media& item);

// The encoder of the model a config names: the reference model's vision encoder, or, for a checkpoint
// without a vision tower, one that refuses every image with a clear error (nothing of the checkpoint is
// loaded). Errors if the config does not validate.
protocol::Result<std::unique_ptr<ImageEncoder>> make_image_encoder(const ModelConfig& cfg);

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;

  // Image -> one embedding per patch (image_token_count rows of d_model).
  virtual protocol::Result<Embeddings> encode(const Image& image) = 0;
  // An audio clip -> its rows (ImageEncoder::encode_audio). Default: invalid_request (no audio tower).
  virtual protocol::Result<Embeddings> encode_audio(const Audio& audio);

  // Runs one chunk, writing its K/V into `pages` at positions [start, start + n). Returns the token after the
  // chunk's last position, sampled with chunk.sampling at index 0: after the last chunk that is the first
  // generated token. Validation (sampling params included) happens before any write: on error the pool is
  // untouched.
  virtual protocol::Result<TokenId> prefill_chunk(const KvPool& pool, std::span<const PageId> pages,
                                                  uint32_t start, const PrefillChunk& chunk) = 0;

  // Several rooms' chunks in one pass, each computed exactly as prefill_chunk computes it alone (the same
  // K/V bits and token) while each weight is read once for all of them. Result i is piece i's token or its
  // own error: a piece that fails validation, or writes a page another piece of the pass touches, is left
  // out (its pages untouched) and the others run. Default: prefill_chunk on each in turn.
  virtual std::vector<protocol::Result<TokenId>> prefill_batch(const KvPool& pool,
                                                               std::span<const PrefillPiece> pieces);

  // One step for every sequence in `batch`; next[i] receives sequence i's token, sampled with its own
  // params at index `generated`. Per-sequence results are bit-identical to decoding it alone. `logprobs`
  // (empty, or one per sequence): logprobs[i] receives sequence i's log-probabilities when its
  // sampling.logprobs is set.
  virtual protocol::Status decode_step(const KvPool& pool, std::span<const DecodeSeq> batch,
                                       std::span<TokenId> next, std::span<TokenLogprobs> logprobs = {}) = 0;
};

// The seeded reference transformer. Not thread-safe (scratch buffers): one runner per thread.
// Errors if the config does not validate.
protocol::Result<std::unique_ptr<ModelRunner>> make_reference_runner(const ModelConfig& cfg);

}  // namespace epd::model
