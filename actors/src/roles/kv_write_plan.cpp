#include "roles/kv_write_plan.hpp"

#include <cassert>

namespace epd::actors {

std::vector<transport::WriteOp> plan_kv_writes(const KvSide& src, const KvSide& dst, uint32_t first,
                                               uint32_t end, uint32_t last_tokens) {
  assert(src.layout.same_page_format(dst.layout));
  assert(first <= end && end <= src.pages.size() && end <= dst.pages.size());
  std::vector<transport::WriteOp> ops;
  const uint64_t page_bytes = src.layout.page_bytes();
  const auto& l = src.layout;
  const uint64_t unused =
      last_tokens > 0 && last_tokens < l.page_size && l.order == protocol::KvDimOrder::token_head_dim
          ? uint64_t(l.page_size - last_tokens) * l.kv_heads * l.head_dim * protocol::dtype_size(l.dtype)
          : 0;
  for (uint32_t layer = 0; layer < src.layout.layers; ++layer) {
    for (uint32_t kind = 0; kind < 2; ++kind) {
      uint32_t p = first;
      while (p < end) {
        uint32_t q = p + 1;
        while (q < end && src.pages[q] == src.pages[q - 1] + 1 && dst.pages[q] == dst.pages[q - 1] + 1) ++q;
        ops.push_back({src.base + src.layout.page_offset(layer, kind, src.pages[p]),
                       dst.base + dst.layout.page_offset(layer, kind, dst.pages[p]),
                       (q - p) * page_bytes - (q == end ? unused : 0)});
        p = q;
      }
    }
  }
  return ops;
}

}  // namespace epd::actors
