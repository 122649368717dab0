#pragma once
// Which K/V bits a prompt's positions get, and so which of them a prefix cache may hand to another prompt.
//
// The reference model's K/V of a position do not depend on how the prompt was chunked (docs/model.md, "How
// determinism is guaranteed"). A checkpoint's do: ggml's batch kernels (the repacked GEMM four rows at a
// time, GEMV for the rest; tinyBLAS tiles) and the blocked attention's sgemm calls sum in an order that
// depends on how many rows the chunk has, and its decode kernels differ from its prompt kernels. So a
// checkpoint's answer equals the colocated run's (`epd-run --chunk C`) only if every position's K/V were
// computed as that run computes them: in the chunk [kC, (k+1)C) of the prompt (ending at the prompt's end),
// and an answer token's by a decode step. The grid says what that allows:
//
// - a prompt is computed in the chunks of the grid, from a start on the grid;
// - a cached K/V may serve another prompt only where it lies in a whole chunk of the grid (the last,
//   partial chunk ends where its prompt ends, which another prompt need not) and was computed as a prompt
//   (not by a decode step, unless the reader reads it as an answer too).
//
// Where an image's rows attend to each other both ways (ModelConfig::bidirectional_images, Gemma 3), a
// chunk never cuts a run of image rows: a chunk whose grid end falls inside one ends where the run ends,
// and the next chunk runs from there to the next grid line. A grid line inside a run is then no chunk
// boundary: no prompt starts there and nothing is shared up to there.
#include <cstdint>
#include <optional>
#include <span>

#include "epd/model/config.hpp"
#include "epd/model/runner.hpp"

namespace epd::model {

// True where chunking changes no bit (the reference model): any start, any chunk, any cached K/V serves.
bool chunking_exact(const ModelConfig& model);

class ChunkGrid {
 public:
  // `chunk_tokens`: prefill's chunk size; 0: the whole prompt in one chunk (no grid line inside a prompt).
  ChunkGrid(const ModelConfig& model, uint32_t chunk_tokens);

  bool exact() const { return exact_; }
  // The end of the chunk that starts at `begin` in a prompt of `n` tokens: the next grid line, or n.
  uint32_t chunk_end(uint32_t begin, uint32_t n) const;
  // What to compute next of `prompt` from `begin`, when its last `answer` tokens are a resumed answer's: a
  // chunk of the grid (not cutting a bidirectional image), or (on a model that is not exact) the answer's
  // tokens by decode steps, as decode computed them the first time.
  struct Piece {
    uint32_t begin = 0, end = 0;
    bool decode_steps = false;
  };
  Piece next_piece(uint32_t begin, std::span<const TokenId> prompt, uint32_t answer) const;
  // Of `prompt`, whose first `prompt_tokens` were computed as a prompt (the rest: a resumed answer's
  // tokens, computed by decode steps), the leading tokens whose K/V every prompt that starts with them
  // computes alike: all of them for an exact model, else the whole chunks of the prompt part that end on a
  // boundary.
  uint32_t shareable(std::span<const TokenId> prompt, uint32_t prompt_tokens) const;
  // Whether position `at` of `prompt` lies strictly inside a run of bidirectional image rows: no chunk
  // starts there.
  bool cuts_image(std::span<const TokenId> prompt, uint32_t at) const;
  // A room takes cached whole pages (of `page_size` tokens) and computes from there in runs of this many
  // pages, so that it starts on the grid: 1 for an exact model, 0 when no start but 0 is on it.
  uint32_t page_step(uint32_t page_size) const;

 private:
  bool exact_;
  uint32_t chunk_;                    // 0: whole prompts
  std::optional<TokenId> image_run_;  // bidirectional images: their rows' id
};

// The prefill chunk of `piece` (a chunk of the grid, not decode steps) of `prompt`: its tokens, its image
// rows of `embeddings`, draw.positions, and where the piece ends the prompt the rest of `draw` (sampling,
// index, history, constraint, logprobs).
PrefillChunk piece_chunk(const ModelConfig& cfg, const ChunkGrid::Piece& piece,
                         std::span<const TokenId> prompt, std::span<const float> embeddings,
                         const PrefillChunk& draw);

// Computes `piece` of `prompt` into `pages` (its image rows from `embeddings`). Returns the token after the
// piece, drawn as `draw` says (its sampling, index `generated`, constraint and logprobs) where the piece ends
// (and rotated at draw.positions throughout, for M-RoPE)
// the prompt; history and constraint are read only then.
protocol::Result<TokenId> compute_piece(ModelRunner& runner, const KvPool& pool,
                                        std::span<const PageId> pages, const ChunkGrid::Piece& piece,
                                        std::span<const TokenId> prompt, std::span<const float> embeddings,
                                        const PrefillChunk& draw);

}  // namespace epd::model
