#pragma once
// Where a prompt's rows sit for the rotary embedding of a model with M-RoPE (ModelConfig::mrope, Qwen2-VL).
// Elsewhere a row's position is its KV slot. Here, as llama.cpp places them (mtmd's image chunks):
//
// - a text row at slot s has position p = s - lag, where lag is what the images before it took in slots
//   beyond what they took in positions, and all four components (t, y, x, e) equal p;
// - the rows of an image of cols x rows (row by row) that starts where the position is p0 all have t = p0,
//   y = p0 + its row, x = p0 + its column, e = 0; the image advances the position by max(cols, rows), so it
//   adds cols * rows - max(cols, rows) to the lag.
//
// Positions never exceed slots, so the RoPE table's max_seq rows cover them; attention stays causal by slot
// (llama.cpp masks by t, then by (y, x) among an image's rows: the same order). Pure: no I/O.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// An image's rows as a grid: cols per row (mtmd's nx) by rows (ny).
struct ImageGrid {
  uint32_t cols = 0, rows = 0;
  bool operator==(const ImageGrid&) const = default;
};

struct RopePosition {
  uint32_t t = 0, y = 0, x = 0, e = 0;
  bool operator==(const RopePosition&) const = default;
};

class PromptPositions {
 public:
  PromptPositions() = default;  // no images: every position is its slot
  // `grids`: one per image of `prompt`, in order; image i is the next cols * rows rows of `image` tokens
  // (several images may follow each other in one run). invalid_request when the grids do not tile the
  // prompt's image rows exactly, or one is empty or absurd.
  static protocol::Result<PromptPositions> make(std::span<const TokenId> prompt, TokenId image,
                                                std::span<const ImageGrid> grids);

  // The position of the row at `slot` (any slot: past the last image every row is text).
  RopePosition at(uint32_t slot) const;
  // Whether `slot` holds an image row.
  bool is_image(uint32_t slot) const;
  // Slots minus positions after the last image: a text row after the prompt at slot s is at s - lag().
  uint32_t lag() const { return spans_.empty() ? 0 : spans_.back().lag_after(); }
  bool empty() const { return spans_.empty(); }

 private:
  struct Span {
    uint32_t begin, cols, rows, lag_before;
    uint32_t end() const { return begin + cols * rows; }
    uint32_t lag_after() const { return lag_before + cols * rows - std::max(cols, rows); }
  };
  const Span* span_of(uint32_t slot) const;  // the last image starting at or before slot, or null
  std::vector<Span> spans_;
};

}  // namespace epd::model
