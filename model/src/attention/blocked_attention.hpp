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

// Rows [r0, r1) of a prompt chunk whose first row sits at position `start`, for KV head g's query group,
// over positions [0, start + r1). q and out hold every row (strides in floats).
void attend_prompt_rows(const ModelConfig& cfg, const KvView& kv, uint32_t layer,
                        std::span<const PageId> pages, uint32_t start, size_t r0, size_t r1, uint32_t g,
                        const float* q, size_t q_stride, float* out, size_t out_stride,
                        PromptAttentionScratch& scratch);

inline constexpr uint32_t kDecodeSegment = 256;

inline uint32_t decode_segments(uint32_t positions) {
  return (positions + kDecodeSegment - 1) / kDecodeSegment;
}

// One segment's share of a decode row's attention for KV head g: for each of the group's query heads j,
// the segment's maximum score, its sum of exp(score - max) and the values weighted by those exps.
struct DecodePartial {
  std::vector<float> max, sum, acc;  // group, group, group * head_dim
};
struct DecodeScratch {
  std::vector<float> scores, conv;
};

// Positions [s * kDecodeSegment, min(len, (s + 1) * kDecodeSegment)) of `row` (len = row.pos + 1).
void attend_decode_segment(const ModelConfig& cfg, const KvView& kv, uint32_t layer, const RowTarget& row,
                           uint32_t g, uint32_t s, const float* q, DecodePartial& out,
                           DecodeScratch& scratch);

// The group's heads of `out` from the row's segments, combined in segment order.
void combine_decode_segments(const ModelConfig& cfg, uint32_t g, std::span<const DecodePartial> segments,
                             float* out);

}  // namespace epd::model::detail
