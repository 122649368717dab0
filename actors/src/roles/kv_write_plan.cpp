#include "roles/kv_write_plan.hpp"

#include <cassert>

namespace epd::actors {

std::vector<transport::WriteOp> plan_kv_writes(const KvSide& src, const KvSide& dst, uint32_t first,
                                               uint32_t end, uint32_t last_tokens, uint32_t held_tokens) {
  assert(src.layout.same_page_format(dst.layout));
  assert(first <= end && end <= src.pages.size() && end <= dst.pages.size());
  std::vector<transport::WriteOp> ops;
  const uint64_t page_bytes = src.layout.page_bytes();
  const auto& l = src.layout;
  const bool token_major = l.order == protocol::KvDimOrder::token_head_dim;
  const uint64_t token_bytes = uint64_t(l.kv_heads) * l.head_dim * protocol::dtype_size(l.dtype);
  const uint64_t unused = token_major && last_tokens > 0 && last_tokens < l.page_size
                              ? (l.page_size - last_tokens) * token_bytes
                              : 0;
  // Tokens held at the start of the first page; none if that page is also the last and they would reach
  // past its last token (nothing to write then, and the caller does not ask).
  const uint64_t held = token_major && first < end && held_tokens > 0 && held_tokens < l.page_size &&
                                (end - first > 1 || last_tokens == 0 || held_tokens < last_tokens)
                            ? held_tokens * token_bytes
                            : 0;
  for (uint32_t layer = 0; layer < src.layout.layers; ++layer) {
    for (uint32_t kind = 0; kind < 2; ++kind) {
      uint32_t p = first;
      while (p < end) {
        uint32_t q = p + 1;
        while (q < end && src.pages[q] == src.pages[q - 1] + 1 && dst.pages[q] == dst.pages[q - 1] + 1) ++q;
        const uint64_t skip = p == first ? held : 0;
        ops.push_back({src.base + src.layout.page_offset(layer, kind, src.pages[p]) + skip,
                       dst.base + dst.layout.page_offset(layer, kind, dst.pages[p]) + skip,
                       (q - p) * page_bytes - (q == end ? unused : 0) - skip});
        p = q;
      }
    }
  }
  return ops;
}

}  // namespace epd::actors
