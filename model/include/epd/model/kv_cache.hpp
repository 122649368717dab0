#pragma once
// The paged KV cache lives in memory the caller owns (later: a transfer-engine region). The model only
// sees a base pointer plus protocol::KvLayout, and a page table per sequence. Nothing about a sequence is
// kept model-side, so a sequence whose pages were written by another process decodes like a local one.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "epd/model/config.hpp"
#include "epd/protocol/kv_layout.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

using PageId = uint32_t;
using protocol::DType;
using protocol::KvDimOrder;
using protocol::KvLayout;

// Page size is a property of the pool: prefill and decode may page the same model differently (any size in
// 1..kMaxPageSize, model/config.hpp).

// The layout this model needs for `num_pages` pages per pool; page_size 0 = cfg.page_size.
KvLayout kv_layout_for(const ModelConfig& cfg, uint32_t num_pages, DType dtype = DType::f32,
                       KvDimOrder order = KvDimOrder::token_head_dim, uint32_t page_size = 0);

// Names as used in config files and CLI flags: "f32" "f16" "bf16", "token_head_dim" "head_token_dim".
protocol::Result<DType> parse_dtype(std::string_view name);
protocol::Result<KvDimOrder> parse_dim_order(std::string_view name);
std::string_view dtype_name(DType t);
std::string_view dim_order_name(KvDimOrder o);

struct KvPool {
  std::byte* base = nullptr;  // layout.total_bytes() bytes, aligned to the element size
  KvLayout layout;
};

// Layout matches the model's shape (layers/kv_heads/head_dim; any page size in 1..kMaxPageSize), the base
// is aligned and non-null.
protocol::Status check_pool(const ModelConfig& cfg, const KvPool& pool);

// Pages needed to hold `tokens` tokens.
inline uint32_t pages_for(const KvLayout& l, uint64_t tokens) {
  return static_cast<uint32_t>((tokens + l.page_size - 1) / l.page_size);
}

// Element access inside one pool for any dtype/order. f32 reads return a pointer into the pool itself.
class KvView {
 public:
  explicit KvView(const KvPool& pool) : base_(pool.base), l_(pool.layout) {}

  // Stores one token's vectors for all kv heads (kv_heads * head_dim floats, head-major).
  void store(uint32_t layer, uint32_t kind, PageId page, uint32_t slot, const float* src) const;
  // One head's vector (head_dim floats). `scratch` (head_dim floats) is used when a conversion is needed.
  const float* load(uint32_t layer, uint32_t kind, PageId page, uint32_t slot, uint32_t head,
                    float* scratch) const {
    if (l_.dtype == DType::f32)
      return reinterpret_cast<const float*>(base_ + l_.page_offset(layer, kind, page)) +
             elem_index(slot, head);
    return load_converted(layer, kind, page, slot, head, scratch);
  }
  const KvLayout& layout() const { return l_; }
  // First byte of one head's vector (head_dim elements of the pool's dtype); no conversion, no checks.
  std::byte* raw(uint32_t layer, uint32_t kind, PageId page, uint32_t slot, uint32_t head) const {
    return base_ + l_.page_offset(layer, kind, page) +
           elem_index(slot, head) * protocol::dtype_size(l_.dtype);
  }

 private:
  const float* load_converted(uint32_t layer, uint32_t kind, PageId page, uint32_t slot, uint32_t head,
                              float* scratch) const;
  uint64_t elem_index(uint32_t slot, uint32_t head) const {
    return l_.order == KvDimOrder::token_head_dim ? (uint64_t{slot} * l_.kv_heads + head) * l_.head_dim
                                                  : (uint64_t{head} * l_.page_size + slot) * l_.head_dim;
  }
  std::byte* base_;
  KvLayout l_;
};

// Bit-exact conversions (round to nearest even), also used by later layout-staging code.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

// `rows` vectors of `n` elements each, `stride` elements apart in `src`, converted exactly to f32 into `dst`
// (rows * n floats, row after row), with the best conversion instructions this CPU has. Attention reads an
// f16 or bf16 pool this way, a page's run of positions per call.
void f16_rows_to_f32(const uint16_t* src, size_t stride, size_t rows, size_t n, float* dst);
void bf16_rows_to_f32(const uint16_t* src, size_t stride, size_t rows, size_t n, float* dst);

// XXH64 over the sequence's pages in logical order (layer, K then V, page-table order): the fingerprint
// tests and roles compare to prove two KV copies are identical.
uint64_t kv_digest(const KvPool& pool, std::span<const PageId> pages);

}  // namespace epd::model
