#pragma once
// The pieces of a decoder layer that both runners (the seeded reference model and the Llama-family runner)
// compute the same way: the RoPE table, rotating one row's Q/K and storing its K/V into its page, and causal
// attention of one KV head's query group over the paged cache. One implementation keeps their arithmetic
// (and so their bits, kernels.hpp) identical.
#include <cstdint>
#include <span>
#include <vector>

#include "decoder/decoder_arch.hpp"
#include "epd/model/config.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/positions.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model::detail {

// Where one LM input row goes: its sequence's page table and its KV slot `pos`, and where it rotates: its
// position, which is the slot but for M-RoPE (epd/model/positions.hpp).
struct RowTarget {
  RowTarget() = default;
  RowTarget(std::span<const PageId> pages_, uint32_t pos_)
      : pages(pages_), pos(pos_), rope{pos_, pos_, pos_, pos_} {}
  RowTarget(std::span<const PageId> pages_, uint32_t pos_, RopePosition rope_)
      : pages(pages_), pos(pos_), rope(rope_) {}
  std::span<const PageId> pages;
  uint32_t pos = 0;
  RopePosition rope;
};

// invalid_request unless the pages cover positions [0, end) and every page index is inside the pool.
protocol::Status check_pages(const KvLayout& layout, std::span<const PageId> pages, uint64_t end);

// cos/sin of every (position, pair) of one rotary embedding (RopeSpec) for max_seq positions; computed once
// in double and rounded to float, so only this table touches libm trigonometry.
class RopeTable {
 public:
  RopeTable(const RopeSpec& spec, uint32_t head_dim, uint32_t max_seq);
  const float* cos(uint32_t pos) const { return &cos_[size_t{pos} * half_]; }
  const float* sin(uint32_t pos) const { return &sin_[size_t{pos} * half_]; }
  uint32_t dims() const { return static_cast<uint32_t>(2 * half_); }

  // The angles of one row: the table's row of pos.t, or with M-RoPE sections each pair's from the
  // component of `pos` its section names, gathered into `scratch` (2 * dims() / 2 floats).
  struct Angles {
    const float *cos, *sin;
  };
  Angles angles(const RopePosition& pos, std::span<float> scratch) const;
  // Rotates the first dims() values of one head by a row's angles.
  void apply(float* head, const Angles& a) const;

 private:
  RopeStyle style_;
  size_t half_;
  std::vector<float> cos_, sin_;
  std::vector<uint8_t> component_;  // M-RoPE: per pair, which of (t, y, x, e) it turns by; empty: t
};

// Rotates the row's query heads (and scales them by q_scale) and its KV heads at the row's position, then
// stores K and V into the row's page of `layer`.
void rope_and_store(const ModelConfig& cfg, const RopeTable& rope, float q_scale, const KvView& kv,
                    uint32_t layer, const RowTarget& row, float* q, float* k, const float* v);

struct AttentionScratch {
  std::vector<float> scores, conv;
};

// Causal attention of KV head g's query group (heads / kv_heads query heads of `q`) over positions
// [0, row.pos], read from the pool; writes that group's heads of `out`.
void attend_group(const ModelConfig& cfg, const KvView& kv, uint32_t layer, const RowTarget& row, uint32_t g,
                  const float* q, float* out, AttentionScratch& scratch);

}  // namespace epd::model::detail
