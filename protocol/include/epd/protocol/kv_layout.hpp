#pragma once
// How a KV cache sits in memory. Prefill and decode exchange it in HELLO and must agree on it (or stage
// between two layouts). Pools are laid out per layer, K pool then V pool:
//   offset(layer, kind, page) = ((layer * 2 + kind) * num_pages + page) * page_bytes()
// and inside a page the element order is given by `order`.
#include <cstdint>

namespace epd::protocol {

enum class DType : uint8_t { f32 = 0, f16 = 1, bf16 = 2 };
constexpr bool wire_enum_valid(DType, uint64_t raw) {
  return raw <= 2;
}
constexpr uint32_t dtype_size(DType t) {
  return t == DType::f32 ? 4 : 2;
}

enum class KvDimOrder : uint8_t {
  token_head_dim = 0,  // [token][kv_head][head_dim] inside a page
  head_token_dim = 1,  // [kv_head][token][head_dim] inside a page
};
constexpr bool wire_enum_valid(KvDimOrder, uint64_t raw) {
  return raw <= 1;
}

// Nested in HELLO and PEERS.
struct KvLayout {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t page_size = 0;  // tokens per page
  uint32_t num_pages = 0;  // pages per pool
  DType dtype = DType::f32;
  KvDimOrder order = KvDimOrder::token_head_dim;

  // Bytes of one page of one pool (one layer, K or V).
  uint64_t page_bytes() const { return uint64_t{page_size} * kv_heads * head_dim * dtype_size(dtype); }
  uint64_t pool_bytes() const { return page_bytes() * num_pages; }
  uint64_t total_bytes() const { return pool_bytes() * layers * 2; }
  uint64_t page_offset(uint32_t layer, uint32_t kind, uint32_t page) const {
    return ((uint64_t{layer} * 2 + kind) * num_pages + page) * page_bytes();
  }
  // Same element placement (so a page can be copied byte for byte); num_pages may differ.
  bool same_page_format(const KvLayout& o) const {
    return layers == o.layers && kv_heads == o.kv_heads && head_dim == o.head_dim &&
           page_size == o.page_size && dtype == o.dtype && order == o.order;
  }
  bool operator==(const KvLayout&) const = default;

  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("layers", s.layers);
    v.req("kv_heads", s.kv_heads);
    v.req("head_dim", s.head_dim);
    v.req("page_size", s.page_size);
    v.req("num_pages", s.num_pages);
    v.req("dtype", s.dtype);
    v.req("order", s.order);
  }
};

}  // namespace epd::protocol
