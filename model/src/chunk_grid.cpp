#include "epd/model/chunk_grid.hpp"

#include <algorithm>
#include <numeric>

#include "epd/model/mmproj.hpp"
#include "epd/model/tokens.hpp"

namespace epd::model {

// Only the seeded reference model runs on the fixed-order kernels; every checkpoint runs on ggml's.
bool chunking_exact(const ModelConfig& model) {
  return model.checkpoint.empty();
}

ChunkGrid::ChunkGrid(const ModelConfig& model, uint32_t chunk_tokens)
    : exact_(chunking_exact(model)),
      chunk_(chunk_tokens),
      image_run_(model.bidirectional_images ? image_token(model) : std::nullopt) {}

bool ChunkGrid::cuts_image(std::span<const TokenId> prompt, uint32_t at) const {
  return image_run_ && at > 0 && at < prompt.size() && prompt[at - 1] == *image_run_ &&
         prompt[at] == *image_run_;
}

uint32_t ChunkGrid::chunk_end(uint32_t begin, uint32_t n) const {
  if (chunk_ == 0) return n;
  return uint32_t(std::min<uint64_t>(n, (uint64_t(begin) / chunk_ + 1) * chunk_));
}

ChunkGrid::Piece ChunkGrid::next_piece(uint32_t begin, std::span<const TokenId> prompt,
                                       uint32_t answer) const {
  const uint32_t n = uint32_t(prompt.size());
  // A resumed answer's tokens are prompt tokens to an exact model; at least the first token is a prompt's.
  const uint32_t prompt_part = exact_ ? n : std::max<uint32_t>(1, n - std::min(n, answer));
  if (begin >= prompt_part) return {begin, n, true};
  uint32_t end = chunk_end(begin, prompt_part);
  while (cuts_image(prompt, end)) ++end;  // to the end of the image
  return {begin, end, false};
}

uint32_t ChunkGrid::shareable(std::span<const TokenId> prompt, uint32_t prompt_tokens) const {
  const uint32_t n = uint32_t(prompt.size());
  if (!exact_ && chunk_ == 0) return 0;
  // Every token of an exact model, else the prompt part's whole chunks; back to a boundary before an image.
  uint32_t s = exact_ ? n : std::min(n, prompt_tokens) / chunk_ * chunk_;
  while (s > 0 && cuts_image(prompt, s)) s -= exact_ ? 1 : chunk_;
  return s;
}

uint32_t ChunkGrid::page_step(uint32_t page_size) const {
  if (exact_) return 1;
  if (chunk_ == 0 || page_size == 0) return 0;
  const uint64_t step = std::lcm(uint64_t(chunk_), uint64_t(page_size)) / page_size;
  return step > UINT32_MAX ? 0 : uint32_t(step);
}

PrefillChunk piece_chunk(const ModelConfig& cfg, const ChunkGrid::Piece& piece,
                         std::span<const TokenId> prompt, std::span<const float> embeddings,
                         const PrefillChunk& draw) {
  PrefillChunk c = slice_prompt(prompt, embeddings, cfg.d_model, piece.begin, piece.end,
                                image_token(cfg).value_or(kImage));
  c.positions = draw.positions;
  if (piece.end == prompt.size()) {
    c.sampling = draw.sampling;
    c.generated = draw.generated;
    c.history = prompt.first(piece.end);
    c.logprobs = draw.logprobs;
    c.constraint = draw.constraint;
  }
  return c;
}

protocol::Result<TokenId> compute_piece(ModelRunner& runner, const KvPool& pool,
                                        std::span<const PageId> pages, const ChunkGrid::Piece& piece,
                                        std::span<const TokenId> prompt, std::span<const float> embeddings,
                                        const PrefillChunk& draw) {
  const uint32_t n = uint32_t(prompt.size());
  if (!piece.decode_steps)
    return runner.prefill_chunk(pool, pages, piece.begin,
                                piece_chunk(runner.config(), piece, prompt, embeddings, draw));
  // A resumed answer's tokens, one decode step each (greedy and unread until the last, which draws the
  // token after the prompt): their K/V get the bits decode gave them, whatever batch it ran them in.
  TokenId next = 0;
  for (uint32_t p = piece.begin; p < piece.end; ++p) {
    DecodeSeq seq{pages, p, prompt[p]};
    if (draw.positions) seq.position_lag = draw.positions->lag();  // answer tokens follow every image
    TokenLogprobs logprobs;
    if (p + 1 == n) {
      seq.sampling = draw.sampling;
      seq.generated = draw.generated;
      seq.history = prompt;
      seq.constraint = draw.constraint;
    }
    auto st = runner.decode_step(pool, {&seq, 1}, {&next, 1}, {&logprobs, 1});
    if (!st) return st.error();
    if (p + 1 == n && draw.logprobs && draw.sampling.logprobs) *draw.logprobs = std::move(logprobs);
  }
  return next;
}

}  // namespace epd::model
