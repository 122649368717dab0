#pragma once
// Attention of the Llama runner over the paged KV cache, shaped for throughput where the reference model's
// attend_group (paged_attention.hpp) is shaped for one fixed order of operations everywhere:
// - a prompt chunk by blocks of rows, two sgemm calls each (scores, then weights x values);
// - a decode row by segments of kDecodeSegment positions (flash-decoding): each segment's scores for all the
//   query heads of a KV head at once, its softmax and its weighted values, then the segments combined in
//   order. Segments are fixed, so a row's bits depend neither on the thread count nor on the batch, and a
//   long sequence keeps every thread busy even at batch 1.
// Both read K/V back from the pool (what decode reads is what prefill wrote, in the pool's dtype).
#include <cstdint>
#include <span>
#include <vector>

#include "attention/paged_attention.hpp"
#include "epd/model/config.hpp"
#include "epd/model/kv_cache.hpp"

namespace epd::model::detail {

struct PromptAttentionScratch {
  std::vector<float> q, k, v, scores, out, conv;
};

// The first position a row at `pos` sees: 0, or with a sliding window of `window` positions (its own
// included; llama.cpp's LLAMA_SWA_TYPE_STANDARD) the window's first.
inline uint32_t first_visible(uint32_t pos, uint32_t window) {
  return window && pos + 1 > window ? pos + 1 - window : 0;
}

// Rows [r0, r1) of a prompt chunk whose first row sits at position `start`, for KV head g's query group,
// over positions [first_visible(row, window), row], or to sees_to[row] (a position of the chunk at or past
// the row's: Gemma 3's image rows see their whole image) when sees_to is set. q and out hold every row
// (strides in floats).
void attend_prompt_rows(const ModelConfig& cfg, const KvView& kv, uint32_t layer,
                        std::span<const PageId> pages, uint32_t start, size_t r0, size_t r1, uint32_t g,
                        uint32_t window, const float* q, size_t q_stride, float* out, size_t out_stride,
                        PromptAttentionScratch& scratch, const uint32_t* sees_to = nullptr);

inline constexpr uint32_t kDecodeSegment = 256;

// The fixed segments of a decode row at `pos`: segment s covers positions [s * kDecodeSegment, (s + 1) *
// kDecodeSegment) clipped to what the row sees; a sliding window skips the segments before it.
struct SegmentRange {
  uint32_t first, count;
};
inline SegmentRange decode_segments(uint32_t pos, uint32_t window) {
  const uint32_t first = first_visible(pos, window) / kDecodeSegment;
  return {first, pos / kDecodeSegment + 1 - first};
}

// One segment's share of a decode row's attention for KV head g: for each of the group's query heads j,
// the segment's maximum score, its sum of exp(score - max) and the values weighted by those exps.
struct DecodePartial {
  std::vector<float> max, sum, acc;  // group, group, group * head_dim
};
struct DecodeScratch {
  std::vector<float> scores, conv;
  std::vector<float> keys, values;  // an f16 / bf16 pool's segment as f32
};

// Positions [max(s * kDecodeSegment, first_visible), min(len, (s + 1) * kDecodeSegment)) of `row` (len =
// row.pos + 1); s is one of decode_segments(row.pos, window).
void attend_decode_segment(const ModelConfig& cfg, const KvView& kv, uint32_t layer, const RowTarget& row,
                           uint32_t g, uint32_t s, uint32_t window, const float* q, DecodePartial& out,
                           DecodeScratch& scratch);

// The group's heads of `out` from the row's segments, combined in segment order.
void combine_decode_segments(const ModelConfig& cfg, uint32_t g, std::span<const DecodePartial> segments,
                             float* out);

}  // namespace epd::model::detail
